//! An outside audit of durability, crash recovery and fault handling: what README.md,
//! docs/durability.md and the rustdoc promise, checked through the public API only.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tern::btree::TreeConfig;
use tern::fs::FaultFs;
use tern::{Db, Durability, Error, Options, WalConfig};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// 4 KiB pages in a tiny cache (most pages live on disk), checkpoints only when asked.
fn small() -> Options {
    Options {
        tree: TreeConfig { page_size: 4096, ..TreeConfig::default() },
        cache_bytes: 64 << 10,
        wal: WalConfig { checkpoint_bytes: u64::MAX, checkpoint_on_close: false, ..WalConfig::default() },
        ..Options::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn contents(db: &Db) -> Model {
    let t = db.begin_read().unwrap();
    let mut range = t.range(..).unwrap();
    let all: Model = range.by_ref().collect();
    if let Some(e) = range.take_error() {
        panic!("scan failed: {e}");
    }
    all
}

fn copy_files(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() && e.file_name() != "LOCK" {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("wal-") && name.ends_with(".log") {
                copy_log_prefix(&e.path(), &to.join(e.file_name()));
            } else {
                copy_backwards(&e.path(), &to.join(e.file_name()));
            }
        }
    }
}

/// Copies a file in 64 KiB pieces, the last first. A file a writer appends to meanwhile then
/// copies as a prefix of what it held at some instant, as a crash would leave it: each piece
/// is read no later than the pieces after it, so a byte written into a later piece was written
/// before every earlier byte was read. (Copying forwards, a later piece can hold records
/// appended after an earlier piece was read without them: a hole followed by valid records,
/// which recovery rightly calls corruption, and no crash leaves.)
fn copy_backwards(from: &Path, to: &Path) {
    use std::os::unix::fs::FileExt;
    const PIECE: u64 = 64 << 10;
    let src = std::fs::File::open(from).unwrap();
    let len = src.metadata().unwrap().len();
    let dst = std::fs::File::create(to).unwrap();
    dst.set_len(len).unwrap();
    let mut buf = vec![0u8; PIECE as usize];
    let mut end = len;
    while end > 0 {
        let start = (end - 1) / PIECE * PIECE;
        let n = (end - start) as usize;
        src.read_exact_at(&mut buf[..n], start).unwrap();
        dst.write_all_at(&buf[..n], start).unwrap();
        end = start;
    }
}

/// Copies a log file a writer may be appending to as the prefix a crash of the writer would
/// leave: read twice, cut where the two reads first differ, zeros after (as the file's
/// preallocated end holds). A read is not atomic (the kernel copies a page from its start
/// while the writer fills it), so one read alone can hold a record appended after an earlier
/// one it holds only in part; every byte the first read holds that was written before the
/// second read began reads the same in both, and a byte the first read caught unwritten
/// reads differently in the second (appends are in order and a written byte never changes),
/// so the first difference is the first byte the first read caught unwritten.
fn copy_log_prefix(from: &Path, to: &Path) {
    let first = std::fs::read(from).unwrap();
    let second = std::fs::read(from).unwrap();
    let cut = first.iter().zip(&second).position(|(a, b)| a != b).unwrap_or(first.len().min(second.len()));
    let mut copy = first[..cut].to_vec();
    copy.resize(first.len(), 0);
    std::fs::write(to, copy).unwrap();
}

/// Commits `(key, value)` pairs in one transaction; on success applies them to `model`.
fn commit(db: &Db, writes: &[(Vec<u8>, Option<Vec<u8>>)], model: &mut Model) -> tern::Result<()> {
    let mut t = db.begin()?;
    for (k, v) in writes {
        match v {
            Some(v) => t.put(k, v)?,
            None => {
                t.delete(k)?;
            }
        }
    }
    t.commit()?;
    for (k, v) in writes {
        match v {
            Some(v) => model.insert(k.clone(), v.clone()),
            None => model.remove(k),
        };
    }
    Ok(())
}

fn batch(from: u64, to: u64, tag: u8) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    (from..to).map(|i| (key(i), Some(vec![tag; 60 + (i % 50) as usize]))).collect()
}

