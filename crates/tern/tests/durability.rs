//! Durability: what is committed survives reopening; damage is reported, never skipped; I/O
//! errors never turn into acknowledged commits.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tern::fs::FaultFs;
use tern::{Db, Durability, Error, Options, TxnOptions, WalConfig};

fn options() -> Options {
    Options::default()
}

fn small_files() -> Options {
    Options { wal: WalConfig { file_bytes: 8 << 10, checkpoint_bytes: 64 << 10, ..WalConfig::default() }, ..options() }
}

fn put(db: &Db, key: &[u8], value: &[u8]) {
    let mut t = db.begin().unwrap();
    t.put(key, value).unwrap();
    t.commit().unwrap();
}

fn get(db: &Db, key: &[u8]) -> Option<Vec<u8>> {
    db.begin_read().unwrap().get(key).unwrap()
}

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    v.sort();
    v
}

#[test]
fn a_second_open_of_an_open_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    put(&db, b"k", b"v");
    let err = Db::open(dir.path(), options()).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    assert!(err.to_string().contains("locked"), "{err}");
    let err = tern::recovery::check(dir.path()).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    drop(db);
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"v"[..]));
}

#[test]
fn the_log_alone_recovers_everything_committed() {
    let dir = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), options()).unwrap();
        let users = db.create_table("users").unwrap();
        let mut t = db.begin().unwrap();
        t.put(b"a", b"1").unwrap();
        t.put_in(&users, b"alice", b"admin").unwrap();
        t.commit().unwrap();
        let mut t = db.begin().unwrap();
        t.delete(b"a").unwrap();
        t.put(b"b", b"3").unwrap();
        t.commit().unwrap();
        let mut t = db.begin().unwrap();
        t.put(b"zombie", b"x").unwrap();
        t.abort();
        // What is on disk now is what a crash would leave: copy it while the database is open.
        copy_files(dir.path(), copy.path());
    }
    let db = Db::open(copy.path(), options()).unwrap();
    let stats = db.stats().recovery.unwrap();
    assert_eq!(stats.checkpoint, None);
    assert_eq!(stats.records_replayed, 3, "{stats:?}");
    assert_eq!(get(&db, b"a"), None);
    assert_eq!(get(&db, b"b").as_deref(), Some(&b"3"[..]));
    assert_eq!(get(&db, b"zombie"), None);
    let users = db.table("users").unwrap();
    assert_eq!(db.begin_read().unwrap().get_in(&users, b"alice").unwrap().as_deref(), Some(&b"admin"[..]));
    // New commits go on from there, and survive a clean close (checkpoint) too.
    put(&db, b"c", b"4");
    db.close().unwrap();
    let db = Db::open(copy.path(), options()).unwrap();
    let stats = db.stats().recovery.unwrap();
    assert!(stats.checkpoint.is_some(), "a clean close checkpoints: {stats:?}");
    assert_eq!(stats.records_replayed, 0);
    assert_eq!(get(&db, b"c").as_deref(), Some(&b"4"[..]));
    assert_eq!(get(&db, b"b").as_deref(), Some(&b"3"[..]));
    assert_eq!(db.table_names(), vec![String::new(), "users".to_string()]);
}

#[test]
fn checkpoints_run_beside_writers_and_the_log_is_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    {
        let db = Db::open(dir.path(), small_files()).unwrap();
        for i in 0..3000u32 {
            let (k, v) = (format!("key{:05}", i % 1000), format!("value{i}"));
            put(&db, k.as_bytes(), v.as_bytes());
            model.insert(k, v);
            if i == 1500 {
                let info = db.checkpoint().unwrap().expect("something was logged");
                assert!(info.pages > 0 && info.pages_written > 0);
                assert_eq!(db.stats().checkpoints.last_bytes, info.bytes, "the stats report each checkpoint's bytes");
            }
        }
        let stats = db.stats();
        let wal = stats.wal.unwrap();
        assert!(wal.files_created > 5, "small log files rotate: {wal:?}");
        assert!(wal.files_removed > 0, "checkpoints remove covered log files: {wal:?}");
        assert!(stats.checkpoints.written >= 2, "automatic checkpoints by log size: {:?}", stats.checkpoints);
        // Crash now (no close): the newest checkpoint plus the log after it must be enough.
        std::mem::forget(db);
    }
    let logs = files(dir.path(), "wal-");
    assert!(logs.len() < 10, "old log files are gone: {logs:?}");
    assert_eq!(files(dir.path(), "checkpoint-").len(), 1, "one checkpoint is kept");
    // The forgotten handle holds the lock: copy the directory to reopen it.
    let copy = copy_dir(dir.path());
    let db = Db::open(copy.path(), small_files()).unwrap();
    let got: BTreeMap<String, String> = db
        .begin_read()
        .unwrap()
        .range(..)
        .unwrap()
        .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
        .collect();
    assert_eq!(got, model);
}

