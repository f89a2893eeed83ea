//! Frames: the memory pages live in while resident.
//!
//! A frame is one cache-line-aligned block: three header words, then the page. The header holds
//! the id of the page in the frame (the clock finds a frame's page through it), the page's
//! kind (the clock favours inner nodes) and the frame's index in the pool's registry; 24
//! header bytes put the first 40 bytes of the page (its node header) in the frame's first
//! cache line and the node's slots on a line boundary, the layout the B+tree's search was
//! tuned for.
//!
//! Invariants:
//! * Frames are carved from anonymous mappings that grow geometrically from 256 KiB to 64 MiB;
//!   from 2 MiB on they are 2 MiB-aligned and, if asked, advised for transparent huge pages
//!   (`MADV_HUGEPAGE`). A tree of 1M records reaches its pages through few TLB entries.
//! * A frame is never unmapped while its pool lives: an optimistic reader that still holds the
//!   address of a frame whose page was evicted or freed reads valid (if meaningless) memory,
//!   and its validation of the page's state word fails. Frames are recycled, or retired when
//!   the pool gives memory to its row cache: a retired frame's memory is given back to the
//!   system ([`release`]: reads then see zeros), its mapping stays.

use super::page::Page;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// A frame's header, followed in memory by its page's words.
#[repr(C, align(64))]
pub(crate) struct Frame {
    /// The id of the page in this frame plus one; 0 while the frame is free.
    pub owner: AtomicU64,
    /// The page's kind (`Kind as u64`) and, above bit 8, the clock's remaining passes.
    pub kind: AtomicU64,
    /// The frame's index in the pool's registry (set once, when the frame is made).
    pub index: AtomicU64,
    pub page: Page,
}

/// Bytes before the page in a frame.
pub(crate) const FRAME_HEADER: usize = 24;

/// The allocation layout of a frame for pages of `page_size` bytes.
pub(crate) fn frame_layout(page_size: usize) -> std::alloc::Layout {
    let header = std::alloc::Layout::from_size_align(FRAME_HEADER, 8).expect("valid layout");
    let words = std::alloc::Layout::array::<AtomicU64>(page_size / 8).expect("page sizes are small");
    let (layout, _) = header.extend(words).expect("page sizes are small");
    layout.align_to(64).expect("64 is a valid alignment").pad_to_align()
}

/// Bytes of memory a frame for pages of `page_size` bytes takes.
pub(crate) fn frame_bytes(page_size: usize) -> usize {
    frame_layout(page_size).size()
}

impl Frame {
    /// The frame at `block` (a block of [`frame_layout`]`(page_size)` from this module's arena).
    ///
    /// # Safety
    /// `block` must be a frame block of this page size from a live arena (the reference lives as
    /// long as the caller says; the pool ties it to itself).
    #[inline]
    pub(crate) unsafe fn at<'a>(block: NonNull<u8>, page_size: usize) -> &'a Frame {
        // A pointer to `Frame` carries the page's word count as its metadata, like a slice.
        let ptr = std::ptr::slice_from_raw_parts(block.as_ptr().cast::<AtomicU64>(), page_size / 8) as *const Frame;
        // SAFETY: by the caller's contract the block is a live frame: all atomics (valid for any
        // bytes, zero included), 64-byte aligned, of this layout's size.
        unsafe { &*ptr }
    }

    /// Zeroes the page (the caller holds it exclusively or it is not published yet).
    pub(crate) fn zero(&self) {
        self.page.zero();
    }
}

/// A huge page: the alignment and size granule of the arena's large mappings.
const HUGE_PAGE: usize = 2 << 20;
/// The size granule of the small ones.
const SMALL_PAGE: usize = 4 << 10;
/// The first mapping's size.
const MIN_CHUNK: usize = 256 << 10;
/// The largest mapping the arena makes at once.
const MAX_CHUNK: usize = 64 << 20;

