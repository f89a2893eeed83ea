//! Search kernels: the lower bound of a key over a sorted sequence stored in one of four memory
//! layouts, with optional software prefetching.
//!
//! Every kernel answers the same question as `sorted.partition_point(|&k| k < x)`: where is the
//! first key that is not less than `x`? They differ in how the keys are laid out in memory and in
//! how the search walks them, which decides how many cache misses a lookup pays and whether they
//! overlap. The kernels read keys only through [`Probe`], so the very same code searches a plain
//! slice (the `tern bench search` benchmark) and a B+tree node's search array of atomics.
//!
//! # Layouts
//!
//! * [`Layout::Sorted`]: keys in sorted order; the classic branchy binary search (the baseline).
//!   Each probe's comparison decides a branch, so a mispredicted branch costs a pipeline flush,
//!   but a correctly predicted one lets the CPU start the next probe's load speculatively.
//! * [`Layout::BranchFree`]: keys in sorted order; branch-free binary search in the style of
//!   Khuong & Morin: `base = if keys[base + half] < x { base + half } else { base }`, computed
//!   with mask arithmetic rather than a branch (LLVM would otherwise turn its conditional move
//!   back into a branch), with a loop trip count that depends only on the length.
//! * [`Layout::Eytzinger`]: keys in BFS order of the implicit complete binary search tree (the
//!   layout of a binary heap). The tree is 1-based (node `i` has children `2i` and `2i + 1`); node
//!   `i` is stored at index `i - 1`, so a layout of `n` keys is exactly `n` elements long (no
//!   padding element). The descent `i = 2 * i + (key(i) < x)` is branch-free; at the end the
//!   answer is recovered with the ffs trick: `i >> (trailing_ones(i) + 1)` undoes the right turns
//!   taken after the last left turn, giving the node where the search last went left, the lower
//!   bound (node 0 means "none").
//! * [`Layout::BTree`]: Khuong & Morin's implicit B-tree: blocks of `B` keys, `B` =
//!   [`btree_block_len`] (64 bytes / key size rounded down to a power of two: 8 for `u64`, 16 for
//!   `u32`), forming a complete `(B + 1)`-ary tree stored in BFS order of blocks. Block `b` holds
//!   indices `b*B .. b*B + B`; its children are blocks `b*(B+1) + 1 ..= b*(B+1) + B + 1`. Within a
//!   block the kernel copies the keys into a local array and counts those less than `x`
//!   branch-free (vectorised for 4-byte keys; compare-and-add for 8-byte keys, which x86-64's
//!   SSE2 baseline cannot compare in vectors), then descends into that child.
//!
//! # Return values
//!
//! Every kernel returns an index into the layout it searched (a *layout index*), or the
//! layout's length (`keys.len()`) when every key is less than `x` ("none"). For `Sorted` and
//! `BranchFree` the layout index is the sorted rank. For the other layouts,
//! [`sorted_rank_table`] maps layout indices (and `len`) back to sorted ranks; the B+tree stores
//! a slot number with each key instead.
//!
//! **B-tree padding.** A B-tree layout of `n` keys is [`layout_len`] = `n` rounded up to a
//! multiple of `B` long, and the kernel takes `keys.len()` to be that padded length ("none" is
//! therefore the padded length). Indices `>= n` are padding, all in the last block, which is
//! always a leaf but is *not* in general the last leaf in key order (with 10 `u64` keys, it is
//! the root's first child and holds the 2 smallest keys). Padding with a maximal key would make
//! the search end on a padding index whenever that leaf's real keys are all less than `x`, and
//! the caller would have to map it to the leaf's in-order successor. Instead each padding index
//! holds a copy of the last real key of its block (index `n - 1`): in key order the copies come
//! right after that key, so the layout stays a valid search tree of a sorted sequence with
//! duplicates, and because the lower bound is the *first* key not less than `x`, the kernel
//! never returns a padding index. A B+tree that stores a slot number with each key copies the
//! slot along with the key.
//!
//! # Prefetching
//!
//! Each kernel takes a prefetch depth (0, 1 or 2; [`lower_bound`] treats larger values as 2).
//! Depth 0 issues no prefetches. The schemes:
//!
//! * `Sorted` and `BranchFree`: before each probe's comparison, prefetch the probe positions of
//!   the next `depth` levels on both sides: depth 1 the 2 possible next midpoints, depth 2 those
//!   and the 4 after them. This is the pipeline proposed for WiredTiger's `__wt_row_search`: the
//!   loads of the next probes are in flight while the current comparison waits for its key, so
//!   the cache misses of consecutive probes overlap instead of adding up.
//! * `Eytzinger`: the `B` descendants of node `i` that lie `log2(B)` levels below it (`B` keys per
//!   cache line) are the consecutive nodes `B*i .. B*i + B`, one cache line when the layout is
//!   placed as [`line_offset`] says. Depth 1 prefetches that line each step, so the line each
//!   step will need `log2(B)` steps later is already on its way (Khuong & Morin's scheme; the
//!   address is `B*i` in 0-based indices, which lies in that line both when the layout is placed
//!   as advised and when it starts on a line boundary, where the line then holds `B - 1` of the
//!   `B` descendants). Depth 2 prefetches the `2B` descendants one more level down (two lines),
//!   one step earlier still.
//! * `BTree`: the `B + 1` children of a block are contiguous: one cache line each (when the layout
//!   starts on a line), `B + 1` lines in a row. Depth 1 speculatively prefetches the middle child
//!   before counting the current block: one line per block visited, the right one only `1/(B+1)`
//!   of the time, but it lies in the same page as the child actually taken, so on arrays far
//!   beyond the caches it starts that page's TLB fill early (our reading of why it measures
//!   well, about 1.5x faster than depth 0 at 2^24 `u64` keys; not verified with hardware
//!   counters). Depth 2 prefetches all `B + 1` children before counting, so the next block is
//!   always in flight, at the cost of `B + 1` lines of memory traffic per level.
//!
//! Prefetches never fault: [`Probe::prefetch`] ignores indices past the end and computes only
//! addresses inside the sequence.
//!
//! # References
//!
//! * Paul-Virak Khuong and Pat Morin, "Array Layouts for Comparison-Based Searching", ACM Journal
//!   of Experimental Algorithmics 22 (2017), arXiv:1509.05053. The branch-free, Eytzinger and
//!   B-tree kernels and the Eytzinger prefetch follow this paper.
//! * WiredTiger's row-store search, `__wt_row_search` (src/btree/row_srch.c): binary search over a
//!   page's slots, where each probe costs two dependent cache misses (slot, then key); the
//!   prefetch pipeline here is the fix proposed for it (see the README's hot-path table).

