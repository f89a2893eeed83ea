//! Martin Kleppmann's Hermitage isolation tests, as they run against PostgreSQL's "repeatable
//! read" (snapshot isolation), written against tern's transactions.
//!
//! Each test sets up `test(id, value)` = {(1, 10), (2, 20)} (key: the id, value: the number as
//! text), then plays the interleaving step by step. Writes that must wait for another writer's
//! lock are issued with `Wait::No` and show as `WouldBlock`; the writer retries after the other
//! commits or aborts, which is when PostgreSQL's blocked statement would resume. `p4_blocking`
//! plays one interleaving with a real blocked writer on a second thread.

use std::time::{Duration, Instant};
use tern::lock::Wait;
use tern::{Db, Error, Options, Txn, TxnOptions};

fn setup() -> Db {
    let db = Db::open_temporary(Options::default()).unwrap();
    let mut t = db.begin().unwrap();
    t.put(b"1", b"10").unwrap();
    t.put(b"2", b"20").unwrap();
    t.commit().unwrap();
    db
}

fn no_wait(db: &Db) -> Txn<'_> {
    db.begin_with(TxnOptions { lock_wait: Wait::No, ..TxnOptions::default() }).unwrap()
}

fn get(t: &Txn<'_>, id: &str) -> Option<i64> {
    t.get(id.as_bytes()).unwrap().map(|v| String::from_utf8(v).unwrap().parse().unwrap())
}

fn set(t: &mut Txn<'_>, id: &str, v: i64) -> tern::Result<()> {
    t.put(id.as_bytes(), v.to_string().as_bytes())
}

/// Every row a transaction sees, in id order.
fn rows(t: &Txn<'_>) -> Vec<(String, i64)> {
    t.range(..)
        .unwrap()
        .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap().parse().unwrap()))
        .collect()
}

fn committed(db: &Db) -> Vec<(String, i64)> {
    rows(&db.begin_read().unwrap())
}

fn rows_of(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect()
}

/// G0, write cycles: prevented (the second writer of a key waits, then conflicts).
#[test]
fn g0_write_cycles() {
    let db = setup();
    let (mut t1, mut t2) = (no_wait(&db), no_wait(&db));
    set(&mut t1, "1", 11).unwrap();
    assert!(matches!(set(&mut t2, "1", 12), Err(Error::WouldBlock)), "t2 waits for t1");
    set(&mut t1, "2", 21).unwrap();
    t1.commit().unwrap();
    assert!(matches!(set(&mut t2, "1", 12), Err(Error::Conflict)), "t1 updated id 1 first");
    assert!(matches!(set(&mut t2, "2", 22), Err(Error::TxnFailed { .. })));
    assert!(matches!(t2.commit(), Err(Error::TxnFailed { .. })));
    assert_eq!(committed(&db), rows_of(&[("1", 11), ("2", 21)]));
}

/// G1a, aborted reads: prevented.
#[test]
fn g1a_aborted_reads() {
    let db = setup();
    let (mut t1, t2) = (no_wait(&db), no_wait(&db));
    set(&mut t1, "1", 101).unwrap();
    assert_eq!(rows(&t2), rows_of(&[("1", 10), ("2", 20)]));
    t1.abort();
    assert_eq!(rows(&t2), rows_of(&[("1", 10), ("2", 20)]));
    t2.commit().unwrap();
    assert_eq!(committed(&db), rows_of(&[("1", 10), ("2", 20)]));
}

/// G1b, intermediate reads: prevented.
#[test]
fn g1b_intermediate_reads() {
    let db = setup();
    let (mut t1, t2) = (no_wait(&db), no_wait(&db));
    set(&mut t1, "1", 101).unwrap();
    assert_eq!(get(&t2, "1"), Some(10));
    set(&mut t1, "1", 11).unwrap();
    t1.commit().unwrap();
    assert_eq!(get(&t2, "1"), Some(10), "still t2's snapshot");
    t2.commit().unwrap();
}