/// A transient fault at every step of a checkpoint in turn (every file-system operation from
/// the `n`-th fails with EIO, then the fault goes away): that checkpoint fails cleanly, and
/// whatever the database does next (more writes, evictions, another checkpoint), a crash copy
/// and a reopen hold every acknowledged commit (docs/durability.md, "I/O errors").
#[test]
fn a_transient_fault_at_any_step_of_a_checkpoint_loses_nothing() {
    let mut finished = false;
    for n in 0..400u64 {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("db");
        let fs = FaultFs::new();
        let db = Db::open_with_fs(&dir, small(), Arc::new(fs.clone())).unwrap();
        let mut model = Model::new();
        commit(&db, &batch(0, 1500, 1), &mut model).unwrap();
        db.checkpoint().unwrap().unwrap();
        commit(&db, &batch(0, 700, 2), &mut model).unwrap();
        let dels: Vec<_> = (1400..1500).map(|i| (key(i), None)).collect();
        commit(&db, &dels, &mut model).unwrap();
        fs.faults.ops_left.store(n, Relaxed);
        let outcome = db.checkpoint();
        let exhausted = fs.faults.ops_left.load(Relaxed) == 0;
        fs.faults.ops_left.store(u64::MAX, Relaxed);
        if outcome.is_ok() && !exhausted {
            finished = true;
            drop(db);
            break;
        }
        // Go on: more writes (may be refused read-only), which evict pages; a crash copy;
        // then another checkpoint and another crash copy.
        let mut maybe = Model::new();
        let later = batch(700, 1400, 3);
        let later_outcome = commit(&db, &later, &mut model);
        match &later_outcome {
            Ok(()) | Err(Error::ReadOnly { .. }) => {}
            Err(Error::CommitNotDurable { .. }) => {
                for (k, v) in &later {
                    maybe.insert(k.clone(), v.clone().unwrap());
                }
            }
            Err(e) => panic!("step {n}: unexpected error after the fault: {e:?}"),
        }
        let crash1 = root.path().join("crash1");
        std::fs::create_dir(&crash1).unwrap();
        copy_files(&dir, &crash1);
        let second = db.checkpoint();
        let crash2 = root.path().join("crash2");
        std::fs::create_dir(&crash2).unwrap();
        copy_files(&dir, &crash2);
        let running = contents(&db);
        assert!(
            running.iter().all(|(k, v)| model.get(k) == Some(v) || maybe.get(k) == Some(v)),
            "step {n}: the running database differs"
        );
        drop(db);
        for (what, path) in
            [("crash copy before the second checkpoint", &crash1), ("crash copy after it", &crash2), ("reopen", &dir)]
        {
            let db = Db::open(path, small())
                .unwrap_or_else(|e| panic!("step {n} ({outcome:?}, then {second:?}): {what} does not open: {e}"));
            let got = contents(&db);
            for (k, v) in &model {
                let g = got.get(k);
                assert!(
                    g == Some(v) || maybe.get(k).is_some_and(|m| g == Some(m)),
                    "step {n} ({outcome:?}, then {second:?}): {what}: key {} lost or wrong",
                    String::from_utf8_lossy(k)
                );
            }
            for k in got.keys() {
                assert!(model.contains_key(k) || maybe.contains_key(k), "step {n}: {what}: extra key");
            }
            db.close().unwrap();
            tern::recovery::check(path).unwrap_or_else(|e| panic!("step {n}: {what}: check: {e}"));
        }
    }
    assert!(finished, "the checkpoint finished within the steps tried");
}

/// Runs `setup`, then `op` with every file-system operation from the `n`-th failing, for
/// `n = 0, 1, ...` until the error `op` returns contains `wanted`; then lifts the fault and
/// returns the database, its file system and the error.
fn fault_where(
    dir: &Path,
    options: Options,
    setup: impl Fn(&Db),
    op: impl Fn(&Db) -> tern::Result<()>,
    wanted: &[&str],
    map_logs: bool,
) -> (Db, FaultFs, Error) {
    for n in 0..200u64 {
        let _ = std::fs::remove_dir_all(dir);
        let fs = FaultFs::new();
        fs.faults.map_logs.store(map_logs, Relaxed);
        let db = Db::open_with_fs(dir, options, Arc::new(fs.clone())).unwrap();
        setup(&db);
        fs.faults.ops_left.store(n, Relaxed);
        let outcome = op(&db);
        fs.faults.ops_left.store(u64::MAX, Relaxed);
        match outcome {
            Err(e) if wanted.iter().all(|w| e.to_string().contains(w)) => return (db, fs, e),
            Ok(()) => panic!("{wanted:?}: no step of the operation failed that way"),
            Err(_) => {}
        }
    }
    panic!("{wanted:?}: not found");
}

