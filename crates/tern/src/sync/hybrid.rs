//! `HybridLatch<T>`: a version-counted latch with optimistic, shared and exclusive modes, for
//! optimistic lock coupling (Leis et al., "Optimistic Lock Coupling: A Scalable and Efficient
//! General-Purpose Synchronization Method", IEEE Data Eng. Bull. 2019).
//!
//! * **Optimistic read**: read the version (even = not exclusively held), read the data, then
//!   [`validate`](OptimisticGuard::validate): if the version is unchanged no writer intervened
//!   and what was read is a consistent snapshot; otherwise the reader gets [`Restart`] and must
//!   discard everything it read. No shared-memory write happens, so readers of a hot node (a
//!   B+tree root) do not bounce its cache line.
//! * **Shared** and **exclusive** modes come from an embedded [`RawRwLock`]; an exclusive holder
//!   makes the version odd on entry and bumps it to the next even value on exit.
//!
//! ## Why optimistic readers are not undefined behaviour
//!
//! An optimistic reader runs concurrently with a writer, and Rust (like C++) makes a data race
//! on non-atomic memory undefined behaviour even if the value read is later thrown away. So
//! `HybridLatch` never hands out `&mut T`: every mode gives `&T`, and `T` keeps its mutable
//! state in atomics (a B+tree node stores its words as `AtomicU64` and friends). Relaxed atomic
//! loads and stores compile to plain moves on x86-64 and AArch64, so this costs nothing, and it
//! makes every concurrent access defined. The version protocol is the seqlock of Boehm
//! ("Can seqlocks get along with programming language memory models?", MSPC 2012):
//!
//! ```text
//! writer: v = version (even); version = v+1 (relaxed); fence(release); data stores (relaxed);
//!         version = v+2 (release)
//! reader: v1 = version (acquire); data loads (relaxed); fence(acquire); v2 = version (relaxed);
//!         consistent iff v1 == v2 and v1 is even
//! ```
//!
//! If a reader's load saw any store of a writer, the writer's release fence and the reader's
//! acquire fence order the writer's `v+1` store before the reader's second version load, so the
//! reader sees a changed version and restarts. Values read optimistically may be torn across
//! fields (never within one atomic): code that reads optimistically must not trust them (no
//! unchecked indexing, no following pointers without bounds) until `validate` succeeds.
//!
//! Writers should mutate only while holding [`ExclusiveGuard`]; the latch cannot enforce this
//! for atomics, so `T`'s mutating methods take the guard (or are private to the owner).

use super::class::LatchClass;
use super::counters::{add, add_success, Counter};
use super::primitive::{fence, AtomicU64};
use super::rwlock::RawRwLock;
use super::spin::Wait;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// An optimistic read was invalidated by a writer: discard what was read and start over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restart;

impl fmt::Display for Restart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("optimistic read invalidated by a concurrent writer")
    }
}

impl std::error::Error for Restart {}

/// A latch with optimistic, shared and exclusive modes around a `T` of atomics.
pub struct HybridLatch<T> {
    version: AtomicU64,
    lock: RawRwLock,
    class: LatchClass,
    data: T,
}

impl<T> HybridLatch<T> {
    /// A latch of the default class.
    pub fn new(data: T) -> HybridLatch<T> {
        HybridLatch::with_class(data, LatchClass::DEFAULT)
    }

    /// A latch of `class`.
    pub fn with_class(data: T, class: LatchClass) -> HybridLatch<T> {
        HybridLatch { version: AtomicU64::new(0), lock: RawRwLock::new(), class, data }
    }

    /// The latch's class.
    pub fn class(&self) -> LatchClass {
        self.class
    }

    /// The current version (even when no writer is inside). Racy; for diagnostics.
    pub fn version(&self) -> u64 {
        self.version.load(Relaxed)
    }

    /// Begins an optimistic read, waiting (spinning, then blocking) while a writer is inside.
    #[inline]
    pub fn optimistic(&self) -> OptimisticGuard<'_, T> {
        match self.try_optimistic() {
            Some(guard) => guard,
            None => self.optimistic_slow(),
        }
    }

    /// Begins an optimistic read, or returns `None` at once if a writer is inside.
    #[inline]
    pub fn try_optimistic(&self) -> Option<OptimisticGuard<'_, T>> {
        let version = self.version.load(Acquire);
        (version & 1 == 0).then_some(OptimisticGuard { latch: self, version, _not_send: PhantomData })
    }

    #[cold]
    fn optimistic_slow(&self) -> OptimisticGuard<'_, T> {
        let mut wait = Wait::new(self.class);
        loop {
            if let Some(guard) = self.try_optimistic() {
                wait.done();
                return guard;
            }
            if !wait.spin() {
                // Sleep until the writer leaves by queueing for shared mode, then retry.
                self.lock.read_slow(&mut wait);
                // SAFETY: `read_slow` returned holding shared mode.
                unsafe { self.lock.unlock_read() };
            }
        }
    }

    /// Acquires shared mode: writers are excluded, the version stays put.
    #[inline]
    pub fn shared(&self) -> SharedGuard<'_, T> {
        self.lock.read(self.class);
        SharedGuard { latch: self, _not_send: PhantomData }
    }

    /// Acquires exclusive mode.
    #[inline]
    pub fn exclusive(&self) -> ExclusiveGuard<'_, T> {
        self.lock.write(self.class);
        self.enter_exclusive()
    }

    /// Acquires exclusive mode if the latch is free.
    pub fn try_exclusive(&self) -> Option<ExclusiveGuard<'_, T>> {
        self.lock.try_write(self.class).then(|| self.enter_exclusive())
    }

    /// With the lock held exclusively: make the version odd, ordered before the data stores.
    fn enter_exclusive(&self) -> ExclusiveGuard<'_, T> {
        let version = self.version.load(Relaxed);
        self.version.store(version + 1, Relaxed);
        fence(Release);
        ExclusiveGuard { latch: self, _not_send: PhantomData }
    }

    /// Mutable access to the data without latching: `&mut self` proves exclusivity.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.data
    }

    /// Consumes the latch, returning the data.
    pub fn into_inner(self) -> T {
        self.data
    }
}

