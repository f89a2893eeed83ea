//! The row cache: single keys' values read from leaves that had to be faulted in or that the
//! clock was about to evict, kept so that a point read of a hot key whose leaf was evicted
//! needs no I/O.
//!
//! When the data is several times the pool, a leaf holds one hot key among many cold ones, and
//! a pool of whole pages spends most of its memory on the cold ones (with scrambled zipfian
//! reads over 10M records a pool of 11% of the leaves misses 37% of the reads; the same memory
//! split half pages, half rows misses 21%). The row cache holds what such reads come for, and
//! nothing else. The cache opens (its budget goes from 0 to its share) once the pool has
//! evicted and given it the memory (`Pool::give_rows_their_share`); from then on an entry is
//! made by a point read that
//! * faulted its leaf in, or
//! * found its leaf resident but marked by the clock (not touched since the clock's last
//!   pass): the key is **promoted**, and the leaf keeps its mark instead of getting a second
//!   chance, so the clock's next visit evicts it unless another access wants it. A leaf kept
//!   for one hot key costs a page per key; an entry costs the key and value. If the cache
//!   does not take the key (admission, below) or the leaf is dirty, the read unmarks the leaf
//!   as any access does.
//!
//! Invariants:
//! * An entry `(pid, key) → (tag, value)` records that page `pid`, clean (the file's image)
//!   with image generation `tag`, stored `key` with the plain value `value` (read
//!   optimistically and validated). A page's image generation (`Pool::image`) grows when an
//!   exclusive holder takes it clean, so its contents never differ from a clean image of the
//!   same generation; nothing else changes a page (a fault-in reads back what eviction left).
//! * It is returned only for page `pid` **on disk with image generation `tag`**: then the image
//!   in the file is the image read, whatever loads and evictions came between (an unchanged
//!   leaf that comes back and goes again keeps its entries). A page changed, freed or reused
//!   under the id has a larger generation, and its entries are stale: never returned, dropped
//!   when found, and otherwise gone with the clock.
//! * The cache owns at most its byte budget (keys, values and [`ENTRY_OVERHEAD`] per entry);
//!   inserting evicts with a second-chance clock per shard. Lookups and inserts take one
//!   shard's mutex; the cache is consulted only on a leaf miss or a marked leaf (the clock
//!   marks only in a full pool), never on the in-memory path.
//! * Admission (TinyLFU, `sketch.rs`): every lookup and every promotion counts its key in the
//!   shard's frequency sketch. Once the shard is full, a new entry replaces the clock's victim only if its key
//!   was asked for more often lately than the victim's; otherwise it is not kept. Reads of
//!   cold keys (most misses, when the data is many times the cache) would otherwise push out
//!   the warm keys the cache is for before they are asked for again.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use super::sketch::Sketch;

/// Bytes an entry costs beyond its key and value (slot, table entry, allocation).
pub(crate) const ENTRY_OVERHEAD: usize = 80;
/// Shards (each its own mutex, table and clock).
const SHARDS: usize = 64;
/// Values longer than this are not kept (a few entries would crowd out many).
pub(crate) const MAX_ROW_VALUE: usize = 1024;
/// The entry size the frequency sketch is sized for (key, value and overhead): small rows, so
/// that it has a counter per row for most tables.
const SKETCH_ENTRY_BYTES: usize = ENTRY_OVERHEAD + 64;

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

struct Shard {
    index: HashMap<u64, u32, BuildHasherDefault<Identity>>,
    slots: Vec<Option<Slot>>,
    vacant: Vec<u32>,
    hand: usize,
    bytes: usize,
    /// How often each key was asked for lately (the admission filter).
    sketch: Sketch,
}

impl Shard {
    fn remove(&mut self, at: u32) {
        if let Some(slot) = self.slots[at as usize].take() {
            self.index.remove(&slot.hash);
            self.bytes -= slot.cost();
            self.vacant.push(at);
        }
    }

    /// Frees room for `need` bytes within `budget` for an entry whose key has frequency
    /// `wanted`: a second-chance clock over the slots, whose victim goes only if its key was
    /// asked for less often than `wanted`. Returns the entries evicted, or `None` if a victim
    /// was worth more (nothing more is evicted, and the new entry is not kept).
    fn make_room(&mut self, need: usize, budget: usize, wanted: u8) -> Option<u64> {
        let mut evicted = 0;
        // Two full turns clear every reference bit and evict what is left, so this ends.
        let mut steps = 2 * self.slots.len() + 1;
        while self.bytes + need > budget && steps > 0 && !self.slots.is_empty() {
            steps -= 1;
            let at = self.hand % self.slots.len();
            match &mut self.slots[at] {
                Some(slot) if slot.referenced => slot.referenced = false,
                Some(slot) => {
                    if self.sketch.estimate(slot.hash) >= wanted {
                        return None; // the hand stays: the victim faces the next newcomer
                    }
                    self.remove(at as u32);
                    evicted += 1;
                }
                None => {}
            }
            self.hand = at + 1;
        }
        Some(evicted)
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
    rejected: AtomicU64,
    promotions: AtomicU64,
}

/// The row cache of one pool (see the module doc).
pub(crate) struct Rows {
    shards: Box<[Mutex<Shard>]>,
    /// Each shard's budget once the cache is open ([`open`](Rows::open)).
    share: usize,
    /// Each shard's budget now: 0 until the cache is open, then `share`.
    shard_budget: AtomicUsize,
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
    pub rejected: u64,
    pub promotions: u64,
}

impl Rows {
    /// A row cache of at most `budget` bytes (0: none; every call is then a no-op), open.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn new(budget: u64) -> Rows {
        let rows = Rows::closed(budget);
        rows.open();
        rows
    }

