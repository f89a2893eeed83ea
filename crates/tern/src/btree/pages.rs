//! The page table: page id → node, for one tree.
//!
//! Nodes refer to each other by 32-bit page id, not by pointer, so that a later component can
//! write pages to a file and read them back. The table is a segmented array: segment `k` holds
//! `1024 << k` entries and is allocated when first needed, so a tree of a few pages costs a few
//! KiB and a tree of millions grows geometrically, without ever moving an entry (readers hold
//! references into it).
//!
//! Freeing is epoch-based (crossbeam-epoch): every tree operation pins the epoch; `free` unlinks
//! the node at once but drops its memory and recycles its id only after every thread pinned at
//! that moment has unpinned. A reader that read a page id from a node that has since changed
//! may still look that id up, see the old node (or nothing) and read it safely; its validation
//! of the node it came from then fails and it restarts.

use super::page::Page;
use crate::sync::{HybridLatch, LatchClass};
use crossbeam_epoch::Guard;
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

    /// A node with a zeroed page of `page_size` bytes.
    fn boxed(page_size: usize) -> Box<Node> {
        let layout = Node::layout(page_size);
        // SAFETY: the layout has a non-zero size (the latch alone is 24 bytes).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        if raw.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // A pointer to `Node` carries the page's word count as its metadata, like a slice.
        let node = std::ptr::slice_from_raw_parts_mut(raw.cast::<AtomicU64>(), page_size / 8) as *mut Node;
        // SAFETY: `raw` is a fresh allocation of `Node::layout(page_size)`, which is exactly the
        // size and alignment of a `Node` with `page_size / 8` words (checked below in debug
        // builds). The page's words are valid zeroed `AtomicU64`s; the latch is written before
        // the box is made, and the box frees with the same layout.
        unsafe {
            std::ptr::addr_of_mut!((*node).latch).write(HybridLatch::with_class((), *NODE_CLASS));
            let node = Box::from_raw(node);
            debug_assert_eq!(std::alloc::Layout::for_value(&*node), layout);
            node
        }
    }
}

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
    ids: Arc<StdMutex<Ids>>,
    page_size: usize,
}

#[derive(Default)]
struct Ids {
    next: u32,
    free: Vec<u32>,
    live: usize,
}

/// Where page `pid` lives: (segment, index within it).
#[inline]
fn locate(pid: u32) -> (usize, usize) {
    let q = pid as usize + BASE;
    let seg = (usize::BITS - 1 - q.leading_zeros()) as usize - BASE.trailing_zeros() as usize;
    (seg, q - (BASE << seg))
}

impl PageTable {
    pub(crate) fn new(page_size: usize) -> PageTable {
        PageTable {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            owned: StdMutex::new(Vec::new()),
            ids: Arc::new(StdMutex::new(Ids::default())),
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
        // published by `alloc`; `free` unlinks it and defers dropping it until every guard
        // pinned at that time is gone, and `_guard` was pinned before this load, so the node
        // outlives `'g`.
        (!ptr.is_null()).then(|| unsafe { &*self.node_ptr(ptr) })
    }

    /// The full pointer to the node at `addr` (its metadata is the page's word count).
    #[inline]
    fn node_ptr(&self, addr: *mut u8) -> *mut Node {
        std::ptr::slice_from_raw_parts_mut(addr.cast::<AtomicU64>(), self.page_size / 8) as *mut Node
    }

    /// Allocates a zeroed page; returns its id and node.
    pub(crate) fn alloc<'g>(&self, guard: &'g Guard) -> (u32, &'g Node) {
        let pid = {
            let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
            ids.live += 1;
            ids.free.pop().unwrap_or_else(|| {
                let pid = ids.next;
                ids.next += 1;
                assert!(pid != NO_PAGE, "page ids exhausted");
                pid
            })
        };
        self.ensure_segment(pid);
        let node = Box::into_raw(Node::boxed(self.page_size));
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
        let node = SendPtr(self.node_ptr(ptr));
        let ids = Arc::clone(&self.ids);
        guard.defer(move || {
            let node = node;
            // SAFETY: the pointer came from `Box::into_raw` in `alloc`, was unlinked above so
            // no new reader can find it, and this runs after every reader that could have
            // found it has unpinned.
            drop(unsafe { Box::from_raw(node.0) });
            let mut ids = ids.lock().unwrap_or_else(|p| p.into_inner());
            ids.live -= 1;
            ids.free.push(pid);
        });
    }

    /// Pages allocated and not yet reclaimed.
    pub(crate) fn live_pages(&self) -> usize {
        self.ids.lock().unwrap_or_else(|p| p.into_inner()).live
    }
}

/// A node pointer moved into a deferred destructor.
struct SendPtr(*mut Node);

#[cfg(test)]
mod layout_tests {
    use super::*;

    #[test]
    fn latch_and_page_header_share_the_first_cache_line() {
        for page_size in [4096, 16384, 65536] {
            let node = Node::boxed(page_size);
            let base = &*node as *const Node as *const u8 as usize;
            let page = node.page.words().as_ptr() as usize;
            assert_eq!(base % 64, 0, "nodes are cache-line aligned");
            assert_eq!(page - base, 24, "the page follows the latch");
            assert_eq!(node.page.size(), page_size);
            assert!(node.page.words().iter().all(|w| w.load(std::sync::atomic::Ordering::Relaxed) == 0));
            assert_eq!(std::mem::size_of_val(&*node), page_size + 64);
        }
    }
}
// SAFETY: `Node` is `Send` (atomics and a page of atomics); the pointer is used by exactly one
// deferred closure.
unsafe impl Send for SendPtr {}

impl Drop for PageTable {
    fn drop(&mut self) {
        // Dropping needs ownership: no reader holds a reference into this table any more.
        let owned = std::mem::take(self.owned.get_mut().unwrap_or_else(|p| p.into_inner()));
        for seg in owned.iter() {
            for slot in seg.iter() {
                let ptr = slot.swap(std::ptr::null_mut(), Acquire);
                if !ptr.is_null() {
                    // SAFETY: as in `free`: from `Box::into_raw` in `alloc`, and now unreachable.
                    drop(unsafe { Box::from_raw(self.node_ptr(ptr)) });
                }
            }
        }
    }
}

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
        let table = PageTable::new(4096);
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
        assert_eq!(table.alloc(&guard).0, 7, "the freed id is reused");
    }
}