use crate::buffer::page::prefetch_line;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Bytes in a cache line, as the layouts and prefetch schemes assume.
pub const CACHE_LINE: usize = 64;

/// Read access to a sequence of keys in some layout, as the kernels need it.
pub trait Probe {
    /// The key type.
    type Key: Copy + Ord;
    /// The number of elements (for the B-tree layout: including padding).
    fn len(&self) -> usize;
    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The key at index i (i < len). Implementations for atomic arrays use Relaxed loads.
    fn get(&self, i: usize) -> Self::Key;
    /// Prefetch the cache line holding index i into L1 (no-op if i >= len). Never faults.
    fn prefetch(&self, i: usize);
}

/// Prefetches the cache line holding `slice[i]` into all cache levels, if `i` is in bounds.
#[inline(always)]
fn prefetch_in<T>(slice: &[T], i: usize) {
    if i < slice.len() {
        prefetch_line(slice.as_ptr().wrapping_add(i));
    }
}

macro_rules! probe_plain {
    ($($t:ty),*) => {$(
        impl Probe for [$t] {
            type Key = $t;
            #[inline(always)]
            fn len(&self) -> usize {
                <[$t]>::len(self)
            }
            #[inline(always)]
            fn get(&self, i: usize) -> $t {
                self[i]
            }
            #[inline(always)]
            fn prefetch(&self, i: usize) {
                prefetch_in(self, i)
            }
        }
    )*};
}
probe_plain!(u32, u64);

macro_rules! probe_atomic {
    ($($a:ty => $t:ty),*) => {$(
        impl Probe for [$a] {
            type Key = $t;
            #[inline(always)]
            fn len(&self) -> usize {
                <[$a]>::len(self)
            }
            #[inline(always)]
            fn get(&self, i: usize) -> $t {
                self[i].load(Relaxed)
            }
            #[inline(always)]
            fn prefetch(&self, i: usize) {
                prefetch_in(self, i)
            }
        }
    )*};
}
probe_atomic!(AtomicU32 => u32, AtomicU64 => u64);

