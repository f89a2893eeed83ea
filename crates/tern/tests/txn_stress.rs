//! Concurrent transactions: the bank-transfer invariant under load, and garbage collection with
//! a long-running reader.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};
use tern::{Db, Error, Options, TxnTracking};

const ACCOUNTS: u64 = 16;
const START: i64 = 1000;

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn balance(v: Option<Vec<u8>>) -> i64 {
    i64::from_be_bytes(v.expect("every account exists").try_into().unwrap())
}

fn open_bank(tracking: TxnTracking) -> Db {
    let db = Db::open_temporary(Options { tracking, ..Options::default() }).unwrap();
    let mut t = db.begin().unwrap();
    for i in 0..ACCOUNTS {
        t.put(&key(i), &START.to_be_bytes()).unwrap();
    }
    t.commit().unwrap();
    db
}

/// Writers move money between random accounts (retrying on conflicts and deadlocks) while
/// readers check, by point reads and by scans in both directions, that the total never changes.
fn bank(tracking: TxnTracking) {
    let db = open_bank(tracking);
    let stop = AtomicBool::new(false);
    let (transfers, retries, checks) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let total = ACCOUNTS as i64 * START;
    std::thread::scope(|s| {
        for w in 0..3u64 {
            let (db, transfers, retries) = (&db, &transfers, &retries);
            s.spawn(move || {
                let mut rng = 0x2545_f491_4f6c_dd1du64 ^ w;
                let mut next = move || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                for _ in 0..600 {
                    let (a, b, amount) = (next() % ACCOUNTS, next() % ACCOUNTS, (next() % 50) as i64);
                    loop {
                        let mut t = db.begin().unwrap();
                        let result = (|| {
                            let from = balance(t.get(&key(a))?);
                            t.put(&key(a), &(from - amount).to_be_bytes())?;
                            let to = balance(t.get(&key(b))?);
                            t.put(&key(b), &(to + amount).to_be_bytes())?;
                            Ok::<_, Error>(())
                        })();
                        match result.and_then(|()| t.commit()) {
                            Ok(()) => break,
                            Err(Error::Conflict | Error::Deadlock | Error::TxnFailed { .. }) => {
                                retries.fetch_add(1, SeqCst);
                            }
                            Err(e) => panic!("transfer failed: {e}"),
                        }
                    }
                    transfers.fetch_add(1, SeqCst);
                }
            });
        }
        for r in 0..2u64 {
            let (db, stop, checks) = (&db, &stop, &checks);
            s.spawn(move || {
                while !stop.load(SeqCst) {
                    let t = db.begin_read().unwrap();
                    let points: i64 = (0..ACCOUNTS).map(|i| balance(t.get(&key(i)).unwrap())).sum();
                    let scan: i64 = if r == 0 {
                        t.range(..).unwrap().map(|(_, v)| balance(Some(v))).sum()
                    } else {
                        t.range(..).unwrap().rev().map(|(_, v)| balance(Some(v))).sum()
                    };
                    assert_eq!((points, scan), (total, total), "a reader saw money appear or vanish");
                    t.commit().unwrap();
                    checks.fetch_add(1, SeqCst);
                }
            });
        }
        let start = Instant::now();
        while transfers.load(SeqCst) < 1800 {
            assert!(start.elapsed() < Duration::from_secs(120), "transfers stalled");
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, SeqCst);
    });
    let t = db.begin_read().unwrap();
    let end: i64 = t.range(..).unwrap().map(|(_, v)| balance(Some(v))).sum();
    assert_eq!(end, total);
    assert!(checks.load(SeqCst) > 0);
    let s = db.stats();
    assert_eq!(s.txn.committed, 1 + 1800, "{:?}", s.txn);
    assert_eq!(s.txn.conflicts + s.txn.deadlocks, retries.load(SeqCst), "{:?}", s.txn);
    drop(t);
    db.gc();
    assert_eq!(db.stats().gc.versions_live, 0, "{:?}", db.stats().gc);
}

#[test]
fn bank_transfers_conserve_money_under_snapshot_isolation() {
    bank(TxnTracking::PerThread);
}

#[test]
fn bank_transfers_conserve_money_with_the_global_latch_baseline() {
    bank(TxnTracking::GlobalLatch);
}

