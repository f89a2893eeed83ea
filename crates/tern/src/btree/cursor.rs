//! Cursors over a [`BTree`], forward and backward.
//!
//! A cursor stands on one entry and holds a copy of its key and value, in two buffers reused
//! from move to move (no allocation per entry). Beside the copy it keeps an optimistic
//! reference to the leaf the entry came from, the entry's slot, and the leaf's parent with the
//! leaf's slot in it. A move reads the next (or previous) slot of that leaf and validates the
//! leaf's version, so a leaf is walked without descending again and only the entries the cursor
//! stops on are copied. At the end of a leaf the cursor steps to the neighbouring leaf through
//! the parent (an unchanged parent still names the same children); at the end of the parent it
//! descends from the root to the leaf's fence (module invariant 2: a leaf's upper fence is its
//! right neighbour's lower fence; no sibling pointers are needed).
//!
//! # Invariants
//! 1. **Nothing unvalidated is returned.** An entry becomes the cursor's only after the leaf it
//!    was read from validates (an epoch pin is taken before the leaf validates, and a version
//!    chain's id is resolved under it, so the chain is still allocated when it is resolved).
//! 2. **No entry is skipped or repeated.** When a validation fails (a writer changed the leaf or
//!    the parent, or either was evicted), the move starts over from the root relative to the key
//!    the cursor stands on: the first key above it (forward) or below it (backward); or, once
//!    the move has crossed to a neighbouring leaf, relative to the fence it crossed (keys at or
//!    above an upper fence, below a lower one), so a retry never goes back through the leaf it
//!    left (in a pool of a few frames, the two leaves would otherwise evict each other forever).
//! 3. **No latch is held between calls.** Each entry is consistent; the scan as a whole is not
//!    a snapshot of the tree (transactions provide that through their [`Resolve`]r).
//!
//! When the cursor enters a leaf through its parent it prefetches the leaf after it (for an
//! evicted leaf: the pool's read-ahead), and within a leaf the record a few slots ahead, so the
//! next moves' cache misses overlap this one.
//!
//! A dropped cursor hands its buffers (entry copies, anchor, fence; a range's bounds) to the
//! next cursor its thread makes ([`spare`]): a short scan would otherwise pay an allocation,
//! its growth and a free per buffer, a fifth of a 10-row scan's instructions. Each thread keeps
//! at most [`SPARE_BUFFERS`] of them, none larger than [`SPARE_MAX_BYTES`]. A write borrows one
//! to show its closure the slot's old value (`BTree::update_chain`).

use super::node::{NodeRef, FLAG_CHAIN, FLAG_OVERFLOW};
use super::stored::{Plain, Resolve};
use super::tree::{Abort, BTree, Visit};
use std::ops::Bound;

/// Slots ahead of the current one whose record a move prefetches.
const PREFETCH_AHEAD: usize = 4;

/// Buffers a thread keeps from its dropped cursors for its next ones.
const SPARE_BUFFERS: usize = 8;

/// The largest buffer kept (a cursor that copied a large value gives its memory back).
const SPARE_MAX_BYTES: usize = 64 << 10;

/// Buffers of dropped cursors, reused by the cursors their thread makes next.
pub(super) mod spare {
    use super::{SPARE_BUFFERS, SPARE_MAX_BYTES};
    use std::cell::RefCell;

    std::thread_local! {
        static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }

    /// An empty buffer: a spare one if the thread has one, else a new (unallocated) one.
    pub(in crate::btree) fn take() -> Vec<u8> {
        SPARE.try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop())).ok().flatten().unwrap_or_default()
    }

    /// Keeps `buf` for the thread's next cursor (or frees it: too large, or enough kept).
    pub(in crate::btree) fn give(mut buf: Vec<u8>) {
        if buf.capacity() == 0 || buf.capacity() > SPARE_MAX_BYTES {
            return;
        }
        buf.clear();
        let _ = SPARE.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < SPARE_BUFFERS {
                    s.push(buf);
                }
            }
        });
    }

    /// Buffers kept by this thread (for tests).
    #[cfg(all(test, not(loom)))]
    pub(super) fn kept() -> usize {
        SPARE.with(|s| s.borrow().len())
    }
}

