//! Latch counters: per thread, per class, summed when read.
//!
//! Each thread owns a block of counters (one cache line per class) that only it writes, with a
//! relaxed load and store: no read-modify-write instruction and no shared cache line on any
//! latch path. The counters of waiting are always on (they cost nothing next to a wait); the
//! counts of successful acquisitions and optimistic reads, the only ones an uncontended latch
//! would bump, are kept only while switched on ([`set_count_acquisitions`]): the fast path then
//! pays one load of a global flag instead of a thread-local increment. A reader sums every block ever
//! handed out. Blocks are never freed: when a thread exits its block goes to a free list and the
//! next new thread continues counting in it, so totals stay monotonic and no count is lost.
//! A thread that uses a latch after its exit hook ran (from another thread-local's destructor)
//! counts into one shared orphan block instead of adopting a new one, so exiting threads cannot
//! leak blocks; two threads doing that at the same instant may lose an increment there.

use super::class::{LatchClass, MAX_CLASSES};
use serde::Serialize;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex as StdMutex;

/// The things counted per latch class.
#[derive(Clone, Copy, Debug)]
#[repr(usize)]
pub(crate) enum Counter {
    /// Shared or exclusive acquisitions, contended or not (only while counting is on; for page
    /// latches, pages latched without an optimistic visit first).
    Acquisitions,
    /// Optimistic reads validated (successfully or not) on a `HybridLatch`; optimistic visits
    /// of a page (however often validated) for page latches.
    Optimistic,
    /// Acquisitions that did not succeed at the first attempt.
    Contended,
    /// Spin rounds (PAUSE bursts or `sched_yield` calls) while waiting.
    SpinRounds,
    /// Times a waiter went to sleep.
    Parks,
    /// Time spent waiting in contended acquisitions, in [`ticks`](super::primitive::ticks).
    WaitTicks,
    /// `RwLatch` reader-bias revocations by writers.
    Revocations,
    /// Optimistic reads that failed validation (the reader must restart).
    Restarts,
}

const COUNTERS: usize = 8;

#[repr(align(64))]
struct ClassCounters([AtomicU64; COUNTERS]);

struct Block([ClassCounters; MAX_CLASSES]);

impl Block {
    const fn new() -> Block {
        Block([const { ClassCounters([const { AtomicU64::new(0) }; COUNTERS]) }; MAX_CLASSES])
    }

    fn leak() -> &'static Block {
        Box::leak(Box::new(Block::new()))
    }
}

/// Where threads count after their exit hook has run.
static ORPHAN: Block = Block::new();

#[derive(Default)]
struct Registry {
    all: Vec<&'static Block>,
    free: Vec<&'static Block>,
}

static REGISTRY: StdMutex<Registry> = StdMutex::new(Registry { all: Vec::new(), free: Vec::new() });

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // Every mutation is a single push or pop, so a poisoned registry is still consistent.
    REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

std::thread_local! {
    /// This thread's block; a const-initialised `Cell` with no destructor, so access is one
    /// thread-pointer-relative load.
    static BLOCK: Cell<Option<&'static Block>> = const { Cell::new(None) };
    /// Returns the block to the free list when the thread exits.
    static RELEASE: Release = const { Release };
}

struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        if let Ok(Some(block)) = BLOCK.try_with(|b| b.replace(Some(&ORPHAN))) {
            if !std::ptr::eq(block, &ORPHAN) {
                registry().free.push(block);
            }
        }
    }
}

