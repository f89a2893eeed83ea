//! An audit of the public component modules (`sync`, `lock`, `btree`, `buffer`) used from
//! outside, against what their docs promise. Every wait is bounded: a probe runs on a thread
//! joined with a deadline, so a hang fails the test instead of stalling it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use tern::btree::{BTree, Layout, TreeConfig, MAX_VALUE};
use tern::buffer::{Pool, PoolConfig, MIN_FRAMES};
use tern::lock::{DeadlockPolicy, LockConfig, LockManager, LockMode, LockObject, LockerLookup, VictimPolicy, Wait};
use tern::sync::{HybridLatch, LatchClass, Mutex, RwLatch, SpinConfig, SpinPolicy};
use tern::Error;

/// Runs `f` on its own thread and returns its result, failing the test if it takes longer than
/// `secs` (a hang) or panics.
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => {
            handle.join().expect("probe thread");
            v
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("probe did not finish within {secs} s"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let e = handle.join().expect_err("the probe thread ended without a result, so it panicked");
            std::panic::resume_unwind(e)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// sync
// ---------------------------------------------------------------------------------------------

#[test]
#[cfg(not(loom))] // the calibration is not part of the loom build
fn calibration_pauses_in_takes_any_span_without_overflow() {
    let c = tern::sync::calibration();
    assert!(c.pauses_in(0) >= 1);
    let n = c.pauses_in(u64::MAX);
    assert!(n >= c.pauses_in(1_000_000), "{n}");
}

#[test]
fn spin_configs_outside_the_documented_limits_are_refused_and_change_nothing() {
    let class = LatchClass::register("audit.spin").unwrap();
    let before = class.config();
    let bad = [
        SpinConfig { spin_ns: SpinConfig::MAX_SPIN_NS + 1, ..SpinConfig::DEFAULT },
        SpinConfig { spin_ns: u32::MAX, ..SpinConfig::DEFAULT },
        SpinConfig { first_round_ns: 0, ..SpinConfig::DEFAULT },
        SpinConfig { first_round_ns: 10, max_round_ns: 9, ..SpinConfig::DEFAULT },
    ];
    for c in bad {
        assert!(matches!(c.validate(), Err(Error::InvalidArgument(_))), "{c:?}");
        assert!(matches!(class.set_config(c), Err(Error::InvalidArgument(_))), "{c:?}");
        assert_eq!(class.config(), before, "a refused config changes nothing");
        assert!(matches!(tern::sync::set_all_configs(c), Err(Error::InvalidArgument(_))));
        assert_eq!(class.config(), before);
    }
    let edge = SpinConfig {
        policy: SpinPolicy::Pause,
        spin_ns: SpinConfig::MAX_SPIN_NS,
        first_round_ns: u16::MAX,
        max_round_ns: u16::MAX,
    };
    class.set_config(edge).unwrap();
    assert_eq!(class.config(), edge);
    let edge0 = SpinConfig { policy: SpinPolicy::Park, spin_ns: 0, first_round_ns: 1, max_round_ns: 1 };
    class.set_config(edge0).unwrap();
    assert_eq!(class.config(), edge0);
    for p in SpinPolicy::ALL {
        class.set_policy(p).unwrap();
        assert_eq!(class.config().policy, p);
        assert_eq!(p.name().to_uppercase().parse::<SpinPolicy>().unwrap(), p);
    }
    assert!(matches!("spinny".parse::<SpinPolicy>(), Err(Error::InvalidArgument(_))));
    class.set_config(SpinConfig::DEFAULT).unwrap();
    assert_eq!(SpinConfig::default(), SpinConfig::DEFAULT);
    assert_eq!(SpinConfig::DEFAULT.policy, SpinPolicy::Adaptive);
}

#[test]
fn try_acquisitions_and_guards_in_any_order_follow_the_modes() {
    let m = Mutex::new(5);
    let g = m.lock();
    assert!(m.try_lock().is_none());
    drop(g);
    assert_eq!(*m.try_lock().unwrap(), 5);

    for bias in [true, false] {
        let l = RwLatch::with_options(1u32, LatchClass::DEFAULT, bias);
        let r1 = l.read();
        let r2 = l.try_read().expect("readers share");
        assert!(l.try_write().is_none(), "a reader is inside");
        drop(r1);
        assert!(l.try_write().is_none(), "a reader is still inside");
        drop(r2);
        let w = l.try_write().expect("free");
        assert!(l.try_read().is_none());
        assert!(l.try_write().is_none());
        drop(w);
        assert!(l.try_read().is_some());
    }

    let h = HybridLatch::new(std::sync::atomic::AtomicU64::new(0));
    let v0 = h.version();
    assert_eq!(v0 % 2, 0);
    let o = h.optimistic();
    let s = h.shared();
    assert!(h.try_exclusive().is_none(), "shared holder inside");
    assert!(h.try_optimistic().is_some(), "optimistic reads go with shared holders");
    drop(s);
    let x = h.exclusive();
    assert_eq!(h.version() % 2, 1, "odd while exclusive");
    assert!(h.try_optimistic().is_none());
    assert!(h.try_exclusive().is_none());
    drop(x);
    assert_eq!(h.version(), v0 + 2);
    assert!(o.validate().is_err(), "a writer came and went");
    assert!(o.into_exclusive().is_err());
    let o2 = h.optimistic();
    let x2 = o2.into_exclusive().expect("nothing changed");
    drop(x2);
    let o3 = h.optimistic();
    assert_eq!(o3.read(|d| d.load(std::sync::atomic::Ordering::Relaxed)), Ok(0));
    let sh = o3.into_shared().unwrap();
    drop(sh);
}

#[test]
fn latch_classes_have_names_default_first_and_stats() {
    let a = LatchClass::register("audit.names").unwrap();
    assert_eq!(a.name(), "audit.names");
    assert_eq!(LatchClass::register("audit.names").unwrap(), a);
    let all = LatchClass::all();
    assert_eq!(all[0], LatchClass::DEFAULT);
    assert_eq!(all[0].name(), "default");
    assert!(all.contains(&a));
    let stats = tern::sync::stats();
    assert!(stats.iter().any(|s| s.class == "audit.names"));
    let s = tern::sync::class_stats(a);
    assert_eq!(s.since(&s), tern::sync::LatchStats { class: "audit.names", ..Default::default() });
}

#[test]
fn restarts_and_revocations_are_counted_per_class_as_documented() {
    let class = LatchClass::register("audit.counters").unwrap();
    let before = tern::sync::class_stats(class);
    let h = HybridLatch::with_class(std::sync::atomic::AtomicU64::new(0), class);
    assert_eq!(h.class(), class);
    let o = h.optimistic();
    drop(h.exclusive());
    assert!(o.validate().is_err());
    let o = h.optimistic();
    drop(h.exclusive());
    assert!(o.into_shared().is_err());
    let o = h.optimistic();
    drop(h.exclusive());
    assert!(o.into_exclusive().is_err());
    let o = h.optimistic();
    assert!(o.validate().is_ok());
    let l = RwLatch::with_class(0u8, class);
    drop(l.read());
    assert!(l.is_reader_biased(), "a reader (re)biases a latch nobody wrote lately");
    drop(l.write());
    assert!(!l.is_reader_biased());
    let unbiased = RwLatch::with_options(0u8, class, false);
    drop(unbiased.read());
    assert!(!unbiased.is_reader_biased());
    drop(unbiased.write());
    let d = tern::sync::class_stats(class).since(&before);
    // LatchStats: restarts are "failed optimistic validations", revocations "reader-bias
    // revocations"; both always counted. Nothing waited.
    assert_eq!((d.restarts, d.revocations, d.contended, d.parks), (3, 1, 0, 0), "{d:?}");
}

// ---------------------------------------------------------------------------------------------
// lock
// ---------------------------------------------------------------------------------------------

fn lm() -> LockManager {
    LockManager::new(LockConfig::default()).unwrap()
}

#[test]
fn lock_config_limits_are_enforced_and_huge_intervals_work() {
    for (p, want) in [(1usize, 1usize), (3, 4), (65536, 65536), (64, 64)] {
        let m = LockManager::new(LockConfig { partitions: p, ..LockConfig::default() }).unwrap();
        assert_eq!(m.config().partitions, want);
    }
    for p in [65537usize, usize::MAX, 1 << 40] {
        assert!(matches!(
            LockManager::new(LockConfig { partitions: p, ..LockConfig::default() }),
            Err(Error::InvalidArgument(_))
        ));
    }
    let d = LockManager::new(LockConfig::default()).unwrap();
    let p = d.config().partitions;
    assert!(p.is_power_of_two() && (64..=4096).contains(&p), "{p}");
    for policy in [DeadlockPolicy::Periodic(Duration::ZERO), DeadlockPolicy::Timeout(Duration::ZERO)] {
        assert!(matches!(
            LockManager::new(LockConfig { deadlock: policy, ..LockConfig::default() }),
            Err(Error::InvalidArgument(_))
        ));
    }
    // Huge intervals and timeouts: no panic, and the manager drops without hanging.
    within(10, || {
        for policy in [
            DeadlockPolicy::Periodic(Duration::MAX),
            DeadlockPolicy::Timeout(Duration::MAX),
            DeadlockPolicy::Periodic(Duration::from_nanos(1)),
        ] {
            let m = LockManager::new(LockConfig { deadlock: policy, ..LockConfig::default() }).unwrap();
            let a = m.locker();
            m.lock(&a, 1u64, LockMode::X, Wait::Forever).unwrap();
            m.unlock_all(&a).unwrap();
            drop(a);
            drop(m);
        }
    });
}

#[test]
fn the_compatibility_matrix_holds_through_the_manager_for_ids_and_bytes() {
    use LockMode::*;
    // The standard matrix (Gray et al.).
    let expected = |a: LockMode, b: LockMode| -> bool {
        matches!((a, b), (IS, IS) | (IS, IX) | (IS, S) | (IS, SIX) | (IX, IS) | (IX, IX) | (S, IS) | (S, S) | (SIX, IS))
    };
    let configs = [
        LockConfig::default(),
        LockConfig {
            fast_shared: false,
            barging: false,
            spinning_waiters: 0,
            locker_lookup: LockerLookup::GlobalMutex,
            partitions: 1,
            ..LockConfig::default()
        },
    ];
    for config in configs {
        let m = LockManager::new(config).unwrap();
        let mut n = 0u64;
        for a in LockMode::ALL {
            for b in LockMode::ALL {
                assert_eq!(a.compatible(b), expected(a, b), "{a} {b}");
                n += 1;
                let (x, y) = (m.locker(), m.locker());
                m.lock(&x, n, a, Wait::No).unwrap();
                let got = m.lock(&y, n, b, Wait::No);
                assert_eq!(got.is_ok(), expected(a, b), "{a} held, {b} asked: {got:?}");
                if got.is_err() {
                    assert!(matches!(got, Err(Error::WouldBlock)));
                }
                let key = format!("k{n}");
                m.lock(&x, key.as_str(), a, Wait::No).unwrap();
                assert_eq!(m.lock(&y, key.as_str(), b, Wait::No).is_ok(), expected(a, b));
            }
        }
    }
    let m = lm();
    // Ids and byte strings are separate name spaces.
    let (x, y) = (m.locker(), m.locker());
    m.lock(&x, LockObject::Id(1), X, Wait::No).unwrap();
    m.lock(&y, &1u64.to_be_bytes(), X, Wait::No).unwrap();
    m.lock(&y, &1u64.to_le_bytes(), X, Wait::No).unwrap();
}

#[test]
fn unlocking_what_is_not_held_and_foreign_lockers_are_errors() {
    let m = lm();
    let (a, b) = (m.locker(), m.locker());
    assert!(matches!(m.unlock(&a, 7u64), Err(Error::LockNotHeld)));
    m.lock(&b, 7u64, LockMode::X, Wait::No).unwrap();
    assert!(matches!(m.unlock(&a, 7u64), Err(Error::LockNotHeld)), "held by b, not a");
    assert!(matches!(m.lock(&a, 7u64, LockMode::IS, Wait::No), Err(Error::WouldBlock)), "b still holds it");
    m.unlock(&b, 7u64).unwrap();
    assert!(matches!(m.unlock(&b, 7u64), Err(Error::LockNotHeld)));
    m.unlock_all(&a).unwrap();
    m.unlock_all(&a).unwrap();
    // A locker of another manager.
    let other = lm();
    let c = other.locker();
    assert!(matches!(m.lock(&c, 1u64, LockMode::S, Wait::No), Err(Error::InvalidArgument(_))));
    assert!(matches!(m.unlock(&c, 1u64), Err(Error::InvalidArgument(_))));
    assert!(matches!(m.unlock_all(&c), Err(Error::InvalidArgument(_))));
}

#[test]
fn a_refused_or_timed_out_upgrade_keeps_the_old_mode_once() {
    within(20, || {
        let m = lm();
        let (a, b) = (m.locker(), m.locker());
        m.lock(&a, "row", LockMode::S, Wait::No).unwrap();
        m.lock(&b, "row", LockMode::S, Wait::No).unwrap();
        assert!(matches!(m.lock(&a, "row", LockMode::X, Wait::No), Err(Error::WouldBlock)));
        assert!(matches!(
            m.lock(&a, "row", LockMode::X, Wait::Timeout(Duration::from_millis(20))),
            Err(Error::LockTimeout)
        ));
        assert!(matches!(m.lock(&a, "row", LockMode::X, Wait::Timeout(Duration::ZERO)), Err(Error::LockTimeout)));
        assert_eq!(a.locks_held(), 1);
        // a still holds S once: b can't get X, one unlock frees it.
        assert!(matches!(m.lock(&b, "row", LockMode::X, Wait::No), Err(Error::WouldBlock)));
        m.unlock(&a, "row").unwrap();
        assert!(matches!(m.unlock(&a, "row"), Err(Error::LockNotHeld)));
        m.lock(&b, "row", LockMode::X, Wait::No).unwrap();
        let s = m.stats();
        assert_eq!(s.would_block, 2, "{s:?}");
        assert_eq!(s.timeouts, 2, "{s:?}");
    });
}

#[test]
fn zero_and_huge_wait_timeouts() {
    within(10, || {
        let m = lm();
        let (a, b) = (m.locker(), m.locker());
        m.lock(&a, 1u64, LockMode::X, Wait::No).unwrap();
        assert!(matches!(m.lock(&b, 1u64, LockMode::S, Wait::Timeout(Duration::ZERO)), Err(Error::LockTimeout)));
        assert!(matches!(
            m.lock(&b, 1u64, LockMode::S, Wait::Timeout(Duration::from_nanos(1))),
            Err(Error::LockTimeout)
        ));
        m.unlock_all(&a).unwrap();
        // Huge timeout on a free lock: granted.
        m.lock(&b, 1u64, LockMode::S, Wait::Timeout(Duration::MAX)).unwrap();
        // Free lock with zero timeout: granted (nothing to wait for).
        m.lock(&a, 1u64, LockMode::S, Wait::Timeout(Duration::ZERO)).unwrap();
    });
}

fn deadlock_pair(policy: DeadlockPolicy, victim: VictimPolicy) {
    let m = Arc::new(LockManager::new(LockConfig { deadlock: policy, victim, ..LockConfig::default() }).unwrap());
    let a = m.locker();
    let b = m.locker();
    m.lock(&a, 1u64, LockMode::X, Wait::No).unwrap();
    m.lock(&b, 2u64, LockMode::X, Wait::No).unwrap();
    let (m2, barrier) = (m.clone(), Arc::new(std::sync::Barrier::new(2)));
    let bar2 = barrier.clone();
    // The locker moves to another thread (Send), waits there, and comes back.
    let t = std::thread::spawn(move || {
        bar2.wait();
        let r = m2.lock(&b, 1u64, LockMode::X, Wait::Forever);
        if r.is_err() {
            m2.unlock_all(&b).unwrap();
        }
        (r, b)
    });
    barrier.wait();
    let ra = m.lock(&a, 2u64, LockMode::X, Wait::Forever);
    if ra.is_err() {
        // The victim keeps its locks until it releases them.
        assert_eq!(a.locks_held(), 1);
        m.unlock_all(&a).unwrap();
    }
    let (rb, b) = t.join().unwrap();
    let errs = [&ra, &rb].iter().filter(|r| r.is_err()).count();
    assert_eq!(errs, 1, "exactly one victim: {ra:?} {rb:?}");
    assert!([&ra, &rb].iter().any(|r| matches!(r, Err(Error::Deadlock))), "{ra:?} {rb:?}");
    let s = m.stats();
    assert_eq!(s.deadlocks, 1, "{s:?}");
    assert!(s.waits >= 1);
    // The winner holds both; after releasing, nothing is locked.
    let winner = if ra.is_ok() { &a } else { &b };
    assert_eq!(winner.locks_held(), 2);
    // The victim can go on locking after its error.
    let loser = if ra.is_ok() { &b } else { &a };
    m.lock(loser, 3u64, LockMode::X, Wait::No).unwrap();
    m.unlock_all(loser).unwrap();
    m.unlock_all(winner).unwrap();
    assert_eq!(m.stats().objects, 0, "{:?}", m.stats());
}

#[test]
fn every_deadlock_policy_picks_one_victim_and_the_other_proceeds() {
    within(25, || {
        for victim in [VictimPolicy::Youngest, VictimPolicy::FewestLocks] {
            deadlock_pair(DeadlockPolicy::OnConflict, victim);
            deadlock_pair(DeadlockPolicy::Periodic(Duration::from_millis(5)), victim);
        }
    });
}

#[test]
fn lock_stats_count_what_their_docs_say() {
    let m = lm();
    let (a, b) = (m.locker(), m.locker());
    let s0 = m.stats();
    assert_eq!(s0.lockers, 2);
    assert_eq!(s0.requests, 0);
    m.lock(&a, 1u64, LockMode::S, Wait::No).unwrap();
    m.lock(&a, 1u64, LockMode::S, Wait::No).unwrap(); // re-entrant
    m.lock(&a, b"bytes", LockMode::X, Wait::No).unwrap();
    assert!(m.lock(&b, b"bytes", LockMode::S, Wait::No).is_err());
    let s = m.stats();
    assert_eq!(s.requests, 4, "{s:?}");
    assert_eq!(s.would_block, 1);
    assert_eq!(s.objects, 2);
    assert_eq!(s.partition_contention.len(), m.config().partitions);
    drop(b);
    let s = m.stats();
    assert_eq!(s.lockers, 1);
    assert_eq!(s.requests, 4, "a dropped locker's counts stay");
    m.unlock_all(&a).unwrap();
    assert_eq!(m.stats().objects, 0);
}

#[test]
fn readers_of_one_object_get_fast_grants_and_a_writer_revokes_them() {
    within(20, || {
        let m = lm();
        let readers: Vec<_> = (0..12).map(|_| m.locker()).collect();
        for r in &readers {
            m.lock(r, b"hot", LockMode::S, Wait::No).unwrap();
        }
        let s = m.stats();
        assert!(s.fast_grants > 0, "readers past the bias threshold take fast slots: {s:?}");
        let w = m.locker();
        assert!(matches!(m.lock(&w, b"hot", LockMode::X, Wait::No), Err(Error::WouldBlock)));
        let s = m.stats();
        assert!(s.revocations >= 1, "{s:?}");
        // Every reader still holds its lock after the revocation, and releases it once.
        for r in &readers {
            assert_eq!(r.locks_held(), 1);
            assert!(matches!(m.lock(&w, b"hot", LockMode::X, Wait::No), Err(Error::WouldBlock)));
            m.unlock(r, b"hot").unwrap();
            assert!(matches!(m.unlock(r, b"hot"), Err(Error::LockNotHeld)));
        }
        m.lock(&w, b"hot", LockMode::X, Wait::No).unwrap();
    });
}

#[test]
fn fifty_thousand_objects_in_one_locker_and_a_locker_outliving_its_manager() {
    within(25, || {
        let m = lm();
        let a = m.locker();
        for i in 0..50_000u64 {
            m.lock(&a, i, LockMode::X, Wait::No).unwrap();
        }
        assert_eq!(a.locks_held(), 50_000);
        assert_eq!(m.stats().objects, 50_000);
        for i in (0..50_000u64).step_by(2) {
            m.unlock(&a, i).unwrap();
        }
        assert_eq!(a.locks_held(), 25_000);
        m.unlock_all(&a).unwrap();
        assert_eq!(m.stats().objects, 0);
        let b = m.locker();
        m.lock(&b, 5u64, LockMode::X, Wait::No).unwrap();
        drop(m);
        assert_eq!(b.locks_held(), 1);
        drop(b); // releases through the manager state it keeps alive
    });
}

#[test]
fn the_timeout_policy_bounds_forever_waits_and_explicit_timeouts_stay_the_callers() {
    within(20, || {
        let m = Arc::new(
            LockManager::new(LockConfig {
                deadlock: DeadlockPolicy::Timeout(Duration::from_millis(20)),
                ..LockConfig::default()
            })
            .unwrap(),
        );
        let (a, b) = (m.locker(), m.locker());
        m.lock(&a, 1u64, LockMode::X, Wait::No).unwrap();
        // DeadlockPolicy::Timeout's rustdoc: a `Wait::Forever` request waits at most this long.
        assert!(matches!(m.lock(&b, 1u64, LockMode::X, Wait::Forever), Err(Error::LockTimeout)));
        // A request with its own, longer timeout keeps it: the lock released later is granted.
        let m2 = m.clone();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            m2.unlock_all(&a).unwrap();
        });
        m.lock(&b, 1u64, LockMode::X, Wait::Timeout(Duration::from_secs(15))).unwrap();
        holder.join().unwrap();
    });
}

