//! Eviction: a second-chance clock over the frames, dirty pages written back in batches, and
//! a background evictor that keeps free frames ahead of demand.
//!
//! Invariants:
//! * The clock visits frames in index order. An UNLOCKED page is MARKED (inner nodes only on
//!   every [`INNER_PASSES`]th visit: a descent needs them all); an access clears the mark,
//!   except a point read of a clean leaf whose key the row cache takes instead (the key stays
//!   cached, the leaf may go: `rows.rs`). A page still MARKED at the next visit is evicted if
//!   clean, or queued for write-back if dirty; pages latched, loading or being written are
//!   skipped.
//! * Write-back copies the page under an optimistic read (writers are not blocked during the
//!   I/O), writes the copy, and clears DIRTY only if the version did not move meanwhile.
//! * The background evictor wakes when free frames fall below the low watermark and evicts
//!   until they reach the high one. A thread that finds no free frame evicts one small batch
//!   itself ([`SMALL_BATCH`]), never the pool; application threads are not pulled into
//!   bulk eviction (WiredTiger's WT-15211 is the stall this avoids).

use super::file::PageFile;
use super::pool::{Kind, Pool};
use super::state::{self, DIRTY, MARKED, UNLOCKED, WRITING};
use crate::Result;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex as StdMutex, Weak};
use std::time::Duration;

/// Pages an application thread evicts when it finds no free frame.
pub(crate) const SMALL_BATCH: usize = 8;
/// Dirty pages written per batch, and pages the background evictor frees per round.
const BATCH: usize = 64;
/// Dirty pages one pass of emptying the frames past the capacity writes back at most.
const SHRINK_WRITES: usize = 4 * BATCH;
/// Clock visits an inner node survives unmarked.
pub(crate) const INNER_PASSES: u64 = 4;

#[derive(Default)]
struct Signal {
    stop: StdMutex<bool>,
    wake: Condvar,
    wanted: AtomicBool,
}

/// The background evictor's thread and its doorbell.
#[derive(Default)]
pub(crate) struct Evictor {
    signal: Arc<Signal>,
    thread: StdMutex<Option<std::thread::JoinHandle<()>>>,
}

fn low_water(pool: &Pool) -> usize {
    (pool.capacity() / 64).clamp(4, 1024)
}

fn high_water(pool: &Pool) -> usize {
    (pool.capacity() / 32).clamp(8, 2048)
}