/// Which leaf to descend to.
#[derive(Clone, Copy)]
enum Target<'k> {
    /// The leaf whose range holds this key.
    Holding(&'k [u8]),
    /// The leaf holding the largest keys below this one.
    Before(&'k [u8]),
    First,
    Last,
}

/// Where a positioning move lands, relative to the cursor's anchor key.
#[derive(Clone, Copy)]
enum Anchor {
    /// The first entry with a key `>=` the anchor.
    AtOrAfter,
    /// The first entry with a key `>` the anchor.
    After,
    /// The last entry with a key `<=` the anchor.
    AtOrBefore,
    /// The last entry with a key `<` the anchor.
    Before,
    First,
    Last,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Forward,
    Backward,
}

/// A leaf as a cursor found it, with its parent and the leaf's slot there (`None`: the leaf is
/// the root).
struct Spot<'t> {
    leaf: Visit<'t>,
    parent: Option<(Visit<'t>, usize)>,
}

/// Where a cursor stands: the leaf and the current entry's slot in it.
struct At<'t> {
    spot: Spot<'t>,
    slot: usize,
}

impl BTree {
    /// Descends to the leaf `target` names, keeping its parent.
    fn descend_leaf(&self, target: Target<'_>) -> Result<Spot<'_>, Abort> {
        let (layout, pf) = (self.layout, self.prefetch_depth());
        let mut at = self.root_page()?;
        let mut parent = None;
        loop {
            let n = NodeRef::new(at.page());
            if n.is_leaf() {
                return Ok(Spot { leaf: at, parent });
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
            // The leaf after the one this descent reaches: the scan's next step.
            if pf > 0 && n.level() == 1 && neighbour <= n.count() {
                self.pool.prefetch(n.child(neighbour));
            }
            let child = self.fix(n.child(slot), Some(&at.version))?;
            parent = Some((at, slot));
            at = child;
        }
    }

    /// A cursor, not yet positioned.
    pub fn cursor(&self) -> Cursor<'_> {
        self.cursor_with(Plain)
    }

    /// A cursor whose version chains `resolver` turns into values.
    pub(crate) fn cursor_with<R: Resolve>(&self, resolver: R) -> Cursor<'_, R> {
        Cursor {
            tree: self,
            resolver,
            at: None,
            positioned: false,
            copies: [Copied::spare(), Copied::spare()],
            current: 0,
            anchor: spare::take(),
            resume: Anchor::First,
            crossed: false,
            fence: spare::take(),
            error: None,
        }
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
        Range { tree: self, bounds: Bounds::of(range), front: None, back: None, done: false, resolver }
    }
}

/// A position in a tree, moved with [`seek`](Cursor::seek), [`next_entry`](Cursor::next_entry)
/// and [`prev_entry`](Cursor::prev_entry). The key and value it stands on are borrowed from it
/// until it moves.
pub struct Cursor<'t, R: Resolve = Plain> {
    tree: &'t BTree,
    resolver: R,
    /// The leaf the current entry was read from; `None` after a move that had to start over or
    /// ended (the next move descends from the root).
    at: Option<At<'t>>,
    /// Whether `copies[current]` holds an entry.
    positioned: bool,
    /// The current entry (`copies[current]`) and a move's candidate (the other one), which
    /// becomes the current entry by flipping `current` once the move has read it.
    copies: [Copied; 2],
    /// 0 or 1. Indexes mask it with 1 (`copies[self.current & 1]`, the candidate at
    /// `(self.current ^ 1) & 1`), which the compiler sees is in bounds: no check per row.
    current: usize,
    /// The key a positioning move is relative to (kept until the move succeeds: a retry
    /// starts from it again).
    anchor: Vec<u8>,
    /// Where a positioning move (and each of its retries) lands relative to `anchor`. A move
    /// that crosses to a neighbouring leaf makes that leaf's fence the anchor, so a retry goes
    /// straight to the neighbour instead of back through the leaf it left (in a pool too small
    /// for both, the two would evict each other forever).
    resume: Anchor,
    /// Whether the current move crossed to a neighbouring leaf (so `anchor` is its fence).
    crossed: bool,
    /// A leaf's fence as read, before it validated.
    fence: Vec<u8>,
    /// The first error a move met (a page that could not be read); moves fail after it.
    error: Option<crate::Error>,
}