#[test]
fn empty_and_megabyte_byte_string_objects_lock() {
    let m = lm();
    let (a, b) = (m.locker(), m.locker());
    m.lock(&a, b"", LockMode::X, Wait::No).unwrap();
    assert!(matches!(m.lock(&b, b"", LockMode::S, Wait::No), Err(Error::WouldBlock)));
    let big = vec![9u8; 1 << 20];
    m.lock(&a, &big, LockMode::X, Wait::No).unwrap();
    let mut big2 = big.clone();
    big2[12345] = 8;
    m.lock(&b, &big2, LockMode::X, Wait::No).unwrap();
    assert!(matches!(m.lock(&b, &big, LockMode::S, Wait::No), Err(Error::WouldBlock)));
    m.lock(&a, u64::MAX, LockMode::X, Wait::No).unwrap();
    m.unlock_all(&a).unwrap();
    m.lock(&b, &big, LockMode::S, Wait::No).unwrap();
}

// ---------------------------------------------------------------------------------------------
// btree
// ---------------------------------------------------------------------------------------------

#[test]
fn tree_configs_outside_the_limits_are_errors() {
    for page_size in [0usize, 1, 2048, 4095, 4097, 12288, 131072, usize::MAX] {
        let c = TreeConfig { page_size, ..TreeConfig::default() };
        assert!(matches!(BTree::new(c), Err(Error::InvalidArgument(_))), "{page_size}");
    }
    for prefetch in [3u8, 255] {
        let c = TreeConfig { prefetch, ..TreeConfig::default() };
        assert!(matches!(BTree::new(c), Err(Error::InvalidArgument(_))));
    }
    let t = BTree::new(TreeConfig::default()).unwrap();
    assert!(matches!(t.set_prefetch(3), Err(Error::InvalidArgument(_))));
    assert_eq!(t.config().prefetch, 1);
    t.set_prefetch(0).unwrap();
    assert_eq!(t.config().prefetch, 0);
    // A pool of another page size.
    let pool = Pool::memory(8192, false).unwrap();
    assert!(matches!(BTree::with_pool(TreeConfig::default(), pool), Err(Error::InvalidArgument(_))));
    for l in Layout::ALL {
        assert_eq!(l.name().parse::<Layout>().unwrap(), l);
    }
    assert!(matches!("bogus".parse::<Layout>(), Err(Error::InvalidArgument(_))));
}