#[test]
fn a_clean_close_leaves_no_covered_log_and_the_next_open_reads_none() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    for i in 0..2000u32 {
        put(&db, format!("k{i:05}").as_bytes(), &[i as u8; 100]);
    }
    db.close().unwrap();
    // The close checkpointed; the log moved on to a new file at the checkpoint's position and
    // the file holding the covered records went.
    let logs = files(dir.path(), "wal-");
    assert_eq!(logs.len(), 1, "{logs:?}");
    let header_only = std::fs::metadata(&logs[0]).unwrap().len();
    assert!(header_only <= 64, "the log after a clean close holds no record: {header_only} bytes");
    let db = Db::open(dir.path(), options()).unwrap();
    let r = db.stats().recovery.unwrap();
    assert_eq!((r.records_replayed, r.bytes_replayed), (0, 0), "{r}");
    assert_eq!(get(&db, b"k01999"), Some(vec![1999u32 as u8; 100]));
    db.close().unwrap();
    assert_eq!(files(dir.path(), "wal-").len(), 1, "each clean close leaves one empty log file");
    assert_eq!(files(dir.path(), "pages").len(), 1, "the page file holds the database");
}

#[test]
fn a_log_file_the_checkpoint_covers_is_not_read_at_open_and_goes() {
    // A crash between a checkpoint's rename and the removal of the log it covers leaves such a
    // file. Recovery needs none of its records: it does not read them (so damage in them does
    // not matter) and the open deletes the file.
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    for i in 0..500u32 {
        put(&db, format!("k{i:04}").as_bytes(), &[i as u8; 40]);
    }
    let covered = newest_log(dir.path());
    let mut kept = std::fs::read(&covered).unwrap();
    // As the log leaves a file the next one follows: without its preallocated zeros.
    kept.truncate(records_len(&kept));
    db.checkpoint().unwrap().expect("something was logged");
    put(&db, b"after", b"the checkpoint");
    std::mem::forget(db);
    let copy = copy_dir(dir.path());
    let mut bytes = kept;
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    std::fs::write(copy.path().join(covered.file_name().unwrap()), bytes).unwrap();
    let report = tern::recovery::check(copy.path()).unwrap();
    assert_eq!(report.log_files.len(), 2, "{report:?}");
    let db = Db::open(copy.path(), options()).unwrap();
    assert_eq!(get(&db, b"k0499"), Some(vec![499u32 as u8; 40]));
    assert_eq!(get(&db, b"after"), Some(b"the checkpoint".to_vec()));
    assert!(!copy.path().join(covered.file_name().unwrap()).exists(), "the covered file is removed at open");
    db.close().unwrap();
    tern::recovery::check(copy.path()).unwrap();
}

/// The length of a log file's bytes without the zeros at its end (the newest file is
/// preallocated ahead of its records: `wal` invariant 7).
fn records_len(bytes: &[u8]) -> usize {
    let nonzero = bytes.len() - bytes.iter().rev().take_while(|&&b| b == 0).count();
    // Records are padded to 8 bytes (`wal/record.rs`), the 32-byte header too.
    nonzero.next_multiple_of(8).min(bytes.len())
}

/// The newest log file.
fn newest_log(dir: &Path) -> PathBuf {
    files(dir, "wal-").pop().unwrap()
}

fn committed_then_crashed(dir: &Path, n: u32) {
    let db = Db::open(dir, options()).unwrap();
    for i in 0..n {
        put(&db, format!("k{i:04}").as_bytes(), &[i as u8; 40]);
    }
    // Drop without a checkpoint: simulate by leaking, then release the lock by reopening in a
    // copy. Simpler: close normally would checkpoint, so leak.
    std::mem::forget(db);
}

