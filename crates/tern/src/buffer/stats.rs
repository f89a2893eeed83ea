//! The buffer pool's counters and their snapshot, [`BufferStats`].

use super::rows::RowFigures;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// Read-latency buckets: 8 per power of two of nanoseconds, up to about 4.6 minutes.
const SUB: u32 = 8;
const BUCKETS: usize = 38 * SUB as usize;

pub(crate) struct Counters {
    pub live: AtomicUsize,
    pub dirty: AtomicU64,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub evictions: AtomicU64,
    pub write_backs: AtomicU64,
    pub truncations: AtomicU64,
    pub overshoot: AtomicU64,
    pub io_errors: AtomicU64,
    pub capture_reads: AtomicU64,
    pub capture_reads_skipped: AtomicU64,
    read_ns: Box<[AtomicU64]>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            live: AtomicUsize::new(0),
            dirty: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            write_backs: AtomicU64::new(0),
            truncations: AtomicU64::new(0),
            overshoot: AtomicU64::new(0),
            io_errors: AtomicU64::new(0),
            capture_reads: AtomicU64::new(0),
            capture_reads_skipped: AtomicU64::new(0),
            read_ns: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// The bucket of `ns`: log-linear, relative error under 1/8.
fn bucket(ns: u64) -> usize {
    if ns < u64::from(SUB) {
        return ns as usize;
    }
    let log = 63 - ns.leading_zeros();
    let sub = (ns >> (log - 3)) as u32 & (SUB - 1);
    (((log - 2) * SUB + sub) as usize).min(BUCKETS - 1)
}

/// The smallest value in bucket `b`.
fn bucket_floor(b: usize) -> u64 {
    let b = b as u32;
    if b < SUB {
        return u64::from(b);
    }
    let log = b / SUB + 2;
    (1u64 << log) | (u64::from(b % SUB) << (log - 3))
}

impl Counters {
    pub(crate) fn record_read(&self, took: Duration) {
        self.reads.fetch_add(1, Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.read_ns[bucket(ns)].fetch_add(1, Relaxed);
    }

    fn percentile(&self, counts: &[u64], total: u64, p: f64) -> f64 {
        if total == 0 {
            return 0.0;
        }
        let rank = ((total as f64) * p).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, &c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_floor(b) as f64 / 1000.0;
            }
        }
        0.0
    }

    pub(crate) fn snapshot(
        &self,
        page_size: usize,
        capacity: u64,
        resident: u64,
        file_pages: u64,
        rows: RowFigures,
    ) -> BufferStats {
        let counts: Vec<u64> = self.read_ns.iter().map(|c| c.load(Relaxed)).collect();
        let total = counts.iter().sum();
        let hits = crate::sync::class_stats(*super::pool::PAGE_CLASS);
        BufferStats {
            page_size: page_size as u64,
            capacity_pages: capacity,
            resident_pages: resident,
            live_pages: self.live.load(Relaxed) as u64,
            dirty_pages: self.dirty.load(Relaxed),
            file_pages,
            fixes: hits.optimistic + hits.acquisitions,
            misses: self.reads.load(Relaxed),
            // Every page read from the file: faults and a checkpoint's read-backs.
            reads: self.reads.load(Relaxed) + self.capture_reads.load(Relaxed),
            writes: self.writes.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            write_backs: self.write_backs.load(Relaxed),
            truncations: self.truncations.load(Relaxed),
            over_capacity: self.overshoot.load(Relaxed),
            io_errors: self.io_errors.load(Relaxed),
            checkpoint_reads: self.capture_reads.load(Relaxed),
            checkpoint_reads_skipped: self.capture_reads_skipped.load(Relaxed),
            read_p50_us: self.percentile(&counts, total, 0.50),
            read_p99_us: self.percentile(&counts, total, 0.99),
            read_p999_us: self.percentile(&counts, total, 0.999),
            row_cache_bytes: rows.capacity_bytes,
            row_bytes: rows.bytes,
            row_entries: rows.entries,
            row_hits: rows.hits,
            row_misses: rows.misses,
            row_stale: rows.stale,
            row_inserts: rows.inserts,
            row_evictions: rows.evictions,
            row_rejected: rows.rejected,
            row_promotions: rows.promotions,
        }
    }
}

