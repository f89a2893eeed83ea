//! Page checkpoints: a checkpoint taken while writers and the evictor run holds the database
//! at its snapshot, writes only what changed, and opens without loading the data.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use tern::btree::TreeConfig;
use tern::{Db, Durability, Options, WalConfig};

/// 4 KiB pages in a 16-frame cache, so almost every page lives on disk; checkpoints only when
/// asked; writes acknowledged without waiting for the disk (the test never crashes).
fn options() -> Options {
    Options {
        tree: TreeConfig { page_size: 4096, ..TreeConfig::default() },
        cache_bytes: 64 << 10,
        wal: WalConfig {
            durability: Durability::NoSync,
            checkpoint_bytes: u64::MAX,
            checkpoint_on_close: false,
            ..WalConfig::default()
        },
        ..Options::default()
    }
}

fn value(thread: u64, i: u64, round: u64) -> Vec<u8> {
    let len = 20 + (i * 7 + round) % 180;
    format!("{thread}/{i}/{round}/").into_bytes().into_iter().cycle().take(len as usize).collect()
}

/// Each thread owns keys `t/<thread>/<i>`: the model is what the last write of each left.
fn writer(db: &Db, thread: u64, rounds: u64, keys: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = BTreeMap::new();
    let mut x = thread * 7919 + 1;
    for round in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = x % keys;
        let key = format!("t/{thread}/{i:06}").into_bytes();
        let mut t = db.begin().unwrap();
        if x % 5 == 0 {
            t.delete(&key).unwrap();
            t.commit().unwrap();
            model.remove(&key);
        } else {
            let v = value(thread, i, round);
            t.put(&key, &v).unwrap();
            t.commit().unwrap();
            model.insert(key, v);
        }
    }
    // Then most keys go: leaves merge and pages are freed while checkpoints capture.
    for i in (0..keys).filter(|i| i % 10 != 0) {
        let key = format!("t/{thread}/{i:06}").into_bytes();
        let mut t = db.begin().unwrap();
        t.delete(&key).unwrap();
        t.commit().unwrap();
        model.remove(&key);
    }
    model
}

fn contents(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.begin_read().unwrap().range(..).unwrap().collect()
}

/// The first difference between two states, readable.
fn first_difference(got: &BTreeMap<Vec<u8>, Vec<u8>>, want: &BTreeMap<Vec<u8>, Vec<u8>>) -> Option<String> {
    let show = |v: Option<&Vec<u8>>| v.map(|v| String::from_utf8_lossy(&v[..v.len().min(24)]).into_owned());
    let keys: std::collections::BTreeSet<&Vec<u8>> = got.keys().chain(want.keys()).collect();
    let differs = keys.into_iter().filter(|k| got.get(*k) != want.get(*k)).collect::<Vec<_>>();
    let k = differs.first()?;
    Some(format!(
        "{} keys differ; first {}: got {:?}, want {:?}",
        differs.len(),
        String::from_utf8_lossy(k),
        show(got.get(*k)),
        show(want.get(*k))
    ))
}