/// Copies a database's files (what a crash would leave), not its lock.
fn copy_files(from: &Path, to: &Path) {
    for f in std::fs::read_dir(from).unwrap() {
        let f = f.unwrap();
        if f.file_name() != "LOCK" {
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
    }
}

fn copy_dir(from: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    copy_files(from, copy.path());
    copy
}

#[test]
fn a_torn_final_record_is_cut_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    committed_then_crashed(dir.path(), 20);
    // (The last record's one byte of padding is not part of it: cut at least two bytes.)
    for cut in [2usize, 9, 30, 55] {
        let copy = copy_dir(dir.path());
        let log = newest_log(copy.path());
        let len = records_len(&std::fs::read(&log).unwrap()) as u64;
        let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        f.set_len(len - cut as u64).unwrap();
        drop(f);
        let db = Db::open(copy.path(), options()).unwrap();
        let stats = db.stats().recovery.unwrap();
        let torn = stats.torn_tail.clone().expect("the torn record is reported");
        assert!(torn.bytes > 0 && torn.bytes < 80, "{torn:?}");
        assert_eq!(stats.records_replayed, 19, "{stats}");
        assert_eq!(get(&db, b"k0018").as_deref(), Some(&[18u8; 40][..]));
        assert_eq!(get(&db, b"k0019"), None, "the torn commit is not there, in part or whole");
        // The tail was cut: new commits land after the good records and survive.
        put(&db, b"after", b"x");
        drop(db);
        let db = Db::open(copy.path(), options()).unwrap();
        assert_eq!(get(&db, b"after").as_deref(), Some(&b"x"[..]));
        assert_eq!(get(&db, b"k0018").as_deref(), Some(&[18u8; 40][..]));
    }
    // Zeros after the last record (the newest file's preallocated end, or a file system that
    // extended the file but lost the data) are the end of the log: no record began there.
    let copy = copy_dir(dir.path());
    let log = newest_log(copy.path());
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.truncate(records_len(&bytes));
    let records_end = bytes.len() as u64;
    bytes.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&log, bytes).unwrap();
    let db = Db::open(copy.path(), options()).unwrap();
    let stats = db.stats().recovery.unwrap();
    assert_eq!(stats.torn_tail, None, "{stats}");
    assert_eq!(stats.records_replayed, 20, "{stats}");
    assert_eq!(get(&db, b"k0019").as_deref(), Some(&[19u8; 40][..]));
    assert_eq!(std::fs::metadata(&log).unwrap().len(), records_end, "the zeros were cut at the open");
}

#[test]
fn a_flipped_bit_in_the_middle_of_the_log_fails_open_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    committed_then_crashed(dir.path(), 20);
    let copy = copy_dir(dir.path());
    let log = newest_log(copy.path());
    let mut bytes = std::fs::read(&log).unwrap();
    let at = records_len(&bytes) / 2;
    bytes[at] ^= 0x10;
    std::fs::write(&log, bytes).unwrap();
    let err = Db::open(copy.path(), options()).unwrap_err();
    let Error::Corruption { file, offset, reason } = &err else { panic!("{err}") };
    assert_eq!(file, log.file_name().unwrap().to_str().unwrap());
    assert!(*offset as usize <= at && at - (*offset as usize) < 80, "offset {offset} for a flip at {at}");
    assert!(reason.contains("valid record follows"), "{reason}");
    // `check` reports the same without changing anything.
    let err = tern::recovery::check(copy.path()).unwrap_err();
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
}

#[test]
fn a_flipped_bit_in_the_checkpoint_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), options()).unwrap();
        for i in 0..500u32 {
            put(&db, &i.to_be_bytes(), &[7; 100]);
        }
        db.close().unwrap();
    }
    let ckpt = files(dir.path(), "checkpoint-").pop().unwrap();
    let clean = std::fs::read(&ckpt).unwrap();
    for at in [3, 40, clean.len() / 2, clean.len() - 5] {
        let mut bytes = clean.clone();
        bytes[at] ^= 0x01;
        std::fs::write(&ckpt, &bytes).unwrap();
        let err = Db::open(dir.path(), options()).unwrap_err();
        let Error::Corruption { file, .. } = &err else { panic!("flip at {at}: {err}") };
        assert_eq!(file, ckpt.file_name().unwrap().to_str().unwrap());
    }
    std::fs::write(&ckpt, &clean[..clean.len() - 20]).unwrap();
    let err = Db::open(dir.path(), options()).unwrap_err();
    assert!(matches!(err, Error::Corruption { .. }), "a short checkpoint is corrupt: {err}");
    std::fs::write(&ckpt, &clean).unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(db.begin_read().unwrap().range(..).unwrap().count(), 500);
}

fn faulty(dir: &Path, options: Options) -> (Db, FaultFs) {
    let fs = FaultFs::new();
    let db = Db::open_with_fs(dir, options, Arc::new(fs.clone())).unwrap();
    (db, fs)
}

