//! Hot backup: `Db::backup` while writers run gives a copy that opens with every commit
//! acknowledged before the backup began, whole transactions only; the destination appears whole
//! or not at all.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use tern::fs::FaultFs;
use tern::{Db, Error, Options, WalConfig};

/// Small log files and frequent checkpoints, pages evicted all the time: the backup runs
/// beside checkpoints, log rotation and eviction.
fn busy_options() -> Options {
    Options {
        cache_bytes: 0,
        tree: tern::btree::TreeConfig { page_size: 4096, ..Default::default() },
        wal: WalConfig { file_bytes: 64 << 10, checkpoint_bytes: 256 << 10, ..WalConfig::default() },
        ..Options::default()
    }
}

fn key(writer: u64, n: u64) -> Vec<u8> {
    format!("w{writer}/{n:08}").into_bytes()
}

/// Checks writer `w`'s keys in `db`: `last/w` = L and exactly `w/0..=L` present; returns L.
fn last_of(db: &Db, w: u64) -> u64 {
    let read = db.begin_read().unwrap();
    let table = db.table("data").unwrap();
    let last =
        read.get(format!("last/{w}").as_bytes()).unwrap().map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
    let prefix = format!("w{w}/");
    let from = prefix.clone().into_bytes();
    let n = read
        .range_in(&table, from.as_slice()..)
        .unwrap()
        .take_while(|(k, _)| k.starts_with(prefix.as_bytes()))
        .enumerate()
        .map(|(i, (k, v))| {
            assert_eq!(k, key(w, i as u64 + 1), "writer {w}'s keys are 1..=last, none missing");
            assert_eq!(v, (i as u64 + 1).to_le_bytes(), "values are whole");
        })
        .count() as u64;
    assert_eq!(n, last, "writer {w}: last/{w} and its keys come from the same transactions");
    last
}

#[test]
fn a_backup_made_while_writers_run_holds_every_commit_acknowledged_before_it() {
    let root = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(root.path().join("db"), busy_options()).unwrap());
    db.create_table("data").unwrap();
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..2).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let table = db.table("data").unwrap();
                let mut n = 0;
                while !stop.load(SeqCst) {
                    n += 1;
                    let mut t = db.begin().unwrap();
                    t.put_in(&table, &key(w, n), &n.to_le_bytes()).unwrap();
                    t.put(format!("last/{w}").as_bytes(), &n.to_le_bytes()).unwrap();
                    t.commit().unwrap();
                    acked[w as usize].store(n, SeqCst);
                }
            })
        })
        .collect();
    while acked.iter().any(|a| a.load(SeqCst) < 2000) {
        std::thread::yield_now();
    }
    let mut copies = Vec::new();
    for round in 0..3 {
        let before: Vec<u64> = acked.iter().map(|a| a.load(SeqCst)).collect();
        let dst = root.path().join(format!("copy{round}"));
        let info = db.backup(&dst).unwrap();
        assert_eq!(info.tables, 2);
        assert!(info.entries as u64 >= before.iter().sum::<u64>(), "{info:?}");
        copies.push((dst, before));
    }
    stop.store(true, SeqCst);
    writers.into_iter().for_each(|w| w.join().unwrap());
    for (dst, before) in copies {
        assert!(!root.path().join(format!(".{}.backup-tmp", dst.file_name().unwrap().to_str().unwrap())).exists());
        let copy = Db::open(&dst, Options::default()).unwrap();
        assert_eq!(copy.stats().recovery.unwrap().records_replayed, 0, "a copy has nothing to replay");
        for (w, &acked_before) in before.iter().enumerate() {
            let last = last_of(&copy, w as u64);
            assert!(last >= acked_before, "writer {w}: {last} in the copy, {acked_before} acknowledged before");
        }
        // The copy is a database of its own: it takes writes and keeps them.
        let mut t = copy.begin().unwrap();
        t.put(b"after", b"1").unwrap();
        t.commit().unwrap();
        copy.close().unwrap();
        assert_eq!(
            Db::open(&dst, Options::default()).unwrap().begin_read().unwrap().get(b"after").unwrap(),
            Some(b"1".to_vec())
        );
        assert!(tern::recovery::check(&dst).is_ok());
    }
    // The source went on and is intact.
    let db = Arc::try_unwrap(db).ok().unwrap();
    let lasts: Vec<u64> = (0..2).map(|w| last_of(&db, w)).collect();
    db.close().unwrap();
    let db = Db::open(root.path().join("db"), busy_options()).unwrap();
    assert_eq!((0..2).map(|w| last_of(&db, w)).collect::<Vec<_>>(), lasts);
}

#[test]
fn a_backup_goes_to_a_new_directory() {
    let root = tempfile::tempdir().unwrap();
    let db = Db::open(root.path().join("db"), Options::default()).unwrap();
    let inside = root.path().join("db").join("copy");
    for dst in [root.path().join("db"), root.path().to_path_buf(), root.path().join("no/such/parent"), inside] {
        let err = db.backup(&dst).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{}: {err}", dst.display());
    }
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1, "nothing was created");
    let files = std::fs::read_dir(root.path().join("db")).unwrap().count();
    drop(db);
    // Two threads backing up to the same destination: one wins, the other is refused or
    // finds it taken; the copy is whole either way.
    let db = Db::open(root.path().join("db"), Options::default()).unwrap();
    let mut t = db.begin().unwrap();
    for i in 0..2000u32 {
        t.put(&i.to_be_bytes(), &[1; 64]).unwrap();
    }
    t.commit().unwrap();
    let dst = root.path().join("shared");
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2).map(|_| s.spawn(|| db.backup(&dst))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().any(|r| r.is_ok()), "{results:?}");
    let copy = Db::open(&dst, Options::default()).unwrap();
    assert_eq!(copy.begin_read().unwrap().range(..).unwrap().count(), 2000);
    assert!(files > 0);
}

