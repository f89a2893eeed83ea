//! `RawRwLock`: the one-word shared/exclusive lock under [`RwLatch`](super::RwLatch) and
//! [`HybridLatch`](super::HybridLatch).
//!
//! State word: `WRITER` | `PARKED` | `WRITER_PARKED` | reader count × `ONE_READER`.
//!
//! * Readers enter by adding `ONE_READER` while `WRITER` is clear.
//! * A writer first takes the `WRITER` bit, even with readers inside; from then on no new reader
//!   enters. It then waits for the readers already inside to drain. Readers can therefore never
//!   starve a writer: a writer waits for at most the readers present when it took the bit.
//! * Waiters for the `WRITER` bit to clear (readers and writers) set `PARKED` and park on the
//!   lock's address only if, re-checked under the parking queue's lock, `WRITER` and `PARKED`
//!   are still set; the writer draining readers parks on address + 1, setting `WRITER_PARKED`
//!   inside that re-check. The thread that changes the condition wakes under the same queue
//!   lock, so no wakeup is lost. The last reader out wakes a draining writer; a writer's unlock wakes all parked
//!   waiters, and readers and writers race again.
//!
//! The lock does not know its class: callers pass it, so the owner stores it once.

use super::class::LatchClass;
use super::counters::{add_success, Counter};
use super::park::{self, TOKEN_RETRY};
use super::primitive::AtomicUsize;
use super::spin::Wait;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

const WRITER: usize = 1;
const PARKED: usize = 2;
const WRITER_PARKED: usize = 4;
const ONE_READER: usize = 8;
const READERS: usize = !(ONE_READER - 1);

pub(crate) struct RawRwLock {
    state: AtomicUsize,
}

impl RawRwLock {
    pub(crate) fn new() -> RawRwLock {
        RawRwLock { state: AtomicUsize::new(0) }
    }

    fn key(&self) -> usize {
        &self.state as *const AtomicUsize as usize
    }

    /// Where a writer waits for readers to drain: inside the state word, so owned by this lock.
    fn drain_key(&self) -> usize {
        self.key() + 1
    }

    #[inline]
    fn try_enter_shared(&self, s: usize) -> bool {
        s & WRITER == 0 && self.state.compare_exchange_weak(s, s + ONE_READER, Acquire, Relaxed).is_ok()
    }

    /// Acquires shared mode.
    #[inline]
    pub(crate) fn read(&self, class: LatchClass) {
        add_success(class, Counter::Acquisitions);
        if !self.try_enter_shared(self.state.load(Relaxed)) {
            let mut wait = Wait::new(class);
            self.read_slow(&mut wait);
            wait.done();
        }
    }

    /// Acquires shared mode if no writer holds or awaits the lock.
    pub(crate) fn try_read(&self, class: LatchClass) -> bool {
        let ok = (0..4).any(|_| self.try_enter_shared(self.state.load(Relaxed)));
        if ok {
            add_success(class, Counter::Acquisitions);
        }
        ok
    }

    /// The shared-mode slow path, continuing a wait the caller may have started elsewhere.
    #[cold]
    pub(crate) fn read_slow(&self, wait: &mut Wait) {
        loop {
            let s = self.state.load(Relaxed);
            if s & WRITER == 0 {
                if self.try_enter_shared(s) {
                    return;
                }
                continue;
            }
            if wait.spin() {
                continue;
            }
            if s & PARKED == 0 && self.state.compare_exchange_weak(s, s | PARKED, Relaxed, Relaxed).is_err() {
                continue;
            }
            let validate = || {
                let s = self.state.load(Relaxed);
                s & WRITER != 0 && s & PARKED != 0
            };
            // SAFETY: the key is this lock's own address; `validate` only loads an atomic.
            unsafe { wait.park(self.key(), validate) };
        }
    }