#[test]
fn a_failed_fsync_is_never_acknowledged_and_the_database_turns_read_only() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (db, fs) = faulty(dir.path(), options());
        put(&db, b"before", b"1");
        fs.faults.fail_syncs.store(true, Relaxed);
        let mut t = db.begin().unwrap();
        t.put(b"during", b"2").unwrap();
        let err = t.commit().unwrap_err();
        assert!(matches!(err, Error::CommitNotDurable { .. }), "{err}");
        assert!(err.to_string().contains("injected EIO"), "{err}");
        // The fault goes away, but a failed fsync is never retried: still read-only.
        fs.faults.fail_syncs.store(false, Relaxed);
        let mut t = db.begin().unwrap();
        let err = t.put(b"after", b"3").unwrap_err();
        assert!(matches!(err, Error::ReadOnly { .. }), "{err}");
        drop(t);
        assert!(db.stats().wal.unwrap().failed.is_some());
        // Reads go on.
        assert_eq!(get(&db, b"before").as_deref(), Some(&b"1"[..]));
        assert!(matches!(db.close(), Err(Error::ReadOnly { .. })));
    }
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(get(&db, b"before").as_deref(), Some(&b"1"[..]));
    assert_eq!(get(&db, b"after"), None);
    put(&db, b"after", b"3");
}

#[test]
fn write_errors_and_a_full_disk_fail_the_commit_not_the_data() {
    for fault in ["eio", "full"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let (db, fs) = faulty(dir.path(), options());
            put(&db, b"before", b"1");
            match fault {
                "eio" => fs.faults.fail_writes.store(true, Relaxed),
                _ => fs.faults.space_left.store(10, Relaxed),
            }
            let mut t = db.begin().unwrap();
            t.put(b"during", &[5; 100]).unwrap();
            let err = t.commit().unwrap_err();
            assert!(matches!(err, Error::CommitNotDurable { .. }), "{fault}: {err}");
            if fault == "full" {
                assert!(err.to_string().contains("No space left"), "{err}");
            }
            let mut t = db.begin().unwrap();
            assert!(matches!(t.put(b"x", b"y"), Err(Error::ReadOnly { .. })));
        }
        let db = Db::open(dir.path(), options()).unwrap();
        assert_eq!(get(&db, b"before").as_deref(), Some(&b"1"[..]), "{fault}");
        assert_eq!(get(&db, b"during"), None, "{fault}: a partly written record is a torn tail");
    }
}

#[test]
fn short_writes_are_finished_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (db, fs) = faulty(dir.path(), small_files());
        fs.faults.short_writes.store(true, Relaxed);
        for i in 0..300u32 {
            put(&db, &i.to_be_bytes(), &[i as u8; 64]);
        }
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(db.begin_read().unwrap().range(..).unwrap().count(), 300);
}

#[test]
fn durability_modes_and_group_commit() {
    for mode in [Durability::Sync, Durability::NoSync, Durability::Periodic(std::time::Duration::from_millis(5))] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options { wal: WalConfig { durability: mode, ..WalConfig::default() }, ..options() };
        {
            let db = Db::open(dir.path(), opts).unwrap();
            std::thread::scope(|s| {
                for t in 0..8u32 {
                    let db = &db;
                    s.spawn(move || {
                        for i in 0..50u32 {
                            put(db, format!("{t}/{i}").as_bytes(), b"v");
                        }
                    });
                }
            });
            let wal = db.stats().wal.unwrap();
            assert_eq!(wal.records, 400, "{mode:?}: {wal:?}");
            match mode {
                Durability::Sync => {
                    assert!(wal.syncs >= 1 && wal.syncs <= 400, "{wal:?}");
                    assert_eq!(wal.group_sizes.iter().sum::<u64>(), wal.flushes);
                }
                // Written to the OS, by a leader's `write` or (mapped log files, the default)
                // copied into the file's pages by each committer.
                Durability::NoSync => assert_eq!(wal.records_written, 400, "{wal:?}"),
                Durability::Periodic(_) => {}
            }
            // A transaction may ask for more than the database's default.
            let mut t =
                db.begin_with(TxnOptions { durability: Some(Durability::Sync), ..TxnOptions::default() }).unwrap();
            t.put(b"synced", b"1").unwrap();
            t.commit().unwrap();
            assert!(db.stats().wal.unwrap().syncs >= 1);
            std::mem::forget(db);
        }
        let copy = copy_dir(dir.path());
        let db = Db::open(copy.path(), opts).unwrap();
        assert_eq!(get(&db, b"synced").as_deref(), Some(&b"1"[..]), "{mode:?}");
        // Every mode: the last transaction's sync covered everything appended before it, so a
        // copy made now (the handle was leaked: no close) has all 401 keys.
        let n = db.begin_read().unwrap().range(..).unwrap().count();
        assert_eq!(n, 401, "{mode:?}");
    }
}

