//! The slotted node format on a page, and the node search.
//!
//! ```text
//! 0      40       104                104+16n         heap_start                          page_size
//! [header][hints][slot 0]...[slot n-1][  free  ][search array][records ...][fences]
//! ```
//!
//! * Header (40 bytes): see the `H_*` offsets.
//! * Hints (64 bytes, slot-array layouts): [`HINTS`] samples of the slot array, the top 32
//!   bits of the heads of slots `d, 2d, … 16d` with `d = count / 17`, maintained by every
//!   change while the node has at least [`HINTS_MIN`] slots and was built with hints
//!   (`FLAG_HINTS`). A search first counts the hints below the searched head (one cache line,
//!   no dependent loads) and binary-searches only the `d` or so slots between two samples: a
//!   leaf of ~100 slots (1.6 KB, 25 lines) then costs one or two slot lines instead of five or
//!   six serial misses (the hint array of LeanStore's B-tree nodes, also 16 heads). In a node
//!   (`pages.rs`) the latch and header share the first cache line and the hints fill the
//!   second, so the slot array starts on a line boundary.
//! * Slot `i` (16 bytes at `104 + 16i`), sorted by key: word 0 is the **head**, the first 8 bytes
//!   of the key after the node prefix (and the shared bytes, below) as a big-endian integer
//!   (zero-padded); word 1 holds the
//!   record's offset (u16), the key suffix length (u16) and 32 bits of payload: the child page
//!   id (inner) or the value length (u16) and value flags (u16) (leaf).
//! * Records, in the heap growing down from the end: key suffix, then (leaf) the value inline or
//!   an 8-byte overflow reference (`FLAG_OVERFLOW`).
//! * Fences: the node's key range `[lower, upper)` in full; absent means -inf / +inf. When both
//!   are present, their common prefix is the node prefix, stored once (it is the start of the
//!   lower fence) and stripped from every key.
//! * Shared bytes (`H_SHARED`): a node short of a fence (the root, and the first and last node
//!   of each level) has no prefix. If all its keys still start with the same bytes (4 or more,
//!   from its first and last key when it is built), heads are taken past them, and a search
//!   first compares the key with slot 0's first shared bytes: a key before (after) them lies
//!   before (after) every key of the node. An insert of a key that does not start with them
//!   shrinks them and rewrites the heads (order is unchanged). Invariant: every key suffix of
//!   the node starts with slot 0's first `shared` bytes, and each head is taken past them.
//!   Without this, keys such as `tenant/0000042/...` or 16-byte keys with 8 zero bytes first
//!   tie on every head of the root, and its search compares key bytes at every probe.
//! * Search array (Eytzinger and B-tree layouts): `head48 << 16 | slot` per slot, in the
//!   layout's order, rebuilt on every change; a lower bound over it gives the first slot whose
//!   head's top 48 bits reach the searched head's.
//!
//! All reads go through [`Page`], which tolerates any offset, so searching a node that a writer
//! is changing returns garbage but never faults or loops; the caller's validation rejects it.
//! Methods that change the node require the caller to hold it exclusively.

use super::search::{self, Layout};
use crate::buffer::page::{head_of, Page};
use std::cmp::Ordering;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Samples of the slot array in the hint array.
pub(crate) const HINTS: usize = 16;
/// Where the hint array starts (8-aligned: two hints per word, hint `2w` in the low half of
/// word `w`).
const H_HINTS: usize = 40;
/// Header and hint array; the slot array starts here.
pub(crate) const HEADER: usize = H_HINTS + 4 * HINTS;
/// Slots a node needs before it keeps hints (fewer: the whole array is a few lines anyway).
pub(crate) const HINTS_MIN: usize = 2 * (HINTS + 1);
pub(crate) const SLOT: usize = 16;
/// Bytes per search-array entry.
pub(crate) const SEARCH_ENTRY: usize = 8;

const H_KIND: usize = 0; // u8: 1 = leaf
const H_LEVEL: usize = 1; // u8: 0 = leaf
const H_COUNT: usize = 2; // u16
const H_PREFIX: usize = 4; // u16
const H_FLAGS: usize = 6; // u16: FENCE_* bits, FLAG_HINTS
const H_HEAP: usize = 8; // u32: lowest heap offset in use
const H_GARBAGE: usize = 12; // u32: dead heap bytes
const H_UPPER: usize = 16; // u32: upper child (inner)
const H_LOWER_OFF: usize = 20; // u16
const H_LOWER_LEN: usize = 22; // u16
const H_UPPER_OFF: usize = 24; // u16
const H_UPPER_LEN: usize = 26; // u16
const H_SEARCH_OFF: usize = 28; // u16: 0 = no search array
const H_SHARED: usize = 30; // u16: leading bytes every key suffix shares (nodes short of a fence)
const H_SEARCH_LEN: usize = 32; // u32: entries, padding included
const H_SEARCH_CAP: usize = 36; // u32: entries the array's space can hold

const FENCE_LOWER: u16 = 1;
const FENCE_UPPER: u16 = 2;
/// The node keeps its hint array (set at build; slot-array layouts only).
const FLAG_HINTS: u16 = 4;

/// Leaf value flag: the record holds an overflow reference (first page id u32, length u32).
pub(crate) const FLAG_OVERFLOW: u16 = 1;
/// Leaf value flag: the record starts with the address of a version chain (8 bytes,
/// little-endian), which the transaction layer owns (`btree::stored`). The record may be longer:
/// it keeps room for the value the chain will fold back into.
pub(crate) const FLAG_CHAIN: u16 = 2;

/// A search-array entry for "none": the B-tree layout pads its last block with it.
const SLOT_NONE: u64 = 0xFFFF;

/// What a leaf slot carries besides its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ValueRef {
    pub off: usize,
    pub len: usize,
    pub flags: u16,
}

/// A node's view of its page.
#[derive(Clone, Copy)]
pub(crate) struct NodeRef<'a> {
    pub page: &'a Page,
}