/// A failed `fdatasync` of the log is final, including the one that closes the log file when
/// a checkpoint of an idle database moves the log to a new file: every later write is
/// `Error::ReadOnly` (README "After a log I/O error the database is read-only"; durability.md
/// "I/O errors": "A failed `write` or `fdatasync` of the log is final ... every later write with
/// `Error::ReadOnly`, and the failed sync is never retried").
#[test]
fn a_failed_log_sync_in_a_checkpoints_log_rotation_turns_the_database_read_only() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("db");
    for mapped in [false, true] {
        // One case through the written log, one through the mapped one.
        let options = Options {
            wal: WalConfig { mapped, checkpoint_bytes: u64::MAX, ..WalConfig::default() },
            ..Options::default()
        };
        let fs_setup = |db: &Db| {
            let mut t = db.begin().unwrap();
            t.put(b"before", b"1").unwrap();
            t.commit().unwrap();
        };
        let (db, _fs, err) = fault_where(
            &dir,
            options,
            fs_setup,
            |db| db.checkpoint().map(drop),
            &["log file", "injected stop before fdatasync"],
            mapped,
        );
        let mut t = db.begin().unwrap();
        let after = t.put(b"after", b"2").and_then(|()| t.commit());
        assert!(
            matches!(after, Err(Error::ReadOnly { .. })),
            "mapped {mapped}: after the checkpoint failed with `{err}`, a commit gave {after:?}"
        );
        assert!(db.stats().wal.unwrap().failed.is_some(), "mapped {mapped}: the log says it stopped");
        drop(db);
        let db = Db::open(&dir, Options::default()).unwrap();
        let t = db.begin_read().unwrap();
        assert_eq!(t.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
    }
}

/// `Faults::map_logs`: "Log files are mapped ([`FsFile::map`]) as on the real file system,
/// instead of written" (fs.rs). A mapped log copies `NoSync` commits into the file with no
/// flush (durability.md, "Mapped log files"); a written one needs a leader's flush per group.
#[test]
fn fault_fs_maps_its_log_files_when_told_to() {
    let root = tempfile::tempdir().unwrap();
    let options =
        Options { wal: WalConfig { durability: Durability::NoSync, ..WalConfig::default() }, ..Options::default() };
    let flushes = |db: &Db| {
        for i in 0..10u32 {
            let mut t = db.begin().unwrap();
            t.put(&i.to_be_bytes(), b"v").unwrap();
            t.commit().unwrap();
        }
        db.stats().wal.unwrap().flushes
    };
    // The real file system of the test's temporary directory.
    let real = Db::open(root.path().join("real"), options).unwrap();
    if flushes(&real) != 0 {
        eprintln!("this file system is not one tern maps its log on: nothing to compare");
        return;
    }
    let fs = FaultFs::new();
    fs.faults.map_logs.store(true, Relaxed);
    let db = Db::open_with_fs(root.path().join("faulty"), options, Arc::new(fs.clone())).unwrap();
    assert_eq!(flushes(&db), 0, "with map_logs, FaultFs maps its log files: {:?}", db.stats().wal.unwrap());
}

/// "A failed sync of the page file turns the database read-only until it is reopened (as a
/// failed sync of the log does)" (README, "The page file can grow to twice the data"): the
/// checkpoint fails, every later write, checkpoint and the close are `Error::ReadOnly`, and the
/// reopened database holds every acknowledged commit.
#[test]
fn a_failed_page_file_sync_turns_the_database_read_only_and_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("db");
    // A cache that holds everything: only the checkpoint writes pages, so the steps repeat.
    let options =
        Options { cache_bytes: 16 << 20, wal: WalConfig { durability: Durability::NoSync, ..small().wal }, ..small() };
    let setup = |db: &Db| commit(db, &batch(0, 500, 1), &mut Model::new()).unwrap();
    let (db, _fs, err) =
        fault_where(&dir, options, setup, |db| db.checkpoint().map(drop), &["pages", "page file fsync"], false);
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    let read_only =
        |r: &tern::Result<()>| matches!(r, Err(Error::ReadOnly { cause }) if cause.contains("page file fsync"));
    let later = commit(&db, &batch(0, 10, 2), &mut Model::new());
    assert!(read_only(&later), "a write after it: {later:?}");
    let second = db.checkpoint().map(drop);
    assert!(read_only(&second), "a checkpoint after it: {second:?}");
    assert_eq!(db.begin_read().unwrap().get(&key(3)).unwrap(), Some(vec![1; 63]), "reads go on");
    let close = db.close();
    assert!(read_only(&close), "the close reports it: {close:?}");
    let db = Db::open(&dir, small()).unwrap();
    let mut model = Model::new();
    batch(0, 500, 1).into_iter().for_each(|(k, v)| drop(model.insert(k, v.unwrap())));
    assert_eq!(contents(&db), model);
}

