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
//! A key whose chain could not be folded stays queued. If that is because a running snapshot
//! is older than the commit that queued it (the chain cannot fold before that snapshot ends),
//! the next passes leave it untouched until the oldest running snapshot has passed the commit,
//! and look at it again (pruning what snapshots that ended meanwhile no longer need) every
//! [`LOOK_AGAIN`]-th pass of its shard at the latest; `Db::gc` looks at every queued key. Each
//! look reads the chain under its leaf's latch (cache misses at random keys): with 32 writers
//! on 2 CPUs, preempted transactions hold their snapshots for a time slice, and looking at
//! every held key at every pass made collection a fifth of the CPU time (docs/txn.md).
//!
//! What a pass unlinks (versions, chain ids) is retired as one batch: two deferred functions
//! (crossbeam-epoch) for the pass, its chain ids and its versions, not one per version. Once no reader can stand on them, the
//! versions wait in the shard's reclaim list and the shard's next pass frees them, on the
//! thread that runs it: the thread whose commits queued the keys, so usually the one that
//! allocated them. (Freed wherever the epoch ran them, half the frees at 2 threads went to the
//! other thread's malloc arena and met its lock.) A thread's writes also take versions from its
//! shard's list, 64 at a time, whenever its spare blocks (`version::free`) run out, so a
//! big transaction's next writes reuse what its commit unlinked. A list may grow past
//! [`RECLAIM_MAX`] versions (a pass held back by a preempted snapshot can unlink 100,000 at
//! once), and its own shard's next pass frees them all: freeing them where the deferred
//! function ran instead sent them to another thread's malloc arena, whose lock its owner then
//! waited for (a third of the sleeps of `write1` at 2 threads). A shard that goes idle with
//! more than [`RECLAIM_MAX`] waiting (a thread that committed 100,000 keys and then only
//! reads) gets the rest freed by other shards' passes once [`IDLE_PASSES`] of them have run
//! since it went over: it then holds about 600 KiB, not 15 MB. With no pass anywhere they
//! wait for `Db::gc` or the database's end.

use super::chains::{short_id, Chains};
use super::version::{free, spare_blocks, Version, ABORTED, UNCOMMITTED};
use crate::btree::stored::{Applied, Change, Current, LeafHint};
use crate::btree::BTree;
use crate::sync::{LatchClass, Mutex};
use crate::Result;
use crossbeam_utils::CachePadded;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::{Arc, Mutex as StdMutex};

/// A key written by a commit.
pub(crate) struct Item {
    pub table: u32,
    pub key: Box<[u8]>,
    /// The leaf the write left the key in, as the write saw it: the pass starts there if
    /// nothing changed it since (no descent), else it descends.
    pub leaf: Option<LeafHint>,
    /// The commit's timestamp (0 if unknown): the key's chain cannot fold while a running
    /// snapshot is older than this.
    ts: u64,
    /// Whether a pass already looked at the key (and pruned its chain), and how many passes
    /// held it back since.
    looked: bool,
    held: u8,
}

impl Item {
    /// A key a commit at `ts` wrote (0: unknown, collected at the next pass whatever runs).
    pub fn new(table: u32, key: Box<[u8]>, leaf: Option<LeafHint>, ts: u64) -> Item {
        Item { table, key, leaf, ts, looked: false, held: 0 }
    }

    /// Whether a pass whose oldest running snapshot is `oldest` should look at the key: the
    /// first time; once its chain can fold; and at every [`LOOK_AGAIN`]-th pass besides (the
    /// versions of snapshots that ended meanwhile are pruned then).
    fn due(&self, oldest: u64) -> bool {
        !self.looked || self.ts <= oldest || self.held >= LOOK_AGAIN - 1
    }
}

/// A key whose chain a running snapshot keeps from folding is looked at again (a cache miss
/// or more per look) at the latest at this pass of its shard after the last look.
const LOOK_AGAIN: u8 = 4;

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
    /// Keys left as a single version because their value is too large for a leaf and the
    /// overflow pages it folds into could not be written (an I/O error); they stay queued.
    pub oversized: u64,
    pub remaining: usize,
    /// Keys the pass looked at.
    pub looked: u64,
}

impl Collected {
    pub fn add(&mut self, other: Collected) {
        self.pruned += other.pruned;
        self.folded += other.folded;
        self.oversized += other.oversized;
        self.remaining += other.remaining;
        self.looked += other.looked;
    }
}

