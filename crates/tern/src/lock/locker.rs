//! Lockers: who holds and waits for locks.
//!
//! A [`Locker`] is a handle owned by one thread at a time (a transaction, or a thread using the
//! lock manager directly). It carries everything a lock call needs about its owner, so no call
//! looks the locker up in a shared table: the point of this design against Berkeley DB's, where
//! every `lock_get` resolves its locker id under one region-wide mutex.
//!
//! The locker's own [`Held`] records are the authority on what it holds and how often it
//! locked each object: a re-entrant `lock` or a non-final `unlock` is answered from them
//! without touching shared memory. The part other threads must see is [`LockerShared`]: the
//! wait cell a granting thread completes, what the locker waits for (for deadlock detection),
//! and its fast shared slots.

use super::mode::LockMode;
use super::object::LockObject;
use super::table::EntryPtr;
use crate::sync::aligned::LineAligned;
use crate::sync::primitive::{AtomicU32, AtomicUsize};
use crate::sync::Mutex;
use allocator_api2::vec::Vec;
use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Wait cell: not waiting.
pub(crate) const IDLE: u32 = 0;
/// Wait cell: a request is queued; only a thread holding the request's partition latch moves
/// the cell out of this state (grant, deadlock victim, or the waiter's own timeout).
pub(crate) const WAITING: u32 = 1;
/// Wait cell: the queued request was granted.
pub(crate) const GRANTED: u32 = 2;
/// Wait cell: the queued request was chosen as a deadlock victim and removed.
pub(crate) const DEADLOCK: u32 = 3;
/// Wait cell: the queued request was removed by a barging release (`Slow::grant_waiters`);
/// the locker asks again.
pub(crate) const RETRY: u32 = 4;

/// Fast shared slots per locker: how many `IS`/`S` locks one locker can hold on biased objects
/// without appearing in their entries.
pub(crate) const FAST_SLOTS: usize = 8;
/// Slot tag: the revoker moved this lock into the entry's holders.
pub(crate) const SLOT_CONVERTED: usize = 1;
/// Slot tag: the mode is `S` (clear: `IS`).
pub(crate) const SLOT_S: usize = 2;

/// The value of a fast slot holding `entry` in `mode`.
#[inline]
pub(crate) fn slot_value(entry: EntryPtr, mode: LockMode) -> usize {
    entry.addr() | if mode == LockMode::S { SLOT_S } else { 0 }
}

/// Where a waiting locker's request is queued.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitTarget {
    pub partition: usize,
    pub hash: u64,
    pub entry: usize,
}

/// Counters one locker writes (owner only: a load and a store, no read-modify-write on a
/// shared line); statistics sum them over lockers.
#[derive(Default)]
pub(crate) struct LockerCounters {
    pub requests: AtomicU64,
    pub fast_grants: AtomicU64,
    pub waits: AtomicU64,
    pub wait_ns: AtomicU64,
    pub deadlocks: AtomicU64,
    pub timeouts: AtomicU64,
    pub would_block: AtomicU64,
}

impl LockerCounters {
    #[inline]
    pub fn bump(c: &AtomicU64, n: u64) {
        c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
    }
}

/// The part of a locker other threads read. Its owner writes it on every lock and unlock (fast
/// slots, counters), so it owns a 512-byte block (see `sync::aligned`).
#[repr(align(512))]
pub(crate) struct LockerShared {
    /// Unique, increasing with creation: larger is younger.
    pub id: u64,
    /// IDLE, WAITING, GRANTED, DEADLOCK or RETRY; waiters park on its address.
    pub wait: AtomicU32,
    /// Set while `wait` is WAITING (written under the target's partition latch).
    pub waiting_on: Mutex<Option<WaitTarget>>,
    /// Objects held, for the fewest-locks victim policy (owner writes, detector reads).
    pub held: AtomicUsize,
    /// Fast shared slots: [`slot_value`], possibly tagged `SLOT_CONVERTED`, or 0. The owner
    /// stores under the partition's read latch and clears with a CAS; a revoker converts with
    /// a CAS under the write latch.
    pub fast: CachePadded<[AtomicUsize; FAST_SLOTS]>,
    pub counters: LockerCounters,
}