/// A memory layout of a sorted sequence, each with its search kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Sorted order, branchy binary search (the baseline).
    Sorted,
    /// Sorted order, branch-free binary search.
    BranchFree,
    /// BFS order of a complete binary search tree, branch-free descent.
    Eytzinger,
    /// BFS order of `B`-key blocks forming a complete `(B + 1)`-ary search tree.
    BTree,
}

impl Layout {
    /// Every layout, in the order benchmarks report them.
    pub const ALL: [Layout; 4] = [Layout::Sorted, Layout::BranchFree, Layout::Eytzinger, Layout::BTree];

    /// The layout's name: "sorted", "branchfree", "eytzinger" or "btree".
    pub fn name(self) -> &'static str {
        match self {
            Layout::Sorted => "sorted",
            Layout::BranchFree => "branchfree",
            Layout::Eytzinger => "eytzinger",
            Layout::BTree => "btree",
        }
    }

    /// Whether a B+tree node in this layout is searched in its slot array (sorted,
    /// branch-free), and so can keep a hint array; the others search an array of their own.
    pub fn searches_slots(self) -> bool {
        matches!(self, Layout::Sorted | Layout::BranchFree)
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Layout {
    type Err = crate::Error;

    /// Parses a layout's [`name`](Layout::name).
    fn from_str(s: &str) -> crate::Result<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == s).ok_or_else(|| {
            crate::Error::InvalidArgument(format!(
                "unknown search layout {s:?} (expected sorted, branchfree, eytzinger or btree)"
            ))
        })
    }
}

/// Keys of type `K` per B-tree block: 64 bytes / `size_of::<K>()`, rounded down to a power of two,
/// at least 1, at most 64 (8 for `u64`, 16 for `u32`).
pub const fn btree_block_len<K>() -> usize {
    let per_line = CACHE_LINE / if size_of::<K>() == 0 { 1 } else { size_of::<K>() };
    if per_line <= 1 {
        1
    } else {
        1 << per_line.ilog2()
    }
}

/// Keys of type `K` per cache line for the Eytzinger prefetch: the same power of two as
/// [`btree_block_len`].
const fn keys_per_line<K>() -> usize {
    btree_block_len::<K>()
}

/// The length of a layout of `n` keys of type `K`: `n`, except for the B-tree layout, which
/// rounds up to a whole number of blocks.
pub const fn layout_len<K>(layout: Layout, n: usize) -> usize {
    match layout {
        Layout::BTree => n.div_ceil(btree_block_len::<K>()) * btree_block_len::<K>(),
        _ => n,
    }
}

/// Where a layout of `K` keys should start within a cache line, in bytes (its address modulo
/// [`CACHE_LINE`]), so that each prefetched line holds whole groups of nodes. Eytzinger: one
/// element before a line boundary, so that the 1-based tree's element 0 (which does not exist)
/// would start a line and each descendant group `B*i .. B*i + B` fills one line. B-tree: on a
/// line boundary, one block per line. The sorted layouts do not care (0).
pub const fn line_offset<K>(layout: Layout) -> usize {
    match layout {
        Layout::Eytzinger if size_of::<K>() < CACHE_LINE => CACHE_LINE - size_of::<K>(),
        _ => 0,
    }
}

/// The lower bound of `x` in `keys`, searched with `layout`'s kernel at prefetch depth
/// `prefetch` (0, 1 or 2; larger values act as 2). `keys` must be in `layout`'s order (see
/// [`layout_from_sorted`]). Returns a layout index, or `keys.len()` if every key is less than
/// `x`; [`sorted_rank_table`] maps it to the sorted rank.
#[inline]
pub fn lower_bound<P: Probe + ?Sized>(layout: Layout, keys: &P, x: P::Key, prefetch: u8) -> usize {
    match (layout, prefetch) {
        (Layout::Sorted, 0) => sorted_lower_bound::<P, 0>(keys, x),
        (Layout::Sorted, 1) => sorted_lower_bound::<P, 1>(keys, x),
        (Layout::Sorted, _) => sorted_lower_bound::<P, 2>(keys, x),
        (Layout::BranchFree, 0) => branchfree_lower_bound::<P, 0>(keys, x),
        (Layout::BranchFree, 1) => branchfree_lower_bound::<P, 1>(keys, x),
        (Layout::BranchFree, _) => branchfree_lower_bound::<P, 2>(keys, x),
        (Layout::Eytzinger, 0) => eytzinger_lower_bound::<P, 0>(keys, x),
        (Layout::Eytzinger, 1) => eytzinger_lower_bound::<P, 1>(keys, x),
        (Layout::Eytzinger, _) => eytzinger_lower_bound::<P, 2>(keys, x),
        (Layout::BTree, 0) => btree_lower_bound::<P, 0>(keys, x),
        (Layout::BTree, 1) => btree_lower_bound::<P, 1>(keys, x),
        (Layout::BTree, _) => btree_lower_bound::<P, 2>(keys, x),
    }
}

