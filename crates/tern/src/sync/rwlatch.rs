//! `RwLatch<T>`: a shared/exclusive latch whose shared mode scales with readers.
//!
//! A plain reader-writer lock counts its readers in one word, so every shared acquisition is a
//! read-modify-write on one cache line that bounces between all reading cores: the cost Berkeley
//! DB's shared locker latch left behind. `RwLatch` applies BRAVO (Dice & Kogan, "BRAVO: Biased
//! Locking for Reader-Writer Locks", USENIX ATC 2019) on top of [`RawRwLock`]:
//!
//! * While the latch is **reader-biased**, a reader publishes itself by writing the latch's
//!   address into its slot of the process-wide *visible readers* table ([`reader_table`]),
//!   then re-checks the bias. Different threads use different cache lines, so readers write no
//!   shared line. If the slot is taken (a collision) or the bias is off, the reader uses the
//!   underlying lock's shared mode instead ("slow readers").
//! * A **writer** takes the underlying lock exclusively (which stops slow readers), then, if
//!   the latch is biased, revokes the bias and waits until none of the slots its readers may
//!   use holds the latch's address (one per thread token handed out, not the whole table).
//!   To keep revocation cheap on average, re-biasing is inhibited for `INHIBIT_FACTOR` times as
//!   long as the revocation took; a slow reader re-enables the bias once that time has passed.
//!
//! Soundness rests on a store-load (Dekker) pair: the reader stores its slot then loads the
//! bias; the writer stores the bias then loads the slots. All four accesses are `SeqCst`, so at
//! least one side sees the other: either the reader sees the bias off and retreats, or the writer
//! sees the slot and waits for it to clear. A fast reader's view of the data is ordered after
//! the previous writer by the chain writer unlock → slow reader's shared lock → its release
//! store of the bias → the fast reader's load of it. Writers are not starved by readers: the
//! underlying lock's writer preference stops slow readers, and fast readers stop arriving once
//! the bias is revoked.
//!
//! Bias can be turned off per latch ([`RwLatch::with_options`]) to measure what it buys.
//!
//! Like most writer-preferring locks, shared mode is not recursive: a thread that holds a read
//! guard and asks for another can deadlock behind a writer waiting in between. Take one guard.

use super::class::LatchClass;
use super::counters::{add, add_success, Counter};
use super::primitive::{dekker_fence, spin_loop, ticks, yield_now, AtomicBool, AtomicU64, AtomicUsize};
use super::reader_table;
use super::rwlock::RawRwLock;
use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering::{Relaxed, Release, SeqCst};

/// Re-biasing waits this many times the duration of the last revocation.
const INHIBIT_FACTOR: u64 = 9;

/// A reader-writer latch protecting a `T`, with scalable shared mode.
pub struct RwLatch<T: ?Sized> {
    lock: RawRwLock,
    bias: ReaderBias,
    class: LatchClass,
    data: UnsafeCell<T>,
}

// SAFETY: readers get `&T` concurrently (needs `T: Sync`), a writer gets `&mut T` from any
// thread (needs `T: Send`).
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLatch<T> {}
// SAFETY: owning the latch means owning the `T`.
unsafe impl<T: ?Sized + Send> Send for RwLatch<T> {}

/// The reader-bias state of one latch. Its address is what fast readers publish in the
/// visible readers table.
struct ReaderBias {
    /// Readers may use the visible readers table.
    on: AtomicBool,
    /// This latch may be biased at all.
    enabled: bool,
    /// Tick before which slow readers must not re-enable the bias.
    inhibit_until: AtomicU64,
}

impl ReaderBias {
    fn id(&self) -> usize {
        self as *const ReaderBias as usize
    }
}

impl Drop for ReaderBias {
    /// Dropping needs ownership, so no read guard can be alive: a slot that still names this
    /// latch belongs to a guard that was leaked (`mem::forget`). Clear it, or a later latch
    /// allocated at the same address would wait for that reader forever.
    fn drop(&mut self) {
        if self.enabled {
            let me = self.id();
            for slot in reader_table::slots_of(me) {
                let _ = slot.compare_exchange(me, 0, Relaxed, Relaxed);
            }
        }
    }
}

