//! Range cursors over a [`BTree`], forward and backward.
//!
//! A cursor copies one leaf at a time: under an optimistic read it copies the leaf's keys,
//! values and fences, then validates (restarting the copy on a change). The copy is flat: every
//! key and value back to back in one buffer, plus one span per entry, so a leaf costs two
//! allocations (reused from leaf to leaf), not two per entry. It moves to the next
//! leaf by descending to the leaf's upper fence (the first key of the next leaf's range), and to
//! the previous one by descending towards the keys just below the lower fence. No sibling
//! pointers are needed, and no latch is held between calls. Each leaf's copy is consistent;
//! the scan as a whole is not a snapshot of the tree (transactions provide that).
//!
//! While descending to a leaf, the cursor prefetches the leaf after it (or before it, going
//! backwards), whose id the parent holds: the next step's first cache misses overlap this one.

use super::node::{NodeRef, FLAG_CHAIN, FLAG_OVERFLOW};
use super::stored::{Plain, Resolve};
use super::tree::Abort;
use super::tree::BTree;
use crossbeam_epoch::Guard;
use std::ops::Bound;

/// One leaf, copied (version chains already resolved to the values the reader sees).
#[derive(Default)]
struct Leaf {
    /// Keys and values, back to back.
    bytes: Vec<u8>,
    /// Per entry, in key order: where its key and its value lie in `bytes`.
    entries: Vec<Span>,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
}

/// An entry of a [`Leaf`]: its key is `bytes[key..key_end]`, its value `bytes[value..end]`.
#[derive(Clone, Copy)]
struct Span {
    key: usize,
    key_end: usize,
    value: usize,
    end: usize,
}

impl Leaf {
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn key(&self, i: usize) -> &[u8] {
        let s = self.entries[i];
        &self.bytes[s.key..s.key_end]
    }

    fn value(&self, i: usize) -> &[u8] {
        let s = self.entries[i];
        &self.bytes[s.value..s.end]
    }

