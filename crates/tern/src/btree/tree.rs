//! `BTree`: point operations with optimistic lock coupling, splits and merges.
//!
//! Every operation pins the epoch, then descends from the root:
//!
//! * **Readers** read a node's version, search it, look up and read the child's version, then
//!   validate the parent's version; any change restarts from the root. After
//!   `OPTIMISTIC_ATTEMPTS` restarts a reader falls back to shared-mode lock coupling, which
//!   cannot starve.
//! * **Writers** descend the same way. An inner node that could not take one more
//!   maximal separator is split on the way down (parent and node upgraded to exclusive), then the
//!   operation restarts; so a leaf split always finds room in its parent. At the leaf, the writer
//!   upgrades the leaf alone when the change fits, and the parent and the leaf when it splits.
//! * **Deletes** leave an underfull node (a quarter full or less) to a best-effort merge pass
//!   afterwards: parent, then left, then right sibling upgraded; merged if the result fits in one
//!   page; the separator removed from the parent, which may cascade upwards; an inner root left
//!   with a single child is replaced by it.
//!
//! Latch order is parent before child and left before right, so writers cannot deadlock.

use super::node::{self, Entry, NodeRef, NodeSpec, FLAG_CHAIN, FLAG_OVERFLOW};
use super::overflow;
use super::search::Layout;
use super::stored::Stored;
use crate::buffer::{ExclusivePage, Kind, Miss, Page, PageRef, Pool};
use crate::sync::Restart;
use crate::{Error, Result};
use crossbeam_epoch::Guard;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{
    AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::Arc;

/// Optimistic attempts before a reader takes shared latches.
pub(crate) const OPTIMISTIC_ATTEMPTS: u32 = 8;
/// The largest value the tree stores.
pub const MAX_VALUE: usize = 1 << 30;

/// How a tree is built and searched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeConfig {
    /// Page size in bytes: a power of two from 4 KiB to 64 KiB.
    pub page_size: usize,
    /// The node search layout; fixed for the tree's life (it shapes the pages). A database
    /// records it when it is created, and later opens use the recorded one.
    pub layout: Layout,
    /// Software-prefetch depth, 0 to 2; can be changed at any time.
    pub prefetch: u8,
    /// Whether nodes keep a hint array (16 samples of the slot array's heads, `node.rs`) that
    /// narrows a search to a few slots before the binary search; slot-array layouts only
    /// (sorted, branch-free). Fixed for the tree's life; recorded by a database as the layout is.
    pub hints: bool,
    /// Whether node memory is advised for transparent huge pages (`MADV_HUGEPAGE`, Linux; a
    /// hint the kernel may ignore). Fixed for the tree's life.
    pub huge_pages: bool,
}

impl TreeConfig {
    /// The default: 16 KiB pages, branch-free search of the slot array narrowed by hints,
    /// prefetch depth 1: the fastest point lookups of every combination measured by
    /// `tern bench tree` at 1M and 10M keys (see docs/btree.md for the figures and why the
    /// search-array layouts lose inside nodes).
    pub const DEFAULT: TreeConfig =
        TreeConfig { page_size: 16 * 1024, layout: Layout::BranchFree, prefetch: 1, hints: true, huge_pages: true };

    pub(crate) fn validate(&self) -> Result<()> {
        crate::buffer::check_page_size(self.page_size)?;
        if self.prefetch > 2 {
            return Err(Error::InvalidArgument(format!("prefetch depth must be 0, 1 or 2, got {}", self.prefetch)));
        }
        Ok(())
    }
}

impl Default for TreeConfig {
    fn default() -> Self {
        TreeConfig::DEFAULT
    }
}

/// Counters of one tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TreeStats {
    /// Operation restarts after a failed optimistic validation.
    pub restarts: u64,
    /// Node splits (leaf and inner, root included).
    pub splits: u64,
    /// Node merges.
    pub merges: u64,
    /// Nodes rebuilt in place to reclaim garbage.
    pub compactions: u64,
    /// Pages in use (nodes and overflow pages).
    pub pages: usize,
    /// Overflow pages left allocated because an I/O error stopped freeing their chain.
    pub leaked_pages: u64,
}

#[derive(Default)]
struct Counters {
    restarts: CachePadded<AtomicU64>,
    splits: CachePadded<AtomicU64>,
    merges: CachePadded<AtomicU64>,
    compactions: CachePadded<AtomicU64>,
    leaked: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}

/// Why a tree operation stopped before finishing: retry it, or fail with an error.
#[derive(Debug)]
pub(crate) enum Abort {
    /// An optimistic read was invalidated (or a page had to be faulted in): start over.
    Restart,
    /// A page could not be read or written.
    Fail(Error),
}

impl From<Restart> for Abort {
    #[inline]
    fn from(_: Restart) -> Abort {
        Abort::Restart
    }
}

impl From<Error> for Abort {
    fn from(e: Error) -> Abort {
        Abort::Fail(e)
    }
}

/// A concurrent B+tree of byte-string keys and values.
pub struct BTree {
    pub(crate) pool: Arc<Pool>,
    /// Pages this tree holds (nodes and overflow pages).
    pub(crate) page_count: AtomicUsize,
    root: AtomicU32,
    pub(crate) layout: Layout,
    pub(crate) hints: bool,
    huge_pages: bool,
    prefetch: AtomicU8,
    counters: Counters,
}

