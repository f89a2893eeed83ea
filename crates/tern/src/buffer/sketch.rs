//! A frequency sketch: about how often each hash was seen lately (the admission filter of the
//! row cache, after TinyLFU: Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache
//! Admission Policy", ACM ToS 2017).
//!
//! A count-min sketch of four rows of 4-bit counters (kept in bytes): a hash increments one
//! counter per row, and its estimate is the smallest of the four, so an estimate never falls
//! below the true count since the last halving (collisions only raise it) and never exceeds 15.
//! After `sample` additions every counter is halved, so the counts follow the recent stream and
//! an item once hot is forgotten within a few samples.
//!
//! Invariants:
//! * `estimate(h)` ≥ min(15, additions of `h` since the last halving) and ≤ 15.
//! * Memory is fixed at creation: [`Sketch::bytes`].

/// Rows of the sketch (hash functions).
const ROWS: usize = 4;
/// A counter's largest value (4-bit counters).
const MAX: u8 = 15;
/// Odd multipliers that make the rows' indexes independent enough.
const SEEDS: [u64; ROWS] = [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F, 0x1656_67B1_9E37_79F9, 0x85EB_CA77_C2B2_AE63];

/// Counters per row for a cache of about `entries` items: a power of two, at least 16.
fn width(entries: usize) -> usize {
    entries.clamp(16, 1 << 28).next_power_of_two()
}

/// A count-min sketch with periodic halving (see the module doc).
pub(crate) struct Sketch {
    counters: Box<[u8]>,
    /// Counters per row minus one (a power of two minus one).
    mask: usize,
    additions: usize,
    /// Additions between halvings.
    sample: usize,
}

impl Sketch {
    /// A sketch for a cache of about `entries` items: `entries` counters per row rounded up
    /// to a power of two (at least 16), halved every ten times that many additions.
    pub(crate) fn new(entries: usize) -> Sketch {
        let width = width(entries);
        Sketch { counters: vec![0; ROWS * width].into_boxed_slice(), mask: width - 1, additions: 0, sample: 10 * width }
    }

    /// Bytes the sketch for about `entries` items holds.
    pub(crate) fn bytes(entries: usize) -> usize {
        ROWS * width(entries)
    }

    #[inline]
    fn index(&self, hash: u64, row: usize) -> usize {
        let mixed = (hash ^ (hash >> 29)).wrapping_mul(SEEDS[row]);
        row * (self.mask + 1) + ((mixed >> 32) as usize & self.mask)
    }

    /// Counts one sighting of `hash`.
    pub(crate) fn add(&mut self, hash: u64) {
        for row in 0..ROWS {
            let at = self.index(hash, row);
            if self.counters[at] < MAX {
                self.counters[at] += 1;
            }
        }
        self.additions += 1;
        if self.additions >= self.sample {
            for c in self.counters.iter_mut() {
                *c >>= 1;
            }
            self.additions /= 2;
        }
    }

    /// About how often `hash` was seen lately (see the invariants).
    pub(crate) fn estimate(&self, hash: u64) -> u8 {
        (0..ROWS).map(|row| self.counters[self.index(hash, row)]).min().unwrap_or(0)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn estimates_bound_the_counts_and_halving_forgets() {
        let mut s = Sketch::new(64);
        let hash = |i: u64| i.wrapping_mul(0x2545_F491_4F6C_DD1D);
        for i in 0..32u64 {
            for _ in 0..(i % 8) {
                s.add(hash(i));
            }
        }
        for i in 0..32u64 {
            assert!(s.estimate(hash(i)) >= (i % 8) as u8, "item {i}: {}", s.estimate(hash(i)));
        }
        for _ in 0..40 {
            s.add(hash(1000));
        }
        assert_eq!(s.estimate(hash(1000)), MAX, "saturates");
        // Ten widths of additions of other items halve it again and again.
        for i in 0..(10 * 64 * 4) as u64 {
            s.add(hash(2000 + i % 16));
        }
        assert!(s.estimate(hash(1000)) < MAX / 2, "{}", s.estimate(hash(1000)));
        assert_eq!(Sketch::bytes(64), s.counters.len());
    }
}
