//! An outside audit of durability, crash recovery and fault handling: what README.md,
//! docs/durability.md and the rustdoc promise, checked through the public API only.

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tern::fs::FaultFs;
use tern::{Db, Durability, Error, Options, WalConfig};

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