#[test]
fn bulk_load_refuses_a_bad_page_size_with_an_error_not_a_panic() {
    // TreeConfig::page_size: "a power of two from 4 KiB to 64 KiB"; bulk_load fails "with the
    // usual key and value errors", as BTree::new does for its config.
    for page_size in [0usize, 2048, 12288, 131072, usize::MAX] {
        let c = TreeConfig { page_size, ..TreeConfig::default() };
        let r = BTree::bulk_load(c, [(b"a", b"b")]);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{page_size}");
    }
    let r = BTree::bulk_load(TreeConfig { prefetch: 3, ..TreeConfig::default() }, [(b"a", b"b")]);
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
}

#[test]
fn key_and_value_limits_are_enforced_as_documented() {
    for page_size in [4096usize, 65536] {
        let t = BTree::new(TreeConfig { page_size, ..TreeConfig::default() }).unwrap();
        let max = page_size / 8;
        assert_eq!(t.max_key_len(), max);
        let long = vec![7u8; max + 1];
        for r in [t.insert(&long, b"v"), t.upsert(&long, b"v"), t.delete(&long)] {
            assert!(matches!(r, Err(Error::KeyTooLarge { len, max: m }) if len == max + 1 && m == max), "{r:?}");
        }
        assert!(matches!(t.get(&long), Err(Error::KeyTooLarge { .. })));
        for r in [t.insert(b"", b"v"), t.upsert(b"", b"v"), t.delete(b"")] {
            assert!(matches!(r, Err(Error::KeyEmpty)), "{r:?}");
        }
        assert!(matches!(t.get(b""), Err(Error::KeyEmpty)));
        let huge = vec![0u8; MAX_VALUE + 1];
        assert!(matches!(
            t.insert(b"k", &huge),
            Err(Error::ValueTooLarge { len, max }) if len == MAX_VALUE + 1 && max == MAX_VALUE
        ));
        drop(huge);
        // Keys at the maximum with inline and overflowing values.
        let k = vec![0xffu8; max];
        assert!(t.insert(&k, &vec![1u8; page_size]).unwrap());
        assert_eq!(t.get(&k).unwrap().unwrap(), vec![1u8; page_size]);
        let k2 = vec![0x00u8; max];
        assert!(t.insert(&k2, b"small").unwrap());
        assert_eq!(t.range(..).count(), 2);
        t.check().unwrap();
    }
}

