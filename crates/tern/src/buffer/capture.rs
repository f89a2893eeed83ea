//! Capturing the pages of a checkpoint as they were at one instant, while readers and writers
//! go on.
//!
//! A checkpoint must write images that show the trees at one instant `I`: a parent written
//! before a split and its child after it would lose the keys the split moved. Two mechanisms
//! give that instant:
//!
//! * **The write gate** (`gate.rs`). Every tree operation that latches pages exclusively runs
//!   inside [`Pool::enter_write`]: a per-stripe counter, one uncontended atomic add on entry
//!   and one on exit. [`Pool::begin_capture`] closes it, waits until no operation is inside
//!   (operations arriving meanwhile wait outside, holding no latch), and starts generation `G`.
//!   So at `I` no operation is half done, and every page change after `I` is made under an
//!   exclusive latch taken after `I`.
//! * **Copy before write.** Taking a page's exclusive latch stamps it with the pool's
//!   generation ([`Pool::note_exclusive`]). While checkpoint `G` captures, the first exclusive
//!   latch after `I` on a page the checkpoint must write (changed since the durable checkpoint,
//!   not yet captured) first copies its image. The checkpointer takes every other page's image
//!   under a shared latch (or, for a page on disk, under LOADING): nobody changed it since `I`.
//!
//! Which pages a checkpoint holds: those allocated at `I` (born at or before `G`, and not free
//! at `I`; ids freed during the capture are kept out of reuse until it ends). Of those it writes
//! the **changed** ones (stamped after the durable checkpoint's generation, or captured); the
//! others keep their durable block. Pages allocated after `I` are not in it.
//!
//! Invariants:
//! 1. While a capture is active, only the checkpointer writes a page it must write: eviction
//!    checks, once it holds a page's WRITING claim, whether a capture needs the page, and skips
//!    its write-back if so; the checkpointer takes the same claim to write (waiting out a
//!    write-back that began before the instant). So the checkpoint's slot (the durable one's
//!    spare) is written by one thread at a time, the checkpoint's image last, and a page changed
//!    after its image was taken stays resident (it has no free slot) until the capture ends.
//! 2. A checkpoint becomes durable slot by slot (`Capture::commit`) before the capture
//!    ends, so eviction never picks a slot the new durable checkpoint uses.
//! 3. A failed checkpoint (its capture dropped uncommitted) leaves the durable one as it was: its
//!    blocks were never written, and its pages stay changed for the next checkpoint.

use super::gate::Gate;
use super::page::Page;
use super::pool::Pool;
use super::state::{self, DIRTY, EVICTED, FREE, LOADING, WRITING};
use crate::{Error, Result};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Mutex as StdMutex;

const STRIPES: usize = 16;

/// What a test runs at a point of [`Capture::take`] (the page id).
#[cfg(all(test, not(loom)))]
type Hook = Option<Box<dyn FnOnce(u32)>>;

#[cfg(all(test, not(loom)))]
thread_local! {
    /// Runs once in [`Capture::take`] on this thread, between its look at the copies and its
    /// load of the page's state word (tests: a writer's copy and free in that window).
    pub(super) static TAKE_WINDOW: std::cell::RefCell<Hook> = const { std::cell::RefCell::new(None) };
}

thread_local! {
    /// The pool whose gate this thread entered last, and how deeply (operations nest: an
    /// update merges, a put writes overflow pages; each guard restores what it found).
    static INSIDE: Cell<(usize, u32)> = const { Cell::new((0, 0)) };
    /// This thread's stripe of the gate's counters.
    static STRIPE: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Relaxed) % STRIPES
    };
}

/// The capture's state in a pool (see the module doc).
pub(crate) struct CaptureState {
    /// Tree operations that latch pages exclusively run inside it.
    gate: Gate,
    /// The generation pages changed now are stamped with (starts at 1).
    pub(crate) gen: AtomicU32,
    /// The durable checkpoint's generation: pages changed after it are stamped higher.
    pub(crate) floor: AtomicU32,
    /// The generation being captured (0: none).
    pub(crate) active: AtomicU32,
    /// Images copied by writers before their first change after the instant.
    copies: StdMutex<HashMap<u32, Box<[u8]>>>,
    /// Ids freed during the capture, given back when it ends.
    pub(crate) deferred: StdMutex<Vec<u32>>,
    /// One checkpoint at a time.
    running: StdMutex<()>,
}

