//! The page table: page id → node, for one tree.
//!
//! Nodes refer to each other by 32-bit page id, not by pointer, so that a later component can
//! write pages to a file and read them back. The table is a segmented array: segment `k` holds
//! `1024 << k` entries and is allocated when first needed, so a tree of a few pages costs a few
//! KiB and a tree of millions grows geometrically, without ever moving an entry (readers hold
//! references into it).
//!
//! Freeing is epoch-based (crossbeam-epoch): every tree operation pins the epoch; `free` unlinks
//! the node at once but recycles its memory and its id only after every thread pinned at that
//! moment has unpinned. A reader that read a page id from a node that has since changed may
//! still look that id up, see the old node (or nothing) and read it safely; its validation of
//! the node it came from then fails and it restarts.
//!
//! Node memory comes from an arena of anonymous mappings growing geometrically from 256 KiB to
//! 64 MiB; from 2 MiB on they are 2 MiB-aligned and, when the tree asks for it, advised for
//! transparent huge pages (`MADV_HUGEPAGE`), so a small tree (a table of a few rows) costs
//! little memory and a large one gets huge pages. A lookup touches
//! three or four nodes scattered over the whole tree; with 4 KiB pages each costs a TLB miss
//! and, in a virtual machine, a two-dimensional page walk, which on a tree of 1M records is as
//! much as the cache misses of the search itself. With 2 MiB pages a tree of a few hundred MiB
//! fits in the TLB. Freed blocks are kept for reuse (zeroed when handed out again), not
//! returned to the system before the table is dropped: the arena holds the tree's high-water
//! mark, like a buffer pool.

use crate::buffer::page::Page;
use crate::sync::{HybridLatch, LatchClass};
use crossbeam_epoch::Guard;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Acquire, Ordering::Release};
use std::sync::{Arc, LazyLock, Mutex as StdMutex};

/// A node: its latch and its page, in one allocation aligned to a cache line. The latch (24
/// bytes) is followed directly by the page, so the latch's version and the first 40 bytes of
/// the page header (kind, level, count, prefix, heap, fences, search array) share one cache
/// line: a descent pays one miss per node before the search starts, not two.
#[repr(C, align(64))]
pub(crate) struct Node {
    pub latch: HybridLatch<()>,
    pub page: Page,
}

impl Node {
    /// The allocation layout of a node with a page of `page_size` bytes, as `repr(C)` lays it
    /// out: the latch, the page's words after it, the whole padded to 64-byte alignment.
    fn layout(page_size: usize) -> std::alloc::Layout {
        let latch = std::alloc::Layout::new::<HybridLatch<()>>();
        let words = std::alloc::Layout::array::<AtomicU64>(page_size / 8).expect("page sizes are small");
        let (layout, _) = latch.extend(words).expect("page sizes are small");
        layout.align_to(64).expect("64 is a valid alignment").pad_to_align()
    }

    /// Makes a node with a zeroed page of `page_size` bytes in `block`.
    ///
    /// # Safety
    /// `block` must be valid for writes of `Node::layout(page_size)` (its size and alignment),
    /// hold zero bytes, and not be in use by anything else.
    unsafe fn init(block: NonNull<u8>, page_size: usize) -> *mut Node {
        // A pointer to `Node` carries the page's word count as its metadata, like a slice.
        let node = std::ptr::slice_from_raw_parts_mut(block.as_ptr().cast::<AtomicU64>(), page_size / 8) as *mut Node;
        // SAFETY: by the caller's contract the block has a `Node`'s size and alignment; zero
        // bytes are valid `AtomicU64`s, so only the latch needs writing.
        unsafe { std::ptr::addr_of_mut!((*node).latch).write(HybridLatch::with_class((), *NODE_CLASS)) };
        node
    }
}

// Blocks are recycled and unmapped without running destructors: a node must have none.
const _: () = assert!(!std::mem::needs_drop::<HybridLatch<()>>());