/// Every documented bound of the log settings is enforced at open with a clear
/// `Error::InvalidArgument`, and the value at the bound is taken: `WalConfig::file_bytes` at
/// least 4096, `Durability::Periodic` above zero, `replay_batch_bytes` at least 1 MiB,
/// `checkpoint_interval` at least 1 ms, `row_cache_percent` at most 90, a page size a power of
/// two from 4096 to 65536.
#[test]
fn documented_option_bounds_are_enforced_with_clear_errors_and_the_bounds_taken() {
    let root = tempfile::tempdir().unwrap();
    let wal = |w: WalConfig| Options { wal: w, ..Options::default() };
    let d = WalConfig::default;
    let ms = std::time::Duration::from_millis;
    let refused: Vec<(Options, &str)> = vec![
        (wal(WalConfig { file_bytes: 4095, ..d() }), "at least 4096"),
        (wal(WalConfig { durability: Durability::Periodic(ms(0)), ..d() }), "above zero"),
        (wal(WalConfig { replay_batch_bytes: Some((1 << 20) - 1), ..d() }), "at least 1 MiB"),
        (wal(WalConfig { checkpoint_interval: Some(std::time::Duration::from_micros(999)), ..d() }), "at least 1 ms"),
        (Options { row_cache_percent: 91, ..Options::default() }, "0 to 90%"),
        (
            Options { tree: TreeConfig { page_size: 8192 + 4096, ..TreeConfig::default() }, ..Options::default() },
            "power of two",
        ),
    ];
    for (i, (options, says)) in refused.into_iter().enumerate() {
        let dir = root.path().join(format!("refused{i}"));
        match Db::open(&dir, options) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(says), "{says}: {m}"),
            other => panic!("{says}: {:?}", other.map(drop)),
        }
        assert!(!dir.join("LOCK").exists(), "{says}: nothing is created for refused options");
    }
    let taken = [
        wal(WalConfig { file_bytes: 4096, ..d() }),
        wal(WalConfig { durability: Durability::Periodic(std::time::Duration::from_nanos(1)), ..d() }),
        wal(WalConfig { replay_batch_bytes: Some(1 << 20), ..d() }),
        wal(WalConfig { checkpoint_interval: Some(ms(1)), ..d() }),
        Options { row_cache_percent: 90, ..Options::default() },
    ];
    for (i, options) in taken.into_iter().enumerate() {
        let dir = root.path().join(format!("taken{i}"));
        let db = Db::open(&dir, options).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let mut model = Model::new();
        for round in 0..3 {
            commit(&db, &batch(0, 100, round), &mut model).unwrap();
        }
        db.close().unwrap();
        let db = Db::open(&dir, options).unwrap();
        assert_eq!(contents(&db), model, "case {i}");
    }
}

/// `WalConfig::checkpoint_interval` says only "At least 1 ms": the longest interval is taken
/// (as never, in effect), and the checkpoints `checkpoint_bytes` starts still run. It used to
/// overflow `Instant + Duration` in the checkpointer thread, which died at once: no automatic
/// checkpoint ever ran, and nothing said so.
#[test]
fn the_longest_checkpoint_interval_still_leaves_checkpoints_by_log_size() {
    let dir = tempfile::tempdir().unwrap();
    let wal = WalConfig {
        checkpoint_interval: Some(std::time::Duration::MAX),
        checkpoint_bytes: 64 << 10,
        durability: Durability::NoSync,
        ..WalConfig::default()
    };
    let db = Db::open(dir.path(), Options { wal, ..Options::default() }).unwrap();
    let mut model = Model::new();
    for round in 0..4u8 {
        commit(&db, &batch(0, 300, round), &mut model).unwrap();
    }
    assert!(db.stats().wal.unwrap().bytes > 64 << 10, "more log than the checkpoint trigger");
    // Behaviour, not timing: a generous bound, left as soon as a checkpoint is written.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while db.stats().checkpoints.written == 0 {
        assert!(std::time::Instant::now() < deadline, "no checkpoint by log size: {:?}", db.stats().checkpoints);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(contents(&db), model);
}

