//! Replay against a model: whatever the batch size, the trees end as applying every record in
//! log order would leave them.

use super::deferred::Deferred;
use super::replay::replay;
use crate::btree::{BTree, TreeConfig};
use crate::buffer::Pool;
use crate::wal::record::{Op, Record};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// One log record, owned: a commit of `(table, key, value or delete)`, or a table's creation.
#[derive(Clone, Debug)]
enum Rec {
    Commit(u64, Vec<(u32, Vec<u8>, Option<Vec<u8>>)>),
    Create(u32, String),
}

fn as_record(r: &Rec) -> Record<'_> {
    match r {
        Rec::Commit(ts, ops) => Record::Commit {
            ts: *ts,
            ops: ops.iter().map(|(table, key, value)| Op { table: *table, key, value: value.as_deref() }).collect(),
        },
        Rec::Create(id, name) => Record::CreateTable { ts: 0, id: *id, name },
    }
}

/// Keys from a small alphabet (collisions and shared 8-byte heads are common), values that
/// say which write they are.
fn log() -> impl Strategy<Value = Vec<Rec>> {
    let op = (0u32..3, proptest::collection::vec(0u8..3, 1..20), any::<bool>(), 0usize..40);
    proptest::collection::vec((proptest::collection::vec(op, 1..6), 0u8..8), 1..80).prop_map(|commits| {
        let mut tables = 1u32;
        let mut log = Vec::new();
        for (i, (ops, create)) in commits.into_iter().enumerate() {
            if create == 0 && tables < 3 {
                log.push(Rec::Create(tables, format!("t{tables}")));
                tables += 1;
            }
            let ops = ops
                .into_iter()
                .map(|(t, key, put, len)| {
                    let value = put.then(|| format!("{i}:{}", "v".repeat(len)).into_bytes());
                    (t % tables, key, value)
                })
                .collect();
            log.push(Rec::Commit(i as u64 + 10, ops));
        }
        log
    })
}

fn replayed(log: &[Rec], snapshot: u64, batch_bytes: usize) -> Vec<BTreeMap<Vec<u8>, Vec<u8>>> {
    let config = TreeConfig { page_size: 4096, ..TreeConfig::DEFAULT };
    let pool = Pool::memory(config.page_size, false).unwrap();
    let mut tables = vec![(0, String::new(), BTree::with_pool(config, pool.clone()).unwrap())];
    replay(&mut tables, snapshot, config, &pool, batch_bytes, false, |replay| {
        for r in log {
            replay.record(as_record(r)).unwrap();
        }
        Ok(())
    })
    .unwrap();
    tables.iter().map(|(_, _, tree)| tree.range(..).collect()).collect()
}

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// Replays `log` deferring its last batch, then settles each probe (a key, or a range
/// `lo..hi`) of a table and checks that the tree holds what the model does there at once,
/// before the rest is applied; then applies the rest and returns the trees.
/// A probe: table, low and high key (equal: a point), and each bound's kind (0 included, 1
/// excluded, 2 unbounded).
type Probe = (u32, Vec<u8>, Vec<u8>, (u8, u8));

fn deferred_then_probed(log: &[Rec], snapshot: u64, batch_bytes: usize, probes: &[Probe]) -> Vec<Map> {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let config = TreeConfig { page_size: 4096, ..TreeConfig::DEFAULT };
    let pool = Pool::memory(config.page_size, false).unwrap();
    let mut tables = vec![(0, String::new(), BTree::with_pool(config, pool.clone()).unwrap())];
    let ((), last) = replay(&mut tables, snapshot, config, &pool, batch_bytes, true, |replay| {
        for r in log {
            replay.record(as_record(r)).unwrap();
        }
        Ok(())
    })
    .unwrap();
    let want = model(log, snapshot);
    if let Some(deferred) = last.map(Deferred::new) {
        for (t, lo, hi, kinds) in probes {
            let Some((_, _, tree)) = tables.get(*t as usize) else { continue };
            let model = &want[*t as usize];
            if lo == hi {
                deferred.settle_range(*t, (Included(lo), Included(lo)), tree).unwrap();
                assert_eq!(tree.get(lo).unwrap().as_ref(), model.get(lo), "table {t} key {lo:?}");
                continue;
            }
            if lo > hi {
                continue;
            }
            fn bound(kind: u8, key: &[u8]) -> std::ops::Bound<&[u8]> {
                match kind {
                    0 => Included(key),
                    1 => Excluded(key),
                    _ => Unbounded,
                }
            }
            let range = (bound(kinds.0, lo), bound(kinds.1, hi));
            deferred.settle_range(*t, range, tree).unwrap();
            let got: Map = tree.range(range).collect();
            let owned = (range.0.map(<[u8]>::to_vec), range.1.map(<[u8]>::to_vec));
            let expected: Map = model.range(owned).map(|(k, v)| (k.clone(), v.clone())).collect();
            assert_eq!(got, expected, "table {t} range {range:?}");
        }
        deferred.settle_all(&|id| tables.get(id as usize).map(|t| &t.2), false).unwrap();
        assert!(deferred.is_done());
    }
    tables.iter().map(|(_, _, tree)| tree.range(..).collect()).collect()
}

