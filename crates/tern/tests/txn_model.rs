//! Transactions against a model: random interleavings of up to four open transactions (begin,
//! read, locking read, write, delete, scan both ways, commit, abort, collect garbage) on one thread, each step
//! checked against a simple model of snapshot isolation with first-updater-wins.
//!
//! Writes use `Wait::No`, so a write to a key another open transaction has locked shows as
//! `WouldBlock` instead of blocking the test's only thread.

use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use tern::lock::Wait;
use tern::{Db, Error, Options, Txn, TxnOptions};

const KEYS: u8 = 6;
const SLOTS: usize = 4;

#[derive(Clone, Debug)]
enum Op {
    Begin {
        slot: usize,
        read_only: bool,
    },
    Get {
        slot: usize,
        key: u8,
    },
    /// A locking read (`get_for_update`).
    GetForUpdate {
        slot: usize,
        key: u8,
    },
    Put {
        slot: usize,
        key: u8,
        value: u8,
    },
    Delete {
        slot: usize,
        key: u8,
    },
    Scan {
        slot: usize,
        rev: bool,
    },
    Commit {
        slot: usize,
    },
    Abort {
        slot: usize,
    },
    Gc,
}

fn op() -> impl Strategy<Value = Op> {
    let slot = 0..SLOTS;
    prop_oneof![
        2 => (slot.clone(), prop::bool::weighted(0.25)).prop_map(|(slot, read_only)| Op::Begin { slot, read_only }),
        3 => (slot.clone(), 0..KEYS).prop_map(|(slot, key)| Op::Get { slot, key }),
        2 => (slot.clone(), 0..KEYS).prop_map(|(slot, key)| Op::GetForUpdate { slot, key }),
        4 => (slot.clone(), 0..KEYS, any::<u8>()).prop_map(|(slot, key, value)| Op::Put { slot, key, value }),
        1 => (slot.clone(), 0..KEYS).prop_map(|(slot, key)| Op::Delete { slot, key }),
        1 => (slot.clone(), any::<bool>()).prop_map(|(slot, rev)| Op::Scan { slot, rev }),
        2 => slot.clone().prop_map(|slot| Op::Commit { slot }),
        1 => slot.prop_map(|slot| Op::Abort { slot }),
        1 => Just(Op::Gc),
    ]
}

/// The model of one open transaction.
struct ModelTxn {
    snapshot: u64,
    read_only: bool,
    writes: BTreeMap<u8, Option<u8>>,
    locked: HashSet<u8>,
    /// Keys read by `get_for_update`: their writes never conflict.
    locked_reads: HashSet<u8>,
    failed: bool,
}

/// Committed history: per key, (commit number, value) in commit order.
#[derive(Default)]
struct Model {
    clock: u64,
    history: HashMap<u8, Vec<(u64, Option<u8>)>>,
}

impl Model {
    fn committed_at(&self, key: u8, snapshot: u64) -> Option<u8> {
        self.history.get(&key)?.iter().rev().find(|(ts, _)| *ts <= snapshot).and_then(|(_, v)| *v)
    }

    fn newest(&self, key: u8) -> u64 {
        self.history.get(&key).and_then(|h| h.last()).map_or(0, |(ts, _)| *ts)
    }

    /// What a locking read returns: the transaction's own write, or the newest commit.
    fn read_latest(&self, t: &ModelTxn, key: u8) -> Option<u8> {
        match t.writes.get(&key) {
            Some(v) => *v,
            None => self.committed_at(key, u64::MAX),
        }
    }

    fn read(&self, t: &ModelTxn, key: u8) -> Option<u8> {
        match t.writes.get(&key) {
            Some(v) => *v,
            None => self.committed_at(key, t.snapshot),
        }
    }

    fn view(&self, t: &ModelTxn) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..KEYS).filter_map(|k| self.read(t, k).map(|v| (vec![k], vec![v]))).collect()
    }
}

/// Whether another open transaction holds `key`'s lock.
fn locked_by_other(txns: &[Option<ModelTxn>], slot: usize, key: u8) -> bool {
    txns.iter().enumerate().any(|(i, o)| i != slot && o.as_ref().is_some_and(|o| o.locked.contains(&key)))
}