/// `WalConfig::replay_batch_bytes` says only "At least 1 MiB": a larger batch than any log
/// (up to `u64::MAX`) means one batch for the whole log, never a panic at open. The replay
/// reserved the whole batch up front: `Some(u64::MAX)` panicked with "capacity overflow" in
/// `Db::open`, and anything past the machine's memory would abort the process.
#[test]
fn a_replay_batch_larger_than_any_log_opens_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let wal = WalConfig { checkpoint_on_close: false, ..WalConfig::default() };
    for batch_bytes in [1 << 20, 1 << 40, u64::MAX] {
        let wal = WalConfig { replay_batch_bytes: Some(batch_bytes), ..wal };
        let db = Db::open(dir.path(), Options { wal, ..Options::default() })
            .unwrap_or_else(|e| panic!("batch {batch_bytes}: {e}"));
        let mut t = db.begin().unwrap();
        t.put(&batch_bytes.to_be_bytes(), b"v").unwrap();
        t.commit().unwrap();
        db.close().unwrap();
    }
    let db = Db::open(
        dir.path(),
        Options { wal: WalConfig { replay_batch_bytes: Some(u64::MAX), ..wal }, ..Options::default() },
    )
    .unwrap();
    assert_eq!(db.stats().recovery.unwrap().records_replayed, 3, "the log alone holds the commits");
    assert_eq!(contents(&db).len(), 3);
}

/// A crashed database (a checkpoint, then a log of several files to replay) opened through a
/// file system that fails every operation from the `n`-th on, for every `n` of the open, a scan
/// and the close: each open that succeeds reads the committed model, and the directory each
/// leaves opens with it (durability.md, "Recovery (open)").
#[test]
fn a_fault_at_any_step_of_recovery_after_a_crash_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().join("base");
    let mut model = Model::new();
    {
        let db = Db::open(&base, Options { wal: WalConfig { file_bytes: 8 << 10, ..small().wal }, ..small() }).unwrap();
        commit(&db, &batch(0, 300, 1), &mut model).unwrap();
        db.checkpoint().unwrap();
        for r in 0..6u8 {
            commit(&db, &batch(r as u64 * 40, r as u64 * 40 + 60, 10 + r), &mut model).unwrap();
        }
        let crash = root.path().join("crashed");
        std::fs::create_dir(&crash).unwrap();
        copy_files(&base, &crash);
        std::mem::forget(db);
    }
    let crashed = root.path().join("crashed");
    let mut done = false;
    for n in 0..300u64 {
        let dir = root.path().join(format!("w{n}"));
        std::fs::create_dir(&dir).unwrap();
        copy_files(&crashed, &dir);
        let fs = FaultFs::new();
        fs.faults.ops_left.store(n, Relaxed);
        let outcome = (|| -> tern::Result<()> {
            let db = Db::open_with_fs(&dir, small(), Arc::new(fs.clone()))?;
            let t = db.begin_read()?;
            let mut range = t.range(..)?;
            let got: Model = range.by_ref().collect();
            if let Some(e) = range.take_error() {
                return Err(e);
            }
            assert_eq!(got, model, "step {n}: the open that succeeded");
            drop(range);
            drop(t);
            db.close()
        })();
        let exhausted = fs.faults.ops_left.load(Relaxed) == 0;
        let db = Db::open(&dir, small()).unwrap_or_else(|e| panic!("step {n} ({outcome:?}): reopen: {e}"));
        assert_eq!(contents(&db), model, "step {n} ({outcome:?})");
        db.close().unwrap();
        tern::recovery::check(&dir).unwrap_or_else(|e| panic!("step {n}: check: {e}"));
        std::fs::remove_dir_all(&dir).unwrap();
        if outcome.is_ok() && !exhausted {
            done = true;
            break;
        }
    }
    assert!(done);
}

/// "dropping the last handle does the same [as `Db::close`]" (rustdoc of `Db::close`): in
/// every durability mode, on a mapped and a written log, a drop checkpoints, and the next open
/// replays nothing and holds every commit (once the directory is released: a background
/// checkpoint may hold it a moment).
#[test]
fn dropping_the_last_handle_is_a_clean_close_in_every_durability_mode() {
    let root = tempfile::tempdir().unwrap();
    let modes = [
        (Durability::Sync, true),
        (Durability::NoSync, true),
        (Durability::Periodic(std::time::Duration::from_millis(50)), true),
        (Durability::Sync, false),
        (Durability::NoSync, false),
        (Durability::Periodic(std::time::Duration::from_secs(3600)), false),
    ];
    for (i, (durability, mapped)) in modes.into_iter().enumerate() {
        let dir = root.path().join(format!("db{i}"));
        let options = Options { wal: WalConfig { durability, mapped, ..WalConfig::default() }, ..Options::default() };
        let mut model = Model::new();
        let db = Db::open(&dir, options).unwrap();
        for r in 0..5 {
            commit(&db, &batch(r * 10, r * 10 + 30, r as u8), &mut model).unwrap();
        }
        drop(db);
        let db = loop {
            match Db::open(&dir, options) {
                Err(Error::Locked { .. }) => std::thread::yield_now(),
                other => break other.unwrap(),
            }
        };
        assert_eq!(
            db.stats().recovery.unwrap().records_replayed,
            0,
            "{durability:?} mapped {mapped}: the drop checkpointed"
        );
        assert_eq!(contents(&db), model, "{durability:?} mapped {mapped}");
    }
}

