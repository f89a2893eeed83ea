//! Model-checked tests: loom explores the thread interleavings (bounded by
//! `LOOM_MAX_PREEMPTIONS`, 2 in CI) of the real latch code, with loom's atomics, spinning and
//! parking swapped in by `primitive` and `park`. A lost wakeup shows up as a deadlock, which
//! loom reports as a failure; an exclusion or validation bug as a failed assertion.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tern --lib --release sync`

use super::*;
use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

fn class(name: &'static str, policy: SpinPolicy) -> LatchClass {
    let class = LatchClass::register(name).unwrap();
    // Two short spin rounds keep the model small but still cover spin-then-park.
    class.set_config(SpinConfig { policy, spin_rounds: 2, first_pauses: 1, max_pauses: 1 }).unwrap();
    class
}

/// Enters a critical section: fails if another thread is inside.
fn enter(inside: &AtomicBool) {
    assert!(!inside.swap(true, SeqCst), "two holders at once");
}

fn leave(inside: &AtomicBool) {
    inside.store(false, SeqCst);
}

fn mutex_excludes(policy: SpinPolicy, name: &'static str) {
    loom::model(move || {
        let m = Arc::new(Mutex::with_class(0u32, class(name, policy)));
        let inside = Arc::new(AtomicBool::new(false));
        let t = {
            let (m, inside) = (Arc::clone(&m), Arc::clone(&inside));
            thread::spawn(move || {
                let mut g = m.lock();
                enter(&inside);
                *g += 1;
                leave(&inside);
            })
        };
        {
            let mut g = m.lock();
            enter(&inside);
            *g += 1;
            leave(&inside);
        }
        t.join().unwrap();
        assert_eq!(*m.lock(), 2);
    });
}

#[test]
fn mutex_pause() {
    mutex_excludes(SpinPolicy::Pause, "loom.mutex.pause");
}
#[test]
fn mutex_park() {
    mutex_excludes(SpinPolicy::Park, "loom.mutex.park");
}
#[test]
fn mutex_yield() {
    mutex_excludes(SpinPolicy::Yield, "loom.mutex.yield");
}
#[test]
fn mutex_adaptive() {
    mutex_excludes(SpinPolicy::Adaptive, "loom.mutex.adaptive");
}

/// Three contenders: wake-ups chain through the queue with none lost (a lost one would leave a
/// thread asleep forever, which loom reports as a deadlock). Under `Park` every waiter sleeps;
/// under `Pause` a spinner can claim `AWAKE` while another sleeps, so unlockers skip wake-ups.
fn mutex_no_lost_wakeup_three_threads(policy: SpinPolicy, name: &'static str) {
    loom::model(move || {
        let m = Arc::new(Mutex::with_class(0u32, class(name, policy)));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let m = Arc::clone(&m);
                thread::spawn(move || *m.lock() += 1)
            })
            .collect();
        *m.lock() += 1;
        ts.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(*m.lock(), 3);
    });
}

#[test]
fn mutex_three_threads_park() {
    mutex_no_lost_wakeup_three_threads(SpinPolicy::Park, "loom.mutex.three.park");
}

#[test]
fn mutex_three_threads_pause() {
    mutex_no_lost_wakeup_three_threads(SpinPolicy::Pause, "loom.mutex.three.pause");
}

fn rwlatch_excludes(bias: bool, policy: SpinPolicy, name: &'static str) {
    loom::model(move || {
        let l = Arc::new(RwLatch::with_options((), class(name, policy), bias));
        let writers = Arc::new(AtomicUsize::new(0));
        let readers = Arc::new(AtomicUsize::new(0));
        let reader = {
            let (l, writers, readers) = (Arc::clone(&l), Arc::clone(&writers), Arc::clone(&readers));
            thread::spawn(move || {
                let _g = l.read();
                readers.fetch_add(1, SeqCst);
                assert_eq!(writers.load(SeqCst), 0, "reader inside with a writer");
                readers.fetch_sub(1, SeqCst);
            })
        };
        {
            let _g = l.write();
            assert_eq!(writers.fetch_add(1, SeqCst), 0);
            assert_eq!(readers.load(SeqCst), 0, "writer inside with a reader");
            writers.fetch_sub(1, SeqCst);
        }
        reader.join().unwrap();
        // A later read after the writer still works (and may re-bias).
        drop(l.read());
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

/// A writer that has announced itself keeps new readers out, so it cannot be starved: with a
/// reader inside and a writer waiting, a second reader's `try_read` must fail.
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
/// still excludes both.
#[test]
fn rwlatch_two_fast_readers_then_writer() {
    loom::model(|| {
        let l = Arc::new(RwLatch::with_options(AtomicU64::new(0), class("loom.rwlatch.two", SpinPolicy::Pause), true));
        let rs: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&l);
                thread::spawn(move || l.read().load(Relaxed))
            })
            .collect();
        l.write().store(1, Relaxed);
        for r in rs {
            assert!(r.join().unwrap() <= 1);
        }
        assert_eq!(l.read().load(Relaxed), 1);
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