/// G1c, circular information flow: prevented.
#[test]
fn g1c_circular_information_flow() {
    let db = setup();
    let (mut t1, mut t2) = (no_wait(&db), no_wait(&db));
    set(&mut t1, "1", 11).unwrap();
    set(&mut t2, "2", 22).unwrap();
    assert_eq!(get(&t1, "2"), Some(20));
    assert_eq!(get(&t2, "1"), Some(10));
    t1.commit().unwrap();
    t2.commit().unwrap();
    assert_eq!(committed(&db), rows_of(&[("1", 11), ("2", 22)]));
}

/// OTV, observed transaction vanishes: prevented.
#[test]
fn otv_observed_transaction_vanishes() {
    let db = setup();
    let (mut t1, mut t2, t3) = (no_wait(&db), no_wait(&db), no_wait(&db));
    set(&mut t1, "1", 11).unwrap();
    set(&mut t1, "2", 19).unwrap();
    assert!(matches!(set(&mut t2, "1", 12), Err(Error::WouldBlock)));
    t1.commit().unwrap();
    assert_eq!(get(&t3, "1"), Some(10), "t3 began before t1 committed");
    assert!(matches!(set(&mut t2, "1", 12), Err(Error::Conflict)));
    t2.abort();
    assert_eq!(get(&t3, "2"), Some(20));
    t3.commit().unwrap();
    let t4 = db.begin_read().unwrap();
    assert_eq!((get(&t4, "1"), get(&t4, "2")), (Some(11), Some(19)));
}

/// PMP, predicate-many-preceders (read predicates): prevented.
#[test]
fn pmp_predicate_many_preceders() {
    let db = setup();
    let (t1, mut t2) = (no_wait(&db), no_wait(&db));
    let where_value = |t: &Txn<'_>, f: &dyn Fn(i64) -> bool| -> Vec<(String, i64)> {
        rows(t).into_iter().filter(|(_, v)| f(*v)).collect()
    };
    assert!(where_value(&t1, &|v| v == 30).is_empty());
    set(&mut t2, "3", 30).unwrap();
    t2.commit().unwrap();
    assert!(where_value(&t1, &|v| v % 3 == 0).is_empty(), "the insert is after t1's snapshot");
    t1.commit().unwrap();
}

/// PMP with write predicates: prevented (the deleter conflicts with the updater).
#[test]
fn pmp_write_predicates() {
    let db = setup();
    let (mut t1, mut t2) = (no_wait(&db), no_wait(&db));
    for (id, v) in rows(&t1) {
        set(&mut t1, &id, v + 10).unwrap(); // update test set value = value + 10
    }
    // t2: delete from test where value = 20 (it sees id 2 = 20): waits for t1's lock.
    let victims: Vec<String> = rows(&t2).into_iter().filter(|(_, v)| *v == 20).map(|(k, _)| k).collect();
    assert_eq!(victims, ["2"]);
    assert!(matches!(t2.delete(b"2"), Err(Error::WouldBlock)));
    t1.commit().unwrap();
    assert!(matches!(t2.delete(b"2"), Err(Error::Conflict)));
    t2.abort();
    assert_eq!(committed(&db), rows_of(&[("1", 20), ("2", 30)]));
}

/// P4, lost update: prevented.
#[test]
fn p4_lost_update() {
    let db = setup();
    let (mut t1, mut t2) = (no_wait(&db), no_wait(&db));
    assert_eq!(get(&t1, "1"), Some(10));
    assert_eq!(get(&t2, "1"), Some(10));
    set(&mut t1, "1", 11).unwrap();
    assert!(matches!(set(&mut t2, "1", 11), Err(Error::WouldBlock)));
    t1.commit().unwrap();
    assert!(matches!(set(&mut t2, "1", 11), Err(Error::Conflict)));
    assert!(matches!(t2.commit(), Err(Error::TxnFailed { .. })));
    assert_eq!(db.stats().txn.conflicts, 1);
}