impl<'a> NodeRef<'a> {
    pub(crate) fn new(page: &'a Page) -> NodeRef<'a> {
        NodeRef { page }
    }

    // ---- header ----

    #[inline]
    pub(crate) fn is_leaf(self) -> bool {
        self.page.uint_at(H_KIND, 1) == 1
    }

    #[inline]
    pub(crate) fn level(self) -> u8 {
        self.page.uint_at(H_LEVEL, 1) as u8
    }

    /// The slot count, capped at what fits in the page (garbage-tolerant).
    #[inline]
    pub(crate) fn count(self) -> usize {
        usize::from(self.page.u16_at(H_COUNT)).min(self.max_slots())
    }

    #[inline]
    fn max_slots(self) -> usize {
        (self.page.size() - HEADER) / SLOT
    }

    #[inline]
    pub(crate) fn prefix_len(self) -> usize {
        usize::from(self.page.u16_at(H_PREFIX))
    }

    /// Leading bytes every key suffix in the node shares, past which its heads are taken (0 in
    /// a node with both fences: its prefix already holds what its keys must share).
    #[inline]
    pub(crate) fn shared_len(self) -> usize {
        usize::from(self.page.u16_at(H_SHARED))
    }

    #[inline]
    fn heap_start(self) -> usize {
        (self.page.u32_at(H_HEAP) as usize).min(self.page.size())
    }

    #[inline]
    pub(crate) fn garbage(self) -> usize {
        self.page.u32_at(H_GARBAGE) as usize
    }

    /// The child for keys at or above the last separator (inner nodes).
    #[inline]
    pub(crate) fn upper_child(self) -> u32 {
        self.page.u32_at(H_UPPER)
    }

    /// Free bytes between the slot array and the heap.
    #[inline]
    pub(crate) fn free_space(self) -> usize {
        self.heap_start().saturating_sub(HEADER + SLOT * self.count())
    }

    /// Bytes a rebuild of the node's entries would need besides the header: slots, live
    /// records, fences and (search-array layouts) a search array sized afresh, whatever spare
    /// capacity the current one kept after removals.
    pub(crate) fn used_space(self, layout: Layout) -> usize {
        self.content_space() + search_bytes(layout, self.count())
    }

    /// Whether rebuilding the node would make room for one more entry with a key of `key_len`
    /// bytes and a payload of `value_len` bytes. Exact enough never to say yes when the entry
    /// would still not fit in place after the rebuild (a writer would rebuild forever): when
    /// this holds, the rebuilt node's search array has room for exactly one more entry, and
    /// `content_space` never counts less than a rebuild keeps.
    pub(crate) fn fits_after_rebuild(self, key_len: usize, value_len: usize, layout: Layout) -> bool {
        let record = key_len.saturating_sub(self.prefix_len()) + value_len;
        self.content_space() + SLOT + record + search_bytes(layout, self.count() + 1) <= self.page.size() - HEADER
    }

    /// Bytes in use but for the header and the search array: slots, live records, fences.
    fn content_space(self) -> usize {
        (self.page.size() - HEADER)
            .saturating_sub(self.free_space())
            .saturating_sub(self.garbage())
            .saturating_sub(self.search_capacity() * SEARCH_ENTRY)
    }

    /// The lower fence (inclusive), `None` for -inf.
    pub(crate) fn lower_fence(self) -> Option<Vec<u8>> {
        let mut fence = Vec::new();
        self.lower_fence_into(&mut fence).then_some(fence)
    }

    /// The upper fence (exclusive), `None` for +inf.
    pub(crate) fn upper_fence(self) -> Option<Vec<u8>> {
        let mut fence = Vec::new();
        self.upper_fence_into(&mut fence).then_some(fence)
    }

    /// Whether `key` is below the upper fence (always, for +inf), compared in place.
    pub(crate) fn below_upper_fence(self, key: &[u8]) -> bool {
        self.page.u16_at(H_FLAGS) & FENCE_UPPER == 0
            || self.page.compare(self.page.u16_at(H_UPPER_OFF).into(), self.page.u16_at(H_UPPER_LEN).into(), key)
                == std::cmp::Ordering::Greater
    }

    /// Whether `key` lies within the node's fences (lower fence <= key < upper fence), compared
    /// in place. Safe on an unvalidated read (garbage gives a wrong answer, not a panic).
    pub(crate) fn within_fences(self, key: &[u8]) -> bool {
        let above_lower = self.page.u16_at(H_FLAGS) & FENCE_LOWER == 0
            || self.page.compare(self.page.u16_at(H_LOWER_OFF).into(), self.page.u16_at(H_LOWER_LEN).into(), key)
                != std::cmp::Ordering::Greater;
        above_lower && self.below_upper_fence(key)
    }

    /// Appends the lower fence to `out`; false (nothing appended) for -inf.
    pub(crate) fn lower_fence_into(self, out: &mut Vec<u8>) -> bool {
        let has = self.page.u16_at(H_FLAGS) & FENCE_LOWER != 0;
        if has {
            self.page.read_into(self.page.u16_at(H_LOWER_OFF).into(), self.page.u16_at(H_LOWER_LEN).into(), out);
        }
        has
    }

    /// Appends the upper fence to `out`; false (nothing appended) for +inf.
    pub(crate) fn upper_fence_into(self, out: &mut Vec<u8>) -> bool {
        let has = self.page.u16_at(H_FLAGS) & FENCE_UPPER != 0;
        if has {
            self.page.read_into(self.page.u16_at(H_UPPER_OFF).into(), self.page.u16_at(H_UPPER_LEN).into(), out);
        }
        has
    }

    // ---- slots ----

    #[inline]
    fn slot_word(self, i: usize, w: usize) -> u64 {
        self.page.word((HEADER + SLOT * i) / 8 + w)
    }

    #[inline]
    pub(crate) fn head(self, i: usize) -> u64 {
        self.slot_word(i, 0)
    }

    /// Slot `i`'s record offset, key suffix length and payload (one load of its word 1).
    #[inline]
    fn slot_record(self, i: usize) -> (usize, usize, u32) {
        let w = self.slot_word(i, 1);
        ((w & 0xFFFF) as usize, (w >> 16 & 0xFFFF) as usize, (w >> 32) as u32)
    }

    #[inline]
    fn key_off(self, i: usize) -> usize {
        self.slot_record(i).0
    }

    #[inline]
    fn key_len(self, i: usize) -> usize {
        self.slot_record(i).1
    }

    #[inline]
    fn payload(self, i: usize) -> u32 {
        self.slot_record(i).2
    }

    /// The child of slot `i`, or the upper child for `i == count` (inner nodes).
    #[inline]
    pub(crate) fn child(self, i: usize) -> u32 {
        if i >= self.count() {
            self.upper_child()
        } else {
            self.payload(i)
        }
    }

    /// Where slot `i`'s value lives (leaf nodes).
    #[inline]
    pub(crate) fn value_ref(self, i: usize) -> ValueRef {
        let p = self.payload(i);
        ValueRef { off: self.key_off(i) + self.key_len(i), len: (p & 0xFFFF) as usize, flags: (p >> 16) as u16 }
    }

    /// Appends slot `i`'s key as stored (without the node prefix) and the bytes stored after it
    /// (an inline value, a chain id or an overflow reference) to `out` in one copy; returns the
    /// stored key's length and the value's flags.
    #[inline]
    pub(crate) fn record_into(self, i: usize, out: &mut Vec<u8>) -> (usize, u16) {
        let (off, key_len, p) = self.slot_record(i);
        self.page.read_into(off, key_len + (p & 0xFFFF) as usize, out);
        (key_len, (p >> 16) as u16)
    }

    /// Appends slot `i`'s full key (prefix included) to `out`.
    pub(crate) fn key_into(self, i: usize, out: &mut Vec<u8>) {
        self.prefix_into(out);
        self.page.read_into(self.key_off(i), self.key_len(i), out);
    }

    /// Slot `i`'s full key.
    pub(crate) fn key(self, i: usize) -> Vec<u8> {
        let mut k = Vec::new();
        self.key_into(i, &mut k);
        k
    }

    /// Appends the node prefix to `out`.
    pub(crate) fn prefix_into(self, out: &mut Vec<u8>) {
        self.page.read_into(self.page.u16_at(H_LOWER_OFF).into(), self.prefix_len(), out);
    }

    /// Appends slot `i`'s value bytes as stored (inline value, or the overflow reference).
    pub(crate) fn value_into(self, i: usize, out: &mut Vec<u8>) {
        let v = self.value_ref(i);
        self.page.read_into(v.off, v.len, out);
    }

    /// The overflow reference (first page, total length) of slot `i`.
    pub(crate) fn overflow_ref(self, i: usize) -> (u32, usize) {
        let v = self.value_ref(i);
        (self.page.u32_at(v.off), self.page.u32_at(v.off + 4) as usize)
    }

    /// Compares slot `i`'s key suffix with `suffix` (a key with the node prefix removed).
    fn cmp_suffix(self, i: usize, suffix: &[u8]) -> Ordering {
        self.page.compare(self.key_off(i), self.key_len(i), suffix)
    }

    /// [`cmp_suffix`](Self::cmp_suffix) for a slot whose head equals `suffix`'s, where `suffix`
    /// starts with the node's shared bytes: when both are at least `skip` (shared bytes + 8)
    /// long their first `skip` bytes are equal, so only the rest is compared.
    #[inline]
    fn cmp_suffix_after_head(self, i: usize, suffix: &[u8], skip: usize) -> Ordering {
        let (off, len, _) = self.slot_record(i);
        match suffix.get(skip..) {
            Some(rest) if len >= skip => self.page.compare(off + skip, len - skip, rest),
            _ => self.page.compare(off, len, suffix),
        }
    }

    /// How `suffix` orders against the `shared` bytes every key suffix of the node starts with
    /// (read from slot 0's): `Less` (or `Greater`) puts it before (after) every key, `Equal`
    /// means it starts with them.
    /// Out of line and cold: most nodes share nothing, and their search stays small enough to
    /// keep [`head_lower_bound`](Self::head_lower_bound) inlined. An empty node (`n == 0`)
    /// shares nothing: `Equal`.
    #[cold]
    #[inline(never)]
    fn cmp_shared(self, suffix: &[u8], shared: usize, n: usize) -> Ordering {
        if n == 0 {
            return Ordering::Equal;
        }
        let (off, _, _) = self.slot_record(0);
        // Stored bytes against the key's first `shared` (or fewer, if it is shorter: then it
        // sorts before them, as the stored side is longer).
        self.page.compare(off, shared, &suffix[..shared.min(suffix.len())]).reverse()
    }

    /// The length of the common prefix of `suffix` and the node's shared bytes.
    fn shared_prefix_with(self, suffix: &[u8], shared: usize) -> usize {
        let (off, _, _) = self.slot_record(0);
        let mut stored = Vec::with_capacity(shared);
        self.page.read_into(off, shared, &mut stored);
        common_len(&stored, suffix)
    }

    /// Shrinks the shared bytes to `shared` and rewrites every head (and the hints) from the
    /// bytes past them. Order is unchanged, so the slots stay where they are; the caller
    /// rebuilds the search array.
    fn reshare(self, shared: usize) {
        for i in 0..self.count() {
            let (off, len, _) = self.slot_record(i);
            let head = if len > shared { self.page.head_at(off + shared, len - shared) } else { 0 };
            self.page.set_word((HEADER + SLOT * i) / 8, head);
        }
        self.page.set_u16(H_SHARED, shared as u16);
        self.update_hints(0, 0);
    }

    /// The first slot whose head is not the head of its key past the shared bytes, or whose
    /// key does not start with them (for checks).
    pub(crate) fn stale_head(self) -> Option<usize> {
        let shared = self.shared_len();
        let mut first = Vec::new();
        if self.count() > 0 {
            let (off, _, _) = self.slot_record(0);
            self.page.read_into(off, shared, &mut first);
        }
        (0..self.count()).find(|&i| {
            let (off, len, _) = self.slot_record(i);
            let mut key = Vec::new();
            self.page.read_into(off, len, &mut key);
            !key.starts_with(&first) || self.head(i) != head_of(key.get(shared..).unwrap_or(&[]))
        })
    }

    /// Whether slot `i` holds exactly `key` (a key within the node's fences, see
    /// [`search`](Self::search)).
    pub(crate) fn key_equals(self, i: usize, key: &[u8]) -> bool {
        i < self.count() && self.cmp_suffix(i, self.strip_prefix(key)) == Ordering::Equal
    }

    // ---- search ----

    /// `key` without the node prefix.
    ///
    /// Precondition: `key` lies within the node's fences (`lower <= key <= upper`), as every
    /// key routed to a node by its parent does; every such key starts with the fences' common
    /// prefix, so the prefix bytes, stored at the far end of the page, are never read (that
    /// saves a cache miss per node visited). A key outside the fences (only ever seen by an
    /// optimistic reader of a node that changed under it, which validation then rejects) gets
    /// an in-bounds, meaningless answer.
    #[inline]
    fn strip_prefix(self, key: &'_ [u8]) -> &'_ [u8] {
        &key[self.prefix_len().min(key.len())..]
    }

    /// The first slot whose key is `>= key` (`strict`: `> key`), or `count`. `key` must lie
    /// within the node's fences (see [`strip_prefix`](Self::strip_prefix)).
    #[inline]
    pub(crate) fn search(self, key: &[u8], strict: bool, layout: Layout, prefetch: u8) -> usize {
        self.search_with(key, strict, layout, prefetch).0
    }

    /// The first slot whose key is `>= key`, and whether it holds exactly `key` (a point
    /// lookup: one search, no second comparison of the key).
    #[inline]
    pub(crate) fn find(self, key: &[u8], layout: Layout, prefetch: u8) -> (usize, bool) {
        self.search_with(key, false, layout, prefetch)
    }

    /// [`search`](Self::search), and whether the slot found holds exactly `key` (never, for
    /// `strict`).
    #[inline]
    fn search_with(self, key: &[u8], strict: bool, layout: Layout, prefetch: u8) -> (usize, bool) {
        let n = self.count();
        let suffix = self.strip_prefix(key);
        // A node short of a fence (the root, the tree's first and last nodes at each level) has
        // no prefix; if its keys share leading bytes all the same, its heads start past them.
        // Kept off the common path: with nothing shared the search is the one before.
        let mut shared = self.shared_len();
        if shared > 0 {
            match self.cmp_shared(suffix, shared, n) {
                Ordering::Less => return (0, false),
                Ordering::Greater => return (n, false),
                Ordering::Equal if n == 0 => shared = 0,
                Ordering::Equal => {}
            }
        }
        let h = head_of(suffix.get(shared..).unwrap_or(&[]));
        let first = self.head_lower_bound(n, h, layout, prefetch);
        if first >= n {
            return (n, false);
        }
        if prefetch > 0 {
            self.prefetch_record(first);
        }
        // Heads tie (or, for 48-bit layouts, may still be below): the answer is almost always
        // `first` itself or just after it, so step forward through the run, and only if the
        // run is long (keys sharing 8+ bytes after the prefix) binary-search the rest.
        // `cmp(i)`: slot i's key against `key`.
        let cmp = |i: usize| match self.head(i).cmp(&h) {
            Ordering::Equal => self.cmp_suffix_after_head(i, suffix, shared + 8),
            order => order,
        };
        // An equal key is past the bound only for `>=` (non-strict).
        let beyond = |order: Ordering| order == Ordering::Greater || (order == Ordering::Equal && !strict);
        const LINEAR_STEPS: usize = 4;
        let mut lo = first;
        while lo < n && lo < first + LINEAR_STEPS {
            let order = cmp(lo);
            if beyond(order) {
                return (lo, order == Ordering::Equal);
            }
            lo += 1;
        }
        let mut hi = n;
        let mut exact = false;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let order = cmp(mid);
            if beyond(order) {
                hi = mid;
                exact = order == Ordering::Equal;
            } else {
                lo = mid + 1;
            }
        }
        // `lo` is the last `hi` set, if any was, and `exact` is its comparison; otherwise it is
        // `n` or a slot never compared, which is not `key` (every slot before it is below).
        (lo, exact && lo < n)
    }

    /// The first slot whose head is at least `h` (exactly, for the slot-array layouts; by the
    /// top 48 bits, for the search-array layouts).
    #[inline(always)]
    fn head_lower_bound(self, n: usize, h: u64, layout: Layout, prefetch: u8) -> usize {
        match layout {
            Layout::Sorted | Layout::BranchFree => {
                let (lo, hi) = self.hint_range(n, h);
                let heads = SlotHeads { page: self.page, start: lo, n: hi - lo };
                lo + search::lower_bound(layout, &heads, h, prefetch)
            }
            Layout::Eytzinger | Layout::BTree => {
                let (off, len) = (usize::from(self.page.u16_at(H_SEARCH_OFF)), self.page.u32_at(H_SEARCH_LEN) as usize);
                let words = self.page.words();
                let start = (off / 8).min(words.len());
                let entries = &words[start..(start + len).min(words.len())];
                let r = search::lower_bound(layout, entries, (h >> 16) << 16, prefetch);
                if r >= entries.len() {
                    return n;
                }
                let slot = entries[r].load(std::sync::atomic::Ordering::Relaxed) & 0xFFFF;
                if slot == SLOT_NONE {
                    n
                } else {
                    (slot as usize).min(n)
                }
            }
        }
    }

    /// Slots `lo..hi` (with `lo <= hi <= n`) such that the first slot whose head is at least
    /// `h` lies in `lo..=hi`: from the hints, if the node keeps them, else `0..n`.
    #[inline]
    fn hint_range(self, n: usize, h: u64) -> (usize, usize) {
        let d = hint_spacing(n);
        if d == 0 || !self.has_hints() {
            return (0, n);
        }
        // Hint j samples slot (j + 1) * d. A hint below h's top 32 bits means that slot's head
        // is below h (the answer lies after it); a hint above means the slot's head is above h
        // (the answer is at or before it); an equal hint decides nothing. The hints are sorted,
        // so counting both is enough, with no branch on the data.
        let Some(words) = self.page.words().get(H_HINTS / 8..H_HINTS / 8 + HINTS / 2) else {
            return (0, n);
        };
        let mut hints = [0u64; HINTS / 2];
        for (dst, word) in hints.iter_mut().zip(words) {
            *dst = word.load(std::sync::atomic::Ordering::Relaxed);
        }
        let (below, above) = count_hints(&hints, (h >> 32) as u32);
        let at_most = HINTS - above;
        let lo = below * d + usize::from(below > 0);
        let hi = if at_most == HINTS { n } else { (at_most + 1) * d };
        // Garbage (a node changing under an optimistic reader) must still give a valid range.
        let hi = hi.min(n);
        (lo.min(hi), hi)
    }

    /// Prefetches slot `i`'s record: its key suffix and, in a leaf, its inline value, up to
    /// four cache lines, so that the key comparison and the value copy that follow a search
    /// wait for one miss, not one per line.
    #[inline]
    pub(crate) fn prefetch_record(self, i: usize) {
        let (off, key_len, payload) = self.slot_record(i);
        // A leaf's payload holds its value's length in the low 16 bits.
        let len = key_len + if self.is_leaf() { (payload & 0xFFFF) as usize } else { 0 };
        // Strides of a line from the start, then the last byte: every line the bytes touch,
        // wherever the page sits relative to line boundaries.
        let end = off + len.clamp(1, 4 * search::CACHE_LINE);
        let mut at = off;
        while at < end {
            self.page.prefetch(at);
            at += search::CACHE_LINE;
        }
        self.page.prefetch(end - 1);
    }

    /// Prefetches the header and the hint array (in a node: its first two cache lines), all a
    /// search reads before the slot array.
    #[inline]
    pub(crate) fn prefetch_header(self) {
        self.page.prefetch(0);
        self.page.prefetch(HEADER - 1);
    }

    /// Whether the node keeps a hint array.
    #[inline]
    pub(crate) fn has_hints(self) -> bool {
        self.page.u16_at(H_FLAGS) & FLAG_HINTS != 0
    }

    /// The first hint that does not match the slot it samples, if any (for checks).
    pub(crate) fn stale_hint(self) -> Option<usize> {
        let d = hint_spacing(self.count());
        if !self.has_hints() || d == 0 {
            return None;
        }
        (0..HINTS).find(|&j| self.page.u32_at(H_HINTS + 4 * j) != self.hint_of((j + 1) * d))
    }

    /// The hint that samples slot `i`: its head's top 32 bits.
    fn hint_of(self, i: usize) -> u32 {
        (self.head(i) >> 32) as u32
    }

    /// Rewrites the hints that sample slots at or after `from` (all of them if the spacing
    /// changed since the node held `old_count` slots), after a change of the slot array.
    fn update_hints(self, old_count: usize, from: usize) {
        if !self.has_hints() {
            return;
        }
        let n = self.count();
        let d = hint_spacing(n);
        if d == 0 {
            return;
        }
        let first = if hint_spacing(old_count) == d { (from / d).saturating_sub(1) } else { 0 };
        for j in first..HINTS {
            self.page.set_u32(H_HINTS + 4 * j, self.hint_of((j + 1) * d));
        }
    }

    // ---- changes (exclusive holders only) ----

    /// Whether an entry with a key of `key_len` bytes and a payload of `value_len` bytes fits
    /// without rebuilding the node. (If not, the caller rebuilds with [`build`], which also
    /// reclaims garbage, or splits.)
    pub(crate) fn fits_in_place(self, key_len: usize, value_len: usize, layout: Layout) -> bool {
        self.free_space() >= self.entry_space(key_len, value_len, layout)
    }

    /// Bytes one more entry needs: slot, record, and (search-array layouts) a new search
    /// array if the current one has no spare capacity.
    pub(crate) fn entry_space(self, key_len: usize, value_len: usize, layout: Layout) -> usize {
        let record = key_len.saturating_sub(self.prefix_len()) + value_len;
        let search = if uses_search_array(layout) && self.search_capacity() < layout_len(layout, self.count() + 1) {
            search_array_bytes(layout, self.count() + 1)
        } else {
            0
        };
        SLOT + record + search
    }

    fn search_capacity(self) -> usize {
        if self.page.u16_at(H_SEARCH_OFF) == 0 {
            0
        } else {
            self.page.u32_at(H_SEARCH_CAP) as usize
        }
    }

    /// Takes `len` bytes from the heap (aligned to `align`), or `None` if they do not fit.
    fn alloc(self, len: usize, align: usize) -> Option<usize> {
        let start = self.heap_start();
        let off = (start.checked_sub(len)?) & !(align - 1);
        (off >= HEADER + SLOT * self.count()).then(|| {
            self.page.set_u32(H_HEAP, off as u32);
            off
        })
    }

    fn add_garbage(self, bytes: usize) {
        self.page.set_u32(H_GARBAGE, (self.garbage() + bytes) as u32);
    }

    fn set_count(self, n: usize) {
        self.page.set_u16(H_COUNT, n as u16);
    }

    fn write_slot(self, i: usize, head: u64, off: usize, key_len: usize, payload: u32) {
        let base = (HEADER + SLOT * i) / 8;
        self.page.set_word(base, head);
        self.page.set_word(base + 1, off as u64 | (key_len as u64) << 16 | u64::from(payload) << 32);
    }

    fn move_slots(self, from: usize, to: usize, count: usize) {
        let (words_from, words_to) = ((HEADER + SLOT * from) / 8, (HEADER + SLOT * to) / 8);
        let n = count * SLOT / 8;
        let (lo, hi) = (words_from.min(words_to), words_from.max(words_to) + n);
        // One range check for the whole move (slot arrays always lie within the page: the
        // callers hold the node exclusively and pass valid ranges).
        let ws = self.page.words().get(lo..hi);
        debug_assert!(ws.is_some(), "slots {from}..{} moved to {to} lie within the page", from + count);
        let Some(ws) = ws else { return };
        // The two ranges overlap; shared references to atomics may.
        let (src, dst) = (&ws[words_from - lo..][..n], &ws[words_to - lo..][..n]);
        let copy = |(s, d): (&AtomicU64, &AtomicU64)| d.store(s.load(Relaxed), Relaxed);
        if to > from {
            src.iter().rev().zip(dst.iter().rev()).for_each(copy);
        } else {
            src.iter().zip(dst).for_each(copy);
        }
    }

    /// Inserts `key` with `payload` at slot `pos` (keeping order); the caller checked with
    /// [`fits`](Self::fits) that it fits without a rebuild. `value` is written after the key
    /// suffix (leaf), `payload` is the child id (inner) or `len | flags << 16` (leaf).
    pub(crate) fn insert_at(self, pos: usize, key: &[u8], value: &[u8], payload: u32, layout: Layout) {
        let suffix = &key[self.prefix_len().min(key.len())..];
        let n = self.count();
        let shared = self.shared_len();
        if shared > 0 {
            // A key that does not start with the shared bytes shrinks them (heads rewritten);
            // an empty node shares nothing.
            let fits = n > 0 && self.cmp_shared(suffix, shared, n) == Ordering::Equal;
            if !fits {
                self.reshare(if n > 0 { worth_sharing(self.shared_prefix_with(suffix, shared)) } else { 0 });
            }
        }
        let off = self.alloc(suffix.len() + value.len(), 1).expect("caller checked the fit");
        self.page.write(off, suffix);
        self.page.write(off + suffix.len(), value);
        self.move_slots(pos, pos + 1, n - pos);
        self.write_slot(pos, head_of(suffix.get(self.shared_len()..).unwrap_or(&[])), off, suffix.len(), payload);
        self.set_count(n + 1);
        self.update_hints(n, pos);
        let rebuilt = self.rebuild_search_array(layout, Fresh::Spare);
        debug_assert!(rebuilt, "entry_space reserves room for a fresh search array");
    }

    /// Removes slot `pos`; its record becomes garbage.
    pub(crate) fn remove_at(self, pos: usize, layout: Layout) {
        let n = self.count();
        let record = self.key_len(pos) + if self.is_leaf() { self.value_ref(pos).len } else { 0 };
        self.add_garbage(record);
        self.move_slots(pos + 1, pos, n - pos - 1);
        self.set_count(n - 1);
        self.update_hints(n, pos);
        let rebuilt = self.rebuild_search_array(layout, Fresh::Spare);
        debug_assert!(rebuilt, "a smaller array is rebuilt in place");
    }

    /// Points slot `i` (or the upper child, for `i == count`) at `child` (inner nodes).
    /// Overwrites the start of leaf slot `i`'s value with `bytes` and sets its length to `len`
    /// and its flags to `flags`, in place: the record keeps its room up to `len` (at least
    /// `bytes.len()`, at most the current length); the rest becomes garbage.
    pub(crate) fn set_value_in_place(self, i: usize, bytes: &[u8], len: usize, flags: u16) {
        let v = self.value_ref(i);
        debug_assert!(bytes.len() <= len && len <= v.len, "the value fits its record");
        self.page.write(v.off, bytes);
        self.add_garbage(v.len - len);
        let w = (HEADER + SLOT * i) / 8 + 1;
        let payload = len as u32 | u32::from(flags) << 16;
        self.page.set_word(w, self.page.word(w) & 0xFFFF_FFFF | u64::from(payload) << 32);
    }

    /// Appends the chain address at the start of leaf slot `i`'s value (8 bytes) to `out`.
    pub(crate) fn chain_into(self, i: usize, out: &mut Vec<u8>) {
        self.page.read_into(self.value_ref(i).off, 8, out);
    }

    /// The chain id at the start of leaf slot `i`'s value (8 bytes, little-endian).
    pub(crate) fn chain_id(self, i: usize) -> u64 {
        self.page.load8(self.value_ref(i).off)
    }

    pub(crate) fn set_child(self, i: usize, child: u32) {
        if i >= self.count() {
            self.page.set_u32(H_UPPER, child);
        } else {
            let w = (HEADER + SLOT * i) / 8 + 1;
            self.page.set_word(w, self.page.word(w) & 0xFFFF_FFFF | u64::from(child) << 32);
        }
    }

    /// Writes the search array for the current slots (search-array layouts; a no-op
    /// otherwise): in place while its capacity suffices (always after a removal), else in fresh
    /// heap space sized as `fresh` says, the old array becoming garbage. Returns false if it
    /// does not fit.
    fn rebuild_search_array(self, layout: Layout, fresh: Fresh) -> bool {
        if !uses_search_array(layout) {
            return true;
        }
        let n = self.count();
        let sorted: Vec<u64> = (0..n).map(|i| (self.head(i) >> 16) << 16 | i as u64).collect();
        let entries = search::layout_from_sorted(layout, &sorted);
        let (old_off, old_cap) = (usize::from(self.page.u16_at(H_SEARCH_OFF)), self.search_capacity());
        let off = if old_off != 0 && old_cap >= entries.len() {
            old_off
        } else {
            let wanted = match fresh {
                Fresh::Spare => layout_len(layout, n + n / 4 + 8),
                Fresh::OneMore => layout_len(layout, n + 1),
            };
            let attempt = |cap: usize| self.alloc(cap * SEARCH_ENTRY, 8).map(|off| (off, cap));
            let fit = attempt(wanted).or_else(|| attempt(entries.len()));
            let Some((off, cap)) = fit else { return false };
            if old_off != 0 {
                self.add_garbage(old_cap * SEARCH_ENTRY);
            }
            self.page.set_u32(H_SEARCH_CAP, cap as u32);
            off
        };
        for (k, e) in entries.iter().enumerate() {
            self.page.set_word(off / 8 + k, *e);
        }
        self.page.set_u16(H_SEARCH_OFF, off as u16);
        self.page.set_u32(H_SEARCH_LEN, entries.len() as u32);
        true
    }
}

/// How much a freshly allocated search array holds (or just the slots, if that does not fit).
#[derive(Clone, Copy)]
enum Fresh {
    /// A quarter more than the slots (plus 8), so the next inserts rebuild it in place. For
    /// changes in place.
    Spare,
    /// The slots and one more, exactly. For a node built afresh: the space a rebuild leaves is
    /// then known in advance ([`NodeRef::fits_after_rebuild`]).
    OneMore,
}

/// Search-array entries for `n` slots (the B-tree layout pads to whole blocks).
fn layout_len(layout: Layout, n: usize) -> usize {
    search::layout_len::<u64>(layout, n)
}

/// Whether `layout` searches a separate array rather than the slot array.
pub(crate) fn uses_search_array(layout: Layout) -> bool {
    !layout.searches_slots()
}

/// Whether a node built in `layout` for a tree configured with `hints` keeps a hint array.
pub(crate) fn keeps_hints(layout: Layout, hints: bool) -> bool {
    hints && layout.searches_slots()
}

/// Bytes of a search array for `n` slots, with alignment slack.
pub(crate) fn search_array_bytes(layout: Layout, n: usize) -> usize {
    layout_len(layout, n) * SEARCH_ENTRY + 8
}

/// Bytes a node of `n` slots in `layout` needs for its search array (0: none).
fn search_bytes(layout: Layout, n: usize) -> usize {
    if uses_search_array(layout) {
        search_array_bytes(layout, n)
    } else {
        0
    }
}

/// How many of the hints (two per word, low half first) are below `h32` and how many above
/// it. SSE2 (part of the x86-64 baseline): four 32-bit lanes per compare, four compares per
/// side, where scalar code would take 32 compare-and-adds.
#[cfg(target_arch = "x86_64")]
#[inline]
fn count_hints(hints: &[u64; HINTS / 2], h32: u32) -> (usize, usize) {
    use core::arch::x86_64::*;
    // SAFETY: SSE2 is enabled on every x86-64 target; the four unaligned 16-byte loads read
    // `hints` (64 bytes) in bounds, at offsets 0, 16, 32 and 48.
    unsafe {
        // Lanes are compared signed, so flip the sign bits of both sides: unsigned order.
        let flip = _mm_set1_epi32(i32::MIN);
        let key = _mm_xor_si128(_mm_set1_epi32(h32 as i32), flip);
        let (mut below, mut above) = (_mm_setzero_si128(), _mm_setzero_si128());
        for k in 0..HINTS / 4 {
            let v = _mm_xor_si128(_mm_loadu_si128(hints.as_ptr().add(2 * k).cast()), flip);
            // A true lane is -1: subtracting counts it.
            below = _mm_sub_epi32(below, _mm_cmpgt_epi32(key, v));
            above = _mm_sub_epi32(above, _mm_cmpgt_epi32(v, key));
        }
        let mut lanes = [0u32; 8];
        _mm_storeu_si128(lanes.as_mut_ptr().cast(), below);
        _mm_storeu_si128(lanes.as_mut_ptr().add(4).cast(), above);
        let sum = |l: &[u32]| l.iter().sum::<u32>() as usize;
        (sum(&lanes[..4]), sum(&lanes[4..]))
    }
}

/// [`count_hints`] elsewhere: one compare per hint.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn count_hints(hints: &[u64; HINTS / 2], h32: u32) -> (usize, usize) {
    let all = hints.iter().flat_map(|&w| [w as u32, (w >> 32) as u32]);
    (all.clone().filter(|&x| x < h32).count(), all.filter(|&x| x > h32).count())
}