/// The latch class of every B+tree node.
pub(crate) static NODE_CLASS: LazyLock<LatchClass> =
    LazyLock::new(|| LatchClass::register("btree.node").unwrap_or(LatchClass::DEFAULT));

/// Entries in segment 0; segment `k` has `BASE << k`.
const BASE: usize = 1024;
/// Segments: enough for every 32-bit page id.
const SEGMENTS: usize = 23;

/// Page ids are 32 bits; this one is never handed out (it marks "no page").
pub(crate) const NO_PAGE: u32 = u32::MAX;

/// Table entries hold the node's address alone; the page size (the same for every node of a
/// table) restores the full `*mut Node`.
type Segment = Box<[AtomicPtr<u8>]>;

pub(crate) struct PageTable {
    segments: [AtomicPtr<AtomicPtr<u8>>; SEGMENTS],
    /// Keeps the segments alive (the array above holds raw pointers into these boxes).
    owned: StdMutex<Vec<Segment>>,
    /// Page ids and node memory. Shared with the deferred frees, which may run after the
    /// table is dropped: the arena's mappings go when the last of them has run.
    ids: Arc<StdMutex<Ids>>,
    page_size: usize,
}

struct Ids {
    next: u32,
    free: Vec<u32>,
    live: usize,
    arena: Arena,
}

/// A huge page: the alignment and size granule of the arena's large mappings.
const HUGE_PAGE: usize = 2 << 20;
/// The size granule of the small ones.
const SMALL_PAGE: usize = 4 << 10;
/// The first mapping's size.
const MIN_CHUNK: usize = 256 << 10;
/// The largest mapping the arena makes at once.
const MAX_CHUNK: usize = 64 << 20;

/// Node memory: blocks of one node's size carved from large anonymous mappings.
struct Arena {
    /// Bytes per block (`Node::layout(page_size).size()`, a multiple of 64).
    block: usize,
    /// Advise the mappings for transparent huge pages.
    huge_pages: bool,
    /// The mappings: (start, length).
    chunks: Vec<(NonNull<u8>, usize)>,
    /// The unused tail of the newest mapping: (next block, bytes left).
    tail: Option<(NonNull<u8>, usize)>,
    /// Blocks freed and reclaimed (their bytes are garbage until zeroed).
    free: Vec<NonNull<u8>>,
    /// Bytes mapped so far.
    mapped: usize,
}

// SAFETY: the arena owns its mappings; the raw pointers are addresses of memory only it hands
// out, and it is only ever used under the table's mutex.
unsafe impl Send for Arena {}

impl Arena {
    fn new(page_size: usize, huge_pages: bool) -> Arena {
        Arena {
            block: Node::layout(page_size).size(),
            huge_pages,
            chunks: Vec::new(),
            tail: None,
            free: Vec::new(),
            mapped: 0,
        }
    }