#[test]
fn checkpoints_beside_writers_and_the_evictor_hold_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), options()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let checkpointer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Relaxed) {
                if db.checkpoint().unwrap().is_some() {
                    n += 1;
                }
            }
            n
        })
    };
    let writers: Vec<_> = (0..3)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || writer(&db, t, 6000, 2000))
        })
        .collect();
    let mut model = BTreeMap::new();
    for w in writers {
        model.extend(w.join().unwrap());
    }
    stop.store(true, Relaxed);
    let checkpoints = checkpointer.join().unwrap();
    assert!(checkpoints >= 2, "{checkpoints} checkpoints ran beside the writers");
    assert_eq!(first_difference(&contents(&db), &model), None, "the running database");
    let stats = db.stats();
    assert!(stats.buffer.evictions > 0, "{:?}", stats.buffer);
    // The last checkpoint plus the log after it.
    Arc::into_inner(db).unwrap().close().unwrap();
    let report = tern::recovery::check(dir.path()).unwrap();
    assert_eq!(report.pages_live, report.pages_in_tables, "no page lost to no table: {}", report.recovery);
    let db = Db::open(dir.path(), options()).unwrap();
    let r = db.stats().recovery.unwrap();
    assert!(r.checkpoint_pages > 0 && r.checkpoint_entries == 0, "opened from a page checkpoint: {r}");
    assert_eq!(first_difference(&contents(&db), &model), None, "after reopening: {r}");
    // A checkpoint with nothing after it: the pages alone hold everything.
    db.checkpoint().unwrap();
    db.close().unwrap();
    let report = tern::recovery::check(dir.path()).unwrap();
    assert_eq!(report.recovery.records_replayed, 0, "{}", report.recovery);
    assert_eq!(report.pages_checked, report.recovery.checkpoint_pages, "every block of the map is checked");
    assert_eq!(report.pages_live, report.pages_in_tables);
    let db = Db::open(dir.path(), options()).unwrap();
    let r = db.stats().recovery.unwrap();
    assert_eq!(r.records_replayed, 0, "{r}");
    assert_eq!(first_difference(&contents(&db), &model), None, "from the pages alone: {r}");
}

#[test]
fn a_checkpoint_writes_the_pages_that_changed_not_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let big_cache = || Options { cache_bytes: 16 << 20, ..options() };
    let db = Db::open(dir.path(), big_cache()).unwrap();
    for chunk in 0..20u64 {
        let mut t = db.begin().unwrap();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            t.put(format!("key{i:08}").as_bytes(), &[i as u8; 100]).unwrap();
        }
        t.commit().unwrap();
    }
    let first = db.checkpoint().unwrap().unwrap();
    assert_eq!(first.pages_written, first.pages, "the first checkpoint writes every page");
    for i in (0..20_000u64).step_by(2000) {
        let mut t = db.begin().unwrap();
        t.put(format!("key{i:08}").as_bytes(), b"changed").unwrap();
        t.commit().unwrap();
    }
    db.gc();
    let second = db.checkpoint().unwrap().unwrap();
    assert!(second.pages_written <= 12, "10 updates rewrote {} of {} pages", second.pages_written, second.pages);
    assert!(second.bytes < first.bytes / 20, "{} bytes vs {}", second.bytes, first.bytes);
    assert_eq!(db.stats().checkpoints.last_bytes, second.bytes);
    db.close().unwrap();
    let db = Db::open(dir.path(), big_cache()).unwrap();
    let r = db.stats().recovery.unwrap();
    assert_eq!((r.records_replayed, r.checkpoint_pages), (0, second.pages), "{r}");
    assert_eq!(db.stats().buffer.reads, 0, "opening read no page");
    let t = db.begin_read().unwrap();
    assert_eq!(t.get(b"key00002000").unwrap().as_deref(), Some(&b"changed"[..]));
    assert_eq!(t.get(b"key00002001").unwrap(), Some(vec![2001u64 as u8; 100]));
    assert_eq!(t.range(..).unwrap().count(), 20_000);
}

