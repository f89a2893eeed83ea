//! The state word of one page: latch, version and residency in one `u64`.
//!
//! ```text
//! bits 56..64  state:   0 FREE      no page has this id
//!                       1 UNLOCKED  resident, no latch held
//!                       2..=251     resident, shared by (state - 1) holders
//!                       252 MARKED  resident, no latch held, picked by the clock (evicted on
//!                                   its next pass unless some access clears the mark first)
//!                       253 LOCKED  resident, held exclusively
//!                       254 LOADING being read in from the file by the thread that holds it
//!                       255 EVICTED on disk only
//! bit 55       DIRTY    the frame differs from the page's block in the file
//! bit 54       WRITING  a write-back of this page is in flight (the page must stay resident)
//! bit 53       WAITERS  a thread is parked on this word
//! bit 52       FREEING  the exclusive holder freed the page: unlocking makes it FREE
//! bits 0..52   version  bumped by every exclusive unlock, eviction, load and free
//! ```
//!
//! Invariants:
//! * An optimistic read of a page is valid iff the word it started from and the word after it
//!   have the same version and a readable state (UNLOCKED, MARKED, shared). Every change of
//!   the frame's contents or of the frame a page lives in happens under LOCKED or LOADING and
//!   ends with a version bump, so a validated reader saw one consistent image of this page.
//! * Shared holders and MARKED/UNLOCKED flips never change the version: readers of a hot
//!   page do not invalidate each other, and a hit on the optimistic path only writes the word
//!   when it finds the page MARKED (and not even then when a point read moves its key to the
//!   row cache instead: [`StateWord::optimistic_keeping_mark`]).
//! * DIRTY, WRITING and WAITERS survive every state change but the ones that own them: an
//!   exclusive unlock sets DIRTY; a write-back sets and clears WRITING and clears DIRTY only if
//!   the version did not move while it copied; whoever releases the word clears WAITERS and
//!   wakes every parked thread.
//! * Only a MARKED page that is neither DIRTY nor WRITING can be evicted (MARKED → LOCKED →
//!   EVICTED): eviction never loses a change and never races a write-back of the same block.
//!
//! The memory-ordering protocol is the seqlock of `sync/hybrid.rs`: an exclusive locker CASes
//! the word to LOCKED, then issues a release fence before touching the page; a reader loads the
//! word (acquire), reads the page with relaxed loads, issues an acquire fence and reloads the
//! word. The loom model in `loom_tests.rs` checks fault-in, optimistic reads and eviction.

use crate::sync::primitive::fence;
use crate::sync::spin::Wait;
use crate::sync::{park, LatchClass};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{self, AcqRel, Acquire, Relaxed, Release};