impl<'t, R: Resolve> Cursor<'t, R> {
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
        self.set_anchor(key, Anchor::AtOrAfter);
        self.position()
    }

    /// Moves to the first entry with a key `> key`; false if there is none.
    pub fn seek_after(&mut self, key: &[u8]) -> bool {
        self.set_anchor(key, Anchor::After);
        self.position()
    }

    /// Moves to the last entry with a key `<= key`; false if there is none.
    pub fn seek_for_prev(&mut self, key: &[u8]) -> bool {
        self.set_anchor(key, Anchor::AtOrBefore);
        self.position()
    }

    /// Moves to the last entry with a key `< key`; false if there is none.
    pub fn seek_before(&mut self, key: &[u8]) -> bool {
        self.set_anchor(key, Anchor::Before);
        self.position()
    }

    /// Moves to the first entry of the tree; false if it is empty.
    pub fn seek_first(&mut self) -> bool {
        self.resume = Anchor::First;
        self.position()
    }

    /// Moves to the last entry of the tree; false if it is empty.
    pub fn seek_last(&mut self) -> bool {
        self.resume = Anchor::Last;
        self.position()
    }

    /// Moves to the first entry `bounds`' start admits (its end is not looked at); false if
    /// there is none.
    pub(crate) fn seek_start(&mut self, bounds: &Bounds) -> bool {
        match &bounds.start {
            Bound::Included(s) => self.seek(s),
            Bound::Excluded(s) => self.seek_after(s),
            Bound::Unbounded => self.seek_first(),
        }
    }

    /// Moves to the last entry `bounds`' end admits (its start is not looked at); false if
    /// there is none.
    pub(crate) fn seek_end(&mut self, bounds: &Bounds) -> bool {
        match &bounds.end {
            Bound::Included(e) => self.seek_for_prev(e),
            Bound::Excluded(e) => self.seek_before(e),
            Bound::Unbounded => self.seek_last(),
        }
    }

    /// Moves to the next entry; false (and unpositioned) past the last.
    pub fn next_entry(&mut self) -> bool {
        self.step(Dir::Forward)
    }

    /// Moves to the previous entry; false (and unpositioned) before the first.
    pub fn prev_entry(&mut self) -> bool {
        self.step(Dir::Backward)
    }

    /// The current key, if positioned.
    pub fn key(&self) -> Option<&[u8]> {
        self.entry().map(|(k, _)| k)
    }

    /// The current value, if positioned.
    pub fn value(&self) -> Option<&[u8]> {
        self.entry().map(|(_, v)| v)
    }

    /// The current key and value, if positioned.
    #[inline]
    pub fn entry(&self) -> Option<(&[u8], &[u8])> {
        self.positioned.then(|| self.copies[self.current & 1].split())
    }

    fn set_anchor(&mut self, key: &[u8], resume: Anchor) {
        self.anchor.clear();
        self.anchor.extend_from_slice(key);
        self.resume = resume;
    }

    /// Descends from the root to where `resume` says (relative to `anchor`) and stands on the
    /// first entry the resolver sees from there.
    fn position(&mut self) -> bool {
        self.at = None;
        if self.error.is_some() {
            return self.settle(None);
        }
        loop {
            match self.try_position() {
                Ok(found) => return self.settle(found),
                Err(Abort::Restart) => self.tree.count_restart(),
                Err(Abort::Fail(e)) => {
                    self.error = Some(e);
                    return self.settle(None);
                }
            }
        }
    }

    fn try_position(&mut self) -> Result<Option<At<'t>>, Abort> {
        let (tree, anchor) = (self.tree, self.resume);
        let target = match anchor {
            Anchor::First => Target::First,
            Anchor::Last => Target::Last,
            Anchor::Before => Target::Before(&self.anchor),
            _ => Target::Holding(&self.anchor),
        };
        let spot = tree.descend_leaf(target)?;
        let n = NodeRef::new(spot.leaf.page());
        let (from, dir) = match anchor {
            Anchor::First => (0, Dir::Forward),
            Anchor::Last => (n.count(), Dir::Backward),
            _ => {
                let (pos, found) = n.find(&self.anchor, tree.layout, tree.prefetch_depth());
                let past = pos + usize::from(found);
                match anchor {
                    Anchor::AtOrAfter => (pos, Dir::Forward),
                    Anchor::After => (past, Dir::Forward),
                    Anchor::AtOrBefore => (past, Dir::Backward),
                    _ => (pos, Dir::Backward),
                }
            }
        };
        self.walk(spot, from, dir)
    }

    /// Moves one entry in `dir`: within the current leaf if it is unchanged, else from the
    /// root relative to the current key (invariant 2).
    fn step(&mut self, dir: Dir) -> bool {
        if !self.positioned {
            return false;
        }
        // The common case in place: the neighbouring slot of an unchanged leaf.
        if let Some(at) = &mut self.at {
            let n = NodeRef::new(at.spot.leaf.page());
            let count = n.count();
            let i = if dir == Dir::Forward { at.slot + 1 } else { at.slot.wrapping_sub(1) };
            if i < count {
                prefetch_ahead(n, i, count, dir);
                let cand = &mut self.copies[(self.current ^ 1) & 1];
                match read_entry(self.tree, &self.resolver, cand, &at.spot.leaf, n, i) {
                    Ok(true) => {
                        at.slot = i;
                        self.current ^= 1;
                        return true;
                    }
                    // Nothing visible there: the general walk below goes on past it.
                    Ok(false) => at.slot = i,
                    Err(Abort::Restart) => {
                        self.tree.count_restart();
                        self.at = None;
                    }
                    Err(Abort::Fail(e)) => {
                        self.error = Some(e);
                        return self.settle(None);
                    }
                }
            }
        }
        if let Some(At { spot, slot }) = self.at.take() {
            let from = if dir == Dir::Forward { slot + 1 } else { slot };
            self.crossed = false;
            match self.walk(spot, from, dir) {
                Ok(found) => return self.settle(found),
                Err(Abort::Restart) => self.tree.count_restart(),
                Err(Abort::Fail(e)) => {
                    self.error = Some(e);
                    return self.settle(None);
                }
            }
            if self.crossed {
                // Past the current leaf already: go on from its fence.
                return self.position();
            }
        }
        // The current key becomes the anchor.
        self.anchor.clear();
        self.anchor.extend_from_slice(self.copies[self.current & 1].key());
        self.resume = if dir == Dir::Forward { Anchor::After } else { Anchor::Before };
        self.position()
    }

    /// Makes `found` (read into the candidate buffers) the current entry, or unpositions.
    fn settle(&mut self, found: Option<At<'t>>) -> bool {
        self.positioned = found.is_some();
        if self.positioned {
            self.current ^= 1;
        }
        self.at = found;
        self.positioned
    }

    /// Reads the first entry the resolver sees at or after boundary `from` of `spot`'s leaf
    /// going `dir` (forward: slots `from`, `from + 1`, ...; backward: `from - 1`, `from - 2`,
    /// ...), through following leaves as needed, into the candidate buffers. `None` at the end
    /// of the tree.
    fn walk(&mut self, mut spot: Spot<'t>, mut from: usize, dir: Dir) -> Result<Option<At<'t>>, Abort> {
        loop {
            let n = NodeRef::new(spot.leaf.page());
            let count = n.count();
            let slot = match dir {
                Dir::Forward => (from < count).then_some(from),
                Dir::Backward => from.min(count).checked_sub(1),
            };
            let Some(i) = slot else {
                // The leaf holds nothing more this way (its count is real once it validates).
                spot.leaf.version.validate()?;
                match self.neighbour(spot, dir)? {
                    Some((next, at)) => (spot, from) = (next, at),
                    None => return Ok(None),
                }
                continue;
            };
            prefetch_ahead(n, i, count, dir);
            let cand = &mut self.copies[(self.current ^ 1) & 1];
            if read_entry(self.tree, &self.resolver, cand, &spot.leaf, n, i)? {
                return Ok(Some(At { spot, slot: i }));
            }
            from = if dir == Dir::Forward { i + 1 } else { i };
        }
    }

    /// The leaf after (or before) `spot`'s and the boundary to read it from: through the
    /// parent while it is unchanged and has a child that way, else by descending from the root
    /// to the leaf's fence. `None` past the end of the tree.
    fn neighbour(&mut self, spot: Spot<'t>, dir: Dir) -> Result<Option<(Spot<'t>, usize)>, Abort> {
        let tree = self.tree;
        // The fence first: it becomes the anchor a retry starts from (see `resume`).
        let n = NodeRef::new(spot.leaf.page());
        self.fence.clear();
        let bounded = match dir {
            Dir::Forward => n.upper_fence_into(&mut self.fence),
            Dir::Backward => n.lower_fence_into(&mut self.fence),
        };
        spot.leaf.version.validate()?;
        if !bounded {
            return Ok(None);
        }
        // Forward: keys at or above the upper fence are all above the leaf's; backward: keys
        // below the lower fence are all below them.
        std::mem::swap(&mut self.anchor, &mut self.fence);
        self.resume = if dir == Dir::Forward { Anchor::AtOrAfter } else { Anchor::Before };
        self.crossed = true;
        if let Some((parent, s)) = spot.parent {
            let p = NodeRef::new(parent.page());
            let children = p.count() + 1;
            let slot = match dir {
                Dir::Forward => Some(s + 1).filter(|&c| c < children),
                Dir::Backward => s.checked_sub(1),
            };
            if let Some(slot) = slot {
                // `fix` validates the parent after reading the child's version: `slot` is
                // current, and the child is the leaf's neighbour.
                let leaf = tree.fix(p.child(slot), Some(&parent.version))?;
                let beyond = match dir {
                    Dir::Forward => Some(slot + 1).filter(|&c| c < children),
                    Dir::Backward => slot.checked_sub(1),
                };
                if let Some(b) = beyond.filter(|_| tree.prefetch_depth() > 0) {
                    tree.pool.prefetch(p.child(b));
                }
                let from = if dir == Dir::Forward { 0 } else { NodeRef::new(leaf.page()).count() };
                return Ok(Some((Spot { leaf, parent: Some((parent, slot)) }, from)));
            }
        }
        let next = match dir {
            Dir::Forward => tree.descend_leaf(Target::Holding(&self.anchor))?,
            Dir::Backward => tree.descend_leaf(Target::Before(&self.anchor))?,
        };
        let (from, _) = NodeRef::new(next.leaf.page()).find(&self.anchor, tree.layout, tree.prefetch_depth());
        Ok(Some((next, from)))
    }
}