/// A long-running reader keeps exactly the versions it reads (one per key besides the newest);
/// writers go on meanwhile; once it ends, memory returns to the no-reader level.
#[test]
fn a_long_reader_keeps_exactly_what_it_needs_and_memory_returns_after() {
    let db = Db::open_temporary(Options::default()).unwrap();
    let keys = 100u64;
    let mut t = db.begin().unwrap();
    for i in 0..keys {
        t.put(&key(i), b"original").unwrap();
    }
    t.commit().unwrap();
    db.gc();
    assert_eq!(db.stats().gc.versions_live, 0, "loaded data folds into plain values");
    let reader = db.begin_read().unwrap();
    for round in 0..30u32 {
        let mut t = db.begin().unwrap();
        for i in 0..keys {
            t.put(&key(i), &round.to_be_bytes()).unwrap();
        }
        t.commit().unwrap();
    }
    db.gc();
    let live = db.stats().gc.versions_live;
    assert_eq!(live, 2 * keys, "per key: the reader's version and the newest");
    for i in 0..keys {
        assert_eq!(reader.get(&key(i)).unwrap().as_deref(), Some(&b"original"[..]));
    }
    let fresh = db.begin_read().unwrap();
    assert_eq!(fresh.get(&key(7)).unwrap(), Some(29u32.to_be_bytes().to_vec()));
    drop(fresh);
    drop(reader);
    let pass = db.gc();
    assert_eq!(pass.remaining, 0);
    assert_eq!(db.stats().gc.versions_live, 0, "back to plain values");
    assert_eq!(db.begin_read().unwrap().get(&key(7)).unwrap(), Some(29u32.to_be_bytes().to_vec()));
}

/// Deletions fold into removed keys; aborts leave nothing behind.
#[test]
fn deletions_and_aborts_are_collected() {
    let db = Db::open_temporary(Options::default()).unwrap();
    let mut t = db.begin().unwrap();
    for i in 0..50u64 {
        t.put(&key(i), b"v").unwrap();
    }
    t.commit().unwrap();
    let mut t = db.begin().unwrap();
    for i in 0..50u64 {
        assert!(t.delete(&key(i)).unwrap());
    }
    assert!(!t.delete(&key(999)).unwrap(), "nothing to delete");
    t.commit().unwrap();
    let mut t = db.begin().unwrap();
    t.put(&key(500), b"never").unwrap();
    t.put(&key(3), b"never").unwrap();
    t.abort();
    db.gc();
    let s = db.stats();
    assert_eq!(s.gc.versions_live, 0, "{:?}", s.gc);
    assert_eq!(db.begin_read().unwrap().range(..).unwrap().count(), 0);
    assert_eq!(s.txn.aborted, 1);
}

/// Keys going from plain value to version chain and back again reuse their record in the leaf:
/// rewriting the same keys over and over does not keep compacting the leaves.
#[test]
fn rewriting_keys_does_not_fragment_leaves() {
    let db = Db::open_temporary(Options::default()).unwrap();
    let keys = 2000u64;
    let value = [5u8; 100];
    let mut t = db.begin().unwrap();
    for i in 0..keys {
        t.put(&key(i), &value).unwrap();
    }
    t.commit().unwrap();
    db.gc();
    let before = db.stats().tables[0].tree.compactions;
    for _ in 0..20 {
        for chunk in (0..keys).collect::<Vec<_>>().chunks(100) {
            let mut t = db.begin().unwrap();
            for &i in chunk {
                t.put(&key(i), &value).unwrap();
            }
            t.commit().unwrap();
        }
        db.gc();
    }
    let s = db.stats();
    assert_eq!(s.gc.versions_live, 0);
    let compactions = s.tables[0].tree.compactions - before;
    // 40 000 value -> chain -> value round trips; without in-place reuse, nearly every fold
    // compacted a leaf.
    assert!(compactions < 100, "{compactions} compactions");
}

/// A key whose chain a running reader keeps from folding is not looked at by every pass the
/// writers' commits run meanwhile (the queue doubles between passes, so that would be about
/// two looks per key, each reading the chain under its leaf's latch), and it still folds at
/// the first pass after the reader ends.
#[test]
fn keys_a_reader_holds_back_are_not_looked_at_by_every_pass() {
    let db = Db::open_temporary(Options::default()).unwrap();
    let n = 20_000u64;
    let mut t = db.begin().unwrap();
    for i in 0..n {
        t.put(&key(i), b"original").unwrap();
    }
    t.commit().unwrap();
    db.gc();
    let reader = db.begin_read().unwrap();
    let before = db.stats().gc;
    for i in 0..n {
        let mut t = db.begin().unwrap();
        t.put(&key(i), b"updated").unwrap();
        t.commit().unwrap();
    }
    let during = db.stats().gc;
    let (passes, looked) = (during.passes - before.passes, during.keys_looked - before.keys_looked);
    assert!(passes >= 5, "{passes} passes");
    assert!(looked < n * 3 / 2, "{looked} looks at {n} keys in {passes} passes");
    assert!(during.versions_live >= n, "the reader holds every old value: {during:?}");
    assert_eq!(reader.get(&key(7)).unwrap().as_deref(), Some(&b"original"[..]));
    drop(reader);
    // Commits of other keys until a pass runs: it folds the held keys, the reader gone.
    let mut i = n;
    while db.stats().gc.passes == during.passes {
        let mut t = db.begin().unwrap();
        t.put(&key(i), b"new").unwrap();
        t.commit().unwrap();
        i += 1;
    }
    let after = db.stats().gc;
    assert!(after.versions_live < n / 10, "the first pass after the reader folded what it held: {after:?}");
    assert_eq!(db.begin_read().unwrap().get(&key(7)).unwrap().as_deref(), Some(&b"updated"[..]));
}
