//! Unit tests of the latches on real threads. Bounded: every loop has a fixed iteration count.

use super::*;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

/// A class of its own per test: tests run in parallel and classes are process-wide. Switches
/// acquisition counting on (process-wide; no unit test switches it off: the default is tested
/// in `tests/latch_counting.rs`, a process of its own).
fn class(name: &'static str, policy: SpinPolicy) -> LatchClass {
    set_count_acquisitions(true);
    let class = LatchClass::register(name).unwrap();
    class.set_policy(policy).unwrap();
    class
}

/// Not `Sync` by itself: only a latch makes sharing it sound, so a lost exclusion shows up as
/// a wrong total.
struct Racy(UnsafeCell<u64>);
// SAFETY: test-only; every access happens under a latch in exclusive mode.
unsafe impl Sync for Racy {}

#[test]
fn mutex_basic_and_try_lock() {
    let m = Mutex::new(5);
    {
        let mut g = m.lock();
        *g += 1;
        assert!(m.try_lock().is_none(), "try_lock must fail while held");
        assert!(m.raw().is_locked());
    }
    assert_eq!(*m.try_lock().expect("free after drop"), 6);
    assert_eq!(m.into_inner(), 6);
    assert_eq!(std::mem::size_of::<Mutex<()>>(), 2, "a mutex is two bytes");
}

#[test]
fn latch_sizes_match_the_docs() {
    // docs/sync.md and sync/mod.rs quote these; a change must update them.
    assert_eq!(std::mem::size_of::<RwLatch<()>>(), 32);
    assert_eq!(std::mem::size_of::<HybridLatch<()>>(), 24);
}

