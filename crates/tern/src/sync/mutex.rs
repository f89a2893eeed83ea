//! `Mutex<T>`: an exclusive latch in two bytes (state + class id).
//!
//! State bits: `LOCKED` (held), `PARKED` (some thread sleeps, or is about to, in the parking
//! table under this latch's address) and `AWAKE` (a waiter is awake and will retry before it
//! sleeps). Lock is one compare-and-swap when free; unlock is one compare-and-swap when nobody
//! waits. Otherwise the slow paths below run this protocol:
//!
//! * A waiter sets `PARKED` and parks only if, under the parking queue's lock, the latch is
//!   still `LOCKED` and `PARKED`. An unlocker that sees `PARKED` (and not `AWAKE`) wakes one
//!   sleeper under the same queue lock and rewrites the state: `PARKED` stays set exactly when
//!   more sleepers remain. So no wakeup is lost.
//! * `AWAKE` saves the unlocker the wake-up (a futex syscall) when a waiter is awake anyway: a
//!   spinning waiter claims it when sleepers exist, and an unlocker sets it for the thread it
//!   wakes. Whoever believes it owns `AWAKE` clears it when it acquires the latch or before it
//!   parks, in the same atomic step; an unlocker that skipped the wake-up because of `AWAKE`
//!   only cleared `LOCKED`, so the awake owner sees the latch free on its next look. Hence:
//!   `AWAKE` set implies a waiter that will look at the latch again before it sleeps (the idea
//!   of the `mutexWoken` bit of Go's `sync.Mutex`).
//! * With sleepers queued, only the `AWAKE` owner spins PAUSE rounds; other newcomers park at
//!   once, or yield first if their policy's next round is a `sched_yield`. PAUSE-spinning
//!   beside a queue would only steal the owner's cache line and the sleepers' turn; a yield
//!   touches neither, and gives the CPU to a runnable thread (perhaps the holder).
//!
//! Spinning waiters may overtake sleepers ("barging"): it keeps the latch busy while a woken
//! thread is still being scheduled. To bound unfairness, about every 0.5 ms per latch the
//! unlocker hands the latch directly to the oldest sleeper instead (eventual fairness, as
//! `parking_lot`). There is no poisoning: a panic while holding the latch just unlocks it.

use super::class::LatchClass;
use super::counters::{add_success, Counter};
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
const AWAKE: u8 = 4;

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
        if let Err(s) = self.state.compare_exchange_weak(0, LOCKED, Acquire, Relaxed) {
            // Free but with waiter bits set (a woken thread is on its way): take it anyway.
            if s & LOCKED != 0 || self.state.compare_exchange_weak(s, s | LOCKED, Acquire, Relaxed).is_err() {
                self.lock_slow();
            }
        }
        add_success(self.class, Counter::Acquisitions);
    }

    /// Acquires the latch if it is free, without waiting.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let s = self.state.load(Relaxed);
        let ok = s & LOCKED == 0 && self.state.compare_exchange(s, s | LOCKED, Acquire, Relaxed).is_ok();
        if ok {
            add_success(self.class, Counter::Acquisitions);
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
    #[cfg(all(test, not(loom)))]
    pub(crate) fn has_parked(&self) -> bool {
        self.state.load(Relaxed) & PARKED != 0
    }

    #[cold]
    fn lock_slow(&self) {
        let mut wait = Wait::new(self.class);
        // Whether this thread believes it owns AWAKE (claimed it, or was woken with it).
        let mut awake = false;
        let mut s = self.state.load(Relaxed);
        loop {
            if s & LOCKED == 0 {
                let new = if awake { (s | LOCKED) & !AWAKE } else { s | LOCKED };
                match self.state.compare_exchange_weak(s, new, Acquire, Relaxed) {
                    Ok(_) => break,
                    Err(now) => s = now,
                }
                continue;
            }
            if !awake && s & (PARKED | AWAKE) == PARKED && wait.would_spin() {
                match self.state.compare_exchange_weak(s, s | AWAKE, Relaxed, Relaxed) {
                    Ok(_) => awake = true,
                    Err(now) => s = now,
                }
                continue;
            }
            if (awake || s & PARKED == 0 || wait.yielding()) && wait.spin() {
                s = self.state.load(Relaxed);
                continue;
            }
            // Going to sleep: set PARKED and give up AWAKE in one step, seeing LOCKED still set.
            let new = (s | PARKED) & if awake { !AWAKE } else { !0 };
            if new != s {
                if let Err(now) = self.state.compare_exchange_weak(s, new, Relaxed, Relaxed) {
                    s = now;
                    continue;
                }
            }
            awake = false;
            let validate = || self.state.load(Relaxed) & (LOCKED | PARKED) == LOCKED | PARKED;
            // SAFETY: the key is this latch's own address; `validate` only loads an atomic.
            match unsafe { wait.park(self.key(), validate) } {
                // The unlocker left LOCKED set for us; the parking queue's lock ordered its
                // critical section before our wake-up.
                Some(TOKEN_HANDOFF) => break,
                // Woken by an unlocker, which set AWAKE on our behalf.
                Some(_) => awake = true,
                None => {}
            }
            s = self.state.load(Relaxed);
        }
        wait.done();
    }

    #[cold]
    fn unlock_slow(&self) {
        // Nobody to wake, or a waiter is awake and will see the latch free: just release.
        let mut s = self.state.load(Relaxed);
        while s & PARKED == 0 || s & AWAKE != 0 {
            match self.state.compare_exchange_weak(s, s & !LOCKED, Release, Relaxed) {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
        let callback = |r: park::Unparked| {
            if r.unparked && r.be_fair {
                if !r.have_more {
                    self.state.fetch_and(!PARKED, Relaxed);
                }
                return TOKEN_HANDOFF;
            }
            // Waiters may set AWAKE concurrently (outside the queue lock): update, don't store.
            let mut s = self.state.load(Relaxed);
            loop {
                let mut new = s & !(LOCKED | PARKED);
                if r.have_more {
                    new |= PARKED;
                }
                if r.unparked {
                    new |= AWAKE;
                }
                match self.state.compare_exchange_weak(s, new, Release, Relaxed) {
                    Ok(_) => return TOKEN_RETRY,
                    Err(now) => s = now,
                }
            }
        };
        // SAFETY: the key is this latch's own address; the callback only updates an atomic.
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

    #[cfg(all(test, not(loom)))]
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