/// Values too large for a leaf live in overflow pages of the file once folded, like the
/// others: a checkpoint writes the pages they changed, not every large value beside its page
/// map, and they need no memory once evicted.
#[test]
fn large_values_are_pages_on_disk_and_a_checkpoint_writes_only_those_that_changed() {
    let dir = tempfile::tempdir().unwrap();
    let big = |i: u64, round: u64| vec![(i + round) as u8; 1500 + (i as usize % 7) * 3000];
    let db = Db::open(dir.path(), options()).unwrap();
    let mut want = BTreeMap::new();
    for i in 0..200u64 {
        let mut t = db.begin().unwrap();
        t.put(format!("big{i:04}").as_bytes(), &big(i, 0)).unwrap();
        t.commit().unwrap();
        want.insert(format!("big{i:04}").into_bytes(), big(i, 0));
    }
    db.gc();
    assert_eq!(db.stats().gc.versions_live, 0, "every large value folded into pages");
    let first = db.checkpoint().unwrap().unwrap();
    for i in (0..200u64).step_by(50) {
        let mut t = db.begin().unwrap();
        t.put(format!("big{i:04}").as_bytes(), &big(i, 1)).unwrap();
        t.commit().unwrap();
        want.insert(format!("big{i:04}").into_bytes(), big(i, 1));
    }
    db.gc();
    let second = db.checkpoint().unwrap().unwrap();
    // Four values of at most 19.5 KB: their leaves and a few 4 KiB overflow pages each.
    assert!(second.pages_written <= 30, "4 updates rewrote {} of {} pages", second.pages_written, second.pages);
    assert!(first.pages > 600, "the values' pages are in the checkpoint: {first:?}");
    let map = dir.path().join(&second.file);
    assert!(std::fs::metadata(&map).unwrap().len() < 64 << 10, "no large value beside the page map");
    db.close().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(db.stats().recovery.unwrap().checkpoint_entries, 0);
    assert_eq!(first_difference(&contents(&db), &want), None);
    db.close().unwrap();
    tern::recovery::check(dir.path()).unwrap();
}

/// A checkpoint taken while a reader holds versions holds chains; the next open folds them
/// back into their leaves (they were restored as versions for good before: every later
/// checkpoint wrote their values again beside its map, every open restored them).
#[test]
fn chains_a_checkpoint_holds_are_folded_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let big_cache = || Options { cache_bytes: 16 << 20, ..options() };
    let key = |i: u32| format!("key{i:05}").into_bytes();
    // Some values past a quarter page (overflow pages once folded); some keys deleted.
    let value = |i: u32, round: u8| vec![round; if i % 50 == 0 { 3000 } else { 100 }];
    let mut want = BTreeMap::new();
    let db = Db::open(dir.path(), big_cache()).unwrap();
    let other = db.create_table("other").unwrap();
    let reader = db.begin_read().unwrap();
    for round in 1..3u8 {
        let mut t = db.begin().unwrap();
        for i in 0..3000u32 {
            if round == 2 && i % 7 == 0 {
                t.delete(&key(i)).unwrap();
                want.remove(&key(i));
            } else {
                t.put(&key(i), &value(i, round)).unwrap();
                want.insert(key(i), value(i, round));
            }
            if i % 3 == 0 {
                t.put_in(&other, &key(i), &[round; 40]).unwrap();
            }
        }
        t.commit().unwrap();
    }
    let first = db.checkpoint().unwrap().unwrap();
    let map_bytes = |db_dir: &std::path::Path, file: &str| std::fs::metadata(db_dir.join(file)).unwrap().len();
    assert!(map_bytes(dir.path(), &first.file) > 200 << 10, "the chains' values are beside the map");
    drop(reader);
    db.gc();
    // Closed without a checkpoint (`checkpoint_on_close` off), as a crash leaves it. `check`
    // recovers it read-only: the folding (overflow pages included) stays in memory.
    db.close().unwrap();
    let before = tern::recovery::check(dir.path()).unwrap();
    assert_eq!(before.tables[0].entries as usize, want.len());
    let db = Db::open(dir.path(), big_cache()).unwrap();
    assert_eq!(first_difference(&contents(&db), &want), None);
    let others = db.begin_read().unwrap().range_in(&db.table("other").unwrap(), ..).unwrap().count();
    assert_eq!(others, 1000);
    // Nothing logged since the open, yet the folded leaves are written.
    let second = db.checkpoint().unwrap().expect("the open left a checkpoint due");
    assert!(map_bytes(dir.path(), &second.file) < 32 << 10, "no chain left to write beside the map: {second:?}");
    db.close().unwrap();
    let db = Db::open(dir.path(), big_cache()).unwrap();
    assert_eq!(first_difference(&contents(&db), &want), None);
    db.close().unwrap();
    let report = tern::recovery::check(dir.path()).unwrap();
    assert_eq!(report.tables[0].entries as usize, want.len());
}

