//! Deferred replay: the log's last batch of writes, applied after the database opened.
//!
//! A crash leaves up to `WalConfig::checkpoint_bytes` of log after the last checkpoint, and
//! its writes land all over the key space: into a table larger than the cache, applying them
//! reads (and writes back) most of the table's pages, which made an open after a crash cost
//! the table instead of the log. So the replay reads, checks, sorts and keeps the last batch
//! (the whole log, when it is at most half the cache) without applying it; the database
//! opens, and its writes are applied by a background thread (`tern-redo`), in chunks of
//! [`CHUNK`] keys in key order, while transactions run. Whoever needs a key first applies its
//! chunk (or waits for the thread applying it): a point read or write settles the key's chunk,
//! a scan the chunks its range covers, a checkpoint or backup all of them.
//!
//! # Invariants
//! 1. The batch holds one write per key (the last in log order), sorted by table and key; the
//!    batches before it were applied before the open returned (`replay.rs`), so applying its
//!    writes in any order leaves each key as replaying the log in order would.
//! 2. A chunk is applied once: whoever claims it (`PENDING` → `APPLYING`) applies it and marks
//!    it `DONE` (or `FAILED`), waking whoever waits; nobody else touches its keys' pages for
//!    it. A key's chunk is `DONE` before any transaction reads or writes the key
//!    (`DbInner::settle`), so no transaction sees a key without its replayed write, and no
//!    replayed write lands on top of a newer one (every write after the open settles its key
//!    first).
//! 3. A chunk whose write failed (an I/O error of the page file) is `FAILED`: the operation
//!    that needed it, and a checkpoint, returns the error, so no checkpoint can drop the log
//!    that holds its writes. The next one to need the chunk applies it again (a write is a
//!    whole value or a delete, and no transaction touched its keys since: every one that tried
//!    failed), so an error that passes (a full disk made room) costs nothing more.
//! 4. The writes are committed before the crash, below every snapshot taken after the open:
//!    applied as plain values, they are visible to every transaction, as the eager replay's are.
//!
//! The claim-or-wait protocol ([`Claims`]) is model-checked with loom (`loom_tests` below).

use super::replay::{head, Batch};
use crate::btree::BTree;
use crate::sync::park;
use crate::sync::primitive::AtomicU8;
use crate::{Error, Result};
use std::ops::{Bound, Range};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Instant;

/// Writes per chunk: the unit a first reader of a key applies (a few leaves' worth, so a
/// reader that settles a key waits for little more than its own leaf). The unit tests use
/// chunks of 3, so that their small logs cross many chunk boundaries.
#[cfg(not(test))]
pub(crate) const CHUNK: usize = 64;
#[cfg(test)]
pub(crate) const CHUNK: usize = 3;

const PENDING: u8 = 0;
const APPLYING: u8 = 1;
const DONE: u8 = 2;
const FAILED: u8 = 3;

/// One state per chunk and the claim-or-wait protocol over them (invariant 2).
pub(crate) struct Claims {
    states: Box<[AtomicU8]>,
}

impl Claims {
    pub(crate) fn new(chunks: usize) -> Claims {
        Claims { states: (0..chunks).map(|_| AtomicU8::new(PENDING)).collect() }
    }

    /// Whether chunk `i` is applied or failed (no wait needed).
    #[cfg(all(test, loom))]
    pub(crate) fn settled(&self, i: usize) -> bool {
        self.states[i].load(Acquire) >= DONE
    }

    /// Runs `apply` for chunk `i` if nobody has claimed it or its last application failed (it
    /// is told which: `true` for a retry), else waits until whoever claimed it is through;
    /// returns whether the chunk is applied (false: this caller's `apply` failed). If `apply`
    /// panics, the chunk is marked failed and its waiters woken.
    pub(crate) fn settle(&self, i: usize, apply: impl FnOnce(bool) -> bool) -> bool {
        let state = &self.states[i];
        let key = state as *const AtomicU8 as usize;
        loop {
            // Settled chunks (the common case once the thread is through) cost a load.
            let seen = match state.load(Acquire) {
                s @ (PENDING | FAILED) => state.compare_exchange(s, APPLYING, Acquire, Acquire),
                other => Err(other),
            };
            match seen {
                Ok(was) => {
                    let mut mark = Mark { state, key, to: FAILED };
                    if apply(was == FAILED) {
                        mark.to = DONE;
                    }
                    return mark.to == DONE;
                }
                Err(DONE) => return true,
                Err(APPLYING) => {
                    // SAFETY: the key is the address of this chunk's state, which only this
                    // protocol parks on; the validation is one load.
                    unsafe { park::park(key, || state.load(Relaxed) == APPLYING) };
                }
                // Pending or failed again: claim it.
                Err(_) => {}
            }
        }
    }
}

