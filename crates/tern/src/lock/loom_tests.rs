//! Model-checked tests of the lock manager's lock-free steps and its wait/wake path: loom
//! explores the interleavings of the real code (latches, parking and the owner word run on
//! loom's models). A lost wakeup shows as a deadlock; two holders at once, or a lock that does
//! not order its holders' accesses, as a failed assertion or a data race on tracked data.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tern --lib --release lock`

use super::*;
use crate::sync::{LatchClass, SpinConfig, SpinPolicy};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

/// Data the lock protects; loom fails the model on any access not ordered after the previous.
struct Tracked(loom::cell::UnsafeCell<u64>);

// SAFETY: test data; loom checks every access for a race.
unsafe impl Sync for Tracked {}

impl Tracked {
    fn bump(&self) {
        // SAFETY: loom reports a race instead of letting it happen.
        self.0.with_mut(|p| unsafe { *p += 1 })
    }

    fn get(&self) -> u64 {
        // SAFETY: as in `bump`.
        self.0.with(|p| unsafe { *p })
    }
}

/// One partition, no bias, latches that park after one short spin: the smallest model.
fn manager(deadlock: DeadlockPolicy) -> LockManager {
    LockManager::new(manager_config(deadlock)).unwrap()
}

fn manager_config(deadlock: DeadlockPolicy) -> LockConfig {
    for name in ["lock.partition", "lock.registry", "lock.detector", "lock.waiting", "default"] {
        let class = LatchClass::register(name).unwrap();
        class
            .set_config(SpinConfig { policy: SpinPolicy::Park, spin_ns: 1, first_round_ns: 1, max_round_ns: 1 })
            .unwrap();
    }
    LockConfig { partitions: 1, fast_shared: false, deadlock, ..LockConfig::default() }
}

/// `a` holds object 1 as sole owner and releases it while `b` asks for it: `b` either inflates
/// the entry and waits (then `a`'s swap fails and it releases through the holders, waking `b`),
/// or finds it free. Either way both critical sections run, in order.
#[test]
fn sole_owner_release_races_inflation_and_wakes_the_waiter() {
    release_while_b_waits(|_, _| 2);
}

/// Barging: `a` releases while `b` waits, then asks again at once with another locker `c`.
/// `c` takes the open lock or queues behind `b`; `b`, sent back or granted, asks again or
/// proceeds. Every critical section runs, one at a time, and the entry ends idle (no waiter is
/// left counted as sent back).
#[test]
fn a_barger_races_the_sent_back_waiter() {
    release_while_b_waits(|lm, data| {
        let c = lm.locker();
        lm.lock(&c, 1u64, LockMode::X, Wait::Forever).unwrap();
        data.bump();
        lm.unlock(&c, 1u64).unwrap();
        3
    });
}

/// `a` holds `X`, `b` asks for it on another thread, `a` releases, then `then` runs on `a`'s
/// thread and returns how many critical sections ran in all; each bumps the tracked counter.
fn release_while_b_waits(then: impl Fn(&LockManager, &Tracked) -> u64 + Sync + Send + 'static) {
    loom::model(move || {
        let lm = Arc::new(manager(DeadlockPolicy::OnConflict));
        let data = Arc::new(Tracked(loom::cell::UnsafeCell::new(0)));
        let a = lm.locker();
        lm.lock(&a, 1u64, LockMode::X, Wait::Forever).unwrap();
        let (lm2, data2) = (lm.clone(), data.clone());
        let t = thread::spawn(move || {
            let b = lm2.locker();
            lm2.lock(&b, 1u64, LockMode::X, Wait::Forever).unwrap();
            data2.bump();
            lm2.unlock(&b, 1u64).unwrap();
        });
        data.bump();
        lm.unlock(&a, 1u64).unwrap();
        let sections = then(&lm, &data);
        t.join().unwrap();
        assert_eq!(data.get(), sections);
        assert_eq!(lm.stats().objects, 0);
    });
}