fn hammer_mutex(policy: SpinPolicy, name: &'static str) {
    const THREADS: usize = 6;
    const ITERS: u64 = 20_000;
    let m = Arc::new(Mutex::with_class(0u64, class(name, policy)));
    let before = class_stats(m.class());
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                for _ in 0..ITERS {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(*m.lock(), THREADS as u64 * ITERS);
    let d = class_stats(m.class()).since(&before);
    assert_eq!(d.acquisitions, THREADS as u64 * ITERS + 1, "every acquisition is counted");
    assert!(d.contended <= d.acquisitions);
}

#[test]
fn mutex_excludes_under_pause() {
    hammer_mutex(SpinPolicy::Pause, "test.mutex.pause");
}
#[test]
fn mutex_excludes_under_yield() {
    hammer_mutex(SpinPolicy::Yield, "test.mutex.yield");
}
#[test]
fn mutex_excludes_under_park() {
    hammer_mutex(SpinPolicy::Park, "test.mutex.park");
}
#[test]
fn mutex_excludes_under_adaptive() {
    hammer_mutex(SpinPolicy::Adaptive, "test.mutex.adaptive");
}

#[test]
fn contended_acquisition_parks_and_is_counted() {
    let m = Arc::new(Mutex::with_class((), class("test.mutex.counted", SpinPolicy::Park)));
    // The waiter sets the parked bit just before it sleeps: an unlock in between finds nobody
    // asleep, and the waiter then takes the latch without sleeping (correct, but no park to
    // count). So the scenario is repeated, holding the latch longer each time, until a waiter
    // is caught asleep; every try counts its acquisitions exactly.
    let mut slept = None;
    for attempt in 0..20u32 {
        let before = class_stats(m.class());
        let guard = m.lock();
        let waiter = {
            let m = Arc::clone(&m);
            thread::spawn(move || drop(m.lock()))
        };
        while !m.raw().has_parked() {
            thread::yield_now();
        }
        thread::sleep(Duration::from_micros(100 << attempt.min(10)));
        drop(guard);
        waiter.join().unwrap();
        let d = class_stats(m.class()).since(&before);
        assert_eq!(d.acquisitions, 2);
        assert_eq!(d.contended, 1);
        assert_eq!(d.spin_rounds, 0, "Park never spins");
        if d.parks >= 1 {
            slept = Some(d);
            break;
        }
    }
    let d = slept.expect("a waiter slept in one of 20 tries");
    assert!(d.wait_ns > 0, "{d:?}");
}

#[test]
fn spin_config_roundtrip_and_validation() {
    for policy in SpinPolicy::ALL {
        for (spin, first, max) in [(0, 1, 1), (9_000, 300, 2_300), (SpinConfig::MAX_SPIN_NS, 7, u16::MAX)] {
            let c = SpinConfig { policy, spin_ns: spin, first_round_ns: first, max_round_ns: max };
            assert_eq!(SpinConfig::unpack(c.pack()), c);
            assert!(c.validate().is_ok());
        }
        assert_eq!(policy.name().parse::<SpinPolicy>().unwrap(), policy);
    }
    assert!(SpinConfig { spin_ns: SpinConfig::MAX_SPIN_NS + 1, ..SpinConfig::DEFAULT }.validate().is_err());
    assert!(SpinConfig { first_round_ns: 0, ..SpinConfig::DEFAULT }.validate().is_err());
    assert!(SpinConfig { first_round_ns: 8, max_round_ns: 4, ..SpinConfig::DEFAULT }.validate().is_err());
    assert!("spinny".parse::<SpinPolicy>().is_err());
    let c = LatchClass::register("test.config").unwrap();
    assert!(c.set_config(SpinConfig { first_round_ns: 0, ..SpinConfig::DEFAULT }).is_err());
    assert_eq!(c.config(), SpinConfig::DEFAULT, "a rejected config changes nothing");
}

#[test]
fn class_registration_is_idempotent() {
    let a = LatchClass::register("test.same").unwrap();
    let b = LatchClass::register("test.same").unwrap();
    assert_eq!(a, b);
    assert_eq!(a.name(), "test.same");
    assert_eq!(LatchClass::DEFAULT.name(), "default");
    assert!(LatchClass::all().contains(&a));
    assert!(stats().iter().any(|s| s.class == "test.same"));
}

#[test]
fn rwlatch_readers_share_writer_excludes() {
    for bias in [true, false] {
        let l = RwLatch::with_options(1, LatchClass::DEFAULT, bias);
        let r1 = l.read();
        let r2 = l.read();
        assert_eq!(*r1 + *r2, 2);
        assert!(l.try_write().is_none(), "no writer while readers hold (bias {bias})");
        drop((r1, r2));
        let mut w = l.write();
        *w = 7;
        assert!(l.try_read().is_none(), "no reader while a writer holds");
        drop(w);
        assert_eq!(*l.read(), 7);
    }
}

#[test]
fn rwlatch_bias_is_revoked_by_writers_and_restored() {
    let c = class("test.rwlatch.bias", SpinPolicy::Pause);
    let l = RwLatch::with_class(0u32, c);
    let before = class_stats(c);
    assert!(l.is_reader_biased());
    drop(l.read());
    drop(l.write());
    assert!(!l.is_reader_biased(), "a writer revokes the bias");
    assert_eq!(class_stats(c).since(&before).revocations, 1);
    // Slow readers re-bias once the inhibit window (9x a revocation, microseconds) has passed.
    let mut reads = 0;
    while !l.is_reader_biased() {
        drop(l.read());
        reads += 1;
        assert!(reads < 100_000_000, "the bias never came back");
    }
}

/// Writers keep `a == b`; readers must never see them differ.
#[derive(Default)]
struct Pair {
    a: u64,
    b: u64,
}

fn rwlatch_stress(bias: bool, name: &'static str) {
    const READERS: usize = 4;
    const WRITES: u64 = 2_000;
    let l = Arc::new(RwLatch::with_options(Pair::default(), class(name, SpinPolicy::Pause), bias));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (l, done) = (Arc::clone(&l), Arc::clone(&done));
            thread::spawn(move || {
                let mut seen = 0;
                while !done.load(Relaxed) {
                    let g = l.read();
                    assert_eq!(g.a, g.b, "torn read under shared mode");
                    seen = g.a;
                }
                seen
            })
        })
        .collect();
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                for _ in 0..WRITES {
                    let mut g = l.write();
                    g.a += 1;
                    thread::yield_now();
                    g.b += 1;
                }
            })
        })
        .collect();
    writers.into_iter().for_each(|h| h.join().unwrap());
    done.store(true, Relaxed);
    for r in readers {
        assert!(r.join().unwrap() <= 2 * WRITES);
    }
    assert_eq!(l.read().a, 2 * WRITES);
}

#[test]
fn rwlatch_stress_biased() {
    rwlatch_stress(true, "test.rwlatch.stress.bias");
}

#[test]
fn rwlatch_stress_unbiased() {
    rwlatch_stress(false, "test.rwlatch.stress.nobias");
}