    /// A block for one node, and whether its bytes are already zero (fresh from the system).
    fn take(&mut self) -> (NonNull<u8>, bool) {
        if let Some(block) = self.free.pop() {
            return (block, false);
        }
        match self.tail {
            Some((next, left)) if left >= self.block => {
                // SAFETY: `next` lies in a live mapping with `left >= block` bytes after it.
                let after = unsafe { NonNull::new_unchecked(next.as_ptr().add(self.block)) };
                self.tail = Some((after, left - self.block));
                (next, true)
            }
            _ => {
                // Geometric growth: each mapping as large as all before it, 256 KiB to 64 MiB.
                let len = self.mapped.clamp(MIN_CHUNK, MAX_CHUNK).max(self.block);
                let huge = len >= HUGE_PAGE;
                let len = len.next_multiple_of(if huge { HUGE_PAGE } else { SMALL_PAGE });
                let start = map_chunk(len, huge, huge && self.huge_pages);
                self.chunks.push((start, len));
                self.mapped += len;
                self.tail = Some((start, len));
                self.take()
            }
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for &(start, len) in &self.chunks {
            unmap_chunk(start, len);
        }
    }
}

/// Maps `len` bytes of zeroed memory, aligned to [`HUGE_PAGE`] if `aligned` (`len` then a
/// multiple of it), advised for transparent huge pages if `huge_pages` (a hint: ignored where
/// the kernel has none). Out of memory is fatal, as for any allocation.
fn map_chunk(len: usize, aligned: bool, huge_pages: bool) -> NonNull<u8> {
    let over = if aligned { len + HUGE_PAGE } else { len };
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
    // existing memory.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        std::alloc::handle_alloc_error(std::alloc::Layout::from_size_align(len, HUGE_PAGE).expect("valid layout"));
    }
    let raw = raw.cast::<u8>();
    let head = if aligned { raw.align_offset(HUGE_PAGE) } else { 0 };
    // SAFETY: `head + len <= over` (`head < HUGE_PAGE` when aligned, 0 otherwise), so
    // `raw + head .. raw + head + len` lies within the bytes just mapped; the slack before and
    // after it (page-granular: `raw` and `HUGE_PAGE` are) is unmapped and never used.
    let start = unsafe {
        if head > 0 {
            libc::munmap(raw.cast(), head);
        }
        if over - head - len > 0 {
            libc::munmap(raw.add(head + len).cast(), over - head - len);
        }
        raw.add(head)
    };
    #[cfg(target_os = "linux")]
    if huge_pages {
        // SAFETY: advice on memory this arena just mapped; failure (no THP support) is harmless.
        unsafe { libc::madvise(start.cast(), len, libc::MADV_HUGEPAGE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = huge_pages;
    NonNull::new(start).expect("mmap never returns null on success")
}

/// Unmaps a chunk from [`map_chunk`].
fn unmap_chunk(start: NonNull<u8>, len: usize) {
    // SAFETY: `start..start + len` is a mapping made by `map_chunk` and owned by the arena being
    // dropped; no node in it is reachable any more.
    unsafe { libc::munmap(start.as_ptr().cast(), len) };
}

/// Where page `pid` lives: (segment, index within it).
#[inline]
fn locate(pid: u32) -> (usize, usize) {
    let q = pid as usize + BASE;
    let seg = (usize::BITS - 1 - q.leading_zeros()) as usize - BASE.trailing_zeros() as usize;
    (seg, q - (BASE << seg))
}

impl PageTable {
    /// An empty table of `page_size`-byte pages, node memory advised for transparent huge
    /// pages if `huge_pages`.
    pub(crate) fn new(page_size: usize, huge_pages: bool) -> PageTable {
        let ids = Ids { next: 0, free: Vec::new(), live: 0, arena: Arena::new(page_size, huge_pages) };
        PageTable {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            owned: StdMutex::new(Vec::new()),
            ids: Arc::new(StdMutex::new(ids)),
            page_size,
        }
    }

    pub(crate) fn page_size(&self) -> usize {
        self.page_size
    }

    /// The slot for `pid`, if its segment exists.
    #[inline]
    fn slot(&self, pid: u32) -> Option<&AtomicPtr<u8>> {
        let (seg, idx) = locate(pid);
        let base = self.segments.get(seg)?.load(Acquire);
        if base.is_null() {
            return None;
        }
        debug_assert!(idx < BASE << seg);
        // SAFETY: a non-null segment pointer points to a live boxed slice of `BASE << seg`
        // entries, owned by `self.owned` for the table's lifetime, and `idx` is below that.
        Some(unsafe { &*base.add(idx) })
    }

    /// The node of page `pid`, or `None` if there is none (freed, or a garbage id read by an
    /// optimistic reader). The reference lives as long as the epoch guard.
    #[inline]
    pub(crate) fn get<'g>(&self, pid: u32, _guard: &'g Guard) -> Option<&'g Node> {
        let ptr = self.slot(pid)?.load(Acquire);
        // SAFETY: a non-null entry is the address of a node of this table's page size,
        // published by `alloc`; `free` unlinks it and defers giving its block back to the arena
        // until every guard pinned at that time is gone, and `_guard` was pinned before this
        // load, so the node is neither reused nor unmapped within `'g` (the arena's mappings
        // outlive the table, which outlives `&self`).
        (!ptr.is_null()).then(|| unsafe { &*self.node_ptr(ptr) })
    }

    /// The full pointer to the node at `addr` (its metadata is the page's word count).
    #[inline]
    fn node_ptr(&self, addr: *mut u8) -> *mut Node {
        std::ptr::slice_from_raw_parts_mut(addr.cast::<AtomicU64>(), self.page_size / 8) as *mut Node
    }

    /// Allocates a zeroed page; returns its id and node.
    pub(crate) fn alloc<'g>(&self, guard: &'g Guard) -> (u32, &'g Node) {
        let (pid, block, zeroed, size) = {
            let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
            ids.live += 1;
            let pid = ids.free.pop().unwrap_or_else(|| {
                let pid = ids.next;
                ids.next += 1;
                assert!(pid != NO_PAGE, "page ids exhausted");
                pid
            });
            let (block, zeroed) = ids.arena.take();
            (pid, block, zeroed, ids.arena.block)
        };
        self.ensure_segment(pid);
        if !zeroed {
            // SAFETY: a reclaimed block of `size` bytes that only this call now owns.
            unsafe { std::ptr::write_bytes(block.as_ptr(), 0, size) };
        }
        // SAFETY: the arena's blocks have a node's size and 64-byte alignment (mappings are
        // page-aligned, blocks a multiple of 64 bytes); this one is zeroed and ours alone.
        let node = unsafe { Node::init(block, self.page_size) };
        self.slot(pid).expect("segment ensured").store(node.cast::<u8>(), Release);
        (pid, self.get(pid, guard).expect("just stored"))
    }