/// Prefetches the record [`PREFETCH_AHEAD`] slots past slot `i` of a leaf of `count` slots,
/// going `dir`, if there is one.
#[inline]
fn prefetch_ahead(n: NodeRef<'_>, i: usize, count: usize, dir: Dir) {
    let ahead = match dir {
        Dir::Forward => i + PREFETCH_AHEAD,
        Dir::Backward => i.wrapping_sub(PREFETCH_AHEAD),
    };
    if ahead < count {
        n.prefetch_record(ahead);
    }
}

impl<R: Resolve> Drop for Cursor<'_, R> {
    fn drop(&mut self) {
        let [a, b] = &mut self.copies;
        for buf in [&mut a.bytes, &mut b.bytes, &mut self.anchor, &mut self.fence] {
            spare::give(std::mem::take(buf));
        }
    }
}

/// An entry as a cursor copied it: its key, then its value, in one buffer reused from move to
/// move.
struct Copied {
    bytes: Vec<u8>,
    key_len: usize,
    /// The leaf visit (page id, state word seen) whose node prefix `bytes` starts with, set
    /// once a read from that visit validated, and the prefix's length: the next entry read
    /// from the same visit keeps the prefix instead of copying it again (a visit's bytes
    /// cannot change without its validation failing).
    prefix_of: Option<(u32, u64)>,
    prefix_len: usize,
}

