use super::*;
use crate::Error;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex as StdMutex};
use std::time::{Duration, Instant};

fn manager(fast_shared: bool) -> LockManager {
    LockManager::new(LockConfig { fast_shared, partitions: 16, ..LockConfig::default() }).unwrap()
}

/// The textbook matrix, written out independently of `mode.rs`.
fn expected_compatible(a: LockMode, b: LockMode) -> bool {
    use LockMode::*;
    matches!((a, b), (IS, IS) | (IS, IX) | (IS, S) | (IS, SIX) | (IX, IS) | (IX, IX) | (S, IS) | (S, S) | (SIX, IS))
}

#[test]
fn compatibility_matrix_holds_for_every_pair_of_modes() {
    for fast in [false, true] {
        let lm = manager(fast);
        for a in LockMode::ALL {
            for b in LockMode::ALL {
                let (x, y) = (lm.locker(), lm.locker());
                // Several rounds, so that biased entries (fast holders) are covered too.
                for _ in 0..6 {
                    lm.lock(&x, 7u64, a, Wait::No).unwrap();
                    let got = lm.lock(&y, 7u64, b, Wait::No);
                    match got {
                        Ok(()) => {
                            assert!(expected_compatible(a, b), "{a} then {b} granted (fast={fast})");
                            lm.unlock(&y, 7u64).unwrap();
                        }
                        Err(Error::WouldBlock) => {
                            assert!(!expected_compatible(a, b), "{a} then {b} refused (fast={fast})")
                        }
                        Err(e) => panic!("{e}"),
                    }
                    lm.unlock(&x, 7u64).unwrap();
                }
                assert_eq!(x.locks_held() + y.locks_held(), 0);
            }
        }
        // Everything was released; at most the one object's entry stays biased.
        assert!(lm.stats().objects <= 1, "{:?}", lm.stats());
    }
}

#[test]
fn join_is_the_least_upper_bound() {
    for a in LockMode::ALL {
        for b in LockMode::ALL {
            let j = a.join(b);
            assert!(j.covers(a) && j.covers(b), "{a} v {b} = {j}");
            assert_eq!(j, b.join(a));
            // Anything compatible with the join is compatible with both.
            for c in LockMode::ALL {
                if j.compatible(c) {
                    assert!(a.compatible(c) && b.compatible(c));
                }
            }
        }
        assert_eq!(a.to_string().parse::<LockMode>().unwrap(), a);
    }
    assert!("Q".parse::<LockMode>().is_err());
}

#[test]
fn reentrant_locks_need_one_unlock_each_and_join_modes() {
    let lm = manager(true);
    let (a, b) = (lm.locker(), lm.locker());
    lm.lock(&a, "t", LockMode::S, Wait::No).unwrap();
    lm.lock(&a, "t", LockMode::IX, Wait::No).unwrap(); // S v IX = SIX
    assert_eq!(lm.lock(&b, "t", LockMode::IX, Wait::No).unwrap_err().to_string(), Error::WouldBlock.to_string());
    lm.lock(&b, "t", LockMode::IS, Wait::No).unwrap(); // IS is compatible with SIX
    lm.unlock(&b, "t").unwrap();
    lm.unlock(&a, "t").unwrap();
    assert!(matches!(lm.lock(&b, "t", LockMode::IX, Wait::No), Err(Error::WouldBlock)), "one unlock left");
    lm.unlock(&a, "t").unwrap();
    lm.lock(&b, "t", LockMode::IX, Wait::No).unwrap();
    assert!(matches!(lm.unlock(&a, "t"), Err(Error::LockNotHeld)));
    assert!(matches!(lm.unlock(&a, "never"), Err(Error::LockNotHeld)));
}

/// One locker holds one object at most `MAX_HOLDS` times: one more lock, of any mode (an
/// upgrade too), is refused with `InvalidArgument` and leaves the holds as they were. (The
/// count is set near the limit directly: reaching it takes 2^32 calls.)
#[test]
fn a_lock_past_the_most_holds_of_one_object_is_refused() {
    let lm = manager(true);
    let a = lm.locker();
    lm.lock(&a, "t", LockMode::S, Wait::No).unwrap();
    {
        let mut local = a.local.borrow_mut();
        let i = local.find(super::object::hash(LockObject::from("t")), LockObject::from("t")).unwrap();
        local.get_mut(i).count = MAX_HOLDS - 1;
    }
    lm.lock(&a, "t", LockMode::S, Wait::No).unwrap(); // the last one allowed
    for mode in [LockMode::S, LockMode::X] {
        assert!(matches!(lm.lock(&a, "t", mode, Wait::No), Err(Error::InvalidArgument(_))), "{mode:?}");
    }
    let b = lm.locker();
    lm.lock(&b, "t", LockMode::S, Wait::No).unwrap(); // still S, not upgraded
}