fn model(log: &[Rec], snapshot: u64) -> Vec<BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut tables = vec![BTreeMap::new()];
    for r in log {
        match r {
            Rec::Create(..) => tables.push(BTreeMap::new()),
            Rec::Commit(ts, _) if *ts <= snapshot => {}
            Rec::Commit(_, ops) => {
                for (table, key, value) in ops {
                    let t: &mut BTreeMap<Vec<u8>, Vec<u8>> = &mut tables[*table as usize];
                    match value {
                        Some(v) => t.insert(key.clone(), v.clone()),
                        None => t.remove(key),
                    };
                }
            }
        }
    }
    tables
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn sorted_batches_leave_what_log_order_leaves(log in log(), batch in prop_oneof![Just(1usize), 1usize..400, Just(1 << 20)], snapshot in 0u64..40) {
        prop_assert_eq!(replayed(&log, snapshot, batch), model(&log, snapshot));
    }

    /// Deferred replay: the batches before the last are applied first, and a key or range
    /// settled reads as the log leaves it before anything else is applied.
    #[test]
    fn deferred_writes_settled_by_key_or_range_read_as_log_order_leaves_them(
        log in log(),
        batch in prop_oneof![Just(1usize), 1usize..400, Just(1 << 20)],
        snapshot in 0u64..40,
        probes in proptest::collection::vec(
            (
                0u32..3,
                proptest::collection::vec(0u8..3, 1..20),
                proptest::collection::vec(0u8..3, 1..20),
                any::<bool>(),
                (0u8..3, 0u8..3),
            ),
            0..12,
        ),
    ) {
        let probes: Vec<Probe> = probes
            .into_iter()
            .map(|(t, lo, hi, point, kinds)| if point { (t, lo.clone(), lo, kinds) } else { (t, lo, hi, kinds) })
            .collect();
        prop_assert_eq!(deferred_then_probed(&log, snapshot, batch, &probes), model(&log, snapshot));
    }
}

#[test]
fn a_write_to_a_table_that_does_not_exist_names_it() {
    let log = [Rec::Commit(1, vec![(2, b"k".to_vec(), None)])];
    let config = TreeConfig::DEFAULT;
    let pool = Pool::memory(config.page_size, false).unwrap();
    let mut tables = vec![(0, String::new(), BTree::with_pool(config, pool.clone()).unwrap())];
    let err = replay(&mut tables, 0, config, &pool, 1 << 20, false, |replay| Ok(replay.record(as_record(&log[0]))))
        .unwrap()
        .0;
    assert!(err.unwrap_err().contains("table 2, which does not exist"));
}

/// A key the trees would refuse is refused as the record is read (the scan names its place).
#[test]
fn a_key_the_tree_refuses_is_refused_where_it_is_read() {
    let config = TreeConfig { page_size: 4096, ..TreeConfig::DEFAULT };
    let pool = Pool::memory(config.page_size, false).unwrap();
    let mut tables = vec![(0, String::new(), BTree::with_pool(config, pool.clone()).unwrap())];
    for key in [vec![], vec![7u8; 513]] {
        let rec = Rec::Commit(1, vec![(0, key.clone(), Some(b"v".to_vec()))]);
        let err = replay(&mut tables, 0, config, &pool, 1 << 20, false, |replay| Ok(replay.record(as_record(&rec))))
            .unwrap()
            .0;
        assert!(err.unwrap_err().contains(&format!("a key of {} bytes", key.len())));
    }
}