/// Whether `put` may replace an existing value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PutMode {
    InsertNew,
    Upsert,
}

/// A node reached by a descent, with its id and optimistic version.
pub(crate) struct Visit<'g> {
    pub pid: u32,
    pub version: PageRef<'g>,
}

impl<'g> Visit<'g> {
    /// The node's page, read optimistically (trust it after `version` validates).
    #[inline]
    pub fn page(&self) -> &'g Page {
        self.version.page()
    }
}

/// The result of descending to a node: it, and its parent with the slot leading to it.
pub(crate) struct Path<'g> {
    pub at: Visit<'g>,
    pub parent: Option<(Visit<'g>, usize)>,
}

/// Where a descent ended: at the node it went for, or at a row-cache entry for its key.
pub(crate) enum Reached<'g> {
    Node(Path<'g>),
    Row,
}

/// A point read's hold on its output and fault flag while it descends (see `try_get`).
struct RowRead<'a> {
    out: &'a mut Vec<u8>,
    faulted: &'a mut bool,
}

/// How much room a node has for one more entry.
pub(crate) enum Room {
    InPlace,
    AfterRebuild,
    Split,
}

impl BTree {
    /// An empty tree.
    pub fn new(config: TreeConfig) -> Result<BTree> {
        config.validate()?;
        BTree::with_pool(config, Pool::memory(config.page_size, config.huge_pages)?)
    }

    /// An empty tree whose pages live in `pool`, which must have the configured page size.
    pub fn with_pool(config: TreeConfig, pool: Arc<Pool>) -> Result<BTree> {
        config.validate()?;
        if pool.page_size() != config.page_size {
            return Err(Error::InvalidArgument(format!(
                "the tree's page size ({}) differs from its buffer pool's ({})",
                config.page_size,
                pool.page_size()
            )));
        }
        pool.set_image_probe(super::stored::holds_chains);
        let tree = BTree {
            pool,
            page_count: AtomicUsize::new(0),
            root: AtomicU32::new(0),
            layout: config.layout,
            hints: config.hints,
            huge_pages: config.huge_pages,
            prefetch: AtomicU8::new(config.prefetch),
            counters: Counters::default(),
        };
        let gate = tree.pool.enter_write();
        let (pid, root) = tree.alloc(Kind::Leaf)?;
        let spec = NodeSpec { leaf: true, level: 0, lower: None, upper: None, upper_child: 0 };
        node::build::<Entry>(root.page(), &spec, &[], tree.layout, tree.hints);
        drop(root);
        tree.root.store(pid, Release);
        drop(gate);
        Ok(tree)
    }

    /// The tree whose root is page `root` of `pool`, holding `pages` pages (a checkpoint's
    /// tree, its pages on disk).
    pub(crate) fn open_in(config: TreeConfig, pool: Arc<Pool>, root: u32, pages: usize) -> Result<BTree> {
        config.validate()?;
        pool.set_image_probe(super::stored::holds_chains);
        Ok(BTree {
            pool,
            page_count: AtomicUsize::new(pages),
            root: AtomicU32::new(root),
            layout: config.layout,
            hints: config.hints,
            huge_pages: config.huge_pages,
            prefetch: AtomicU8::new(config.prefetch),
            counters: Counters::default(),
        })
    }

    /// The root's page id and the pages the tree holds (read at a checkpoint's instant, when
    /// no operation is half done).
    pub(crate) fn root_and_pages(&self) -> (u32, usize) {
        (self.root.load(Acquire), self.page_count.load(Relaxed))
    }

    /// The buffer pool this tree's pages live in.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// A new page of `kind` for this tree, held exclusively.
    pub(crate) fn alloc(&self, kind: Kind) -> Result<(u32, ExclusivePage<'_>)> {
        let page = self.pool.alloc(kind)?;
        self.page_count.fetch_add(1, Relaxed);
        Ok(page)
    }

    /// Counts pages an I/O error kept from being freed.
    pub(crate) fn note_leaked(&self, pages: usize) {
        self.counters.leaked.fetch_add(pages as u64, Relaxed);
    }

    /// Frees a page of this tree (when `page`'s guard is dropped).
    pub(crate) fn free_page(&self, page: &ExclusivePage<'_>) {
        page.free();
        self.page_count.fetch_sub(1, Relaxed);
    }

    /// The configuration the tree was built with (prefetch: the current depth).
    pub fn config(&self) -> TreeConfig {
        TreeConfig {
            page_size: self.pool.page_size(),
            layout: self.layout,
            prefetch: self.prefetch_depth(),
            hints: self.hints,
            huge_pages: self.huge_pages,
        }
    }

    /// Changes the software-prefetch depth (0, 1 or 2) from the next operation on.
    pub fn set_prefetch(&self, depth: u8) -> Result<()> {
        TreeConfig { prefetch: depth, ..self.config() }.validate()?;
        self.prefetch.store(depth, Relaxed);
        Ok(())
    }

    #[inline]
    pub(crate) fn prefetch_depth(&self) -> u8 {
        self.prefetch.load(Relaxed)
    }

