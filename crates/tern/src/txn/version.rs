//! Versions: what a key was at each commit, newest first, hanging off its leaf slot.
//!
//! A leaf slot either holds a plain value (committed long enough ago that every snapshot sees it)
//! or the id of its chain (`btree::stored`), which the chain table (`chains.rs`) maps to its
//! newest [`Version`]. Each version links to the next older one. A version's timestamp is its commit timestamp, `BASE` (0: a former plain value,
//! visible to everyone), `UNCOMMITTED` (its writer has not committed: who the writer is says
//! the version's slot and sequence number), or `ABORTED`.
//!
//! # Who changes what
//! * A writer holds the key's exclusive lock (lock manager) and changes the chain only under the
//!   leaf's exclusive latch (`BTree::update_chain`): it pushes a version, or rewrites the value of
//!   its own uncommitted version in place. So at most one uncommitted version exists per key, and
//!   it is the newest.
//! * Commit stamps the writer's versions with the commit timestamp; abort marks them `ABORTED`
//!   and unlinks them (they are the newest, under the lock), under the leaf latch.
//! * The collector unlinks versions no running snapshot can see, under the leaf latch; never the
//!   newest one (see `gc.rs`).
//!
//! Readers take no latch: they walk the chain under a crossbeam-epoch guard (unlinked versions
//! are freed through the epoch, so a reader standing on one can still follow it to older ones).
//! A version's value is read only when the reader sees the version (committed, or its own), and
//! is never changed after commit.

use super::chains::Chains;
use super::context::{Slot, ACTIVE};
use crate::btree::Resolve;
use crossbeam_epoch::Guard;
use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64};

/// Timestamp of a version made from a plain value: visible to every snapshot.
pub(crate) const BASE: u64 = 0;
/// Timestamp of a version whose writer has not committed.
pub(crate) const UNCOMMITTED: u64 = u64::MAX - 1;
/// Timestamp of a version whose writer aborted.
pub(crate) const ABORTED: u64 = u64::MAX;
/// A snapshot that sees every committed version: the newest one decides (locking reads).
pub(crate) const LATEST: u64 = UNCOMMITTED - 1;

/// One version of one key.
pub(crate) struct Version {
    /// Commit timestamp, or `BASE`, `UNCOMMITTED`, `ABORTED`.
    pub ts: AtomicU64,
    /// The writer's slot and sequence number (meaningful while `UNCOMMITTED`).
    writer: &'static Slot,
    writer_seq: u64,
    /// The next older version.
    pub next: AtomicPtr<Version>,
    /// The value; `None` is a deletion. Rewritten in place only by its writer while uncommitted.
    value: UnsafeCell<Bytes>,
}

/// Longest value kept inside its version's own allocation.
const INLINE: usize = 112;

/// A version's value: inside the version up to [`INLINE`] bytes (one allocation per version,
/// not two, for the values most writes carry), on the heap beyond.
enum Bytes {
    /// A deletion.
    None,
    Inline {
        len: u8,
        bytes: [u8; INLINE],
    },
    Heap(Box<[u8]>),
}

impl Bytes {
    fn copy(value: Option<&[u8]>) -> Bytes {
        match value {
            None => Bytes::None,
            Some(v) if v.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..v.len()].copy_from_slice(v);
                Bytes::Inline { len: v.len() as u8, bytes }
            }
            Some(v) => Bytes::Heap(v.into()),
        }
    }

    fn get(&self) -> Option<&[u8]> {
        match self {
            Bytes::None => None,
            Bytes::Inline { len, bytes } => Some(&bytes[..usize::from(*len)]),
            Bytes::Heap(b) => Some(b),
        }
    }
}

// SAFETY: `value` is written only by the version's writer while it is uncommitted, and read by
// others only once they see the version committed (the stamp is a release store they acquire),
// so accesses to it never race; everything else is atomic or immutable.
unsafe impl Sync for Version {}
// SAFETY: as for `Sync`.
unsafe impl Send for Version {}

/// Who is reading: a snapshot timestamp, and the reader's own writes (its slot and sequence).
#[derive(Clone, Copy)]
pub(crate) struct Reader {
    pub snapshot: u64,
    pub me: Option<(&'static Slot, u64)>,
}

impl Version {
    /// A new uncommitted version by the writer `(slot, seq)`, on top of `next`. Returns its
    /// address (the caller links it and, eventually, frees it with [`retire`]).
    pub fn new_uncommitted(slot: &'static Slot, seq: u64, value: Option<&[u8]>, next: *mut Version) -> *mut Version {
        Version::with_bytes(slot, seq, Bytes::copy(value), next)
    }

    fn with_bytes(slot: &'static Slot, seq: u64, value: Bytes, next: *mut Version) -> *mut Version {
        let version = Version {
            ts: AtomicU64::new(UNCOMMITTED),
            writer: slot,
            writer_seq: seq,
            next: AtomicPtr::new(next),
            value: UnsafeCell::new(value),
        };
        match SPARE.try_with(|s| s.borrow_mut().0.pop()).ok().flatten() {
            Some(block) => {
                // SAFETY: a spare block is an allocation of `Layout::new::<Version>()` that no
                // version occupies any more (`free` dropped its version before keeping it).
                unsafe { block.as_ptr().write(version) };
                block.as_ptr()
            }
            None => Box::into_raw(Box::new(version)),
        }
    }