impl<T: Default> Default for HybridLatch<T> {
    fn default() -> Self {
        HybridLatch::new(T::default())
    }
}

impl<T> fmt::Debug for HybridLatch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HybridLatch")
            .field("class", &self.class.name())
            .field("version", &self.version())
            .finish_non_exhaustive()
    }
}

/// An optimistic read in progress. Holds nothing: the data may change under it; only
/// [`validate`](Self::validate) tells whether what was read is consistent.
pub struct OptimisticGuard<'a, T> {
    latch: &'a HybridLatch<T>,
    version: u64,
    _not_send: PhantomData<*const ()>,
}

impl<'a, T> OptimisticGuard<'a, T> {
    /// The data, to be read with relaxed atomic loads and trusted only after validation.
    #[inline]
    pub fn data(&self) -> &'a T {
        &self.latch.data
    }

    /// The version this read started at.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether no writer entered since the read began: `Ok` means everything read so far is a
    /// consistent snapshot.
    #[inline]
    pub fn validate(&self) -> Result<(), Restart> {
        fence(Acquire);
        let ok = self.latch.version.load(Relaxed) == self.version;
        add_success(self.latch.class, Counter::Optimistic);
        if ok {
            Ok(())
        } else {
            add(self.latch.class, Counter::Restarts, 1);
            Err(Restart)
        }
    }

    /// Runs `read` on the data and validates afterwards.
    #[inline]
    pub fn read<R>(&self, read: impl FnOnce(&T) -> R) -> Result<R, Restart> {
        let value = read(&self.latch.data);
        self.validate().map(|()| value)
    }

    /// Turns the read into shared mode, if no writer intervened.
    pub fn into_shared(self) -> Result<SharedGuard<'a, T>, Restart> {
        let latch = self.latch;
        latch.lock.read(latch.class);
        let guard = SharedGuard { latch, _not_send: PhantomData };
        if latch.version.load(Relaxed) == self.version {
            Ok(guard)
        } else {
            add(latch.class, Counter::Restarts, 1);
            Err(Restart)
        }
    }

    /// Turns the read into exclusive mode, if no writer intervened.
    pub fn into_exclusive(self) -> Result<ExclusiveGuard<'a, T>, Restart> {
        let latch = self.latch;
        latch.lock.write(latch.class);
        if latch.version.load(Relaxed) == self.version {
            Ok(latch.enter_exclusive())
        } else {
            // SAFETY: acquired just above; we leave without having entered, version untouched.
            unsafe { latch.lock.unlock_write() };
            add(latch.class, Counter::Restarts, 1);
            Err(Restart)
        }
    }
}

/// Shared mode on a [`HybridLatch`] until dropped.
#[must_use = "the latch is released as soon as the guard is dropped"]
pub struct SharedGuard<'a, T> {
    latch: &'a HybridLatch<T>,
    _not_send: PhantomData<*const ()>,
}

impl<T> Deref for SharedGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.latch.data
    }
}

impl<T> SharedGuard<'_, T> {
    /// The version, stable while this guard lives.
    pub fn version(&self) -> u64 {
        self.latch.version.load(Relaxed)
    }
}

impl<T> Drop for SharedGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard exists only while shared mode is held; it drops once.
        unsafe { self.latch.lock.unlock_read() }
    }
}

/// Exclusive mode on a [`HybridLatch`] until dropped; dropping publishes a new version.
#[must_use = "the latch is released as soon as the guard is dropped"]
pub struct ExclusiveGuard<'a, T> {
    latch: &'a HybridLatch<T>,
    _not_send: PhantomData<*const ()>,
}

impl<T> Deref for ExclusiveGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.latch.data
    }
}

impl<T> Drop for ExclusiveGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        let odd = self.latch.version.load(Relaxed);
        self.latch.version.store(odd + 1, Release);
        // SAFETY: the guard exists only while exclusive mode is held; it drops once.
        unsafe { self.latch.lock.unlock_write() }
    }
}