    fn ensure_segment(&self, pid: u32) {
        let (seg, _) = locate(pid);
        if !self.segments[seg].load(Acquire).is_null() {
            return;
        }
        let mut owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
        if self.segments[seg].load(Acquire).is_null() {
            let mut segment: Segment = (0..BASE << seg).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect();
            self.segments[seg].store(segment.as_mut_ptr(), Release);
            owned.push(segment);
        }
    }

    /// Unlinks page `pid`; its memory and id are reclaimed once no pinned reader can hold it.
    pub(crate) fn free(&self, pid: u32, guard: &Guard) {
        let Some(slot) = self.slot(pid) else { return };
        let ptr = slot.swap(std::ptr::null_mut(), Release);
        if ptr.is_null() {
            return;
        }
        let block = SendPtr(NonNull::new(ptr).expect("checked non-null"));
        let ids = Arc::clone(&self.ids);
        // Runs after every reader that could have found the node has unpinned; it was unlinked
        // above, so no new reader can find it: its block and id are free for reuse.
        guard.defer(move || {
            let block = block;
            let mut ids = ids.lock().unwrap_or_else(|p| p.into_inner());
            ids.live -= 1;
            ids.free.push(pid);
            ids.arena.free.push(block.0);
        });
    }

    /// Pages allocated and not yet reclaimed.
    pub(crate) fn live_pages(&self) -> usize {
        self.ids.lock().unwrap_or_else(|p| p.into_inner()).live
    }
}

/// A node's block moved into a deferred free.
struct SendPtr(NonNull<u8>);

#[cfg(test)]
mod layout_tests {
    use super::*;

    #[test]
    fn latch_and_page_header_share_the_first_cache_line() {
        for page_size in [4096, 16384, 65536] {
            let table = PageTable::new(page_size, true);
            let guard = crossbeam_epoch::pin();
            for _ in 0..3 {
                let (_, node) = table.alloc(&guard);
                let base = node as *const Node as *const u8 as usize;
                let page = node.page.words().as_ptr() as usize;
                assert_eq!(base % 64, 0, "nodes are cache-line aligned");
                assert_eq!(page - base, 24, "the page follows the latch");
                assert_eq!((page + super::super::node::HEADER - base) % 64, 0, "slots start on a line");
                assert_eq!(node.page.size(), page_size);
                assert!(node.page.words().iter().all(|w| w.load(std::sync::atomic::Ordering::Relaxed) == 0));
                assert_eq!(std::mem::size_of_val(node), page_size + 64);
            }
        }
    }
}
// SAFETY: a node's memory is atomics only (`Send`); the pointer is used by exactly one
// deferred closure.
unsafe impl Send for SendPtr {}