/// What one pass unlinked, retired together (see the module doc).
#[derive(Default)]
pub(crate) struct Unlinked {
    /// Versions (`*mut Version` as addresses: they travel to the epoch's deferred function).
    versions: Vec<usize>,
    /// Chain ids no slot holds any more.
    chains: Vec<u32>,
}

/// Unlinked versions past their epoch, by shard, until the shard's next pass frees them.
struct Reclaim {
    shards: Box<[CachePadded<StdMutex<List>>]>,
    /// Passes begun, over every shard: the clock that tells an idle shard's list.
    passes: AtomicU64,
}

/// One shard's reclaim list.
#[derive(Default)]
struct List {
    versions: Vec<usize>,
    /// The pass clock when the list last grew past [`RECLAIM_MAX`] (`None`: within it).
    over_since: Option<u64>,
}

impl Reclaim {
    fn list(&self, shard: usize) -> std::sync::MutexGuard<'_, List> {
        self.shards[shard % SHARDS].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, shard: usize) -> Vec<usize> {
        let mut list = self.list(shard);
        list.over_since = None;
        std::mem::take(&mut list.versions)
    }

    /// Adds what a pass of `shard` unlinked, once its epoch has passed.
    fn add(&self, shard: usize, versions: Vec<usize>) {
        let mut list = self.list(shard);
        list.versions.extend(versions);
        if list.versions.len() > RECLAIM_MAX && list.over_since.is_none() {
            list.over_since = Some(self.passes.load(Relaxed));
        }
    }

    /// Takes the versions beyond [`RECLAIM_MAX`] from `shard`'s list if it has been over that
    /// since [`IDLE_PASSES`] passes before `now` (its own passes would have emptied it).
    fn take_idle_excess(&self, shard: usize, now: u64) -> Vec<usize> {
        let mut list = self.list(shard);
        match list.over_since {
            Some(since) if now.wrapping_sub(since) >= IDLE_PASSES => {
                list.over_since = None;
                let keep = RECLAIM_MAX.min(list.versions.len());
                list.versions.split_off(keep)
            }
            _ => Vec::new(),
        }
    }
}

impl Drop for Reclaim {
    fn drop(&mut self) {
        for shard in 0..SHARDS {
            free_all(self.take(shard));
        }
    }
}

/// Versions a refill takes from a reclaim list at a time.
const REFILL: usize = 64;

/// Most versions an idle shard's reclaim list keeps (about 600 KiB).
const RECLAIM_MAX: usize = 4096;

/// Passes (of any shard) after which the versions beyond [`RECLAIM_MAX`] in a list its own
/// shard has not emptied are freed by another shard's pass.
const IDLE_PASSES: u64 = 32;

/// Frees versions taken from a reclaim list (their blocks become this thread's spares).
fn free_all(versions: Vec<usize>) {
    for v in versions {
        // SAFETY: unlinked by a pass (reachable from no chain or slot), put in a reclaim list
        // by the deferred function that ran once every guard pinned at the unlink was gone,
        // and taken from the list once (`Reclaim::take` empties it under its lock).
        unsafe { free(v as *mut Version) };
    }
}

/// The queues.
pub(crate) struct Gc {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    reclaim: Arc<Reclaim>,
}

impl Gc {
    pub fn new() -> Result<Gc> {
        let class = LatchClass::register("txn.gc")?;
        let shards = (0..SHARDS)
            .map(|_| CachePadded::new(Mutex::with_class(Shard { items: Vec::new(), pass_at: PASS_MIN }, class)))
            .collect();
        let reclaim = (0..SHARDS).map(|_| CachePadded::new(StdMutex::new(List::default()))).collect();
        Ok(Gc { shards, reclaim: Arc::new(Reclaim { shards: reclaim, passes: AtomicU64::new(0) }) })
    }

    /// Frees the versions `shard`'s earlier passes unlinked whose epoch has passed (before
    /// the shard's next pass, on the thread running it), and the excess of one other shard's
    /// list if that shard went idle with it (each shard in turn, one per pass).
    pub fn free_reclaimed(&self, shard: usize) {
        let now = self.reclaim.passes.fetch_add(1, Relaxed).wrapping_add(1);
        free_all(self.reclaim.take(shard));
        let other = (now % SHARDS as u64) as usize;
        if other != shard % SHARDS {
            free_all(self.reclaim.take_idle_excess(other, now));
        }
    }

