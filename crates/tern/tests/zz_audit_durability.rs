//! An outside audit of durability, crash recovery and fault handling: what README.md,
//! docs/durability.md and the rustdoc promise, checked through the public API only.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tern::fs::FaultFs;
use tern::{Db, Durability, Options, WalConfig};

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