impl LockerShared {
    pub fn new(id: u64, waiting_class: crate::sync::LatchClass) -> LockerShared {
        LockerShared {
            id,
            wait: AtomicU32::new(IDLE),
            waiting_on: Mutex::with_class(None, waiting_class),
            held: AtomicUsize::new(0),
            fast: CachePadded::new(std::array::from_fn(|_| AtomicUsize::new(0))),
            counters: LockerCounters::default(),
        }
    }

    /// The parking key of this locker's wait cell.
    pub fn park_key(&self) -> usize {
        &self.wait as *const AtomicU32 as usize
    }
}

/// How a locker holds an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    /// As the entry's sole owner, through its owner word (unless an inflation since moved the
    /// lock into the entry's holders).
    Owned,
    /// Through fast slot `n` (unless a revocation since converted it into a holder).
    Fast(u8),
    /// As one of the entry's holders.
    Slow,
}

/// One object a locker holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Record {
    pub hash: u64,
    pub entry: EntryPtr,
    /// The object's id for `LockObject::Id` objects (matched without reading the entry).
    pub id: Option<u64>,
    /// The join of the modes asked for.
    pub mode: LockMode,
    pub how: How,
    /// Successful `lock` calls not yet matched by `unlock`.
    pub count: u32,
}

impl Record {
    pub fn new(hash: u64, entry: EntryPtr, object: LockObject<'_>, mode: LockMode, how: How) -> Record {
        let id = match object {
            LockObject::Id(id) => Some(id),
            LockObject::Bytes(_) => None,
        };
        Record { hash, entry, id, mode, how, count: 1 }
    }

    #[inline]
    fn names(&self, hash: u64, object: LockObject<'_>) -> bool {
        self.hash == hash
            && match object {
                LockObject::Id(id) => self.id == Some(id),
                // SAFETY: the locker holds a lock on the entry (this record), so the entry is
                // alive (the locker keeps its manager) and nothing renames it.
                LockObject::Bytes(_) => self.id.is_none() && unsafe { self.entry.get().key() }.matches(object),
            }
    }
}

/// Above this many records, [`Held`] keeps a hash index; below, a scan is faster.
const INDEX_AFTER: usize = 16;
/// Entries a locker remembers having released.
const CACHED: usize = 8;

/// An entry the locker released: where to try first when it locks the object again.
#[derive(Clone, Copy, Debug)]
struct Cached {
    hash: u64,
    id: Option<u64>,
    entry: EntryPtr,
}

/// The owner's private record of what it holds, and of entries it released lately.
pub(crate) struct Held {
    /// In isolated blocks: written on every lock and unlock, so it must share no cache line with
    /// anything other threads read.
    records: Vec<Record, LineAligned>,
    /// Positions in `records` by object hash, while there are more than `INDEX_AFTER`.
    index: Option<HashTable<usize>>,
    /// Fast slots in use (bit `n`: slot `n`).
    pub fast_used: u8,
    /// Recently released entries (a small ring). Only a hint: the entry may have been retired
    /// and reused for another object since, which the lock path checks.
    cache: [Option<Cached>; CACHED],
    next_cached: usize,
}

impl Default for Held {
    fn default() -> Self {
        Held { records: Vec::new_in(LineAligned), index: None, fast_used: 0, cache: [None; CACHED], next_cached: 0 }
    }
}

impl Held {
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// The position of the record for `object`.
    #[inline]
    pub fn find(&self, hash: u64, object: LockObject<'_>) -> Option<usize> {
        match &self.index {
            None => self.records.iter().position(|r| r.names(hash, object)),
            Some(index) => index.find(hash, |&i| self.records[i].names(hash, object)).copied(),
        }
    }

    /// A released entry that may still be `object`'s (same hash and kind of name).
    #[inline]
    pub fn cached(&self, hash: u64, object: LockObject<'_>) -> Option<EntryPtr> {
        let id = match object {
            LockObject::Id(id) => Some(id),
            LockObject::Bytes(_) => None,
        };
        self.cache.iter().flatten().find(|c| c.hash == hash && c.id == id).map(|c| c.entry)
    }