/// Sorted layout: classic branchy binary search over `[lo, lo + n)`. With `PREFETCH` >= 1, each
/// step first prefetches the midpoints the next `PREFETCH` steps may probe (2, then 4 more).
#[inline]
pub fn sorted_lower_bound<P: Probe + ?Sized, const PREFETCH: u8>(keys: &P, x: P::Key) -> usize {
    let (mut lo, mut n) = (0, keys.len());
    while n > 0 {
        let half = n / 2;
        let mid = lo + half;
        if PREFETCH >= 1 {
            prefetch_sorted_levels::<P, PREFETCH>(keys, lo, n);
        }
        if keys.get(mid) < x {
            lo = mid + 1;
            n -= half + 1;
        } else {
            n = half;
        }
    }
    lo
}

/// The two ranges a branchy step over `[lo, lo + n)` (probing `lo + n/2`) can continue with.
#[inline(always)]
fn sorted_children(lo: usize, n: usize) -> [(usize, usize); 2] {
    let half = n / 2;
    [(lo, half), (lo + half + 1, n - half - 1)]
}

/// Prefetches the probes of the next `LEVELS` (1 or 2) branchy steps after the one over `[lo, lo
/// + n)` (n >= 1). Empty ranges prefetch their `lo`, harmlessly.
#[inline(always)]
fn prefetch_sorted_levels<P: Probe + ?Sized, const LEVELS: u8>(keys: &P, lo: usize, n: usize) {
    for (l, m) in sorted_children(lo, n) {
        keys.prefetch(l + m / 2);
        if LEVELS >= 2 && m > 0 {
            for (l2, m2) in sorted_children(l, m) {
                keys.prefetch(l2 + m2 / 2);
            }
        }
    }
}

/// Sorted layout: branch-free binary search (Khuong & Morin): the probed range halves each step
/// through mask arithmetic (no branch), and the trip count depends on the length only. With `PREFETCH`
/// >= 1, each step first prefetches the next `PREFETCH` steps' possible probes (2, then 4 more).
#[inline]
pub fn branchfree_lower_bound<P: Probe + ?Sized, const PREFETCH: u8>(keys: &P, x: P::Key) -> usize {
    let mut n = keys.len();
    if n == 0 {
        return 0;
    }
    let mut base = 0;
    while n > 1 {
        let half = n / 2;
        if PREFETCH >= 1 {
            prefetch_branchfree_levels::<P, PREFETCH>(keys, base, n);
        }
        base = select(keys.get(base + half) < x, base + half, base);
        n -= half;
    }
    base + usize::from(keys.get(base) < x)
}

/// Prefetches the probes of the next `LEVELS` (1 or 2) branch-free steps after the one over
/// `[base, base + n)` (n >= 2): the range shrinks to `n - n/2` from `base` or `base + n/2`.
#[inline(always)]
fn prefetch_branchfree_levels<P: Probe + ?Sized, const LEVELS: u8>(keys: &P, base: usize, n: usize) {
    let half = n / 2;
    let n1 = n - half;
    let half1 = n1 / 2;
    for b1 in [base, base + half] {
        keys.prefetch(b1 + half1);
        if LEVELS >= 2 {
            let half2 = (n1 - half1) / 2;
            keys.prefetch(b1 + half2);
            keys.prefetch(b1 + half1 + half2);
        }
    }
}

/// `if c { a } else { b }` without a branch: arithmetic on a mask that LLVM cannot see through.
///
/// A plain `if` (or `a * c as usize`) becomes a `select`, and on x86-64 LLVM's cmov-conversion
/// pass turns a select on a loop's critical path back into a branch, assuming it predictable,
/// which is exactly wrong for a search. (`core::hint::select_unpredictable` would say so, but
/// needs Rust 1.88; tern supports 1.85.)
#[inline(always)]
fn select(c: bool, a: usize, b: usize) -> usize {
    let mask = opaque(usize::from(c).wrapping_neg());
    b ^ ((a ^ b) & mask)
}