/// The atomic a state word lives in: `std`'s in the pool's page table (zeroed memory is a
/// valid table), loom's in the model checks of this file's protocol.
pub(crate) trait Word: Sync {
    fn load(&self, order: Ordering) -> u64;
    fn compare_exchange(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64>;
    fn compare_exchange_weak(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64>;
    fn fetch_or(&self, bits: u64, order: Ordering) -> u64;
    fn fetch_and(&self, bits: u64, order: Ordering) -> u64;
}

macro_rules! impl_word {
    ($t:ty) => {
        impl Word for $t {
            #[inline]
            fn load(&self, order: Ordering) -> u64 {
                <$t>::load(self, order)
            }
            #[inline]
            fn compare_exchange(&self, c: u64, n: u64, s: Ordering, f: Ordering) -> Result<u64, u64> {
                <$t>::compare_exchange(self, c, n, s, f)
            }
            #[inline]
            fn compare_exchange_weak(&self, c: u64, n: u64, s: Ordering, f: Ordering) -> Result<u64, u64> {
                <$t>::compare_exchange_weak(self, c, n, s, f)
            }
            #[inline]
            fn fetch_or(&self, bits: u64, order: Ordering) -> u64 {
                <$t>::fetch_or(self, bits, order)
            }
            #[inline]
            fn fetch_and(&self, bits: u64, order: Ordering) -> u64 {
                <$t>::fetch_and(self, bits, order)
            }
        }
    };
}

impl_word!(AtomicU64);
#[cfg(loom)]
impl_word!(loom::sync::atomic::AtomicU64);

pub(crate) const FREE: u8 = 0;
pub(crate) const UNLOCKED: u8 = 1;
/// The most shared holders a page can have at once (more wait).
pub(crate) const MAX_SHARED: u8 = 250;
pub(crate) const MARKED: u8 = 252;
pub(crate) const LOCKED: u8 = 253;
pub(crate) const LOADING: u8 = 254;
pub(crate) const EVICTED: u8 = 255;

pub(crate) const DIRTY: u64 = 1 << 55;
pub(crate) const WRITING: u64 = 1 << 54;
pub(crate) const WAITERS: u64 = 1 << 53;
pub(crate) const FREEING: u64 = 1 << 52;
const VERSION: u64 = (1 << 52) - 1;
const FLAGS: u64 = DIRTY | WRITING | WAITERS | FREEING;

/// The state byte of `w`.
#[inline]
pub(crate) fn state(w: u64) -> u8 {
    (w >> 56) as u8
}

/// The version of `w`.
#[inline]
pub(crate) fn version(w: u64) -> u64 {
    w & VERSION
}

/// Whether an optimistic reader may read the page in state `w`.
#[inline]
pub(crate) fn readable(w: u64) -> bool {
    (UNLOCKED..=MARKED).contains(&state(w))
}

/// Whether `w` is resident with no latch held (UNLOCKED or MARKED).
#[inline]
fn unlatched(w: u64) -> bool {
    matches!(state(w), UNLOCKED | MARKED)
}

/// `w` with state `s` and version `v`, flags kept.
#[inline]
pub(crate) fn with(w: u64, s: u8, v: u64) -> u64 {
    (u64::from(s) << 56) | (w & FLAGS) | (v & VERSION)
}

/// What a fix found instead of a readable page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Absent {
    /// On disk only: fault it in (after validating how the id was found).
    Evicted,
    /// No page has this id (a stale id read by an optimistic reader).
    Free,
}

/// What an acquisition loop does with the word it loaded.
enum Step<R> {
    Done(R),
    /// A CAS lost: load again.
    Retry,
    /// Wait while the word satisfies this, then load again.
    Wait(fn(u64) -> bool),
}

/// Whether the page moved on from `seen` (another version, or no longer readable).
fn changed(w: u64, seen: u64) -> bool {
    version(w) != version(seen) || !readable(w)
}

/// Held exclusively or being loaded.
fn held(w: u64) -> bool {
    matches!(state(w), LOCKED | LOADING)
}

/// Shared by the most holders a word counts.
fn full(w: u64) -> bool {
    state(w) == MAX_SHARED + 1
}

/// Shared by some holders.
fn shared(w: u64) -> bool {
    (UNLOCKED + 1..=MAX_SHARED + 1).contains(&state(w))
}

/// Resident and latched in any mode, or loading.
fn latched(w: u64) -> bool {
    !matches!(state(w), UNLOCKED | MARKED | FREE | EVICTED)
}

/// Operations on one page's state word. `class` only selects the spin policy and counters.
pub(crate) struct StateWord<'a, A: Word = AtomicU64> {
    pub word: &'a A,
    pub class: LatchClass,
}

impl<A: Word> Clone for StateWord<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A: Word> Copy for StateWord<'_, A> {}

