//! The row cache: single keys' values read from leaves that had to be faulted in, kept so that
//! a point read of a hot key whose leaf was evicted again needs no I/O.
//!
//! When the data is several times the pool, a leaf holds one hot key among many cold ones, and
//! a pool of whole pages spends most of its memory on the cold ones (with scrambled zipfian
//! reads over 10M records a pool of 11% of the leaves misses 37% of the reads; the same memory
//! split half pages, half rows misses 21%). The row cache holds what such reads come for, and
//! nothing else: an entry is made only by a read that faulted its leaf in while the pool was
//! full.
//!
//! Invariants:
//! * An entry `(pid, key) → (tag, value)` records that page `pid`'s image, at a moment its
//!   state word carried version `tag` in a readable state, stored `key` with the plain value
//!   `value` (read optimistically and validated at `tag`).
//! * It is returned only for page `pid` **evicted at version `tag + 1`**. Every change of a
//!   page ends with a version bump and eviction is one bump (`state.rs`), so `tag + 1` means
//!   the eviction was the only step since the read: the image on disk is the image read, and
//!   the value is the key's plain value in it. A page resident, loaded again, changed, freed or
//!   reused under the id has another version, and its entries are stale: never returned,
//!   dropped when found (if older than the image), and otherwise gone with the clock.
//! * The cache owns at most its byte budget (keys, values and [`ENTRY_OVERHEAD`] per entry);
//!   inserting evicts with a second-chance clock per shard. Lookups and inserts take one
//!   shard's mutex; the cache is consulted only on a leaf miss, never on the in-memory path.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Bytes an entry costs beyond its key and value (slot, table entry, allocation).
pub(crate) const ENTRY_OVERHEAD: usize = 80;
/// Shards (each its own mutex, table and clock).
const SHARDS: usize = 64;
/// Values longer than this are not kept (a few entries would crowd out many).
pub(crate) const MAX_ROW_VALUE: usize = 1024;

/// A hasher for keys that are already hashes.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

struct Slot {
    hash: u64,
    pid: u32,
    tag: u64,
    key_len: usize,
    /// The key, then the value.
    data: Box<[u8]>,
    referenced: bool,
}

impl Slot {
    fn cost(&self) -> usize {
        self.data.len() + ENTRY_OVERHEAD
    }
}

#[derive(Default)]
struct Shard {
    index: HashMap<u64, u32, BuildHasherDefault<Identity>>,
    slots: Vec<Option<Slot>>,
    vacant: Vec<u32>,
    hand: usize,
    bytes: usize,
}

impl Shard {
    fn remove(&mut self, at: u32) {
        if let Some(slot) = self.slots[at as usize].take() {
            self.index.remove(&slot.hash);
            self.bytes -= slot.cost();
            self.vacant.push(at);
        }
    }

    /// Frees room for `need` bytes within `budget`: a second-chance clock over the slots.
    fn make_room(&mut self, need: usize, budget: usize) -> u64 {
        let mut evicted = 0;
        // Two full turns clear every reference bit and evict what is left, so this ends.
        let mut steps = 2 * self.slots.len() + 1;
        while self.bytes + need > budget && steps > 0 && !self.slots.is_empty() {
            steps -= 1;
            let at = self.hand % self.slots.len();
            self.hand = at + 1;
            match &mut self.slots[at] {
                Some(slot) if slot.referenced => slot.referenced = false,
                Some(_) => {
                    self.remove(at as u32);
                    evicted += 1;
                }
                None => {}
            }
        }
        evicted
    }
}

/// Counters of the row cache.
#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    stale: AtomicU64,
    inserts: AtomicU64,
    evictions: AtomicU64,
}

/// The row cache of one pool (see the module doc).
pub(crate) struct Rows {
    shards: Box<[Mutex<Shard>]>,
    shard_budget: usize,
    hasher: RandomState,
    counters: Counters,
}

/// What the row cache holds and did, for [`BufferStats`](super::BufferStats).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RowFigures {
    pub capacity_bytes: u64,
    pub bytes: u64,
    pub entries: u64,
    pub hits: u64,
    pub misses: u64,
    pub stale: u64,
    pub inserts: u64,
    pub evictions: u64,
}

impl Rows {
    /// A row cache of at most `budget` bytes (0: none; every call is then a no-op).
    pub(crate) fn new(budget: u64) -> Rows {
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        let shards = if budget == 0 { 0 } else { SHARDS };
        Rows {
            shards: (0..shards).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: budget / SHARDS,
            hasher: RandomState::new(),
            counters: Counters::default(),
        }
    }