/// Group commit under load, with and without chained flushes, on both kinds of log: 16
/// threads of `Sync` commits (every other thread also committing `NoSync` ones in between) all
/// return, every record is in the log, and a copy of the files taken afterwards (what the OS
/// holds: written, not necessarily synced) opens with every commit. A stress test: lost
/// wake-ups are the loom models' job (`wal/group.rs`; the log's periodic flush would rescue a
/// stranded sleeper here).
#[test]
fn group_commit_chained_or_not_returns_every_committer_durable() {
    for (chain_flushes, mapped) in [(0, true), (8, true), (0, false), (8, false)] {
        let dir = tempfile::tempdir().unwrap();
        let wal = WalConfig { durability: Durability::Sync, chain_flushes, mapped, ..WalConfig::default() };
        let opts = Options { wal, ..options() };
        let db = Db::open(dir.path(), opts).unwrap();
        std::thread::scope(|s| {
            for t in 0..16u32 {
                let db = &db;
                s.spawn(move || {
                    for i in 0..60u32 {
                        let nosync = t % 2 == 1 && i % 3 == 0;
                        let durability = Some(if nosync { Durability::NoSync } else { Durability::Sync });
                        let mut txn = db.begin_with(TxnOptions { durability, ..TxnOptions::default() }).unwrap();
                        txn.put(format!("{t:02}/{i:02}").as_bytes(), b"v").unwrap();
                        txn.commit().unwrap();
                    }
                });
            }
        });
        let stats = db.stats().wal.unwrap();
        assert_eq!(stats.records, 16 * 60, "chain {chain_flushes}, mapped {mapped}: {stats:?}");
        // 800 `Sync` commits (8 threads of 60, 8 of 40): fewer syncs means some flush covered
        // several of them.
        assert!(stats.syncs >= 1 && stats.syncs < 800, "grouped: {stats:?}");
        let copy = copy_dir(dir.path());
        std::mem::forget(db);
        let db = Db::open(copy.path(), opts).unwrap();
        let n = db.begin_read().unwrap().range(..).unwrap().count();
        // The last commit of every thread synced (i = 59 is never a NoSync one), covering
        // everything appended before it.
        assert_eq!(n, 16 * 60, "chain {chain_flushes}, mapped {mapped}");
    }
}

/// Both ways of writing the log (`WalConfig::mapped`): small files rotate, a commit larger than
/// a file gets a file of its own (records never span files), files left behind end with their
/// last record, a crash copy and a clean reopen hold every commit; a mapped log's `NoSync`
/// commits need no flush.
#[test]
fn mapped_and_written_logs_rotate_hold_a_commit_larger_than_a_file_and_recover() {
    for mapped in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let wal = WalConfig { durability: Durability::NoSync, file_bytes: 8 << 10, mapped, ..WalConfig::default() };
        let opts = Options { wal, ..options() };
        let big = vec![7u8; 100 << 10];
        let db = Db::open(dir.path(), opts).unwrap();
        for i in 0..300u32 {
            put(&db, format!("k{i:04}").as_bytes(), &[i as u8; 40]);
            if i == 150 {
                put(&db, b"big", &big);
            }
        }
        let stats = db.stats().wal.unwrap();
        assert_eq!(stats.records_written, 301, "mapped {mapped}: {stats:?}");
        assert!(stats.files_created > 3, "mapped {mapped}: small files rotate: {stats:?}");
        if mapped {
            // Only the periodic flusher's syncs lead a flush (once a second): no commit waits.
            assert!(stats.flushes <= stats.syncs, "mapped: {stats:?}");
        }
        let logs = files(dir.path(), "wal-");
        let (newest, older) = logs.split_last().unwrap();
        let largest = older.iter().map(|f| std::fs::metadata(f).unwrap().len()).max().unwrap();
        assert!(largest > 100 << 10, "mapped {mapped}: the big commit has a file of its own");
        for f in older {
            let bytes = std::fs::read(f).unwrap();
            assert_eq!(records_len(&bytes), bytes.len(), "mapped {mapped}: {f:?} ends with its last record");
        }
        assert!(std::fs::metadata(newest).unwrap().len() >= 32);
        std::mem::forget(db);
        for reopened_mapped in [mapped, !mapped] {
            let copy = copy_dir(dir.path());
            let wal = WalConfig { mapped: reopened_mapped, ..wal };
            let db = Db::open(copy.path(), Options { wal, ..options() }).unwrap();
            assert_eq!(get(&db, b"big"), Some(big.clone()), "mapped {mapped}");
            assert_eq!(get(&db, b"k0299"), Some(vec![43u8; 40]));
            assert_eq!(db.begin_read().unwrap().range(..).unwrap().count(), 301);
            put(&db, b"after", b"reopen");
            db.close().unwrap();
            let db = Db::open(copy.path(), options()).unwrap();
            assert_eq!(get(&db, b"after"), Some(b"reopen".to_vec()), "mapped {mapped}, then {reopened_mapped}");
            db.close().unwrap();
            tern::recovery::check(copy.path()).unwrap();
        }
    }
}

