//! `Segmented<T>`: an array indexed by 32-bit ids that grows without ever moving an element.
//!
//! Segment `k` holds `BASE << k` elements and is allocated (zeroed) when an id in it is first
//! asked for with [`Segmented::ensure`]; 23 segments cover every `u32`. Readers find an element
//! with two loads (the segment's base, usually in L1, then the element) and no lock, and may
//! hold references to elements while the array grows: elements never move. A small table costs
//! a few KiB; a large one grows geometrically. Used for the page table (page id → state and
//! frame) and the version-chain table (chain id → newest version).
//!
//! `T` must be valid when all its bytes are zero (atomics, plain integers): segments are
//! allocated zeroed.

use std::sync::atomic::{AtomicPtr, Ordering::Acquire, Ordering::Release};
use std::sync::Mutex as StdMutex;

/// Elements in segment 0; segment `k` has `BASE << k`.
const BASE: usize = 1024;
/// Segments: enough for every 32-bit id.
const SEGMENTS: usize = 23;

/// Where element `id` lives: (segment, index within it).
#[inline]
fn locate(id: u32) -> (usize, usize) {
    let q = id as usize + BASE;
    let seg = (usize::BITS - 1 - q.leading_zeros()) as usize - BASE.trailing_zeros() as usize;
    (seg, q - (BASE << seg))
}

/// Marks types whose all-zero bit pattern is a valid value.
///
/// # Safety
/// Every byte of a `T` may be zero and the result is a valid `T`.
pub(crate) unsafe trait Zeroable: Sized {}

// SAFETY: zero is a valid value of each of these atomics.
unsafe impl Zeroable for std::sync::atomic::AtomicU64 {}
// SAFETY: as above.
unsafe impl Zeroable for std::sync::atomic::AtomicU32 {}
// SAFETY: a null pointer is a valid `AtomicPtr`.
unsafe impl<U> Zeroable for AtomicPtr<U> {}

/// A grow-only array of `T` indexed by `u32` (see the module doc).
pub(crate) struct Segmented<T: Zeroable> {
    segments: [AtomicPtr<T>; SEGMENTS],
    /// Keeps the segments alive (the array above holds raw pointers into these boxes).
    owned: StdMutex<Vec<Box<[T]>>>,
}

impl<T: Zeroable> Default for Segmented<T> {
    fn default() -> Self {
        Segmented::new()
    }
}

impl<T: Zeroable> Segmented<T> {
    pub(crate) fn new() -> Segmented<T> {
        Segmented {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            owned: StdMutex::new(Vec::new()),
        }
    }

    /// Element `id`, if its segment exists (it does once [`ensure`](Self::ensure)d, and for
    /// every smaller id of the same segment).
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        let (seg, idx) = locate(id);
        let base = self.segments.get(seg)?.load(Acquire);
        if base.is_null() {
            return None;
        }
        debug_assert!(idx < BASE << seg);
        // SAFETY: a non-null segment pointer points to a live boxed slice of `BASE << seg`
        // elements, owned by `self.owned` for the array's lifetime, and `idx` is below that.
        Some(unsafe { &*base.add(idx) })
    }

    /// Element `id`, allocating its segment if needed.
    pub(crate) fn ensure(&self, id: u32) -> &T {
        let (seg, _) = locate(id);
        if self.segments[seg].load(Acquire).is_null() {
            let mut owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
            if self.segments[seg].load(Acquire).is_null() {
                let mut segment = zeroed::<T>(BASE << seg);
                self.segments[seg].store(segment.as_mut_ptr(), Release);
                owned.push(segment);
            }
        }
        self.get(id).expect("segment ensured")
    }

    /// Every element of every allocated segment, with its id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        (0..SEGMENTS).flat_map(move |seg| {
            let base = self.segments[seg].load(Acquire);
            let len = if base.is_null() { 0 } else { BASE << seg };
            (0..len).map(move |idx| {
                // SAFETY: as in `get`: a live segment of `len` elements.
                let element = unsafe { &*base.add(idx) };
                (((BASE << seg) + idx - BASE) as u32, element)
            })
        })
    }
}

/// A boxed slice of `len` zeroed `T`s.
fn zeroed<T: Zeroable>(len: usize) -> Box<[T]> {
    let layout = std::alloc::Layout::array::<T>(len).expect("segment sizes are small");
    // SAFETY: the layout is non-zero-sized (len >= BASE, T non-zero-sized atomics); zeroed
    // memory is a valid `[T]` (`Zeroable`); the pointer came from the global allocator with
    // exactly this layout, which is how `Box<[T]>` frees it.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<T>();
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    #[test]
    fn segments_cover_every_id_without_overlap() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(1023), (0, 1023));
        assert_eq!(locate(1024), (1, 0));
        assert_eq!(locate(3071), (1, 2047));
        assert_eq!(locate(3072), (2, 0));
        let (seg, idx) = locate(u32::MAX);
        assert!(seg < SEGMENTS && idx < BASE << seg);
    }

    #[test]
    fn elements_start_zero_and_stay_put_as_the_array_grows() {
        let a: Segmented<AtomicU64> = Segmented::new();
        assert!(a.get(5).is_none());
        let first = a.ensure(5) as *const AtomicU64;
        a.ensure(5).store(42, Relaxed);
        assert_eq!(a.get(1023).unwrap().load(Relaxed), 0, "the whole segment exists");
        a.ensure(100_000).store(7, Relaxed);
        assert_eq!(a.get(5).unwrap() as *const AtomicU64, first, "no element moved");
        assert_eq!(a.get(5).unwrap().load(Relaxed), 42);
        let set: Vec<(u32, u64)> =
            a.iter().filter(|(_, v)| v.load(Relaxed) != 0).map(|(i, v)| (i, v.load(Relaxed))).collect();
        assert_eq!(set, [(5, 42), (100_000, 7)]);
    }
}