    /// Refills this thread's spare version blocks from `shard`'s reclaim list once they run
    /// out (a write calls it before it allocates its versions): the next writes of a thread
    /// whose commit unlinked many versions (a pass over 100,000 keys) reuse them, still warm,
    /// instead of new memory while the list waits for the next pass.
    #[inline]
    pub fn refill_spare(&self, shard: usize) {
        if spare_blocks() < 2 {
            self.refill_spare_slow(shard);
        }
    }

    #[cold]
    fn refill_spare_slow(&self, shard: usize) {
        let batch = {
            let mut list = self.reclaim.list(shard);
            let keep = list.versions.len().saturating_sub(REFILL);
            if keep <= RECLAIM_MAX {
                list.over_since = None;
            }
            list.versions.split_off(keep)
        };
        free_all(batch);
    }

    /// Retires what a pass of `shard` unlinked: the chain ids go back to the shard's free list
    /// and the versions to its reclaim list once no reader can stand on them.
    pub fn retire(&self, shard: usize, unlinked: Unlinked, chains: &Chains) {
        let Unlinked { versions, chains: ids } = unlinked;
        if versions.is_empty() && ids.is_empty() {
            return;
        }
        let guard = crossbeam_epoch::pin();
        chains.release(shard, ids, &guard);
        if !versions.is_empty() {
            let reclaim = self.reclaim.clone();
            guard.defer(move || reclaim.add(shard, versions));
        }
        // Into the global queue now: a pass's batch would otherwise wait in this thread's bag
        // for 63 more.
        guard.flush();
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
/// returns what is left and what was done, and adds what it unlinked to `unlinked`.
pub(crate) fn collect<'t>(
    (mut snapshots, horizon): (Vec<u64>, u64),
    items: Vec<Item>,
    full: bool,
    chains: &Chains,
    tree: impl Fn(u32) -> Option<&'t BTree>,
    unlinked: &mut Unlinked,
) -> (Vec<Item>, Collected) {
    let at = snapshots.partition_point(|&s| s < horizon);
    snapshots.insert(at, horizon);
    let oldest = snapshots[0];
    let mut done = Collected::default();
    // Keys already looked at whose chains cannot fold yet wait, untouched (see `Item::due`).
    let (items, mut rest): (Vec<Item>, Vec<Item>) = items.into_iter().partition(|item| full || item.due(oldest));
    for item in &mut rest {
        item.held = item.held.saturating_add(1);
    }
    // Pruned by the first closure below, folded by the second.
    let mut pruned_versions = Vec::new();
    // In key order, once per key: neighbouring keys share leaves, which stay in the cache.
    let items = in_key_order(items);
    done.looked = items.len() as u64;
    let mut rest_at = |mut item: Item| {
        item.looked = true;
        item.held = 0;
        rest.push(item);
    };
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
                    let head = chains.head(id);
                    // SAFETY: the chain is in the tree and we hold its leaf exclusively: nobody
                    // else changes it, and it is allocated.
                    let pruned = unsafe { prune(head, &snapshots, horizon, &mut pruned_versions) };
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
                            // The slot no longer holds the chain (replaced under the latch),
                            // whose only version was the head: both are unlinked now.
                            // Tagged released by the pass's `retire` (before it, a panic
                            // leaves the chain to `Chains::drop`, which frees the head once).
                            unlinked.versions.push(head as usize);
                            unlinked.chains.push(short_id(id));
                        }
                        // Too large for a leaf, and no overflow page could be written for it
                        // (an I/O error): it stays a version, queued for a later pass.
                        Applied::TooLarge => {
                            done.oversized += 1;
                            rest_at(item);
                        }
                        _ => rest_at(item),
                    }
                }
                Err(_) => rest_at(item),
            },
        );
    }
    unlinked.versions.append(&mut pruned_versions);
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
        if let Some(last) = sorted.last_mut().filter(|last| last.table == item.table && last.key == item.key) {
            // One look for both: the newer commit's, first if either is new.
            last.ts = last.ts.max(item.ts);
            last.looked &= item.looked;
            continue;
        }
        sorted.push(item);
    }
    sorted
}

