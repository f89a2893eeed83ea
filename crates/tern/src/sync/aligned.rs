//! Blocks that share no cache line, nor a line the prefetchers pull in with it, with anything
//! else.
//!
//! Memory that many cores read (a lock table, an entry) must not share a cache line with memory
//! one core keeps writing, or every write invalidates every reader's copy: false sharing. With
//! the global allocator, a small block lands next to whatever its allocating thread asked for
//! next, so whether two structures collide depends on allocation order and varies from run to
//! run. On the development machine (a Sapphire Rapids-class Xeon) keeping two threads' hot data
//! 128 or 256 bytes apart was not enough (the L2 prefetchers fetch beyond the adjacent line);
//! 512 bytes was. So [`LineAligned`] rounds every block up to, and aligns it on, 512 bytes, and
//! [`Isolated`] does the same for a single value. Collections take the allocator through
//! `allocator_api2` (hashbrown's `HashTable::new_in`, `allocator_api2::vec::Vec::new_in`).

use allocator_api2::alloc::{AllocError, Allocator, Global};
use std::alloc::Layout;
use std::ptr::NonNull;

/// Bytes a block is aligned and rounded to.
pub(crate) const ISOLATION: usize = 512;

/// The global allocator, with every block aligned to and rounded up to [`ISOLATION`] bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LineAligned;

/// The layout `LineAligned` really allocates for `layout`.
fn padded(layout: Layout) -> Result<Layout, AllocError> {
    let align = layout.align().max(ISOLATION);
    let size = layout.size().max(1).checked_next_multiple_of(ISOLATION).ok_or(AllocError)?;
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
    fn blocks_own_whole_isolated_blocks() {
        let mut v: allocator_api2::vec::Vec<u8, LineAligned> = allocator_api2::vec::Vec::new_in(LineAligned);
        for i in 0..1000u32 {
            v.push(i as u8);
            assert_eq!(v.as_ptr() as usize % ISOLATION, 0);
        }
        let mut t = hashbrown::HashTable::new_in(LineAligned);
        for i in 0..100u64 {
            t.insert_unique(i, i, |&x| x);
        }
        assert_eq!(t.find(7, |&x| x == 7), Some(&7));
        assert_eq!(padded(Layout::new::<u8>()).unwrap().size(), ISOLATION);
        assert_eq!(padded(Layout::from_size_align(ISOLATION + 1, 8).unwrap()).unwrap().size(), 2 * ISOLATION);
        assert!(padded(Layout::from_size_align(isize::MAX as usize - 100, 8).unwrap()).is_err());
    }
}

/// A value that owns a 512-byte-aligned block ([`ISOLATION`]): data one thread writes on every
/// operation (its counter shard, its locker's shared part). Measured: two threads' counter
/// shards 128 or 256 bytes apart halved two-thread throughput in some runs; 512 apart, never.
#[repr(align(512))]
#[derive(Debug, Default)]
pub(crate) struct Isolated<T>(pub T);

impl<T> std::ops::Deref for Isolated<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
