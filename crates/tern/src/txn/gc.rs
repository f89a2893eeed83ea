//! Garbage collection of versions.
//!
//! Every write commit queues the keys it wrote (one queue per shard of threads, so committers do
//! not share a lock). When a shard's queue has doubled since its last pass, the committing thread
//! collects it: it reads the running snapshots one slot at a time (`context::active_snapshots`:
//! begins and commits go on meanwhile), then, for each queued key in key order, under its leaf
//! latch (one latch for the run of keys that fall in one leaf, `BTree::update_chains_sorted`):
//!
//! * **prunes** every version no running snapshot sees: a version stays if it is the newest, if
//!   it committed after the scan started (snapshots taken since may need it), or if it is the
//!   one some running snapshot sees (the newest at or below that snapshot). So a long-running
//!   reader keeps exactly the versions it reads, one per key, and writers never wait for it;
//! * **folds** a chain that is down to one committed version every running and future snapshot
//!   sees back into a plain value in the leaf (or removes the key, for a deletion), so memory
//!   returns to what the data needs once old readers end.
//!
//! A key whose chain could not be folded stays queued for the next pass.

use super::chains::Chains;
use super::version::{retire, Version, ABORTED, UNCOMMITTED};
use crate::btree::stored::{Applied, Change, Current, LeafHint};
use crate::btree::BTree;
use crate::sync::{LatchClass, Mutex};
use crate::Result;
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{Acquire, Release};

/// A key written by a commit.
pub(crate) struct Item {
    pub table: u32,
    pub key: Box<[u8]>,
    /// The leaf the write left the key in, as the write saw it: the pass starts there if
    /// nothing changed it since (no descent), else it descends.
    pub leaf: Option<LeafHint>,
}

/// Queued keys of one shard.
#[derive(Default)]
struct Shard {
    items: Vec<Item>,
    /// Run a pass once the queue is this long.
    pass_at: usize,
}

/// The fewest queued keys that trigger a pass.
const PASS_MIN: usize = 256;
/// Queue shards (threads pick one by their context index).
pub(crate) const SHARDS: usize = 16;

/// Counts of one collection pass.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Collected {
    pub pruned: u64,
    pub folded: u64,
    /// Keys left as a single version because their value is too large for a leaf.
    pub oversized: u64,
    pub remaining: usize,
}

impl Collected {
    pub fn add(&mut self, other: Collected) {
        self.pruned += other.pruned;
        self.folded += other.folded;
        self.oversized += other.oversized;
        self.remaining += other.remaining;
    }
}

/// The queues.
pub(crate) struct Gc {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
}

impl Gc {
    pub fn new() -> Result<Gc> {
        let class = LatchClass::register("txn.gc")?;
        let shards = (0..SHARDS)
            .map(|_| CachePadded::new(Mutex::with_class(Shard { items: Vec::new(), pass_at: PASS_MIN }, class)))
            .collect();
        Ok(Gc { shards })
    }

    /// Queues `items` on `shard`; returns the shard's queue if it is due for a pass.
    pub fn push(&self, shard: usize, items: impl IntoIterator<Item = Item>) -> Option<Vec<Item>> {
        let mut s = self.shards[shard % SHARDS].lock();
        s.items.extend(items);
        (s.items.len() >= s.pass_at).then(|| std::mem::take(&mut s.items))
    }

    /// Every shard's queue (for a full pass).
    pub fn take_all(&self) -> Vec<(usize, Vec<Item>)> {
        (0..SHARDS).map(|i| (i, std::mem::take(&mut self.shards[i].lock().items))).collect()
    }

    /// Requeues what a pass left, and sets when the next pass is due.
    pub fn put_back(&self, shard: usize, rest: Vec<Item>) {
        let mut s = self.shards[shard % SHARDS].lock();
        s.pass_at = (rest.len() * 2).max(PASS_MIN);
        s.items.extend(rest);
    }