/// A mapped log whose rotation fails (the sync that closes a full file): that commit fails, the
/// log stops (every later commit fails, nothing more reaches the files), and a reopen holds
/// every acknowledged commit with the log intact.
#[test]
fn a_failed_rotation_of_a_mapped_log_stops_it_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wal = WalConfig { durability: Durability::NoSync, file_bytes: 8 << 10, ..WalConfig::default() };
    let fs = FaultFs::new();
    fs.faults.map_logs.store(true, Relaxed);
    let db = Db::open_with_fs(dir.path(), Options { wal, ..options() }, Arc::new(fs.clone())).unwrap();
    let mut acked = Vec::new();
    for i in 0..40u32 {
        let k = format!("k{i:04}");
        put(&db, k.as_bytes(), &[i as u8; 100]);
        acked.push(k);
    }
    fs.faults.fail_syncs.store(true, Relaxed);
    let mut failed_at = None;
    for i in 40..400u32 {
        let mut t = db.begin().unwrap();
        t.put(format!("k{i:04}").as_bytes(), &[i as u8; 100]).unwrap();
        match t.commit() {
            Ok(()) => acked.push(format!("k{i:04}")),
            Err(e) => {
                failed_at = Some((i, e));
                break;
            }
        }
    }
    let (at, e) = failed_at.expect("a rotation within 360 commits of 100 bytes into 8 KiB files");
    assert!(matches!(e, Error::Io { .. } | Error::ReadOnly { .. } | Error::CommitNotDurable { .. }), "{e:?}");
    fs.faults.fail_syncs.store(false, Relaxed);
    let mut t = db.begin().unwrap();
    let later = t.put(b"later", b"x").and_then(|()| t.commit());
    assert!(later.is_err(), "the log stopped at commit {at}: {later:?}");
    assert!(db.stats().wal.unwrap().failed.is_some());
    std::mem::forget(db);
    let copy = copy_dir(dir.path());
    let db = Db::open(copy.path(), options()).unwrap();
    for k in &acked {
        assert!(get(&db, k.as_bytes()).is_some(), "acknowledged {k} is there");
    }
    assert_eq!(get(&db, b"later"), None);
    db.close().unwrap();
    tern::recovery::check(copy.path()).unwrap();
}

#[test]
fn bad_options_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = Options { wal: WalConfig { file_bytes: 10, ..WalConfig::default() }, ..options() };
    assert!(matches!(Db::open(dir.path(), bad), Err(Error::InvalidArgument(_))));
    let tiny = WalConfig { replay_batch_bytes: Some(1000), ..WalConfig::default() };
    let err = Db::open(dir.path(), Options { wal: tiny, ..options() }).unwrap_err();
    assert!(err.to_string().contains("a replay batch must be at least 1 MiB"), "{err}");
    let zero = WalConfig { checkpoint_interval: Some(std::time::Duration::ZERO), ..WalConfig::default() };
    let err = Db::open(dir.path(), Options { wal: zero, ..options() }).unwrap_err();
    assert!(err.to_string().contains("checkpoint interval must be at least 1 ms"), "{err}");
}