    /// A row cache of `budget` bytes that holds nothing until [`open`](Self::open)ed (the pool
    /// opens it once its frames have given the memory back).
    pub(crate) fn closed(budget: u64) -> Rows {
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        let shards = if budget == 0 { 0 } else { SHARDS };
        // The sketch comes out of the budget (about 4 bytes per entry it is sized for).
        let entries = budget / SHARDS / SKETCH_ENTRY_BYTES;
        let shard_budget = (budget / SHARDS).saturating_sub(Sketch::bytes(entries));
        let shard = || Shard {
            index: HashMap::default(),
            slots: Vec::new(),
            vacant: Vec::new(),
            hand: 0,
            bytes: 0,
            sketch: Sketch::new(entries),
        };
        Rows {
            shards: (0..shards).map(|_| Mutex::new(shard())).collect(),
            share: shard_budget,
            shard_budget: AtomicUsize::new(0),
            hasher: RandomState::new(),
            counters: Counters::default(),
        }
    }

    /// Whether the pool has a row cache (open or not yet).
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.share > 0
    }

    /// Lets the cache fill up to its budget.
    pub(crate) fn open(&self) {
        self.shard_budget.store(self.share, Relaxed);
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
    /// of generation `image`, the one in the file (see the module doc); false otherwise.
    pub(crate) fn get(&self, pid: u32, image: u64, key: &[u8], out: &mut Vec<u8>) -> bool {
        if !self.enabled() {
            return false;
        }
        let hash = self.hash(pid, key);
        let mut shard = self.shard(hash);
        shard.sketch.add(hash);
        let Some(&at) = shard.index.get(&hash) else {
            self.counters.misses.fetch_add(1, Relaxed);
            return false;
        };
        let slot = shard.slots[at as usize].as_mut().expect("indexed slots are occupied");
        if slot.pid != pid || &slot.data[..slot.key_len] != key {
            self.counters.misses.fetch_add(1, Relaxed);
            return false;
        }
        if slot.tag != image {
            if image > slot.tag {
                // Made from an image older than the page's: it can never serve again.
                shard.remove(at);
                self.counters.stale.fetch_add(1, Relaxed);
            } else {
                // Newer than the generation the caller saw (the page changed since): it may
                // serve the next reader.
                self.counters.misses.fetch_add(1, Relaxed);
            }
            return false;
        }
        slot.referenced = true;
        out.extend_from_slice(&slot.data[slot.key_len..]);
        self.counters.hits.fetch_add(1, Relaxed);
        true
    }

    /// Records that page `pid`'s image of generation `tag` stores `key` with the plain value
    /// `value` (replacing any entry for the key in that page). Values longer than
    /// [`MAX_ROW_VALUE`] are not kept.
    pub(crate) fn insert(&self, pid: u32, tag: u64, key: &[u8], value: &[u8]) {
        self.keep(pid, tag, key, value, false);
    }

    /// [`insert`](Self::insert) for a read that found `key` in page `pid` resident (a read the
    /// row cache did not see): the read is counted in the admission sketch first, and an entry
    /// already made from the same image is kept as it is (and referenced).
    pub(crate) fn promote(&self, pid: u32, tag: u64, key: &[u8], value: &[u8]) -> bool {
        self.keep(pid, tag, key, value, true)
    }

    /// Returns whether the cache holds the entry afterwards.
    fn keep(&self, pid: u32, tag: u64, key: &[u8], value: &[u8], read: bool) -> bool {
        if !self.enabled() || value.len() > MAX_ROW_VALUE {
            return false;
        }
        let cost = key.len() + value.len() + ENTRY_OVERHEAD;
        let budget = self.shard_budget.load(Relaxed);
        if cost > budget {
            return false;
        }
        let hash = self.hash(pid, key);
        let mut shard = self.shard(hash);
        if read {
            shard.sketch.add(hash);
        }
        if let Some(&at) = shard.index.get(&hash) {
            let slot = shard.slots[at as usize].as_mut().expect("indexed slots are occupied");
            if read && slot.pid == pid && slot.tag == tag && &slot.data[..slot.key_len] == key {
                slot.referenced = true;
                self.counters.promotions.fetch_add(1, Relaxed);
                return true;
            }
            shard.remove(at);
        }
        let wanted = shard.sketch.estimate(hash);
        let Some(evicted) = shard.make_room(cost, budget, wanted) else {
            self.counters.rejected.fetch_add(1, Relaxed);
            return false;
        };
        if evicted > 0 {
            self.counters.evictions.fetch_add(evicted, Relaxed);
        }
        if shard.bytes + cost > budget {
            return false;
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
        if read {
            self.counters.promotions.fetch_add(1, Relaxed);
        }
        true
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
            capacity_bytes: (self.shard_budget.load(Relaxed) * self.shards.len()) as u64,
            bytes,
            entries,
            hits: c.hits.load(Relaxed),
            misses: c.misses.load(Relaxed),
            stale: c.stale.load(Relaxed),
            inserts: c.inserts.load(Relaxed),
            evictions: c.evictions.load(Relaxed),
            rejected: c.rejected.load(Relaxed),
            promotions: c.promotions.load(Relaxed),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_entry_serves_only_the_image_it_was_read_from() {
        let rows = Rows::new(1 << 20);
        rows.insert(7, 40, b"k", b"v1");
        let mut out = Vec::new();
        assert!(!rows.get(7, 39, b"k", &mut out), "an older image in the file");
        assert!(!rows.get(8, 40, b"k", &mut out), "another page");
        assert!(!rows.get(7, 40, b"j", &mut out), "another key");
        assert!(rows.get(7, 40, b"k", &mut out));
        assert!(rows.get(7, 40, b"k", &mut out), "as long as the image is the same");
        assert_eq!(out, b"v1v1");
        // The page changed since: the entry goes.
        assert!(!rows.get(7, 41, b"k", &mut out));
        assert!(!rows.get(7, 40, b"k", &mut out), "a stale entry is dropped when found");
        let f = rows.figures();
        assert_eq!((f.hits, f.stale, f.inserts, f.entries, f.bytes), (2, 1, 1, 0, 0));
    }

    #[test]
    fn the_budget_holds_and_referenced_entries_survive_a_turn() {
        let per = 8 + 100 + ENTRY_OVERHEAD;
        let rows = Rows::new((SHARDS * per * 10) as u64);
        let value = [7u8; 100];
        for i in 0u64..20_000 {
            // A lookup first, as the tree's reads do (it counts the key for admission).
            rows.get(1, 0, &i.to_be_bytes(), &mut Vec::new());
            rows.insert(1, 0, &i.to_be_bytes(), &value);
            // Key 0 is read after every insert: it is always referenced when the clock comes.
            let mut out = Vec::new();
            assert!(rows.get(1, 0, &0u64.to_be_bytes(), &mut out), "after {i} inserts");
        }
        let f = rows.figures();
        assert!(f.bytes <= f.capacity_bytes, "{f:?}");
        assert!(f.entries > 0 && f.evictions > 0, "{f:?}");
        assert_eq!(f.bytes, f.entries * per as u64);
    }

    #[test]
    fn keys_asked_for_often_are_kept_against_a_stream_of_one_off_keys() {
        let per = 8 + 100 + ENTRY_OVERHEAD;
        let rows = Rows::new((SHARDS * per * 40) as u64);
        let value = [7u8; 100];
        let read = |key: u64| {
            let mut out = Vec::new();
            if !rows.get(1, 0, &key.to_be_bytes(), &mut out) {
                rows.insert(1, 0, &key.to_be_bytes(), &value);
            }
        };
        // 512 warm keys, each asked for every 16 reads of a stream of keys never seen again.
        for i in 0u64..200_000 {
            if i % 16 == 0 {
                read((i / 16) % 512);
            } else {
                read(1_000_000 + i);
            }
        }
        let f = rows.figures();
        let kept = (0u64..512).filter(|k| rows.get(1, 0, &k.to_be_bytes(), &mut Vec::new())).count();
        // The cache holds about 40 entries a shard, 2,560 in all: without the filter the
        // one-off keys (15 in 16 reads) would leave few warm ones.
        assert!(kept >= 400, "{kept} of 512 warm keys kept: {f:?}");
        assert!(f.rejected > 100_000, "{f:?}");
        assert!(f.bytes <= f.capacity_bytes, "{f:?}");
    }

    #[test]
    fn a_disabled_cache_keeps_nothing() {
        let rows = Rows::new(0);
        rows.insert(1, 0, b"k", b"v");
        assert!(!rows.get(1, 0, b"k", &mut Vec::new()));
        assert_eq!(rows.figures().entries, 0);
        let big = Rows::new(1 << 20);
        big.insert(1, 0, b"k", &vec![0; MAX_ROW_VALUE + 1]);
        assert_eq!(big.figures().entries, 0, "long values are not kept");
    }
}