/// Marks a claimed chunk when its application ends (normally or by a panic) and wakes its
/// waiters.
struct Mark<'a> {
    state: &'a AtomicU8,
    key: usize,
    to: u8,
}

impl Drop for Mark<'_> {
    fn drop(&mut self) {
        self.state.store(self.to, Release);
        // SAFETY: as in `Claims::settle`; a waiter validated under the queue's lock that the
        // state was `APPLYING`, so it is parked by now and this finds it.
        unsafe { park::unpark_all(self.key) };
    }
}

/// One table's writes in the batch.
struct Run {
    table: u32,
    writes: Range<usize>,
    /// Its first chunk's index (its chunks are consecutive).
    first_chunk: usize,
}

/// The writes of the log's last batch still to apply (see the module doc).
pub(crate) struct Deferred {
    /// `None` once every chunk is applied (the memory is given back).
    batch: RwLock<Option<Batch>>,
    runs: Vec<Run>,
    /// `(table, writes)` of each chunk.
    chunks: Vec<(u32, Range<usize>)>,
    claims: Claims,
    /// Chunks not applied yet (none: every write is applied).
    left: AtomicUsize,
    /// The background thread stops before its next chunk (the database is closing).
    stop: AtomicBool,
    /// The last error of an application (its text), and how many chunks are failed now.
    failed: Mutex<Option<String>>,
    failed_chunks: AtomicUsize,
    writes: u64,
    started: Instant,
    /// Milliseconds from the open until every chunk was applied (`u64::MAX` until then).
    finished: AtomicU64,
}

impl Deferred {
    /// The writes of `batch` (sorted, one per key) to apply.
    pub(super) fn new(batch: Batch) -> Deferred {
        let mut runs = Vec::new();
        let mut chunks = Vec::new();
        let writes = &batch.writes;
        let mut start = 0;
        while let Some(first) = writes.get(start) {
            let end = start + writes[start..].partition_point(|w| w.table == first.table);
            runs.push(Run { table: first.table, writes: start..end, first_chunk: chunks.len() });
            chunks.extend((start..end).step_by(CHUNK).map(|at| (first.table, at..(at + CHUNK).min(end))));
            start = end;
        }
        Deferred {
            writes: writes.len() as u64,
            claims: Claims::new(chunks.len()),
            left: AtomicUsize::new(chunks.len()),
            batch: RwLock::new(Some(batch)),
            runs,
            chunks,
            stop: AtomicBool::new(false),
            failed: Mutex::new(None),
            failed_chunks: AtomicUsize::new(0),
            started: Instant::now(),
            finished: AtomicU64::new(u64::MAX),
        }
    }

    /// Whether every write is applied.
    #[inline]
    pub(crate) fn is_done(&self) -> bool {
        // Acquire: the decrements form one release sequence, so whoever reads 0 sees every
        // chunk's pages as their appliers left them.
        self.left.load(Acquire) == 0
    }

    /// Writes the log's last batch held when the database opened.
    pub(crate) fn writes(&self) -> u64 {
        self.writes
    }

    /// Milliseconds from the open until every write was applied, once they are.
    pub(crate) fn finished_millis(&self) -> Option<u64> {
        Some(self.finished.load(Acquire)).filter(|&ms| ms != u64::MAX)
    }