    /// Keys queued now.
    pub fn queued(&self) -> usize {
        self.shards.iter().map(|s| s.lock().items.len()).sum()
    }
}

/// Collects `items`, whose tables `tree` finds and whose chains are in `chains`, given the
/// running snapshots (sorted) and the horizon of the scan (`context::active_snapshots`);
/// returns what is left and what was done.
pub(crate) fn collect<'t>(
    (mut snapshots, horizon): (Vec<u64>, u64),
    items: Vec<Item>,
    chains: &Chains,
    tree: impl Fn(u32) -> Option<&'t BTree>,
) -> (Vec<Item>, Collected) {
    let at = snapshots.partition_point(|&s| s < horizon);
    snapshots.insert(at, horizon);
    let oldest = snapshots[0];
    let mut done = Collected::default();
    let mut rest = Vec::new();
    // In key order, once per key: neighbouring keys share leaves, which stay in the cache.
    let items = in_key_order(items);
    // One table's run of items at a time, leaf by leaf within it.
    let mut items = items.into_iter().peekable();
    while let Some(table) = items.peek().map(|item| item.table) {
        let run = std::iter::from_fn(|| items.next_if(|item| item.table == table));
        let Some(tree) = tree(table) else {
            run.for_each(drop);
            continue;
        };
        tree.update_chains_sorted(
            run,
            |item| &item.key,
            |item| item.leaf,
            |_, current| match current {
                Current::Chain(id) => {
                    // Pinned already (per run): this only borrows the epoch.
                    let guard = crossbeam_epoch::pin();
                    let head = chains.head(id);
                    // SAFETY: the chain is in the tree and we hold its leaf exclusively: nobody
                    // else changes it, and it is allocated.
                    let pruned = unsafe { prune(head, &snapshots, horizon, &guard) };
                    // SAFETY: as above.
                    let change = unsafe { fold(head, oldest) };
                    let folding = change != Change::Keep;
                    (change, Some((pruned, (id, head), folding)))
                }
                _ => (Change::Keep, None),
            },
            |item, outcome| match outcome {
                Ok((_, None)) => {} // a plain value or nothing: done
                Ok((applied, Some((pruned, (id, head), folding)))) => {
                    done.pruned += pruned;
                    match applied {
                        Applied::Yes if folding => {
                            done.folded += 1;
                            let guard = crossbeam_epoch::pin();
                            // SAFETY: the slot no longer holds the chain (replaced under the
                            // latch), whose only version was the head; the head is still
                            // allocated (only this pass, which folded it, frees it).
                            unsafe { retire(head, &guard) };
                            chains.release(id, &guard);
                        }
                        // One version everyone sees, too large for a leaf: it stays a version,
                        // and there is nothing left to collect.
                        Applied::TooLarge => done.oversized += 1,
                        _ => rest.push(item),
                    }
                }
                Err(_) => rest.push(item),
            },
        );
    }
    done.remaining = rest.len();
    (rest, done)
}

/// `items` sorted by table and key, each (table, key) once. Sorted as (table, first 16 key
/// bytes, position) triples in one array, the keys themselves compared only where their first
/// 16 bytes tie: comparing the keys where they lie cost a cache miss per comparison (sorting a
/// commit of 100,000 keys took a tenth of its load).
fn in_key_order(items: Vec<Item>) -> Vec<Item> {
    let head = |key: &[u8]| {
        let mut bytes = [0u8; 16];
        let n = key.len().min(16);
        bytes[..n].copy_from_slice(&key[..n]);
        // Zero-padded big-endian: heads that differ order their keys as the keys order.
        u128::from_be_bytes(bytes)
    };
    let mut order: Vec<(u32, u128, usize)> =
        items.iter().enumerate().map(|(i, item)| (item.table, head(&item.key), i)).collect();
    order.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then_with(|| items[a.2].key.cmp(&items[b.2].key)));
    let mut slots: Vec<Option<Item>> = items.into_iter().map(Some).collect();
    let mut sorted: Vec<Item> = Vec::with_capacity(slots.len());
    for (_, _, i) in order {
        let item = slots[i].take().expect("each position once");
        if sorted.last().is_some_and(|last| last.table == item.table && last.key == item.key) {
            continue;
        }
        sorted.push(item);
    }
    sorted
}