    /// A version standing for a plain value (timestamp `BASE`).
    pub fn new_base(slot: &'static Slot, value: &[u8]) -> *mut Version {
        let v = Version::new_uncommitted(slot, 0, Some(value), ptr::null_mut());
        // SAFETY: just allocated, not shared yet.
        unsafe { &*v }.ts.store(BASE, Release);
        v
    }

    /// A version restored from a checkpoint: what the key held at its snapshot (`None`: no
    /// value), visible to every snapshot (timestamp `BASE`).
    pub fn restored(value: Option<Box<[u8]>>) -> *mut Version {
        let value = match value {
            Some(b) if b.len() > INLINE => Bytes::Heap(b),
            v => Bytes::copy(v.as_deref()),
        };
        let v = Version::with_bytes(&super::context::RESTORED, 0, value, ptr::null_mut());
        // SAFETY: just allocated, not shared yet.
        unsafe { &*v }.ts.store(BASE, Release);
        v
    }

    /// Whether `(slot, seq)` wrote this uncommitted version.
    #[inline]
    pub fn written_by(&self, me: Option<(&'static Slot, u64)>) -> bool {
        me.is_some_and(|(slot, seq)| ptr::eq(slot, self.writer) && seq == self.writer_seq)
    }

    /// Replaces the value of the caller's own uncommitted version.
    ///
    /// # Safety
    /// The caller wrote this version, it is uncommitted, and nobody else reads its value
    /// (others never read an uncommitted value; the caller does not hold a reference to it).
    pub unsafe fn set_value(&self, value: Option<&[u8]>) {
        // SAFETY: forwarded from the contract.
        unsafe { *self.value.get() = Bytes::copy(value) };
    }

    /// The value.
    ///
    /// # Safety
    /// The caller sees this version: it is committed (its stamp was acquired), or the caller
    /// wrote it.
    pub unsafe fn value(&self) -> Option<&[u8]> {
        // SAFETY: forwarded from the contract: nobody writes the value any more, or the only
        // writer is the caller.
        unsafe { (*self.value.get()).get() }
    }

    /// This version's commit timestamp as `reader` can use it: `Some(ts)` once committed
    /// (`BASE` included), `None` if it never will be for this reader to see (uncommitted by
    /// another running writer, or aborted). Waits out a writer caught committing.
    pub fn settled_ts(&self, reader: &Reader) -> Option<u64> {
        let mut spins = 0u32;
        loop {
            let ts = self.ts.load(Acquire);
            if ts < UNCOMMITTED {
                return Some(ts);
            }
            if ts == ABORTED {
                return None;
            }
            if self.written_by(reader.me) {
                return Some(BASE); // one's own writes are visible whatever the snapshot
            }
            let state = self.writer.state.load(Acquire);
            if state == self.writer_seq << 2 | ACTIVE {
                // It will commit after `reader`'s snapshot, if at all (see `context.rs`).
                return None;
            }
            // `COMMITTING`, or the writer finished (`IDLE`, or a later sequence): the stamp is
            // stored, or about to be. Look again.
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// The version of the chain at `head` that `reader` sees, if any (it may be a deletion).
///
/// # Safety
/// `head` is a chain in the tree, read under `guard`'s pin (or the chain is otherwise kept
/// alive), and `guard` outlives the returned reference.
pub(crate) unsafe fn visible<'g>(head: *const Version, reader: &Reader, _guard: &'g Guard) -> Option<&'g Version> {
    let mut at = head;
    while !at.is_null() {
        // SAFETY: versions reachable from a live chain are freed only through the epoch, after
        // being unlinked; the caller's pin keeps every version it can reach allocated.
        let v = unsafe { &*at };
        if v.settled_ts(reader).is_some_and(|ts| ts <= reader.snapshot) {
            return Some(v);
        }
        at = v.next.load(Acquire);
    }
    None
}

/// Frees a version once no reader can stand on it (it is unlinked from every chain).
///
/// # Safety
/// `v` came from [`Version::new_uncommitted`] / [`Version::new_base`], is reachable from no
/// chain or slot any more, and is retired once.
pub(crate) unsafe fn retire(v: *mut Version, guard: &Guard) {
    let addr = v as usize;
    // SAFETY: the epoch runs this after every guard pinned at the unlink is gone, so nobody can
    // reach the version; it was a `Box` (contract).
    unsafe { guard.defer_unchecked(move || drop(Box::from_raw(addr as *mut Version))) };
}

/// A transaction's view as a `Resolve`r for tree reads and scans.
#[derive(Clone, Copy)]
pub(crate) struct View<'c> {
    pub reader: Reader,
    pub chains: &'c Chains,
}

impl Resolve for View<'_> {
    fn resolve(&self, chain: u64, out: &mut Vec<u8>) -> bool {
        // The tree calls this with a chain id it validated under its own pinned guard; pinning
        // again is cheap (re-entrant) and makes the lifetime explicit.
        let guard = crossbeam_epoch::pin();
        // SAFETY: as said, the chain is the id's under the tree's pin, which is still held
        // (`chains` invariant 2); an unknown id has a null head.
        match unsafe { visible(self.chains.head(chain), &self.reader, &guard) } {
            // SAFETY: `visible` returned a version this reader sees.
            Some(v) => match unsafe { v.value() } {
                Some(value) => {
                    out.extend_from_slice(value);
                    true
                }
                None => false,
            },
            None => false,
        }
    }
}

/// Spare version blocks of this thread: allocations of `Layout::new::<Version>()` that no
/// version occupies, kept by [`free`] for the thread's next versions (at most [`SPARE_MAX`]).
/// A collection pass frees hundreds of versions at once, more than `malloc`'s per-thread cache
/// holds, and `malloc`'s small bins then cost ~8% of a `write1` transaction.
struct Spare(Vec<ptr::NonNull<Version>>);

/// Most spare blocks a thread keeps (about 300 KiB).
const SPARE_MAX: usize = 2048;

thread_local! {
    static SPARE: std::cell::RefCell<Spare> = const { std::cell::RefCell::new(Spare(Vec::new())) };
}

impl Drop for Spare {
    fn drop(&mut self) {
        for block in self.0.drain(..) {
            // SAFETY: a block of `Layout::new::<Version>()` from the global allocator (a
            // `Box<Version>`'s), holding no version, kept once.
            unsafe { std::alloc::dealloc(block.as_ptr().cast(), std::alloc::Layout::new::<Version>()) };
        }
    }
}

/// Spare blocks this thread holds (as many as it could want once its thread-locals are gone).
#[inline]
pub(crate) fn spare_blocks() -> usize {
    SPARE.try_with(|s| s.borrow().0.len()).unwrap_or(usize::MAX)
}

/// Frees a version now: its value, and its block into this thread's spare blocks (or back to
/// the allocator once the thread keeps [`SPARE_MAX`]).
///
/// # Safety
/// `v` came from [`Version::new_uncommitted`] / [`Version::new_base`] / [`Version::restored`],
/// is reachable from no chain or slot, no reader can stand on it (every guard pinned when it
/// was unlinked is gone), and it is freed once.
pub(crate) unsafe fn free(v: *mut Version) {
    // SAFETY: a version nobody can reach (contract): dropped once, here.
    unsafe { ptr::drop_in_place(v) };
    let block = ptr::NonNull::new(v).expect("a version's address");
    let kept = SPARE
        .try_with(|s| {
            let mut s = s.borrow_mut();
            let room = s.0.len() < SPARE_MAX;
            if room {
                s.0.push(block);
            }
            room
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: every version's block is a `Box<Version>`'s allocation (`with_bytes`), and
        // its version was dropped above.
        unsafe { std::alloc::dealloc(v.cast(), std::alloc::Layout::new::<Version>()) };
    }
}

/// Retires every version of the chain at `head`.
///
/// # Safety
/// The chain is reachable from nowhere any more (its slot is gone or being dropped), and no
/// writer changes it.
pub(crate) unsafe fn free_chain(head: *mut Version, guard: &Guard) {
    let mut at = head;
    while !at.is_null() {
        // SAFETY: allocated (reachable from the chain until retired below, and retiring only
        // defers the free).
        let next = unsafe { &*at }.next.load(Acquire);
        // SAFETY: unlinked with the whole chain (contract); each version is retired once.
        unsafe { retire(at, guard) };
        at = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::context::RESTORED;

    /// A freed version's block is the thread's next version (no allocator round trip), its
    /// heap value is freed with it, and past the cap blocks go back to the allocator.
    #[test]
    fn a_freed_version_block_is_the_threads_next_version() {
        let long = vec![7u8; INLINE + 1];
        let a = Version::new_uncommitted(&RESTORED, 1, Some(&long), ptr::null_mut());
        // SAFETY: just allocated, never linked anywhere.
        unsafe { free(a) };
        let b = Version::new_base(&RESTORED, b"short");
        assert_eq!(a, b, "the spare block is reused");
        // SAFETY: `b` was stamped `BASE` at creation: committed, its value readable.
        assert_eq!(unsafe { (*b).value() }, Some(&b"short"[..]));
        let many: Vec<*mut Version> =
            (0..SPARE_MAX + 10).map(|_| Version::new_uncommitted(&RESTORED, 1, None, ptr::null_mut())).collect();
        for v in many.into_iter().chain([b]) {
            // SAFETY: allocated above, never linked, freed once.
            unsafe { free(v) };
        }
        assert_eq!(SPARE.with(|s| s.borrow().0.len()), SPARE_MAX, "no more than the cap is kept");
    }
}