    /// The longest key this tree accepts: an eighth of a page.
    pub fn max_key_len(&self) -> usize {
        self.pool.page_size() / 8
    }

    /// Records (key + value) up to this size live in the leaf; larger values go to overflow pages.
    pub(crate) fn max_inline(&self) -> usize {
        self.pool.page_size() / 4
    }

    pub(crate) fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::KeyEmpty);
        }
        if key.len() > self.max_key_len() {
            return Err(Error::KeyTooLarge { len: key.len(), max: self.max_key_len() });
        }
        Ok(())
    }

    /// Counters of this tree.
    pub fn stats(&self) -> TreeStats {
        TreeStats {
            restarts: self.counters.restarts.load(Relaxed),
            splits: self.counters.splits.load(Relaxed),
            merges: self.counters.merges.load(Relaxed),
            compactions: self.counters.compactions.load(Relaxed),
            pages: self.page_count.load(Relaxed),
            leaked_pages: self.counters.leaked.load(Relaxed),
        }
    }

    /// Makes `pid` the root; returns the previous root (bulk loading, before the tree is shared).
    pub(crate) fn replace_root(&self, pid: u32) -> u32 {
        self.root.swap(pid, Release)
    }

    pub(crate) fn count_restart(&self) {
        Counters::bump(&self.counters.restarts);
    }

    // ---- descent ----

    /// The root, optimistically; restarts if the root changed while it was being read.
    pub(crate) fn root<'g>(&'g self, _guard: &'g Guard) -> Result<Visit<'g>, Abort> {
        self.root_page()
    }

    /// [`root`](Self::root) for a reader that keeps its visits beyond one epoch guard (a
    /// cursor: it reads no version chain through them without pinning).
    pub(crate) fn root_page(&self) -> Result<Visit<'_>, Abort> {
        let pid = self.root.load(Acquire);
        let at = self.fix(pid, None)?;
        if self.root.load(Acquire) != pid {
            return Err(Abort::Restart);
        }
        Ok(at)
    }

    /// Reads page `pid` optimistically, then validates `parent` (where `pid` was read). An
    /// evicted page is faulted in (once `parent` confirms the id) and the caller restarts.
    #[inline]
    pub(crate) fn fix<'g>(&'g self, pid: u32, parent: Option<&PageRef<'_>>) -> Result<Visit<'g>, Abort> {
        match self.fix_resident(pid, parent)? {
            Some(visit) => Ok(visit),
            None => {
                self.pool.fault_in(pid)?;
                Err(Abort::Restart)
            }
        }
    }

    /// [`fix`](Self::fix) without the fault: `None` if page `pid` is on disk (`parent` validated,
    /// so the id was real).
    #[inline]
    fn fix_resident<'g>(&'g self, pid: u32, parent: Option<&PageRef<'_>>) -> Result<Option<Visit<'g>>, Abort> {
        self.fix_resident_as(pid, parent, false)
    }

    /// [`fix_resident`](Self::fix_resident); with `keep_mark`, a page the clock marked stays
    /// marked ([`Pool::optimistic_as`]).
    #[inline]
    fn fix_resident_as<'g>(
        &'g self,
        pid: u32,
        parent: Option<&PageRef<'_>>,
        keep_mark: bool,
    ) -> Result<Option<Visit<'g>>, Abort> {
        let visit = match self.pool.optimistic_as(pid, keep_mark) {
            Ok(version) => {
                if self.prefetch_depth() > 0 {
                    NodeRef::new(version.page()).prefetch_header();
                }
                Some(Visit { pid, version })
            }
            Err(Miss::Evicted) => None,
            Err(Miss::Restart) => return Err(Abort::Restart),
        };
        if let Some(parent) = parent {
            parent.validate()?;
        }
        Ok(visit)
    }

    /// Steps from `parent` to its child in slot `slot`: reads the child's version, then
    /// validates the parent (so the child id was current).
    #[inline]
    pub(crate) fn child<'g>(&'g self, parent: &Visit<'g>, slot: usize, _guard: &'g Guard) -> Result<Visit<'g>, Abort> {
        let pid = NodeRef::new(parent.page()).child(slot);
        self.fix(pid, Some(&parent.version))
    }

    /// Descends towards `key` to the node at `level` (0: the leaf). `before`: towards the
    /// largest keys below `key` instead (used for backward scans).
    pub(crate) fn descend<'g>(
        &'g self,
        key: &[u8],
        level: u8,
        before: bool,
        guard: &'g Guard,
    ) -> Result<Path<'g>, Abort> {
        match self.descend_or_row(key, level, before, guard, None)? {
            Reached::Node(path) => Ok(path),
            // Only a descent given a `RowRead` ends at a row.
            Reached::Row => Err(Abort::Restart),
        }
    }

    /// [`descend`](Self::descend); with `row`, a point read's descent that finds the leaf
    /// evicted asks the pool's row cache for `key` first (its value appended to `row.out`:
    /// [`Reached::Row`]), and otherwise faults the leaf in, sets `row.faulted` and restarts.
    fn descend_or_row<'g>(
        &'g self,
        key: &[u8],
        level: u8,
        before: bool,
        guard: &'g Guard,
        mut row: Option<RowRead<'_>>,
    ) -> Result<Reached<'g>, Abort> {
        let (layout, pf) = (self.layout, self.prefetch_depth());
        let mut at = self.root(guard)?;
        let mut parent = None;
        loop {
            let n = NodeRef::new(at.page());
            if n.level() <= level || n.is_leaf() {
                if n.level() != level {
                    at.version.validate()?;
                    return Err(Abort::Restart); // the tree shrank below `level` meanwhile
                }
                return Ok(Reached::Node(Path { at, parent }));
            }
            let slot = n.search(key, !before, layout, pf);
            let leaf_below = n.level() == 1;
            let pid = n.child(slot);
            // A point read leaves a leaf's clock mark to `try_get` (it may promote the key).
            let keep_mark = leaf_below && row.is_some();
            let Some(child) = self.fix_resident_as(pid, Some(&at.version), keep_mark)? else {
                // The child is on disk: a point read asks the row cache for a leaf's key first.
                if let Some(row) = row.as_mut().filter(|_| leaf_below) {
                    if let Some(image) = self.pool.evicted_image(pid) {
                        let hit = self.pool.row(pid, image, key, row.out);
                        // The id was the child's while its image in the file had that generation.
                        at.version.validate()?;
                        if hit {
                            return Ok(Reached::Row);
                        }
                    }
                    *row.faulted = true;
                }
                self.pool.fault_in(pid)?;
                return Err(Abort::Restart);
            };
            parent = Some((at, slot));
            at = child;
        }
    }

    // ---- reads ----

    /// The value stored under `key`, if any.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Copies the value stored under `key` into `out` (cleared first); false if absent.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let guard = crossbeam_epoch::pin();
        Ok(self.get_stored(key, out, &guard)?.is_some())
    }

    /// Copies what slot `key` stores into `out` (cleared first): a plain value, or a version
    /// chain's address; `None` if absent. Optimistic, then shared latches if writers keep
    /// invalidating the reads.
    pub(crate) fn get_stored(&self, key: &[u8], out: &mut Vec<u8>, guard: &Guard) -> Result<Option<Stored>> {
        self.check_key(key)?;
        let mut faulted = false;
        for attempt in 0.. {
            out.clear();
            let found = if attempt < OPTIMISTIC_ATTEMPTS {
                self.try_get(key, out, guard, &mut faulted)
            } else {
                self.get_shared(key, out)
            };
            match found {
                Ok(found) => return Ok(found),
                Err(Abort::Restart) => self.count_restart(),
                Err(Abort::Fail(e)) => return Err(e),
            }
        }
        unreachable!("the loop returns")
    }

    /// One optimistic point read. With a row cache, a leaf on disk is first asked of it, and a
    /// read that had to fault its leaf in (`faulted`, kept across restarts) leaves the key's
    /// plain value there once it is validated.
    fn try_get(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
        guard: &Guard,
        faulted: &mut bool,
    ) -> Result<Option<Stored>, Abort> {
        let row = self.pool.has_rows().then_some(RowRead { out: &mut *out, faulted: &mut *faulted });
        let path = match self.descend_or_row(key, 0, false, guard, row)? {
            Reached::Node(path) => path,
            Reached::Row => return Ok(Some(Stored::Plain)),
        };
        let leaf = NodeRef::new(path.at.page());
        let (slot, found) = leaf.find(key, self.layout, self.prefetch_depth());
        if found && self.pool.evicts() && leaf.value_ref(slot).flags & FLAG_OVERFLOW != 0 {
            // A chain may span more pages than the pool holds: the leaf stays resident (and
            // the chain allocated) under a shared latch while it is read, page by page.
            let _pinned = path.at.version.into_shared()?;
            return Ok(Some(self.read_stored(leaf, slot, out)?));
        }
        let stored = if found { Some(self.read_stored(leaf, slot, out)?) } else { None };
        // A leaf the clock marked: the key may go to the row cache instead of the leaf
        // getting its second chance (a leaf kept for one hot key costs a page per key).
        let marked = path.at.version.marked();
        // The image's generation, trusted once the read is validated (only an exclusive
        // holder changes it).
        let image = if *faulted || marked { self.pool.image(path.at.pid) } else { 0 };
        path.at.version.validate()?;
        let plain = matches!(stored, Some(Stored::Plain));
        if *faulted && plain {
            self.pool.keep_row(path.at.pid, path.at.version.seen(), image, key, out);
        }
        if marked {
            let promoted =
                plain && !*faulted && self.pool.promote_row(path.at.pid, path.at.version.seen(), image, key, out);
            if !promoted {
                path.at.version.unmark();
            }
        }
        Ok(stored)
    }

    /// Shared-mode lock coupling: slower, but it cannot be starved by writers.
    fn get_shared(&self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Stored>, Abort> {
        let pid = self.root.load(Acquire);
        let mut held = self.pool.shared(pid)?.ok_or(Abort::Restart)?;
        if self.root.load(Acquire) != pid {
            return Err(Abort::Restart);
        }
        loop {
            let n = NodeRef::new(held.page());
            if n.is_leaf() {
                let (slot, found) = n.find(key, self.layout, 0);
                return if found { Ok(Some(self.read_stored(n, slot, out)?)) } else { Ok(None) };
            }
            let child = n.child(n.search(key, true, self.layout, 0));
            // The child is taken before the parent is let go (assigning drops the old guard).
            held = self.pool.shared(child)?.ok_or(Abort::Restart)?;
        }
    }

    /// Appends what slot `slot` stores to `out`: its value, or its chain address.
    fn read_stored(&self, leaf: NodeRef<'_>, slot: usize, out: &mut Vec<u8>) -> Result<Stored, Abort> {
        if leaf.value_ref(slot).flags & FLAG_CHAIN != 0 {
            leaf.chain_into(slot, out);
            Ok(Stored::Chain)
        } else {
            self.read_value(leaf, slot, out)?;
            Ok(Stored::Plain)
        }
    }

    /// Appends slot `slot`'s value to `out`, following an overflow chain if it has one.
    pub(crate) fn read_value(&self, leaf: NodeRef<'_>, slot: usize, out: &mut Vec<u8>) -> Result<(), Abort> {
        if leaf.value_ref(slot).flags & FLAG_OVERFLOW != 0 {
            let (first, len) = leaf.overflow_ref(slot);
            overflow::read(&self.pool, first, len.min(MAX_VALUE), out)
        } else {
            leaf.value_into(slot, out);
            Ok(())
        }
    }

    // ---- writes ----

    /// Inserts `key` → `value` if `key` is absent; returns false (and changes nothing) if present.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.put(key, value, PutMode::InsertNew)
    }

    /// Inserts `key` → `value`, replacing any value stored under `key`; returns true if one was.
    pub fn upsert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.put(key, value, PutMode::Upsert)
    }

    fn put(&self, key: &[u8], value: &[u8], mode: PutMode) -> Result<bool> {
        self.check_key(key)?;
        let _gate = self.pool.enter_write();
        if value.len() > MAX_VALUE {
            return Err(Error::ValueTooLarge { len: value.len(), max: MAX_VALUE });
        }
        let guard = crossbeam_epoch::pin();
        // A large value goes to overflow pages first; the leaf stores a reference.
        let (stored, flags) = if key.len() + value.len() > self.max_inline() {
            let first = overflow::write(self, value, |_| {})?;
            (std::borrow::Cow::Owned(overflow::reference(first, value.len())), FLAG_OVERFLOW)
        } else {
            (std::borrow::Cow::Borrowed(value), 0)
        };
        loop {
            match self.try_put(key, &stored, flags, mode, &guard) {
                Ok(existed) => {
                    if existed && mode == PutMode::InsertNew && flags & FLAG_OVERFLOW != 0 {
                        // Not inserted: the chain written above is unused.
                        overflow::free(self, overflow::parse_reference(&stored).0, value.len());
                    }
                    return Ok(if mode == PutMode::InsertNew { !existed } else { existed });
                }
                Err(Abort::Restart) => self.count_restart(),
                Err(Abort::Fail(e)) => {
                    if flags & FLAG_OVERFLOW != 0 {
                        overflow::free(self, overflow::parse_reference(&stored).0, value.len());
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Descends to the leaf for `key` on behalf of a writer, splitting full inner nodes on the
    /// way (so a leaf split always fits in its parent); returns the leaf and its parent.
    pub(crate) fn descend_to_write<'g>(
        &'g self,
        key: &[u8],
        guard: &'g Guard,
    ) -> Result<(Visit<'g>, Option<Visit<'g>>), Abort> {
        let (layout, pf) = (self.layout, self.prefetch_depth());
        let mut at = self.root(guard)?;
        let mut parent: Option<Visit<'_>> = None;
        loop {
            let n = NodeRef::new(at.page());
            if n.is_leaf() {
                return Ok((at, parent));
            }
            match self.room(n, self.max_key_len(), 0) {
                Room::InPlace => {}
                room => {
                    self.make_room(parent, at, room, guard)?;
                    return Err(Abort::Restart);
                }
            }
            let slot = n.search(key, true, layout, pf);
            let child = self.child(&at, slot, guard)?;
            parent = Some(at);
            at = child;
        }
    }

    /// One attempt at a put; `Ok(true)` if the key existed (and, for `Upsert`, was replaced).
    fn try_put(&self, key: &[u8], value: &[u8], flags: u16, mode: PutMode, guard: &Guard) -> Result<bool, Abort> {
        let (layout, pf) = (self.layout, self.prefetch_depth());
        let (at, parent) = self.descend_to_write(key, guard)?;
        {
            let n = NodeRef::new(at.page());
            let (slot, existed) = n.find(key, layout, pf);
            if existed && mode == PutMode::InsertNew {
                at.version.validate()?;
                return Ok(true);
            }
            match self.room(n, key.len(), value.len()) {
                Room::InPlace | Room::AfterRebuild => {
                    let _x = at.version.into_exclusive()?;
                    self.replace_slot(n, slot, existed, key, value, flags, guard);
                }
                Room::Split => {
                    self.make_room(parent, at, Room::Split, guard)?;
                    return Err(Abort::Restart);
                }
            }
            Ok(existed)
        }
    }

    /// Frees slot `slot`'s overflow chain, if it has one (the slot is about to go).
    pub(crate) fn free_value(&self, leaf: NodeRef<'_>, slot: usize, _guard: &Guard) {
        if leaf.value_ref(slot).flags & FLAG_OVERFLOW != 0 {
            let (first, len) = leaf.overflow_ref(slot);
            overflow::free(self, first, len);
        }
    }

    /// Whether `n` can take an entry with a key of `key_len` and a payload of `value_len` bytes.
    pub(crate) fn room(&self, n: NodeRef<'_>, key_len: usize, value_len: usize) -> Room {
        if n.fits_in_place(key_len, value_len, self.layout) {
            Room::InPlace
        } else if n.fits_after_rebuild(key_len, value_len, self.layout) {
            Room::AfterRebuild
        } else {
            Room::Split
        }
    }

    /// Rewrites `n` from `entries` with its own fences (the caller holds it exclusively).
    pub(crate) fn rebuild<E: node::EntryView>(&self, n: NodeRef<'_>, entries: &[E]) {
        let (lower, upper) = (n.lower_fence(), n.upper_fence());
        let spec = NodeSpec {
            leaf: n.is_leaf(),
            level: n.level(),
            lower: lower.as_deref(),
            upper: upper.as_deref(),
            upper_child: n.upper_child(),
        };
        node::build(n.page, &spec, entries, self.layout, self.hints);
        Counters::bump(&self.counters.compactions);
    }

    /// Compacts or splits `at` (with `parent`, the node above it, if any). Upgrades the
    /// parent, then the node; any change since they were read is a `Restart`.
    pub(crate) fn make_room(
        &self,
        parent: Option<Visit<'_>>,
        at: Visit<'_>,
        room: Room,
        _guard: &Guard,
    ) -> Result<(), Abort> {
        let n = NodeRef::new(at.page());
        if let Room::AfterRebuild = room {
            let _x = at.version.into_exclusive()?;
            let mut buf = Vec::with_capacity(self.pool.page_size());
            self.rebuild(n, &node::read_refs(n, &mut buf));
            return Ok(());
        }
        match parent {
            None => {
                let _x = at.version.into_exclusive()?;
                self.split(None, at.pid, n)?;
            }
            Some(p) => {
                let pn = NodeRef::new(p.page());
                let _px = p.version.into_exclusive()?;
                let _x = at.version.into_exclusive()?;
                self.split(Some(pn), at.pid, n)?;
            }
        }
        Ok(())
    }

    /// Splits node `pid` in two, adding the separator to `parent`, or to a new root if it has
    /// none. The caller holds both exclusively. The new pages are allocated before anything
    /// changes, so an error leaves the tree as it was.
    fn split(&self, parent: Option<NodeRef<'_>>, pid: u32, n: NodeRef<'_>) -> Result<()> {
        let leaf = n.is_leaf();
        let (right_pid, right) = self.alloc(if leaf { Kind::Leaf } else { Kind::Inner })?;
        let new_root = match parent {
            Some(_) => None,
            None => match self.alloc(Kind::Inner) {
                Ok(root) => Some(root),
                Err(e) => {
                    self.free_page(&right);
                    return Err(e);
                }
            },
        };
        let mut buf = super::cursor::spare::take();
        let entries = node::read_refs(n, &mut buf);
        let (lower, upper) = (n.lower_fence(), n.upper_fence());
        let mid = split_point(&entries);
        let (separator, left_upper_child, right_entries) = if leaf {
            (shortest_separator(entries[mid - 1].key, entries[mid].key), 0, &entries[mid..])
        } else {
            (entries[mid].key.to_vec(), entries[mid].child, &entries[mid + 1..])
        };
        let right_spec = NodeSpec {
            leaf,
            level: n.level(),
            lower: Some(&separator),
            upper: upper.as_deref(),
            upper_child: n.upper_child(),
        };
        // Fresh pages (`Pool::alloc` zeroes them) that nobody reaches yet: built in place.
        node::build_zeroed(right.page(), &right_spec, right_entries, self.layout, self.hints);
        let left_spec = NodeSpec {
            leaf,
            level: n.level(),
            lower: lower.as_deref(),
            upper: Some(&separator),
            upper_child: left_upper_child,
        };
        node::build(n.page, &left_spec, &entries[..mid], self.layout, self.hints);
        match (parent, new_root) {
            (Some(p), _) => {
                let slot = p.search(&separator, true, self.layout, 0);
                debug_assert_eq!(p.child(slot), pid, "the parent's slot for the split node");
                p.set_child(slot, right_pid);
                debug_assert!(p.fits_in_place(separator.len(), 0, self.layout), "eager splits leave room");
                p.insert_at(slot, &separator, &[], pid, self.layout);
            }
            (None, Some((root_pid, root))) => {
                let spec =
                    NodeSpec { leaf: false, level: n.level() + 1, lower: None, upper: None, upper_child: right_pid };
                let entry = Entry { key: separator, value: Vec::new(), flags: 0, child: pid };
                node::build_zeroed(root.page(), &spec, &[entry], self.layout, self.hints);
                drop(root);
                self.root.store(root_pid, Release);
            }
            (None, None) => unreachable!("a root split allocates the new root"),
        }
        drop(entries);
        super::cursor::spare::give(buf);
        Counters::bump(&self.counters.splits);
        Ok(())
    }

    /// Removes `key`; returns true if it was present.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.check_key(key)?;
        let _gate = self.pool.enter_write();
        let guard = crossbeam_epoch::pin();
        let (found, underfull) = loop {
            match self.try_delete(key, &guard) {
                Ok(done) => break done,
                Err(Abort::Restart) => self.count_restart(),
                Err(Abort::Fail(e)) => return Err(e),
            }
        };
        if underfull {
            self.merge_upwards(key, &guard);
        }
        Ok(found)
    }

    fn try_delete(&self, key: &[u8], guard: &Guard) -> Result<(bool, bool), Abort> {
        let path = self.descend(key, 0, false, guard)?;
        let leaf = NodeRef::new(path.at.page());
        let (slot, found) = leaf.find(key, self.layout, self.prefetch_depth());
        if !found {
            path.at.version.validate()?;
            return Ok((false, false));
        }
        let _x = path.at.version.into_exclusive()?;
        self.free_value(leaf, slot, guard);
        leaf.remove_at(slot, self.layout);
        Ok((true, self.underfull(leaf)))
    }

    pub(crate) fn underfull(&self, n: NodeRef<'_>) -> bool {
        n.used_space(self.layout) <= self.pool.page_size() / 4
    }

    /// Merges the underfull node holding `key` at each level with a sibling, from the leaves
    /// up, while merges succeed (best effort: gives up on repeated interference).
    pub(crate) fn merge_upwards(&self, key: &[u8], guard: &Guard) {
        let mut level = 0;
        let mut attempts = 0;
        while attempts < OPTIMISTIC_ATTEMPTS {
            match self.try_merge(key, level, guard) {
                Ok(Some(next)) => {
                    level = next;
                    attempts = 0;
                }
                Ok(None) | Err(Abort::Fail(_)) => return,
                Err(Abort::Restart) => attempts += 1,
            }
        }
    }

    /// Merges the node at `level` holding `key` with a sibling if it is underfull and the two
    /// fit in one page; returns the parent's level if the parent may now be underfull.
    fn try_merge(&self, key: &[u8], level: u8, guard: &Guard) -> Result<Option<u8>, Abort> {
        let path = self.descend(key, level, false, guard)?;
        let Some((parent, slot)) = path.parent else {
            return Ok(None); // the root
        };
        let (n, p) = (NodeRef::new(path.at.page()), NodeRef::new(parent.page()));
        if !self.underfull(n) {
            return Ok(None);
        }
        // Merge with the right sibling, or the left one if this is the last child.
        let (left_slot, sibling_slot) = if slot < p.count() {
            (slot, slot + 1)
        } else if slot > 0 {
            (slot - 1, slot - 1)
        } else {
            return Ok(None);
        };
        let sibling = self.child(&parent, sibling_slot, guard)?;
        let (left, right) = if sibling_slot > slot { (path.at, sibling) } else { (sibling, path.at) };
        let (ln, rn) = (NodeRef::new(left.page()), NodeRef::new(right.page()));
        if ln.used_space(self.layout) + rn.used_space(self.layout) > self.pool.page_size() * 3 / 4 {
            parent.version.validate()?;
            return Ok(None);
        }
        let _px = parent.version.into_exclusive()?;
        let _lx = left.version.into_exclusive()?;
        let _rx = right.version.into_exclusive()?;
        let mut entries = Entry::read_all(ln);
        if !ln.is_leaf() {
            entries.push(Entry { key: p.key(left_slot), value: Vec::new(), flags: 0, child: ln.upper_child() });
        }
        entries.extend(Entry::read_all(rn));
        let (lower, upper) = (ln.lower_fence(), rn.upper_fence());
        let spec = NodeSpec {
            leaf: ln.is_leaf(),
            level: ln.level(),
            lower: lower.as_deref(),
            upper: upper.as_deref(),
            upper_child: rn.upper_child(),
        };
        if node::required_space(&spec, &entries, self.layout) > self.pool.page_size() {
            return Ok(None);
        }
        node::build(ln.page, &spec, &entries, self.layout, self.hints);
        p.remove_at(left_slot, self.layout);
        p.set_child(left_slot, left.pid);
        self.free_page(&_rx);
        Counters::bump(&self.counters.merges);
        if p.count() == 0 && self.root.load(Acquire) == parent.pid {
            // An inner root with a single child: the child becomes the root.
            self.root.store(left.pid, Release);
            self.free_page(&_px);
            return Ok(None);
        }
        Ok(self.underfull(p).then_some(level + 1))
    }

    /// Checks the tree's invariants (call while no other thread writes): keys strictly
    /// increasing within every node and within its fences, children's fences matching their
    /// separators, levels decreasing by one, leaves all at level 0, hint arrays kept as the
    /// configuration says and matching their slots. Returns the shape.
    pub fn check(&self) -> std::result::Result<TreeShape, String> {
        let root = self.root.load(Acquire);
        let mut shape = TreeShape::default();
        let level = {
            let node = self.check_fix(root)?;
            NodeRef::new(node.page()).level()
        };
        shape.height = usize::from(level) + 1;
        self.check_node(root, None, None, level, &mut shape)?;
        Ok(shape)
    }

    /// Page `pid` in shared mode, for `check`.
    fn check_fix(&self, pid: u32) -> std::result::Result<crate::buffer::SharedPage<'_>, String> {
        match self.pool.shared(pid) {
            Ok(Some(page)) => Ok(page),
            Ok(None) => Err(format!("page {pid} is missing")),
            Err(e) => Err(format!("page {pid}: {e}")),
        }
    }

    fn check_node(
        &self,
        pid: u32,
        lower: Option<&[u8]>,
        upper: Option<&[u8]>,
        level: u8,
        shape: &mut TreeShape,
    ) -> std::result::Result<(), String> {
        let node = self.check_fix(pid)?;
        let n = NodeRef::new(node.page());
        let here = format!("page {pid} (level {})", n.level());
        if n.level() != level || n.is_leaf() != (level == 0) {
            return Err(format!("{here}: expected level {level}"));
        }
        if n.lower_fence().as_deref() != lower || n.upper_fence().as_deref() != upper {
            return Err(format!(
                "{here}: fences {:?}..{:?} differ from the parent's",
                n.lower_fence(),
                n.upper_fence()
            ));
        }
        let keys: Vec<Vec<u8>> = (0..n.count()).map(|i| n.key(i)).collect();
        if keys.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!("{here}: keys out of order"));
        }
        let in_range = |k: &Vec<u8>| lower.is_none_or(|l| k.as_slice() >= l) && upper.is_none_or(|u| k.as_slice() < u);
        if let Some(k) = keys.iter().find(|k| !in_range(k)) {
            return Err(format!("{here}: key {k:?} outside its fences"));
        }
        if n.has_hints() != node::keeps_hints(self.layout, self.hints) {
            return Err(format!("{here}: hints kept: {}, tree config: {}", n.has_hints(), self.hints));
        }
        if let Some(j) = n.stale_hint() {
            return Err(format!("{here}: hint {j} does not match its slot"));
        }
        if let Some(i) = n.stale_head() {
            return Err(format!("{here}: slot {i}'s head does not match its key past the shared bytes"));
        }
        for (i, k) in keys.iter().enumerate() {
            if n.search(k, false, self.layout, 0) != i {
                return Err(format!("{here}: searching key {i} does not find it"));
            }
        }
        shape.shared_nodes += usize::from(n.shared_len() > 0);
        if n.is_leaf() {
            shape.leaves += 1;
            shape.keys += keys.len();
            return Ok(());
        }
        shape.inner += 1;
        let mut low = lower.map(<[u8]>::to_vec);
        for (i, k) in keys.iter().enumerate() {
            self.check_node(n.child(i), low.as_deref(), Some(k), level - 1, shape)?;
            low = Some(k.clone());
        }
        self.check_node(n.upper_child(), low.as_deref(), upper, level - 1, shape)
    }
}