/// A snapshot of a buffer pool's counters (`DbStats::buffer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct BufferStats {
    /// Bytes per page.
    pub page_size: u64,
    /// The most pages the pool keeps in memory now (0: unbounded, nothing is evicted): all of
    /// the cache at first, the frames' share once the pool has evicted and the row cache has
    /// its part (`Options::row_cache_percent`).
    pub capacity_pages: u64,
    /// Pages in memory now.
    pub resident_pages: u64,
    /// Pages allocated (in memory or on disk).
    pub live_pages: u64,
    /// Resident pages changed since they were last written to the page file.
    pub dirty_pages: u64,
    /// The page file's length in pages.
    pub file_pages: u64,
    /// Page fixes that found their page in memory: optimistic visits (however often their reads
    /// are validated, and whether or not they are upgraded to a latch) and pages latched
    /// directly; counted per thread without shared writes; process-wide, summed over every pool.
    pub fixes: u64,
    /// Fixes that had to read their page from the page file (faults).
    pub misses: u64,
    /// Pages read from the page file: the faults (`misses`) and the pages a checkpoint read
    /// back (`checkpoint_reads`).
    pub reads: u64,
    /// Pages written to the page file.
    pub writes: u64,
    /// Pages evicted (their frame given to another page).
    pub evictions: u64,
    /// Dirty pages written back so that they could be evicted.
    pub write_backs: u64,
    /// Times the page file's free tail was cut off.
    pub truncations: u64,
    /// Frames allocated beyond the capacity because every resident page was latched or being
    /// written (should stay 0; a few under pools of a handful of pages).
    pub over_capacity: u64,
    /// Page reads or writes that failed.
    pub io_errors: u64,
    /// Pages changed since the last checkpoint and then evicted that a checkpoint read back
    /// from the page file, because their image may hold version-chain ids it must resolve.
    pub checkpoint_reads: u64,
    /// Such pages a checkpoint took from the page file without reading them: their image was
    /// found to hold no chain ids when it was written back.
    pub checkpoint_reads_skipped: u64,
    /// Page read latency percentiles, in microseconds (bucketed: within 1/8).
    pub read_p50_us: f64,
    /// The 99th percentile, as `read_p50_us`.
    pub read_p99_us: f64,
    /// The 99.9th percentile, as `read_p50_us`.
    pub read_p999_us: f64,
    /// The row cache's share of the cache, in bytes (0: no row cache, or not open yet: it
    /// opens once the pool has evicted and given it the memory). It keeps single keys'
    /// values read from leaves that had to be read from the page file, for point reads of
    /// those keys after the leaf is evicted again ([`Options::row_cache_percent`](crate::Options::row_cache_percent)).
    pub row_cache_bytes: u64,
    /// Bytes the row cache holds now (keys, values and its per-entry overhead).
    pub row_bytes: u64,
    /// Entries the row cache holds now.
    pub row_entries: u64,
    /// Point reads of a key in an evicted leaf that the row cache answered (no page read).
    pub row_hits: u64,
    /// Point reads of a key in an evicted leaf that found no entry for it.
    pub row_misses: u64,
    /// Point reads that found an entry made from an older image of the leaf (it changed
    /// since): dropped, the leaf read instead.
    pub row_stale: u64,
    /// Entries made.
    pub row_inserts: u64,
    /// Entries dropped to make room.
    pub row_evictions: u64,
    /// Entries not made because the row cache was full and its key had been asked for less
    /// often lately than the entry it would have replaced (the admission filter).
    pub row_rejected: u64,
    /// Point reads that found their key in a resident leaf the clock had marked for eviction
    /// and left the key in the row cache (entries made or kept so) instead of giving the leaf
    /// a second chance: the leaf may go, its hot keys stay.
    pub row_promotions: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_tight() {
        let mut last = 0;
        for ns in [0u64, 1, 7, 8, 9, 15, 16, 100, 1000, 65_000, 80_000, 1 << 30, u64::MAX] {
            let b = bucket(ns);
            assert!(b >= last, "{ns}");
            last = b;
            let floor = bucket_floor(b);
            assert!(floor <= ns, "{ns}: floor {floor}");
            if b < BUCKETS - 1 {
                assert!(ns - floor <= ns / 8 + 1, "{ns}: floor {floor}");
            }
        }
    }
}