/// Damage other than a torn final record fails the open and `check` with
/// `Error::Corruption` naming the file (or an I/O error naming a missing one), never a panic or
/// an open that drops acknowledged commits (durability.md, "Replay", last paragraph).
#[test]
fn damage_outside_a_torn_tail_fails_open_and_check_naming_the_file() {
    let root = tempfile::tempdir().unwrap();
    let options = Options { wal: WalConfig { file_bytes: 8 << 10, ..small().wal }, ..small() };
    let base = root.path().join("base");
    let mut model = Model::new();
    let db = Db::open(&base, options).unwrap();
    commit(&db, &batch(0, 300, 1), &mut model).unwrap();
    db.checkpoint().unwrap();
    for r in 0..6u8 {
        commit(&db, &batch(r as u64 * 40, r as u64 * 40 + 60, 10 + r), &mut model).unwrap();
    }
    let names = |d: &Path| {
        let mut v: Vec<String> =
            std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    };
    let snap = root.path().join("snap");
    std::fs::create_dir(&snap).unwrap();
    copy_files(&base, &snap);
    std::mem::forget(db);
    let logs: Vec<String> = names(&snap).into_iter().filter(|n| n.starts_with("wal-")).collect();
    type Damage = Box<dyn Fn(&Path)>;
    // Rewrites file `name` of the damaged copy with `f` applied to its bytes.
    let edit = |name: &str, f: fn(&mut Vec<u8>)| -> Damage {
        let name = name.to_string();
        Box::new(move |d: &Path| {
            let p = d.join(&name);
            let mut b = std::fs::read(&p).unwrap();
            f(&mut b);
            std::fs::write(&p, b).unwrap();
        })
    };
    // Does `f` to every checkpoint file of the damaged copy.
    let checkpoints = |f: fn(&Path)| -> Damage {
        Box::new(move |d: &Path| {
            for n in std::fs::read_dir(d).unwrap() {
                let n = n.unwrap();
                if n.file_name().to_string_lossy().ends_with(".ckpt") {
                    f(&n.path());
                }
            }
        })
    };
    let damages: Vec<(&str, Damage)> = vec![
        (
            "middle log removed",
            Box::new({
                let l = logs[1].clone();
                move |d: &Path| std::fs::remove_file(d.join(&l)).unwrap()
            }),
        ),
        ("first log header flipped", edit(&logs[0], |b| b[3] ^= 1)),
        ("first log record flipped", edit(&logs[0], |b| b[100] ^= 1)),
        ("first log cut", edit(&logs[0], |b| b.truncate(b.len() - 5))),
        ("pages removed", Box::new(|d: &Path| std::fs::remove_file(d.join("pages")).unwrap())),
        ("pages cut to 0", edit("pages", Vec::clear)),
        // Two blocks left (`small()` has 4 KiB pages): the durable blocks of the pages past
        // them are lost. (Half of the file would often cut only slot-1 blocks, which the
        // durable checkpoint may not use, since the file is laid out in chunks.)
        ("pages cut after two blocks", edit("pages", |b| b.truncate(8192))),
        (
            "SETTINGS flipped",
            edit("SETTINGS", |b| {
                let i = b.len() / 2;
                b[i] ^= 1;
            }),
        ),
        ("SETTINGS empty", edit("SETTINGS", Vec::clear)),
        ("checkpoint removed", checkpoints(|p| std::fs::remove_file(p).unwrap())),
        ("checkpoint empty", checkpoints(|p| std::fs::write(p, b"").unwrap())),
    ];
    for (i, (what, damage)) in damages.iter().enumerate() {
        let dir = root.path().join(format!("d{i}"));
        std::fs::create_dir(&dir).unwrap();
        copy_files(&snap, &dir);
        damage(&dir);
        let names_the_file = |e: &Error| match e {
            Error::Corruption { file, .. } => !file.is_empty(),
            Error::Io { what, .. } => what.contains("pages"),
            _ => false,
        };
        match Db::open(&dir, small()) {
            Err(e) => assert!(names_the_file(&e), "{what}: {e:?}"),
            // Pages come in on demand: a damaged page file may open, and then a read of a
            // damaged page is the error, never wrong data.
            Ok(db) if what.starts_with("pages") => {
                let t = db.begin_read().unwrap();
                // The scan first applies the replayed writes in its range (deferred replay),
                // which reads pages too.
                let e = match t.range(..) {
                    Err(e) => Some(e),
                    Ok(mut range) => {
                        for (k, v) in range.by_ref() {
                            assert_eq!(model.get(&k), Some(&v), "{what}: a value read is a value written");
                        }
                        range.take_error()
                    }
                };
                assert!(matches!(&e, Some(Error::Corruption { file, .. }) if file == "pages"), "{what}: {e:?}");
            }
            Ok(_) => panic!("{what}: the damaged database opened"),
        }
        let e = tern::recovery::check(&dir).map(drop).unwrap_err();
        assert!(names_the_file(&e), "{what}: check: {e:?}");
    }
}