    /// Releases shared mode.
    ///
    /// # Safety
    /// The caller must hold shared mode.
    #[inline]
    pub(crate) unsafe fn unlock_read(&self) {
        let prev = self.state.fetch_sub(ONE_READER, Release);
        if prev & READERS == ONE_READER && prev & WRITER_PARKED != 0 {
            self.wake_drained_writer();
        }
    }

    #[cold]
    fn wake_drained_writer(&self) {
        let callback = |_| {
            self.state.fetch_and(!WRITER_PARKED, Relaxed);
            TOKEN_RETRY
        };
        // SAFETY: the key lies inside this lock's state word; the callback only updates an atomic.
        unsafe { park::unpark_one(self.drain_key(), callback) };
    }

    /// Acquires exclusive mode.
    #[inline]
    pub(crate) fn write(&self, class: LatchClass) {
        add_success(class, Counter::Acquisitions);
        if self.state.compare_exchange_weak(0, WRITER, Acquire, Relaxed).is_err() {
            self.write_slow(class);
        }
    }

    /// Acquires exclusive mode if the lock is entirely free.
    pub(crate) fn try_write(&self, class: LatchClass) -> bool {
        let s = self.state.load(Relaxed);
        let ok = s & (WRITER | READERS) == 0 && self.state.compare_exchange(s, s | WRITER, Acquire, Relaxed).is_ok();
        if ok {
            add_success(class, Counter::Acquisitions);
        }
        ok
    }

    #[cold]
    fn write_slow(&self, class: LatchClass) {
        let mut wait = Wait::new(class);
        self.take_writer_bit(&mut wait);
        // From here this thread holds the writer bit, which keeps new readers out: it must not
        // give its CPU away while the readers inside finish.
        wait.holding();
        self.drain_readers(&mut wait);
        wait.done();
    }

    fn take_writer_bit(&self, wait: &mut Wait) {
        loop {
            let s = self.state.load(Relaxed);
            if s & WRITER == 0 {
                if self.state.compare_exchange_weak(s, s | WRITER, Acquire, Relaxed).is_ok() {
                    return;
                }
                continue;
            }
            if wait.spin() {
                continue;
            }
            if s & PARKED == 0 && self.state.compare_exchange_weak(s, s | PARKED, Relaxed, Relaxed).is_err() {
                continue;
            }
            let validate = || {
                let s = self.state.load(Relaxed);
                s & WRITER != 0 && s & PARKED != 0
            };
            // SAFETY: the key is this lock's own address; `validate` only loads an atomic.
            unsafe { wait.park(self.key(), validate) };
        }
    }

    fn drain_readers(&self, wait: &mut Wait) {
        while self.state.load(Acquire) & READERS != 0 {
            if wait.spin() {
                continue;
            }
            let validate = || loop {
                let s = self.state.load(Relaxed);
                if s & READERS == 0 {
                    return false;
                }
                if s & WRITER_PARKED != 0
                    || self.state.compare_exchange_weak(s, s | WRITER_PARKED, Relaxed, Relaxed).is_ok()
                {
                    return true;
                }
            };
            // SAFETY: the key lies inside this lock's state word; `validate` only touches it.
            unsafe { wait.park(self.drain_key(), validate) };
        }
    }

    /// Releases exclusive mode.
    ///
    /// # Safety
    /// The caller must hold exclusive mode.
    #[inline]
    pub(crate) unsafe fn unlock_write(&self) {
        if self.state.compare_exchange(WRITER, 0, Release, Relaxed).is_err() {
            self.unlock_write_slow();
        }
    }

    #[cold]
    fn unlock_write_slow(&self) {
        // Holding exclusive mode, the only other bit that can be set is PARKED: readers cannot
        // enter, and the drain finished before we returned from `write`.
        self.state.store(0, Release);
        // SAFETY: the key is this lock's own address.
        unsafe { park::unpark_all(self.key()) };
    }

    /// Whether any thread holds exclusive mode (racy; for diagnostics and assertions).
    pub(crate) fn is_write_locked(&self) -> bool {
        self.state.load(Relaxed) & WRITER != 0
    }
}
