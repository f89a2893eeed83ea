//! The public database API: tables, reads, writes, scans, and clear errors for bad input.

use tern::{Db, Error, Options};

fn db() -> Db {
    Db::open_temporary(Options::default()).unwrap()
}

#[test]
fn a_database_is_clone_send_and_sync() {
    fn check<T: Clone + Send + Sync>() {}
    check::<Db>();
    check::<tern::Table>();
}

#[test]
fn tables_are_separate_keyspaces() {
    let db = db();
    let users = db.create_table("users").unwrap();
    let orders = db.create_table("orders").unwrap();
    assert!(matches!(db.create_table("users"), Err(Error::TableExists { name }) if name == "users"));
    assert!(matches!(db.create_table(""), Err(Error::InvalidArgument(_))));
    assert!(matches!(db.table("nope"), Err(Error::NoSuchTable { name }) if name == "nope"));
    assert_eq!(db.table_names(), ["", "users", "orders"]);
    let mut t = db.begin().unwrap();
    t.put(b"k", b"default").unwrap();
    t.put_in(&users, b"k", b"user").unwrap();
    t.put_in(&orders, b"k", b"order").unwrap();
    let again = t.table("users").unwrap();
    assert_eq!(t.get_in(&again, b"k").unwrap().as_deref(), Some(&b"user"[..]), "own writes, by name");
    t.commit().unwrap();
    let r = db.begin_read().unwrap();
    assert_eq!(r.get(b"k").unwrap().as_deref(), Some(&b"default"[..]));
    assert_eq!(r.get_in(&users, b"k").unwrap().as_deref(), Some(&b"user"[..]));
    assert_eq!(r.get_in(&orders, b"k").unwrap().as_deref(), Some(&b"order"[..]));
    assert_eq!(r.range_in(&orders, ..).unwrap().count(), 1);
    // A table of another database is refused, not mixed in.
    let other = Db::open_temporary(Options::default()).unwrap();
    let foreign = other.create_table("users").unwrap();
    assert!(matches!(r.get_in(&foreign, b"k"), Err(Error::InvalidArgument(_))));
}

#[test]
fn get_into_reuses_the_buffer_and_sees_own_writes_and_snapshots() {
    let db = db();
    let users = db.create_table("users").unwrap();
    let mut t = db.begin().unwrap();
    t.put(b"a", b"one").unwrap();
    t.put_in(&users, b"a", b"uno").unwrap();
    let mut out = b"stale bytes that must go".to_vec();
    assert!(t.get_into(b"a", &mut out).unwrap(), "own write");
    assert_eq!(out, b"one");
    assert!(t.get_into_in(&users, b"a", &mut out).unwrap());
    assert_eq!(out, b"uno");
    assert!(!t.get_into(b"missing", &mut out).unwrap());
    t.commit().unwrap();
    let before = db.begin_read().unwrap();
    let mut w = db.begin().unwrap();
    w.put(b"a", b"two").unwrap();
    w.commit().unwrap();
    assert!(before.get_into(b"a", &mut out).unwrap());
    assert_eq!(out, b"one", "the older snapshot");
    assert!(db.begin_read().unwrap().get_into(b"a", &mut out).unwrap());
    assert_eq!(out, b"two");
    let other = Db::open_temporary(Options::default()).unwrap();
    let foreign = other.create_table("users").unwrap();
    assert!(matches!(before.get_into_in(&foreign, b"a", &mut out), Err(Error::InvalidArgument(_))));
}