    /// Applies the chunks holding writes to keys of `table` (whose tree is `tree`) within
    /// `range`, or waits for whoever applies them. Out of line: the callers' hot paths keep only
    /// a test of a flag.
    #[cold]
    #[inline(never)]
    pub(crate) fn settle_range(&self, table: u32, range: (Bound<&[u8]>, Bound<&[u8]>), tree: &BTree) -> Result<()> {
        if self.is_done() {
            return Ok(());
        }
        let held = self.batch.read().unwrap_or_else(PoisonError::into_inner);
        let Some(batch) = held.as_ref() else { return Ok(()) };
        let Some(run) = self.runs.iter().find(|r| r.table == table) else { return Ok(()) };
        let writes = &batch.writes[run.writes.clone()];
        let position = |key: &[u8], after: bool| {
            let h = head(key);
            writes.partition_point(|w| match batch.cmp_key(w, key, h) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => after,
                std::cmp::Ordering::Greater => false,
            })
        };
        let from = match range.0 {
            Bound::Included(k) => position(k, false),
            Bound::Excluded(k) => position(k, true),
            Bound::Unbounded => 0,
        };
        let to = match range.1 {
            Bound::Included(k) => position(k, true),
            Bound::Excluded(k) => position(k, false),
            Bound::Unbounded => writes.len(),
        };
        if from >= to {
            return Ok(());
        }
        let chunks = run.first_chunk + from / CHUNK..run.first_chunk + (to - 1) / CHUNK + 1;
        chunks.into_iter().try_for_each(|c| self.settle_chunk(batch, c, &|_| Some(tree)))
    }

    /// Applies every chunk not applied yet (waiting for those others apply); `trees` finds a
    /// table's tree. With `background`, stops early once [`Deferred::stop`] was called.
    pub(crate) fn settle_all<'t>(&self, trees: &dyn Fn(u32) -> Option<&'t BTree>, background: bool) -> Result<()> {
        let mut first_error = None;
        {
            let held = self.batch.read().unwrap_or_else(PoisonError::into_inner);
            let Some(batch) = held.as_ref() else { return Ok(()) };
            for c in 0..self.chunks.len() {
                if background && self.stop.load(Relaxed) {
                    return Ok(());
                }
                if let Err(e) = self.settle_chunk(batch, c, trees) {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        // Every chunk applied: the batch's memory goes back.
        self.batch.write().unwrap_or_else(PoisonError::into_inner).take();
        Ok(())
    }

    /// Makes a background [`Deferred::settle_all`] return before its next chunk.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Relaxed);
    }

    /// Whether [`Deferred::stop`] was called.
    #[cfg(test)]
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Relaxed)
    }

    fn settle_chunk<'t>(&self, batch: &Batch, c: usize, trees: &dyn Fn(u32) -> Option<&'t BTree>) -> Result<()> {
        let mut own = None;
        let (table, writes) = &self.chunks[c];
        let applied = self.claims.settle(c, |retry| {
            if retry {
                self.failed_chunks.fetch_sub(1, Relaxed);
            }
            let result = match trees(*table) {
                Some(tree) => batch.apply_run(writes.clone(), tree),
                // Tables are never dropped, and every lookup covers the tables of the open.
                None => Err(Error::Io {
                    what: format!("applying the log replayed at open to table {table}"),
                    source: std::io::Error::other("the table is gone"),
                }),
            };
            match result {
                Ok(()) => {
                    if self.left.fetch_sub(1, AcqRel) == 1 {
                        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
                        self.finished.store(ms, Release);
                    }
                    true
                }
                Err(e) => {
                    self.failed_chunks.fetch_add(1, Relaxed);
                    *self.failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
                    own = Some(e);
                    false
                }
            }
        });
        // `settle` returns false only after this caller's own `apply` failed (a waiter that
        // meets a failed chunk applies it again itself), and then `own` holds the error.
        debug_assert_eq!(applied, own.is_none());
        own.map_or(Ok(()), Err)
    }

    /// The error of the last failed application, while a chunk is failed.
    pub(crate) fn failure(&self) -> Option<String> {
        if self.failed_chunks.load(Relaxed) == 0 {
            return None;
        }
        self.failed.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::Claims;
    use loom::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use loom::sync::Arc;

    /// Two threads settle one chunk: it is applied exactly once, and both return only after
    /// the application (they see its effect), whichever claimed it.
    #[test]
    fn a_chunk_is_applied_once_and_waited_for() {
        loom::model(|| {
            let claims = Arc::new(Claims::new(1));
            let applied = Arc::new(AtomicUsize::new(0));
            let other = {
                let (claims, applied) = (claims.clone(), applied.clone());
                loom::thread::spawn(move || {
                    assert!(claims.settle(0, |_| {
                        applied.fetch_add(1, Relaxed);
                        true
                    }));
                    assert_eq!(applied.load(Relaxed), 1);
                })
            };
            assert!(claims.settle(0, |_| {
                applied.fetch_add(1, Relaxed);
                true
            }));
            assert_eq!(applied.load(Relaxed), 1);
            other.join().unwrap();
            assert!(claims.settled(0));
        });
    }

    /// A failed application fails its caller; whoever needs the chunk next (a waiter too)
    /// applies it again, told it is a retry; once applied, nobody applies it again.
    #[test]
    fn a_failed_chunk_is_applied_again_by_the_next_settler() {
        loom::model(|| {
            let claims = Arc::new(Claims::new(1));
            let tries = Arc::new(AtomicUsize::new(0));
            let other = {
                let (claims, tries) = (claims.clone(), tries.clone());
                // The first try fails, the second succeeds, whoever makes them.
                loom::thread::spawn(move || {
                    claims.settle(0, |retry| {
                        assert_eq!(retry, tries.fetch_add(1, Relaxed) == 1);
                        tries.load(Relaxed) == 2
                    })
                })
            };
            let here = claims.settle(0, |retry| {
                assert_eq!(retry, tries.fetch_add(1, Relaxed) == 1);
                tries.load(Relaxed) == 2
            });
            let there = other.join().unwrap();
            // One of the two failed (the first try), the other applied it (the second).
            assert_eq!(tries.load(Relaxed), 2);
            assert!(here != there);
            assert!(claims.settled(0));
            assert!(claims.settle(0, |_| unreachable!("applied already")));
        });
    }
}
