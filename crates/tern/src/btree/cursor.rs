//! Range cursors over a [`BTree`], forward and backward.
//!
//! A cursor copies one leaf at a time: under an optimistic read it copies the leaf's keys,
//! values and fences, then validates (restarting the copy on a change). It moves to the next
//! leaf by descending to the leaf's upper fence (the first key of the next leaf's range), and to
//! the previous one by descending towards the keys just below the lower fence. No sibling
//! pointers are needed, and no latch is held between calls. Each leaf's copy is consistent;
//! the scan as a whole is not a snapshot of the tree (transactions provide that).
//!
//! While descending to a leaf, the cursor prefetches the leaf after it (or before it, going
//! backwards), whose id the parent holds: the next step's first cache misses overlap this one.

use super::node::{NodeRef, FLAG_CHAIN};
use super::stored::{Plain, Resolve};
use super::tree::BTree;
use crate::sync::Restart;
use crossbeam_epoch::Guard;
use std::ops::Bound;

/// One leaf, copied (version chains already resolved to the values the reader sees).
#[derive(Default)]
struct Leaf {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
}

/// Which leaf to load.
#[derive(Clone, Copy)]
enum Target<'k> {
    /// The leaf whose range holds this key.
    Holding(&'k [u8]),
    /// The leaf holding the largest keys below this one.
    Before(&'k [u8]),
    First,
    Last,
}

impl BTree {
    fn load_leaf(&self, target: Target<'_>, resolver: &impl Resolve) -> Leaf {
        let guard = crossbeam_epoch::pin();
        loop {
            match self.try_load_leaf(target, &guard) {
                Ok((mut leaf, chains)) => {
                    // The copy validated, so each chain address was in the leaf while this
                    // guard was pinned: the chain is still allocated.
                    if !chains.is_empty() {
                        let mut keep = chains.iter().peekable();
                        let mut i = 0;
                        leaf.entries.retain_mut(|(_, value)| {
                            let visible = if keep.next_if(|&&c| c == i).is_some() {
                                let chain = u64::from_le_bytes(value[..8].try_into().expect("8 bytes")) as usize;
                                value.clear();
                                resolver.resolve(chain, value)
                            } else {
                                true
                            };
                            i += 1;
                            visible
                        });
                    }
                    return leaf;
                }
                Err(Restart) => self.count_restart(),
            }
        }
    }

    /// Copies the leaf `target` names; also returns the indices of its version-chain entries
    /// (whose values are still chain addresses).
    fn try_load_leaf(&self, target: Target<'_>, guard: &Guard) -> Result<(Leaf, Vec<usize>), Restart> {
        let (layout, pf) = (self.layout, self.prefetch_depth());
        let mut at = self.root(guard)?;
        loop {
            let n = NodeRef::new(&at.node.page);
            if n.is_leaf() {
                let mut leaf =
                    Leaf { entries: Vec::with_capacity(n.count()), lower: n.lower_fence(), upper: n.upper_fence() };
                let mut chains = Vec::new();
                for i in 0..n.count() {
                    let mut value = Vec::new();
                    if n.value_ref(i).flags & FLAG_CHAIN != 0 {
                        n.chain_into(i, &mut value);
                        chains.push(i);
                    } else {
                        self.read_value(n, i, &mut value, guard)?;
                    }
                    leaf.entries.push((n.key(i), value));
                }
                at.version.validate()?;
                return Ok((leaf, chains));
            }
            let (slot, neighbour) = match target {
                Target::Holding(k) => {
                    let s = n.search(k, true, layout, pf);
                    (s, s + 1)
                }
                Target::Before(k) => {
                    let s = n.search(k, false, layout, pf);
                    (s, s.wrapping_sub(1))
                }
                Target::First => (0, 1),
                Target::Last => (n.count(), n.count().wrapping_sub(1)),
            };
            if pf > 0 && n.level() == 1 && neighbour <= n.count() {
                if let Some(next) = self.pages.get(n.child(neighbour), guard) {
                    next.page.prefetch(0);
                    next.page.prefetch(64);
                }
            }
            at = self.child(&at, slot, guard)?;
        }
    }

    /// A cursor, not yet positioned.
    pub fn cursor(&self) -> Cursor<'_> {
        self.cursor_with(Plain)
    }

    /// A cursor whose version chains `resolver` turns into values.
    pub(crate) fn cursor_with<R: Resolve>(&self, resolver: R) -> Cursor<'_, R> {
        Cursor { tree: self, leaf: Leaf::default(), pos: None, resolver }
    }

    /// The entries with keys in `range` (e.g. `&b"a"[..]..&b"m"[..]`, or `..`), in order;
    /// `.rev()` for descending order.
    pub fn range<'k>(&self, range: impl std::ops::RangeBounds<&'k [u8]>) -> Range<'_> {
        self.range_with(range, Plain)
    }

    /// [`BTree::range`] over a tree with version chains, which `resolver` turns into values
    /// (entries it finds nothing visible in are skipped).
    pub(crate) fn range_with<'k, R: Resolve + Clone>(
        &self,
        range: impl std::ops::RangeBounds<&'k [u8]>,
        resolver: R,
    ) -> Range<'_, R> {
        Range {
            tree: self,
            start: range.start_bound().map(|k| k.to_vec()),
            end: range.end_bound().map(|k| k.to_vec()),
            front: None,
            back: None,
            done: false,
            resolver,
        }
    }
}