#[test]
fn values_around_the_inline_limit_and_keys_at_the_maximum_round_trip() {
    for page_size in [4096usize, 16384] {
        let t = BTree::new(TreeConfig { page_size, ..TreeConfig::default() }).unwrap();
        let pages = t.stats().pages;
        // docs/btree.md: the value inline while key + value <= a quarter page, else overflow.
        let quarter = page_size / 4;
        for klen in [1usize, 9, t.max_key_len()] {
            for total in [quarter - 1, quarter, quarter + 1, quarter + 8, 3 * page_size] {
                let key = vec![b'k'; klen];
                let value: Vec<u8> = (0..total - klen).map(|i| i as u8).collect();
                assert!(t.insert(&key, &value).unwrap());
                assert_eq!(t.get(&key).unwrap().unwrap(), value, "{klen} {total}");
                let shorter = &value[..value.len() / 2];
                assert!(t.upsert(&key, shorter).unwrap());
                assert_eq!(t.get(&key).unwrap().unwrap(), shorter);
                assert!(t.upsert(&key, &value).unwrap());
                assert_eq!(t.get(&key).unwrap().unwrap(), value);
                assert!(!t.insert(&key, b"x").unwrap(), "present: insert changes nothing");
                assert_eq!(t.range(..).map(|(_, v)| v).collect::<Vec<_>>(), std::slice::from_ref(&value));
                assert!(t.delete(&key).unwrap());
                assert_eq!(t.stats().pages, pages, "overflow pages freed ({klen} {total})");
            }
        }
        t.check().unwrap();
    }
}