/// Frame memory: blocks of one frame's size carved from large anonymous mappings.
pub(crate) struct Arena {
    /// Bytes per block (`frame_layout(page_size).size()`, a multiple of 64).
    pub(crate) block: usize,
    /// Advise the mappings for transparent huge pages.
    huge_pages: bool,
    /// The mappings: (start, length).
    pub(crate) chunks: Vec<(NonNull<u8>, usize)>,
    /// The unused tail of the newest mapping: (next block, bytes left).
    tail: Option<(NonNull<u8>, usize)>,
    /// Bytes mapped so far.
    pub(crate) mapped: usize,
}

// SAFETY: the arena owns its mappings; the raw pointers are addresses of memory only it hands
// out, and it is only ever used under the pool's mutex.
unsafe impl Send for Arena {}

impl Arena {
    pub(crate) fn new(page_size: usize, huge_pages: bool) -> Arena {
        Arena { block: frame_layout(page_size).size(), huge_pages, chunks: Vec::new(), tail: None, mapped: 0 }
    }

    /// A new block for one frame, zeroed (fresh from the system).
    pub(crate) fn take(&mut self) -> NonNull<u8> {
        match self.tail {
            Some((next, left)) if left >= self.block => {
                // SAFETY: `next` lies in a live mapping with `left >= block` bytes after it.
                let after = unsafe { NonNull::new_unchecked(next.as_ptr().add(self.block)) };
                self.tail = Some((after, left - self.block));
                next
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

/// Advises the 2 MiB-aligned middle of `buf`'s spare capacity for transparent huge pages (a
/// hint, ignored where the kernel has none or the capacity spans no whole huge page). For
/// large buffers read at random, such as log replay's batches: one TLB entry per 2 MiB
/// instead of per 4 KiB. Call it before the capacity is first written.
pub(crate) fn advise_huge_pages<T>(buf: &mut Vec<T>) {
    let spare = buf.spare_capacity_mut();
    let (start, len) = (spare.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(spare));
    let head = start.align_offset(HUGE_PAGE);
    let Some(middle) = len.checked_sub(head).map(|rest| rest / HUGE_PAGE * HUGE_PAGE) else { return };
    #[cfg(target_os = "linux")]
    if middle > 0 {
        // SAFETY: `start + head .. start + head + middle` lies inside `buf`'s allocation (its
        // spare capacity), page-aligned (2 MiB-aligned); the advice changes how the kernel
        // backs those pages, never their contents (unwritten spare capacity either way).
        unsafe { libc::madvise(start.add(head).cast(), middle, libc::MADV_HUGEPAGE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = middle;
}

/// Gives the memory of the whole memory pages (the OS page size) within `start..start + len`
/// back to the system (`MADV_DONTNEED`): the range stays mapped, and reads of it see zeros
/// until written again.
/// `start..start + len` must be frame blocks of one mapping that no page holds any more
/// (retired frames); bytes of the range's partial first and last pages stay as they are.
pub(crate) fn release(start: NonNull<u8>, len: usize) {
    let page = crate::fs::os_page_size();
    let from = start.as_ptr().addr().next_multiple_of(page);
    let to = (start.as_ptr().addr() + len) / page * page;
    if to <= from {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: `from..to` lies within `start..start + len`, memory of a live anonymous private
    // mapping of the arena whose frames no page holds (the caller's contract); dropping it only
    // makes later reads see zeros, which optimistic readers of stale frame addresses tolerate
    // (their validation fails), and the mapping itself stays.
    unsafe {
        let at = start.as_ptr().with_addr(from).cast();
        // Not collapsed back into a huge page (which would bring the memory back).
        libc::madvise(at, to - from, libc::MADV_NOHUGEPAGE);
        libc::madvise(at, to - from, libc::MADV_DONTNEED);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (from, to);
}

/// Unmaps a chunk from [`map_chunk`].
fn unmap_chunk(start: NonNull<u8>, len: usize) {
    // SAFETY: `start..start + len` is a mapping made by `map_chunk` and owned by the arena being
    // dropped; no frame in it is reachable any more.
    unsafe { libc::munmap(start.as_ptr().cast(), len) };
}