/// Returns `v` unchanged, but hides from the optimiser where it came from (on x86-64, whose
/// cmov-conversion pass is the problem; AArch64 keeps its `csel`s, and is not tested here).
#[inline(always)]
fn opaque(v: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let mut v = v;
        // SAFETY: the assembly is empty (a comment): it executes nothing and touches no memory,
        // stack or flags; it only makes the compiler treat `v` as an unknown value in a register.
        unsafe {
            core::arch::asm!("/* {0} */", inout(reg) v, options(pure, nomem, nostack, preserves_flags));
        }
        v
    }
    #[cfg(not(target_arch = "x86_64"))]
    v
}

/// Eytzinger layout: branch-free descent `i = 2*i + (key(i) < x)` over the 1-based tree (node
/// `i` at index `i - 1`), then the ffs trick. With `PREFETCH` = 1, each step prefetches the line
/// of node `i`'s descendants `log2(B)` levels down; with 2, the two lines one level further.
#[inline]
pub fn eytzinger_lower_bound<P: Probe + ?Sized, const PREFETCH: u8>(keys: &P, x: P::Key) -> usize {
    let n = keys.len();
    let b = keys_per_line::<P::Key>();
    let mut i = 1usize;
    while i <= n {
        if PREFETCH == 1 {
            // 1-based descendants B*i ..= B*i + B - 1 are 0-based B*i - 1 ..; index B*i is in
            // their line whether the layout is placed as `line_offset` says or on a line.
            keys.prefetch(b.wrapping_mul(i));
        } else if PREFETCH >= 2 {
            let first = (2 * b).wrapping_mul(i);
            keys.prefetch(first);
            keys.prefetch(first.wrapping_add(b));
        }
        i = 2 * i + usize::from(keys.get(i - 1) < x);
    }
    // Strip the right turns after the last left turn, and that left turn: the node reached is
    // the last one whose key was not less than x (0: there is none).
    let j = i >> (i.trailing_ones() + 1);
    if j == 0 {
        n
    } else {
        j - 1
    }
}

/// B-tree layout: descends the `(B + 1)`-ary tree of `B`-key blocks, counting in each block the
/// keys less than `x` (branch-free) and remembering the last block position that was a valid
/// answer. `keys.len()` must be a multiple of `B` = [`btree_block_len`] (the padded length of
/// [`btree_from_sorted`]); a trailing partial block is ignored. Prefetch: see the module doc.
#[inline]
pub fn btree_lower_bound<P: Probe + ?Sized, const PREFETCH: u8>(keys: &P, x: P::Key) -> usize {
    match btree_block_len::<P::Key>() {
        64 => btree_search::<P, 64, PREFETCH>(keys, x),
        32 => btree_search::<P, 32, PREFETCH>(keys, x),
        16 => btree_search::<P, 16, PREFETCH>(keys, x),
        8 => btree_search::<P, 8, PREFETCH>(keys, x),
        4 => btree_search::<P, 4, PREFETCH>(keys, x),
        2 => btree_search::<P, 2, PREFETCH>(keys, x),
        _ => btree_search::<P, 1, PREFETCH>(keys, x),
    }
}

/// [`btree_lower_bound`] for a block length known at compile time.
#[inline(always)]
fn btree_search<P: Probe + ?Sized, const B: usize, const PREFETCH: u8>(keys: &P, x: P::Key) -> usize {
    let len = keys.len();
    let blocks = len / B;
    let mut answer = len;
    let mut block = 0usize;
    while block < blocks {
        let base = block * B;
        let first_child = block * (B + 1) + 1;
        if PREFETCH == 1 {
            keys.prefetch((first_child + B / 2) * B);
        } else if PREFETCH >= 2 {
            for c in 0..=B {
                keys.prefetch((first_child + c) * B);
            }
        }
        let less = count_less::<P, B>(keys, base, x);
        answer = select(less < B, base + less, answer);
        block = first_child + less;
    }
    answer
}

