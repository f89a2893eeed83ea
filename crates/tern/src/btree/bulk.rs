//! Building a tree from sorted input, bottom-up.
//!
//! Leaves are packed left to right up to a fill target (leaving room for later inserts), each
//! closed with a suffix-truncated separator that becomes its upper fence and the next leaf's
//! lower fence. Each inner level is packed the same way from the level below: a node's
//! separators are its children's lower fences, its upper child is its last child. No latches
//! are taken: the tree is not shared until `bulk_load` returns it. The epoch is pinned per node
//! written, never across the whole load: a long pin would stall page reclamation in every tree
//! of the process.

use super::node::{self, Entry, NodeSpec, FLAG_OVERFLOW};
use super::overflow;
use super::tree::{shortest_separator, BTree, TreeConfig, MAX_VALUE};
use crate::buffer::Kind;
use crate::{Error, Result};

/// Fraction of a page bulk loading fills, in percent.
const FILL_PERCENT: usize = 90;

/// A node of the level being built: its page and its lower fence.
struct Built {
    pid: u32,
    lower: Option<Vec<u8>>,
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
        BTree::bulk_load_in(config, crate::buffer::Pool::memory(config.page_size, config.huge_pages), entries)
    }

    /// [`BTree::bulk_load`] into a tree whose pages live in `pool`. Pages are written as they
    /// fill, so a pool that evicts streams the load through its cache.
    pub fn bulk_load_in<K, V>(
        config: TreeConfig,
        pool: std::sync::Arc<crate::buffer::Pool>,
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
        let mut level = tree.load_leaves(entries)?;
        let mut height = 0u8;
        while level.len() > 1 {
            height += 1;
            level = tree.load_inner_level(&level, height)?;
        }
        if let Some(root) = level.first() {
            let old = tree.replace_root(root.pid);
            if let Some(page) = tree.pool.exclusive(old)? {
                tree.free_page(&page);
            }
        }
        drop(gate);
        Ok(tree)
    }

    /// The largest a node gets while bulk loading.
    fn fill_target(&self) -> usize {
        self.pool.page_size() * FILL_PERCENT / 100
    }

    fn load_leaves<K, V>(&self, entries: impl IntoIterator<Item = (K, V)>) -> Result<Vec<Built>>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let mut built = Vec::new();
        let mut pending: Vec<Entry> = Vec::new();
        let mut lower: Option<Vec<u8>> = None;
        for (key, value) in entries {
            let (key, value) = (key.as_ref(), value.as_ref());
            self.check_key(key)?;
            if value.len() > MAX_VALUE {
                return Err(Error::ValueTooLarge { len: value.len(), max: MAX_VALUE });
            }
            if let Some(last) = pending.last() {
                if key <= last.key.as_slice() {
                    return Err(Error::InvalidArgument(format!(
                        "bulk load input must be strictly increasing: {key:?} after {:?}",
                        last.key
                    )));
                }
            }
            let entry = self.leaf_entry(key, value)?;
            pending.push(entry);
            if !self.fits_bulk(true, lower.as_deref(), &pending) && pending.len() > 1 {
                let next = pending.pop().expect("just pushed");
                let separator = shortest_separator(&pending.last().expect("len > 1").key, &next.key);
                built.push(self.emit(true, 0, lower.take(), Some(&separator), &pending, 0)?);
                pending = vec![next];
                lower = Some(separator);
            }
        }
        built.push(self.emit(true, 0, lower, None, &pending, 0)?);
        Ok(built)
    }

    /// One level of inner nodes over `children` (whose fences chain). A node over children
    /// `c_a..=c_b` has separators `f_{a+1}..=f_b` (the children's lower fences) pointing at
    /// `c_a..c_b`, upper child `c_b`, and fences `[f_a, f_{b+1})`.
    fn load_inner_level(&self, children: &[Built], level: u8) -> Result<Vec<Built>> {
        let mut built = Vec::new();
        let mut first = 0; // the current node's first child
        let mut pending: Vec<Entry> = Vec::new();
        for i in 1..children.len() {
            let fence = children[i].lower.clone().expect("every child but the first has a lower fence");
            pending.push(Entry { key: fence, value: Vec::new(), flags: 0, child: children[i - 1].pid });
            if pending.len() > 1 && !self.fits_bulk(false, children[first].lower.as_deref(), &pending) {
                // Close the node at child i-1 (its upper child); child i starts the next one.
                let overflow = pending.pop().expect("len > 1");
                let lower = children[first].lower.clone();
                built.push(self.emit(false, level, lower, Some(&overflow.key), &pending, children[i - 1].pid)?);
                pending.clear();
                first = i;
            }
        }
        let last = children.last().expect("at least two children").pid;
        built.push(self.emit(false, level, children[first].lower.clone(), None, &pending, last)?);
        Ok(built)
    }

    /// Whether `entries` fit a node under the fill target, reserving room for an upper fence
    /// of the largest key size (the real one is not known yet).
    fn fits_bulk(&self, leaf: bool, lower: Option<&[u8]>, entries: &[Entry]) -> bool {
        let spec = NodeSpec { leaf, level: 0, lower, upper: None, upper_child: 0 };
        node::required_space(&spec, entries, self.layout) + self.max_key_len() <= self.fill_target()
    }

    /// Writes one node to a fresh page.
    fn emit(
        &self,
        leaf: bool,
        level: u8,
        lower: Option<Vec<u8>>,
        upper: Option<&[u8]>,
        entries: &[Entry],
        upper_child: u32,
    ) -> Result<Built> {
        let (pid, page) = self.alloc(if leaf { Kind::Leaf } else { Kind::Inner })?;
        let spec = NodeSpec { leaf, level, lower: lower.as_deref(), upper, upper_child };
        node::build(page.page(), &spec, entries, self.layout, self.hints);
        Ok(Built { pid, lower })
    }

    /// A leaf entry for `key` → `value`, writing large values to overflow pages.
    fn leaf_entry(&self, key: &[u8], value: &[u8]) -> Result<Entry> {
        Ok(if key.len() + value.len() > self.pool.page_size() / 4 {
            let first = overflow::write(self, value)?;
            let mut r = first.to_le_bytes().to_vec();
            r.extend_from_slice(&(value.len() as u32).to_le_bytes());
            Entry { key: key.to_vec(), value: r, flags: FLAG_OVERFLOW, child: 0 }
        } else {
            Entry { key: key.to_vec(), value: value.to_vec(), flags: 0, child: 0 }
        })
    }
}