    /// Whether the cache can hold anything.
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.shard_budget > 0
    }

    fn hash(&self, pid: u32, key: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write_u32(pid);
        h.write(key);
        h.finish()
    }

    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, Shard> {
        // The table uses the low bits (bucket) and the top seven (tag byte); the shard comes
        // from bits in between, so that all of them vary within a shard.
        let shard = &self.shards[(hash >> 32) as usize % self.shards.len()];
        shard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `key`'s value in page `pid` to `out` if an entry holds it for the page's image
    /// evicted at version `evicted` (see the module doc); false otherwise.
    pub(crate) fn get(&self, pid: u32, evicted: u64, key: &[u8], out: &mut Vec<u8>) -> bool {
        if !self.enabled() {
            return false;
        }
        let hash = self.hash(pid, key);
        let mut shard = self.shard(hash);
        let Some(&at) = shard.index.get(&hash) else {
            self.counters.misses.fetch_add(1, Relaxed);
            return false;
        };
        let slot = shard.slots[at as usize].as_mut().expect("indexed slots are occupied");
        if slot.pid != pid || &slot.data[..slot.key_len] != key {
            self.counters.misses.fetch_add(1, Relaxed);
            return false;
        }
        let fits = slot.tag.wrapping_add(1);
        if fits != evicted {
            if evicted > fits {
                // Made from an image older than the page's: it can never serve again.
                shard.remove(at);
                self.counters.stale.fetch_add(1, Relaxed);
            } else {
                // Newer than the version the caller saw (the page came back and went since):
                // it may serve the next reader.
                self.counters.misses.fetch_add(1, Relaxed);
            }
            return false;
        }
        slot.referenced = true;
        out.extend_from_slice(&slot.data[slot.key_len..]);
        self.counters.hits.fetch_add(1, Relaxed);
        true
    }

    /// Records that page `pid`'s image at version `tag` stores `key` with the plain value
    /// `value` (replacing any entry for the key in that page). Values longer than
    /// [`MAX_ROW_VALUE`] are not kept.
    pub(crate) fn insert(&self, pid: u32, tag: u64, key: &[u8], value: &[u8]) {
        if !self.enabled() || value.len() > MAX_ROW_VALUE {
            return;
        }
        let cost = key.len() + value.len() + ENTRY_OVERHEAD;
        if cost > self.shard_budget {
            return;
        }
        let hash = self.hash(pid, key);
        let mut shard = self.shard(hash);
        if let Some(&at) = shard.index.get(&hash) {
            shard.remove(at);
        }
        let evicted = shard.make_room(cost, self.shard_budget);
        if evicted > 0 {
            self.counters.evictions.fetch_add(evicted, Relaxed);
        }
        if shard.bytes + cost > self.shard_budget {
            return;
        }
        let mut data = Vec::with_capacity(key.len() + value.len());
        data.extend_from_slice(key);
        data.extend_from_slice(value);
        let slot = Slot { hash, pid, tag, key_len: key.len(), data: data.into_boxed_slice(), referenced: false };
        shard.bytes += cost;
        let at = match shard.vacant.pop() {
            Some(at) => {
                shard.slots[at as usize] = Some(slot);
                at
            }
            None => {
                shard.slots.push(Some(slot));
                (shard.slots.len() - 1) as u32
            }
        };
        shard.index.insert(hash, at);
        self.counters.inserts.fetch_add(1, Relaxed);
    }

    /// The cache's size and counters.
    pub(crate) fn figures(&self) -> RowFigures {
        let (mut bytes, mut entries) = (0, 0);
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            bytes += shard.bytes as u64;
            entries += shard.index.len() as u64;
        }
        let c = &self.counters;
        RowFigures {
            capacity_bytes: (self.shard_budget * self.shards.len()) as u64,
            bytes,
            entries,
            hits: c.hits.load(Relaxed),
            misses: c.misses.load(Relaxed),
            stale: c.stale.load(Relaxed),
            inserts: c.inserts.load(Relaxed),
            evictions: c.evictions.load(Relaxed),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_entry_serves_only_the_image_evicted_right_after_its_read() {
        let rows = Rows::new(1 << 20);
        rows.insert(7, 40, b"k", b"v1");
        let mut out = Vec::new();
        assert!(!rows.get(7, 40, b"k", &mut out), "a reader that saw an older image");
        assert!(!rows.get(8, 41, b"k", &mut out), "another page");
        assert!(!rows.get(7, 41, b"j", &mut out), "another key");
        assert!(rows.get(7, 41, b"k", &mut out));
        assert_eq!(out, b"v1");
        // Evicted again at a later version: the image may differ; the entry goes.
        assert!(!rows.get(7, 43, b"k", &mut out));
        assert!(!rows.get(7, 41, b"k", &mut out), "a stale entry is dropped when found");
        let f = rows.figures();
        assert_eq!((f.hits, f.stale, f.inserts, f.entries, f.bytes), (1, 1, 1, 0, 0));
    }

    #[test]
    fn the_budget_holds_and_referenced_entries_survive_a_turn() {
        let per = 8 + 100 + ENTRY_OVERHEAD;
        let rows = Rows::new((SHARDS * per * 10) as u64);
        let value = [7u8; 100];
        for i in 0u64..20_000 {
            rows.insert(1, 0, &i.to_be_bytes(), &value);
            // Key 0 is read after every insert: it is always referenced when the clock comes.
            let mut out = Vec::new();
            assert!(rows.get(1, 1, &0u64.to_be_bytes(), &mut out), "after {i} inserts");
        }
        let f = rows.figures();
        assert!(f.bytes <= f.capacity_bytes, "{f:?}");
        assert!(f.entries > 0 && f.evictions > 0, "{f:?}");
        assert_eq!(f.bytes, f.entries * per as u64);
    }

    #[test]
    fn a_disabled_cache_keeps_nothing() {
        let rows = Rows::new(0);
        rows.insert(1, 0, b"k", b"v");
        assert!(!rows.get(1, 1, b"k", &mut Vec::new()));
        assert_eq!(rows.figures().entries, 0);
        let big = Rows::new(1 << 20);
        big.insert(1, 0, b"k", &vec![0; MAX_ROW_VALUE + 1]);
        assert_eq!(big.figures().entries, 0, "long values are not kept");
    }
}
