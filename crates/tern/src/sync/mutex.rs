//! `Mutex<T>`: an exclusive latch in two bytes (state + class id).
//!
//! State bits: `LOCKED` (held) and `PARKED` (some thread sleeps in the parking table under this
//! latch's address). Lock is one compare-and-swap when free; unlock is one compare-and-swap when
//! nobody sleeps. Otherwise the slow paths below run the protocol that never loses a wakeup:
//!
//! * a waiter sets `PARKED` and parks only if, under the parking queue's lock, the state is still
//!   `LOCKED | PARKED`;
//! * the unlocker, holding the same queue lock, wakes one waiter and rewrites the state: `PARKED`
//!   stays set exactly when more sleepers remain.
//!
//! Waiters that spin may overtake sleepers ("barging"): it keeps the latch busy while a woken
//! thread is still being scheduled. To bound unfairness, about every 0.5 ms per latch the
//! unlocker hands the latch directly to the oldest sleeper instead (eventual fairness, as
//! `parking_lot`). There is no poisoning: a panic while holding the latch just unlocks it.

use super::class::LatchClass;
use super::counters::{add, Counter};
use super::park::{self, TOKEN_HANDOFF, TOKEN_RETRY};
use super::primitive::AtomicU8;
use super::spin::Wait;
use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

const LOCKED: u8 = 1;
const PARKED: u8 = 2;

/// The lock word of [`Mutex`], usable on its own to protect data kept elsewhere.
pub struct RawMutex {
    state: AtomicU8,
    class: LatchClass,
}

impl RawMutex {
    /// An unlocked latch of `class`.
    pub fn new(class: LatchClass) -> RawMutex {
        RawMutex { state: AtomicU8::new(0), class }
    }

    /// The latch's class.
    pub fn class(&self) -> LatchClass {
        self.class
    }

    /// Acquires the latch, waiting as the class's policy says.
    #[inline]
    pub fn lock(&self) {
        add(self.class, Counter::Acquisitions, 1);
        if self.state.compare_exchange_weak(0, LOCKED, Acquire, Relaxed).is_err() {
            self.lock_slow();
        }
    }

    /// Acquires the latch if it is free, without waiting.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let s = self.state.load(Relaxed);
        let ok = s & LOCKED == 0 && self.state.compare_exchange(s, s | LOCKED, Acquire, Relaxed).is_ok();
        if ok {
            add(self.class, Counter::Acquisitions, 1);
        }
        ok
    }

    /// Whether some thread holds the latch (a racy snapshot, for diagnostics).
    pub fn is_locked(&self) -> bool {
        self.state.load(Relaxed) & LOCKED != 0
    }

    /// Releases the latch.
    ///
    /// # Safety
    /// The calling context must hold the latch (acquired by `lock` or a successful `try_lock`
    /// and not yet released).
    #[inline]
    pub unsafe fn unlock(&self) {
        if self.state.compare_exchange(LOCKED, 0, Release, Relaxed).is_err() {
            self.unlock_slow();
        }
    }

    fn key(&self) -> usize {
        &self.state as *const AtomicU8 as usize
    }

    /// Whether some waiter is (or is about to be) asleep on this latch. Racy; for tests.
    #[cfg(test)]
    pub(crate) fn has_parked(&self) -> bool {
        self.state.load(Relaxed) & PARKED != 0
    }

    #[cold]
    fn lock_slow(&self) {
        let mut wait = Wait::new(self.class);
        let mut s = self.state.load(Relaxed);
        loop {
            if s & LOCKED == 0 {
                match self.state.compare_exchange_weak(s, s | LOCKED, Acquire, Relaxed) {
                    Ok(_) => break,
                    Err(now) => s = now,
                }
                continue;
            }
            if wait.spin() {
                s = self.state.load(Relaxed);
                continue;
            }
            if s & PARKED == 0 {
                if let Err(now) = self.state.compare_exchange_weak(s, s | PARKED, Relaxed, Relaxed) {
                    s = now;
                    continue;
                }
            }
            // SAFETY: the key is this latch's own address; `validate` only loads an atomic.
            let token = unsafe { wait.park(self.key(), || self.state.load(Relaxed) == LOCKED | PARKED) };
            if token == Some(TOKEN_HANDOFF) {
                // The unlocker left LOCKED set for us; the parking queue's lock ordered its
                // critical section before our wake-up.
                break;
            }
            s = self.state.load(Relaxed);
        }
        wait.done();
    }

    #[cold]
    fn unlock_slow(&self) {
        let callback = |r: park::Unparked| {
            if r.unparked && r.be_fair {
                if !r.have_more {
                    self.state.store(LOCKED, Relaxed);
                }
                return TOKEN_HANDOFF;
            }
            self.state.store(if r.have_more { PARKED } else { 0 }, Release);
            TOKEN_RETRY
        };
        // SAFETY: the key is this latch's own address; the callback only stores an atomic.
        unsafe { park::unpark_one(self.key(), callback) };
    }
}

impl fmt::Debug for RawMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawMutex").field("locked", &self.is_locked()).field("class", &self.class.name()).finish()
    }
}

/// A mutual-exclusion latch protecting a `T`; two bytes plus the data.
pub struct Mutex<T: ?Sized> {
    raw: RawMutex,
    data: UnsafeCell<T>,
}

// SAFETY: the latch hands out access to `T` to one thread at a time, so sharing the `Mutex` only
// requires that `T` may move between threads.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}
// SAFETY: owning the Mutex means owning the `T`.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}

impl<T> Mutex<T> {
    /// A latch of the default class around `value`.
    pub fn new(value: T) -> Mutex<T> {
        Mutex::with_class(value, LatchClass::DEFAULT)
    }

    /// A latch of `class` around `value`.
    pub fn with_class(value: T, class: LatchClass) -> Mutex<T> {
        Mutex { raw: RawMutex::new(class), data: UnsafeCell::new(value) }
    }

    /// Consumes the latch, returning the data.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Acquires the latch; it is released when the guard drops.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.raw.lock();
        MutexGuard { mutex: self, _not_send: PhantomData }
    }

    /// Acquires the latch if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.raw.try_lock().then(|| MutexGuard { mutex: self, _not_send: PhantomData })
    }

    /// Mutable access without locking: `&mut self` proves no other reference exists.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    /// The latch's class.
    pub fn class(&self) -> LatchClass {
        self.raw.class()
    }

    #[cfg(test)]
    pub(crate) fn raw(&self) -> &RawMutex {
        &self.raw
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T: ?Sized> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex").field("raw", &self.raw).finish_non_exhaustive()
    }
}

/// Holds a [`Mutex`] until dropped. Not `Send`: the latch is released on the thread that took it.
#[must_use = "the latch is released as soon as the guard is dropped"]
pub struct MutexGuard<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: a shared guard gives only `&T`, which is fine to share when `T: Sync`.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard's existence means this thread holds the latch: no other access.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference via the guard.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard was created by a successful acquisition and is dropped once.
        unsafe { self.mutex.raw.unlock() }
    }
}