/// `a` re-takes an entry from its cache (a swap from free) while `b` takes the latch path for
/// the same object: exactly one owns it at a time.
#[test]
fn cached_retake_races_the_latch_path() {
    loom::model(|| {
        let lm = Arc::new(manager(DeadlockPolicy::OnConflict));
        let data = Arc::new(Tracked(loom::cell::UnsafeCell::new(0)));
        let a = lm.locker();
        lm.lock(&a, 1u64, LockMode::X, Wait::No).unwrap();
        lm.unlock(&a, 1u64).unwrap(); // cached by `a`
        let (lm2, data2) = (lm.clone(), data.clone());
        let t = thread::spawn(move || {
            let b = lm2.locker();
            lm2.lock(&b, 1u64, LockMode::X, Wait::Forever).unwrap();
            data2.bump();
            lm2.unlock(&b, 1u64).unwrap();
        });
        lm.lock(&a, 1u64, LockMode::X, Wait::Forever).unwrap();
        data.bump();
        lm.unlock(&a, 1u64).unwrap();
        t.join().unwrap();
        assert_eq!(data.get(), 2);
    });
}

/// A waiter's timeout races the grant (loom's clock lets every deadline pass at once): it is
/// granted or leaves the queue, never both, and the object ends up free either way.
#[test]
fn timeout_races_the_grant() {
    loom::model(|| {
        let lm = Arc::new(manager(DeadlockPolicy::Timeout(Duration::from_secs(1))));
        let a = lm.locker();
        lm.lock(&a, 1u64, LockMode::X, Wait::No).unwrap();
        let lm2 = lm.clone();
        let t = thread::spawn(move || {
            let b = lm2.locker();
            match lm2.lock(&b, 1u64, LockMode::S, Wait::Forever) {
                Ok(()) => assert_eq!(b.locks_held(), 1),
                Err(crate::Error::LockTimeout) => assert_eq!(b.locks_held(), 0),
                Err(e) => panic!("{e}"),
            }
        });
        lm.unlock(&a, 1u64).unwrap();
        t.join().unwrap();
        let c = lm.locker();
        lm.lock(&c, 1u64, LockMode::X, Wait::No).unwrap();
    });
}

/// Two objects in different partitions of a two-partition manager.
fn two_partitions() -> (u64, u64) {
    let part = |id: u64| super::object::hash(LockObject::Id(id)) >> 32 & 1;
    let a = 1;
    let b = (2..).find(|&b| part(b) != part(a)).unwrap();
    (a, b)
}

/// Turns on the shared-mode bias of `object` (read grants in a row, in slow mode).
fn bias(lm: &LockManager, object: u64) {
    let (x, y) = (lm.locker(), lm.locker());
    lm.lock(&x, object, LockMode::S, Wait::No).unwrap(); // sole owner
    for _ in 0..table::BIAS_AFTER + 1 {
        lm.lock(&y, object, LockMode::S, Wait::No).unwrap(); // inflates, then slow grants
        lm.unlock(&y, object).unwrap();
    }
    lm.unlock(&x, object).unwrap();
    assert!(lm.stats().objects >= 1, "the biased entry stays");
}

/// A reader holding `a` through a fast slot (biased entry) reads the data and releases, then
/// (`reuse_slot`) takes `b` through the same slot; a writer locking `a` exclusively must find
/// the reader's release ordered before its own critical section, whatever slot value it reads.
fn fast_reader_then_writer(reuse_slot: bool) {
    loom::model(move || {
        let lm = Arc::new(
            LockManager::new(LockConfig {
                partitions: 2,
                fast_shared: true,
                ..manager_config(DeadlockPolicy::OnConflict)
            })
            .unwrap(),
        );
        let (a, b) = two_partitions();
        bias(&lm, a);
        bias(&lm, b);
        let data = Arc::new(Tracked(loom::cell::UnsafeCell::new(0)));
        let (lm2, data2) = (lm.clone(), data.clone());
        let reader = thread::spawn(move || {
            let f = lm2.locker();
            lm2.lock(&f, a, LockMode::S, Wait::Forever).unwrap();
            let _ = data2.get();
            lm2.unlock(&f, a).unwrap();
            if reuse_slot {
                lm2.lock(&f, b, LockMode::S, Wait::Forever).unwrap();
            }
            f
        });
        let w = lm.locker();
        lm.lock(&w, a, LockMode::X, Wait::Forever).unwrap();
        data.bump();
        lm.unlock(&w, a).unwrap();
        drop(reader.join().unwrap());
    });
}

#[test]
fn fast_shared_release_is_ordered_before_a_revoking_writer() {
    fast_reader_then_writer(false);
}

#[test]
fn fast_shared_release_then_reuse_of_the_slot_is_ordered_before_a_revoking_writer() {
    fast_reader_then_writer(true);
}