/// Unlinks the versions of the chain at `head` that no snapshot in `snapshots` (sorted, the
/// scan's clock `horizon` included) sees and that committed at or before `horizon`; returns how
/// many.
///
/// # Safety
/// The caller holds the chain's leaf exclusively (no other chain change can run), and `head` is
/// the chain in the leaf.
unsafe fn prune(head: *mut Version, snapshots: &[u64], horizon: u64, guard: &crossbeam_epoch::Guard) -> u64 {
    // SAFETY: the chain is allocated (caller).
    let head_ref = unsafe { &*head };
    let mut newer = match head_ref.ts.load(Acquire) {
        ts if ts >= UNCOMMITTED => u64::MAX, // uncommitted or aborted: sees nothing
        ts => ts,
    };
    let mut kept = head_ref;
    let mut at = kept.next.load(Acquire);
    let mut pruned = 0;
    while !at.is_null() {
        // SAFETY: reachable from the chain, so allocated.
        let v = unsafe { &*at };
        let next = v.next.load(Acquire);
        let ts = v.ts.load(Acquire);
        debug_assert!(ts < UNCOMMITTED || ts == ABORTED, "only the newest version can be uncommitted");
        // An aborted version below the newest (left by an abort that could not unlink it)
        // is seen by nobody: it goes.
        // The first snapshot at or above `ts`: it sees this version if it is below `newer`.
        let seen = snapshots.get(snapshots.partition_point(|&s| s < ts)).is_some_and(|&s| s < newer);
        if ts != ABORTED && (seen || ts > horizon) {
            kept = v;
            newer = ts;
        } else {
            kept.next.store(next, Release);
            // SAFETY: unlinked just now (readers still on it are protected by the epoch).
            unsafe { retire(at, guard) };
            pruned += 1;
        }
        at = next;
    }
    pruned
}

/// The change that folds the chain at `head` back into the leaf, if it is a single committed
/// version every snapshot at or above `oldest` sees; `Keep` otherwise.
///
/// # Safety
/// As for [`prune`].
unsafe fn fold<'a>(head: *mut Version, oldest: u64) -> Change<'a> {
    // SAFETY: the chain is allocated (caller).
    let v = unsafe { &*head };
    let ts = v.ts.load(Acquire);
    if !v.next.load(Acquire).is_null() || ts >= UNCOMMITTED || ts > oldest {
        return Change::Keep;
    }
    // SAFETY: committed (its stamp was acquired above).
    match unsafe { v.value() } {
        Some(value) => Change::Plain(value.into()),
        None => Change::Remove,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The order a pass collects in is (table, key) order, each once: keys that tie on
        /// their first 16 bytes (longer keys, shorter keys padded with zeros) included.
        #[test]
        fn items_come_in_key_order_once_each(
            raw in proptest::collection::vec(
                (0u32..3, prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..24),
                    proptest::collection::vec(0u8..2, 0..20),
                    (0u8..3).prop_map(|b| [&[7u8; 16][..], &[b][..]].concat()),
                ]),
                0..200,
            ),
        ) {
            let items: Vec<Item> =
                raw.iter().map(|(table, key)| Item { table: *table, key: key.clone().into_boxed_slice(), leaf: None }).collect();
            let got: Vec<(u32, Vec<u8>)> = in_key_order(items).into_iter().map(|i| (i.table, i.key.into_vec())).collect();
            let want: Vec<(u32, Vec<u8>)> = raw.into_iter().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }
}