/// Checks the refusals a write or locking read of transaction `m` must meet first (failed,
/// read-only, the key locked by another); returns whether it was refused.
fn refused(m: &ModelTxn, locked_by_other: bool, err: Option<&Error>) -> Result<bool, TestCaseError> {
    let expected = if m.failed {
        matches!(err, Some(Error::TxnFailed { .. }))
    } else if m.read_only {
        matches!(err, Some(Error::ReadOnlyTxn))
    } else if locked_by_other {
        matches!(err, Some(Error::WouldBlock))
    } else {
        return Ok(false);
    };
    prop_assert!(expected, "{:?}", err);
    Ok(true)
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    run_on(&Db::open_temporary(Options::default()).unwrap(), ops, &|_| ())
}

/// The same on a database on disk whose buffer pool holds 16 pages of 4 KiB and a row cache of
/// about 64 KiB (what the 16 frames leave of a 128 KiB cache), beside a ballast table of about 100 pages read between the steps: the
/// modelled table's pages are evicted and read back all the time, and point reads of evicted
/// leaves are answered by the row cache.
fn run_evicting(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        cache_bytes: 128 << 10,
        row_cache_percent: 90,
        tree: tern::btree::TreeConfig { page_size: 4096, ..Default::default() },
        wal: tern::WalConfig { durability: tern::Durability::NoSync, ..Default::default() },
        ..Options::default()
    };
    let db = Db::open(dir.path(), options).unwrap();
    let ballast = db.create_table("ballast").unwrap();
    let mut t = db.begin().unwrap();
    for i in 0..300u32 {
        t.put_in(&ballast, &i.to_be_bytes(), &[i as u8; 1000]).unwrap();
    }
    t.commit().unwrap();
    let churn = |step: usize| {
        let t = db.begin_with(TxnOptions { read_only: true, ..TxnOptions::default() }).unwrap();
        for j in 0..8 {
            let i = ((step * 37 + j * 101) % 300) as u32;
            assert_eq!(t.get_in(&ballast, &i.to_be_bytes()).unwrap(), Some(vec![i as u8; 1000]));
        }
    };
    run_on(&db, ops, &churn)?;
    let stats = db.stats().buffer;
    prop_assert!(stats.capacity_pages == 16 && stats.evictions > 0 && stats.reads > 0, "{:?}", stats);
    Ok(())
}