#[test]
fn wrong_manager_and_dropped_lockers() {
    let (lm, other) = (manager(true), manager(true));
    let a = lm.locker();
    assert!(matches!(other.lock(&a, 1u64, LockMode::X, Wait::No), Err(Error::InvalidArgument(_))));
    lm.lock(&a, 1u64, LockMode::X, Wait::No).unwrap();
    lm.lock(&a, b"two", LockMode::S, Wait::No).unwrap();
    let b = lm.locker();
    assert!(matches!(lm.lock(&b, 1u64, LockMode::S, Wait::No), Err(Error::WouldBlock)));
    drop(a);
    lm.lock(&b, 1u64, LockMode::X, Wait::No).unwrap();
    lm.lock(&b, b"two", LockMode::X, Wait::No).unwrap();
    assert!(LockManager::new(LockConfig { partitions: 1 << 20, ..LockConfig::default() }).is_err());
    assert!(LockManager::new(LockConfig {
        deadlock: DeadlockPolicy::Periodic(Duration::ZERO),
        ..LockConfig::default()
    })
    .is_err());
}

/// Waits until `n` requests have waited in total (so queue order is the order of spawning).
fn wait_for_waits(lm: &LockManager, n: u64) {
    let start = Instant::now();
    while lm.stats().waits < n {
        assert!(start.elapsed() < Duration::from_secs(20), "requests did not queue");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(5));
}

#[test]
fn waiters_are_granted_in_fifo_order() {
    for fast in [false, true] {
        let lm = Arc::new(manager(fast));
        let holder = lm.locker();
        lm.lock(&holder, 9u64, LockMode::X, Wait::No).unwrap();
        let order = Arc::new(StdMutex::new(Vec::new()));
        let modes = [LockMode::S, LockMode::X, LockMode::S, LockMode::IX, LockMode::S];
        let mut threads = Vec::new();
        for (i, mode) in modes.into_iter().enumerate() {
            let (lm2, order2) = (lm.clone(), order.clone());
            threads.push(std::thread::spawn(move || {
                let l = lm2.locker();
                lm2.lock(&l, 9u64, mode, Wait::Forever).unwrap();
                order2.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(20));
                lm2.unlock(&l, 9u64).unwrap();
            }));
            wait_for_waits(&lm, i as u64 + 1);
        }
        lm.unlock(&holder, 9u64).unwrap();
        for t in threads {
            t.join().unwrap();
        }
        // 0 (S) alone, then 1 (X), then 2 (S) alone (3 is IX: incompatible), then 3, then 4.
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4], "fast={fast}");
    }
}

#[test]
fn compatible_waiters_are_granted_together_and_new_requests_queue_behind_waiters() {
    let lm = Arc::new(manager(false));
    let holder = lm.locker();
    lm.lock(&holder, 1u64, LockMode::X, Wait::No).unwrap();
    let granted = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for i in 0..3 {
        let (lm2, g) = (lm.clone(), granted.clone());
        threads.push(std::thread::spawn(move || {
            let l = lm2.locker();
            lm2.lock(&l, 1u64, LockMode::S, Wait::Forever).unwrap();
            g.fetch_add(1, SeqCst);
            while g.load(SeqCst) < 3 {
                std::thread::yield_now(); // all three hold S at once
            }
        }));
        wait_for_waits(&lm, i + 1);
    }
    // A new S request is compatible with nothing held but must not pass the queue.
    let late = lm.locker();
    assert!(matches!(lm.lock(&late, 1u64, LockMode::IS, Wait::No), Err(Error::WouldBlock)));
    lm.unlock(&holder, 1u64).unwrap();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(granted.load(SeqCst), 3);
}

#[test]
fn upgrades_wait_for_other_readers_and_go_ahead_of_new_requests() {
    for fast in [false, true] {
        let lm = Arc::new(manager(fast));
        let (a, b) = (lm.locker(), lm.locker());
        for _ in 0..6 {
            lm.lock(&a, 5u64, LockMode::S, Wait::No).unwrap();
            lm.lock(&b, 5u64, LockMode::S, Wait::No).unwrap();
            lm.unlock(&b, 5u64).unwrap();
            lm.unlock(&a, 5u64).unwrap();
        }
        // Alone: immediate.
        lm.lock(&a, 5u64, LockMode::S, Wait::No).unwrap();
        lm.lock(&a, 5u64, LockMode::X, Wait::No).unwrap();
        lm.unlock_all(&a).unwrap();
        // With another reader: waits until it leaves, ahead of a queued X.
        lm.lock(&a, 5u64, LockMode::S, Wait::No).unwrap();
        lm.lock(&b, 5u64, LockMode::S, Wait::No).unwrap();
        let waits = lm.stats().waits;
        let lm2 = lm.clone();
        let other = std::thread::spawn(move || {
            let c = lm2.locker();
            lm2.lock(&c, 5u64, LockMode::X, Wait::Forever).unwrap();
            Instant::now()
        });
        wait_for_waits(&lm, waits + 1);
        let lm3 = lm.clone();
        let upgrader = std::thread::spawn(move || {
            lm3.lock(&a, 5u64, LockMode::X, Wait::Forever).unwrap();
            let at = Instant::now();
            std::thread::sleep(Duration::from_millis(20));
            lm3.unlock_all(&a).unwrap();
            at
        });
        wait_for_waits(&lm, waits + 2);
        lm.unlock(&b, 5u64).unwrap();
        let (up, x) = (upgrader.join().unwrap(), other.join().unwrap());
        assert!(up < x, "the upgrade is granted before the X queued earlier (fast={fast})");
    }
}