fn fill(db: &Db, from: u64, to: u64, tag: u8) {
    let mut t = db.begin().unwrap();
    for i in from..to {
        t.put(format!("key{i:08}").as_bytes(), &[tag; 100]).unwrap();
    }
    t.commit().unwrap();
}

/// A database of `chunks` thousand keys (`key<i>`, values of 100 bytes 1), checkpointed.
fn checkpointed(chunks: u64) -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    for chunk in 0..chunks {
        fill(&db, chunk * 1000, (chunk + 1) * 1000, 1);
    }
    db.checkpoint().unwrap().unwrap();
    (dir, db)
}

fn faulty(dir: &std::path::Path, options: Options) -> (Db, tern::fs::FaultFs) {
    let fs = tern::fs::FaultFs::new();
    (Db::open_with_fs(dir, options, Arc::new(fs.clone())).unwrap(), fs)
}

#[test]
fn an_io_error_or_a_full_disk_on_page_writes_fails_that_checkpoint_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (db, fs) = faulty(dir.path(), options());
        fill(&db, 0, 3000, 1);
        db.checkpoint().unwrap().unwrap();
        fill(&db, 0, 1500, 2);
        fs.faults.fail_page_writes.store(true, Relaxed);
        // A change the checkpoint must write: by now the background evictor may have written
        // back every page the fill changed (a checkpoint reuses those images), and with page
        // writes failing it cannot clean this one. The key's leaf was the last one changed, so
        // it is resident and the write needs no frame.
        fill(&db, 1499, 1500, 2);
        let err = db.checkpoint().unwrap_err();
        assert!(matches!(err, tern::Error::Io { .. }), "{err}");
        fs.faults.fail_page_writes.store(false, Relaxed);
        fs.faults.space_left.store(0, Relaxed);
        let err = db.checkpoint().unwrap_err();
        assert!(err.to_string().contains("space"), "{err}");
        fs.faults.space_left.store(u64::MAX, Relaxed);
        let stats = db.stats().checkpoints;
        assert_eq!(stats.failed, 2, "{stats:?}");
        // Reads go on; the log holds every commit since the last good checkpoint.
        let t = db.begin_read().unwrap();
        assert_eq!(t.get(b"key00000007").unwrap(), Some(vec![2; 100]));
        assert_eq!(t.get(b"key00002007").unwrap(), Some(vec![1; 100]));
        drop(t);
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), options()).unwrap();
    let r = db.stats().recovery.unwrap();
    assert!(r.records_replayed >= 1, "the updates come back from the log: {r}");
    let t = db.begin_read().unwrap();
    let all: Vec<(Vec<u8>, Vec<u8>)> = t.range(..).unwrap().collect();
    assert_eq!(all.len(), 3000);
    assert!(all.iter().enumerate().all(|(i, (_, v))| v[0] == if i < 1500 { 2 } else { 1 }));
    drop(t);
    // The next checkpoint succeeds and holds it all.
    db.checkpoint().unwrap().unwrap();
    db.close().unwrap();
    tern::recovery::check(dir.path()).unwrap();
}

#[test]
fn a_torn_page_write_is_found_by_its_checksum_never_read_as_data() {
    let dir = tempfile::tempdir().unwrap();
    {
        // A cache that holds everything: only the checkpoint writes pages.
        let (db, fs) = faulty(dir.path(), Options { cache_bytes: 16 << 20, ..options() });
        fill(&db, 0, 3000, 1);
        db.checkpoint().unwrap().unwrap();
        fill(&db, 0, 3000, 2);
        // The disk claims the writes went through, but each page is half new, half old.
        fs.faults.torn_page_writes.store(true, Relaxed);
        db.checkpoint().unwrap().unwrap();
        fs.faults.torn_page_writes.store(false, Relaxed);
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), options()).unwrap();
    let t = db.begin_read().unwrap();
    let mut range = t.range(..).unwrap();
    for (_, v) in &mut range {
        assert_eq!(v, vec![2; 100], "a value read is a value written");
    }
    match range.take_error() {
        Some(tern::Error::Corruption { file, offset, reason }) => {
            assert_eq!(file, "pages");
            assert!(offset > 0 && reason.contains("page ") && reason.contains("checksum"), "{offset} {reason}");
        }
        other => panic!("the torn pages are reported: {other:?}"),
    }
    drop(range);
    drop(t);
    drop(db);
    let err = tern::recovery::check(dir.path()).unwrap_err();
    assert!(matches!(err, tern::Error::Corruption { .. }), "{err}");
}

