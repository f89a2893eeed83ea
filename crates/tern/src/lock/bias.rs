//! The scalable shared mode: `IS`/`S` locks on a *biased* entry, held in the locker's own fast
//! slots instead of the entry's holders.
//!
//! Many lockers reading one object (a table's intention lock, a hot row) would otherwise all
//! write the same entry under the same partition latch, and the entry's cache line would travel
//! between every core. An entry that keeps seeing only read grants turns on its bias
//! (`Slow::bias`, after `BIAS_AFTER` read grants in a row); from then on a read request takes
//! the partition's *read* latch (a BRAVO reader of [`RwLatch`](crate::sync::RwLatch), which
//! writes only its own slot), finds the biased entry, and publishes the lock in one of the
//! locker's [`FAST_SLOTS`](super::locker::FAST_SLOTS); release is one compare-and-swap on that
//! slot, with no latch. No shared line is written.
//!
//! Any other mode first *revokes* the bias under the write latch: every fast slot naming the
//! entry is tagged `SLOT_CONVERTED` and becomes an ordinary grant in the holders, so the
//! compatibility check and the deadlock detector see every holder. A fast holder learns of the
//! conversion when its own compare-and-swap fails, and then releases the grant under the latch.
//! A revoker sees every fast lock taken before it: slots are stored under the read latch, and
//! the write latch waits for read latches to drain.

use super::locker::{slot_value, Held, How, LockerShared, Record, SLOT_CONVERTED, SLOT_S};
use super::manager::Inner;
use super::mode::LockMode;
use super::object::LockObject;
use super::table::{EntryPtr, Grant, Partition, Slow};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

impl Inner {
    /// Takes a read-mode lock through a fast slot if the object's entry is biased.
    #[inline]
    pub(crate) fn try_fast(
        &self,
        shared: &LockerShared,
        local: &mut Held,
        h: u64,
        object: LockObject<'_>,
        mode: LockMode,
    ) -> bool {
        let part = &self.partitions[self.partition_index(h)];
        let Some(n) = local.free_slot().filter(|_| part.biased.load(Relaxed) != 0) else { return false };
        let g = part.latch.read();
        let Some(p) = g.find(h, object) else { return false };
        if !g.get(p).1.bias {
            return false;
        }
        // Under the read latch: a revoker, which needs the write latch, sees this store. Release:
        // a revoker that reads it also sees this slot's earlier release (a fast lock on another
        // entry given back), whose critical section must precede the revoker's grant.
        shared.fast[usize::from(n)].store(slot_value(p, mode), Release);
        drop(g);
        local.push(Record::new(h, p, object, mode, How::Fast(n)));
        true
    }

    /// Turns every fast lock on the entry at `addr` into a grant in its holders and clears its
    /// bias. Caller holds the partition's write latch.
    pub(crate) fn revoke(&self, slow: &mut Slow, part: &Partition, addr: usize) {
        if !slow.bias {
            return;
        }
        slow.bias = false;
        slow.streak = 0;
        for (&id, l) in self.registry.lock().live.iter() {
            for slot in l.fast.iter() {
                // Acquire on every outcome: a slot found (or failed on) after its holder's
                // release must order that holder's critical section before this revoker's grant.
                let v = slot.load(Acquire);
                if v & !(SLOT_CONVERTED | SLOT_S) == addr
                    && v & SLOT_CONVERTED == 0
                    && slot.compare_exchange(v, v | SLOT_CONVERTED, Acquire, Acquire).is_ok()
                {
                    let mode = if v & SLOT_S != 0 { LockMode::S } else { LockMode::IS };
                    slow.holders.push(Grant { locker: id, mode });
                }
            }
        }
        part.biased.store(part.biased.load(Relaxed) - 1, Relaxed);
        part.revocations.store(part.revocations.load(Relaxed) + 1, Relaxed);
    }

    /// Moves the locker's fast lock (slot `n`, on entry `p` in `mode`) into the entry's holders,
    /// unless a revocation already did. Caller holds the partition's write latch.
    pub(crate) fn absorb_fast(shared: &LockerShared, slow: &mut Slow, p: EntryPtr, mode: LockMode, n: u8) {
        let slot = &shared.fast[usize::from(n)];
        if slot.compare_exchange(slot_value(p, mode), 0, Relaxed, Relaxed).is_ok() {
            slow.grant(shared.id, mode);
        } else {
            slot.store(0, Release);
        }
    }
}
