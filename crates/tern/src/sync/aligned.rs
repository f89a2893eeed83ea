//! An allocator whose blocks own whole 128-byte pairs of cache lines.
//!
//! Memory that many cores read (a lock table, an entry) must not share a cache line with memory
//! one core keeps writing, or every write invalidates every reader's copy: false sharing. With
//! the global allocator, a small block lands next to whatever its allocating thread asked for
//! next, so whether two structures collide depends on allocation order and varies from run to
//! run. [`LineAligned`] rounds every block up to, and aligns it on, 128 bytes (x86's adjacent-
//! line prefetcher moves lines in 128-byte pairs), so its blocks share no line with anything.
//! Collections take it through `allocator_api2` (hashbrown's `HashTable::new_in`,
//! `allocator_api2::vec::Vec::new_in`).

use allocator_api2::alloc::{AllocError, Allocator, Global};
use std::alloc::Layout;
use std::ptr::NonNull;

/// Bytes a block is aligned and rounded to.
pub(crate) const LINE_PAIR: usize = 128;

/// The global allocator, with every block aligned to and rounded up to [`LINE_PAIR`] bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LineAligned;

/// The layout `LineAligned` really allocates for `layout`.
fn padded(layout: Layout) -> Result<Layout, AllocError> {
    let align = layout.align().max(LINE_PAIR);
    let size = layout.size().max(1).checked_next_multiple_of(LINE_PAIR).ok_or(AllocError)?;
    Layout::from_size_align(size, align).map_err(|_| AllocError)
}

// SAFETY: every block comes from `Global` with the padded layout and goes back to it with the
// same padded layout (a pure function of the caller's layout); a padded block is at least as
// large and as aligned as asked, so it fits the caller's layout.
unsafe impl Allocator for LineAligned {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        Global.allocate(padded(layout)?)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        let padded = padded(layout).expect("the layout was padded when the block was allocated");
        // SAFETY: `ptr` was allocated by `allocate` above with exactly this padded layout.
        unsafe { Global.deallocate(ptr, padded) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn blocks_own_their_line_pairs() {
        let mut v: allocator_api2::vec::Vec<u8, LineAligned> = allocator_api2::vec::Vec::new_in(LineAligned);
        for i in 0..1000u32 {
            v.push(i as u8);
            assert_eq!(v.as_ptr() as usize % LINE_PAIR, 0);
        }
        let mut t = hashbrown::HashTable::new_in(LineAligned);
        for i in 0..100u64 {
            t.insert_unique(i, i, |&x| x);
        }
        assert_eq!(t.find(7, |&x| x == 7), Some(&7));
        assert_eq!(padded(Layout::new::<u8>()).unwrap().size(), LINE_PAIR);
        assert_eq!(padded(Layout::from_size_align(129, 8).unwrap()).unwrap().size(), 2 * LINE_PAIR);
        assert!(padded(Layout::from_size_align(isize::MAX as usize - 100, 8).unwrap()).is_err());
    }
}

/// A value that owns a 512-byte-aligned block: data one thread writes on every operation (its
/// counter shard, its transaction slots). Measured on the development machine (a Sapphire
/// Rapids-class Xeon): two threads' counter shards 128 or 256 bytes apart, or a shard 128 bytes
/// from another thread's transaction slots, halved two-thread throughput from one run to the
/// next; 512 bytes apart, never. (The L2 prefetchers fetch beyond the adjacent line.)
#[repr(align(512))]
#[derive(Debug, Default)]
pub(crate) struct Isolated<T>(pub T);

impl<T> std::ops::Deref for Isolated<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