#[cold]
fn adopt_block(cell: &Cell<Option<&'static Block>>) -> &'static Block {
    // Register the exit hook first; if that is impossible the thread is exiting.
    if RELEASE.try_with(|_| ()).is_err() {
        cell.set(Some(&ORPHAN));
        return &ORPHAN;
    }
    let block = {
        let mut reg = registry();
        reg.free.pop().unwrap_or_else(|| {
            let block = Block::leak();
            reg.all.push(block);
            block
        })
    };
    cell.set(Some(block));
    block
}

/// Runs `f` on this thread's counters of `class` (skipped during thread teardown, when the
/// thread-local is gone).
#[inline(always)]
fn with_counters(class: LatchClass, f: impl FnOnce(&ClassCounters)) {
    let _ = BLOCK.try_with(|cell| {
        let block = match cell.get() {
            Some(block) => block,
            None => adopt_block(cell),
        };
        f(&block.0[class.index()]);
    });
}

impl ClassCounters {
    #[inline(always)]
    fn bump(&self, counter: Counter, n: u64) {
        let slot = &self.0[counter as usize];
        // Only the owning thread writes a slot: load+store cannot lose an update.
        slot.store(slot.load(Relaxed).wrapping_add(n), Relaxed);
    }
}

/// Adds `n` to this thread's `counter` of `class`.
#[inline(always)]
pub(crate) fn add(class: LatchClass, counter: Counter, n: u64) {
    with_counters(class, |c| c.bump(counter, n));
}

/// Whether latches count their successful acquisitions and optimistic reads (off unless
/// switched on: see [`set_count_acquisitions`]).
static COUNTING: AtomicBool = AtomicBool::new(false);

/// Switches the counting of every latch's acquisitions and optimistic reads on or off, from the
/// next acquisition on, for the whole process.
///
/// Off by default: it is the one counter a latch would bump when nobody waits. Inline, that
/// thread-local increment cost an uncontended `Mutex` lock and unlock about 10% of its time; so
/// that the default path holds only this flag's test, the count now runs out of line, and with
/// counting on an uncontended `Mutex` measured 0.69x `parking_lot` (`docs/sync.md`). The counts
/// of waiting (contended acquisitions, spin rounds, parks, wait time, revocations, restarts) are
/// always on. Page latches of the buffer pool always count their fixes, which are the pool's
/// hit statistics.
pub fn set_count_acquisitions(on: bool) {
    COUNTING.store(on, Relaxed);
}

/// Whether latches count their acquisitions and optimistic reads ([`set_count_acquisitions`]).
#[inline(always)]
pub fn counts_acquisitions() -> bool {
    COUNTING.load(Relaxed)
}

/// Counts one acquisition (`Acquisitions`) or validated optimistic read
/// (`Optimistic`) of `class` if counting is on (a load of one global flag, no store, when off).
#[inline(always)]
pub(crate) fn add_success(class: LatchClass, counter: Counter) {
    if counts_acquisitions() {
        count_success(class, counter);
    }
}

/// The counting half of [`add_success`], out of line so that the latch's fast path holds only
/// the flag's test.
#[cold]
#[inline(never)]
fn count_success(class: LatchClass, counter: Counter) {
    add(class, counter, 1);
}

/// Records one contended acquisition: spin rounds, parks and ticks waited.
#[inline]
pub(crate) fn add_wait(class: LatchClass, spin_rounds: u64, parks: u64, wait_ticks: u64) {
    with_counters(class, |c| {
        c.bump(Counter::Contended, 1);
        c.bump(Counter::SpinRounds, spin_rounds);
        c.bump(Counter::Parks, parks);
        c.bump(Counter::WaitTicks, wait_ticks);
    });
}

/// Counters of one latch class, summed over all threads since the process started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LatchStats {
    /// The class name.
    pub class: &'static str,
    /// Shared and exclusive acquisitions, counted only while [`set_count_acquisitions`] is on
    /// (off by default; page latches of the buffer pool always count).
    pub acquisitions: u64,
    /// Optimistic reads validated (`HybridLatch`), counted only while
    /// [`set_count_acquisitions`] is on; for page latches, which always count, optimistic
    /// visits of a page (however often their reads are validated).
    pub optimistic: u64,
    /// Acquisitions that had to wait.
    pub contended: u64,
    /// Spin rounds while waiting (PAUSE bursts, or `sched_yield` calls under `Yield`).
    pub spin_rounds: u64,
    /// Times a waiter slept.
    pub parks: u64,
    /// Total nanoseconds spent waiting.
    pub wait_ns: u64,
    /// Reader-bias revocations (`RwLatch`).
    pub revocations: u64,
    /// Failed optimistic validations (`HybridLatch`).
    pub restarts: u64,
}

impl LatchStats {
    /// The counts accumulated between `earlier` and `self`.
    pub fn since(&self, earlier: &LatchStats) -> LatchStats {
        let d = |a: u64, b: u64| a.wrapping_sub(b);
        LatchStats {
            class: self.class,
            acquisitions: d(self.acquisitions, earlier.acquisitions),
            optimistic: d(self.optimistic, earlier.optimistic),
            contended: d(self.contended, earlier.contended),
            spin_rounds: d(self.spin_rounds, earlier.spin_rounds),
            parks: d(self.parks, earlier.parks),
            wait_ns: d(self.wait_ns, earlier.wait_ns),
            revocations: d(self.revocations, earlier.revocations),
            restarts: d(self.restarts, earlier.restarts),
        }
    }

    fn from_totals(class: &'static str, t: [u64; COUNTERS]) -> LatchStats {
        LatchStats {
            class,
            acquisitions: t[Counter::Acquisitions as usize],
            optimistic: t[Counter::Optimistic as usize],
            contended: t[Counter::Contended as usize],
            spin_rounds: t[Counter::SpinRounds as usize],
            parks: t[Counter::Parks as usize],
            wait_ns: super::primitive::ticks_to_ns(t[Counter::WaitTicks as usize]),
            revocations: t[Counter::Revocations as usize],
            restarts: t[Counter::Restarts as usize],
        }
    }
}

/// How many counter blocks exist (for leak tests).
#[cfg(all(test, not(loom)))]
pub(crate) fn block_count() -> usize {
    registry().all.len()
}

/// Counters of `class`, summed over every thread.
pub fn class_stats(class: LatchClass) -> LatchStats {
    let mut blocks = registry().all.clone();
    blocks.push(&ORPHAN);
    let mut totals = [0u64; COUNTERS];
    for block in blocks {
        for (total, slot) in totals.iter_mut().zip(&block.0[class.index()].0) {
            *total = total.wrapping_add(slot.load(Relaxed));
        }
    }
    LatchStats::from_totals(class.name(), totals)
}

/// Counters of every registered latch class.
pub fn stats() -> Vec<LatchStats> {
    LatchClass::all().into_iter().map(class_stats).collect()
}