#[test]
fn ranges_honour_their_bounds_in_both_directions_and_see_own_writes() {
    let db = db();
    let mut t = db.begin().unwrap();
    for k in [b"a", b"b", b"c", b"d", b"e"] {
        t.put(k, k).unwrap();
    }
    t.commit().unwrap();
    let mut t = db.begin().unwrap();
    t.delete(b"c").unwrap();
    t.put(b"bb", b"new").unwrap();
    fn keys(it: impl Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Vec<String> {
        it.map(|(k, _)| String::from_utf8(k).unwrap()).collect()
    }
    assert_eq!(keys(t.range(&b"b"[..]..&b"e"[..]).unwrap()), ["b", "bb", "d"]);
    assert_eq!(keys(t.range(&b"b"[..]..=&b"e"[..]).unwrap()), ["b", "bb", "d", "e"]);
    assert_eq!(keys(t.range(..).unwrap().rev()), ["e", "d", "bb", "b", "a"]);
    let mut both = t.range(..).unwrap();
    assert_eq!(both.next().unwrap().0, b"a");
    assert_eq!(both.next_back().unwrap().0, b"e");
    assert_eq!(both.next().unwrap().0, b"b");
    assert_eq!(both.next_back().unwrap().0, b"d");
    assert_eq!(both.next().unwrap().0, b"bb");
    assert_eq!(both.next(), None);
    assert_eq!(both.next_back(), None);
    drop(both);
    let other = db.begin_read().unwrap();
    assert_eq!(keys(other.range(..).unwrap()), ["a", "b", "c", "d", "e"], "uncommitted writes are invisible");
}

#[test]
fn bad_input_gets_clear_errors() {
    let db = db();
    let mut t = db.begin().unwrap();
    assert!(matches!(t.put(b"", b"v"), Err(Error::KeyEmpty)));
    let long = vec![7u8; 64 * 1024];
    assert!(matches!(t.put(&long, b"v"), Err(Error::KeyTooLarge { len: 65536, .. })));
    assert!(matches!(t.get(&long), Err(Error::KeyTooLarge { .. })));
    assert!(matches!(t.delete(b""), Err(Error::KeyEmpty)));
    t.put(b"ok", b"v").unwrap();
    t.commit().unwrap();
    let mut r = db.begin_read().unwrap();
    assert!(matches!(r.put(b"k", b"v"), Err(Error::ReadOnlyTxn)));
    assert!(matches!(r.delete(b"k"), Err(Error::ReadOnlyTxn)));
    assert!(r.is_read_only());
    r.commit().unwrap();
}

#[test]
fn a_failed_transaction_refuses_everything_but_abort() {
    let db = db();
    let mut t1 = db.begin().unwrap();
    let mut t2 = db.begin().unwrap();
    t1.put(b"k", b"1").unwrap();
    t1.commit().unwrap();
    assert!(matches!(t2.put(b"k", b"2"), Err(Error::Conflict)));
    assert!(matches!(t2.get(b"k"), Err(Error::TxnFailed { .. })));
    assert!(matches!(t2.range(..), Err(Error::TxnFailed { .. })));
    assert!(matches!(t2.put(b"other", b"2"), Err(Error::TxnFailed { .. })));
    let err = t2.commit().unwrap_err();
    assert!(err.to_string().contains("conflict"), "{err}");
    // The failed transaction's locks are gone: others write freely.
    let mut t3 = db.begin().unwrap();
    t3.put(b"k", b"3").unwrap();
    t3.commit().unwrap();
}

#[test]
fn dropping_a_transaction_aborts_it() {
    let db = db();
    {
        let mut t = db.begin().unwrap();
        t.put(b"k", b"lost").unwrap();
    }
    assert_eq!(db.begin_read().unwrap().get(b"k").unwrap(), None);
    let mut t = db.begin().unwrap();
    t.put(b"k", b"kept").unwrap(); // the dropped transaction's lock is gone
    t.commit().unwrap();
    let s = db.stats();
    assert_eq!((s.txn.aborted, s.txn.committed), (1, 1));
}

#[test]
fn large_values_and_many_keys_round_trip() {
    let db = db();
    let big = vec![0xabu8; 3 << 20];
    let mut t = db.begin().unwrap();
    t.put(b"big", &big).unwrap();
    for i in 0..20_000u32 {
        t.put(&i.to_be_bytes(), &i.to_le_bytes()).unwrap();
    }
    t.commit().unwrap();
    db.gc();
    let r = db.begin_read().unwrap();
    assert_eq!(r.get(b"big").unwrap().unwrap().len(), big.len());
    assert_eq!(r.get(&777u32.to_be_bytes()).unwrap(), Some(777u32.to_le_bytes().to_vec()));
    assert_eq!(r.range(..).unwrap().count(), 20_001);
    // Everything folded, the big value into overflow pages (a 3 MiB chain of them).
    assert_eq!(db.stats().gc.versions_live, 0);
}

#[test]
fn open_creates_the_directory_and_says_so_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b");
    let db = Db::open(&path, Options::default()).unwrap();
    assert!(path.is_dir());
    assert_eq!(db.path(), Some(path.as_path()));
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = Db::open(file.join("db"), Options::default()).unwrap_err();
    assert!(matches!(err, Error::Io { .. }) && err.to_string().contains("creating database directory"), "{err}");
}

