//! Sizes and settings at their limits: transactions and values as large as the API accepts
//! survive commit, close, crash and reopen; a crash at any step of creating a database leaves
//! one that opens; settings the stored data depends on are kept by the database.
//!
//! The largest cases need several GiB of memory and move tens of GiB through memory and disk:
//! they run one at a time (this file's tests share a lock), and are skipped, saying so, where
//! the machine has too little memory free or the build is not optimized (a debug build takes
//! minutes on them; CI runs them with `cargo test --release -p tern --test limits`).

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use tern::fs::FaultFs;
use tern::{Db, Error, Options, WalConfig};

/// One large test at a time: each may hold a few GiB.
static LARGE: Mutex<()> = Mutex::new(());

/// Bytes of memory the kernel says are available (`MemAvailable`), if it says.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Whether `bytes` of memory are free for a test; prints why it is skipped if not. (Debug
/// builds ignore the large tests, saying why: they take minutes there.)
fn can_run_large(test: &str, bytes: u64) -> bool {
    match available_memory() {
        Some(free) if free >= bytes => true,
        free => {
            eprintln!("SKIPPED {test}: needs {} MiB of free memory, the machine has {free:?} bytes", bytes >> 20);
            false
        }
    }
}

/// A value of `len` bytes that differs from its neighbours (first and last bytes carry `tag`).
fn value(len: usize, tag: u8) -> Vec<u8> {
    let mut v = vec![tag.wrapping_mul(31).wrapping_add(7); len];
    if let Some(first) = v.first_mut() {
        *first = tag;
    }
    if let Some(last) = v.last_mut() {
        *last = tag ^ 0xFF;
    }
    v
}

/// Whether `got` is `value(len, tag)`, checked in place: building the expected GiB-sized value
/// again for each comparison cost more time than the engine's work.
fn is_value(got: Option<Vec<u8>>, len: usize, tag: u8) -> bool {
    let Some(got) = got else { return false };
    let fill = tag.wrapping_mul(31).wrapping_add(7);
    got.len() == len
        && (len == 0
            || (got[0] == tag
                && got[len - 1] == tag ^ 0xFF
                && got[1..len.saturating_sub(1)].iter().all(|&b| b == fill)))
}

fn get(db: &Db, key: &[u8]) -> Option<Vec<u8>> {
    db.begin_read().unwrap().get(key).unwrap()
}