/// The spacing of the hints over `n` slots (hint `j` samples slot `(j + 1) * d`), or 0 when
/// a node of `n` slots keeps none.
#[inline]
fn hint_spacing(n: usize) -> usize {
    if n >= HINTS_MIN {
        n / (HINTS + 1)
    } else {
        0
    }
}

/// Slots `start..start + n` of the slot array's heads, as a sequence the search kernels can
/// probe in place.
struct SlotHeads<'a> {
    page: &'a Page,
    start: usize,
    n: usize,
}

impl search::Probe for SlotHeads<'_> {
    type Key = u64;

    #[inline]
    fn len(&self) -> usize {
        self.n
    }

    #[inline]
    fn get(&self, i: usize) -> u64 {
        self.page.word((HEADER + SLOT * (self.start + i)) / 8)
    }

    #[inline]
    fn prefetch(&self, i: usize) {
        if i < self.n {
            self.page.prefetch(HEADER + SLOT * (self.start + i));
        }
    }
}

/// Everything needed to write a fresh node: kind, fences, entries in key order.
pub(crate) struct NodeSpec<'a> {
    pub leaf: bool,
    pub level: u8,
    pub lower: Option<&'a [u8]>,
    pub upper: Option<&'a [u8]>,
    /// Inner nodes: the child for keys at or above the last separator.
    pub upper_child: u32,
}