/// Unlinks the versions of the chain at `head` that no snapshot in `snapshots` (sorted, the
/// scan's clock `horizon` included) sees and that committed at or before `horizon`, adding them
/// to `unlinked`; returns how many.
///
/// # Safety
/// The caller holds the chain's leaf exclusively (no other chain change can run), and `head` is
/// the chain in the leaf.
unsafe fn prune(head: *mut Version, snapshots: &[u64], horizon: u64, unlinked: &mut Vec<usize>) -> u64 {
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
            // Unlinked just now (readers still on it are protected by the epoch: the pass
            // retires it through it).
            unlinked.push(at as usize);
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
    use crate::txn::context::RESTORED;
    use proptest::prelude::*;

    /// What a pass unlinked reaches its shard's reclaim list once the epoch has passed (not
    /// before: a reader may stand on it), and the shard's next pass frees it; its chain ids
    /// go back to the shard's free list.
    #[test]
    fn a_pass_retires_into_its_shard_and_the_next_pass_frees() {
        let (gc, chains) = (Gc::new().unwrap(), Chains::new());
        let reader = crossbeam_epoch::pin();
        let versions: Vec<*mut Version> = (0..3).map(|_| Version::new_base(&RESTORED, b"v")).collect();
        let id = chains.create(5, versions[0]);
        let unlinked =
            Unlinked { versions: versions.iter().map(|&v| v as usize).collect(), chains: vec![short_id(id)] };
        gc.retire(5, unlinked, &chains);
        assert!(chains.is_released(id), "tagged at once");
        let queued = |shard: usize| gc.reclaim.list(shard).versions.len();
        for _ in 0..1000 {
            crossbeam_epoch::pin().flush();
        }
        assert_eq!(queued(5), 0, "nothing is reclaimed while a guard pinned before the retire lives");
        let early = chains.create(5, std::ptr::null_mut());
        assert_ne!(early, id, "nor is the id handed out again");
        drop(reader);
        for _ in 0..100_000 {
            if queued(5) == 3 {
                break;
            }
            crossbeam_epoch::pin().flush();
        }
        assert_eq!((queued(5), queued(4)), (3, 0), "the versions wait in their shard's list");
        assert_eq!(chains.create(5, std::ptr::null_mut()), id, "the id is free again, in its shard");
        assert_ne!(chains.create(4, std::ptr::null_mut()), id, "and in no other");
        gc.free_reclaimed(5);
        assert_eq!(queued(5), 0, "the shard's next pass freed them");
    }

    /// A list past [`RECLAIM_MAX`] keeps everything for its own shard's next pass while other
    /// shards' passes run; once [`IDLE_PASSES`] of them have run since it went over (its shard
    /// went idle), another shard's pass frees the excess and leaves [`RECLAIM_MAX`].
    #[test]
    fn an_idle_shards_excess_is_freed_by_other_passes_and_a_busy_ones_by_its_own() {
        let gc = Gc::new().unwrap();
        let versions = |n: usize| (0..n).map(|_| Version::new_base(&RESTORED, b"v") as usize).collect::<Vec<_>>();
        let queued = |shard: usize| gc.reclaim.list(shard).versions.len();
        let over = RECLAIM_MAX + 100;
        // Busy: its own pass comes within the idle time and frees it all.
        gc.reclaim.add(3, versions(over));
        for _ in 0..IDLE_PASSES / 2 {
            gc.free_reclaimed(7);
        }
        assert_eq!(queued(3), over, "other shards leave a list that has not waited long");
        gc.free_reclaimed(3);
        assert_eq!(queued(3), 0, "its own pass frees everything");
        // Idle: other shards' passes take the excess once it has waited.
        gc.reclaim.add(3, versions(over));
        for _ in 0..IDLE_PASSES + 2 * SHARDS as u64 {
            gc.free_reclaimed(7);
        }
        assert_eq!(queued(3), RECLAIM_MAX, "an idle shard keeps at most RECLAIM_MAX");
        // A list within the bound stays whole, however long it waits.
        gc.reclaim.add(4, versions(10));
        for _ in 0..IDLE_PASSES + 2 * SHARDS as u64 {
            gc.free_reclaimed(7);
        }
        assert_eq!(queued(4), 10);
        for shard in [3, 4] {
            gc.free_reclaimed(shard);
        }
    }

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
                raw.iter().map(|(table, key)| Item::new(*table, key.clone().into_boxed_slice(), None, 0)).collect();
            let got: Vec<(u32, Vec<u8>)> = in_key_order(items).into_iter().map(|i| (i.table, i.key.into_vec())).collect();
            let want: Vec<(u32, Vec<u8>)> = raw.into_iter().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }
}