/// An error at any step of a backup (each file-system operation in turn fails, as a crash
/// there would stop it) leaves no destination, or (when only syncing its parent directory
/// failed) a complete one, never one that opens with part of the data; the next backup to the
/// same place succeeds.
#[test]
fn a_backup_cut_short_at_any_step_leaves_no_destination() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let db = Db::open_with_fs(root.path().join("db"), Options::default(), Arc::new(fs.clone())).unwrap();
    let mut t = db.begin().unwrap();
    for i in 0..1000u32 {
        t.put(&i.to_be_bytes(), &[7; 100]).unwrap();
    }
    t.commit().unwrap();
    let dst = root.path().join("copy");
    let mut failures = 0;
    for step in 0.. {
        fs.faults.ops_left.store(step, SeqCst);
        let result = db.backup(&dst);
        fs.faults.ops_left.store(u64::MAX, SeqCst);
        match result {
            Err(e) => {
                if dst.exists() {
                    // Only syncing the parent after the rename is left: the copy is complete.
                    assert!(e.to_string().contains("syncing directory"), "step {step}: {e}: a partial destination");
                    let copy = Db::open(&dst, Options::default()).unwrap();
                    assert_eq!(copy.begin_read().unwrap().range(..).unwrap().count(), 1000, "step {step}");
                    copy.close().unwrap();
                    std::fs::remove_dir_all(&dst).unwrap();
                }
                failures += 1;
            }
            Ok(_) => break,
        }
    }
    assert!(failures >= 8, "each step of the backup was cut in turn ({failures})");
    let copy = Db::open(&dst, Options::default()).unwrap();
    assert_eq!(copy.begin_read().unwrap().range(..).unwrap().count(), 1000);
    // A staging directory the failing file system would not let the backup remove may stay,
    // hidden and named for the backup; nothing else.
    for entry in std::fs::read_dir(root.path()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(name == "db" || name == "copy" || name.starts_with(".copy.backup-"), "{name}");
    }
}

#[test]
fn a_temporary_database_backs_up_to_disk() {
    let root = tempfile::tempdir().unwrap();
    let db = Db::open_temporary(Options::default()).unwrap();
    let table = db.create_table("t").unwrap();
    let mut t = db.begin().unwrap();
    t.put(b"k", b"v").unwrap();
    t.put_in(&table, b"k2", b"v2").unwrap();
    t.commit().unwrap();
    let dst = root.path().join("saved");
    db.backup(&dst).unwrap();
    let copy = Db::open(&dst, Options::default()).unwrap();
    let read = copy.begin_read().unwrap();
    assert_eq!(read.get(b"k").unwrap(), Some(b"v".to_vec()));
    assert_eq!(read.get_in(&copy.table("t").unwrap(), b"k2").unwrap(), Some(b"v2".to_vec()));
    assert_eq!(copy.options().tree.page_size, db.options().tree.page_size);
}

/// A backup's copy holds a logical checkpoint, which every open loads entry by entry: its first
/// checkpoint (asked for, or the one at close) turns it into a page checkpoint even though
/// nothing was logged, and opens from then on load no entries.
#[test]
fn the_first_checkpoint_of_a_copy_turns_it_into_a_page_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("src"), Options::default()).unwrap();
    let mut txn = db.begin().unwrap();
    for i in 0..3000u32 {
        txn.put(format!("key{i:05}").as_bytes(), &[i as u8; 200]).unwrap();
    }
    txn.commit().unwrap();
    for (copy, ask) in [("asked", true), ("closed", false)] {
        let copy = dir.path().join(copy);
        db.backup(&copy).unwrap();
        let opened = Db::open(&copy, Options::default()).unwrap();
        let recovery = opened.stats().recovery.unwrap();
        assert_eq!((recovery.checkpoint_entries, recovery.checkpoint_pages), (3000, 0), "a logical checkpoint");
        if ask {
            let info = opened.checkpoint().unwrap().expect("written although nothing was logged");
            // Its pages may be on disk already (the load writes them behind itself).
            assert!(info.pages > 0, "{info:?}");
            assert!(opened.checkpoint().unwrap().is_none(), "then nothing to write");
        }
        opened.close().unwrap();
        let reopened = Db::open(&copy, Options::default()).unwrap();
        let recovery = reopened.stats().recovery.unwrap();
        assert_eq!(recovery.checkpoint_entries, 0, "no entries loaded");
        assert!(recovery.checkpoint_pages > 0);
        let read = reopened.begin_read().unwrap();
        assert_eq!(read.range(..).unwrap().count(), 3000);
        assert_eq!(read.get(b"key02999").unwrap(), Some(vec![2999u32 as u8; 200]));
        drop(read);
        reopened.close().unwrap();
        let files: Vec<String> =
            std::fs::read_dir(&copy).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(
            files.iter().filter(|f| f.ends_with(".ckpt")).count(),
            1,
            "the logical checkpoint removed: {files:?}"
        );
        let report = tern::recovery::check(&copy).unwrap();
        assert_eq!(report.tables[0].entries, 3000);
    }
}