/// Copies a database's files, not its lock (what a crash leaves).
fn copy_files(from: &Path, to: &Path) {
    for f in std::fs::read_dir(from).unwrap() {
        let f = f.unwrap();
        if f.file_name() != "LOCK" {
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
    }
}

/// A transaction whose log record is larger than one frame of the log can hold (1 GiB before
/// this was fixed): three 400 MiB values and a marker, committed, then read back after a clean
/// close without checkpoint (replayed from one log file, and from a rotated log), and after a
/// crash (a copy of the files taken while the database is open).
#[test]
#[cfg_attr(debug_assertions, ignore = "GiB-sized: too slow in a debug build, run with --release")]
fn a_transaction_of_more_than_a_gib_survives_close_crash_and_reopen() {
    let _one = LARGE.lock().unwrap_or_else(|p| p.into_inner());
    if !can_run_large("a_transaction_of_more_than_a_gib_survives_close_crash_and_reopen", 7 << 30) {
        return;
    }
    const LEN: usize = 400 << 20;
    // The default log file size (the record in a log that rotates) gets every step; one file
    // large enough for everything gets the reopen alone (each step moves GiBs: CI's time).
    for file_bytes in [WalConfig::default().file_bytes, 8u64 << 30] {
        let every_step = file_bytes == WalConfig::default().file_bytes;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("db");
        let options = Options {
            // No checkpoint on its own either: the log alone carries the big record.
            wal: WalConfig {
                checkpoint_on_close: false,
                file_bytes,
                checkpoint_bytes: u64::MAX,
                ..WalConfig::default()
            },
            ..Options::default()
        };
        let crashed = root.path().join("crashed");
        {
            let db = Db::open(&dir, options).unwrap();
            let mut txn = db.begin().unwrap();
            for i in 0..3u8 {
                txn.put(&[b'v', i], &value(LEN, i)).unwrap();
            }
            txn.put(b"marker", b"here").unwrap();
            txn.commit().unwrap();
            // One more commit after it: the big one is not the log's last record.
            let mut txn = db.begin().unwrap();
            txn.put(b"after", b"1").unwrap();
            txn.commit().unwrap();
            if every_step {
                std::fs::create_dir(&crashed).unwrap();
                copy_files(&dir, &crashed);
            }
            db.close().unwrap();
        }
        let paths = if every_step { vec![&dir, &crashed] } else { vec![&dir] };
        for path in paths {
            let db = Db::open(path, options).unwrap();
            let recovery = db.stats().recovery.unwrap();
            assert_eq!(recovery.torn_tail, None, "file_bytes {file_bytes}: {recovery}");
            assert_eq!(recovery.records_replayed, 2, "file_bytes {file_bytes}: {recovery}");
            assert_eq!(get(&db, b"marker").as_deref(), Some(&b"here"[..]), "file_bytes {file_bytes}");
            assert_eq!(get(&db, b"after").as_deref(), Some(&b"1"[..]));
            for i in 0..3u8 {
                assert!(is_value(get(&db, &[b'v', i]), LEN, i), "value {i} differs after reopening");
            }
            db.close().unwrap();
        }
        if !every_step {
            continue;
        }
        // A clean close with the default options checkpoints the values; they load from it.
        Db::open(&dir, Options::default()).unwrap().close().unwrap();
        let db = Db::open(&dir, Options::default()).unwrap();
        let recovery = db.stats().recovery.unwrap();
        assert!(recovery.checkpoint.is_some() && recovery.records_replayed == 0, "{recovery}");
        assert_eq!(get(&db, b"marker").as_deref(), Some(&b"here"[..]));
        for i in 0..3u8 {
            assert!(is_value(get(&db, &[b'v', i]), LEN, i), "value {i} differs after the checkpoint");
        }
    }
}

/// A value of exactly the documented maximum survives a checkpoint (clean close) and the log
/// alone (close without checkpoint), in a table of small values around it.
#[test]
#[cfg_attr(debug_assertions, ignore = "GiB-sized: too slow in a debug build, run with --release")]
fn a_value_of_the_largest_accepted_size_survives_checkpoint_and_log() {
    let _one = LARGE.lock().unwrap_or_else(|p| p.into_inner());
    if !can_run_large("a_value_of_the_largest_accepted_size_survives_checkpoint_and_log", 6 << 30) {
        return;
    }
    let max = tern::btree::MAX_VALUE;
    for checkpoint_on_close in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        // Without a checkpoint on close nor one on its own: the log alone carries the value.
        let checkpoint_bytes = if checkpoint_on_close { WalConfig::default().checkpoint_bytes } else { u64::MAX };
        let options = Options {
            wal: WalConfig { checkpoint_on_close, checkpoint_bytes, ..WalConfig::default() },
            ..Options::default()
        };
        {
            let db = Db::open(dir.path(), options).unwrap();
            let mut txn = db.begin().unwrap();
            txn.put(b"a", b"before").unwrap();
            txn.put(b"big", &value(max, 9)).unwrap();
            txn.put(b"c", b"after").unwrap();
            txn.commit().unwrap();
            let mut txn = db.begin().unwrap();
            let err = txn.put(b"too big", &vec![0; max + 1]).unwrap_err();
            assert!(matches!(err, Error::ValueTooLarge { .. }), "{err}");
            drop(txn);
            db.close().unwrap();
        }
        let db = Db::open(dir.path(), options).unwrap();
        let recovery = db.stats().recovery.unwrap();
        assert_eq!(recovery.checkpoint.is_some(), checkpoint_on_close, "{recovery}");
        assert!(is_value(get(&db, b"big"), max, 9), "the largest value differs after reopening");
        assert_eq!(get(&db, b"a").as_deref(), Some(&b"before"[..]));
        assert_eq!(get(&db, b"c").as_deref(), Some(&b"after"[..]));
        drop(db);
        let report = tern::recovery::check(dir.path()).unwrap();
        assert_eq!(report.tables[0].entries, 3);
    }
}

/// Kills the creation of a fresh database at every step of it (creating the directory, the
/// lock, the settings, the first log file, the first checkpoint): an `Fs` that fails every
/// operation from the `n`-th on leaves the files as a crash at that instant would; each such
/// directory must open, and hold whatever was acknowledged before the failure.
#[test]
fn a_crash_at_every_step_of_creating_a_database_leaves_one_that_opens() {
    let mut completed = false;
    for n in 0..200u64 {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("new").join("db");
        let fs = FaultFs::new();
        fs.faults.ops_left.store(n, Relaxed);
        let mut acked = false;
        let outcome = (|| -> tern::Result<()> {
            let db = Db::open_with_fs(&dir, Options::default(), Arc::new(fs.clone()))?;
            let mut txn = db.begin()?;
            txn.put(b"first", b"commit")?;
            txn.commit()?;
            acked = true;
            db.checkpoint()?;
            let mut txn = db.begin()?;
            txn.put(b"second", b"commit")?;
            txn.commit()?;
            db.close()
        })();
        if dir.exists() {
            let db = Db::open(&dir, Options::default())
                .unwrap_or_else(|e| panic!("after a crash at step {n} ({outcome:?}) the database does not open: {e}"));
            if acked {
                assert_eq!(get(&db, b"first").as_deref(), Some(&b"commit"[..]), "step {n}");
            }
            db.close().unwrap();
            tern::recovery::check(&dir).unwrap_or_else(|e| panic!("step {n}: check: {e}"));
        }
        if outcome.is_ok() {
            completed = true;
            assert!(n > 10, "every step was counted");
            break;
        }
    }
    assert!(completed, "the creation finished within the steps tried");
}