impl Copied {
    /// Empty, in a spare buffer if the thread has one.
    fn spare() -> Copied {
        Copied { bytes: spare::take(), key_len: 0, prefix_of: None, prefix_len: 0 }
    }

    fn key(&self) -> &[u8] {
        self.split().0
    }

    /// The key and the value.
    #[inline]
    fn split(&self) -> (&[u8], &[u8]) {
        self.bytes.split_at(self.key_len.min(self.bytes.len()))
    }
}

/// Copies entry `i` of `leaf` (`n`) into `to`, validated; false if `resolver` sees no value in
/// it (a version chain with nothing visible). The key's stored part and an inline value lie
/// back to back in the page and are copied in one go. Inlined: it runs once per row of a scan.
#[inline(always)]
fn read_entry<'t>(
    tree: &'t BTree,
    resolver: &impl Resolve,
    to: &mut Copied,
    leaf: &Visit<'t>,
    n: NodeRef<'t>,
    i: usize,
) -> Result<bool, Abort> {
    let visit = Some((leaf.pid, leaf.version.seen()));
    let bytes = &mut to.bytes;
    if to.prefix_of == visit {
        bytes.truncate(to.prefix_len);
    } else {
        to.prefix_of = None;
        bytes.clear();
        n.prefix_into(bytes);
        to.prefix_len = bytes.len();
    }
    let prefix = bytes.len();
    let (suffix, flags) = n.record_into(i, bytes);
    to.key_len = (prefix + suffix).min(bytes.len());
    if flags & FLAG_CHAIN != 0 {
        // A chain's id is resolved pinned, the pin taken before the leaf validates: the id was
        // then in the tree while pinned, so its chain cannot be freed before the pin ends
        // (invariant 1).
        let _guard = crossbeam_epoch::pin();
        leaf.version.validate()?;
        to.prefix_of = visit;
        let mut id = [0u8; 8];
        let stored = &bytes[to.key_len..];
        id[..stored.len().min(8)].copy_from_slice(&stored[..stored.len().min(8)]);
        bytes.truncate(to.key_len);
        return Ok(resolver.resolve(u64::from_le_bytes(id), bytes));
    }
    if flags & FLAG_OVERFLOW != 0 {
        bytes.truncate(to.key_len);
        if tree.pool.evicts() {
            // Reading the overflow pages faults them in, which could evict the leaf and fail
            // every retry: hold the leaf shared meanwhile (its version is unchanged by that).
            let Some(_shared) = tree.pool.shared(leaf.pid)? else {
                return Err(Abort::Restart);
            };
            leaf.version.validate()?;
            to.prefix_of = visit;
            tree.read_value(n, i, bytes)?;
            return Ok(true);
        }
        tree.read_value(n, i, bytes)?;
    }
    leaf.version.validate()?;
    to.prefix_of = visit;
    Ok(true)
}