impl<T> RwLatch<T> {
    /// A reader-biased latch of the default class.
    pub fn new(value: T) -> RwLatch<T> {
        RwLatch::with_options(value, LatchClass::DEFAULT, true)
    }

    /// A reader-biased latch of `class`.
    pub fn with_class(value: T, class: LatchClass) -> RwLatch<T> {
        RwLatch::with_options(value, class, true)
    }

    /// A latch of `class`; `reader_bias = false` makes every reader use the shared counter.
    pub fn with_options(value: T, class: LatchClass, reader_bias: bool) -> RwLatch<T> {
        RwLatch {
            lock: RawRwLock::new(),
            bias: ReaderBias {
                on: AtomicBool::new(reader_bias),
                enabled: reader_bias,
                inhibit_until: AtomicU64::new(0),
            },
            class,
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the latch, returning the data.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> RwLatch<T> {
    /// Acquires shared mode.
    #[inline]
    pub fn read(&self) -> RwLatchReadGuard<'_, T> {
        if let Some(slot) = self.try_fast_read() {
            add_success(self.class, Counter::Acquisitions);
            return RwLatchReadGuard { latch: self, slot: Some(slot), _not_send: PhantomData };
        }
        self.lock.read(self.class);
        self.maybe_rebias();
        RwLatchReadGuard { latch: self, slot: None, _not_send: PhantomData }
    }

    /// Acquires shared mode if that needs no waiting. A reader-biased latch may admit fast
    /// readers while a writer is still draining earlier slow readers (until it revokes the bias);
    /// without the bias, no reader enters once a writer holds or awaits the latch.
    pub fn try_read(&self) -> Option<RwLatchReadGuard<'_, T>> {
        if let Some(slot) = self.try_fast_read() {
            add_success(self.class, Counter::Acquisitions);
            return Some(RwLatchReadGuard { latch: self, slot: Some(slot), _not_send: PhantomData });
        }
        self.lock.try_read(self.class).then(|| RwLatchReadGuard { latch: self, slot: None, _not_send: PhantomData })
    }

    /// The biased path: publish in the visible readers table, then confirm the bias.
    #[inline]
    fn try_fast_read(&self) -> Option<&'static AtomicUsize> {
        if !self.bias.on.load(Relaxed) {
            return None;
        }
        let me = self.bias.id();
        let slot = reader_table::my_slot(me)?;
        if slot.compare_exchange(0, me, SeqCst, Relaxed).is_err() {
            return None;
        }
        dekker_fence();
        if self.bias.on.load(SeqCst) {
            return Some(slot);
        }
        slot.store(0, Release);
        None
    }

    /// A slow reader holds the underlying lock shared: no writer is inside, so it may re-bias.
    fn maybe_rebias(&self) {
        let b = &self.bias;
        if b.enabled && !b.on.load(Relaxed) && ticks() >= b.inhibit_until.load(Relaxed) {
            b.on.store(true, Release);
        }
    }