/// How many of the `B` keys at `base ..` are less than `x`, branch-free. The block is copied into
/// a local array first, so that the count is a straight-line loop LLVM can vectorise (after one
/// bounds check for the whole block, which also removes the per-key checks).
///
/// Keys of 8 bytes or more are counted with scalar compares and adds instead: x86-64's baseline
/// (SSE2) has no 64-bit vector compare, and LLVM then builds a bit mask lane by lane and counts
/// it with a multiply-based popcount: twice the lookup time for cache-resident `u64` arrays
/// (measured with `tern bench search`). 4-byte keys vectorise well (16 compares, 4 SSE2 ops).
#[inline(always)]
fn count_less<P: Probe + ?Sized, const B: usize>(keys: &P, base: usize, x: P::Key) -> usize {
    if keys.len().checked_sub(B).is_none_or(|last| base > last) {
        return B;
    }
    let block: [P::Key; B] = std::array::from_fn(|j| keys.get(base + j));
    if size_of::<P::Key>() >= 8 {
        block.iter().map(|&k| opaque(usize::from(k < x))).sum()
    } else {
        block.iter().map(|&k| u32::from(k < x)).sum::<u32>() as usize
    }
}

/// The Eytzinger layout of `sorted`: `out[i - 1]` holds node `i` of the complete binary search
/// tree in BFS order (node `i`'s children are `2i` and `2i + 1`). Same length as `sorted`.
pub fn eytzinger_from_sorted<K: Copy>(sorted: &[K]) -> Vec<K> {
    let Some(&first) = sorted.first() else { return Vec::new() };
    let mut out = vec![first; sorted.len()];
    let mut rank = 0;
    eytzinger_in_order(sorted.len(), |index| {
        out[index] = sorted[rank];
        rank += 1;
    });
    out
}

/// Calls `visit` with the layout index of every node of an `n`-node Eytzinger tree, in key order
/// (in-order traversal, iterative: the successor of node `i` is the leftmost node of its right
/// subtree, or else the ancestor reached by the ffs trick).
fn eytzinger_in_order(n: usize, mut visit: impl FnMut(usize)) {
    let leftmost = |mut i: usize| {
        while 2 * i <= n {
            i *= 2;
        }
        i
    };
    let mut i = if n == 0 { 0 } else { leftmost(1) };
    while i != 0 {
        visit(i - 1);
        i = if 2 * i < n { leftmost(2 * i + 1) } else { i >> (i.trailing_ones() + 1) };
    }
}

/// The B-tree layout of `sorted`: blocks of `B` = [`btree_block_len`] keys in BFS order of a
/// complete `(B + 1)`-ary tree, filled in key order by an in-order traversal. The result is
/// [`layout_len`] long: the last block, a leaf, is padded with copies of its last real key (at
/// index `n - 1`), which a search never returns (see the module doc).
pub fn btree_from_sorted<K: Copy + Ord>(sorted: &[K]) -> Vec<K> {
    debug_assert!(sorted.is_sorted(), "btree_from_sorted needs sorted keys");
    let n = sorted.len();
    let Some(&first) = sorted.first() else { return Vec::new() };
    let mut out = vec![first; layout_len::<K>(Layout::BTree, n)];
    let mut rank = 0;
    btree_in_order(out.len(), btree_block_len::<K>(), |index| {
        if index < n {
            out[index] = sorted[rank];
            rank += 1;
        }
    });
    let last = out[n - 1];
    out[n..].fill(last);
    out
}

/// Calls `visit` with every index of a B-tree layout `len` long (a multiple of `b`), padding
/// included, in key order: for each block, child 0's subtree, key 0, child 1's subtree, key 1,
/// ..., child B's subtree.
fn btree_in_order(len: usize, b: usize, mut visit: impl FnMut(usize)) {
    fn walk(block: usize, blocks: usize, b: usize, visit: &mut dyn FnMut(usize)) {
        if block >= blocks {
            return;
        }
        let first_child = block * (b + 1) + 1;
        for c in 0..b {
            walk(first_child + c, blocks, b, visit);
            visit(block * b + c);
        }
        walk(first_child + b, blocks, b, visit);
    }
    walk(0, len / b, b, &mut visit);
}

/// The layout `layout` of `sorted` (which must be sorted): a copy for `Sorted` and `BranchFree`,
/// else [`eytzinger_from_sorted`] or [`btree_from_sorted`].
pub fn layout_from_sorted<K: Copy + Ord>(layout: Layout, sorted: &[K]) -> Vec<K> {
    match layout {
        Layout::Sorted | Layout::BranchFree => sorted.to_vec(),
        Layout::Eytzinger => eytzinger_from_sorted(sorted),
        Layout::BTree => btree_from_sorted(sorted),
    }
}