impl Default for CaptureState {
    fn default() -> Self {
        CaptureState {
            gate: Gate::new(STRIPES),
            gen: AtomicU32::new(1),
            floor: AtomicU32::new(0),
            active: AtomicU32::new(0),
            copies: StdMutex::default(),
            deferred: StdMutex::default(),
            running: StdMutex::new(()),
        }
    }
}

/// Inside a pool's write gate until dropped.
#[must_use = "the operation leaves the gate when this is dropped"]
pub(crate) struct Inside<'p> {
    state: Option<&'p CaptureState>,
    stripe: usize,
    /// The thread's gate before this one (restored on leaving: gates of different pools nest).
    before: (usize, u32),
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.state {
            INSIDE.with(|c| c.set(self.before));
            state.gate.leave(self.stripe);
        }
    }
}

/// A capture in progress: checkpoint generation `gen`.
pub(crate) struct Capture<'p> {
    pool: &'p Pool,
    pub gen: u32,
    floor: u32,
    /// Page ids below this existed at the instant...
    pub next: u32,
    /// ...except these, free at the instant.
    free: std::collections::BTreeSet<u32>,
    _running: std::sync::MutexGuard<'p, ()>,
    done: bool,
}

/// One page of a checkpoint, as [`Capture::pages`] lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Member {
    /// Unchanged since the durable checkpoint: its block there (kind, slot, crc).
    Kept { kind: u8, slot: u8, crc: u32 },
    /// Changed: [`Capture::take`] its image.
    Changed,
}

/// A page image [`Capture::take`] found.
#[derive(Debug)]
pub(crate) enum Taken {
    /// Copied from memory; `seen` is the page's state word if it was unchanged since (its frame
    /// may then be marked clean once the copy is written).
    Copied { kind: u8, seen: Option<u64> },
    /// Already in a block no checkpoint uses: the checkpoint takes that block as it is. The
    /// image is in `buf` too, except for an evicted page whose image holds no version-chain ids
    /// (`buf` is then empty: the block was not read).
    OnDisk { kind: u8, slot: u8, crc: u32 },
}

/// Whether a page with `f` is one checkpoint `gen` (durable generation `floor`) must write.
pub(crate) fn must_write(f: &super::meta::Facts, floor: u32, gen: u32) -> bool {
    (f.changed > floor && f.changed <= gen) || f.captured == gen
}

impl Pool {
    /// Enters the write gate (see the module doc) for one tree operation; waits while a
    /// capture is starting, unless this thread is already inside (a nested operation).
    #[inline]
    pub(crate) fn enter_write(&self) -> Inside<'_> {
        if self.file.is_none() {
            return Inside { state: None, stripe: 0, before: (0, 0) };
        }
        let state = &self.capture;
        let me = self as *const Pool as usize;
        let stripe = STRIPE.with(|s| *s) % state.gate.stripes();
        let before = INSIDE.with(Cell::get);
        if before.0 == me && before.1 > 0 {
            state.gate.enter_nested(stripe);
            INSIDE.with(|c| c.set((me, before.1 + 1)));
        } else {
            state.gate.enter(stripe);
            INSIDE.with(|c| c.set((me, 1)));
        }
        Inside { state: Some(state), stripe, before }
    }

    /// Called with page `pid` just latched exclusively (`page` its frame): stamps it changed,
    /// and copies its image first if a capture needs the image it has now.
    #[inline]
    pub(crate) fn note_exclusive(&self, pid: u32, page: &Page) {
        let Some(meta) = self.meta.get(pid) else { return };
        let gen = self.capture.gen.load(Acquire);
        if meta.changed() == gen {
            return;
        }
        self.note_first_exclusive(pid, page, gen);
    }

    #[cold]
    fn note_first_exclusive(&self, pid: u32, page: &Page, gen: u32) {
        let meta = self.meta.get(pid).expect("checked");
        let cap = self.capture.active.load(Acquire);
        if cap != 0 {
            let f = meta.facts();
            if f.captured != cap && must_write(&f, self.capture.floor.load(Acquire), cap) {
                let mut image = Vec::with_capacity(self.page_size());
                page.read_into(0, self.page_size(), &mut image);
                let mut copies = self.capture.copies.lock().unwrap_or_else(|p| p.into_inner());
                // A capture that ended meanwhile (it clears the copies and `active` under this
                // lock) must not find this copy in the next one.
                if self.capture.active.load(Acquire) == cap {
                    copies.insert(pid, image.into_boxed_slice());
                    meta.set_captured(cap);
                }
            }
        }
        meta.set_changed(gen);
    }

    /// Starts capturing checkpoint generation `G` at an instant when no tree operation is
    /// half done; `at_instant` runs at that instant (to read the trees' roots). One checkpoint
    /// at a time: a second caller waits.
    pub(crate) fn begin_capture<R>(&self, at_instant: impl FnOnce() -> R) -> Result<(Capture<'_>, R)> {
        let Some(file) = &self.file else {
            return Err(Error::InvalidArgument("a pool without a page file has no checkpoints".into()));
        };
        if file.refuses_writes() {
            return Err(Error::InvalidArgument("the page file takes no writes (read-only, or a sync failed)".into()));
        }
        let running = self.capture.running.lock().unwrap_or_else(|p| p.into_inner());
        let state = &self.capture;
        let (gen, floor, (next, free), r) = state.gate.at_instant(|| {
            let gen = state.gen.load(SeqCst);
            let floor = state.floor.load(SeqCst);
            // Which pages the checkpoint holds is decided here: a page freed later is still
            // in it (its id stays out of reuse until the capture ends).
            let ids = self.ids_at_instant();
            state.gen.store(gen + 1, SeqCst);
            state.active.store(gen, SeqCst);
            (gen, floor, ids, at_instant())
        });
        Ok((Capture { pool: self, gen, floor, next, free, _running: running, done: false }, r))
    }
}