/// Readers on several threads overlap, so the read count rarely drops to zero on its own; a
/// writer must still get in, repeatedly. Bounded: the test ends when the writer has done its
/// writes. (Each reader holds one guard at a time: taking a second read guard while holding one
/// can deadlock behind a waiting writer, as documented on `RwLatch`.)
#[test]
fn rwlatch_writer_not_starved_by_overlapping_readers() {
    for bias in [true, false] {
        let l = Arc::new(RwLatch::with_options(0u64, LatchClass::DEFAULT, bias));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (l, stop) = (Arc::clone(&l), Arc::clone(&stop));
                thread::spawn(move || {
                    while !stop.load(Relaxed) {
                        let g = l.read();
                        for _ in 0..100 {
                            std::hint::black_box(*g);
                        }
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            *l.write() += 1;
        }
        stop.store(true, Relaxed);
        readers.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(*l.read(), 200);
    }
}

/// Two atomics a writer keeps equal: the shape of data a `HybridLatch` protects.
#[derive(Default)]
struct AtomicPair {
    a: AtomicU64,
    b: AtomicU64,
}

#[test]
fn hybrid_modes_and_validation() {
    let h = HybridLatch::new(AtomicPair::default());
    let opt = h.optimistic();
    assert_eq!(opt.read(|p| p.a.load(Relaxed)), Ok(0));
    {
        let x = h.exclusive();
        assert!(h.try_optimistic().is_none(), "optimistic readers see the writer");
        assert!(h.try_exclusive().is_none());
        x.a.store(1, Relaxed);
    }
    assert_eq!(opt.validate(), Err(Restart), "a write in between invalidates");
    assert!(h.version() % 2 == 0 && h.version() > opt.version());

    let opt = h.optimistic();
    let s = opt.into_shared().expect("no writer in between");
    assert!(h.try_exclusive().is_none(), "shared excludes exclusive");
    let opt2 = h.optimistic();
    drop(s);
    let x = opt2.into_exclusive().expect("shared mode does not change the version");
    x.b.store(1, Relaxed);
    drop(x);

    let stale = h.optimistic();
    drop(h.exclusive());
    assert!(stale.into_exclusive().is_err());
    let stale = h.optimistic();
    drop(h.exclusive());
    assert!(stale.into_shared().is_err());
    assert!(h.try_exclusive().is_some(), "failed upgrades released what they took");
}

#[test]
fn hybrid_optimistic_readers_never_accept_torn_state() {
    const WRITES: u64 = 20_000;
    let c = class("test.hybrid.stress", SpinPolicy::Pause);
    let h = Arc::new(HybridLatch::with_class(AtomicPair::default(), c));
    let before = class_stats(c);
    let done = Arc::new(AtomicBool::new(false));
    let validated = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (h, done, validated) = (Arc::clone(&h), Arc::clone(&done), Arc::clone(&validated));
            thread::spawn(move || {
                while !done.load(Relaxed) {
                    let g = h.optimistic();
                    let (a, b) = (g.data().a.load(Relaxed), g.data().b.load(Relaxed));
                    if g.validate().is_ok() {
                        assert_eq!(a, b, "validated a torn read");
                        validated.fetch_add(1, Relaxed);
                    }
                }
            })
        })
        .collect();
    let writer = {
        let h = Arc::clone(&h);
        thread::spawn(move || {
            for i in 1..=WRITES {
                let x = h.exclusive();
                x.a.store(i, Relaxed);
                x.b.store(i, Relaxed);
            }
        })
    };
    writer.join().unwrap();
    done.store(true, Relaxed);
    readers.into_iter().for_each(|r| r.join().unwrap());
    let g = h.optimistic();
    assert_eq!(g.read(|p| (p.a.load(Relaxed), p.b.load(Relaxed))), Ok((WRITES, WRITES)));
    let d = class_stats(c).since(&before);
    assert_eq!(d.acquisitions, WRITES, "exclusive acquisitions are counted");
    assert!(d.optimistic >= validated.load(Relaxed) as u64);
}

