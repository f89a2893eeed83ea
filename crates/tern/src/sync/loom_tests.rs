//! Model-checked tests: loom explores the thread interleavings (bounded by
//! `LOOM_MAX_PREEMPTIONS`, 2 in CI) of the real latch code, with loom's atomics, spinning and
//! parking swapped in by `primitive` and `park`. A lost wakeup shows up as a deadlock, which
//! loom reports as a failure; an exclusion or validation bug as a failed assertion.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tern --lib --release sync`

use super::park::{reset_fairness, FAIR_MODE};
use super::*;
use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::Relaxed;

fn class(name: &'static str, policy: SpinPolicy) -> LatchClass {
    let class = LatchClass::register(name).unwrap();
    // Two short spin rounds keep the model small but still cover spin-then-park.
    class.set_config(SpinConfig { policy, spin_ns: 2, first_round_ns: 1, max_round_ns: 1 }).unwrap();
    class
}

/// Plain (non-atomic) data that loom tracks: any access not ordered by happens-before with the
/// previous one fails the model, so these models check the latches' memory ordering, not only
/// who is inside.
struct Tracked(loom::cell::UnsafeCell<u64>);

// SAFETY: test data; loom checks every access for a race.
unsafe impl Sync for Tracked {}

impl Tracked {
    fn new(v: u64) -> Tracked {
        Tracked(loom::cell::UnsafeCell::new(v))
    }

    fn get(&self) -> u64 {
        // SAFETY: loom reports a race instead of letting it happen.
        self.0.with(|p| unsafe { *p })
    }

    fn set(&self, v: u64) {
        // SAFETY: as in `get`.
        self.0.with_mut(|p| unsafe { *p = v })
    }
}

/// Enters a critical section: fails if another thread is inside. Relaxed on purpose: the
/// check needs only the swap's atomicity, and any ordering here would hand the latch the
/// happens-before edge it must provide itself (and mask an ordering bug in it).
fn enter(inside: &AtomicBool) {
    assert!(!inside.swap(true, Relaxed), "two holders at once");
}

fn leave(inside: &AtomicBool) {
    inside.store(false, Relaxed);
}

/// `threads` threads each take the mutex `iters` times and increment tracked data. `fair`
/// selects how the parking model answers `be_fair` (see `park.rs`), so the hand-off path is
/// explored too. A lost wakeup shows as a deadlock; a broken exclusion or ordering as a race.
fn mutex_model(policy: SpinPolicy, name: &'static str, fair: u8, threads: usize, iters: usize) {
    FAIR_MODE.with(|m| m.set(fair));
    loom::model(move || {
        reset_fairness();
        let m = Arc::new(Mutex::with_class(Tracked::new(0), class(name, policy)));
        let inside = Arc::new(AtomicBool::new(false));
        let work = move |m: &Mutex<Tracked>, inside: &AtomicBool| {
            for _ in 0..iters {
                let g = m.lock();
                enter(inside);
                g.set(g.get() + 1);
                leave(inside);
            }
        };
        let ts: Vec<_> = (1..threads)
            .map(|_| {
                let (m, inside) = (Arc::clone(&m), Arc::clone(&inside));
                thread::spawn(move || work(&m, &inside))
            })
            .collect();
        work(&m, &inside);
        ts.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(m.lock().get(), (threads * iters) as u64);
    });
    FAIR_MODE.with(|m| m.set(0));
}