/// Maps the layout indices of a layout of `n` keys of type `K` to sorted ranks: entry `i` is the
/// sorted rank of the key at layout index `i`, and the last entry (index [`layout_len`]) maps
/// "none" to `n`. B-tree padding indices, which no search returns, map to the rank of the key
/// they copy. So for any kernel's answer `a`, `table[a]` equals
/// `sorted.partition_point(|&k| k < x)`. Panics if `n` does not fit in a `u32`.
pub fn sorted_rank_table<K>(layout: Layout, n: usize) -> Vec<u32> {
    let len = layout_len::<K>(layout, n);
    assert!(u32::try_from(len).is_ok(), "sorted_rank_table: {len} keys do not fit u32 ranks");
    let mut table = vec![0u32; len + 1];
    table[len] = n as u32;
    let mut rank = 0u32;
    match layout {
        Layout::Sorted | Layout::BranchFree => table.iter_mut().zip(0..).for_each(|(t, r)| *t = r),
        Layout::Eytzinger => eytzinger_in_order(n, |index| {
            table[index] = rank;
            rank += 1;
        }),
        Layout::BTree => btree_in_order(len, btree_block_len::<K>(), |index| {
            if index < n {
                table[index] = rank;
                rank += 1;
            } else {
                // The last block is a leaf: its padding follows the key it copies, rank - 1.
                table[index] = rank - 1;
            }
        }),
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_lengths_fill_a_cache_line() {
        assert_eq!(btree_block_len::<u64>(), 8);
        assert_eq!(btree_block_len::<u32>(), 16);
        assert_eq!(btree_block_len::<u8>(), 64);
        assert_eq!(btree_block_len::<[u8; 24]>(), 2);
        assert_eq!(btree_block_len::<[u8; 100]>(), 1);
        assert_eq!(layout_len::<u64>(Layout::BTree, 9), 16);
        assert_eq!(layout_len::<u64>(Layout::BTree, 0), 0);
        assert_eq!(layout_len::<u64>(Layout::Eytzinger, 9), 9);
    }

    #[test]
    fn eytzinger_matches_the_textbook_example() {
        // 1..=7 as a complete tree: root 4, then 2 6, then 1 3 5 7.
        let sorted: Vec<u64> = (1..=7).collect();
        assert_eq!(eytzinger_from_sorted(&sorted), [4, 2, 6, 1, 3, 5, 7]);
        let sorted: Vec<u64> = (1..=6).collect();
        assert_eq!(eytzinger_from_sorted(&sorted), [4, 2, 6, 1, 3, 5]);
        assert_eq!(sorted_rank_table::<u64>(Layout::Eytzinger, 6), [3, 1, 5, 0, 2, 4, 6]);
    }

    #[test]
    fn btree_layout_pads_the_last_leaf_with_copies() {
        // 10 keys, B = 8: a root block of 8; its first child, the last block, holds the 2
        // smallest keys and 6 copies of the larger one.
        let sorted: Vec<u64> = (0..10).collect();
        let layout = btree_from_sorted(&sorted);
        assert_eq!(layout, [2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 1, 1, 1, 1, 1, 1]);
        let table = sorted_rank_table::<u64>(Layout::BTree, 10);
        assert_eq!(table, [2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 1, 1, 1, 1, 1, 1, 10]);
        // x = 2: the leaf's real keys are all less, and so are the copies: the answer is the
        // root's key 2 (index 0), never a padding index.
        for (x, want) in [(0, 8), (1, 9), (2, 0), (3, 1), (9, 7), (10, 16)] {
            for index in [
                btree_lower_bound::<_, 0>(&layout[..], x),
                btree_lower_bound::<_, 1>(&layout[..], x),
                btree_lower_bound::<_, 2>(&layout[..], x),
            ] {
                assert_eq!(index, want, "x = {x}");
            }
        }
    }

    #[test]
    fn layouts_parse_and_print() {
        for l in Layout::ALL {
            assert_eq!(l.name().parse::<Layout>().unwrap(), l);
            assert_eq!(l.to_string(), l.name());
        }
        assert!("heap".parse::<Layout>().is_err());
    }

    #[test]
    fn prefetch_ignores_indices_out_of_range() {
        let keys = [1u64, 2, 3];
        keys[..].prefetch(3);
        keys[..].prefetch(usize::MAX);
        let empty: [AtomicU64; 0] = [];
        empty[..].prefetch(0);
    }
}