impl Evictor {
    /// Starts the background evictor of a bounded pool.
    pub(crate) fn start(pool: &Arc<Pool>) {
        if !pool.evicts() {
            return;
        }
        let weak: Weak<Pool> = Arc::downgrade(pool);
        let signal = pool.evictor.signal.clone();
        let spawned = std::thread::Builder::new().name("tern-evictor".into()).spawn(move || loop {
            {
                let stop = signal.stop.lock().unwrap_or_else(|p| p.into_inner());
                let (stop, _) = signal
                    .wake
                    .wait_timeout_while(stop, Duration::from_millis(100), |stop| !*stop && !signal.wanted.load(Relaxed))
                    .unwrap_or_else(|p| p.into_inner());
                if *stop {
                    return;
                }
            }
            signal.wanted.store(false, Relaxed);
            let Some(pool) = weak.upgrade() else { return };
            if pool.shrinking() {
                // Errors leave pages where they are: the next round tries again.
                let _ = pool.empty_frames_past_capacity();
            }
            while pool.needs_frames(high_water(&pool)) {
                match pool.evict_batch(BATCH) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        });
        // Without the thread, application threads still evict for themselves.
        if let Ok(handle) = spawned {
            *pool.evictor.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        }
    }

    /// Wakes the evictor to empty the frames past the capacity (the pool is giving memory to
    /// its row cache); it keeps at it every round until they are all retired.
    pub(crate) fn shrink(&self, pool: &Pool) {
        if pool.evicts() && !self.signal.wanted.swap(true, Relaxed) {
            self.signal.wake.notify_one();
        }
    }

    /// Wakes the evictor if free frames ran low.
    #[inline]
    pub(crate) fn poke(&self, pool: &Pool) {
        if pool.evicts() && pool.needs_frames(low_water(pool)) && !self.signal.wanted.swap(true, Relaxed) {
            self.signal.wake.notify_one();
        }
    }

    /// Stops the thread (from the pool's drop).
    pub(crate) fn stop(&self) {
        *self.signal.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.signal.wake.notify_all();
        if let Some(handle) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            // The evictor itself may drop the last reference to the pool: it then exits alone.
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

impl Pool {
    /// Whether fewer than `want` frames are free and no new ones may be made.
    fn needs_frames(&self, want: usize) -> bool {
        self.frame_count.load(Relaxed) as usize >= self.capacity().saturating_sub(want)
            && self.free_frames.load(Relaxed) < want
    }

    /// The frame at registry index `i` and the page in it (id and table entry); `None` if the
    /// frame is free or retired, or changed hands while it was looked at.
    fn page_in_frame(&self, i: u32) -> Option<(&super::frames::Frame, u32, &super::pool::Entry)> {
        let block = NonNull::new(self.registry.get(i)?.load(Relaxed))?;
        let frame = self.frame_at(block);
        let owner = frame.owner.load(Acquire);
        if owner == 0 {
            return None;
        }
        let pid = (owner - 1) as u32;
        let entry = self.table.get(pid)?;
        // The frame changed hands since the owner was read.
        (entry.frame.load(Relaxed) == block.as_ptr()).then_some((frame, pid, entry))
    }

    /// Whether frames past the capacity still hold pages (the pool is giving memory to its row
    /// cache).
    pub(crate) fn shrinking(&self) -> bool {
        self.frame_count.load(Relaxed) as usize > self.capacity()
    }

    /// Evicts the pages of the frames past the capacity (writing dirty ones back first), so
    /// that those frames retire (`Pool::put_frame`). Pages latched or being written are left
    /// for the next round, and so are the dirty pages past [`SHRINK_WRITES`] in one pass (the
    /// evictor goes back to keeping free frames in between).
    pub(crate) fn empty_frames_past_capacity(&self) -> Result<()> {
        let capacity = self.capacity();
        let count = self.frame_count.load(Acquire) as usize;
        let mut dirty = Vec::new();
        let mut written = 0;
        for i in capacity..count {
            let Some((_, pid, entry)) = self.page_in_frame(i as u32) else { continue };
            let word = self.state_word(entry);
            let mut w = word.load();
            if state::state(w) == UNLOCKED && word.try_mark(w) {
                w = word.load();
            }
            if state::state(w) == MARKED && w & WRITING == 0 {
                if w & DIRTY == 0 {
                    self.evict(pid, w);
                } else if written < SHRINK_WRITES {
                    dirty.push(pid);
                }
            }
            if dirty.len() >= BATCH {
                written += dirty.len();
                self.write_back_and_evict(&mut dirty)?;
            }
        }
        self.write_back_and_evict(&mut dirty)
    }

    /// Writes back the dirty pages `pids` and evicts those still clean and marked; empties
    /// `pids`.
    fn write_back_and_evict(&self, pids: &mut Vec<u32>) -> Result<()> {
        if pids.is_empty() {
            return Ok(());
        }
        self.write_back(pids)?;
        for pid in pids.drain(..) {
            let w = self.state_word(self.table.get(pid).expect("queued pages exist")).load();
            self.evict(pid, w);
        }
        Ok(())
    }

    /// Runs the clock until `want` frames are freed, a batch of dirty pages is written back,
    /// or two sweeps found nothing; returns the frames freed.
    pub(crate) fn evict_batch(&self, want: usize) -> Result<usize> {
        self.note_evicting();
        let count = u64::from(self.frame_count.load(Acquire));
        let mut freed = 0;
        let mut dirty = Vec::new();
        for _ in 0..count * 2 {
            let i = self.hand.fetch_add(1, Relaxed) % count;
            let Some((frame, pid, entry)) = self.page_in_frame(i as u32) else { continue };
            let word = self.state_word(entry);
            let w = word.load();
            match state::state(w) {
                UNLOCKED => {
                    let kind = frame.kind.load(Relaxed);
                    if Kind::from_bits(kind) == Kind::Inner && kind >> 8 < INNER_PASSES {
                        frame.kind.store(kind + (1 << 8), Relaxed);
                        continue;
                    }
                    frame.kind.store(kind & 0xff, Relaxed);
                    word.try_mark(w);
                }
                MARKED if w & WRITING != 0 => {}
                MARKED if w & DIRTY != 0 => dirty.push(pid),
                // A frame retired instead of freed (past the capacity) does not count.
                MARKED if self.evict(pid, w) == Some(true) => freed += 1,
                _ => {}
            }
            if freed >= want || dirty.len() >= BATCH {
                break;
            }
        }
        if !dirty.is_empty() {
            self.write_back(&mut dirty)?;
            for pid in dirty {
                if freed < want {
                    let w = self.state_word(self.table.get(pid).expect("queued pages exist")).load();
                    if self.evict(pid, w) == Some(true) {
                        freed += 1;
                    }
                }
            }
        }
        Ok(freed)
    }

    /// Evicts page `pid` if it is still MARKED, clean and not being written as in `w`:
    /// `Some(true)` if its frame went to the free list, `Some(false)` if it was retired (past
    /// the capacity), `None` if the page was not evicted.
    fn evict(&self, pid: u32, w: u64) -> Option<bool> {
        let entry = self.table.get(pid).expect("the clock found this page");
        let word = self.state_word(entry);
        if !word.try_lock_for_eviction(w) {
            return None;
        }
        let block = NonNull::new(entry.frame.swap(std::ptr::null_mut(), Relaxed)).expect("resident");
        word.release(state::EVICTED, false);
        let freed = self.put_frame(self.frame_at(block));
        self.counters.evictions.fetch_add(1, Relaxed);
        Some(freed)
    }

    /// Writes back the dirty pages `pids` (in page order: block order within each slot); pages
    /// that changed or are already
    /// being written are skipped. The first I/O error stops the batch and is returned.
    pub(crate) fn write_back(&self, pids: &mut [u32]) -> Result<()> {
        let file = self.file.as_ref().expect("only pools with a file evict");
        if file.refuses_writes() {
            return Ok(()); // dirty pages stay in memory
        }
        pids.sort_unstable();
        for &pid in pids.iter() {
            let entry = self.table.get(pid).expect("queued pages exist");
            let word = self.state_word(entry);
            let Some(claimed) = word.try_claim_write() else { continue };
            // Under the claim: a capture that needs this page writes it (capture.rs, invariant 1).
            let capturing = self.capture.active.load(SeqCst);
            let facts = self.meta.get(pid).expect("queued pages exist").facts();
            if capturing != 0 && super::capture::must_write(&facts, self.capture.floor.load(SeqCst), capturing) {
                word.finish_write(claimed, false);
                continue;
            }
            let slot = facts.spare_slot();
            let Some(block) = NonNull::new(entry.frame.load(Relaxed)) else {
                word.finish_write(claimed, false);
                continue;
            };
            let page = &self.frame_at(block).page;
            let written = PageFile::with_buffer(|buf| {
                buf.clear();
                page.read_into(0, self.page_size(), buf);
                // Only leaves hold chain ids. Probed on the frame, before the validation that
                // also covers the copy.
                let chained = facts.kind == Kind::Leaf as u8 && self.may_hold_chains(page);
                if !word.validate(claimed) {
                    return Ok(None);
                }
                file.write_page(pid, slot, buf).map(|crc| Some((crc, chained)))
            });
            match written {
                Ok(Some((crc, chained))) => {
                    self.note_written(pid, slot, crc, chained);
                    if word.finish_write(claimed, true) {
                        self.counters.dirty.fetch_sub(1, Relaxed);
                    }
                    self.counters.writes.fetch_add(1, Relaxed);
                    self.counters.write_backs.fetch_add(1, Relaxed);
                }
                Ok(None) => {
                    word.finish_write(claimed, false);
                }
                Err(e) => {
                    word.finish_write(claimed, false);
                    self.counters.io_errors.fetch_add(1, Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Whether [`write_behind`](Self::write_behind) writes anything: the pool has a file that
    /// takes writes.
    pub(crate) fn writes_behind(&self) -> bool {
        self.file.as_ref().is_some_and(|f| !f.refuses_writes())
    }

    /// Writes back the finished dirty pages `pids` (a bulk load's, `btree/bulk.rs`) as the
    /// evictor would, then has the kernel start writing them to the disk, so that neither the
    /// checkpoint after the load nor the page cache's flusher has them all to write at once.
    /// Pages that changed or left meanwhile are skipped.
    pub(crate) fn write_behind(&self, pids: &mut [u32]) -> Result<()> {
        let Some(file) = self.file.as_ref() else { return Ok(()) };
        self.write_back(pids)?; // sorts `pids`
        let mut run = 0;
        for i in 1..=pids.len() {
            if i == pids.len() || pids[i] != pids[i - 1] + 1 {
                file.start_writing(pids[run], (i - run) as u32);
                run = i;
            }
        }
        Ok(())
    }

    /// The clock's first pass over page `pid` alone: marks it if resident and unlatched
    /// (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn mark(&self, pid: u32) -> bool {
        let word = self.state_word(self.table.get(pid).expect("a page of the pool"));
        word.try_mark(word.load())
    }

    /// Whether page `pid` is resident and MARKED (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_marked(&self, pid: u32) -> bool {
        state::state(self.state_word(self.table.get(pid).expect("a page of the pool")).load()) == MARKED
    }

    /// Stops the background evictor: application threads evict for themselves from now on,
    /// so a test's own thread is the only one that changes the pool (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn stop_evictor(&self) {
        self.evictor.stop();
    }

    /// Whether page `pid` is resident and DIRTY (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_dirty(&self, pid: u32) -> bool {
        let w = self.state_word(self.table.get(pid).expect("a page of the pool")).load();
        state::readable(w) && w & DIRTY != 0
    }

    /// The clock's second pass over page `pid` alone: evicts it if still MARKED and clean
    /// (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn evict_if_marked(&self, pid: u32) -> bool {
        let w = self.state_word(self.table.get(pid).expect("a page of the pool")).load();
        self.evict(pid, w).is_some()
    }

    /// Writes back every dirty page (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn flush(&self) -> Result<()> {
        if self.file.is_none() {
            return Ok(());
        }
        let mut dirty: Vec<u32> = self
            .table
            .iter()
            .filter(|(_, e)| {
                let w = e.word.load(Relaxed);
                state::readable(w) && w & DIRTY != 0
            })
            .map(|(pid, _)| pid)
            .collect();
        self.write_back(&mut dirty)
    }
}