#[test]
fn a_checkpoint_starts_on_its_own_once_the_interval_passes_if_anything_was_logged() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    put(&db, b"a", b"1");
    db.close().unwrap();
    // Reopened with an interval: its last checkpoint covers everything, so a timed checkpoint
    // writes something only once a commit is logged.
    let every = WalConfig { checkpoint_interval: Some(std::time::Duration::from_millis(20)), ..WalConfig::default() };
    let db = Db::open(dir.path(), Options { wal: every, ..options() }).unwrap();
    let written = |db: &Db| db.stats().checkpoints.written;
    let wait_for = |db: &Db, n: u64| {
        // Behaviour, not timing: a generous bound, left as soon as it happens.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while written(db) < n {
            assert!(std::time::Instant::now() < deadline, "no checkpoint by time: {:?}", db.stats().checkpoints);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(written(&db), 0, "nothing was logged: {:?}", db.stats().checkpoints);
    put(&db, b"b", b"2");
    wait_for(&db, 1);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(written(&db), 1, "nothing was logged since: {:?}", db.stats().checkpoints);
    put(&db, b"c", b"3");
    wait_for(&db, 2);
    std::mem::forget(db);
    let copy = copy_dir(dir.path());
    let db = Db::open(copy.path(), options()).unwrap();
    assert_eq!(db.stats().recovery.unwrap().records_replayed, 0, "the timed checkpoints covered every commit");
    assert_eq!(
        (get(&db, b"a"), get(&db, b"b"), get(&db, b"c")),
        (Some(b"1".to_vec()), Some(b"2".to_vec()), Some(b"3".to_vec()))
    );
}

#[test]
fn check_verifies_a_database_without_changing_it() {
    let dir = tempfile::tempdir().unwrap();
    committed_then_crashed(dir.path(), 10);
    let copy = copy_dir(dir.path());
    let log = newest_log(copy.path());
    let len = records_len(&std::fs::read(&log).unwrap()) as u64;
    std::fs::OpenOptions::new().write(true).open(&log).unwrap().set_len(len - 3).unwrap();
    let report = tern::recovery::check(copy.path()).unwrap();
    assert_eq!(report.recovery.records_replayed, 9);
    assert!(report.recovery.torn_tail.is_some());
    assert_eq!(report.tables[0].entries, 9);
    assert_eq!(std::fs::metadata(&log).unwrap().len(), len - 3, "check changes nothing");
}

#[derive(Clone, Debug)]
enum Step {
    Put(u8, u8),
    Delete(u8),
    Commit,
    Abort,
    Checkpoint,
    Crash,
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..32, any::<u8>()).prop_map(|(k, v)| Step::Put(k, v)),
        2 => (0u8..32).prop_map(Step::Delete),
        4 => Just(Step::Commit),
        1 => Just(Step::Abort),
        1 => Just(Step::Checkpoint),
        1 => Just(Step::Crash),
        1 => Just(Step::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever mix of commits, aborts, checkpoints, clean reopens and crashes (a copy of the
    /// files taken while the database is open), the recovered state is the committed model.
    #[test]
    fn recovery_equals_the_committed_model(steps in proptest::collection::vec(step(), 1..60)) {
        let root = tempfile::tempdir().unwrap();
        let mut dir = root.path().join("db0");
        let mut generation = 0;
        let mut db = Db::open(&dir, small_files()).unwrap();
        let mut model: BTreeMap<u8, u8> = BTreeMap::new();
        let mut pending: BTreeMap<u8, Option<u8>> = BTreeMap::new();
        for s in steps {
            match s {
                Step::Put(k, v) => { pending.insert(k, Some(v)); }
                Step::Delete(k) => { pending.insert(k, None); }
                Step::Abort => pending.clear(),
                Step::Commit => {
                    let mut t = db.begin().unwrap();
                    for (&k, &v) in &pending {
                        match v {
                            Some(v) => t.put(&[k], &[v]).unwrap(),
                            None => { t.delete(&[k]).unwrap(); }
                        }
                    }
                    t.commit().unwrap();
                    for (k, v) in std::mem::take(&mut pending) {
                        match v { Some(v) => { model.insert(k, v); } None => { model.remove(&k); } }
                    }
                }
                Step::Checkpoint => { db.checkpoint().unwrap(); }
                Step::Reopen => {
                    drop(db);
                    db = Db::open(&dir, small_files()).unwrap();
                }
                Step::Crash => {
                    generation += 1;
                    let next = root.path().join(format!("db{generation}"));
                    std::fs::create_dir(&next).unwrap();
                    copy_files(&dir, &next);
                    drop(db);
                    dir = next;
                    db = Db::open(&dir, small_files()).unwrap();
                }
            }
            let got: BTreeMap<u8, u8> = db.begin_read().unwrap().range(..).unwrap().map(|(k, v)| (k[0], v[0])).collect();
            prop_assert_eq!(&got, &model);
        }
    }
}

#[test]
fn close_releases_the_directory_when_it_returns_and_spares_other_handles() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { wal: WalConfig { checkpoint_bytes: 4096, ..WalConfig::default() }, ..options() };
    for round in 0..5u8 {
        let db = Db::open(dir.path(), opts).unwrap();
        let other = db.clone();
        for i in 0..200u32 {
            put(&db, &i.to_be_bytes(), &[round; 50]);
        }
        // Not the last handle: the other one goes on writing (and checkpointing).
        db.close().unwrap();
        for i in 0..200u32 {
            put(&other, &i.to_be_bytes(), &[round + 1; 50]);
        }
        other.close().unwrap();
        // Reopening right away never finds the directory still locked.
        let db = Db::open(dir.path(), opts).unwrap();
        assert_eq!(get(&db, &7u32.to_be_bytes()), Some(vec![round + 1; 50]));
        assert_eq!(db.stats().recovery.unwrap().records_replayed, 0, "close checkpointed");
        db.close().unwrap();
    }
}