/// P4 again, with the second writer really blocked in the lock manager until the first commits.
#[test]
fn p4_blocking() {
    let db = setup();
    let mut t1 = db.begin().unwrap();
    assert_eq!(get(&t1, "1"), Some(10));
    set(&mut t1, "1", 11).unwrap();
    std::thread::scope(|s| {
        let db2 = db.clone();
        let t2 = s.spawn(move || {
            let mut t2 = db2.begin().unwrap();
            let seen = get(&t2, "1");
            (seen, set(&mut t2, "1", seen.unwrap() + 1).map_err(|e| e.to_string()))
        });
        let start = Instant::now();
        while db.stats().locks.waits == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "t2 never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
        t1.commit().unwrap();
        let (seen, result) = t2.join().unwrap();
        assert_eq!(seen, Some(10));
        assert_eq!(result, Err(Error::Conflict.to_string()));
    });
    assert_eq!(committed(&db), rows_of(&[("1", 11), ("2", 20)]));
}

/// G-single, single anti-dependency cycles (read skew): prevented.
#[test]
fn g_single_read_skew() {
    let db = setup();
    let (t1, mut t2) = (no_wait(&db), no_wait(&db));
    assert_eq!(get(&t1, "1"), Some(10));
    assert_eq!((get(&t2, "1"), get(&t2, "2")), (Some(10), Some(20)));
    set(&mut t2, "1", 12).unwrap();
    set(&mut t2, "2", 18).unwrap();
    t2.commit().unwrap();
    assert_eq!(get(&t1, "2"), Some(20), "t1 sees 10 + 20, never 10 + 18");
    t1.commit().unwrap();
}

/// G2-item, item anti-dependency cycles (write skew): allowed under snapshot isolation.
#[test]
fn g2_item_write_skew_is_allowed() {
    let db = setup();
    let (mut t1, mut t2) = (no_wait(&db), no_wait(&db));
    assert_eq!((get(&t1, "1"), get(&t1, "2")), (Some(10), Some(20)));
    assert_eq!((get(&t2, "1"), get(&t2, "2")), (Some(10), Some(20)));
    set(&mut t1, "1", 11).unwrap();
    set(&mut t2, "2", 21).unwrap();
    t1.commit().unwrap();
    t2.commit().unwrap();
    assert_eq!(committed(&db), rows_of(&[("1", 11), ("2", 21)]));
}

fn get_for_update(t: &mut Txn<'_>, id: &str) -> tern::Result<Option<i64>> {
    Ok(t.get_for_update(id.as_bytes())?.map(|v| String::from_utf8(v).unwrap().parse().unwrap()))
}

/// P4 with locking reads (`get_for_update`, as `SELECT ... FOR UPDATE`): the second
/// read-modify-write waits for the first, then reads its result and commits; nothing aborts.
#[test]
fn p4_locking_reads_serialize_read_modify_writes() {
    let db = setup();
    let (mut t1, mut t2) = (no_wait(&db), no_wait(&db));
    assert_eq!(get_for_update(&mut t1, "1").unwrap(), Some(10));
    assert!(matches!(get_for_update(&mut t2, "1"), Err(Error::WouldBlock)), "t2 waits for t1");
    set(&mut t1, "1", 11).unwrap();
    t1.commit().unwrap();
    assert_eq!(get(&t2, "1"), Some(10), "a plain read still reads t2's snapshot");
    assert_eq!(get_for_update(&mut t2, "1").unwrap(), Some(11), "the locking read reads the newest commit");
    set(&mut t2, "1", 12).unwrap();
    assert_eq!(get(&t2, "1"), Some(12), "its own write");
    t2.commit().unwrap();
    assert_eq!(committed(&db), rows_of(&[("1", 12), ("2", 20)]));
    assert_eq!(db.stats().txn.conflicts, 0);
}