/// One entry of a node being rebuilt: full key, then value bytes (leaf; the overflow reference
/// when `flags` has [`FLAG_OVERFLOW`]) or child id (inner).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub flags: u16,
    pub child: u32,
}

impl Entry {
    /// Reads slot `i` of `node` as an entry.
    pub(crate) fn read(node: NodeRef<'_>, i: usize) -> Entry {
        if node.is_leaf() {
            let mut value = Vec::new();
            node.value_into(i, &mut value);
            Entry { key: node.key(i), value, flags: node.value_ref(i).flags, child: 0 }
        } else {
            Entry { key: node.key(i), value: Vec::new(), flags: 0, child: node.child(i) }
        }
    }

    /// Every entry of `node`, in order.
    pub(crate) fn read_all(node: NodeRef<'_>) -> Vec<Entry> {
        (0..node.count()).map(|i| Entry::read(node, i)).collect()
    }
}

/// What [`build`] needs of an entry: an owned [`Entry`] or an [`EntryRef`] into a buffer.
pub(crate) trait EntryView {
    /// The full key.
    fn key(&self) -> &[u8];
    /// The value bytes (leaf).
    fn value(&self) -> &[u8];
    /// The value's flags (leaf).
    fn flags(&self) -> u16;
    /// The child id (inner).
    fn child(&self) -> u32;
}