impl Capture<'_> {
    /// The pages of the checkpoint, by id (see [`Member`]).
    pub(crate) fn pages(&self) -> Vec<(u32, Member)> {
        let pool = self.pool;
        let mut out = Vec::new();
        for pid in 0..self.next {
            let Some(meta) = pool.meta.get(pid) else { continue };
            let f = meta.facts();
            if self.free.contains(&pid) || f.born > self.gen {
                continue;
            }
            let member = match f.durable {
                Some(slot) if !must_write(&f, self.floor, self.gen) => {
                    Member::Kept { kind: f.kind, slot, crc: f.crcs[slot as usize] }
                }
                _ => Member::Changed,
            };
            out.push((pid, member));
        }
        out
    }

    /// Takes page `pid`'s image at the instant into `buf`.
    pub(crate) fn take(&self, pid: u32, buf: &mut Vec<u8>) -> Result<Taken> {
        let pool = self.pool;
        let entry = pool.table.get(pid).expect("a page of the capture");
        let meta = pool.meta.get(pid).expect("a page of the capture");
        let word = pool.state_word(entry);
        loop {
            if let Some(image) = pool.capture.copies.lock().unwrap_or_else(|p| p.into_inner()).remove(&pid) {
                buf.clear();
                buf.extend_from_slice(&image);
                return Ok(Taken::Copied { kind: meta.facts().kind, seen: None });
            }
            #[cfg(all(test, not(loom)))]
            if let Some(window) = TAKE_WINDOW.with(|w| w.borrow_mut().take()) {
                window(pid);
            }
            match state::state(word.load()) {
                EVICTED => {
                    if !word.try_begin_load() {
                        continue;
                    }
                    let f = meta.facts();
                    if f.captured == self.gen {
                        word.release(EVICTED, false);
                        continue;
                    }
                    let slot = f.latest.expect("an evicted page was written");
                    // The block is the image; it is read only for its chain ids (`buf` stays
                    // empty for an image probed without any when it was written back).
                    buf.clear();
                    let (read, counter) = if f.chained {
                        let file = pool.file.as_ref().expect("captures have a file");
                        (file.read_block(pid, Some(slot), f.crcs[slot as usize], buf), &pool.counters.capture_reads)
                    } else {
                        (Ok(()), &pool.counters.capture_reads_skipped)
                    };
                    if read.is_ok() {
                        counter.fetch_add(1, Relaxed);
                        meta.set_captured(self.gen);
                    } else {
                        pool.counters.io_errors.fetch_add(1, Relaxed);
                    }
                    word.release(EVICTED, false);
                    read?;
                    return Ok(Taken::OnDisk { kind: f.kind, slot, crc: f.crcs[slot as usize] });
                }
                LOADING => word.wait_loaded(),
                FREE => {
                    // A writer may have copied the page and freed it since the look at the copies
                    // above: its copy went in before the release this load saw. Look again.
                    if pool.capture.copies.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&pid) {
                        continue;
                    }
                    return Err(Error::Corruption {
                        file: pool.file.as_ref().map(|f| f.name()).unwrap_or_default(),
                        offset: 0,
                        reason: format!("page {pid} was freed during a checkpoint before its image was taken"),
                    });
                }
                _ => {
                    if word.lock_shared().is_err() {
                        continue;
                    }
                    // The word first: a page clean and not being written cannot be claimed by a
                    // write-back while the shared latch is held, so its facts read after are
                    // stable (a write-back still finishing would change them under us).
                    let w = word.load();
                    let f = meta.facts();
                    if f.captured == self.gen {
                        word.unlock_shared();
                        continue;
                    }
                    let frame = pool.frame_of(entry).expect("a resident page has a frame");
                    buf.clear();
                    frame.page.read_into(0, pool.page_size(), buf);
                    meta.set_captured(self.gen);
                    word.unlock_shared();
                    let on_disk = f.latest.filter(|&s| w & (DIRTY | WRITING) == 0 && Some(s) != f.durable);
                    return Ok(match on_disk {
                        Some(slot) => Taken::OnDisk { kind: f.kind, slot, crc: f.crcs[slot as usize] },
                        None => Taken::Copied { kind: f.kind, seen: Some(w) },
                    });
                }
            }
        }
    }

    /// Writes a copied image (in `buf`) of page `pid` to the slot the durable checkpoint does not
    /// use; returns the slot and its crc32c.
    pub(crate) fn write(&self, pid: u32, buf: &[u8], seen: Option<u64>) -> Result<(u8, u32)> {
        let pool = self.pool;
        let meta = pool.meta.get(pid).expect("a page of the capture");
        let word = pool.state_word(pool.table.get(pid).expect("a page of the capture"));
        // A write-back that began before the instant may be writing the same slot: wait for
        // it, and keep later ones off (they skip pages the capture writes).
        let claimed = word.claim_for_checkpoint();
        let slot = meta.facts().spare_slot();
        let file = pool.file.as_ref().expect("captures have a file");
        let written = file.write_page(pid, slot, buf);
        if let Ok(crc) = written {
            pool.counters.writes.fetch_add(1, Relaxed);
            pool.note_file_extent(pid);
            // Not probed: the checkpoint resolves this image's chains itself.
            meta.note_written(slot, crc, true, true);
        } else {
            pool.counters.io_errors.fetch_add(1, Relaxed);
        }
        if claimed && word.finish_checkpoint_write(seen.filter(|_| written.is_ok())) {
            pool.counters.dirty.fetch_sub(1, Relaxed);
        }
        Ok((slot, written?))
    }

    /// Makes the page file's writes durable.
    pub(crate) fn sync(&self) -> Result<()> {
        self.pool.file.as_ref().expect("captures have a file").sync()
    }

    /// The checkpoint is durable: `slots` gives the block of every page it holds (by id).
    /// Ends the capture; cuts a free tail the checkpoint does not use.
    pub(crate) fn commit(mut self, slots: &HashMap<u32, u8>) {
        let pool = self.pool;
        for pid in 0..self.next {
            if let Some(meta) = pool.meta.get(pid) {
                meta.set_durable(slots.get(&pid).copied());
            }
        }
        pool.capture.floor.store(self.gen, SeqCst);
        let extent = slots.keys().max().map_or(0, |&p| p + 1);
        self.end(Some(extent));
    }

    fn end(&mut self, extent: Option<u32>) {
        self.done = true;
        let pool = self.pool;
        {
            let mut copies = pool.capture.copies.lock().unwrap_or_else(|p| p.into_inner());
            pool.capture.active.store(0, SeqCst);
            copies.clear();
        }
        give_back_heap();
        let deferred = std::mem::take(&mut *pool.capture.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        pool.give_back_ids(deferred, extent);
    }
}

/// Hands heap memory the capture freed (its copies of pages) back to the system: malloc keeps
/// freed blocks for reuse, and under a memory limit that memory belongs to the page cache.
fn give_back_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes malloc's own locks and only returns free memory to the system;
    // no memory of ours is passed or touched.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl Drop for Capture<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.end(None);
        }
    }
}