/// A key range's bounds, owned.
pub(crate) struct Bounds {
    pub start: Bound<Vec<u8>>,
    pub end: Bound<Vec<u8>>,
}

impl Drop for Bounds {
    fn drop(&mut self) {
        for bound in [&mut self.start, &mut self.end] {
            if let Bound::Included(k) | Bound::Excluded(k) = bound {
                spare::give(std::mem::take(k));
            }
        }
    }
}

impl Bounds {
    pub fn of<'k>(range: impl std::ops::RangeBounds<&'k [u8]>) -> Bounds {
        let copy = |k: &&[u8]| {
            let mut buf = spare::take();
            buf.extend_from_slice(k);
            buf
        };
        Bounds { start: range.start_bound().map(copy), end: range.end_bound().map(copy) }
    }

    /// Whether `key` is not below the start.
    pub fn admits_start(&self, key: &[u8]) -> bool {
        match &self.start {
            Bound::Included(s) => key >= s.as_slice(),
            Bound::Excluded(s) => key > s.as_slice(),
            Bound::Unbounded => true,
        }
    }

    /// Whether `key` is not above the end.
    pub fn admits_end(&self, key: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => key <= e.as_slice(),
            Bound::Excluded(e) => key < e.as_slice(),
            Bound::Unbounded => true,
        }
    }
}

/// The entries of a key range, from either end ([`BTree::range`]).
pub struct Range<'t, R: Resolve + Clone = Plain> {
    tree: &'t BTree,
    bounds: Bounds,
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

    /// Takes the cursor's entry if it lies in the range and has not been passed by the other
    /// end; otherwise ends the iteration.
    fn take(&mut self, from_front: bool) -> Option<(Vec<u8>, Vec<u8>)> {
        let cursor = if from_front { self.front.as_ref() } else { self.back.as_ref() }?;
        let key = cursor.key()?;
        let other = if from_front { self.back.as_ref() } else { self.front.as_ref() };
        let crossed = other.and_then(|c| c.key()).is_some_and(|o| if from_front { key >= o } else { key <= o });
        if crossed || !self.bounds.admits_start(key) || !self.bounds.admits_end(key) {
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
                c.seek_start(&self.bounds);
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
                c.seek_end(&self.bounds);
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_a_bounded_number_of_small_spare_buffers() {
        // On a thread of its own: nothing else has given it buffers.
        std::thread::spawn(|| {
            assert_eq!(spare::kept(), 0);
            assert!(spare::take().capacity() == 0, "a new thread has no spare buffer");
            spare::give(Vec::new());
            assert_eq!(spare::kept(), 0, "an unallocated buffer is not kept");
            spare::give(Vec::with_capacity(SPARE_MAX_BYTES + 1));
            assert_eq!(spare::kept(), 0, "a large buffer is freed, not kept");
            for _ in 0..SPARE_BUFFERS + 3 {
                spare::give(b"some bytes".to_vec());
            }
            assert_eq!(spare::kept(), SPARE_BUFFERS);
            let buf = spare::take();
            assert!(buf.is_empty() && buf.capacity() >= 10, "a spare buffer comes back empty");
            assert_eq!(spare::kept(), SPARE_BUFFERS - 1);
        })
        .join()
        .unwrap();
    }
}