#[test]
fn mutex_barrier_handoff_many_threads() {
    // More threads than cores, all released at once: exercises parking and fair hand-off.
    const THREADS: usize = 16;
    const ITERS: u64 = 2_000;
    let m = Arc::new(Mutex::with_class(0u64, class("test.mutex.many", SpinPolicy::Pause)));
    let racy = Arc::new(Racy(UnsafeCell::new(0)));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (m, racy, barrier) = (Arc::clone(&m), Arc::clone(&racy), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..ITERS {
                    let _g = m.lock();
                    // SAFETY: the mutex is held.
                    unsafe { *racy.0.get() += 1 };
                }
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    let _g = m.lock();
    // SAFETY: the mutex is held and every writer has joined.
    assert_eq!(unsafe { *racy.0.get() }, THREADS as u64 * ITERS);
}

#[test]
fn spin_rounds_double_and_saturate_without_overflow() {
    let c = SpinConfig { policy: SpinPolicy::Pause, spin_ns: 1_000_000, first_round_ns: 256, max_round_ns: u16::MAX };
    let rounds: Vec<u32> = (0..40).map(|r| c.round_ns(r)).collect();
    assert_eq!(&rounds[..3], &[256, 512, 1024]);
    assert!(rounds.windows(2).all(|w| w[0] <= w[1]), "never shrinks: {rounds:?}");
    assert_eq!(rounds[39], u32::from(u16::MAX), "saturates instead of wrapping to 0");
    let d = SpinConfig::DEFAULT;
    let schedule: Vec<u32> = (0..5).map(|r| d.round_ns(r)).collect();
    assert_eq!(schedule, [300, 600, 1200, 2300, 2300]);
}

/// A thread-local whose destructor uses latches after the thread's own exit hooks ran.
struct LateUser;

impl Drop for LateUser {
    fn drop(&mut self) {
        let m = Mutex::new(0u32);
        *m.lock() += 1;
        let l = RwLatch::new(0u32);
        drop(l.read());
    }
}

std::thread_local! { static LATE_USER: LateUser = const { LateUser }; }

#[test]
fn latches_used_during_thread_teardown_leak_nothing() {
    // The latches must touch their counter blocks for this to test anything.
    set_count_acquisitions(true);
    // Warm up so this thread pool's blocks and tokens exist, then measure growth.
    let spawn_late_user = || {
        thread::spawn(|| {
            LATE_USER.with(|_| ()); // registered before the first latch use: destroyed after
            let m = Mutex::new(0u32);
            *m.lock() += 1;
            drop(RwLatch::new(0u32).read());
        })
        .join()
        .unwrap()
    };
    spawn_late_user();
    let (blocks, tokens) = (super::counters::block_count(), super::reader_table::token_high_water());
    for _ in 0..50 {
        spawn_late_user();
    }
    // Other tests run threads concurrently, so allow for them, but not for one leak per thread.
    assert!(super::counters::block_count() <= blocks + 16, "counter blocks leak");
    assert!(super::reader_table::token_high_water() <= tokens + 16, "reader tokens leak");
}

#[test]
fn live_threads_get_distinct_reader_tokens() {
    const N: usize = 16;
    let start = Arc::new(Barrier::new(N));
    let hold = Arc::new(Barrier::new(N + 1));
    let (tx, rx) = std::sync::mpsc::channel();
    let handles: Vec<_> = (0..N)
        .map(|_| {
            let (start, hold, tx) = (Arc::clone(&start), Arc::clone(&hold), tx.clone());
            thread::spawn(move || {
                start.wait();
                tx.send(super::reader_table::my_token()).unwrap();
                hold.wait();
            })
        })
        .collect();
    let mut tokens: Vec<usize> = (0..N).map(|_| rx.recv().unwrap().expect("a live thread has a token")).collect();
    hold.wait();
    handles.into_iter().for_each(|h| h.join().unwrap());
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), N, "two live threads share a token");
}

#[test]
fn a_leaked_read_guard_does_not_hang_a_later_latch_at_the_same_address() {
    let mut addresses = std::collections::HashSet::new();
    for _ in 0..64 {
        let l = Box::new(RwLatch::new(0u64));
        std::mem::forget(l.read()); // leaves this thread's slot naming the latch
        addresses.insert(&*l as *const RwLatch<u64> as usize);
        drop(l); // clears the slot: no live guard can exist at drop
        let again = Box::new(RwLatch::new(1u64)); // often at the same address
        *again.write() += 1; // would spin forever on the stale slot without the clean-up
        assert_eq!(*again.read(), 2);
    }
    assert!(!addresses.is_empty());
}

