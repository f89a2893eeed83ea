//! `Db::load_table`: a table created from sorted input, whole or not at all, durable by a
//! checkpoint instead of the log.

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tern::{Db, Error, Options, WalConfig};

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    let mut v = vec![(i % 251) as u8; 100];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

fn entries(n: u64) -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> {
    (0..n).map(|i| (key(i), value(i)))
}

/// No checkpoint on its own: only `load_table` (and close) write one.
fn options() -> Options {
    Options {
        cache_bytes: 64 << 20,
        wal: WalConfig { checkpoint_bytes: u64::MAX, checkpoint_on_close: false, ..WalConfig::default() },
        ..Options::default()
    }
}

fn contents(db: &Db, table: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let t = db.begin_read().unwrap();
    let table = t.table(table).unwrap();
    let all = t.range_in(&table, ..).unwrap().collect();
    all
}

/// Copies a database's files, not its lock: what a crash at this instant leaves.
fn crash_copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in std::fs::read_dir(from).unwrap() {
        let f = f.unwrap();
        if f.file_name() != "LOCK" {
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
    }
}

#[test]
fn a_loaded_table_holds_its_entries_and_takes_writes() {
    let db = Db::open_temporary(Options::default()).unwrap();
    let table = db.load_table("t", entries(50_000)).unwrap();
    assert_eq!(db.table_names(), vec!["".to_string(), "t".to_string()]);
    assert_eq!(contents(&db, "t"), entries(50_000).collect::<Vec<_>>());
    let mut t = db.begin().unwrap();
    t.put_in(&table, &key(7), b"new").unwrap();
    t.put_in(&table, b"zzz", b"after the end").unwrap();
    assert!(t.delete_in(&table, &key(8)).unwrap());
    t.commit().unwrap();
    let r = db.begin_read().unwrap();
    assert_eq!(r.get_in(&table, &key(7)).unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(r.get_in(&table, &key(8)).unwrap(), None);
    assert_eq!(r.get_in(&table, &key(9)).unwrap(), Some(value(9)));
    assert_eq!(r.range_in(&table, ..).unwrap().count(), 50_000);
    drop(r);
    // Values of any accepted size: overflow pages for the large ones.
    let big: Vec<(Vec<u8>, Vec<u8>)> = (0..5u64).map(|i| (key(i), vec![i as u8; 300_000 * i as usize])).collect();
    db.load_table("big", big.clone()).unwrap();
    assert_eq!(contents(&db, "big"), big);
    // An empty load is an empty table.
    db.load_table("empty", std::iter::empty::<(Vec<u8>, Vec<u8>)>()).unwrap();
    assert!(contents(&db, "empty").is_empty());
}

#[test]
fn bad_input_creates_nothing() {
    let db = Db::open_temporary(Options::default()).unwrap();
    let unsorted = vec![(key(2), value(2)), (key(1), value(1))];
    assert!(matches!(db.load_table("t", unsorted), Err(Error::InvalidArgument(_))));
    let repeated = vec![(key(1), value(1)), (key(1), value(2))];
    assert!(matches!(db.load_table("t", repeated), Err(Error::InvalidArgument(_))));
    let empty_key = vec![(Vec::new(), value(1))];
    assert!(matches!(db.load_table("t", empty_key), Err(Error::KeyEmpty)));
    assert!(matches!(db.load_table("", entries(3)), Err(Error::InvalidArgument(_))));
    assert_eq!(db.table_names(), vec!["".to_string()], "no table from a failed load");
    assert!(matches!(db.table("t"), Err(Error::NoSuchTable { .. })));
    // The name is still free, by either way of creating a table.
    db.load_table("t", entries(10)).unwrap();
    assert!(matches!(db.load_table("t", entries(10)), Err(Error::TableExists { .. })));
    assert!(matches!(db.create_table("t"), Err(Error::TableExists { .. })));
    db.create_table("u").unwrap();
    assert_eq!(db.table_names(), vec!["".to_string(), "t".to_string(), "u".to_string()]);
}

#[test]
fn a_loaded_table_is_durable_when_the_call_returns_without_the_log() {
    let root = tempfile::tempdir().unwrap();
    let (dir, crashed) = (root.path().join("db"), root.path().join("crashed"));
    {
        let db = Db::open(&dir, options()).unwrap();
        let mut t = db.begin().unwrap();
        t.put(b"before", b"1").unwrap();
        t.commit().unwrap();
        // Nothing logged after this checkpoint: the load's own must run anyway.
        db.checkpoint().unwrap().unwrap();
        let wal_before = db.stats().wal.unwrap().records;
        let table = db.load_table("loaded", entries(200_000)).unwrap();
        assert_eq!(db.stats().wal.unwrap().records, wal_before, "the entries are not logged");
        // A write to the loaded table after it: in the log, replayed on top of the checkpoint.
        let mut t = db.begin().unwrap();
        t.put_in(&table, &key(3), b"updated").unwrap();
        t.commit().unwrap();
        db.create_table("later").unwrap();
        crash_copy(&dir, &crashed);
        db.close().unwrap();
    }
    for path in [&crashed, &dir] {
        let db = Db::open(path, options()).unwrap();
        let mut want: Vec<_> = entries(200_000).collect();
        want[3].1 = b"updated".to_vec();
        assert_eq!(contents(&db, "loaded"), want, "{}", path.display());
        assert_eq!(db.table_names(), vec!["", "loaded", "later"]);
        assert_eq!(db.begin_read().unwrap().get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
        drop(db);
        tern::recovery::check(path).unwrap();
    }
}

#[test]
fn a_load_whose_checkpoint_fails_leaves_no_table_now_or_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let fs = tern::fs::FaultFs::new();
        let db = Db::open_with_fs(dir.path(), options(), Arc::new(fs.clone())).unwrap();
        db.create_table("first").unwrap();
        fs.faults.fail_page_writes.store(true, Relaxed);
        let err = db.load_table("loaded", entries(100_000)).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
        fs.faults.fail_page_writes.store(false, Relaxed);
        assert!(matches!(db.table("loaded"), Err(Error::NoSuchTable { .. })));
        assert_eq!(db.table_names(), vec!["", "first"]);
        // The id and the name are free again; the next checkpoint does not carry the failed table.
        db.create_table("second").unwrap();
        db.checkpoint().unwrap().unwrap();
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(db.table_names(), vec!["", "first", "second"]);
    drop(db);
    tern::recovery::check(dir.path()).unwrap();
}

/// Input that is accepted for `good` entries and then fails (out of order), with values that
/// need overflow pages every 7th key so that chains are pending when it fails.
fn failing_after(good: u64) -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> {
    let big = |i: u64| if i % 7 == 0 { vec![i as u8; 9000] } else { value(i) };
    (0..good).map(move |i| (key(i), big(i))).chain([(key(0), value(0))])
}

#[test]
fn a_load_that_fails_half_way_leaves_no_page_allocated() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), options()).unwrap();
        let pages = |db: &Db| db.stats().buffer.live_pages;
        let before = pages(&db);
        // Failing after many leaves, after fewer, and at the first entry (bad input can only
        // fail while the leaves are built; an inner level fails only on an I/O error).
        for good in [60_000, 30_000, 1] {
            let err = db.load_table("t", failing_after(good)).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
            assert_eq!(pages(&db), before, "pages freed after failing at entry {good}");
        }
        let too_long = entries(5000).chain([(vec![b'z'; 100_000], value(1))]);
        let err = db.load_table("t", too_long).unwrap_err();
        assert!(matches!(err, Error::KeyTooLarge { .. }), "{err}");
        assert_eq!(pages(&db), before);
        assert!(db.table_names() == vec![""]);
        db.load_table("t", entries(1000)).unwrap();
        db.close().unwrap();
    }
    // `check` walks every table and the free list: a page neither reachable nor free fails it.
    tern::recovery::check(dir.path()).unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(contents(&db, "t"), entries(1000).collect::<Vec<_>>());
}

#[test]
fn loaded_pages_are_written_while_the_load_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    db.load_table("t", entries(200_000)).unwrap();
    let buffer = db.stats().buffer;
    // The checkpoint found them clean: the write-behind thread wrote them (the checkpoint's own
    // writes are not write-backs, and a 64 MiB cache never evicts this table's ~1,700 pages).
    assert!(buffer.write_backs * 4 >= buffer.live_pages * 3, "{buffer:?}");
    assert_eq!(buffer.dirty_pages, 0, "{buffer:?}");
    drop(db);
    tern::recovery::check(dir.path()).unwrap();
}