/// A tree's error stops the replay and comes back typed, whether the write was batched (the
/// applier thread fails) or applied alone (the scanning thread does), and the scan is stopped.
/// The error: EIO reading back an evicted page of a pool of the fewest frames.
#[test]
fn a_tree_error_while_applying_is_returned_as_it_is() {
    for batch_bytes in [1, 4096] {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::fs::FaultFs::new();
        let faults = fs.faults.clone();
        let config = TreeConfig { page_size: 4096, ..TreeConfig::DEFAULT };
        let pool_config =
            crate::buffer::PoolConfig { page_size: 4096, cache_bytes: Some(0), row_cache_bytes: 0, huge_pages: false };
        let pool = Pool::with_file(pool_config, std::sync::Arc::new(fs), dir.path().join("pages")).unwrap();
        let tree = BTree::with_pool(config, pool.clone()).unwrap();
        for i in 0..3000u32 {
            tree.upsert(&i.to_be_bytes(), &[1; 100]).unwrap();
        }
        let mut tables = vec![(0, String::new(), tree)];
        faults.fail_reads.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut refused = 0;
        let err = replay(&mut tables, 0, config, &pool, batch_bytes, false, |replay| {
            for i in 0..3000u32 {
                let rec =
                    Rec::Commit(1 + u64::from(i), vec![(0, (i * 7 % 3000).to_be_bytes().to_vec(), Some(vec![2; 100]))]);
                if replay.record(as_record(&rec)).is_err() {
                    refused += 1;
                    return Err(crate::Error::InvalidArgument("the scan stopped".into()));
                }
            }
            Ok(())
        })
        .map(|(scanned, _)| scanned)
        .unwrap_err();
        assert!(matches!(err, crate::Error::Io { .. }), "batch {batch_bytes}: {err:?}");
        assert!(err.to_string().contains("injected EIO"), "batch {batch_bytes}: {err}");
        assert_eq!(refused, 1, "batch {batch_bytes}: the scan is told to stop");
        faults.fail_reads.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Replay batches grow with the cache (one sweep of a table larger than the cache per batch),
/// within their bounds; a log of at most half the cache is one batch; a pool that never evicts
/// keeps the smallest.
#[test]
fn replay_batches_are_an_eighth_of_the_cache_within_bounds() {
    use super::replay::{batch_bytes, BATCH_BYTES, MAX_BATCH_BYTES};
    let dir = tempfile::tempdir().unwrap();
    let batch = |cache: u64, log: u64| {
        let config = crate::buffer::PoolConfig {
            page_size: 4096,
            cache_bytes: Some(cache),
            row_cache_bytes: 0,
            huge_pages: false,
        };
        let pool = Pool::with_file(config, std::sync::Arc::new(crate::fs::StdFs), dir.path().join("pages")).unwrap();
        batch_bytes(&pool, log)
    };
    assert_eq!(batch(64 << 20, 0), BATCH_BYTES);
    // (The pool keeps a few frames of its cache in reserve.)
    assert!((120 << 20..=128 << 20).contains(&batch(1 << 30, 1 << 20)), "{}", batch(1 << 30, 1 << 20));
    assert_eq!(batch(1 << 30, 256 << 20), 256 << 20, "a log of a quarter of the cache is one batch");
    assert!((120 << 20..=128 << 20).contains(&batch(1 << 30, 1 << 30)), "a log as large as the cache is not");
    assert_eq!(batch(64 << 30, 0), MAX_BATCH_BYTES);
    assert_eq!(batch_bytes(&Pool::memory(4096, false).unwrap(), 256 << 20), BATCH_BYTES);
}

/// Holds every `tern-redo` thread started meanwhile (`db::HOLD_REDO`) until dropped.
struct Hold;

impl Hold {
    fn new() -> Hold {
        crate::db::HOLD_REDO.store(true, std::sync::atomic::Ordering::Release);
        Hold
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        crate::db::HOLD_REDO.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// With the background thread held, each kind of operation is the first to need its keys'
/// deferred writes: each must apply them before it reads, writes or scans, and see what the
/// log left (a no-op settle would show the checkpoint's values instead).
#[test]
fn every_operation_applies_the_deferred_writes_it_needs_first() {
    use crate::{Db, Options, WalConfig};
    use std::ops::Bound::{Excluded, Unbounded};
    let options = Options {
        cache_bytes: 0,
        tree: TreeConfig { page_size: 4096, ..TreeConfig::DEFAULT },
        wal: WalConfig { checkpoint_bytes: u64::MAX, checkpoint_on_close: false, ..WalConfig::default() },
        ..Options::default()
    };
    let key = |i: u32| format!("k{:06}", i * 7919 % 5000).into_bytes();
    let dir = tempfile::tempdir().unwrap();
    // Tables "" and "t": 4000 keys each, checkpointed; then a tail of puts and deletes.
    let mut models = [Map::new(), Map::new()];
    {
        let db = Db::open(dir.path(), options).unwrap();
        let t = db.create_table("t").unwrap();
        let mut txn = db.begin().unwrap();
        for i in 0..4000 {
            txn.put(&key(i), b"base").unwrap();
            txn.put_in(&t, &key(i), b"base").unwrap();
            models[0].insert(key(i), b"base".to_vec());
            models[1].insert(key(i), b"base".to_vec());
        }
        txn.commit().unwrap();
        db.checkpoint().unwrap();
        for i in 0..3000u32 {
            let mut txn = db.begin().unwrap();
            let (k, table) = (key(i * 13 % 5000), (i % 2) as usize);
            let value = format!("tail{i}").into_bytes();
            match (i % 5 == 0, table) {
                (true, 0) => txn.delete(&k).map(drop).unwrap(),
                (true, _) => txn.delete_in(&t, &k).map(drop).unwrap(),
                (false, 0) => txn.put(&k, &value).unwrap(),
                (false, _) => txn.put_in(&t, &k, &value).unwrap(),
            }
            match i % 5 == 0 {
                true => models[table].remove(&k),
                false => models[table].insert(k, value),
            };
            txn.commit().unwrap();
        }
        db.close().unwrap();
    }
    let _hold = Hold::new();
    let db = Db::open(dir.path(), options).unwrap();
    assert!(db.stats().recovery.unwrap().deferred_writes > 1000);
    let t = db.table("t").unwrap();
    let [m0, m1] = &mut models;
    // Keys of the default table written by the tail: the last put, and the last delete of a
    // key the checkpoint held.
    let tail_put = m0.iter().rev().find(|(_, v)| v.starts_with(b"tail")).map(|(k, _)| k.clone()).unwrap();
    let tail_deleted = (0..5000).map(|i| format!("k{i:06}").into_bytes()).rev().find(|k| !m0.contains_key(k)).unwrap();
    // get_for_update, then a delete of a key whose deferred write is a put.
    let mut txn = db.begin().unwrap();
    assert_eq!(txn.get_for_update(&tail_put).unwrap().as_ref(), m0.get(&tail_put));
    txn.commit().unwrap();
    let second = m0.iter().rev().filter(|(_, v)| v.starts_with(b"tail")).nth(1).map(|(k, _)| k.clone()).unwrap();
    let mut txn = db.begin().unwrap();
    assert!(txn.delete(&second).unwrap(), "the deferred put is seen by the delete");
    assert!(!txn.delete(&tail_deleted).unwrap(), "the deferred delete is seen by the delete");
    txn.commit().unwrap();
    m0.remove(&second);
    // A cursor over part of table "t": seek and seek_for_prev.
    let (lo, hi) = (b"k001000".to_vec(), b"k002000".to_vec());
    let txn = db.begin_read().unwrap();
    let mut cursor = txn.cursor_in(&t, &lo[..]..&hi[..]).unwrap();
    let probe = b"k001500".to_vec();
    let want = m1.range(probe.clone()..hi.clone()).next();
    assert_eq!(
        cursor.seek(&probe).unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).as_ref(),
        want.map(|(k, v)| (k.clone(), v.clone())).as_ref()
    );
    let want = m1.range(lo.clone()..=probe.clone()).next_back();
    assert_eq!(
        cursor.seek_for_prev(&probe).unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).as_ref(),
        want.map(|(k, v)| (k.clone(), v.clone())).as_ref()
    );
    drop(cursor);
    // A reverse scan of "t" from an excluded start to the end.
    let start = b"k003000".to_vec();
    let got: Vec<(Vec<u8>, Vec<u8>)> = txn.range_in(&t, (Excluded(&start[..]), Unbounded)).unwrap().rev().collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> =
        m1.range((Excluded(start.clone()), Unbounded)).rev().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got, want);
    drop(txn);
    // A backup copies what the log left, everything still deferred included.
    let copy = tempfile::tempdir().unwrap();
    db.backup(copy.path().join("b")).unwrap();
    // Point reads of every key of the default table, then scans of both tables.
    let read = db.begin_read().unwrap();
    for i in 0..5000 {
        let k = format!("k{i:06}").into_bytes();
        assert_eq!(read.get(&k).unwrap().as_ref(), m0.get(&k), "key {k:?}");
    }
    assert_eq!(read.range(..).unwrap().collect::<Map>(), *m0);
    assert_eq!(read.range_in(&t, ..).unwrap().collect::<Map>(), *m1);
    drop(read);
    assert!(db.stats().recovery.unwrap().deferred_millis.is_some(), "the scans applied everything");
    drop(db);
    let backup = Db::open(copy.path().join("b"), options).unwrap();
    assert_eq!(backup.begin_read().unwrap().range_in(&backup.table("t").unwrap(), ..).unwrap().collect::<Map>(), *m1);
}