/// A small deterministic generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_key(r: &mut Rng, max: usize) -> Vec<u8> {
    match r.below(4) {
        0 => vec![b'p'; max - r.below(3) as usize], // max length, ties in heads
        1 => {
            let mut k = b"prefix/shared/".to_vec();
            k.extend_from_slice(&r.below(500).to_be_bytes());
            k
        }
        2 => vec![r.below(256) as u8; 1 + r.below(3) as usize],
        _ => r.below(2000).to_be_bytes().to_vec(),
    }
}

fn bound(r: &mut Rng, max: usize) -> Bound<Vec<u8>> {
    match r.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(random_key(r, max)),
        _ => Bound::Excluded(random_key(r, max)),
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
    }
}

fn model_range(
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .iter()
        .filter(|(k, _)| {
            (match lo {
                Bound::Unbounded => true,
                Bound::Included(l) => *k >= l,
                Bound::Excluded(l) => *k > l,
            }) && (match hi {
                Bound::Unbounded => true,
                Bound::Included(h) => *k <= h,
                Bound::Excluded(h) => *k < h,
            })
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn a_tree_agrees_with_btreemap_in_every_layout_with_and_without_hints() {
    within(60, || {
        for layout in Layout::ALL {
            for hints in [false, true] {
                let page_size = 4096;
                let t =
                    BTree::new(TreeConfig { page_size, layout, hints, prefetch: 2, ..TreeConfig::default() }).unwrap();
                let max = t.max_key_len();
                let mut model = BTreeMap::new();
                let mut r = Rng(0x9e3779b97f4a7c15 ^ (layout as u64) << 8 ^ hints as u64);
                for step in 0..3000 {
                    let k = random_key(&mut r, max);
                    match r.below(6) {
                        0 | 1 => {
                            let cap = if r.below(10) == 0 { 3000 } else { 40 };
                            let v = vec![step as u8; r.below(cap) as usize];
                            assert_eq!(t.insert(&k, &v).unwrap(), !model.contains_key(&k));
                            model.entry(k).or_insert(v);
                        }
                        2 => {
                            let v = vec![(step >> 3) as u8; r.below(100) as usize];
                            assert_eq!(t.upsert(&k, &v).unwrap(), model.insert(k, v).is_some());
                        }
                        3 => assert_eq!(t.delete(&k).unwrap(), model.remove(&k).is_some()),
                        4 => assert_eq!(t.get(&k).unwrap(), model.get(&k).cloned()),
                        _ => {
                            let (lo, hi) = (bound(&mut r, max), bound(&mut r, max));
                            let want = model_range(&model, &lo, &hi);
                            let got: Vec<_> = t.range((as_ref(&lo), as_ref(&hi))).collect();
                            assert_eq!(got, want, "{layout} {lo:?} {hi:?}");
                            let mut back: Vec<_> = t.range((as_ref(&lo), as_ref(&hi))).rev().collect();
                            back.reverse();
                            assert_eq!(back, want);
                        }
                    }
                }
                t.check().unwrap();
                // Cursor seeks agree with the model.
                let mut c = t.cursor();
                for _ in 0..300 {
                    let k = random_key(&mut r, max);
                    let ge = model.range(k.clone()..).next().map(|(k, _)| k.clone());
                    assert_eq!(c.seek(&k).then(|| c.key().unwrap().to_vec()), ge);
                    let gt = model.range((Bound::Excluded(k.clone()), Bound::Unbounded)).next().map(|(k, _)| k.clone());
                    assert_eq!(c.seek_after(&k).then(|| c.key().unwrap().to_vec()), gt);
                    let le = model.range(..=k.clone()).next_back().map(|(k, _)| k.clone());
                    assert_eq!(c.seek_for_prev(&k).then(|| c.key().unwrap().to_vec()), le);
                    let lt = model.range(..k.clone()).next_back().map(|(k, _)| k.clone());
                    assert_eq!(c.seek_before(&k).then(|| c.key().unwrap().to_vec()), lt);
                }
                // Delete everything: back to one page.
                let keys: Vec<_> = model.keys().cloned().collect();
                for k in keys {
                    assert!(t.delete(&k).unwrap());
                }
                t.check().unwrap();
                assert_eq!(t.range(..).count(), 0);
            }
        }
    });
}

#[test]
fn cursors_and_ranges_with_odd_bounds() {
    let t = BTree::new(TreeConfig::default()).unwrap();
    for i in 0..100u32 {
        t.insert(&i.to_be_bytes(), b"v").unwrap();
    }
    let max = t.max_key_len();
    let mut c = t.cursor();
    assert!(c.seek(b""));
    assert_eq!(c.key().unwrap(), 0u32.to_be_bytes());
    assert!(!c.seek_before(b""));
    assert!(!c.seek(&vec![0xff; max * 4]), "past every key");
    assert!(c.seek_for_prev(&vec![0xff; max * 4]));
    assert_eq!(c.key().unwrap(), 99u32.to_be_bytes());
    assert!(!c.next_entry());
    assert!(!c.next_entry(), "stays past the end");
    assert!(c.key().is_none());
    // Reversed and empty ranges.
    let (a, b) = (10u32.to_be_bytes(), 20u32.to_be_bytes());
    assert_eq!(t.range(&b[..]..&a[..]).count(), 0);
    assert_eq!(t.range(&b[..]..&a[..]).rev().count(), 0);
    assert_eq!(t.range((Bound::Excluded(&a[..]), Bound::Excluded(&a[..]))).count(), 0);
    assert_eq!(t.range(&a[..]..=&a[..]).count(), 1);
    assert_eq!(t.range(&a[..]..&a[..]).count(), 0);
    assert_eq!(t.range(..).count(), 100);
    // Both ends of a range meet in the middle.
    let mut r = t.range(&a[..]..&b[..]);
    let mut n = 0;
    while let Some(_) = r.next() {
        n += 1;
        if r.next_back().is_some() {
            n += 1;
        }
    }
    assert_eq!(n, 10);
}

#[test]
fn tree_stats_count_splits_merges_and_pages() {
    let t = BTree::new(TreeConfig { page_size: 4096, ..TreeConfig::default() }).unwrap();
    assert_eq!(t.stats().pages, 1);
    for i in 0..5000u32 {
        t.insert(&i.to_be_bytes(), &[0u8; 100]).unwrap();
    }
    let s = t.stats();
    assert!(s.splits > 0 && s.pages > 1, "{s:?}");
    assert_eq!(s.pages, t.pool().live_pages());
    t.insert(b"big", &vec![1u8; 100_000]).unwrap();
    let with_overflow = t.stats().pages;
    assert!(with_overflow >= s.pages + 100_000 / 4096);
    t.delete(b"big").unwrap();
    assert_eq!(t.stats().pages, s.pages);
    for i in 0..5000u32 {
        t.delete(&i.to_be_bytes()).unwrap();
    }
    let s = t.stats();
    assert!(s.merges > 0, "{s:?}");
    assert_eq!(t.check().unwrap().keys, 0);
}

// ---------------------------------------------------------------------------------------------
// buffer
// ---------------------------------------------------------------------------------------------

fn file_pool(page_size: usize, cache: Option<u64>, rows: u64) -> (tempfile::TempDir, tern::Result<Arc<Pool>>) {
    let dir = tempfile::tempdir().unwrap();
    let config = PoolConfig { page_size, cache_bytes: cache, row_cache_bytes: rows, huge_pages: false };
    let pool = Pool::with_file(config, Arc::new(tern::fs::StdFs), dir.path().join("pages"));
    (dir, pool)
}

#[test]
fn a_file_pool_refuses_page_sizes_outside_the_documented_range() {
    // PoolConfig::page_size: "a power of two, 4 KiB to 64 KiB".
    for page_size in [0usize, 100, 4095, 12288, 131072] {
        let (_d, p) = file_pool(page_size, Some(1 << 20), 0);
        assert!(matches!(p, Err(Error::InvalidArgument(_))), "page size {page_size}: {p:?}");
    }
}

#[test]
fn a_memory_pool_refuses_page_sizes_outside_the_documented_range() {
    // PoolConfig::page_size: "a power of two, 4 KiB to 64 KiB"; usize::MAX panicked in
    // frame_layout and 0 made a pool of empty pages.
    for page_size in [0usize, 100, 4095, 12288, 131072, usize::MAX] {
        let p = Pool::memory(page_size, false);
        assert!(matches!(p, Err(Error::InvalidArgument(_))), "page size {page_size}: {p:?}");
    }
    for page_size in [4096usize, 8192, 16384, 32768, 65536] {
        assert_eq!(Pool::memory(page_size, true).unwrap().page_size(), page_size);
    }
}

#[test]
fn a_pool_asked_for_no_memory_gets_min_frames_and_works() {
    let (_d, p) = file_pool(4096, Some(0), 0);
    let p = p.unwrap();
    assert!(p.evicts());
    assert_eq!(p.stats().capacity_pages, MIN_FRAMES as u64);
    assert_eq!(p.stats().page_size, 4096);
    let (_d2, p2) = file_pool(4096, None, 0);
    assert!(!p2.unwrap().evicts());
    let m = Pool::memory(4096, false).unwrap();
    assert!(!m.evicts());
    assert_eq!(m.stats().capacity_pages, 0);
    // A tree in a pool of the fewest frames works and stays within it.
    let (_d3, p3) = file_pool(4096, Some(0), u64::MAX);
    let p3 = p3.unwrap();
    let t = BTree::with_pool(TreeConfig { page_size: 4096, ..TreeConfig::default() }, p3.clone()).unwrap();
    for i in 0..3000u32 {
        t.insert(&i.to_be_bytes(), &[3u8; 200]).unwrap();
    }
    for i in 0..3000u32 {
        assert_eq!(t.get(&i.to_be_bytes()).unwrap().unwrap(), vec![3u8; 200]);
    }
    t.check().unwrap();
    let s = p3.stats();
    assert!(s.evictions > 0, "{s:?}");
    assert_eq!(s.live_pages, t.stats().pages as u64);
}