/// The same with the second transaction really blocked in the lock manager: increments from two
/// threads all land.
#[test]
fn p4_locking_reads_blocking() {
    let db = setup();
    let mut t1 = db.begin().unwrap();
    assert_eq!(get_for_update(&mut t1, "1").unwrap(), Some(10));
    std::thread::scope(|s| {
        let db2 = db.clone();
        let t2 = s.spawn(move || {
            let mut t2 = db2.begin().unwrap();
            let seen = get_for_update(&mut t2, "1").unwrap().unwrap();
            set(&mut t2, "1", seen + 1).unwrap();
            t2.commit().map(|()| seen).map_err(|e| e.to_string())
        });
        let start = Instant::now();
        while db.stats().locks.waits == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "t2 never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
        set(&mut t1, "1", 11).unwrap();
        t1.commit().unwrap();
        assert_eq!(t2.join().unwrap(), Ok(11), "t2 read t1's commit");
    });
    assert_eq!(committed(&db), rows_of(&[("1", 12), ("2", 20)]));
    assert_eq!(db.stats().txn.conflicts, 0);
}

/// A locking read of a missing key locks it too: nobody else inserts it meanwhile.
#[test]
fn a_locking_read_of_a_missing_key_keeps_others_from_inserting_it() {
    let db = setup();
    let (mut t1, mut t2) = (no_wait(&db), no_wait(&db));
    assert_eq!(get_for_update(&mut t1, "3").unwrap(), None);
    assert!(matches!(set(&mut t2, "3", 30), Err(Error::WouldBlock)));
    set(&mut t1, "3", 31).unwrap();
    t1.commit().unwrap();
    assert!(matches!(set(&mut t2, "3", 30), Err(Error::Conflict)), "t2's snapshot is older than t1's insert");
    let mut ro = db.begin_read().unwrap();
    assert!(matches!(ro.get_for_update(b"1"), Err(Error::ReadOnlyTxn)));
    assert!(matches!(ro.get_for_update(b""), Err(Error::ReadOnlyTxn | Error::KeyEmpty)));
}

/// A write whose key was committed after its snapshot, and is now locked by a third
/// transaction, is bound to conflict whatever the holder does: it fails at once instead of
/// waiting for the holder (here the holder never ends while the writer waits: the same thread
/// holds it, so a wait would only end at the timeout).
#[test]
fn a_write_bound_to_conflict_fails_before_waiting() {
    let db = setup();
    let timeout = TxnOptions { lock_wait: Wait::Timeout(Duration::from_secs(60)), ..TxnOptions::default() };
    let mut t1 = db.begin_with(timeout).unwrap();
    assert_eq!(get(&t1, "1"), Some(10));
    let mut t2 = no_wait(&db);
    set(&mut t2, "1", 11).unwrap();
    t2.commit().unwrap();
    let mut t3 = no_wait(&db);
    set(&mut t3, "1", 12).unwrap();
    assert!(matches!(set(&mut t1, "1", 13), Err(Error::Conflict)), "not a timeout");
    let txn = db.stats().txn;
    assert_eq!((txn.conflicts, txn.conflicts_before_wait), (1, 1));
    assert!(matches!(t1.commit(), Err(Error::TxnFailed { .. })));
    t3.abort();
    // Without a newer commit the same situation waits as before: a holder that ends lets it in.
    let mut t5 = no_wait(&db);
    set(&mut t5, "2", 21).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let mut t4 = db.begin_with(timeout).unwrap();
            let r = set(&mut t4, "2", 22).map_err(|e| e.to_string());
            (r, t4.commit().map_err(|e| e.to_string()))
        });
        let start = Instant::now();
        while db.stats().locks.waits == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "t4 never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
        t5.abort();
        assert_eq!(waiter.join().unwrap(), (Ok(()), Ok(())));
    });
    assert_eq!(committed(&db), rows_of(&[("1", 11), ("2", 22)]));
}