/// A position in a tree, moved with [`seek`](Cursor::seek), [`next_entry`](Cursor::next_entry)
/// and [`prev_entry`](Cursor::prev_entry).
pub struct Cursor<'t, R: Resolve = Plain> {
    tree: &'t BTree,
    leaf: Leaf,
    /// Index into `leaf.entries`; `None` when not on an entry.
    pos: Option<usize>,
    resolver: R,
}

impl<'t, R: Resolve> Cursor<'t, R> {
    /// Moves to the first entry with a key `>= key`; false if there is none.
    pub fn seek(&mut self, key: &[u8]) -> bool {
        self.leaf = self.tree.load_leaf(Target::Holding(key), &self.resolver);
        let i = self.leaf.entries.partition_point(|(k, _)| k.as_slice() < key);
        self.settle_forward(i)
    }

    /// Moves to the last entry with a key `<= key`; false if there is none.
    pub fn seek_for_prev(&mut self, key: &[u8]) -> bool {
        self.leaf = self.tree.load_leaf(Target::Holding(key), &self.resolver);
        let i = self.leaf.entries.partition_point(|(k, _)| k.as_slice() <= key);
        self.settle_backward(i)
    }

    /// Moves to the first entry of the tree; false if it is empty.
    pub fn seek_first(&mut self) -> bool {
        self.leaf = self.tree.load_leaf(Target::First, &self.resolver);
        self.settle_forward(0)
    }

    /// Moves to the last entry of the tree; false if it is empty.
    pub fn seek_last(&mut self) -> bool {
        self.leaf = self.tree.load_leaf(Target::Last, &self.resolver);
        let n = self.leaf.entries.len();
        self.settle_backward(n)
    }

    /// Moves to the next entry; false (and unpositioned) past the last.
    pub fn next_entry(&mut self) -> bool {
        match self.pos {
            Some(i) => self.settle_forward(i + 1),
            None => false,
        }
    }

    /// Moves to the previous entry; false (and unpositioned) before the first.
    pub fn prev_entry(&mut self) -> bool {
        match self.pos {
            Some(i) => self.settle_backward(i),
            None => false,
        }
    }

    /// The current key, if positioned.
    pub fn key(&self) -> Option<&[u8]> {
        self.pos.map(|i| self.leaf.entries[i].0.as_slice())
    }

    /// The current value, if positioned.
    pub fn value(&self) -> Option<&[u8]> {
        self.pos.map(|i| self.leaf.entries[i].1.as_slice())
    }