/// A database far larger than its cache takes writes, deletes and large values, and reads
/// them back before and after reopening (the memory budget this replaced refused growth).
#[test]
fn a_database_many_times_its_cache_takes_writes_and_reads_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { cache_bytes: 1 << 20, ..Options::default() };
    let value = |i: u32| vec![i as u8; 200 + (i as usize % 7) * 3000];
    {
        let db = Db::open(dir.path(), options).unwrap();
        for chunk in 0..20u32 {
            let mut txn = db.begin().unwrap();
            for i in chunk * 1000..(chunk + 1) * 1000 {
                txn.put(&i.to_be_bytes(), &value(i)).unwrap();
            }
            txn.commit().unwrap();
        }
        let mut txn = db.begin().unwrap();
        for i in (0..20_000u32).step_by(3) {
            assert!(txn.delete(&i.to_be_bytes()).unwrap());
        }
        txn.commit().unwrap();
        let buffer = db.stats().buffer;
        assert!(buffer.live_pages > 8 * buffer.capacity_pages, "{buffer:?}");
        assert!(buffer.evictions > 0 && buffer.write_backs > 0, "{buffer:?}");
        for i in (0..20_000u32).step_by(101) {
            assert_eq!(get(&db, &i.to_be_bytes()), (i % 3 != 0).then(|| value(i)), "key {i}");
        }
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), options).unwrap();
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.begin_read().unwrap().range(..).unwrap().collect();
    assert_eq!(all.len(), 20_000 - 6667);
    for (k, v) in all {
        let i = u32::from_be_bytes(k[..].try_into().unwrap());
        assert!(i % 3 != 0 && v == value(i), "key {i}");
    }
    assert!(db.stats().buffer.reads > 0);
}

/// The page size (which bounds the key length) is the database's: reopening with another one
/// opens it with the one it was created with, instead of reporting its keys as corruption.
#[test]
fn a_database_keeps_the_page_size_it_was_created_with() {
    let dir = tempfile::tempdir().unwrap();
    let long_key = vec![b'k'; 2000];
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let mut txn = db.begin().unwrap();
        txn.put(&long_key, b"v").unwrap();
        txn.commit().unwrap();
        db.close().unwrap();
    }
    let mut small = Options::default();
    small.tree.page_size = 4096;
    for checkpointed in [true, false] {
        if !checkpointed {
            // Once more with the key in the log only.
            let db = Db::open(dir.path(), Options::default()).unwrap();
            let mut txn = db.begin().unwrap();
            txn.put(&[b'x'; 1500], b"w").unwrap();
            txn.commit().unwrap();
            std::mem::forget(db);
        }
        let copy = tempfile::tempdir().unwrap();
        copy_files(dir.path(), copy.path());
        let db = Db::open(copy.path(), small).unwrap();
        assert_eq!(db.options().tree.page_size, 16384, "the stored page size wins");
        assert_eq!(db.max_key_len(), 2048);
        assert_eq!(get(&db, &long_key).as_deref(), Some(&b"v"[..]));
        if !checkpointed {
            assert_eq!(get(&db, &[b'x'; 1500]).as_deref(), Some(&b"w"[..]));
        }
        let mut txn = db.begin().unwrap();
        txn.put(&[b'y'; 2048], b"still 16 KiB pages").unwrap();
        txn.commit().unwrap();
        if checkpointed {
            let report = tern::recovery::check(dir.path()).unwrap();
            assert_eq!(report.tables[0].entries, 1);
        }
    }
    // A new database takes the page size it is given.
    let other = tempfile::tempdir().unwrap();
    let db = Db::open(other.path(), small).unwrap();
    assert_eq!(db.options().tree.page_size, 4096);
    assert_eq!(db.max_key_len(), 512);
    let mut txn = db.begin().unwrap();
    assert!(matches!(txn.put(&long_key, b"v"), Err(Error::KeyTooLarge { len: 2000, max: 512 })));
}