/// Runs `ops` on `db` (its default table empty), calling `between` after each step.
fn run_on(db: &Db, ops: Vec<Op>, between: &dyn Fn(usize)) -> Result<(), TestCaseError> {
    let mut real: Vec<Option<Txn<'_>>> = (0..SLOTS).map(|_| None).collect();
    let mut model_txns: Vec<Option<ModelTxn>> = (0..SLOTS).map(|_| None).collect();
    let mut model = Model::default();
    for (step, op) in ops.into_iter().enumerate() {
        between(step);
        match op {
            Op::Begin { slot, read_only } => {
                if real[slot].is_some() {
                    continue;
                }
                let options = TxnOptions { read_only, lock_wait: Wait::No, durability: None };
                real[slot] = Some(db.begin_with(options).unwrap());
                model_txns[slot] = Some(ModelTxn {
                    snapshot: model.clock,
                    read_only,
                    writes: BTreeMap::new(),
                    locked: HashSet::new(),
                    locked_reads: HashSet::new(),
                    failed: false,
                });
            }
            Op::Get { slot, key } => {
                let (Some(t), Some(m)) = (&real[slot], &model_txns[slot]) else { continue };
                let got = t.get(&[key]);
                if m.failed {
                    let failed = matches!(got, Err(Error::TxnFailed { .. }));
                    prop_assert!(failed, "{:?}", got);
                } else {
                    prop_assert_eq!(got.unwrap(), model.read(m, key).map(|v| vec![v]), "get {}", key);
                }
            }
            Op::GetForUpdate { slot, key } => {
                let (Some(t), Some(_)) = (&mut real[slot], &model_txns[slot]) else { continue };
                let got = t.get_for_update(&[key]);
                let locked_by_other = locked_by_other(&model_txns, slot, key);
                let m = model_txns[slot].as_mut().unwrap();
                if !refused(m, locked_by_other, got.as_ref().err())? {
                    m.locked.insert(key);
                    m.locked_reads.insert(key);
                    prop_assert_eq!(got.unwrap(), model.read_latest(m, key).map(|v| vec![v]), "get_for_update {}", key);
                }
            }
            Op::Scan { slot, rev } => {
                let (Some(t), Some(m)) = (&real[slot], &model_txns[slot]) else { continue };
                match t.range(..) {
                    Err(e) => {
                        let failed = matches!(e, Error::TxnFailed { .. });
                        prop_assert!(m.failed && failed, "scan refused: {e}");
                    }
                    Ok(range) => {
                        let mut expect = model.view(m);
                        let got: Vec<_> = if rev {
                            expect.reverse();
                            range.rev().collect()
                        } else {
                            range.collect()
                        };
                        prop_assert_eq!(got, expect);
                    }
                }
            }
            Op::Put { slot, key, .. } | Op::Delete { slot, key } => {
                let value = match op {
                    Op::Put { value, .. } => Some(value),
                    _ => None,
                };
                let (Some(t), Some(_)) = (&mut real[slot], &model_txns[slot]) else { continue };
                let got = match value {
                    Some(v) => t.put(&[key], &[v]).map(|()| None),
                    None => t.delete(&[key]).map(Some),
                };
                let locked_by_other = locked_by_other(&model_txns, slot, key);
                let m = model_txns[slot].as_mut().unwrap();
                if !refused(m, locked_by_other, got.as_ref().err())? {
                    m.locked.insert(key);
                    let locked_read = m.locked_reads.contains(&key);
                    if !m.writes.contains_key(&key) && !locked_read && model.newest(key) > m.snapshot {
                        let ok = matches!(got, Err(Error::Conflict));
                        prop_assert!(ok, "{:?}", got);
                        m.failed = true;
                    } else {
                        // A locked read's write replaces the newest commit, not the snapshot's.
                        let saw = if locked_read { model.read_latest(m, key) } else { model.read(m, key) }.is_some();
                        match got {
                            Ok(Some(existed)) => prop_assert_eq!(existed, saw, "delete {}", key),
                            Ok(None) => {}
                            Err(e) => prop_assert!(false, "write failed: {e}"),
                        }
                        if value.is_some() || saw {
                            m.writes.insert(key, value);
                        }
                    }
                }
            }
            Op::Commit { slot } => {
                let (Some(t), Some(m)) = (real[slot].take(), model_txns[slot].take()) else { continue };
                let got = t.commit();
                if m.failed {
                    let ok = matches!(got, Err(Error::TxnFailed { .. }));
                    prop_assert!(ok, "{:?}", got);
                } else {
                    prop_assert!(got.is_ok(), "{:?}", got);
                    if !m.writes.is_empty() {
                        model.clock += 1;
                        for (k, v) in m.writes {
                            model.history.entry(k).or_default().push((model.clock, v));
                        }
                    }
                }
            }
            Op::Abort { slot } => {
                if let (Some(t), Some(_)) = (real[slot].take(), model_txns[slot].take()) {
                    t.abort();
                }
            }
            Op::Gc => {
                db.gc();
            }
        }
    }
    // Everything ended: every version is collectable.
    drop(real);
    db.gc();
    let s = db.stats();
    prop_assert_eq!(s.gc.versions_live, 0, "{:?}", s.gc);
    let end = db.begin_read().unwrap();
    let done = ModelTxn {
        snapshot: model.clock,
        read_only: true,
        writes: BTreeMap::new(),
        locked: HashSet::new(),
        locked_reads: HashSet::new(),
        failed: false,
    };
    prop_assert_eq!(end.range(..).unwrap().collect::<Vec<_>>(), model.view(&done));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn interleaved_transactions_match_the_model(ops in prop::collection::vec(op(), 1..120)) {
        run(ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn interleaved_transactions_match_the_model_with_pages_evicted_all_the_time(
        ops in prop::collection::vec(op(), 1..120),
    ) {
        run_evicting(ops)?;
    }
}