    /// Positions at entry `i` of the current leaf, or the first entry of a following leaf.
    fn settle_forward(&mut self, mut i: usize) -> bool {
        while i >= self.leaf.entries.len() {
            let Some(upper) = self.leaf.upper.take() else {
                self.pos = None;
                return false;
            };
            self.leaf = self.tree.load_leaf(Target::Holding(&upper), &self.resolver);
            i = self.leaf.entries.partition_point(|(k, _)| k.as_slice() < upper.as_slice());
        }
        self.pos = Some(i);
        true
    }

    /// Positions at the entry before index `i` of the current leaf, or the last entry of a
    /// preceding leaf.
    fn settle_backward(&mut self, mut i: usize) -> bool {
        while i == 0 {
            let Some(lower) = self.leaf.lower.take() else {
                self.pos = None;
                return false;
            };
            self.leaf = self.tree.load_leaf(Target::Before(&lower), &self.resolver);
            i = self.leaf.entries.partition_point(|(k, _)| k.as_slice() < lower.as_slice());
        }
        self.pos = Some(i - 1);
        true
    }
}

/// The entries of a key range, from either end ([`BTree::range`]).
pub struct Range<'t, R: Resolve + Clone = Plain> {
    tree: &'t BTree,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    front: Option<Cursor<'t, R>>,
    back: Option<Cursor<'t, R>>,
    done: bool,
    resolver: R,
}

impl<R: Resolve + Clone> Range<'_, R> {
    fn within_start(&self, key: &[u8]) -> bool {
        match &self.start {
            Bound::Included(s) => key >= s.as_slice(),
            Bound::Excluded(s) => key > s.as_slice(),
            Bound::Unbounded => true,
        }
    }

    fn within_end(&self, key: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => key <= e.as_slice(),
            Bound::Excluded(e) => key < e.as_slice(),
            Bound::Unbounded => true,
        }
    }

    /// Takes the cursor's entry if it lies in the range and has not been passed by the other
    /// end; otherwise ends the iteration.
    fn take(&mut self, from_front: bool) -> Option<(Vec<u8>, Vec<u8>)> {
        let cursor = if from_front { self.front.as_ref() } else { self.back.as_ref() }?;
        let key = cursor.key()?;
        let other = if from_front { self.back.as_ref() } else { self.front.as_ref() };
        let crossed = other.and_then(|c| c.key()).is_some_and(|o| if from_front { key >= o } else { key <= o });
        if crossed || !self.within_start(key) || !self.within_end(key) {
            self.done = true;
            return None;
        }
        Some((key.to_vec(), cursor.value().unwrap_or_default().to_vec()))
    }
}

impl<R: Resolve + Clone> Iterator for Range<'_, R> {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match &mut self.front {
            Some(c) => {
                c.next_entry();
            }
            None => {
                let mut c = self.tree.cursor_with(self.resolver.clone());
                match &self.start {
                    Bound::Included(s) => c.seek(s),
                    Bound::Excluded(s) => c.seek(s) && (c.key() != Some(s.as_slice()) || c.next_entry()),
                    Bound::Unbounded => c.seek_first(),
                };
                self.front = Some(c);
            }
        }
        let item = self.take(true);
        if item.is_none() {
            self.done = true;
        }
        item
    }
}

impl<R: Resolve + Clone> DoubleEndedIterator for Range<'_, R> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match &mut self.back {
            Some(c) => {
                c.prev_entry();
            }
            None => {
                let mut c = self.tree.cursor_with(self.resolver.clone());
                match &self.end {
                    Bound::Included(e) => c.seek_for_prev(e),
                    Bound::Excluded(e) => c.seek_for_prev(e) && (c.key() != Some(e.as_slice()) || c.prev_entry()),
                    Bound::Unbounded => c.seek_last(),
                };
                self.back = Some(c);
            }
        }
        let item = self.take(false);
        if item.is_none() {
            self.done = true;
        }
        item
    }
}