#[test]
fn a_checkpoint_reads_back_only_the_evicted_leaves_that_hold_version_chains() {
    let (dir, db) = checkpointed(5);
    let update = |db: &Db, tag: u8| {
        for i in (0..5000u64).step_by(50) {
            let mut t = db.begin().unwrap();
            t.put(format!("key{i:08}").as_bytes(), &[tag; 100]).unwrap();
            t.commit().unwrap();
        }
    };
    // Versions folded into their leaves before those leaves leave the 16-frame cache: their
    // images hold no chain, and the checkpoint takes them from the disk without reading them.
    update(&db, 2);
    db.gc();
    let _ = contents(&db); // a scan through every leaf: the changed ones are evicted
    let before = db.stats().buffer;
    db.checkpoint().unwrap().unwrap();
    let after = db.stats().buffer;
    assert!(after.checkpoint_reads_skipped > before.checkpoint_reads_skipped, "{after:?}");
    assert_eq!(after.checkpoint_reads, before.checkpoint_reads, "no image held a chain: {after:?}");
    // With a snapshot open, the updates stay chains: those leaves are read back for their ids.
    let snapshot = db.begin_read().unwrap();
    update(&db, 3);
    let _ = contents(&db);
    db.checkpoint().unwrap().unwrap();
    assert!(db.stats().buffer.checkpoint_reads > after.checkpoint_reads, "{:?}", db.stats().buffer);
    assert_eq!(snapshot.get(b"key00000050").unwrap(), Some(vec![2; 100]));
    drop(snapshot);
    let want = contents(&db);
    assert_eq!(want.get(&b"key00000050"[..]).map(Vec::as_slice), Some(&[3u8; 100][..]));
    drop(db);
    // Reopened from that checkpoint alone (nothing logged after it is lost: the log is kept).
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(contents(&db), want);
    drop(db);
    tern::recovery::check(dir.path()).unwrap();
}

/// Cutting the page file's free tail keeps every block of the pages below the cut, in both
/// slots: the file is laid out in chunks (slot-0 blocks of neighbouring pages, then their
/// slot-1 blocks), so the cut may fall inside a chunk whose slot-1 half holds durable pages.
#[test]
fn cutting_the_free_tail_keeps_the_durable_blocks_of_every_page_left() {
    let (dir, db) = checkpointed(30);
    // The upper half goes; every page left is rewritten, so the next checkpoint makes the
    // other slot of each durable, and frees the upper half's pages for good.
    for chunk in 15..30u64 {
        let mut t = db.begin().unwrap();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            t.delete(format!("key{i:08}").as_bytes()).unwrap();
        }
        t.commit().unwrap();
    }
    fill(&db, 0, 15_000, 2);
    db.gc();
    db.checkpoint().unwrap();
    db.gc();
    db.checkpoint().unwrap();
    assert!(db.stats().buffer.truncations > 0, "the free tail was cut: {:?}", db.stats().buffer);
    let read = |db: &Db| {
        let t = db.begin_read().unwrap();
        let mut range = t.range(..).unwrap();
        let n = range.by_ref().inspect(|(_, v)| assert_eq!(v, &vec![2; 100])).count();
        assert!(range.take_error().is_none());
        n
    };
    assert_eq!(read(&db), 15_000, "every page is read back after the cut");
    db.close().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(read(&db), 15_000, "and after reopening");
    drop(db);
    let report = tern::recovery::check(dir.path()).unwrap();
    assert_eq!(report.tables[0].entries, 15_000);
}