impl EntryView for Entry {
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn value(&self) -> &[u8] {
        &self.value
    }
    fn flags(&self) -> u16 {
        self.flags
    }
    fn child(&self) -> u32 {
        self.child
    }
}

/// An entry whose key and value are slices of one buffer ([`read_refs`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct EntryRef<'b> {
    pub key: &'b [u8],
    pub value: &'b [u8],
    pub flags: u16,
    pub child: u32,
}

impl EntryView for EntryRef<'_> {
    fn key(&self) -> &[u8] {
        self.key
    }
    fn value(&self) -> &[u8] {
        self.value
    }
    fn flags(&self) -> u16 {
        self.flags
    }
    fn child(&self) -> u32 {
        self.child
    }
}

/// Every entry of `node`, in order, read into `buf` (cleared first) with one allocation for
/// all of them, not two per entry as [`Entry::read_all`]: what a split works from.
pub(crate) fn read_refs<'b>(node: NodeRef<'_>, buf: &'b mut Vec<u8>) -> Vec<EntryRef<'b>> {
    buf.clear();
    let leaf = node.is_leaf();
    // (key start, key end, value end, flags, child) per entry, then slices of the filled buffer.
    let mut spans = Vec::with_capacity(node.count());
    for i in 0..node.count() {
        let start = buf.len();
        let (key_end, flags, child) = if leaf {
            // Key and value in one copy after the prefix.
            node.prefix_into(buf);
            let prefix_end = buf.len();
            let (suffix, flags) = node.record_into(i, buf);
            (prefix_end + suffix, flags, 0)
        } else {
            node.key_into(i, buf);
            (buf.len(), 0, node.child(i))
        };
        spans.push((start, key_end, buf.len(), flags, child));
    }
    let buf = &buf[..];
    spans
        .into_iter()
        .map(|(start, key_end, end, flags, child)| EntryRef {
            key: &buf[start..key_end],
            value: &buf[key_end..end],
            flags,
            child,
        })
        .collect()
}