/// A page damaged in the page file while the database runs: reading it is an error naming the
/// file, the offset and the page (in point reads and in scans), never wrong data.
#[test]
fn a_damaged_page_in_the_page_file_is_an_error_never_wrong_data() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        cache_bytes: 0,
        tree: tern::btree::TreeConfig { page_size: 4096, ..Default::default() },
        ..options()
    };
    let db = Db::open(dir.path(), options).unwrap();
    let mut txn = db.begin().unwrap();
    for i in 0..5000u32 {
        txn.put(&i.to_be_bytes(), &[i as u8; 100]).unwrap();
    }
    txn.commit().unwrap();
    assert!(db.stats().buffer.evictions > 0);
    // Damage every block on disk (the evicted pages among them).
    let path = dir.path().join("pages");
    let mut bytes = std::fs::read(&path).unwrap();
    for b in bytes.iter_mut().step_by(4096) {
        *b ^= 0x5a;
    }
    std::fs::write(&path, &bytes).unwrap();
    let read = db.begin_read().unwrap();
    let mut errors = 0;
    for i in (0..5000u32).step_by(50) {
        match read.get(&i.to_be_bytes()) {
            Ok(v) => assert_eq!(v, Some(vec![i as u8; 100]), "a value read back is the one written"),
            Err(Error::Corruption { file, reason, .. }) => {
                assert_eq!(file, "pages");
                assert!(reason.contains("checksum"), "{reason}");
                errors += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(errors > 0, "some evicted page was read back");
    let mut range = read.range(..).unwrap();
    let seen: Vec<_> = range.by_ref().collect();
    assert!(seen.iter().all(|(k, v)| v == &vec![k[3]; 100]));
    assert!(matches!(range.error(), Some(Error::Corruption { .. })), "the scan reports the damage");
}

/// A checkpoint that cannot read a page (EIO on the page file) fails; it never writes a
/// checkpoint that stops where the read failed and then drops the log that held the rest.
#[test]
fn a_checkpoint_that_cannot_read_a_page_fails_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let faulty_options = Options {
        cache_bytes: 0,
        tree: tern::btree::TreeConfig { page_size: 4096, ..Default::default() },
        wal: WalConfig { checkpoint_bytes: u64::MAX, checkpoint_on_close: false, ..WalConfig::default() },
        ..options()
    };
    {
        let (db, fs) = faulty(dir.path(), faulty_options);
        // A snapshot older than the writes keeps them version chains: the evicted leaves'
        // images hold chain ids, which the checkpoint must read back to resolve (a leaf
        // without any is taken from the disk unread).
        let older = db.begin_read().unwrap();
        let mut txn = db.begin().unwrap();
        for i in 0..5000u32 {
            txn.put(&i.to_be_bytes(), &[i as u8; 100]).unwrap();
        }
        txn.commit().unwrap();
        assert!(db.stats().buffer.evictions > 0, "most pages are on disk only");
        fs.faults.fail_reads.store(true, Relaxed);
        let err = db.checkpoint().unwrap_err();
        assert!(err.to_string().contains("injected EIO"), "{err}");
        fs.faults.fail_reads.store(false, Relaxed);
        drop(older);
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), options()).unwrap();
    let read = db.begin_read().unwrap();
    assert_eq!(read.range(..).unwrap().count(), 5000, "every committed key survives");
    for i in (0..5000u32).step_by(97) {
        assert_eq!(read.get(&i.to_be_bytes()).unwrap(), Some(vec![i as u8; 100]));
    }
}