/// Values too large for a leaf fold like the others: into overflow pages, the leaf keeping
/// their reference (they stayed versions in memory for good before, and every checkpoint
/// wrote them all again beside its page map).
#[test]
fn large_values_fold_into_overflow_pages_and_a_gc_call_is_one_pass() {
    let db = db();
    let big = |i: u8| vec![i; 8192 + usize::from(i) * 5000]; // over a quarter of a 16 KiB page
    for i in 0..10u8 {
        let mut t = db.begin().unwrap();
        t.put(&[i], &big(i)).unwrap();
        t.commit().unwrap();
    }
    let passes = db.stats().gc.passes;
    let pass = db.gc();
    assert_eq!((pass.remaining, pass.folded), (0, 10), "nothing to wait for: {pass:?}");
    assert_eq!(db.stats().gc.passes, passes + 1);
    assert_eq!(db.stats().gc.versions_live, 0, "no version left");
    assert_eq!(db.gc().remaining, 0);
    for i in 0..10u8 {
        assert_eq!(db.begin_read().unwrap().get(&[i]).unwrap().unwrap(), big(i));
    }
    // Overwritten (small, then large again) and deleted: the pages are freed and reused.
    let pages = db.stats().buffer.live_pages;
    for round in 0..3u8 {
        let mut t = db.begin().unwrap();
        for i in 0..10u8 {
            match (round + i) % 3 {
                0 => t.put(&[i], b"small").unwrap(),
                1 => t.put(&[i], &big(i + round)).unwrap(),
                _ => drop(t.delete(&[i]).unwrap()),
            }
        }
        t.commit().unwrap();
        db.gc();
        let read = db.begin_read().unwrap();
        for i in 0..10u8 {
            let expected = match (round + i) % 3 {
                0 => Some(b"small".to_vec()),
                1 => Some(big(i + round)),
                _ => None,
            };
            assert_eq!(read.get(&[i]).unwrap(), expected, "round {round}, key {i}");
        }
    }
    assert_eq!(db.stats().gc.versions_live, 0);
    assert!(db.stats().buffer.live_pages <= pages + 4, "freed chains are given back");
}

#[test]
fn a_huge_lock_timeout_waits_rather_than_wrapping_to_nothing() {
    use std::time::Duration;
    use tern::lock::Wait;
    let db = db();
    let mut t1 = db.begin().unwrap();
    t1.put(b"k", b"1").unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let opts =
                tern::TxnOptions { lock_wait: Wait::Timeout(Duration::from_secs(1 << 55)), ..Default::default() };
            let mut t2 = db.begin_with(opts).unwrap();
            t2.put(b"k", b"2").map_err(|e| e.to_string())
        });
        while db.stats().locks.waits == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "the huge timeout must not have expired");
        t1.commit().unwrap();
        assert_eq!(waiter.join().unwrap(), Err(Error::Conflict.to_string()));
    });
}

/// Dropping a transaction that wrote nothing (the usual end of a read) lets go of its snapshot:
/// it no longer holds versions back, and it is counted once (read-only, or aborted).
#[test]
fn a_transaction_dropped_without_writes_lets_go_of_its_snapshot() {
    let db = db();
    let put = |v: &[u8]| {
        let mut t = db.begin().unwrap();
        t.put(b"k", v).unwrap();
        t.commit().unwrap();
    };
    put(b"1");
    db.gc();
    for read_only in [true, false] {
        let before = db.stats().txn;
        let t = if read_only { db.begin_read().unwrap() } else { db.begin().unwrap() };
        let old = t.get(b"k").unwrap().unwrap();
        put(b"2");
        let held = db.gc();
        assert!(held.remaining > 0, "the open snapshot keeps the old value: {held:?}");
        assert_eq!(t.get(b"k").unwrap().unwrap(), old, "and still reads it");
        drop(t);
        let pass = db.gc();
        assert_eq!(pass.remaining, 0, "dropped, it holds nothing back: {pass:?}");
        assert_eq!(db.stats().gc.versions_live, 0);
        let after = db.stats().txn;
        if read_only {
            assert_eq!((after.read_only, after.aborted), (before.read_only + 1, before.aborted));
        } else {
            assert_eq!((after.read_only, after.aborted), (before.read_only, before.aborted + 1));
        }
        put(&old);
    }
}