/// The length of the common prefix of `a` and `b`.
pub(crate) fn common_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The prefix shared by every key in `[lower, upper)`: the fences' common prefix, when both
/// exist.
pub(crate) fn common_prefix_len(lower: Option<&[u8]>, upper: Option<&[u8]>) -> usize {
    match (lower, upper) {
        (Some(l), Some(u)) => common_len(l, u),
        _ => 0,
    }
}

/// The leading bytes every key of a node built from `spec` and `entries` shares past the
/// prefix: in a node short of a fence (which has no prefix) with two keys or more, the common
/// prefix of its first and last keys (sorted, so of all) if [`worth_sharing`]; 0 otherwise.
fn shared_len_of<E: EntryView>(spec: &NodeSpec<'_>, entries: &[E], prefix: usize) -> usize {
    if spec.lower.is_some() && spec.upper.is_some() {
        return 0;
    }
    match entries {
        [first, .., last] => worth_sharing(common_len(&first.key()[prefix..], &last.key()[prefix..])),
        _ => 0,
    }
}

/// Fewest shared bytes a node keeps its heads past (fewer: none). Heads of 8 bytes tie only
/// between keys that share 8; a node whose keys share a byte or two (hashed keys at the edges
/// of the tree) gains nothing and would pay a comparison of them per search.
const SHARED_MIN: usize = 4;

/// `shared` if a node should keep its heads past that many shared bytes, else 0.
fn worth_sharing(shared: usize) -> usize {
    if shared >= SHARED_MIN {
        shared.min(usize::from(u16::MAX))
    } else {
        0
    }
}

/// Bytes a node built from `spec` and `entries` needs (header included).
pub(crate) fn required_space<E: EntryView>(spec: &NodeSpec<'_>, entries: &[E], layout: Layout) -> usize {
    let record_bytes = entries.iter().map(|e| e.key().len() + e.value().len()).sum();
    required_space_of(spec, entries.len(), record_bytes, layout)
}

/// [`required_space`] for `count` entries whose keys and values take `record_bytes` in all
/// (each key at least as long as the fences' common prefix, as keys between them are).
pub(crate) fn required_space_of(spec: &NodeSpec<'_>, count: usize, record_bytes: usize, layout: Layout) -> usize {
    let prefix = common_prefix_len(spec.lower, spec.upper);
    let fences = spec.lower.map_or(0, <[u8]>::len) + spec.upper.map_or(0, <[u8]>::len);
    HEADER + SLOT * count + record_bytes - prefix * count + fences + search_bytes(layout, count)
}

/// Writes a fresh node into `page` (which the caller holds exclusively, or owns): header,
/// fences, records and slots, and the search array. The entries must fit
/// ([`required_space`]) and lie in `[lower, upper)`. The node is built aside and copied in
/// whole (its entries may have been read from `page`).
pub(crate) fn build<E: EntryView>(page: &Page, spec: &NodeSpec<'_>, entries: &[E], layout: Layout, hints: bool) {
    scratch::with(page.size(), |scratch| {
        build_zeroed(scratch, spec, entries, layout, hints);
        page.copy_from(scratch);
    });
}