#[test]
fn mutex_pause() {
    mutex_model(SpinPolicy::Pause, "loom.mutex.pause", 0, 2, 1);
}
#[test]
fn mutex_park() {
    mutex_model(SpinPolicy::Park, "loom.mutex.park", 0, 2, 1);
}
#[test]
fn mutex_yield() {
    mutex_model(SpinPolicy::Yield, "loom.mutex.yield", 0, 2, 1);
}
#[test]
fn mutex_adaptive() {
    mutex_model(SpinPolicy::Adaptive, "loom.mutex.adaptive", 0, 2, 1);
}
/// Three contenders: sleepers under `Park`; under `Pause` a spinner claims `AWAKE` while
/// another sleeps, so unlockers skip wake-ups.
#[test]
fn mutex_three_threads_park() {
    mutex_model(SpinPolicy::Park, "loom.mutex.three.park", 0, 3, 1);
}
#[test]
fn mutex_three_threads_pause() {
    mutex_model(SpinPolicy::Pause, "loom.mutex.three.pause", 0, 3, 1);
}
/// The fair hand-off path (`TOKEN_HANDOFF`): the latch passes to a sleeper without unlocking.
#[test]
fn mutex_fair_handoff_park_two() {
    mutex_model(SpinPolicy::Park, "loom.mutex.fair.park2", 1, 2, 1);
}
#[test]
fn mutex_fair_handoff_park_three() {
    mutex_model(SpinPolicy::Park, "loom.mutex.fair.park3", 1, 3, 1);
}
#[test]
fn mutex_fair_handoff_pause_three() {
    mutex_model(SpinPolicy::Pause, "loom.mutex.fair.pause3", 1, 3, 1);
}
#[test]
fn mutex_alternating_fairness_pause_three() {
    mutex_model(SpinPolicy::Pause, "loom.mutex.alt.pause3", 2, 3, 1);
}
/// Re-locking: `AWAKE` claimed and cleared across several unlocks.
#[test]
fn mutex_relock_pause() {
    mutex_model(SpinPolicy::Pause, "loom.mutex.relock", 0, 2, 2);
}
#[test]
fn mutex_relock_alternating_fairness() {
    mutex_model(SpinPolicy::Pause, "loom.mutex.relock.alt", 2, 2, 2);
}

fn rwlatch_excludes(bias: bool, policy: SpinPolicy, name: &'static str) {
    loom::model(move || {
        let l = Arc::new(RwLatch::with_options(Tracked::new(0), class(name, policy), bias));
        let writers = Arc::new(AtomicUsize::new(0));
        let readers = Arc::new(AtomicUsize::new(0));
        let reader = {
            let (l, writers, readers) = (Arc::clone(&l), Arc::clone(&writers), Arc::clone(&readers));
            thread::spawn(move || {
                let g = l.read();
                readers.fetch_add(1, Relaxed);
                assert_eq!(writers.load(Relaxed), 0, "reader inside with a writer");
                let seen = g.get();
                readers.fetch_sub(1, Relaxed);
                seen
            })
        };
        {
            let g = l.write();
            assert_eq!(writers.fetch_add(1, Relaxed), 0);
            assert_eq!(readers.load(Relaxed), 0, "writer inside with a reader");
            g.set(1);
            writers.fetch_sub(1, Relaxed);
        }
        assert!(reader.join().unwrap() <= 1);
        // A later read after the writer sees its write (and may re-bias).
        assert_eq!(l.read().get(), 1);
    });
}

#[test]
fn rwlatch_biased_reader_vs_writer() {
    rwlatch_excludes(true, SpinPolicy::Pause, "loom.rwlatch.bias");
}
#[test]
fn rwlatch_unbiased_reader_vs_writer() {
    rwlatch_excludes(false, SpinPolicy::Park, "loom.rwlatch.nobias");
}

/// Without reader bias, a writer that has announced itself keeps new readers out, so it cannot
/// be starved: with a reader inside and a writer waiting, a second reader's `try_read` fails.
/// (With the bias, fast readers may still enter until the writer revokes it, after draining.)
#[test]
fn rwlatch_waiting_writer_blocks_new_readers() {
    loom::model(|| {
        let l = Arc::new(RwLatch::with_options(0u32, class("loom.rwlatch.starve", SpinPolicy::Park), false));
        let first = l.read();
        let writer = {
            let l = Arc::clone(&l);
            thread::spawn(move || *l.write() += 1)
        };
        let late_reader = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                while !l.lock_is_write_locked() {
                    thread::yield_now();
                }
                assert!(l.try_read().is_none(), "a new reader overtook a waiting writer");
            })
        };
        late_reader.join().unwrap();
        drop(first);
        writer.join().unwrap();
        assert_eq!(*l.read(), 1);
    });
}