#[test]
fn two_readers_upgrading_deadlock_and_exactly_one_loses() {
    let lm = Arc::new(manager(true));
    let barrier = Arc::new(Barrier::new(2));
    let victims = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (lm, barrier, victims) = (lm.clone(), barrier.clone(), victims.clone());
            std::thread::spawn(move || {
                let l = lm.locker();
                lm.lock(&l, "row", LockMode::S, Wait::Forever).unwrap();
                barrier.wait();
                match lm.lock(&l, "row", LockMode::X, Wait::Forever) {
                    Ok(()) => {}
                    Err(Error::Deadlock) => {
                        victims.fetch_add(1, SeqCst);
                    }
                    Err(e) => panic!("{e}"),
                }
                lm.unlock_all(&l).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(victims.load(SeqCst), 1);
    assert_eq!(lm.stats().deadlocks, 1);
}

#[test]
fn timeouts_fail_the_request_and_leave_the_queue() {
    let lm = manager(false);
    let (a, b, c) = (lm.locker(), lm.locker(), lm.locker());
    lm.lock(&a, 3u64, LockMode::X, Wait::No).unwrap();
    let start = Instant::now();
    assert!(matches!(
        lm.lock(&b, 3u64, LockMode::S, Wait::Timeout(Duration::from_millis(30))),
        Err(Error::LockTimeout)
    ));
    assert!(start.elapsed() >= Duration::from_millis(30));
    lm.unlock(&a, 3u64).unwrap();
    // b's request is gone: c gets the lock at once.
    lm.lock(&c, 3u64, LockMode::X, Wait::No).unwrap();
    let s = lm.stats();
    assert_eq!((s.timeouts, s.waits), (1, 1));

    let lm = LockManager::new(LockConfig {
        deadlock: DeadlockPolicy::Timeout(Duration::from_millis(20)),
        ..LockConfig::default()
    })
    .unwrap();
    let (a, b) = (lm.locker(), lm.locker());
    lm.lock(&a, 3u64, LockMode::X, Wait::No).unwrap();
    assert!(matches!(lm.lock(&b, 3u64, LockMode::X, Wait::Forever), Err(Error::LockTimeout)));
}

/// `k` lockers each hold object i and ask for object i+1 (mod k): one cycle of length k.
/// The lock timeout of the timeout policy in [`cycle`].
const CYCLE_TIMEOUT: Duration = Duration::from_millis(500);

fn cycle(config: LockConfig, k: usize) {
    let lm = Arc::new(LockManager::new(config).unwrap());
    let barrier = Arc::new(Barrier::new(k));
    let outcomes = Arc::new(StdMutex::new(Vec::new()));
    let stagger = matches!(config.deadlock, DeadlockPolicy::Timeout(_));
    let threads: Vec<_> = (0..k)
        .map(|i| {
            let (lm, barrier, outcomes) = (lm.clone(), barrier.clone(), outcomes.clone());
            std::thread::spawn(move || {
                let l = lm.locker();
                lm.lock(&l, i as u64, LockMode::X, Wait::Forever).unwrap();
                barrier.wait();
                if stagger && i > 0 {
                    // Timeouts only: the first waiter's deadline comes clearly first, and the
                    // others (all waiting well before it) have half a timeout left when it
                    // passes, for the hand-overs it starts to reach them even on a busy machine.
                    std::thread::sleep(CYCLE_TIMEOUT / 2);
                }
                let r = lm.lock(&l, ((i + 1) % k) as u64, LockMode::X, Wait::Forever);
                outcomes.lock().unwrap().push((i, r.is_ok(), r.err().map(|e| e.to_string())));
                lm.unlock_all(&l).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let outcomes = outcomes.lock().unwrap();
    let losers: Vec<_> = outcomes.iter().filter(|o| !o.1).collect();
    assert_eq!(losers.len(), 1, "{config:?}, cycle of {k}: {outcomes:?}");
    let expected = if stagger { Error::LockTimeout } else { Error::Deadlock }.to_string();
    assert_eq!(losers[0].2.as_deref(), Some(expected.as_str()));
    if config.victim == VictimPolicy::Youngest && !stagger {
        // Lockers are created in thread start order, which is not fixed; the victim is the
        // youngest on the cycle, i.e. the one with the largest id. Checked in the stats only.
        assert_eq!(lm.stats().deadlocks, 1);
    }
}

#[test]
fn deadlock_cycles_of_2_to_8_are_broken_under_every_policy() {
    let policies = [
        DeadlockPolicy::OnConflict,
        DeadlockPolicy::Periodic(Duration::from_millis(5)),
        DeadlockPolicy::Timeout(CYCLE_TIMEOUT),
    ];
    for deadlock in policies {
        for victim in [VictimPolicy::Youngest, VictimPolicy::FewestLocks] {
            for k in 2..=8 {
                cycle(LockConfig { deadlock, victim, ..LockConfig::default() }, k);
            }
        }
    }
}

#[test]
fn the_victim_is_chosen_by_policy() {
    // Two lockers: the older holds three locks, the younger one.
    for (victim, expect_young) in [(VictimPolicy::Youngest, true), (VictimPolicy::FewestLocks, true)] {
        let lm = Arc::new(LockManager::new(LockConfig { victim, ..LockConfig::default() }).unwrap());
        let (old, young) = (lm.locker(), lm.locker());
        lm.lock(&old, 1u64, LockMode::X, Wait::No).unwrap();
        lm.lock(&old, 10u64, LockMode::X, Wait::No).unwrap();
        lm.lock(&old, 11u64, LockMode::X, Wait::No).unwrap();
        lm.lock(&young, 2u64, LockMode::X, Wait::No).unwrap();
        let lm2 = lm.clone();
        let t = std::thread::spawn(move || {
            let r = lm2.lock(&old, 2u64, LockMode::X, Wait::Forever);
            lm2.unlock_all(&old).unwrap();
            r.is_ok()
        });
        wait_for_waits(&lm, 1);
        let young_ok = lm.lock(&young, 1u64, LockMode::X, Wait::Forever).is_ok();
        lm.unlock_all(&young).unwrap();
        let old_ok = t.join().unwrap();
        assert_eq!((young_ok, old_ok), (!expect_young, expect_young), "{victim:?}");
    }
    // Fewest locks picks the older locker when it holds less.
    let lm =
        Arc::new(LockManager::new(LockConfig { victim: VictimPolicy::FewestLocks, ..LockConfig::default() }).unwrap());
    let (old, young) = (lm.locker(), lm.locker());
    lm.lock(&old, 1u64, LockMode::X, Wait::No).unwrap();
    for o in [2u64, 20, 21] {
        lm.lock(&young, o, LockMode::X, Wait::No).unwrap();
    }
    let lm2 = lm.clone();
    let t = std::thread::spawn(move || {
        let r = lm2.lock(&young, 1u64, LockMode::X, Wait::Forever);
        lm2.unlock_all(&young).unwrap();
        r.is_ok()
    });
    wait_for_waits(&lm, 1);
    let old_ok = lm.lock(&old, 2u64, LockMode::X, Wait::Forever).is_ok();
    lm.unlock_all(&old).unwrap();
    assert_eq!((old_ok, t.join().unwrap()), (false, true));
}

#[test]
fn fast_shared_locks_are_revoked_by_a_writer_and_block_it() {
    let lm = Arc::new(manager(true));
    let readers: Vec<Locker> = (0..3).map(|_| lm.locker()).collect();
    for _ in 0..BIAS_ROUNDS {
        for r in &readers {
            lm.lock(r, b"hot", LockMode::S, Wait::No).unwrap();
        }
        for r in &readers {
            lm.unlock(r, b"hot").unwrap();
        }
    }
    for r in &readers {
        lm.lock(r, b"hot", LockMode::S, Wait::No).unwrap();
        lm.lock(r, b"hot", LockMode::S, Wait::No).unwrap(); // re-entrant, fast
    }
    assert!(lm.stats().fast_grants > 0, "the entry became biased");
    let w = lm.locker();
    assert!(matches!(lm.lock(&w, b"hot", LockMode::X, Wait::No), Err(Error::WouldBlock)));
    assert_eq!(lm.stats().revocations, 1);
    // New readers now queue behind nothing (no waiter) and are compatible: granted slow.
    let late = lm.locker();
    lm.lock(&late, b"hot", LockMode::S, Wait::No).unwrap();
    lm.unlock(&late, b"hot").unwrap();
    let lm2 = lm.clone();
    let writer = std::thread::spawn(move || lm2.lock(&w, b"hot", LockMode::X, Wait::Forever).map(|_| w));
    wait_for_waits(&lm, 1);
    for r in &readers {
        lm.unlock(r, b"hot").unwrap(); // one of two
    }
    std::thread::sleep(Duration::from_millis(10));
    assert!(!writer.is_finished(), "readers still hold one lock each");
    for r in &readers {
        lm.unlock(r, b"hot").unwrap();
        assert_eq!(r.locks_held(), 0);
    }
    let w = writer.join().unwrap().unwrap();
    assert_eq!(w.locks_held(), 1);
}

const BIAS_ROUNDS: usize = 3;

/// Random transactions over a few objects; a checker asserts no two incompatible holders are
/// ever registered at once, and every thread finishes (deadlocks get resolved).
fn stress(config: LockConfig, threads: usize, txns: usize, objects: u64) -> u64 {
    let lm = Arc::new(LockManager::new(config).unwrap());
    type Held = HashMap<u64, Vec<(usize, LockMode)>>;
    let held: Arc<StdMutex<Held>> = Arc::default();
    let aborts = Arc::new(AtomicUsize::new(0));
    // One conflict whatever the scheduling: object 0 is held exclusively until a worker has
    // queued behind it (on a busy machine the workers can otherwise run one after another).
    let first = lm.locker();
    lm.lock(&first, LockObject::Id(0), LockMode::X, Wait::No).unwrap();
    held.lock().unwrap().insert(0, vec![(usize::MAX, LockMode::X)]);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (lm, held, aborts) = (lm.clone(), held.clone(), aborts.clone());
            std::thread::spawn(move || {
                let mut rng = 0x9e37_79b9u64 ^ (t as u64) << 32;
                let mut next = move || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let l = lm.locker();
                for _ in 0..txns {
                    let n = 1 + next() % 4;
                    let mut mine: HashMap<u64, LockMode> = HashMap::new();
                    for _ in 0..n {
                        let o = next() % objects;
                        let mode = LockMode::ALL[(next() % 5) as usize];
                        let wait = match next() % 16 {
                            0 | 1 => Wait::No,
                            2 => Wait::Timeout(Duration::from_micros(next() % 500)),
                            _ => Wait::Forever,
                        };
                        // Odd objects are named by bytes, even ones by id.
                        let name = o.to_be_bytes();
                        let object = if o % 2 == 1 { LockObject::Bytes(&name) } else { LockObject::Id(o) };
                        match lm.lock(&l, object, mode, wait) {
                            Ok(()) => {
                                let m = mine.get(&o).map_or(mode, |h| h.join(mode));
                                mine.insert(o, m);
                                let mut h = held.lock().unwrap();
                                let list = h.entry(o).or_default();
                                list.retain(|(who, _)| *who != t);
                                for (who, other) in list.iter() {
                                    assert!(m.compatible(*other), "thread {t} holds {m} with thread {who} in {other}");
                                }
                                list.push((t, m));
                            }
                            Err(Error::WouldBlock | Error::LockTimeout) => {}
                            Err(Error::Deadlock) => {
                                aborts.fetch_add(1, SeqCst);
                                break;
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    {
                        let mut h = held.lock().unwrap();
                        for o in mine.keys() {
                            h.get_mut(o).unwrap().retain(|(who, _)| *who != t);
                        }
                    }
                    lm.unlock_all(&l).unwrap();
                    assert_eq!(l.locks_held(), 0);
                }
            })
        })
        .collect();
    wait_for_waits(&lm, 1);
    held.lock().unwrap().get_mut(&0).unwrap().retain(|(who, _)| *who != usize::MAX);
    lm.unlock_all(&first).unwrap();
    let start = Instant::now();
    while !handles.iter().all(|h| h.is_finished()) {
        assert!(start.elapsed() < Duration::from_secs(60), "stuck:\n{}", lm.dump());
        std::thread::sleep(Duration::from_millis(10));
    }
    for h in handles {
        h.join().unwrap();
    }
    let s = lm.stats();
    if !config.fast_shared {
        assert_eq!(s.objects, 0, "every entry left the table: {s:?}");
    }
    assert_eq!(s.deadlocks as usize, aborts.load(SeqCst));
    s.waits
}

#[test]
fn random_transactions_never_hold_incompatible_locks() {
    let mut waits = 0;
    for fast_shared in [true, false] {
        waits += stress(LockConfig { fast_shared, partitions: 4, ..LockConfig::default() }, 6, 400, 8);
    }
    // No waiter spinning before it parks, and more spinners than this machine has CPUs.
    for spinning_waiters in [0, 4] {
        waits += stress(LockConfig { spinning_waiters, partitions: 4, ..LockConfig::default() }, 6, 200, 8);
    }
    waits += stress(
        LockConfig { deadlock: DeadlockPolicy::Periodic(Duration::from_millis(2)), ..LockConfig::default() },
        4,
        200,
        6,
    );
    assert!(waits >= 5, "every run had conflicts");
}

/// With waiters allowed to spin before they park (`spinning_waiters`), a deadline shorter than
/// the spin still ends the wait with `LockTimeout`, a later waiter is granted the lock once it
/// is free, and no wait leaves its spinner slot taken (a leaked slot would stop
/// every later waiter from spinning).
#[test]
fn a_spinning_waiter_keeps_its_deadline() {
    let lm = Arc::new(LockManager::new(LockConfig { spinning_waiters: 1, ..LockConfig::default() }).unwrap());
    let (a, b) = (lm.locker(), lm.locker());
    lm.lock(&a, 1u64, LockMode::X, Wait::No).unwrap();
    let started = Instant::now();
    let timed_out = lm.lock(&b, 1u64, LockMode::X, Wait::Timeout(Duration::from_micros(20)));
    assert!(matches!(timed_out, Err(Error::LockTimeout)), "{timed_out:?} after {:?}", started.elapsed());
    assert_eq!(lm.spinning(), 0, "the timed-out waiter gave its slot back");
    let lm2 = lm.clone();
    let waiter = std::thread::spawn(move || lm2.lock(&b, 1u64, LockMode::X, Wait::Forever).map(|()| b));
    wait_for_waits(&lm, 2);
    lm.unlock_all(&a).unwrap();
    let b = waiter.join().unwrap().unwrap();
    lm.unlock_all(&b).unwrap();
    assert_eq!(lm.spinning(), 0, "nor did the granted one");
}

#[test]
fn timeouts_beyond_the_clock_mean_no_deadline_not_a_panic() {
    let lm = Arc::new(manager(false));
    let (a, b) = (lm.locker(), lm.locker());
    lm.lock(&a, 1u64, LockMode::X, Wait::No).unwrap();
    let lm2 = lm.clone();
    let waiter = std::thread::spawn(move || lm2.lock(&b, 1u64, LockMode::X, Wait::Timeout(Duration::MAX)).map(|()| b));
    wait_for_waits(&lm, 1);
    lm.unlock(&a, 1u64).unwrap();
    assert_eq!(waiter.join().unwrap().unwrap().locks_held(), 1);
    let lm = LockManager::new(LockConfig { deadlock: DeadlockPolicy::Timeout(Duration::MAX), ..LockConfig::default() })
        .unwrap();
    let (a, b) = (lm.locker(), lm.locker());
    lm.lock(&a, 1u64, LockMode::X, Wait::No).unwrap();
    assert!(matches!(lm.lock(&b, 1u64, LockMode::X, Wait::No), Err(Error::WouldBlock)));
}

/// Regression: a waiter on two cycles at once. `l` waits for an object `a` and `b` both hold
/// shared, while `a` and `b` each wait for an object `l` holds: cycles l-a-l and l-b-l. With the
/// youngest as victim, `a` loses the first; `b` must lose the second, although `a` keeps its
/// shared lock (a victim keeps what it holds) and no new wait starts that would look again.
#[test]
fn a_waiter_on_two_cycles_has_both_broken() {
    let lm = Arc::new(manager(false));
    let l = lm.locker(); // oldest: never the victim
    lm.lock(&l, 1u64, LockMode::X, Wait::No).unwrap();
    lm.lock(&l, 2u64, LockMode::X, Wait::No).unwrap();
    let release = Arc::new(Barrier::new(3));
    let outcome = Arc::new(StdMutex::new(Vec::new()));
    let threads: Vec<_> = [1u64, 2]
        .into_iter()
        .map(|wants| {
            let (lm, release, outcome) = (lm.clone(), release.clone(), outcome.clone());
            let me = lm.locker();
            lm.lock(&me, 0u64, LockMode::S, Wait::No).unwrap();
            std::thread::spawn(move || {
                let r = lm.lock(&me, wants, LockMode::X, Wait::Forever);
                outcome.lock().unwrap().push(r.map_err(|e| e.to_string()));
                release.wait(); // keep the shared lock on 0 until `l` has its answer
                lm.unlock_all(&me).unwrap();
            })
        })
        .collect();
    wait_for_waits(&lm, 2);
    let lm2 = lm.clone();
    let waiter = std::thread::spawn(move || {
        let r = lm2.lock(&l, 0u64, LockMode::X, Wait::Timeout(Duration::from_secs(20)));
        (r.map_err(|e| e.to_string()), l)
    });
    let start = Instant::now();
    while outcome.lock().unwrap().len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(20), "a cycle was left: {}", lm.dump());
        std::thread::sleep(Duration::from_millis(1));
    }
    let deadlock = Err(Error::Deadlock.to_string());
    assert_eq!(*outcome.lock().unwrap(), vec![deadlock.clone(), deadlock]);
    release.wait();
    for t in threads {
        t.join().unwrap();
    }
    let (r, l) = waiter.join().unwrap();
    assert_eq!(r, Ok(()), "l gets the lock once both victims release");
    assert_eq!(l.locks_held(), 3);
    assert_eq!(lm.stats().deadlocks, 2);
}

/// A locker re-takes entries it released lately from its own cache. Those entries may have
/// been swept and reused for other objects since; the stale cache must never lock the wrong
/// object, nor leave a phantom lock behind.
#[test]
fn stale_cached_entries_never_lock_the_wrong_object() {
    // One partition, so sweeps recycle the cached entries quickly.
    let lm = LockManager::new(LockConfig { partitions: 1, fast_shared: false, ..LockConfig::default() }).unwrap();
    let (a, b) = (lm.locker(), lm.locker());
    let mine: Vec<Vec<u8>> = (0..8).map(|i| format!("mine/{i}").into_bytes()).collect();
    for round in 0..20u64 {
        for o in &mine {
            lm.lock(&a, o, LockMode::X, Wait::No).unwrap();
        }
        lm.unlock_all(&a).unwrap(); // cached now
                                    // b churns through many other objects: sweeps retire a's entries and reuse them.
        let base = round * 1000;
        for id in base..base + 500 {
            lm.lock(&b, id, LockMode::X, Wait::No).unwrap();
            lm.unlock(&b, id).unwrap();
        }
        // b holds some of the reused entries, free others; a locks its objects again.
        for id in (base..base + 500).step_by(7) {
            lm.lock(&b, id, LockMode::X, Wait::No).unwrap();
        }
        for o in &mine {
            lm.lock(&a, o, LockMode::X, Wait::No).unwrap();
        }
        assert_eq!(a.locks_held(), 8);
        for o in &mine {
            assert!(matches!(lm.lock(&b, o, LockMode::S, Wait::No), Err(Error::WouldBlock)));
        }
        // a holds nothing of b's: every other object is free for b.
        for id in base..base + 500 {
            lm.lock(&b, id, LockMode::X, Wait::No).unwrap_or_else(|e| panic!("object {id}: {e}"));
        }
        lm.unlock_all(&a).unwrap();
        lm.unlock_all(&b).unwrap();
    }
    let s = lm.stats();
    assert_eq!(s.objects, 0, "{s:?}");
    // 20 x 500 objects went through one partition; idle entries were swept as it grew.
    assert!(s.entries < 2000, "the table is swept: {s:?}");
}

#[test]
fn an_owner_is_inflated_by_a_second_locker_and_releases_through_the_holders() {
    let lm = Arc::new(manager(false));
    let (a, b) = (lm.locker(), lm.locker());
    lm.lock(&a, "row", LockMode::S, Wait::No).unwrap(); // sole owner
    lm.lock(&a, "row", LockMode::S, Wait::No).unwrap(); // re-entrant, local count
    lm.lock(&b, "row", LockMode::IS, Wait::No).unwrap(); // inflates: a becomes a holder
    assert!(matches!(lm.lock(&b, "row", LockMode::X, Wait::No), Err(Error::WouldBlock)));
    lm.unlock(&a, "row").unwrap();
    assert!(matches!(lm.lock(&b, "row", LockMode::X, Wait::No), Err(Error::WouldBlock)), "a still holds once");
    let lm2 = lm.clone();
    let upgrader = std::thread::spawn(move || lm2.lock(&b, "row", LockMode::X, Wait::Forever).map(|()| b));
    wait_for_waits(&lm, 1);
    lm.unlock(&a, "row").unwrap(); // through the holders: grants b's upgrade
    let b = upgrader.join().unwrap().unwrap();
    assert_eq!(b.locks_held(), 1);
    assert!(matches!(lm.lock(&a, "row", LockMode::IS, Wait::No), Err(Error::WouldBlock)));
    lm.unlock_all(&b).unwrap();
    lm.lock(&a, "row", LockMode::X, Wait::No).unwrap(); // free again: a sole owner again
    assert_eq!(lm.stats().objects, 1);
}

#[test]
fn many_objects_per_locker_use_the_index_and_unlock_exactly() {
    let lm = manager(true);
    let (a, b) = (lm.locker(), lm.locker());
    for id in 0..1000u64 {
        lm.lock(&a, id, if id % 2 == 0 { LockMode::S } else { LockMode::X }, Wait::No).unwrap();
        lm.lock(&a, format!("k{id}").as_str(), LockMode::IX, Wait::No).unwrap();
    }
    assert_eq!(a.locks_held(), 2000);
    for id in (0..1000u64).rev().step_by(3) {
        lm.unlock(&a, id).unwrap();
        assert!(matches!(lm.unlock(&a, id), Err(Error::LockNotHeld)));
    }
    for id in 0..1000u64 {
        let released = (999 - id) % 3 == 0;
        let r = lm.lock(&b, id, LockMode::X, Wait::No);
        assert_eq!(r.is_ok(), released, "object {id}: {r:?}");
    }
    lm.unlock_all(&a).unwrap();
    assert_eq!(a.locks_held(), 0);
    lm.lock(&b, "k5", LockMode::X, Wait::No).unwrap();
}

#[test]
fn a_wait_for_a_grant_is_counted_under_lock_wait_and_parks_at_once_when_told_to() {
    use crate::sync::{class_stats, LatchClass, SpinPolicy};
    let class = LatchClass::register("lock.wait").unwrap();
    let config = class.config();
    class.set_policy(SpinPolicy::Park).unwrap();
    let before = class_stats(class);
    let lm = Arc::new(manager(false));
    let holder = lm.locker();
    lm.lock(&holder, 77u64, LockMode::X, Wait::No).unwrap();
    let lm2 = lm.clone();
    let waiter = std::thread::spawn(move || {
        let l = lm2.locker();
        lm2.lock(&l, 77u64, LockMode::X, Wait::Forever).unwrap();
        lm2.unlock(&l, 77u64).unwrap();
    });
    wait_for_waits(&lm, 1);
    lm.unlock(&holder, 77u64).unwrap();
    waiter.join().unwrap();
    let after = class_stats(class);
    class.set_config(config).unwrap();
    // Other tests' waits may count too; this one's wait is among them.
    assert!(after.contended > before.contended, "{before:?} -> {after:?}");
    assert!(after.parks > before.parks, "{before:?} -> {after:?}");
}

/// The granting rule of a release, on one entry's slow state: with barging, an `X` request
/// first in line is sent back and the lock left open to the next compatible request, at most
/// one waiter out at a time; a hand-over is due once `FAIR_EVERY` has passed; upgrades and
/// other modes, and barging off, hand over in FIFO order.
#[test]
fn a_barging_release_opens_an_x_lock_and_sends_its_first_waiter_back() {
    use super::locker::{LockerShared, GRANTED, RETRY, WAITING};
    use super::table::{Grant, Request, Slow};
    let class = crate::sync::LatchClass::register("lock.test").unwrap();
    let lockers: Vec<Arc<LockerShared>> = (1..=3).map(|id| Arc::new(LockerShared::new(id, class))).collect();
    let slow_with_waiters = |modes: &[LockMode], upgrade: bool| {
        let mut slow = Slow { holders: vec![Grant { locker: 9, mode: LockMode::X }], ..Slow::default() };
        for (l, &mode) in lockers.iter().zip(modes) {
            l.wait.store(WAITING, SeqCst);
            slow.enqueue(Request { locker: l.clone(), mode, upgrade });
        }
        slow.ungrant(9);
        slow
    };
    let queued = |slow: &Slow| slow.queue.iter().map(|r| r.locker.id).collect::<Vec<_>>();

    // Barging: the first waiter is sent back, the lock is open, nobody holds it.
    let mut slow = slow_with_waiters(&[LockMode::X, LockMode::X], false);
    let mut wake = Vec::new();
    slow.grant_waiters(&mut wake, true);
    assert_eq!(wake.iter().map(|l| l.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(lockers[0].wait.load(SeqCst), RETRY);
    assert!(slow.open && slow.holders.is_empty() && slow.woken == 1 && !slow.is_idle());
    assert_eq!(queued(&slow), vec![2]);
    // A new request takes it ahead of the queue and closes it; the next release, with a
    // waiter still out, only opens it again.
    assert!(slow.can_grant_new(7, LockMode::X));
    slow.grant_new(7, LockMode::X);
    assert!(!slow.open && !slow.can_grant_new(8, LockMode::X));
    slow.ungrant(7);
    let mut wake = Vec::new();
    slow.grant_waiters(&mut wake, true);
    assert!(wake.is_empty() && slow.open && slow.woken == 1);
    assert_eq!(lockers[1].wait.load(SeqCst), WAITING);
    // The sent-back waiter, asking again and losing, queues at the front again.
    slow.grant_new(8, LockMode::X);
    slow.woken -= 1;
    lockers[0].wait.store(WAITING, SeqCst);
    slow.requeue(Request { locker: lockers[0].clone(), mode: LockMode::X, upgrade: false });
    assert_eq!(queued(&slow), vec![1, 2]);

    // Once FAIR_EVERY has passed, a release hands over to the first waiter.
    slow.ungrant(8);
    slow.fair_at = Some(Instant::now() - Duration::from_millis(1));
    let mut wake = Vec::new();
    slow.grant_waiters(&mut wake, true);
    assert_eq!(lockers[0].wait.load(SeqCst), GRANTED);
    assert!(!slow.open && slow.holders.iter().any(|g| g.locker == 1));
    assert_eq!(queued(&slow), vec![2]);

    // Barging off, an upgrade first, or a first request for another mode: FIFO hand-over.
    for (modes, upgrade, barging) in [
        (&[LockMode::X][..], false, false),
        (&[LockMode::X][..], true, true),
        (&[LockMode::S, LockMode::S][..], false, true),
    ] {
        let mut slow = slow_with_waiters(modes, upgrade);
        let mut wake = Vec::new();
        slow.grant_waiters(&mut wake, barging);
        assert_eq!(wake.len(), modes.len(), "{modes:?} upgrade={upgrade} barging={barging}");
        assert!(!slow.open && slow.queue.is_empty() && slow.woken == 0);
        assert!(wake.iter().all(|l| l.wait.load(SeqCst) == GRANTED));
    }
}

/// Through the manager: with barging off, a release hands the lock to the parked waiter (a new
/// request cannot take it); with barging on, a new request may take it first, and the waiter,
/// sent back, still gets it once that is released: nobody is lost.
#[test]
fn a_released_lock_goes_to_its_waiter_or_to_a_new_request_then_the_waiter() {
    for barging in [false, true] {
        let lm = Arc::new(LockManager::new(LockConfig { barging, ..LockConfig::default() }).unwrap());
        for round in 0..20u64 {
            let holder = lm.locker();
            lm.lock(&holder, 5u64, LockMode::X, Wait::No).unwrap();
            let (lm2, (go, told)) = (lm.clone(), std::sync::mpsc::channel::<()>());
            // The waiter keeps the lock until told: a grant cannot pass unseen.
            let waiter = std::thread::spawn(move || {
                let l = lm2.locker();
                lm2.lock(&l, 5u64, LockMode::X, Wait::Forever).unwrap();
                told.recv().unwrap();
                lm2.unlock(&l, 5u64).unwrap();
            });
            wait_for_waits(&lm, round + 1);
            lm.unlock(&holder, 5u64).unwrap();
            let late = lm.locker();
            match lm.lock(&late, 5u64, LockMode::X, Wait::No) {
                Ok(()) => {
                    assert!(barging, "a new request took a lock handed over to its waiter");
                    lm.unlock(&late, 5u64).unwrap();
                }
                Err(Error::WouldBlock) => {}
                Err(e) => panic!("{e}"),
            }
            go.send(()).unwrap();
            waiter.join().unwrap();
            lm.lock(&late, 5u64, LockMode::X, Wait::No).unwrap();
            lm.unlock(&late, 5u64).unwrap();
        }
    }
}
