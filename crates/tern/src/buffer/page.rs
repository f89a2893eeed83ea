//! A page: `page_size / 8` atomic 64-bit words, addressed by byte offset.
//!
//! Pages are read by optimistic readers while a writer may be changing them, so every byte is
//! reached through a relaxed atomic load or store (plain moves on x86-64 and AArch64): no data
//! race, hence no undefined behaviour (see `sync/hybrid.rs`). What an optimistic reader reads may
//! be inconsistent until it validates, including offsets and lengths; so **every accessor here
//! tolerates any offset and length**: bytes past the end read as zero, writes past the end are
//! ignored, and nothing panics. Writers (holding the node exclusively) always pass valid ranges.
//!
//! Bytes are stored little-endian within words, so a page's bytes in memory are its bytes in
//! order on little-endian machines, and multi-byte fields are little-endian.

use std::cmp::Ordering;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A page's memory: an unsized view of its words, so that a page can live inline at the end
/// of the structure that owns it (a B+tree node keeps its latch and its page in one
/// allocation, see `pages.rs`), or boxed on its own ([`Page::boxed`]).
#[repr(transparent)]
pub(crate) struct Page {
    words: [AtomicU64],
}

impl Page {
    /// A zeroed page of `size` bytes (a multiple of 8), on its own.
    pub(crate) fn boxed(size: usize) -> Box<Page> {
        debug_assert!(size % 8 == 0);
        let words: Box<[AtomicU64]> = (0..size / 8).map(|_| AtomicU64::new(0)).collect();
        // SAFETY: `Page` is `repr(transparent)` over `[AtomicU64]`, so the two have the same
        // layout and pointer metadata; the box's ownership passes unchanged.
        unsafe { Box::from_raw(Box::into_raw(words) as *mut Page) }
    }

    /// The page size in bytes.
    #[inline]
    pub(crate) fn size(&self) -> usize {
        self.words.len() * 8
    }

    /// The words, for kernels that search a region in place.
    #[inline]
    pub(crate) fn words(&self) -> &[AtomicU64] {
        &self.words
    }

    /// Word `i`, or 0 past the end.
    #[inline]
    pub(crate) fn word(&self, i: usize) -> u64 {
        self.words.get(i).map_or(0, |w| w.load(Relaxed))
    }

    /// Sets word `i` (ignored past the end).
    #[inline]
    pub(crate) fn set_word(&self, i: usize, v: u64) {
        if let Some(w) = self.words.get(i) {
            w.store(v, Relaxed);
        }
    }

    /// The 8 bytes starting at byte `off`, as a little-endian integer (zero past the end).
    #[inline]
    pub(crate) fn load8(&self, off: usize) -> u64 {
        let (w, sh) = (off / 8, (off % 8) * 8);
        let lo = self.word(w) >> sh;
        if sh == 0 {
            lo
        } else {
            lo | self.word(w.saturating_add(1)) << (64 - sh)
        }
    }

    /// The `len <= 8` bytes at `off` as a little-endian integer.
    #[inline]
    pub(crate) fn uint_at(&self, off: usize, len: usize) -> u64 {
        // A field within one word (every header field: offsets and lengths are constants, so
        // this folds to one load and a shift).
        if off % 8 + len <= 8 && len < 8 {
            return (self.word(off / 8) >> (off % 8 * 8)) & ((1u64 << (len * 8)) - 1);
        }
        let v = self.load8(off);
        if len >= 8 {
            v
        } else {
            v & ((1u64 << (len * 8)) - 1)
        }
    }

    #[inline]
    pub(crate) fn u16_at(&self, off: usize) -> u16 {
        self.uint_at(off, 2) as u16
    }

    #[inline]
    pub(crate) fn u32_at(&self, off: usize) -> u32 {
        self.uint_at(off, 4) as u32
    }

    /// Writes the low `len <= 8` bytes of `v` at `off` (exclusive holders only).
    #[inline]
    pub(crate) fn set_uint(&self, off: usize, len: usize, v: u64) {
        // A field within one word (every header field): one masked store.
        if off % 8 + len <= 8 && len < 8 {
            let (w, shift) = (off / 8, off % 8 * 8);
            let mask = ((1u64 << (len * 8)) - 1) << shift;
            self.set_word(w, (self.word(w) & !mask) | ((v << shift) & mask));
            return;
        }
        self.write(off, &v.to_le_bytes()[..len]);
    }

