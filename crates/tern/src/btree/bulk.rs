//! Building a tree from sorted input, bottom-up.
//!
//! Leaves are packed left to right up to a fill target (leaving room for later inserts), each
//! closed with a suffix-truncated separator that becomes its upper fence and the next leaf's
//! lower fence. Each inner level is packed the same way from the level below: a node's
//! separators are its children's lower fences, its upper child is its last child. No latches
//! are taken: the tree is not shared until `bulk_load` returns it. The epoch is pinned per node
//! written, never across the whole load: a long pin would stall page reclamation in every tree
//! of the process.
//!
//! Invariants:
//! * A page is handed to the write-behind thread ([`Behind`]) only once it is finished (its
//!   exclusive guard dropped, never changed again by the load); the thread writes it back like
//!   the evictor does (`Pool::write_behind`), so the checkpoint that makes a loaded table
//!   durable finds most of its pages clean. The thread is joined before the load returns.
//! * A load that fails frees every page it allocated (nodes, overflow chains, the tree's first
//!   page) before it returns the error: nothing is left allocated and unreachable.

use super::node::{self, EntryRef, NodeSpec, FLAG_OVERFLOW};
use super::overflow;
use super::tree::{shortest_separator, BTree, TreeConfig, MAX_VALUE};
use crate::buffer::{Kind, Pool};
use crate::{Error, Result};

/// Fraction of a page bulk loading fills, in percent.
const FILL_PERCENT: usize = 90;

/// A node of the level being built: its page and its lower fence.
struct Built {
    pid: u32,
    lower: Option<Vec<u8>>,
}

/// Finished pages sent to the write-behind thread at a time.
const WRITE_BEHIND: usize = 64;

/// What a load has allocated and not yet linked under a root: freed if the load fails.
#[derive(Default)]
struct Unlinked {
    /// The finished level below the one being built (each node with what is under it).
    below: Vec<Built>,
    /// The nodes of the level being built (their children are in `below`, or they are leaves).
    level: Vec<Built>,
    /// Leaf entries not yet in a node (their overflow chains are allocated).
    pending: PendingLeaf,
}

/// The entries of the leaf being filled, their keys and values in one buffer: no allocation
/// per entry.
#[derive(Default)]
struct PendingLeaf {
    bytes: Vec<u8>,
    items: Vec<Item>,
    /// The keys' and values' bytes, summed.
    record_bytes: usize,
}

/// One entry of a [`PendingLeaf`]: its key at `start`, its value right after.
#[derive(Clone, Copy)]
struct Item {
    start: usize,
    key_len: usize,
    value_len: usize,
    flags: u16,
}

impl PendingLeaf {
    fn len(&self) -> usize {
        self.items.len()
    }

    fn push(&mut self, key: &[u8], value: &[u8], flags: u16) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
        self.items.push(Item { start, key_len: key.len(), value_len: value.len(), flags });
        self.record_bytes += key.len() + value.len();
    }

    fn key(&self, i: usize) -> &[u8] {
        let it = self.items[i];
        &self.bytes[it.start..it.start + it.key_len]
    }

    fn entry(&self, it: Item) -> EntryRef<'_> {
        let value = it.start + it.key_len;
        EntryRef {
            key: &self.bytes[it.start..value],
            value: &self.bytes[value..value + it.value_len],
            flags: it.flags,
            child: 0,
        }
    }

    /// The first `n` entries, as a node is built from them.
    fn entries(&self, n: usize) -> Vec<EntryRef<'_>> {
        self.items[..n].iter().map(|&it| self.entry(it)).collect()
    }

    /// The overflow references among the values (their chains are allocated).
    fn overflow_refs(&self) -> impl Iterator<Item = &[u8]> {
        self.items.iter().filter(|it| it.flags & FLAG_OVERFLOW != 0).map(|&it| self.entry(it).value)
    }

    /// Keeps only the last entry: the first of the next leaf.
    fn keep_last(&mut self) {
        let last = self.items.pop().expect("a pending entry");
        self.bytes.drain(..last.start);
        self.items.clear();
        self.items.push(Item { start: 0, ..last });
        self.record_bytes = last.key_len + last.value_len;
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.items.clear();
        self.record_bytes = 0;
    }
}

/// The write-behind thread's inbox: finished pages, sent in batches of [`WRITE_BEHIND`].
struct Behind {
    sender: Option<std::sync::mpsc::SyncSender<Vec<u32>>>,
    batch: Vec<u32>,
}