/// The search layout and the hint arrays shape the pages too: reopening with other ones opens
/// the database with those it was created with (a tree searched with another layout missed
/// every key and wrote entries out of order), and `check` verifies the pages against them.
#[test]
fn a_database_keeps_the_search_layout_and_hints_it_was_created_with() {
    use tern::btree::Layout;
    let key = |i: u32| format!("key{i:06}").into_bytes();
    for (created, hints) in
        [(Layout::BranchFree, true), (Layout::Sorted, false), (Layout::Eytzinger, true), (Layout::BTree, false)]
    {
        let dir = tempfile::tempdir().unwrap();
        let mut options = Options::default();
        options.tree.layout = created;
        options.tree.hints = hints;
        {
            let db = Db::open(dir.path(), options).unwrap();
            let mut txn = db.begin().unwrap();
            for i in 0..5000 {
                txn.put(&key(i), b"v").unwrap();
            }
            txn.commit().unwrap();
            db.close().unwrap();
        }
        let report = tern::recovery::check(dir.path()).unwrap();
        assert_eq!(report.tables[0].entries, 5000, "{created:?}, hints {hints}: check of the database as created");
        for other in Layout::ALL {
            let mut reopen = Options::default();
            reopen.tree.layout = other;
            reopen.tree.hints = !hints;
            let db = Db::open(dir.path(), reopen).unwrap();
            let in_use = db.options().tree;
            assert_eq!((in_use.layout, in_use.hints), (created, hints), "the stored layout and hints win");
            for i in (0..5000).step_by(97) {
                assert_eq!(get(&db, &key(i)).as_deref(), Some(&b"v"[..]), "{created:?} reopened as {other:?}");
            }
            let mut txn = db.begin().unwrap();
            for i in 5000..5100 {
                txn.put(&key(i), b"w").unwrap();
            }
            txn.commit().unwrap();
            assert_eq!(db.begin_read().unwrap().range(..).unwrap().count(), 5100);
            db.close().unwrap();
            let report = tern::recovery::check(dir.path()).unwrap();
            assert_eq!(report.tables[0].entries, 5100, "{created:?} reopened as {other:?}");
            let db = Db::open(dir.path(), options).unwrap();
            let mut txn = db.begin().unwrap();
            for i in 5000..5100 {
                txn.delete(&key(i)).unwrap();
            }
            txn.commit().unwrap();
            db.close().unwrap();
        }
    }
}

/// A settings file from before the layout was recorded (format 1: the page size only) opens
/// with the layout and hints given, as every open did then, and is left as it is: completing
/// it from whatever a later open passes (a `tern` command's defaults) would record a guess
/// for good.
#[test]
fn a_format_1_settings_file_keeps_the_layout_to_the_options_given() {
    use tern::btree::Layout;
    let dir = tempfile::tempdir().unwrap();
    let mut options = Options::default();
    options.tree.layout = Layout::Eytzinger;
    options.tree.hints = false;
    options.tree.page_size = 8192;
    {
        let db = Db::open(dir.path(), options).unwrap();
        let mut txn = db.begin().unwrap();
        txn.put(b"k", b"v").unwrap();
        txn.commit().unwrap();
        db.close().unwrap();
    }
    // The header as tern wrote it before: magic, format 1, the page size, crc32c of the rest.
    let mut header = [0u8; 32];
    header[..8].copy_from_slice(b"TERNSET1");
    header[8..16].copy_from_slice(&1u64.to_le_bytes());
    header[16..24].copy_from_slice(&8192u64.to_le_bytes());
    let crc = crc32c_of(&header[..28]);
    header[28..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(dir.path().join("SETTINGS"), header).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let in_use = db.options().tree;
    assert_eq!((in_use.page_size, in_use.layout, in_use.hints), (8192, Layout::BranchFree, true), "the options given");
    drop(db);
    assert_eq!(std::fs::read(dir.path().join("SETTINGS")).unwrap(), header, "left as it is");
    let db = Db::open(dir.path(), options).unwrap();
    let in_use = db.options().tree;
    assert_eq!((in_use.page_size, in_use.layout, in_use.hints), (8192, Layout::Eytzinger, false));
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"v"[..]));
    db.close().unwrap();
    assert_eq!(std::fs::read(dir.path().join("SETTINGS")).unwrap(), header, "left as it is");
}

/// CRC-32C (Castagnoli), bit by bit: the settings file's checksum, computed independently.
fn crc32c_of(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { crc >> 1 ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}