/// Each writer's transaction `s` sets its five keys and its counter to `s`.
fn group_txn(db: &Db, w: u64, s: u64) -> tern::Result<()> {
    let mut t = db.begin()?;
    for j in 0..5u64 {
        t.put(format!("w{w}/k{j}").as_bytes(), format!("{s:08}").as_bytes())?;
    }
    t.put(format!("w{w}/seq").as_bytes(), format!("{s:08}").as_bytes())?;
    t.commit()
}

/// The counter of writer `w` in `db`'s snapshot `t`, after checking that its five keys agree
/// with it (no partial transaction).
fn group_seq(t: &tern::Txn<'_>, w: u64, what: &str) -> u64 {
    let seq = t.get(format!("w{w}/seq").as_bytes()).unwrap();
    for j in 0..5u64 {
        assert_eq!(
            t.get(format!("w{w}/k{j}").as_bytes()).unwrap(),
            seq,
            "{what}: writer {w} key {j}: a partial transaction"
        );
    }
    seq.map_or(0, |s| String::from_utf8(s).unwrap().parse().unwrap())
}

/// Copies of the directory taken while a writer commits (a crash of the process at that
/// instant; one log file, no checkpoint) hold whole transactions only, and, at `Sync` and
/// `NoSync` (mapped or written log), every commit acknowledged before the copy began
/// (durability.md, "Commit": `NoSync` survives a crash of the process; `Periodic` loses up to
/// an interval, never part of a commit).
#[test]
fn crash_copies_taken_while_a_writer_commits_hold_whole_transactions_and_the_acknowledged_ones() {
    for (durability, mapped) in [
        (Durability::Sync, true),
        (Durability::NoSync, true),
        (Durability::NoSync, false),
        (Durability::Periodic(std::time::Duration::from_millis(2)), false),
        (Durability::Periodic(std::time::Duration::from_millis(2)), true),
    ] {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("db");
        let options = Options {
            wal: WalConfig { durability, mapped, checkpoint_bytes: u64::MAX, ..WalConfig::default() },
            ..Options::default()
        };
        let db = Db::open(&dir, options).unwrap();
        let acked = std::sync::atomic::AtomicU64::new(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut results = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut seq = 1;
                while !stop.load(Relaxed) {
                    group_txn(&db, 0, seq).unwrap();
                    acked.store(seq, Relaxed);
                    seq += 1;
                }
            });
            for c in 0..8 {
                while acked.load(Relaxed) < 20 * (c + 1) {
                    std::thread::yield_now();
                }
                let before = acked.load(Relaxed);
                let copy = root.path().join(format!("copy{c}"));
                std::fs::create_dir(&copy).unwrap();
                copy_files(&dir, &copy);
                results.push((copy, before));
            }
            stop.store(true, Relaxed);
        });
        for (copy, before) in results {
            let db = Db::open(&copy, options).unwrap();
            let got = group_seq(&db.begin_read().unwrap(), 0, &format!("{durability:?}"));
            if !matches!(durability, Durability::Periodic(_)) {
                assert!(
                    got >= before,
                    "{durability:?} mapped {mapped}: copy has {got}, {before} acknowledged before it"
                );
            }
        }
    }
}