    pub(crate) fn set_u16(&self, off: usize, v: u16) {
        self.set_uint(off, 2, u64::from(v));
    }

    pub(crate) fn set_u32(&self, off: usize, v: u32) {
        self.set_uint(off, 4, u64::from(v));
    }

    /// Appends the `len` bytes at `off` to `out` (bytes past the end read as zero; `len` is
    /// capped at the page size, so garbage lengths cannot exhaust memory).
    pub(crate) fn read_into(&self, off: usize, len: usize, out: &mut Vec<u8>) {
        // Values are read this way on every lookup and every row of a scan, so only whole
        // 8-byte stores into the vector's spare capacity (no zeroing first, no copies of odd
        // lengths): the first word shifted down by the offset's misalignment, then each next
        // word 8 bytes on, each store overwriting the zeros the one before left at its top;
        // 8 bytes of slack, not counted in the length. A range within one word (a node prefix,
        // a short key, a chain id) is the first store alone.
        let len = len.min(self.size());
        let (first, skip) = (off / 8, off % 8);
        let start = out.len();
        out.reserve(len + 8);
        let dst = &mut out.spare_capacity_mut()[..len + 8];
        let put = |chunk: &mut [MaybeUninit<u8>], w: u64| chunk.copy_from_slice(&w.to_le_bytes().map(MaybeUninit::new));
        put(&mut dst[..8], self.word(first) >> (skip * 8));
        // Words 1.. of the range, each into the 8 bytes after the one before: as many whole
        // chunks fit after the first store as the range has further words, since
        // len + 8 - (8 - skip) = skip + len > 8 * (words - 1).
        let words = (skip + len).div_ceil(8);
        let chunks = dst[8 - skip..].chunks_exact_mut(8);
        match self.words.get(first.saturating_add(1)..first.saturating_add(words)) {
            Some(ws) => chunks.zip(ws).for_each(|(c, w)| put(c, w.load(Relaxed))),
            // Past the end (a garbage offset): the words that exist, then zeros.
            None => (1..words).zip(chunks).for_each(|(i, c)| put(c, self.word(first.saturating_add(i)))),
        }
        // SAFETY: the stores above initialised dst[..8 - skip + 8 * (words - 1)] (dst[..8]
        // when the range has one word or none), which covers dst[..len] since
        // 8 * words >= skip + len; dst starts at `start`, and `reserve` made room for len + 8
        // bytes there.
        unsafe { out.set_len(start + len) };
    }

    /// Writes `bytes` at `off` (exclusive holders only; bytes past the end are dropped).
    pub(crate) fn write(&self, off: usize, bytes: &[u8]) {
        // The head up to a word boundary, then whole words, then the tail: whole words are
        // plain stores (records are written on every insert and every fold).
        let head = ((8 - off % 8) % 8).min(bytes.len());
        let (first, rest) = bytes.split_at(head);
        if !first.is_empty() {
            self.write_within(off / 8, off % 8, first);
        }
        let start = off / 8 + (off % 8 + head) / 8;
        let chunks = rest.chunks_exact(8);
        let tail = chunks.remainder();
        let whole = rest.len() / 8;
        match self.words.get(start..start.saturating_add(whole)) {
            Some(ws) => {
                for (w, c) in ws.iter().zip(chunks) {
                    w.store(u64::from_le_bytes(c.try_into().expect("8 bytes")), Relaxed);
                }
            }
            // Past the end (a caller's garbage range): what fits.
            None => {
                for (i, c) in chunks.enumerate() {
                    self.set_word(start + i, u64::from_le_bytes(c.try_into().expect("8 bytes")));
                }
            }
        }
        if !tail.is_empty() {
            self.write_within(start.saturating_add(whole), 0, tail);
        }
    }