impl BTree {
    /// Frees every page of the tree, leaving it unusable: for dropping a tree whose pool lives
    /// on (a tree dropped without it keeps its pages allocated until the pool goes, as a
    /// database's tables do at close).
    pub fn free_all(self) {
        let _gate = self.pool.enter_write();
        self.free_subtree(self.root.load(Acquire), &crossbeam_epoch::pin());
    }

    /// Frees page `pid` and everything below it (the tree is no longer shared).
    pub(crate) fn free_subtree(&self, pid: u32, guard: &Guard) {
        self.free_node(pid, true, guard);
    }

    /// Frees page `pid` (the tree is no longer shared): a leaf with its values' overflow
    /// chains, an inner node with its children too if `below`.
    pub(crate) fn free_node(&self, pid: u32, below: bool, guard: &Guard) {
        let page = match self.pool.exclusive(pid) {
            Ok(Some(page)) => page,
            Ok(None) => return,
            Err(_) => return self.note_leaked(1),
        };
        let n = NodeRef::new(page.page());
        if n.is_leaf() {
            for slot in 0..n.count() {
                self.free_value(n, slot, guard);
            }
        } else if below {
            for slot in 0..n.count() {
                self.free_subtree(n.child(slot), guard);
            }
            self.free_subtree(n.upper_child(), guard);
        }
        self.free_page(&page);
    }
}