/// A close whose checkpoint cannot write (EIO, a full disk) or sync reports the error, releases
/// the directory, and the reopened database holds every commit (rustdoc of `Db::close`:
/// "reporting any error"; durability.md: a failed checkpoint loses nothing).
#[test]
fn a_close_that_cannot_checkpoint_reports_it_and_loses_nothing() {
    for fault in ["page writes", "full disk", "syncs"] {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("db");
        let fs = FaultFs::new();
        // A cache the data fits in: the evictor has no reason to write the pages back before
        // the close's checkpoint must (with a 16-frame pool it sometimes wrote them all first,
        // and the checkpoint, with nothing to write, succeeded).
        let options = Options {
            wal: WalConfig { checkpoint_on_close: true, durability: Durability::NoSync, ..small().wal },
            cache_bytes: 16 << 20,
            ..small()
        };
        let db = Db::open_with_fs(&dir, options, Arc::new(fs.clone())).unwrap();
        let mut model = Model::new();
        commit(&db, &batch(0, 800, 1), &mut model).unwrap();
        assert!(db.stats().buffer.dirty_pages > 0, "{fault}: the close's checkpoint has pages to write");
        match fault {
            "page writes" => fs.faults.fail_page_writes.store(true, Relaxed),
            "full disk" => fs.faults.space_left.store(0, Relaxed),
            _ => fs.faults.fail_syncs.store(true, Relaxed),
        }
        let close = db.close();
        assert!(matches!(close, Err(Error::Io { .. } | Error::CommitNotDurable { .. })), "{fault}: {close:?}");
        let db = Db::open(&dir, small()).unwrap_or_else(|e| panic!("{fault}: reopen: {e}"));
        assert_eq!(contents(&db), model, "{fault}");
        db.close().unwrap();
        tern::recovery::check(&dir).unwrap();
    }
}

/// Checkpoints and backups beside three writers and a reader (a 64-frame pool, small log
/// files): readers never see part of a transaction, each backup holds every commit acknowledged
/// before it began, and after the close the reopened database holds each writer's last commit.
#[test]
fn checkpoints_backups_and_close_beside_writers_and_readers_hold_every_acknowledged_commit() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("db");
    let options = Options {
        wal: WalConfig {
            durability: Durability::NoSync,
            checkpoint_bytes: 256 << 10,
            file_bytes: 64 << 10,
            ..WalConfig::default()
        },
        cache_bytes: 256 << 10,
        tree: TreeConfig { page_size: 4096, ..TreeConfig::default() },
        ..Options::default()
    };
    let db = Db::open(&dir, options).unwrap();
    let writers = 3u64;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let acked: Vec<std::sync::atomic::AtomicU64> = (0..writers).map(|_| std::sync::atomic::AtomicU64::new(0)).collect();
    let mut backups = Vec::new();
    std::thread::scope(|s| {
        for w in 0..writers {
            let (db, stop, acked) = (&db, &stop, &acked);
            s.spawn(move || {
                let mut seq = 1;
                while !stop.load(Relaxed) {
                    group_txn(db, w, seq).unwrap();
                    // Filler, so that pages are evicted and checkpoints have work.
                    let mut t = db.begin().unwrap();
                    t.put(format!("fill/{w}/{}", seq % 500).as_bytes(), &[seq as u8; 200]).unwrap();
                    t.commit().unwrap();
                    acked[w as usize].store(seq, Relaxed);
                    seq += 1;
                }
            });
        }
        {
            let (db, stop) = (&db, &stop);
            s.spawn(move || {
                while !stop.load(Relaxed) {
                    let t = db.begin_read().unwrap();
                    for w in 0..writers {
                        group_seq(&t, w, "reader");
                    }
                }
            });
        }
        for b in 0..3 {
            db.checkpoint().unwrap();
            let before: Vec<u64> = acked.iter().map(|a| a.load(Relaxed)).collect();
            let dst = root.path().join(format!("backup{b}"));
            db.backup(&dst).unwrap();
            backups.push((dst, before));
            while acked.iter().all(|a| a.load(Relaxed) < 200 * (b + 1)) {
                std::thread::yield_now();
            }
        }
        stop.store(true, Relaxed);
    });
    let last: Vec<u64> = acked.iter().map(|a| a.load(Relaxed)).collect();
    assert!(db.stats().checkpoints.written >= 3);
    db.close().unwrap();
    let db = Db::open(&dir, options).unwrap();
    let t = db.begin_read().unwrap();
    for w in 0..writers {
        assert_eq!(group_seq(&t, w, "reopened"), last[w as usize]);
    }
    drop(t);
    db.close().unwrap();
    tern::recovery::check(&dir).unwrap();
    for (dst, before) in backups {
        let db = Db::open(&dst, options).unwrap();
        let t = db.begin_read().unwrap();
        for w in 0..writers {
            assert!(group_seq(&t, w, "backup") >= before[w as usize]);
        }
    }
}