    /// Writes `bytes` (at most 8 - `at`) into word `w` from byte `at` on, keeping its other
    /// bytes.
    #[inline]
    fn write_within(&self, w: usize, at: usize, bytes: &[u8]) {
        debug_assert!(at + bytes.len() <= 8);
        let mut word = self.word(w).to_le_bytes();
        word[at..at + bytes.len()].copy_from_slice(bytes);
        self.set_word(w, u64::from_le_bytes(word));
    }

    /// Zeroes every word (exclusive holders only, or a page not published yet).
    pub(crate) fn zero(&self) {
        for w in self.words.iter() {
            w.store(0, Relaxed);
        }
    }

    /// Copies every word of `other` (same size) into this page (exclusive holders only).
    pub(crate) fn copy_from(&self, other: &Page) {
        for (dst, src) in self.words.iter().zip(other.words.iter()) {
            dst.store(src.load(Relaxed), Relaxed);
        }
    }

    /// Compares the `len` stored bytes at `off` with `key`, lexicographically.
    #[inline]
    pub(crate) fn compare(&self, off: usize, len: usize, key: &[u8]) -> Ordering {
        let len = len.min(self.size());
        let common = len.min(key.len());
        let mut i = 0;
        while i < common {
            let take = (common - i).min(8);
            let stored = be_prefix(self.load8(off.saturating_add(i)).to_le_bytes(), take);
            let given = head_of(&key[i..i + take]);
            match stored.cmp(&given) {
                Ordering::Equal => i += take,
                other => return other,
            }
        }
        len.cmp(&key.len())
    }

    /// The head ([`head_of`]) of the `len` stored bytes at `off`.
    #[inline]
    pub(crate) fn head_at(&self, off: usize, len: usize) -> u64 {
        be_prefix(self.load8(off).to_le_bytes(), len.min(8))
    }

    /// Asks the CPU to bring the cache line holding byte `off` into L1. No bounds check: a
    /// prefetch never faults and has no effect a program can observe, and an offset past the
    /// end (only ever computed from garbage an optimistic reader saw) just wastes it.
    #[inline]
    pub(crate) fn prefetch(&self, off: usize) {
        prefetch_line(self.words.as_ptr().wrapping_add(off / 8));
    }
}

/// The first `take` bytes of `bytes` as a big-endian integer, zero-padded to 8 bytes.
#[inline]
fn be_prefix(bytes: [u8; 8], take: usize) -> u64 {
    let v = u64::from_be_bytes(bytes);
    if take >= 8 {
        v
    } else {
        v & !(u64::MAX >> (take * 8))
    }
}

/// The key head: the first 8 bytes of `key` as a big-endian integer, zero-padded. Heads that
/// differ order their keys the same way the keys are ordered; equal heads say nothing.
#[inline]
pub(crate) fn head_of(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(b) => u64::from_be_bytes(*b),
        None => {
            // Short keys byte by byte (a copy of a variable length would be a call).
            let mut v = 0u64;
            for (i, &b) in key.iter().enumerate() {
                v |= u64::from(b) << (56 - 8 * i);
            }
            v
        }
    }
}