    /// The first entry whose key is not `below` the given one.
    fn partition(&self, below: impl Fn(&[u8]) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if below(self.key(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
        self.lower = None;
        self.upper = None;
    }
}

/// Entries a forward move copies at most: a short scan copies a part of a leaf, not all of
/// it (a 16 KiB leaf holds ~120 entries of 100-byte values, and copying them dominated short
/// scans).
const WINDOW: usize = 48;

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
    /// Copies the leaf `target` names into `leaf` (its buffers reused), version chains
    /// resolved by `resolver` (entries it finds nothing visible in are left out).
    /// An error (a page that could not be read) leaves `leaf` empty.
    fn load_leaf(
        &self,
        target: Target<'_>,
        resolver: &impl Resolve,
        leaf: &mut Leaf,
        chains: &mut Vec<usize>,
    ) -> crate::Result<()> {
        let guard = crossbeam_epoch::pin();
        loop {
            match self.try_load_leaf(target, &guard, leaf, chains) {
                Ok(()) => break,
                Err(Abort::Restart) => self.count_restart(),
                Err(Abort::Fail(e)) => {
                    leaf.clear();
                    return Err(e);
                }
            }
        }
        if chains.is_empty() {
            return Ok(());
        }
        // The copy validated, so each chain address was in the leaf while this guard was
        // pinned: the chain is still allocated. Resolved values are appended to the buffer.
        let mut keep = chains.iter().peekable();
        let mut i = 0;
        let Leaf { bytes, entries, .. } = leaf;
        let mut resolved = Vec::new();
        entries.retain_mut(|span| {
            let visible = if keep.next_if(|&&c| c == i).is_some() {
                let chain = u64::from_le_bytes(bytes[span.value..span.value + 8].try_into().expect("8 bytes"));
                resolved.clear();
                let visible = resolver.resolve(chain, &mut resolved);
                span.value = bytes.len();
                bytes.extend_from_slice(&resolved);
                span.end = bytes.len();
                visible
            } else {
                true
            };
            i += 1;
            visible
        });
        Ok(())
    }

    /// Copies the leaf `target` names into `leaf`; `chains` gets the indices of its
    /// version-chain entries (whose values are still chain addresses).
    fn try_load_leaf(
        &self,
        target: Target<'_>,
        guard: &Guard,
        leaf: &mut Leaf,
        chains: &mut Vec<usize>,
    ) -> Result<(), Abort> {
        let (layout, pf) = (self.layout, self.prefetch_depth());
        let mut at = self.root(guard)?;
        loop {
            let n = NodeRef::new(at.page());
            if n.is_leaf() {
                leaf.clear();
                chains.clear();
                // Going forward, only a window from the target on is copied; its first and
                // next keys stand in for the fences (the next move reloads by key, landing
                // on the rest of this leaf). Going backward, the whole leaf.
                let count = n.count();
                let (start, end) = match target {
                    Target::Holding(k) => {
                        let s = n.search(k, false, layout, pf).min(count);
                        (s, count.min(s + WINDOW))
                    }
                    Target::First => (0, count.min(WINDOW)),
                    Target::Before(_) | Target::Last => (0, count),
                };
                // Every entry before `start` is below the target key, so a backward move
                // from the window reloads this leaf's earlier part by the target key.
                leaf.lower = match target {
                    Target::Holding(k) if start > 0 => Some(k.to_vec()),
                    _ => n.lower_fence(),
                };
                leaf.upper = if end < count { Some(n.key(end)) } else { n.upper_fence() };
                // Overflow chains in an evicting pool: pin the leaf (shared) while they are
                // read, or faulting their pages in could evict it and restart the copy forever.
                let mut version = Some(at.version);
                let _pinned = if self.pool.evicts() && (start..end).any(|i| n.value_ref(i).flags & FLAG_OVERFLOW != 0) {
                    Some(version.take().expect("present").into_shared()?)
                } else {
                    None
                };
                for i in start..end {
                    let key = leaf.bytes.len();
                    n.key_into(i, &mut leaf.bytes);
                    let value = leaf.bytes.len();
                    if n.value_ref(i).flags & FLAG_CHAIN != 0 {
                        n.chain_into(i, &mut leaf.bytes);
                        chains.push(i - start);
                    } else {
                        self.read_value(n, i, &mut leaf.bytes, guard)?;
                    }
                    leaf.entries.push(Span { key, key_end: value, value, end: leaf.bytes.len() });
                }
                if let Some(version) = version {
                    version.validate()?;
                }
                return Ok(());
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
                self.pool.prefetch(n.child(neighbour));
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
        Cursor { tree: self, leaf: Leaf::default(), chains: Vec::new(), pos: None, resolver, error: None }
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
    /// Scratch for [`BTree::load_leaf`].
    chains: Vec<usize>,
    /// Index into `leaf.entries`; `None` when not on an entry.
    pos: Option<usize>,
    resolver: R,
    /// The first error a move met (a page that could not be read); moves fail after it.
    error: Option<crate::Error>,
}

impl<'t, R: Resolve> Cursor<'t, R> {
    fn load(&mut self, target: Target<'_>) {
        if self.error.is_some() {
            self.leaf.clear();
            return;
        }
        if let Err(e) = self.tree.load_leaf(target, &self.resolver, &mut self.leaf, &mut self.chains) {
            self.error = Some(e);
        }
    }

    /// The error that stopped this cursor, if one did: a move that met a page it could not
    /// read returns false as at the end of the tree, and every later move does too. Check this
    /// after a scan of a database whose pages can be evicted.
    pub fn error(&self) -> Option<&crate::Error> {
        self.error.as_ref()
    }

    /// Takes the error that stopped this cursor (see [`error`](Self::error)).
    pub fn take_error(&mut self) -> Option<crate::Error> {
        self.error.take()
    }

    /// Moves to the first entry with a key `>= key`; false if there is none.
    pub fn seek(&mut self, key: &[u8]) -> bool {
        self.load(Target::Holding(key));
        let i = self.leaf.partition(|k| k < key);
        self.settle_forward(i)
    }

    /// Moves to the last entry with a key `<= key`; false if there is none.
    pub fn seek_for_prev(&mut self, key: &[u8]) -> bool {
        self.load(Target::Holding(key));
        let i = self.leaf.partition(|k| k <= key);
        self.settle_backward(i)
    }

    /// Moves to the first entry of the tree; false if it is empty.
    pub fn seek_first(&mut self) -> bool {
        self.load(Target::First);
        self.settle_forward(0)
    }

    /// Moves to the last entry of the tree; false if it is empty.
    pub fn seek_last(&mut self) -> bool {
        self.load(Target::Last);
        let n = self.leaf.len();
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
        self.pos.map(|i| self.leaf.key(i))
    }

    /// The current value, if positioned.
    pub fn value(&self) -> Option<&[u8]> {
        self.pos.map(|i| self.leaf.value(i))
    }

    /// Positions at entry `i` of the current leaf, or the first entry of a following leaf.
    fn settle_forward(&mut self, mut i: usize) -> bool {
        while i >= self.leaf.len() {
            let Some(upper) = self.leaf.upper.take() else {
                self.pos = None;
                return false;
            };
            self.load(Target::Holding(&upper));
            i = self.leaf.partition(|k| k < upper.as_slice());
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
            self.load(Target::Before(&lower));
            i = self.leaf.partition(|k| k < lower.as_slice());
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
    /// The error that ended this iteration early, if one did (a page that could not be read):
    /// the iteration then stops as if the range had ended. Check it after iterating.
    pub fn error(&self) -> Option<&crate::Error> {
        self.front.as_ref().and_then(Cursor::error).or_else(|| self.back.as_ref().and_then(Cursor::error))
    }

    /// Takes the error that ended this iteration early (see [`error`](Self::error)).
    pub fn take_error(&mut self) -> Option<crate::Error> {
        self.front.as_mut().and_then(Cursor::take_error).or_else(|| self.back.as_mut().and_then(Cursor::take_error))
    }

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