/// The shape of a tree, from [`BTree::check`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeShape {
    /// Levels, leaves included.
    pub height: usize,
    /// Leaf nodes.
    pub leaves: usize,
    /// Inner nodes (the root included when the tree has more than one level).
    pub inner: usize,
    /// Keys in the leaves.
    pub keys: usize,
    /// Nodes that keep their key heads past bytes all their keys share (nodes short of a
    /// fence whose keys share 4 bytes or more).
    pub shared_nodes: usize,
}

/// Where to split `entries`: the first index of the right half, balancing bytes (1..len).
fn split_point<E: node::EntryView>(entries: &[E]) -> usize {
    let size = |e: &E| node::SLOT + e.key().len() + e.value().len();
    let total: usize = entries.iter().map(size).sum();
    let mut acc = 0;
    for (i, e) in entries.iter().enumerate() {
        acc += size(e);
        if acc * 2 >= total {
            return (i + 1).clamp(1, entries.len() - 1);
        }
    }
    entries.len() / 2
}

/// The shortest key `s` with `left < s <= right` (for `left < right`): `right` cut just past
/// the first byte where they differ (suffix truncation of separators).
pub(crate) fn shortest_separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    let common = node::common_len(left, right);
    right[..(common + 1).min(right.len())].to_vec()
}
