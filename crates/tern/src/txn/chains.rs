//! The chain table: chain id → the newest version of a key.
//!
//! A leaf slot whose key has versions holds a **chain id** (8 bytes, `btree::stored`), not the
//! address of its newest version, so that pages hold no heap address: a page image can be
//! written to disk and read back as it is, and an id read from a page (or read optimistically
//! from a page being changed) is looked up here, bounds-checked, never followed blindly.
//!
//! # Invariants
//! 1. An id is **live** from [`Chains::create`] until the slot that held it stops holding it
//!    and [`Chains::release`] is called (after the slot stopped holding it, by whoever removed
//!    it from the slot: only they can reach it then). Its head changes only under that leaf's
//!    exclusive latch ([`Chains::set_head`]).
//! 2. A released id keeps its head, tagged as released, until every thread pinned when it was
//!    released has unpinned (crossbeam-epoch); only then is it cleared and handed out again. So
//!    a reader that found the id in a leaf it then validated, while pinned, reads the chain the
//!    leaf meant, even if the chain was folded away meanwhile.
//! 3. Versions are freed by their own owners (a collection pass retires what it unlinked,
//!    `gc::Gc::retire`; an abort its own versions, `version::retire`): releasing an id frees no
//!    version; dropping the table frees the chains of the ids still live.
//! 4. Free ids are kept in one list per shard of threads (the context index a transaction runs
//!    on, as the collector's queues are): a thread takes ids from its shard's list and the
//!    shard's passes return the ids they release to it, in one batch per pass, so writers on
//!    different shards share no lock and no reference count (one shared free list and a
//!    deferred function per id took ~3% of `write1` at 2 threads; threads whose contexts share
//!    a shard, and `Db::gc` run from any thread, share its list). An id in one list is never in
//!    another. Ids left in the list of a shard no thread uses any more wait for the next thread
//!    on it; other shards take new ids meanwhile, so the ids in use can exceed the chains live
//!    by what idle shards hold.

use super::version::{free_chain, Version};
use crate::sync::segmented::Segmented;
use crossbeam_epoch::Guard;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::{Arc, Mutex as StdMutex};

/// Free lists (invariant 4): as many as the collector has queues.
const SHARDS: usize = super::gc::SHARDS;

/// The low bit of a head: the id was released (versions are at least 8-aligned).
const RELEASED: usize = 1;

/// Chain ids and their heads (see the module doc).
pub(crate) struct Chains {
    heads: Arc<Segmented<AtomicPtr<Version>>>,
    /// The next never-used id (ids start at 1: 0 is never a chain).
    next: AtomicU32,
    /// Ids released and past their epoch, by shard (invariant 4).
    free: Arc<[CachePadded<StdMutex<Vec<u32>>>]>,
}

impl Chains {
    pub(crate) fn new() -> Chains {
        let free = (0..SHARDS).map(|_| CachePadded::new(StdMutex::new(Vec::new()))).collect();
        Chains { heads: Arc::new(Segmented::new()), next: AtomicU32::new(1), free }
    }

    /// A new id whose chain starts at `head`, for a transaction on shard `shard`.
    pub(crate) fn create(&self, shard: usize, head: *mut Version) -> u64 {
        let reused = self.free[shard % SHARDS].lock().unwrap_or_else(|p| p.into_inner()).pop();
        let id = reused.unwrap_or_else(|| {
            let id = self.next.fetch_add(1, Relaxed);
            assert!(id != u32::MAX, "chain ids exhausted (4 billion keys with versions at once)");
            id
        });
        self.heads.ensure(id).store(head, Release);
        u64::from(id)
    }

    /// Makes `id` a live chain holding only a version restored from a checkpoint (at open,
    /// before any reader: leaf images on disk hold these ids). False if `id` is not a chain id
    /// or already live.
    pub(crate) fn restore(&self, id: u64, value: Option<Box<[u8]>>) -> bool {
        let Some(id) = u32::try_from(id).ok().filter(|&i| i != 0 && i != u32::MAX) else { return false };
        let slot = self.heads.ensure(id);
        if !slot.load(Relaxed).is_null() {
            return false;
        }
        slot.store(super::version::Version::restored(value), Release);
        self.next.fetch_max(id + 1, Relaxed);
        true
    }

    /// The newest version of chain `id` (null for an id that is not a chain: one read from a
    /// garbage slot by an optimistic reader, which its validation then rejects).
    #[inline]
    pub(crate) fn head(&self, id: u64) -> *mut Version {
        let Ok(id) = u32::try_from(id) else { return std::ptr::null_mut() };
        match self.heads.get(id) {
            Some(h) => h.load(Acquire).map_addr(|a| a & !RELEASED),
            None => std::ptr::null_mut(),
        }
    }

    /// Makes `head` the newest version of live chain `id` (under its leaf's exclusive latch).
    pub(crate) fn set_head(&self, id: u64, head: *mut Version) {
        let slot = u32::try_from(id).ok().and_then(|id| self.heads.get(id)).expect("a live chain id");
        slot.store(head, Release);
    }

    /// Tags `id`, which no slot holds any more, as released (invariant 2), at once: from here
    /// on dropping the table leaves its versions to whoever unlinked them, even if the
    /// [`release`](Self::release) of its batch never comes (a panic on the way). Idempotent.
    pub(crate) fn mark_released(&self, id: u32) {
        let slot = self.heads.get(id).expect("a live chain id");
        slot.store(slot.load(Relaxed).map_addr(|a| a | RELEASED), Release);
    }

    /// Releases `ids`, which no slot holds any more, to shard `shard`'s free list once their
    /// epoch has passed (invariant 2; one deferred function for the batch).
    pub(crate) fn release(&self, shard: usize, ids: Vec<u32>, guard: &Guard) {
        if ids.is_empty() {
            return;
        }
        for &id in &ids {
            self.mark_released(id);
        }
        let (heads, free) = (self.heads.clone(), self.free.clone());
        guard.defer(move || {
            for &id in &ids {
                if let Some(slot) = heads.get(id) {
                    slot.store(std::ptr::null_mut(), Relaxed);
                }
            }
            free[shard % SHARDS].lock().unwrap_or_else(|p| p.into_inner()).extend(ids);
        });
    }
}

#[cfg(test)]
impl Chains {
    /// Whether `id` is tagged released (tests).
    pub(crate) fn is_released(&self, id: u64) -> bool {
        let slot = self.heads.get(short_id(id)).expect("a chain id");
        slot.load(Relaxed).addr() & RELEASED != 0
    }
}

/// A chain id as the free lists keep it (ids are `u32`: `Chains::create`).
pub(crate) fn short_id(id: u64) -> u32 {
    u32::try_from(id).expect("a live chain id")
}

impl Drop for Chains {
    fn drop(&mut self) {
        // The database is gone: no transaction, reader or collector can reach a chain.
        let guard = crossbeam_epoch::pin();
        for (_, slot) in self.heads.iter() {
            let head = slot.load(Acquire);
            if !head.is_null() && head.addr() & RELEASED == 0 {
                // SAFETY: a live chain (not released, so its versions are still linked from it
                // and owned by it), unreachable now.
                unsafe { free_chain(head, &guard) };
            }
        }
    }
}
