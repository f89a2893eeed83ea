//! The fix guards: an optimistic read of a page ([`PageRef`]), shared mode ([`SharedPage`]) and
//! exclusive mode ([`ExclusivePage`]). They borrow the pool, so no frame can go away under
//! them; the state word decides whether what was read counts.

use super::page::Page;
use super::pool::Pool;
use super::state::{StateWord, FREEING};
use crate::sync::counters::{add, Counter};
use crate::sync::{LatchClass, Restart};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// An optimistic read of one page: trust what was read only after [`validate`](Self::validate).
pub(crate) struct PageRef<'p> {
    pool: &'p Pool,
    pid: u32,
    page: &'p Page,
    word: &'p AtomicU64,
    seen: u64,
    _not_send: PhantomData<*const ()>,
}

impl<'p> PageRef<'p> {
    #[inline]
    pub(crate) fn new(pool: &'p Pool, pid: u32, page: &'p Page, word: &'p AtomicU64, seen: u64) -> PageRef<'p> {
        PageRef { pool, pid, page, word, seen, _not_send: PhantomData }
    }

    /// The page, to be read with relaxed loads and trusted after validation.
    #[inline]
    pub(crate) fn page(&self) -> &'p Page {
        self.page
    }

    /// The state word as the read found it: equal for two reads of the page only if nothing
    /// changed it between them.
    #[inline]
    pub(crate) fn seen(&self) -> u64 {
        self.seen
    }

    #[inline]
    fn state(&self) -> StateWord<'p> {
        self.pool.state_word_of(self.word)
    }

    /// Whether the clock had marked the page when the read began (and the read left the mark:
    /// [`Pool::optimistic_as`]).
    #[inline]
    pub(crate) fn marked(&self) -> bool {
        super::state::state(self.seen) == super::state::MARKED
    }

    /// Gives the page the second chance an access gives (clears the clock's mark, if still
    /// there).
    #[inline]
    pub(crate) fn unmark(&self) {
        self.state().unmark(self.seen);
    }

    /// `Ok` iff nothing changed the page (or moved it) since the read began.
    #[inline]
    pub(crate) fn validate(&self) -> Result<(), Restart> {
        let word = self.state();
        let ok = word.validate(self.seen);
        if ok {
            Ok(())
        } else {
            add(word.class, Counter::Restarts, 1);
            Err(Restart)
        }
    }

    /// Turns the read into exclusive mode, if nothing changed.
    pub(crate) fn into_exclusive(self) -> Result<ExclusivePage<'p>, Restart> {
        // The visit was counted as a fix when it began: the upgrade is the same fix.
        if self.state().upgrade_exclusive(self.seen) {
            self.pool.note_exclusive(self.pid, self.page);
            Ok(ExclusivePage::new(self.pool, self.pid, self.page, self.word))
        } else {
            add(self.state().class, Counter::Restarts, 1);
            Err(Restart)
        }
    }
}

impl<'p> PageRef<'p> {
    /// Turns the read into shared mode, if nothing changed (the page then stays resident and
    /// unchanged until the guard is dropped).
    pub(crate) fn into_shared(self) -> Result<SharedPage<'p>, Restart> {
        let word = self.state();
        if word.upgrade_shared(self.seen) {
            Ok(SharedPage::new(self.page, self.word, word.class))
        } else {
            add(word.class, Counter::Restarts, 1);
            Err(Restart)
        }
    }
}

/// Shared mode on a page until dropped.
#[must_use = "the page is released as soon as the guard is dropped"]
pub(crate) struct SharedPage<'p> {
    page: &'p Page,
    word: &'p AtomicU64,
    class: LatchClass,
    _not_send: PhantomData<*const ()>,
}

impl<'p> SharedPage<'p> {
    pub(crate) fn new(page: &'p Page, word: &'p AtomicU64, class: LatchClass) -> SharedPage<'p> {
        SharedPage { page, word, class, _not_send: PhantomData }
    }

    #[inline]
    pub(crate) fn page(&self) -> &'p Page {
        self.page
    }
}

impl Drop for SharedPage<'_> {
    fn drop(&mut self) {
        StateWord { word: self.word, class: self.class }.unlock_shared();
    }
}

/// Exclusive mode on a page until dropped; dropping publishes a new version and marks the page
/// dirty (or, after [`free`](Self::free), frees it).
#[must_use = "the page is released as soon as the guard is dropped"]
pub(crate) struct ExclusivePage<'p> {
    pool: &'p Pool,
    pid: u32,
    page: &'p Page,
    word: &'p AtomicU64,
    _not_send: PhantomData<*const ()>,
}

impl<'p> ExclusivePage<'p> {
    pub(crate) fn new(pool: &'p Pool, pid: u32, page: &'p Page, word: &'p AtomicU64) -> ExclusivePage<'p> {
        // A clean page's image is about to change: a new generation (a dirty one changed
        // since it was last clean, and got one then; see `Pool::images`).
        if word.load(Relaxed) & super::state::DIRTY == 0 {
            pool.next_image(pid);
        }
        ExclusivePage { pool, pid, page, word, _not_send: PhantomData }
    }

    #[inline]
    pub(crate) fn page(&self) -> &'p Page {
        self.page
    }

    /// The version the page will have once this guard releases it (unless it frees it): a
    /// later optimistic read that finds this version knows the page is exactly as this holder
    /// left it.
    pub(crate) fn version_after_release(&self) -> u64 {
        let w = self.pool.state_word_of(self.word).load();
        super::state::version(super::state::version(w) + 1)
    }

    /// Frees the page when this guard is dropped (its id and frame are reused).
    pub(crate) fn free(&self) {
        self.pool.state_word_of(self.word).set_freeing();
    }
}

impl Drop for ExclusivePage<'_> {
    fn drop(&mut self) {
        let before = self.pool.state_word_of(self.word).release(super::state::UNLOCKED, true);
        if before & FREEING != 0 {
            self.pool.reclaim(self.pid, before & super::state::DIRTY != 0);
        } else {
            self.pool.note_dirtied(before);
        }
    }
}