impl Behind {
    /// Starts the writer in `scope` if `pool` writes to a file (without a thread, the pages
    /// stay dirty for the checkpoint or the evictor).
    fn start<'scope>(scope: &'scope std::thread::Scope<'scope, '_>, pool: &'scope Pool) -> Behind {
        let none = Behind { sender: None, batch: Vec::new() };
        if !pool.writes_behind() {
            return none;
        }
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Vec<u32>>(16);
        let spawned = std::thread::Builder::new().name("tern-load-writer".into()).spawn_scoped(scope, move || {
            for mut batch in receiver {
                // An error stops the writer (the pages stay dirty); the checkpoint reports it.
                if pool.write_behind(&mut batch).is_err() {
                    return;
                }
            }
        });
        match spawned {
            Ok(_) => Behind { sender: Some(sender), batch: Vec::with_capacity(WRITE_BEHIND) },
            Err(_) => none,
        }
    }

    /// Hands finished page `pid` on.
    fn push(&mut self, pid: u32) {
        if self.sender.is_none() {
            return;
        }
        self.batch.push(pid);
        if self.batch.len() >= WRITE_BEHIND {
            self.send();
        }
    }

    fn send(&mut self) {
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(WRITE_BEHIND));
        if let Some(sender) = &self.sender {
            if sender.send(batch).is_err() {
                self.sender = None; // the writer stopped
            }
        }
    }

    /// Sends the last batch and lets the writer finish (the scope joins it).
    fn finish(mut self) {
        if !self.batch.is_empty() {
            self.send();
        }
    }
}