impl<A: Word> StateWord<'_, A> {
    #[inline]
    pub(crate) fn load(&self) -> u64 {
        self.word.load(Acquire)
    }

    /// Starts an optimistic read: the word to validate against later. Waits while the page
    /// is held exclusively or being loaded; clears a clock mark (the only write of this path).
    #[inline]
    pub(crate) fn optimistic(&self) -> Result<u64, Absent> {
        let w = self.optimistic_keeping_mark()?;
        self.unmark(w);
        Ok(w)
    }

    /// [`optimistic`](Self::optimistic), but a clock mark stays: the caller decides whether
    /// the page deserves its second chance ([`unmark`](Self::unmark)).
    #[inline]
    pub(crate) fn optimistic_keeping_mark(&self) -> Result<u64, Absent> {
        let w = self.word.load(Acquire);
        if readable(w) {
            return Ok(w);
        }
        self.optimistic_slow()
    }

    /// Second chance: an access seen as `w` unmarks a MARKED page. Losing this race to another
    /// state change is harmless (the validation catches anything that matters).
    #[inline]
    pub(crate) fn unmark(&self, w: u64) {
        if state(w) == MARKED {
            let _ = self.word.compare_exchange(w, with(w, UNLOCKED, w), Relaxed, Relaxed);
        }
    }

    #[cold]
    fn optimistic_slow(&self) -> Result<u64, Absent> {
        self.acquire(|w| match state(w) {
            FREE => Step::Done(Err(Absent::Free)),
            EVICTED => Step::Done(Err(Absent::Evicted)),
            LOCKED | LOADING => Step::Wait(held),
            _ => Step::Done(Ok(w)),
        })
    }

    /// Whether nothing changed the page since `seen` was read (see the module doc).
    #[inline]
    pub(crate) fn validate(&self, seen: u64) -> bool {
        fence(Acquire);
        let w = self.word.load(Relaxed);
        version(w) == version(seen) && readable(w)
    }

    /// Takes shared mode if the page is still as `seen` (waits only while it has the most
    /// shared holders a word can count).
    pub(crate) fn upgrade_shared(&self, seen: u64) -> bool {
        self.acquire(|w| {
            if changed(w, seen) {
                return Step::Done(false);
            }
            match self.try_share(w) {
                None => Step::Wait(full),
                Some(true) => Step::Done(true),
                Some(false) => Step::Retry,
            }
        })
    }

    /// Takes exclusive mode if the page is still as `seen` (waits for shared holders).
    pub(crate) fn upgrade_exclusive(&self, seen: u64) -> bool {
        self.acquire(|w| {
            if changed(w, seen) {
                Step::Done(false)
            } else if !unlatched(w) {
                Step::Wait(shared)
            } else if self.try_lock(w) {
                Step::Done(true)
            } else {
                Step::Retry
            }
        })
    }

    /// Takes shared mode, waiting as needed; `Err` if the page is not resident.
    pub(crate) fn lock_shared(&self) -> Result<(), Absent> {
        self.acquire(|w| match state(w) {
            FREE => Step::Done(Err(Absent::Free)),
            EVICTED => Step::Done(Err(Absent::Evicted)),
            LOCKED | LOADING => Step::Wait(held),
            _ => match self.try_share(w) {
                None => Step::Wait(full),
                Some(true) => Step::Done(Ok(())),
                Some(false) => Step::Retry,
            },
        })
    }

    /// Takes exclusive mode, waiting as needed; `Err` if the page is not resident.
    pub(crate) fn lock_exclusive(&self) -> Result<(), Absent> {
        self.acquire(|w| match state(w) {
            FREE => Step::Done(Err(Absent::Free)),
            EVICTED => Step::Done(Err(Absent::Evicted)),
            UNLOCKED | MARKED if self.try_lock(w) => Step::Done(Ok(())),
            UNLOCKED | MARKED => Step::Retry,
            _ => Step::Wait(latched),
        })
    }

    /// Runs `step` on fresh loads of the word until it is done, waiting (spin, then park)
    /// while it says so.
    fn acquire<R>(&self, mut step: impl FnMut(u64) -> Step<R>) -> R {
        let mut wait: Option<Wait> = None;
        loop {
            match step(self.word.load(Acquire)) {
                Step::Done(r) => {
                    if let Some(wait) = wait {
                        wait.done();
                    }
                    return r;
                }
                Step::Retry => {}
                Step::Wait(blocked) => self.wait(&mut wait, blocked),
            }
        }
    }

    /// One CAS taking shared mode on `w` (no holder → one, n → n + 1): `None` if `w` has the
    /// most holders a word counts, else whether the CAS won.
    fn try_share(&self, w: u64) -> Option<bool> {
        let s = state(w);
        if s == MAX_SHARED + 1 {
            return None;
        }
        let next = if unlatched(w) { UNLOCKED + 1 } else { s + 1 };
        Some(self.word.compare_exchange_weak(w, with(w, next, w), Acquire, Relaxed).is_ok())
    }

    /// One CAS taking exclusive mode on the unlatched `w`, then the seqlock's release fence.
    fn try_lock(&self, w: u64) -> bool {
        let locked = self.word.compare_exchange_weak(w, with(w, LOCKED, w), Acquire, Relaxed).is_ok();
        if locked {
            fence(Release);
        }
        locked
    }

    /// Leaves shared mode.
    pub(crate) fn unlock_shared(&self) {
        let mut w = self.word.load(Relaxed);
        loop {
            let s = state(w);
            debug_assert!((UNLOCKED + 1..=MAX_SHARED + 1).contains(&s), "shared unlock in state {s}");
            let last = s == UNLOCKED + 1;
            let next = if last { with(w, UNLOCKED, w) & !WAITERS } else { with(w, s - 1, w) };
            match self.word.compare_exchange_weak(w, next, Release, Relaxed) {
                Ok(_) => {
                    if (last || s == MAX_SHARED + 1) && w & WAITERS != 0 {
                        if !last {
                            // Waiters for a free shared slot: clear the bit, wake them all.
                            self.word.fetch_and(!WAITERS, Relaxed);
                        }
                        self.wake();
                    }
                    return;
                }
                Err(now) => w = now,
            }
        }
    }

    /// Leaves exclusive mode (or LOADING) into state `to` with a new version; sets `DIRTY` if
    /// `dirty`. Returns the word before the release (its FREEING bit tells whether the holder
    /// freed the page, in which case `to` is replaced by FREE and DIRTY dropped).
    pub(crate) fn release(&self, to: u8, dirty: bool) -> u64 {
        let mut w = self.word.load(Relaxed);
        loop {
            debug_assert!(matches!(state(w), LOCKED | LOADING), "release in state {}", state(w));
            let freed = w & FREEING != 0;
            let mut next = with(w, if freed { FREE } else { to }, version(w) + 1) & !(WAITERS | FREEING);
            if freed {
                next &= !DIRTY;
            } else if dirty {
                next |= DIRTY;
            }
            match self.word.compare_exchange_weak(w, next, Release, Relaxed) {
                Ok(_) => {
                    if w & WAITERS != 0 {
                        self.wake();
                    }
                    return w;
                }
                Err(now) => w = now,
            }
        }
    }

    /// Marks an exclusively held page for freeing at its release.
    pub(crate) fn set_freeing(&self) {
        debug_assert_eq!(state(self.word.load(Relaxed)), LOCKED);
        self.word.fetch_or(FREEING, Relaxed);
    }

    /// FREE → LOCKED for a newly allocated page (its id came off the free list, so nobody
    /// else takes it; optimistic readers holding the stale id see it locked, then a new
    /// version).
    pub(crate) fn lock_new(&self) {
        let mut w = self.word.load(Relaxed);
        loop {
            debug_assert_eq!(state(w), FREE, "allocating a page id in use");
            match self.word.compare_exchange_weak(w, with(w, LOCKED, w) & !DIRTY, Acquire, Relaxed) {
                Ok(_) => {
                    fence(Release);
                    return;
                }
                Err(now) => w = now,
            }
        }
    }

    /// UNLOCKED → MARKED (the clock's first pass); false if the page was not UNLOCKED.
    pub(crate) fn try_mark(&self, w: u64) -> bool {
        state(w) == UNLOCKED && self.word.compare_exchange(w, with(w, MARKED, w), Relaxed, Relaxed).is_ok()
    }

    /// MARKED, clean and not being written → LOCKED, for eviction.
    pub(crate) fn try_lock_for_eviction(&self, w: u64) -> bool {
        let locked = state(w) == MARKED
            && w & (DIRTY | WRITING) == 0
            && self.word.compare_exchange(w, with(w, LOCKED, w), Acquire, Relaxed).is_ok();
        if locked {
            fence(Release);
        }
        locked
    }

    /// EVICTED → LOADING; false if another thread got there first (or the page changed).
    pub(crate) fn try_begin_load(&self) -> bool {
        let w = self.word.load(Acquire);
        let loading =
            state(w) == EVICTED && self.word.compare_exchange(w, with(w, LOADING, w), Acquire, Relaxed).is_ok();
        if loading {
            fence(Release);
        }
        loading
    }

    /// Waits until the page is no longer LOADING (another thread's fault-in).
    pub(crate) fn wait_loaded(&self) {
        self.acquire(|w| if state(w) == LOADING { Step::Wait(|w| state(w) == LOADING) } else { Step::Done(()) })
    }

    /// Claims the write-back of a resident, dirty page not held exclusively and not already
    /// being written: sets WRITING; returns the word claimed (its version is checked by
    /// [`finish_write`](Self::finish_write)).
    pub(crate) fn try_claim_write(&self) -> Option<u64> {
        let w = self.word.load(Acquire);
        (readable(w) && w & DIRTY != 0 && w & WRITING == 0)
            .then(|| self.word.compare_exchange(w, w | WRITING, AcqRel, Relaxed).ok())
            .flatten()
    }

    /// Ends a write-back claimed at `claimed`: clears WRITING, and DIRTY too if `written` and
    /// the page did not change since (so the block holds what the frame holds). Returns
    /// whether it cleared DIRTY.
    pub(crate) fn finish_write(&self, claimed: u64, written: bool) -> bool {
        let mut w = self.word.load(Relaxed);
        loop {
            let clean = written && version(w) == version(claimed) && state(w) != FREE && w & DIRTY != 0;
            let next = if clean { w & !(WRITING | DIRTY) } else { w & !WRITING };
            match self.word.compare_exchange_weak(w, next, Release, Relaxed) {
                Ok(_) => return clean,
                Err(now) => w = now,
            }
        }
    }

    /// Claims the checkpoint's write of a resident page (any latch may be held meanwhile):
    /// waits while a write-back holds WRITING (in any state), then sets it. False if the page
    /// is not resident (nobody else writes it then).
    pub(crate) fn claim_for_checkpoint(&self) -> bool {
        let mut w = self.word.load(Acquire);
        loop {
            // A write-back's claim outlives a free: wait for it in every state.
            if w & WRITING == 0 && matches!(state(w), FREE | EVICTED | LOADING) {
                return false;
            }
            if w & WRITING != 0 {
                std::hint::spin_loop();
                std::thread::yield_now();
                w = self.word.load(Acquire);
                continue;
            }
            match self.word.compare_exchange_weak(w, w | WRITING, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }

    /// Ends a checkpoint's write claimed with [`claim_for_checkpoint`](Self::claim_for_checkpoint):
    /// clears WRITING, and DIRTY too if the page is still at the version of `seen` (the
    /// checkpoint wrote exactly what the frame holds). Returns whether it cleared DIRTY.
    pub(crate) fn finish_checkpoint_write(&self, seen: Option<u64>) -> bool {
        let mut w = self.word.load(Relaxed);
        loop {
            let clean = seen.is_some_and(|s| version(s) == version(w)) && w & DIRTY != 0 && state(w) != FREE;
            let next = if clean { w & !(WRITING | DIRTY) } else { w & !WRITING };
            match self.word.compare_exchange_weak(w, next, Release, Relaxed) {
                Ok(_) => return clean,
                Err(now) => w = now,
            }
        }
    }

    /// One round of waiting while `blocked(word)`: spin, then park with WAITERS set.
    #[cold]
    fn wait(&self, wait: &mut Option<Wait>, blocked: impl Fn(u64) -> bool) {
        let wait = wait.get_or_insert_with(|| Wait::new(self.class));
        if wait.spin() {
            return;
        }
        let word = self.word;
        // SAFETY: the key is this word's address, which only page state words park on; the
        // validation closure only loads and CASes the word (no panic, no parking).
        unsafe {
            wait.park(word as *const A as usize, || {
                let w = word.load(Relaxed);
                blocked(w) && (w & WAITERS != 0 || word.compare_exchange(w, w | WAITERS, Relaxed, Relaxed).is_ok())
            });
        }
    }

    fn wake(&self) {
        // SAFETY: as in `wait`: the key is this word's address.
        unsafe { park::unpark_all(self.word as *const A as usize) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn word(w: &AtomicU64) -> StateWord<'_> {
        StateWord { word: w, class: LatchClass::DEFAULT }
    }

    #[test]
    fn the_lifecycle_of_a_page() {
        let a = AtomicU64::new(0);
        let p = word(&a);
        assert_eq!(p.optimistic(), Err(Absent::Free));
        p.lock_new();
        assert_eq!(state(a.load(Relaxed)), LOCKED);
        let w0 = p.release(UNLOCKED, true);
        let w = p.optimistic().unwrap();
        assert_eq!(version(w), version(w0) + 1);
        assert!(w & DIRTY != 0);
        // Shared holders neither block readers nor change the version.
        p.lock_shared().unwrap();
        assert!(p.validate(w));
        p.lock_shared().unwrap();
        assert_eq!(state(a.load(Relaxed)), UNLOCKED + 2);
        p.unlock_shared();
        p.unlock_shared();
        assert!(p.validate(w));
        // The clock marks; a reader unmarks; a marked dirty page cannot be evicted.
        assert!(p.try_mark(a.load(Relaxed)));
        assert!(!p.try_lock_for_eviction(a.load(Relaxed)), "dirty");
        let claimed = p.try_claim_write().unwrap();
        assert!(p.try_claim_write().is_none(), "one write-back at a time");
        assert!(!p.try_lock_for_eviction(a.load(Relaxed)), "being written");
        p.finish_write(claimed, true);
        assert_eq!(a.load(Relaxed) & (DIRTY | WRITING), 0);
        assert!(p.try_lock_for_eviction(a.load(Relaxed)));
        assert!(!p.validate(w), "locked for eviction");
        p.release(EVICTED, false);
        assert_eq!(p.optimistic(), Err(Absent::Evicted));
        assert!(!p.validate(w));
        assert!(p.try_begin_load());
        assert!(!p.try_begin_load(), "one loader");
        p.release(UNLOCKED, false);
        let w2 = p.optimistic().unwrap();
        assert!(!p.upgrade_exclusive(w), "a stale read cannot upgrade");
        assert!(p.upgrade_exclusive(w2));
        p.set_freeing();
        let before = p.release(UNLOCKED, true);
        assert!(before & FREEING != 0);
        assert_eq!(state(a.load(Relaxed)), FREE);
        assert_eq!(a.load(Relaxed) & (DIRTY | FREEING), 0);
    }

    #[test]
    fn a_write_back_that_raced_a_writer_leaves_the_page_dirty() {
        let a = AtomicU64::new(0);
        let p = word(&a);
        p.lock_new();
        p.release(UNLOCKED, true);
        let claimed = p.try_claim_write().unwrap();
        p.lock_exclusive().unwrap();
        p.release(UNLOCKED, true);
        p.finish_write(claimed, true);
        let w = a.load(Relaxed);
        assert!(w & DIRTY != 0 && w & WRITING == 0);
    }

    #[test]
    fn waiters_are_woken_by_every_release() {
        let a = std::sync::Arc::new(AtomicU64::new(0));
        word(&a).lock_new();
        let threads: Vec<_> = (0..3)
            .map(|i| {
                let a = a.clone();
                std::thread::spawn(move || {
                    let p = word(&a);
                    if i == 0 {
                        p.lock_exclusive().unwrap();
                        p.release(UNLOCKED, true);
                    } else {
                        p.lock_shared().unwrap();
                        p.unlock_shared();
                    }
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(20));
        word(&a).release(UNLOCKED, true);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(state(a.load(Relaxed)), UNLOCKED);
    }
}