    /// Acquires exclusive mode.
    #[inline]
    pub fn write(&self) -> RwLatchWriteGuard<'_, T> {
        self.lock.write(self.class);
        if self.bias.on.load(Relaxed) {
            self.revoke_bias();
        }
        RwLatchWriteGuard { latch: self, _not_send: PhantomData }
    }

    /// Acquires exclusive mode if nobody holds the latch, without waiting (not even for fast
    /// readers to leave, so a thread holding a read guard gets `None`, not a self-deadlock).
    pub fn try_write(&self) -> Option<RwLatchWriteGuard<'_, T>> {
        if !self.lock.try_write(self.class) {
            return None;
        }
        if self.bias.on.load(Relaxed) {
            self.bias.on.store(false, SeqCst);
            dekker_fence();
            let me = self.bias.id();
            if reader_table::slots_of(me).any(|slot| slot.load(SeqCst) == me) {
                // Fast readers are inside: restore the bias (readers that saw it off are queued
                // on the lock we still hold) and give up.
                self.bias.on.store(true, SeqCst);
                // SAFETY: acquired by `try_write` above.
                unsafe { self.lock.unlock_write() };
                return None;
            }
            add(self.class, Counter::Revocations, 1);
        }
        Some(RwLatchWriteGuard { latch: self, _not_send: PhantomData })
    }

    /// Turns the bias off and waits for every fast reader of this latch to leave.
    #[cold]
    fn revoke_bias(&self) {
        let start = ticks();
        self.bias.on.store(false, SeqCst);
        dekker_fence();
        let me = self.bias.id();
        for slot in reader_table::slots_of(me) {
            let mut spins = 0u32;
            while slot.load(SeqCst) == me {
                // Fast readers hold no parkable state, so a writer waits for them by spinning,
                // giving up the CPU if a reader is slow to finish (it may be descheduled).
                spins += 1;
                if spins < 64 {
                    spin_loop();
                } else {
                    yield_now();
                }
            }
        }
        let end = ticks();
        let inhibit = end.saturating_add(end.saturating_sub(start).saturating_mul(INHIBIT_FACTOR));
        self.bias.inhibit_until.store(inhibit, Relaxed);
        add(self.class, Counter::Revocations, 1);
    }

    /// Mutable access without locking: `&mut self` proves no other reference exists.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    /// The latch's class.
    pub fn class(&self) -> LatchClass {
        self.class
    }

    /// Whether a writer holds or awaits the underlying lock (racy; for the loom models).
    #[cfg(all(test, loom))]
    pub(crate) fn lock_is_write_locked(&self) -> bool {
        self.lock.is_write_locked()
    }

    /// Whether readers currently take the biased path (racy; for diagnostics).
    pub fn is_reader_biased(&self) -> bool {
        self.bias.on.load(Relaxed)
    }
}

impl<T: Default> Default for RwLatch<T> {
    fn default() -> Self {
        RwLatch::new(T::default())
    }
}

impl<T: ?Sized> fmt::Debug for RwLatch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLatch")
            .field("class", &self.class.name())
            .field("reader_biased", &self.is_reader_biased())
            .field("write_locked", &self.lock.is_write_locked())
            .finish_non_exhaustive()
    }
}

/// Shared access to an [`RwLatch`] until dropped.
#[must_use = "the latch is released as soon as the guard is dropped"]
pub struct RwLatchReadGuard<'a, T: ?Sized> {
    latch: &'a RwLatch<T>,
    /// The visible-readers slot this reader published in; `None` for a slow reader.
    slot: Option<&'static AtomicUsize>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: the guard gives only `&T`.
unsafe impl<T: ?Sized + Sync> Sync for RwLatchReadGuard<'_, T> {}

impl<T: ?Sized> Deref for RwLatchReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: shared mode is held (fast or slow), so no writer has `&mut T`.
        unsafe { &*self.latch.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLatchReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        match self.slot {
            Some(slot) => slot.store(0, Release),
            // SAFETY: a guard without a slot was made after `lock.read` succeeded.
            None => unsafe { self.latch.lock.unlock_read() },
        }
    }
}

/// Exclusive access to an [`RwLatch`] until dropped.
#[must_use = "the latch is released as soon as the guard is dropped"]
pub struct RwLatchWriteGuard<'a, T: ?Sized> {
    latch: &'a RwLatch<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: a shared reference to the guard gives only `&T`.
unsafe impl<T: ?Sized + Sync> Sync for RwLatchWriteGuard<'_, T> {}

impl<T: ?Sized> Deref for RwLatchWriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: exclusive mode is held and every fast reader has drained.
        unsafe { &*self.latch.data.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLatchWriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.latch.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLatchWriteGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard was made after `lock.write` succeeded, and drops once.
        unsafe { self.latch.lock.unlock_write() }
    }
}