/// Two readers, both biased: neither touches the shared lock word, and a writer after them
/// still excludes both (tracked data).
#[test]
fn rwlatch_two_fast_readers_then_writer() {
    loom::model(|| {
        let l = Arc::new(RwLatch::with_options(Tracked::new(0), class("loom.rwlatch.two", SpinPolicy::Pause), true));
        let rs: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&l);
                thread::spawn(move || l.read().get())
            })
            .collect();
        l.write().set(1);
        for r in rs {
            assert!(r.join().unwrap() <= 1);
        }
        assert_eq!(l.read().get(), 1);
    });
}

struct Pair {
    a: AtomicU64,
    b: AtomicU64,
}

/// Optimistic validation catches every concurrent write: a reader that validates must have
/// read a pair the writer never left half-updated.
#[test]
fn hybrid_optimistic_validation() {
    loom::model(|| {
        let h = Arc::new(HybridLatch::with_class(
            Pair { a: AtomicU64::new(0), b: AtomicU64::new(0) },
            class("loom.hybrid.opt", SpinPolicy::Pause),
        ));
        let writer = {
            let h = Arc::clone(&h);
            thread::spawn(move || {
                let x = h.exclusive();
                x.a.store(1, Relaxed);
                x.b.store(1, Relaxed);
            })
        };
        if let Some(g) = h.try_optimistic() {
            let (a, b) = (g.data().a.load(Relaxed), g.data().b.load(Relaxed));
            if g.validate().is_ok() {
                assert_eq!(a, b, "validated a torn read");
            }
        }
        writer.join().unwrap();
        let g = h.optimistic();
        assert_eq!(g.read(|p| (p.a.load(Relaxed), p.b.load(Relaxed))), Ok((1, 1)));
    });
}

/// Upgrading an optimistic read succeeds only if no writer intervened; shared and exclusive
/// holders exclude each other.
#[test]
fn hybrid_upgrade_and_shared() {
    loom::model(|| {
        let h = Arc::new(HybridLatch::with_class(AtomicU64::new(0), class("loom.hybrid.up", SpinPolicy::Park)));
        let t = {
            let h = Arc::clone(&h);
            thread::spawn(move || {
                let g = h.optimistic();
                let seen = g.data().load(Relaxed);
                if let Ok(x) = g.into_exclusive() {
                    // Nobody wrote in between: the value read is still current.
                    assert_eq!(x.load(Relaxed), seen);
                    x.store(seen + 10, Relaxed);
                }
            })
        };
        {
            let s = h.shared();
            let v = s.load(Relaxed);
            assert!(v == 0 || v == 10);
        }
        {
            let x = h.exclusive();
            x.store(x.load(Relaxed) + 1, Relaxed);
        }
        t.join().unwrap();
        let v = h.optimistic().read(|a| a.load(Relaxed)).unwrap();
        assert!(v == 1 || v == 11, "{v}");
    });
}

/// The ordering chain fast readers rely on: writer unlock → slow reader (re-biases) → fast
/// reader, with tracked data, so a missing release or acquire anywhere shows as a race.
#[test]
fn rwlatch_rebias_chain_orders_data() {
    loom::model(|| {
        let l = Arc::new(RwLatch::with_options(Tracked::new(0), class("loom.rwlatch.chain", SpinPolicy::Pause), true));
        drop(l.write()); // the bias is now off; the next slow reader turns it back on
        let w = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.write().set(1))
        };
        let r = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.read().get())
        };
        let mine = l.read().get();
        let theirs = r.join().unwrap();
        w.join().unwrap();
        assert!(mine <= 1 && theirs <= 1);
        assert_eq!(l.read().get(), 1);
    });
}

/// `try_write` racing a fast reader: it either gets in alone or restores the bias and gives
/// up; a later writer still excludes the reader.
#[test]
fn rwlatch_try_write_vs_fast_reader() {
    loom::model(|| {
        let l = Arc::new(RwLatch::with_options(Tracked::new(0), class("loom.rwlatch.try", SpinPolicy::Pause), true));
        let r = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                let a = l.read().get();
                let b = l.read().get();
                assert!(a <= b);
            })
        };
        if let Some(g) = l.try_write() {
            g.set(g.get() + 1);
        }
        {
            let g = l.write();
            g.set(g.get() + 1);
        }
        r.join().unwrap();
        let v = l.read().get();
        assert!(v == 1 || v == 2);
    });
}