#[test]
fn calibration_names_the_cpu_and_turns_budgets_into_pauses() {
    let c = super::calibration();
    if let Some(name) = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|i| {
            i.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .filter(|n| !n.is_empty())
    {
        assert_eq!(c.cpu_model, name);
    }
    assert!(c.cpus >= 1 && c.pause_ns > 0.0 && c.park_round_trip_ns > 0.0, "{c:?}");
    // Budgets become PAUSE counts through the one measured figure.
    let pauses = c.pauses_in(1_000_000) as f64;
    assert!((pauses - 1_000_000.0 / c.pause_ns).abs() <= 1.0 + 1e-6 * pauses, "{pauses} PAUSEs for 1 ms: {c:?}");
    assert_eq!(c.pauses_in(0), 1, "a round spins at least once");
    assert!(std::ptr::eq(c, super::calibration()), "measured once");
}

#[test]
fn adaptive_waiters_learn_that_spinning_does_not_pay_behind_long_holds() {
    let c = LatchClass::register("test.adaptive.long").unwrap();
    c.set_config(SpinConfig { policy: SpinPolicy::Adaptive, spin_ns: 2_000, first_round_ns: 500, max_round_ns: 1_000 })
        .unwrap();
    assert_eq!(super::spin::learned(c), (1024, 1024, 0), "a fresh thread expects spinning to pay");
    let m = Arc::new(Mutex::with_class((), c));
    let holding = Arc::new(Barrier::new(2));
    // Each round a helper holds the latch for 5 ms, far past the 2 µs PAUSE phase (which ends
    // early, not late, if the waiter is preempted), while this thread waits for it. How the
    // yield phase fares depends on how busy the machine is, so only the PAUSE phase is judged.
    for _ in 0..300 {
        let (m2, h2) = (Arc::clone(&m), Arc::clone(&holding));
        let holder = thread::spawn(move || {
            let g = m2.lock();
            h2.wait();
            thread::sleep(std::time::Duration::from_millis(5));
            drop(g);
        });
        holding.wait();
        drop(m.lock());
        holder.join().unwrap();
        // Either the waits learned that PAUSE does not win, or (on a loaded machine) this
        // thread's CPU counts as crowded, and then its waits skip the PAUSE phase altogether:
        // either way it stops PAUSE-spinning behind such holds.
        if super::spin::learned(c).0 < 512 || super::spin::crowded() {
            return;
        }
    }
    panic!(
        "300 waits behind 5 ms holds did not teach the policy to stop PAUSE-spinning: {:?}, crowded {}",
        super::spin::learned(c),
        super::spin::crowded()
    );
}

/// Admission under load: 8 threads through a 2-ticket gate, some holds long enough for the
/// watcher to ask for hand-offs, some nested, some lending their ticket. Every thread gets
/// through (a lost wakeup hangs here: the watchdog fails it), and every ticket comes back.
#[test]
fn gate_stress_every_thread_gets_through_and_every_ticket_comes_back() {
    use super::admit::{lend_while, Gate};
    use std::sync::mpsc;
    let gate = Gate::new(2);
    let (tx, rx) = mpsc::channel();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (gate, tx) = (gate.clone(), tx.clone());
            thread::spawn(move || {
                for i in 0..2_000u64 {
                    gate.acquire();
                    match (t + i) % 50 {
                        0 => thread::sleep(std::time::Duration::from_micros(700)),
                        1 => {
                            gate.acquire();
                            gate.release();
                        }
                        2 => lend_while(thread::yield_now),
                        _ => std::hint::spin_loop(),
                    }
                    gate.release();
                }
                tx.send(()).unwrap();
            })
        })
        .collect();
    drop(tx);
    for _ in 0..8 {
        rx.recv_timeout(std::time::Duration::from_secs(60)).expect("a thread never got through the gate");
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(gate.free(), 2, "every ticket back: {:?}", gate.stats());
    assert!(gate.stats().waits > 0, "8 threads through 2 tickets waited: {:?}", gate.stats());
}

/// `yield_while` returns at once when the condition is already over, ends on its own when
/// nothing ends it (an idle CPU at the first fast yield, a crowded one at the budget), and
/// looks at the condition again after a yield whether or not that yield ran another thread.
#[test]
fn yield_while_ends_with_the_condition_or_on_its_own() {
    use crate::sync::spin::yield_while;
    assert!(yield_while(|| false, 1_000_000));
    assert!(!yield_while(|| true, 200_000));
    // Busy at the first look only: one yield, then the second look finds it over, on an idle
    // CPU (the fast yield's last look) or a crowded one (the loop's next look).
    let mut looks = 0;
    assert!(yield_while(
        || {
            looks += 1;
            looks == 1
        },
        1_000_000_000
    ));
    assert_eq!(looks, 2);
}