    /// Remembers the entry of a released record.
    #[inline]
    pub fn remember(&mut self, r: &Record) {
        if self.cache.iter().flatten().any(|c| c.entry == r.entry) {
            return;
        }
        self.cache[self.next_cached] = Some(Cached { hash: r.hash, id: r.id, entry: r.entry });
        self.next_cached = (self.next_cached + 1) % CACHED;
    }

    pub fn get_mut(&mut self, i: usize) -> &mut Record {
        &mut self.records[i]
    }

    pub fn push(&mut self, r: Record) {
        if let How::Fast(n) = r.how {
            self.fast_used |= 1 << n;
        }
        let i = self.records.len();
        self.records.push(r);
        match &mut self.index {
            Some(index) => {
                index.insert_unique(r.hash, i, |&j| self.records[j].hash);
            }
            None if self.records.len() > INDEX_AFTER => {
                let mut index = HashTable::with_capacity(self.records.len() * 2);
                for (j, r) in self.records.iter().enumerate() {
                    index.insert_unique(r.hash, j, |&k| self.records[k].hash);
                }
                self.index = Some(index);
            }
            None => {}
        }
    }

    /// Removes and returns record `i`.
    pub fn remove(&mut self, i: usize) -> Record {
        let last = self.records.len() - 1;
        if let Some(index) = &mut self.index {
            let records = &self.records;
            if let Ok(found) = index.find_entry(records[i].hash, |&j| j == i) {
                found.remove();
            }
            if i != last {
                if let Some(moved) = index.find_mut(records[last].hash, |&j| j == last) {
                    *moved = i;
                }
            }
        }
        let r = self.records.swap_remove(i);
        self.forget_slot(&r);
        r
    }

    /// Every record, leaving none; hand the buffer back with [`Held::reuse`].
    pub fn take_all(&mut self) -> Vec<Record, LineAligned> {
        self.index = None;
        self.fast_used = 0;
        std::mem::replace(&mut self.records, Vec::new_in(LineAligned))
    }

    /// Keeps `buffer`'s allocation for the next records (a locker used for one transaction
    /// after another does not allocate per transaction).
    pub fn reuse(&mut self, mut buffer: Vec<Record, LineAligned>) {
        if self.records.capacity() == 0 {
            buffer.clear();
            self.records = buffer;
        }
    }

    /// A fast slot not in use.
    #[inline]
    pub fn free_slot(&self) -> Option<u8> {
        let n = self.fast_used.trailing_ones() as u8;
        (usize::from(n) < FAST_SLOTS).then_some(n)
    }

    /// Record `i` no longer uses its fast slot (it became a holder).
    pub fn make_slow(&mut self, i: usize) {
        let r = self.records[i];
        self.forget_slot(&r);
        self.records[i].how = How::Slow;
    }

    fn forget_slot(&mut self, r: &Record) {
        if let How::Fast(n) = r.how {
            self.fast_used &= !(1 << n);
        }
    }
}

/// A lock owner: obtain one from [`LockManager::locker`](super::LockManager::locker), use it
/// from one thread at a time. Dropping it releases every lock it still holds.
pub struct Locker {
    pub(crate) manager: Arc<super::manager::Inner>,
    pub(crate) shared: Arc<LockerShared>,
    pub(crate) local: std::cell::RefCell<Held>,
}

impl Locker {
    /// This locker's id: unique within its manager, increasing with creation order (a larger id
    /// is younger, which the `Youngest` victim policy uses).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// How many objects this locker holds locks on.
    pub fn locks_held(&self) -> usize {
        self.local.borrow().len()
    }
}

impl std::fmt::Debug for Locker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker").field("id", &self.shared.id).field("locks_held", &self.locks_held()).finish()
    }
}

impl Drop for Locker {
    fn drop(&mut self) {
        self.manager.release_locker(self);
    }
}