/// A writer drains two slow readers, everyone parking: `WRITER_PARKED` wake-up by the last
/// reader, then `unlock_write_slow`'s reset and wake-all.
#[test]
fn rwlock_writer_drains_parked_readers() {
    loom::model(|| {
        let l = Arc::new(RwLatch::with_options(Tracked::new(0), class("loom.rwlock.drain", SpinPolicy::Park), false));
        let rs: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&l);
                thread::spawn(move || l.read().get())
            })
            .collect();
        l.write().set(1);
        for r in rs {
            assert!(r.join().unwrap() <= 1);
        }
        assert_eq!(l.read().get(), 1);
    });
}

/// Two writers and a reader, all parking: a writer's unlock wakes the other writer and the
/// reader, which race again.
#[test]
fn rwlock_two_writers_and_a_reader_park() {
    loom::model(|| {
        let l = Arc::new(RwLatch::with_options(Tracked::new(0), class("loom.rwlock.ww", SpinPolicy::Park), false));
        let w = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                let g = l.write();
                g.set(g.get() + 1);
            })
        };
        let r = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.read().get())
        };
        {
            let g = l.write();
            g.set(g.get() + 1);
        }
        w.join().unwrap();
        assert!(r.join().unwrap() <= 2);
        assert_eq!(l.read().get(), 2);
    });
}

/// An optimistic reader behind a writer sleeps (via the lock's shared mode), then tries to
/// upgrade to exclusive against that writer.
#[test]
fn hybrid_optimistic_wait_then_upgrade() {
    loom::model(|| {
        let h = Arc::new(HybridLatch::with_class(AtomicU64::new(0), class("loom.hybrid.park", SpinPolicy::Park)));
        let w = {
            let h = Arc::clone(&h);
            thread::spawn(move || {
                let x = h.exclusive();
                x.store(x.load(Relaxed) + 1, Relaxed);
            })
        };
        let g = h.optimistic();
        let seen = g.data().load(Relaxed);
        if let Ok(x) = g.into_exclusive() {
            assert_eq!(x.load(Relaxed), seen);
            x.store(seen + 10, Relaxed);
        }
        w.join().unwrap();
        let v = h.optimistic().read(|a| a.load(Relaxed)).unwrap();
        assert!(v == 1 || v == 11, "{v}");
    });
}

/// Admission: `threads` threads each take a ticket of a one-ticket gate `iters` times (with
/// `lend`, the first thread lends it inside, as a transaction blocked on a disk read does, and
/// takes it back overdrawn). A lost wakeup shows as a deadlock. Without lending, two threads
/// inside at once are allowed only by the stall door (the model has no clock: a watcher's
/// second nap without a return counts as a stall). Every ticket is back at the end.
fn gate_model(threads: usize, iters: usize, lend: bool) {
    loom::model(move || {
        let gate = admit::Gate::new(1);
        let inside = Arc::new(AtomicUsize::new(0));
        let crowded = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (gate, inside, crowded) = (gate.clone(), Arc::clone(&inside), Arc::clone(&crowded));
                thread::spawn(move || {
                    for _ in 0..iters {
                        gate.acquire();
                        if inside.fetch_add(1, Relaxed) > 0 {
                            crowded.store(true, Relaxed);
                        }
                        if lend && t == 0 {
                            admit::lend_while(|| ());
                        }
                        inside.fetch_sub(1, Relaxed);
                        gate.release();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(gate.free(), 1, "every ticket back");
        let stats = gate.stats();
        assert!(lend || !crowded.load(Relaxed) || stats.stalls > 0, "two inside without a stall: {stats:?}");
    });
}

#[test]
fn gate_three_threads_once() {
    gate_model(3, 1, false);
}

#[test]
fn gate_two_threads_twice() {
    gate_model(2, 2, false);
}

#[test]
fn gate_lent_ticket_comes_back() {
    gate_model(3, 1, true);
}