/// Drives epoch reclamation until `done` holds; false if it does not within a minute (tests
/// only: reclamation waits for every thread of the process to unpin, and tests run in parallel).
#[cfg(test)]
pub(crate) fn wait_for(done: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(60) {
        if done() {
            return true;
        }
        crossbeam_epoch::pin().flush();
        std::thread::yield_now();
    }
    done()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_every_id_without_overlap() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(1023), (0, 1023));
        assert_eq!(locate(1024), (1, 0));
        assert_eq!(locate(3071), (1, 2047));
        assert_eq!(locate(3072), (2, 0));
        let (seg, idx) = locate(u32::MAX - 1);
        assert!(seg < SEGMENTS && idx < BASE << seg);
    }

    #[test]
    fn alloc_get_free_recycle() {
        let table = PageTable::new(4096, false);
        let guard = crossbeam_epoch::pin();
        let ids: Vec<u32> = (0..3000).map(|_| table.alloc(&guard).0).collect();
        assert_eq!(ids, (0..3000).collect::<Vec<u32>>());
        assert!(table.get(2999, &guard).is_some());
        assert!(table.get(5000, &guard).is_none());
        table.free(7, &guard);
        assert!(table.get(7, &guard).is_none(), "unlinked at once");
        drop(guard);
        // Reclamation happens once the epoch has advanced past every pinned thread (other
        // tests in this process pin too, so this can take a while).
        assert!(wait_for(|| table.live_pages() == 2999), "the freed page is reclaimed");
        let guard = crossbeam_epoch::pin();
        let (pid, node) = table.alloc(&guard);
        assert_eq!(pid, 7, "the freed id is reused");
        assert!(node.page.words().iter().all(|w| w.load(std::sync::atomic::Ordering::Relaxed) == 0), "zeroed");
        let mapped = table.ids.lock().unwrap().arena.mapped;
        assert!((3000 * 4160..3000 * 4160 * 3).contains(&mapped), "{mapped} bytes mapped for 3000 nodes");
    }

    #[test]
    fn reused_blocks_come_back_zeroed_and_the_arena_grows_to_huge_pages() {
        let table = PageTable::new(16384, true);
        let guard = crossbeam_epoch::pin();
        let (pid, node) = table.alloc(&guard);
        node.page.set_word(5, 0xDEAD);
        table.free(pid, &guard);
        drop(guard);
        assert!(wait_for(|| table.live_pages() == 0));
        let guard = crossbeam_epoch::pin();
        let (_, node) = table.alloc(&guard);
        assert_eq!(node.page.word(5), 0, "a reused block is zeroed");
        for _ in 0..300 {
            table.alloc(&guard);
        }
        let ids = table.ids.lock().unwrap();
        let sizes: Vec<usize> = ids.arena.chunks.iter().map(|&(_, len)| len).collect();
        // 301 nodes of 16 KiB: 256 KiB, 256 KiB, 512 KiB, 1 MiB, then 2 MiB and 4 MiB aligned.
        assert_eq!(sizes[..4], [256 << 10, 256 << 10, 512 << 10, 1 << 20], "{sizes:?}");
        assert!(sizes.len() >= 5 && sizes.iter().sum::<usize>() < 3 * 301 * 16448, "{sizes:?}");
        for &(p, len) in &ids.arena.chunks {
            assert!(len < HUGE_PAGE || (p.as_ptr() as usize % HUGE_PAGE == 0 && len % HUGE_PAGE == 0), "{sizes:?}");
        }
    }
}