/// Issues a prefetch (to L1) of the cache line holding `p`; a no-op on targets other than
/// x86-64.
#[inline(always)]
pub(crate) fn prefetch_line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint without architectural effect: it never faults, whatever the
    // address, and reads no memory the program can observe. SSE, which provides it, is part of
    // the x86-64 baseline. (The kernels pass only addresses inside their slice; a page may
    // pass one past its end, computed from garbage an optimistic reader saw.)
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_roundtrip_at_every_alignment() {
        let p = Page::boxed(64);
        for off in 0..20 {
            for len in 0..30 {
                let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(37).wrapping_add(off as u8)).collect();
                p.write(off, &data);
                let mut out = Vec::new();
                p.read_into(off, len, &mut out);
                assert_eq!(out, data, "off {off} len {len}");
                assert_eq!(p.compare(off, len, &data), Ordering::Equal);
            }
        }
        // Appends after what `out` holds; bytes past the end read as zeros.
        p.write(56, b"12345678");
        let mut out = b"xy".to_vec();
        p.read_into(59, 13, &mut out);
        assert_eq!(out, b"xy45678\0\0\0\0\0\0\0\0");
        p.set_u16(7, 0xBEEF);
        assert_eq!(p.u16_at(7), 0xBEEF);
        p.set_u32(13, 0xDEAD_BEEF);
        assert_eq!(p.u32_at(13), 0xDEAD_BEEF);
        assert_eq!(p.u16_at(7), 0xBEEF, "neighbouring field untouched");
    }

    #[test]
    fn reads_append_exactly_the_bytes_asked_for() {
        // Every offset and length over a page and past its end, appended after what the vector
        // holds, into spare capacity that still holds older bytes: the result is the prefix,
        // then the page's bytes (zeros past the end), nothing more.
        let p = Page::boxed(48);
        let image: Vec<u8> = (0..48u32).map(|i| (i * 7 + 3) as u8).collect();
        p.write(0, &image);
        let model = |off: usize, len: usize| -> Vec<u8> {
            (off..off + len.min(48)).map(|i| image.get(i).copied().unwrap_or(0)).collect()
        };
        for held in [0usize, 1, 5, 8, 13] {
            for off in 0..60 {
                for len in 0..60 {
                    let mut out = vec![0xEE; held + 80];
                    out.truncate(held);
                    p.read_into(off, len, &mut out);
                    let mut want = vec![0xEE; held];
                    want.extend(model(off, len));
                    assert_eq!(out, want, "held {held} off {off} len {len}");
                }
            }
        }
    }

    #[test]
    fn compare_is_lexicographic() {
        let p = Page::boxed(64);
        let cases: [(&[u8], &[u8]); 7] = [
            (b"abc", b"abd"),
            (b"ab", b"abc"),
            (b"ab\0", b"ab"),
            (b"123456789", b"12345678"),
            (b"12345678x", b"12345678y"),
            (b"", b"a"),
            (b"\xff", b"\x00"),
        ];
        for (a, b) in cases {
            p.write(3, a);
            assert_eq!(p.compare(3, a.len(), b), a.cmp(b), "{a:?} vs {b:?}");
            let (ha, hb) = (head_of(a), head_of(b));
            assert!(ha == hb || ha.cmp(&hb) == a.cmp(b), "heads that differ order their keys");
        }
    }

    #[test]
    fn fields_set_within_a_word_keep_their_neighbours() {
        let p = Page::boxed(64);
        p.write(0, &[0xEE; 64]);
        for (off, len) in [(0, 1), (1, 2), (3, 4), (4, 4), (6, 2), (7, 1), (9, 7), (13, 3), (20, 8), (22, 6)] {
            p.set_uint(off, len, 0x0102_0304_0506_0708);
            let mut out = Vec::new();
            p.read_into(0, 64, &mut out);
            let mut want = [0xEE; 64];
            want[off..off + len].copy_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes()[..len]);
            assert_eq!(out, want, "off {off} len {len}");
            p.write(off, &vec![0xEE; len]);
        }
    }

    #[test]
    fn garbage_offsets_and_lengths_never_panic() {
        let p = Page::boxed(64);
        let mut out = Vec::new();
        p.read_into(usize::MAX / 2, 100, &mut out);
        assert!(out.iter().all(|&b| b == 0));
        out.clear();
        p.read_into(usize::MAX - 3, 20, &mut out);
        assert_eq!(out, [0; 20], "lengths hold even where the end overflows");
        out.clear();
        p.read_into(60, usize::MAX, &mut out);
        assert_eq!(out.len(), 64, "lengths are capped at the page size");
        assert_eq!(p.compare(1000, 5, b"abc"), Ordering::Less, "past the end reads as zeros");
        assert_eq!(p.load8(usize::MAX - 7), 0);
        p.write(62, b"abcd"); // the part past the end is dropped
        assert_eq!(p.u16_at(62), u16::from_le_bytes(*b"ab"));
        // Whole words past the end, and offsets whose sum overflows: dropped.
        p.write(40, &[7; 40]);
        assert_eq!(p.word(7), u64::from_le_bytes([7; 8]));
        p.write(usize::MAX - 3, &[1; 30]);
        p.set_uint(usize::MAX - 1, 4, 5);
        p.set_uint(1000, 2, 5);
        p.prefetch(usize::MAX);
    }
}