impl BTree {
    /// Builds a tree from `(key, value)` pairs in strictly increasing key order. Fails with
    /// `Error::InvalidArgument` on unsorted or duplicate keys, and with the usual key and value
    /// errors.
    pub fn bulk_load<K, V>(config: TreeConfig, entries: impl IntoIterator<Item = (K, V)>) -> Result<BTree>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        // Checked first: the error then speaks of the tree's configuration, not the pool's.
        config.validate()?;
        BTree::bulk_load_in(config, crate::buffer::Pool::memory(config.page_size, config.huge_pages)?, entries)
    }

    /// [`BTree::bulk_load`] into a tree whose pages live in `pool`. Pages are written as they
    /// fill, so a pool that evicts streams the load through its cache; a pool with a file also
    /// has them written back from a second thread while the load goes on. A load that fails
    /// frees every page it allocated.
    pub fn bulk_load_in<K, V>(
        config: TreeConfig,
        pool: std::sync::Arc<Pool>,
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Result<BTree>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let tree = BTree::with_pool(config, pool)?;
        // The whole load is one operation of the pool's write gate (`buffer/gate.rs`): a
        // checkpoint of the pool waits for it, so `entries` must not wait for a write to the
        // same pool. Recovery loads before checkpoints run.
        let gate = tree.pool.enter_write();
        let mut unlinked = Unlinked::default();
        let built = std::thread::scope(|scope| {
            let mut behind = Behind::start(scope, &tree.pool);
            let built = tree.build(entries, &mut unlinked, &mut behind);
            behind.finish();
            built
        });
        // Inside the gate: a checkpoint never sees these pages allocated and unreachable. The
        // first, empty root goes either way (after a failure, with the tree).
        let first = match built {
            Ok(root) => tree.replace_root(root),
            Err(_) => {
                tree.free_unlinked(unlinked);
                tree.root_and_pages().0
            }
        };
        tree.free_subtree(first, &crossbeam_epoch::pin());
        drop(gate);
        built.map(|_| tree)
    }

    /// Builds the levels bottom up; returns the root's page id. What is allocated and not yet
    /// under a node of the level being built stays in `unlinked`.
    fn build<K, V>(
        &self,
        entries: impl IntoIterator<Item = (K, V)>,
        unlinked: &mut Unlinked,
        behind: &mut Behind,
    ) -> Result<u32>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.load_leaves(entries, unlinked, behind)?;
        let mut height = 0u8;
        while unlinked.level.len() > 1 {
            height += 1;
            unlinked.below = std::mem::take(&mut unlinked.level);
            self.load_inner_level(unlinked, height, behind)?;
            unlinked.below.clear(); // all under the new level's nodes now
        }
        Ok(unlinked.level.first().expect("a load builds at least one leaf").pid)
    }

    /// Frees what a failed load allocated (the tree is not shared).
    fn free_unlinked(&self, unlinked: Unlinked) {
        let guard = crossbeam_epoch::pin();
        for reference in unlinked.pending.overflow_refs() {
            let (first, len) = overflow::parse_reference(reference);
            overflow::free(self, first, len);
        }
        // The level being built: its nodes alone (a leaf with its values), their children are
        // all in `below`.
        for node in &unlinked.level {
            self.free_node(node.pid, false, &guard);
        }
        for node in &unlinked.below {
            self.free_node(node.pid, true, &guard);
        }
    }

    /// The largest a node gets while bulk loading.
    fn fill_target(&self) -> usize {
        self.pool.page_size() * FILL_PERCENT / 100
    }

    fn load_leaves<K, V>(
        &self,
        entries: impl IntoIterator<Item = (K, V)>,
        unlinked: &mut Unlinked,
        behind: &mut Behind,
    ) -> Result<()>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let Unlinked { level: built, pending, .. } = unlinked;
        let mut lower: Option<Vec<u8>> = None;
        for (key, value) in entries {
            let (key, value) = (key.as_ref(), value.as_ref());
            self.check_key(key)?;
            if value.len() > MAX_VALUE {
                return Err(Error::ValueTooLarge { len: value.len(), max: MAX_VALUE });
            }
            if let Some(last) = pending.len().checked_sub(1) {
                if key <= pending.key(last) {
                    return Err(Error::InvalidArgument(format!(
                        "bulk load input must be strictly increasing: {key:?} after {:?}",
                        pending.key(last)
                    )));
                }
            }
            if key.len() + value.len() > self.max_inline() {
                let first = overflow::write(self, value, |pid| behind.push(pid))?;
                pending.push(key, &overflow::reference(first, value.len()), FLAG_OVERFLOW);
            } else {
                pending.push(key, value, 0);
            }
            let n = pending.len();
            if n > 1 && !self.fits_bulk(true, lower.as_deref(), n, pending.record_bytes) {
                // Close the leaf before the entry just pushed, which starts the next one.
                let separator = shortest_separator(pending.key(n - 2), pending.key(n - 1));
                // On an error every pending entry's chain is freed with the rest.
                built.push(self.emit(true, 0, lower.take(), Some(&separator), &pending.entries(n - 1), 0, behind)?);
                pending.keep_last();
                lower = Some(separator);
            }
        }
        built.push(self.emit(true, 0, lower, None, &pending.entries(pending.len()), 0, behind)?);
        pending.clear();
        Ok(())
    }

    /// One level of inner nodes over the nodes of `unlinked.below` (whose fences chain), into
    /// `unlinked.level`. A node over children `c_a..=c_b` has separators `f_{a+1}..=f_b` (the
    /// children's lower fences) pointing at `c_a..c_b`, upper child `c_b`, and fences
    /// `[f_a, f_{b+1})`.
    fn load_inner_level(&self, unlinked: &mut Unlinked, level: u8, behind: &mut Behind) -> Result<()> {
        let Unlinked { below: children, level: built, .. } = unlinked;
        let mut first = 0; // the current node's first child
        let mut pending: Vec<EntryRef<'_>> = Vec::new();
        let mut record_bytes = 0;
        for i in 1..children.len() {
            let fence = children[i].lower.as_deref().expect("every child but the first has a lower fence");
            pending.push(EntryRef { key: fence, value: &[], flags: 0, child: children[i - 1].pid });
            record_bytes += fence.len();
            let lower = children[first].lower.as_deref();
            if pending.len() > 1 && !self.fits_bulk(false, lower, pending.len(), record_bytes) {
                // Close the node at child i-1 (its upper child); child i starts the next one.
                let overflow = pending.pop().expect("len > 1");
                let upper_child = children[i - 1].pid;
                built.push(self.emit(
                    false,
                    level,
                    lower.map(<[u8]>::to_vec),
                    Some(overflow.key),
                    &pending,
                    upper_child,
                    behind,
                )?);
                pending.clear();
                record_bytes = 0;
                first = i;
            }
        }
        let last = children.last().expect("at least two children").pid;
        built.push(self.emit(false, level, children[first].lower.clone(), None, &pending, last, behind)?);
        Ok(())
    }

    /// Whether `count` entries of `record_bytes` key and value bytes fit a node under the fill
    /// target, reserving room for an upper fence of the largest key size (the real one is not
    /// known yet).
    fn fits_bulk(&self, leaf: bool, lower: Option<&[u8]>, count: usize, record_bytes: usize) -> bool {
        let spec = NodeSpec { leaf, level: 0, lower, upper: None, upper_child: 0 };
        node::required_space_of(&spec, count, record_bytes, self.layout) + self.max_key_len() <= self.fill_target()
    }

    /// Writes one node to a fresh page, and hands the finished page to the writer.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &self,
        leaf: bool,
        level: u8,
        lower: Option<Vec<u8>>,
        upper: Option<&[u8]>,
        entries: &[EntryRef<'_>],
        upper_child: u32,
        behind: &mut Behind,
    ) -> Result<Built> {
        let (pid, page) = self.alloc(if leaf { Kind::Leaf } else { Kind::Inner })?;
        let spec = NodeSpec { leaf, level, lower: lower.as_deref(), upper, upper_child };
        // A page just allocated is zeroed (`Pool::alloc`) and nobody else's yet.
        node::build_zeroed(page.page(), &spec, entries, self.layout, self.hints);
        drop(page);
        behind.push(pid);
        Ok(Built { pid, lower })
    }
}