/// The page [`build`] builds aside in: one per thread, kept between builds (a split built two
/// nodes in pages allocated and zeroed for it, a malloc of a page each, at the allocator's
/// cost for large blocks among many small ones). Each thread that ever rebuilt a node keeps
/// one page (at most 64 KiB) until it ends.
mod scratch {
    use crate::buffer::page::Page;
    use std::cell::RefCell;

    std::thread_local! {
        static SCRATCH: RefCell<Option<Box<Page>>> = const { RefCell::new(None) };
    }

    /// Runs `f` with an all-zero page of `size` bytes: the thread's, or a new one while the
    /// thread's is in use (or of another size, or the thread is ending).
    pub(super) fn with(size: usize, f: impl FnOnce(&Page)) {
        let kept = SCRATCH.try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.take())).ok().flatten();
        let page = match kept {
            Some(page) if page.size() == size => {
                page.zero();
                page
            }
            _ => Page::boxed(size),
        };
        f(&page);
        let _ = SCRATCH.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                *s = Some(page);
            }
        });
    }
}

/// [`build`] straight into `page`, which must be all zeros and reachable by nobody else yet (a
/// page just allocated, as a bulk load's are): no copy.
pub(crate) fn build_zeroed<E: EntryView>(page: &Page, spec: &NodeSpec<'_>, entries: &[E], layout: Layout, hints: bool) {
    debug_assert!(page.words().iter().all(|w| w.load(std::sync::atomic::Ordering::Relaxed) == 0));
    let node = NodeRef::new(page);
    page.set_uint(H_KIND, 1, u64::from(spec.leaf));
    page.set_uint(H_LEVEL, 1, u64::from(spec.level));
    page.set_u32(H_HEAP, page.size() as u32);
    page.set_u32(H_UPPER, spec.upper_child);
    let mut flags = 0;
    if let Some(upper) = spec.upper {
        let off = node.alloc(upper.len(), 1).expect("fits");
        page.write(off, upper);
        page.set_u16(H_UPPER_OFF, off as u16);
        page.set_u16(H_UPPER_LEN, upper.len() as u16);
        flags |= FENCE_UPPER;
    }
    if let Some(lower) = spec.lower {
        let off = node.alloc(lower.len(), 1).expect("fits");
        page.write(off, lower);
        page.set_u16(H_LOWER_OFF, off as u16);
        page.set_u16(H_LOWER_LEN, lower.len() as u16);
        flags |= FENCE_LOWER;
    }
    if keeps_hints(layout, hints) {
        flags |= FLAG_HINTS;
    }
    page.set_u16(H_FLAGS, flags);
    let prefix = common_prefix_len(spec.lower, spec.upper);
    page.set_u16(H_PREFIX, prefix as u16);
    let shared = shared_len_of(spec, entries, prefix);
    page.set_u16(H_SHARED, shared as u16);
    for (i, e) in entries.iter().enumerate() {
        let (key, value) = (e.key(), e.value());
        debug_assert!(key.len() >= prefix + shared);
        let suffix = &key[prefix..];
        let off = node.alloc(suffix.len() + value.len(), 1).expect("required_space checked by the caller");
        page.write(off, suffix);
        page.write(off + suffix.len(), value);
        let payload = if spec.leaf { value.len() as u32 | u32::from(e.flags()) << 16 } else { e.child() };
        node.set_count(i + 1);
        node.write_slot(i, head_of(&suffix[shared..]), off, suffix.len(), payload);
    }
    node.update_hints(0, 0);
    let rebuilt = node.rebuild_search_array(layout, Fresh::OneMore);
    // A node without its search array would answer searches wrongly: never go on without it.
    assert!(rebuilt, "required_space counts the search array");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(lower: Option<&[u8]>, upper: Option<&[u8]>, keys: &[&[u8]], layout: Layout) -> Box<Page> {
        let page = Page::boxed(4096);
        let spec = NodeSpec { leaf: true, level: 0, lower, upper, upper_child: 0 };
        let entries: Vec<Entry> =
            keys.iter().map(|k| Entry { key: k.to_vec(), value: k.repeat(2), flags: 0, child: 0 }).collect();
        assert!(required_space(&spec, &entries, layout) <= 4096);
        build(&page, &spec, &entries, layout, true);
        page
    }

    const LAYOUTS: [Layout; 4] = [Layout::Sorted, Layout::BranchFree, Layout::Eytzinger, Layout::BTree];

    #[test]
    fn entries_read_into_one_buffer_are_the_entries() {
        for layout in LAYOUTS {
            let keys: [&[u8]; 5] = [b"pre-a", b"pre-bb", b"pre-c", b"pre-d\xff", b"pre-zzzzzzzzzzzzzzzzzz"];
            let page = leaf(Some(b"pre-"), Some(b"pre-~"), &keys, layout);
            let inner = Page::boxed(4096);
            let spec = NodeSpec { leaf: false, level: 1, lower: None, upper: None, upper_child: 9 };
            let children: Vec<Entry> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| Entry { key: k.to_vec(), value: Vec::new(), flags: 0, child: 100 + i as u32 })
                .collect();
            build(&inner, &spec, &children, layout, true);
            let mut buf = b"left over".to_vec();
            for page in [&page, &inner] {
                let node = NodeRef::new(page);
                let owned = Entry::read_all(node);
                let refs = read_refs(node, &mut buf);
                assert_eq!(owned.len(), keys.len());
                let as_owned: Vec<Entry> = refs
                    .iter()
                    .map(|e| Entry { key: e.key.to_vec(), value: e.value.to_vec(), flags: e.flags, child: e.child })
                    .collect();
                assert_eq!(as_owned, owned, "{layout:?}");
            }
        }
    }

    #[test]
    fn search_finds_lower_and_upper_bounds_in_every_layout() {
        let keys: Vec<Vec<u8>> = (0..60u32).map(|i| format!("key{:05}", i * 3).into_bytes()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        for layout in LAYOUTS {
            for (lower, upper) in [(None, None), (Some(&b"key"[..]), Some(&b"kez"[..]))] {
                let page = leaf(lower, upper, &refs, layout);
                let node = NodeRef::new(&page);
                assert_eq!(node.count(), keys.len());
                for q in 0..200u32 {
                    let probe = format!("key{q:05}").into_bytes();
                    let want_ge = keys.partition_point(|k| k < &probe);
                    let want_gt = keys.partition_point(|k| k <= &probe);
                    for pf in 0..=2 {
                        assert_eq!(node.search(&probe, false, layout, pf), want_ge, "{layout:?} {q}");
                        let exact = keys.binary_search(&probe).is_ok();
                        assert_eq!(node.find(&probe, layout, pf), (want_ge, exact), "{layout:?} {q}");
                        assert_eq!(node.search(&probe, true, layout, pf), want_gt, "{layout:?} {q}");
                    }
                }
                for (i, k) in keys.iter().enumerate() {
                    assert_eq!(node.key(i), *k);
                    assert!(node.key_equals(i, k));
                    let mut v = Vec::new();
                    node.value_into(i, &mut v);
                    assert_eq!(v, k.repeat(2));
                }
            }
        }
    }

    #[test]
    fn hints_narrow_the_search_without_changing_its_answer() {
        // Heads that differ in their top 32 bits, that tie there but differ below, and that tie
        // entirely: the hints decide, decide nothing, or are ignored.
        let sets: [Vec<Vec<u8>>; 3] = [
            (0..150u32).map(|i| (i * 40_503).to_be_bytes().to_vec()).collect(),
            (0..150u32).map(|i| format!("abcd{:04}", i * 5).into_bytes()).collect(),
            (0..150u32).map(|i| format!("abcdefgh{:04}", i * 5).into_bytes()).collect(),
        ];
        for mut keys in sets {
            keys.sort();
            for n in [0, 1, HINTS_MIN - 1, HINTS_MIN, 51, 150] {
                let refs: Vec<&[u8]> = keys[..n].iter().map(Vec::as_slice).collect();
                for hints in [false, true] {
                    let page = Page::boxed(8192);
                    let spec = NodeSpec { leaf: true, level: 0, lower: None, upper: None, upper_child: 0 };
                    let entries: Vec<Entry> =
                        refs.iter().map(|k| Entry { key: k.to_vec(), value: vec![1], flags: 0, child: 0 }).collect();
                    build(&page, &spec, &entries, Layout::BranchFree, hints);
                    let node = NodeRef::new(&page);
                    assert_eq!(node.has_hints(), hints);
                    assert_eq!(node.stale_hint(), None);
                    let mut probes: Vec<Vec<u8>> = keys.clone();
                    probes.extend(keys.iter().map(|k| [k.as_slice(), b"\0"].concat()));
                    probes.extend([vec![0], vec![0xFF; 12], b"abcd".to_vec(), b"abce".to_vec()]);
                    for p in &probes {
                        let want = refs.partition_point(|k| *k < p.as_slice());
                        assert_eq!(node.search(p, false, Layout::BranchFree, 1), want, "n {n} hints {hints} {p:?}");
                        let exact = refs.binary_search(&p.as_slice()).is_ok();
                        assert_eq!(node.find(p, Layout::BranchFree, 1), (want, exact), "n {n} hints {hints} {p:?}");
                        let want = refs.partition_point(|k| *k <= p.as_slice());
                        assert_eq!(node.search(p, true, Layout::Sorted, 0), want, "n {n} hints {hints} {p:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn hints_are_counted_in_unsigned_order() {
        let values = [0u32, 1, 0x7FFF_FFFF, 0x8000_0000, 0x8000_0001, u32::MAX - 1, u32::MAX];
        for seed in 0..200u64 {
            let pick =
                |k: u64| values[(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> ((k * 3) % 61)) as usize % values.len()];
            let mut all: Vec<u32> = (0..HINTS as u64).map(pick).collect();
            all.sort();
            let words: [u64; HINTS / 2] =
                std::array::from_fn(|w| u64::from(all[2 * w]) | u64::from(all[2 * w + 1]) << 32);
            for &h in &values {
                let want = (all.iter().filter(|&&x| x < h).count(), all.iter().filter(|&&x| x > h).count());
                assert_eq!(count_hints(&words, h), want, "{all:x?} vs {h:x}");
            }
        }
    }

    #[test]
    fn a_rebuild_said_to_make_room_makes_it() {
        // Writers rebuild a node when `fits_after_rebuild` says so and retry: if the entry
        // still did not fit in place afterwards they would rebuild forever.
        for layout in LAYOUTS {
            for seed in 1..=30u64 {
                let mut x = seed;
                let mut next = |m: u64| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % m
                };
                let page = leaf(None, None, &[], layout);
                let node = NodeRef::new(&page);
                let (mut inserted, mut rebuilds) = (0, 0);
                loop {
                    let key: Vec<u8> = (0..1 + next(40)).map(|_| next(256) as u8).collect();
                    let value = vec![7u8; next(200) as usize];
                    let (pos, exists) = node.find(&key, layout, 0);
                    if exists {
                        continue;
                    }
                    if !node.fits_in_place(key.len(), value.len(), layout) {
                        if !node.fits_after_rebuild(key.len(), value.len(), layout) {
                            break;
                        }
                        let spec = NodeSpec { leaf: true, level: 0, lower: None, upper: None, upper_child: 0 };
                        build(&page, &spec, &Entry::read_all(node), layout, true);
                        rebuilds += 1;
                        assert!(node.fits_in_place(key.len(), value.len(), layout), "{layout:?} seed {seed}");
                    }
                    node.insert_at(pos, &key, &value, value.len() as u32, layout);
                    inserted += 1;
                    if inserted % 3 == 0 {
                        // Garbage for the next rebuild to reclaim.
                        node.remove_at(next(node.count() as u64) as usize, layout);
                    }
                }
                assert!(rebuilds > 0, "{layout:?} seed {seed}: the node filled up without a rebuild");
            }
        }
    }

    #[test]
    fn long_shared_heads_are_resolved_by_key_bytes() {
        // Keys identical in their first 12 bytes: every head ties.
        let keys: Vec<Vec<u8>> = (0..40u32).map(|i| format!("samesameSAME{i:04}").into_bytes()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        for layout in LAYOUTS {
            let page = leaf(None, None, &refs, layout);
            let node = NodeRef::new(&page);
            for q in 0..45u32 {
                let probe = format!("samesameSAME{q:04}").into_bytes();
                let want = keys.partition_point(|k| k < &probe);
                assert_eq!(node.search(&probe, false, layout, 1), want);
                // Runs of tied heads longer than the linear steps: found by the binary search.
                assert_eq!(node.find(&probe, layout, 1), (want, keys.binary_search(&probe).is_ok()));
            }
            assert_eq!(node.search(b"samesameSAME", false, layout, 0), 0);
            assert_eq!(node.search(b"samesameSAMF", false, layout, 0), keys.len());
        }
    }

    #[test]
    fn prefixes_are_stripped_and_fence_keys_land_at_the_ends() {
        let keys: [&[u8]; 3] = [b"pre-a", b"pre-m", b"pre-z"];
        for layout in LAYOUTS {
            let page = leaf(Some(b"pre-"), Some(b"pre-~"), &keys, layout);
            let node = NodeRef::new(&page);
            assert_eq!(node.prefix_len(), 4);
            assert_eq!(node.key(1), b"pre-m", "keys come back whole");
            // Keys within [lower, upper], the fences themselves included.
            assert_eq!(node.search(b"pre-", false, layout, 0), 0);
            assert_eq!(node.search(b"pre-m", false, layout, 0), 1);
            assert_eq!(node.search(b"pre-m", true, layout, 0), 2);
            assert_eq!(node.search(b"pre-~", false, layout, 0), 3);
            assert!(node.key_equals(2, b"pre-z") && !node.key_equals(2, b"pre-y"));
        }
    }

    #[test]
    fn insert_and_remove_in_place_keep_order() {
        for layout in LAYOUTS {
            let page = leaf(None, None, &[], layout);
            let node = NodeRef::new(&page);
            let mut model: Vec<Vec<u8>> = Vec::new();
            // Slot-array layouts: 90 entries, so the hints start at 34 and change spacing at 51,
            // 68 and 85. The search-array layouts leave each outgrown array behind as garbage:
            // 50 entries fit.
            let entries: u32 = if uses_search_array(layout) { 50 } else { 90 };
            for i in 0..entries {
                let k = format!("{:x}", i.wrapping_mul(2_654_435_761)).into_bytes();
                let pos = node.search(&k, false, layout, 0);
                assert_eq!(pos, model.partition_point(|m| m < &k));
                assert!(node.fits_in_place(k.len(), 3, layout), "room for {entries} small entries");
                node.insert_at(pos, &k, b"val", 3, layout);
                model.insert(pos, k);
                assert_eq!(node.stale_hint(), None, "{layout:?} after {} inserts", i + 1);
            }
            assert_eq!((0..node.count()).map(|i| node.key(i)).collect::<Vec<_>>(), model);
            while let Some(k) = model.pop() {
                let pos = node.search(&k, false, layout, 2);
                assert!(node.key_equals(pos, &k));
                node.remove_at(pos, layout);
                assert_eq!(node.count(), model.len());
                assert_eq!(node.stale_hint(), None, "{layout:?} after a removal");
            }
            assert!(node.garbage() > 0);
        }
    }
}
