//! Transaction contexts: where a running transaction announces its snapshot and its state.
//!
//! Every thread owns a [`Context`] of a few [`Slot`]s, each on its own 128-byte pair of cache
//! lines. A transaction claims a free slot of its thread's context, announces its snapshot
//! timestamp there and, if it writes, its phase. Beginning and ending a transaction therefore
//! touch only the thread's own lines and the commit clock: no list, no latch, nothing shared
//! between threads (NoisePage's single latch around the running-transaction list cost it half
//! its cycles). Garbage collection reads the slots one at a time ([`active_snapshots`]) and never
//! stops anyone.
//!
//! Contexts are leaked and recycled: a thread's context returns to a free list when the thread
//! exits and the next new thread takes it, so there are about as many as threads alive at once.
//! Only its thread claims the slots of its context (a transaction stays on its thread); a thread
//! running more transactions at once than its context has slots claims slots of shared overflow
//! contexts, with a compare-and-swap.
//!
//! # The snapshot protocol
//! Begin: read the clock (`s0`), mark the slot "beginning, at least `s0`", fence, read the clock
//! again (the snapshot `s >= s0`), store the snapshot. A collector first reads the clock (`c`),
//! fences, then reads the slots. A transaction the collector saw as `FREE` marked its slot after
//! the collector's fence, and read the clock after that: its snapshot is `>= c`. One it saw
//! beginning will have a snapshot `>= s0`. So the collector knows every running snapshot
//! exactly, except ones `>= min(c, every s0 seen)`; keeping the versions visible at that bound
//! and all newer ones covers them. The collector does not wait for a beginning transaction (one
//! preempted between its two clock reads would otherwise stall it for a time slice), except
//! for the few instructions between an overflow slot's compare-and-swap and its bound.
//!
//! The fence pair is asymmetric (`sync::asymmetric`): begin, run millions of times a second,
//! issues only a compiler barrier; the collector, run rarely, forces a full barrier on every
//! thread (`membarrier`). So beginning a transaction executes no locked instruction: the slot
//! is the thread's own, and only its thread claims it (with plain stores). Slots of the shared
//! overflow contexts, which any thread may claim, are claimed with a compare-and-swap.
//!
//! # Write phases
//! `Slot::state` is `seq << 2 | phase` (`IDLE`, `ACTIVE`, `COMMITTING`). Versions a transaction
//! writes name its slot and `seq`. Commit stores `COMMITTING` (SeqCst) before taking its commit
//! timestamp from the clock, stamps its versions, then returns to `IDLE` with the next `seq`. A
//! reader whose snapshot `s` came from a later clock read than a commit's timestamp `t <= s`
//! therefore sees `COMMITTING` or later (the clock read synchronizes with the timestamp's
//! `fetch_add`), never `ACTIVE`: seeing `ACTIVE` proves the commit timestamp will exceed `s`.

use crate::sync::asymmetric;
use std::cell::Cell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Mutex as StdMutex;

/// Slot snapshot: unclaimed.
pub(crate) const FREE: u64 = u64::MAX;
/// Slot snapshot tag: claimed, the snapshot being read from the clock; the rest of the word is
/// a lower bound of it. (Timestamps stay below 2^63.)
pub(crate) const BEGINNING: u64 = 1 << 63;
/// Slot snapshot: an overflow slot just taken by a compare-and-swap, its database and bound about
/// to be stored (a collector waits this out: a few instructions, on a rare path).
const CLAIMING: u64 = u64::MAX - 1;

/// Write phase: no write transaction in the slot.
pub(crate) const IDLE: u64 = 0;
/// Write phase: a write transaction is running; its versions are invisible to others.
pub(crate) const ACTIVE: u64 = 1;
/// Write phase: the transaction is taking its commit timestamp and stamping its versions.
pub(crate) const COMMITTING: u64 = 2;

/// Slots per context: transactions one thread can run at once before borrowing elsewhere.
const SLOTS: usize = 4;

/// The commit clock: the timestamp of the latest commit (or a later one being taken). Process-
/// wide, so snapshots of every database compare; a database opened from disk moves it past its
/// own timestamps.
static CLOCK: crate::sync::aligned::Isolated<AtomicU64> = crate::sync::aligned::Isolated(AtomicU64::new(0));

/// The newest timestamp handed out (a snapshot taken now sees every commit up to it).
#[inline]
pub(crate) fn clock_now() -> u64 {
    CLOCK.load(SeqCst)
}

/// A new commit timestamp.
#[inline]
pub(crate) fn next_commit_ts() -> u64 {
    CLOCK.fetch_add(1, SeqCst) + 1
}

/// Moves the clock to at least `ts` (a database opened from disk, past its own timestamps).
pub(crate) fn clock_advance_to(ts: u64) {
    CLOCK.fetch_max(ts, SeqCst);
}

/// One running transaction's announcements.
#[repr(align(128))]
pub(crate) struct Slot {
    /// `FREE`, `BEGINNING`, or the snapshot timestamp of the transaction in the slot.
    pub snapshot: AtomicU64,
    /// The database (its process-unique id) of the transaction in the slot.
    pub db: AtomicU64,
    /// `seq << 2 | phase`.
    pub state: AtomicU64,
}

/// The slot named as writer of versions restored from a checkpoint (never claimed).
pub(crate) static RESTORED: Slot = Slot::new();

impl Slot {
    const fn new() -> Slot {
        Slot { snapshot: AtomicU64::new(FREE), db: AtomicU64::new(0), state: AtomicU64::new(IDLE) }
    }

    /// Claims a slot of the calling thread's own context if it is free (only this thread claims
    /// its slots, so plain stores do), marked beginning at `floor`; the light fence orders the
    /// claim before the snapshot's clock read.
    #[inline]
    fn claim_own(&self, db: u64, floor: u64) -> bool {
        if self.snapshot.load(Relaxed) != FREE {
            return false;
        }
        self.db.store(db, Relaxed);
        // Release: a collector that sees the claim sees its database.
        self.snapshot.store(BEGINNING | floor, Release);
        asymmetric::light();
        true
    }

    /// Claims a slot of a shared overflow context, racing other threads: a compare-and-swap
    /// takes it (`CLAIMING`: a collector waits that out), then the database and the bound are
    /// published as for an own slot. The swap also orders the claim before the snapshot's clock
    /// read.
    fn claim_shared(&self, db: u64, floor: u64) -> bool {
        if self.snapshot.load(Relaxed) != FREE
            || self.snapshot.compare_exchange(FREE, CLAIMING, SeqCst, Relaxed).is_err()
        {
            return false;
        }
        self.db.store(db, Relaxed);
        self.snapshot.store(BEGINNING | floor, Release);
        true
    }

    /// Reads the snapshot from the clock and announces it in the claimed slot; returns it.
    #[inline]
    pub fn announce(&self) -> u64 {
        let snapshot = clock_now();
        self.announce_snapshot(snapshot);
        snapshot
    }

    /// Announces `snapshot` in the claimed slot.
    #[inline]
    pub fn announce_snapshot(&self, snapshot: u64) {
        self.snapshot.store(snapshot, Release);
    }

    /// Gives the slot up (the transaction ended).
    #[inline]
    pub fn release(&self) {
        self.snapshot.store(FREE, Release);
    }

    /// The transaction's sequence number and the slot in `ACTIVE` for it.
    #[inline]
    pub fn start_writing(&self) -> u64 {
        let seq = (self.state.load(Relaxed) >> 2) + 1;
        self.state.store(seq << 2 | ACTIVE, Release);
        seq
    }
}

/// A thread's slots. Aligned to 512 bytes: the owning thread writes them on every begin and end
/// (see `sync::aligned::Isolated` for why 128 is not enough).
#[repr(align(512))]
pub(crate) struct Context {
    slots: [Slot; SLOTS],
    /// Unique among contexts; small (contexts are recycled).
    pub index: usize,
}

#[derive(Default)]
struct Registry {
    /// Every context, for scans.
    all: Vec<&'static Context>,
    /// Thread contexts whose thread exited.
    free: Vec<&'static Context>,
    /// Contexts of no thread, whose slots any thread may claim (with a compare-and-swap).
    overflow: Vec<&'static Context>,
}

static REGISTRY: StdMutex<Registry> =
    StdMutex::new(Registry { all: Vec::new(), free: Vec::new(), overflow: Vec::new() });

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // Every mutation is a single push or pop: a poisoned registry is still consistent.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    /// A context for a thread (the thread alone claims its slots until it exits).
    fn take(&mut self) -> &'static Context {
        self.free.pop().unwrap_or_else(|| self.new_context())
    }

    fn new_context(&mut self) -> &'static Context {
        let ctx: &'static Context =
            Box::leak(Box::new(Context { slots: [const { Slot::new() }; SLOTS], index: self.all.len() }));
        self.all.push(ctx);
        ctx
    }
}

std::thread_local! {
    static MINE: Cell<Option<&'static Context>> = const { Cell::new(None) };
    static RELEASE: ReleaseOnExit = const { ReleaseOnExit };
}

/// Threads that hold a context now (have run a transaction and not exited).
/// On a line of its own: every write transaction's begin reads it.
static THREADS: crate::sync::aligned::Isolated<AtomicUsize> = crate::sync::aligned::Isolated(AtomicUsize::new(0));

/// How many threads of the process have run a transaction and are still alive (admission
/// engages only when they outnumber its tickets).
#[inline]
pub(crate) fn threads() -> usize {
    THREADS.load(Relaxed)
}

/// Returns the thread's context to the free list when the thread exits.
struct ReleaseOnExit;

impl Drop for ReleaseOnExit {
    fn drop(&mut self) {
        if let Ok(Some(ctx)) = MINE.try_with(|c| c.take()) {
            registry().free.push(ctx);
            THREADS.fetch_sub(1, Relaxed);
        }
    }
}

/// The calling thread's context (a thread tearing down its thread-locals borrows a spare one).
#[inline]
pub(crate) fn my_context() -> &'static Context {
    MINE.try_with(|c| match c.get() {
        Some(ctx) => ctx,
        None => adopt(c),
    })
    .unwrap_or_else(|_| registry().take())
}

#[cold]
fn adopt(cell: &Cell<Option<&'static Context>>) -> &'static Context {
    let ctx = registry().take();
    if RELEASE.try_with(|_| ()).is_ok() {
        cell.set(Some(ctx));
        THREADS.fetch_add(1, Relaxed);
    }
    ctx
}

/// A claimed slot, and the context it belongs to.
pub(crate) struct Claimed {
    pub context: &'static Context,
    pub slot: &'static Slot,
    /// The context is the calling thread's own (nobody else claims its slots or counts in its
    /// counter shard while the thread lives).
    pub own: bool,
}

/// Claims a slot: one of this thread's, or one of a shared overflow context. It is marked
/// beginning, with the clock read now as a lower bound of the snapshot to come.
#[inline]
pub(crate) fn claim_slot(db: u64) -> Claimed {
    let ctx = my_context();
    let floor = clock_now();
    match ctx.slots.iter().find(|s| s.claim_own(db, floor)) {
        Some(slot) => Claimed { context: ctx, slot, own: true },
        None => {
            let (context, slot) = claim_overflow(db, floor);
            Claimed { context, slot, own: false }
        }
    }
}

/// A slot of an overflow context: this thread runs more transactions at once than its context
/// has slots.
#[cold]
fn claim_overflow(db: u64, floor: u64) -> (&'static Context, &'static Slot) {
    let mut reg = registry();
    for &ctx in reg.overflow.iter() {
        if let Some(slot) = ctx.slots.iter().find(|s| s.claim_shared(db, floor)) {
            return (ctx, slot);
        }
    }
    let ctx = reg.new_context();
    reg.overflow.push(ctx);
    let slot = ctx.slots.iter().find(|s| s.claim_shared(db, floor)).expect("a new context has free slots");
    (ctx, slot)
}

/// The snapshots of `db`'s running transactions, sorted, and a horizon: every running
/// snapshot not in the list is at least the horizon (the clock read before the scan, lowered to
/// the lower bound of any transaction caught beginning, whose bound is in the list too).
pub(crate) fn active_snapshots(db: u64) -> (Vec<u64>, u64) {
    let mut horizon = clock_now();
    // Pairs with the light fence of every begin (see the module doc).
    asymmetric::heavy();
    let contexts: Vec<&'static Context> = registry().all.clone();
    let mut snapshots = Vec::new();
    for ctx in contexts {
        for slot in &ctx.slots {
            let s = settled(slot);
            if s == FREE || slot.db.load(Relaxed) != db {
                continue;
            }
            if s & BEGINNING != 0 {
                // Its snapshot will be at least the bound: keep everything from there up.
                horizon = horizon.min(s & !BEGINNING);
            }
            snapshots.push(s & !BEGINNING);
        }
    }
    snapshots.sort_unstable();
    (snapshots, horizon)
}

/// The slot's snapshot word, waiting out an overflow slot being claimed (a few instructions,
/// unless its thread was preempted there; overflow slots are rare).
fn settled(slot: &Slot) -> u64 {
    let mut spins = 0u32;
    loop {
        let s = slot.snapshot.load(Acquire);
        if s != CLAIMING {
            return s;
        }
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn slots_are_claimed_once_and_scanned_by_database() {
        let db = 0xdb_0001;
        let a = claim_slot(db).slot;
        let b = claim_slot(db + 1).slot;
        assert!(!std::ptr::eq(a, b));
        let sa = a.announce();
        let committed = next_commit_ts();
        let sb = b.announce();
        assert!(sb >= committed && committed > sa);
        let (mine, horizon) = active_snapshots(db);
        assert!(mine.contains(&sa) && !mine.contains(&sb), "{mine:?}");
        assert!(horizon >= sb);
        a.release();
        b.release();
        assert!(!active_snapshots(db).0.contains(&sa));
        // More transactions than a context has slots: the rest come from elsewhere.
        let many: Vec<_> = (0..3 * SLOTS).map(|_| claim_slot(db).slot).collect();
        for (i, s) in many.iter().enumerate() {
            assert!(many[..i].iter().all(|t| !std::ptr::eq(*t, *s)), "slot claimed twice");
            s.announce();
        }
        assert!(active_snapshots(db).0.len() >= 3 * SLOTS);
        many.iter().for_each(|s| s.release());
    }

    #[test]
    fn a_transaction_caught_beginning_lowers_the_horizon_to_its_bound() {
        let db = 0xdb_0003;
        let floor = clock_now();
        let slot = claim_slot(db).slot; // beginning: no snapshot announced yet
        next_commit_ts();
        let (snapshots, horizon) = active_snapshots(db);
        assert!(horizon <= slot.snapshot.load(Relaxed) & !BEGINNING && horizon >= floor, "{horizon} vs {floor}");
        assert!(snapshots.contains(&horizon));
        let s = slot.announce();
        assert!(s > horizon);
        let (snapshots, horizon) = active_snapshots(db);
        assert!(snapshots.contains(&s) && horizon >= s);
        slot.release();
    }

    #[test]
    fn write_sequence_numbers_advance() {
        let slot = claim_slot(0xdb_0002).slot;
        let first = slot.start_writing();
        slot.state.store(first << 2 | IDLE, Release);
        let second = slot.start_writing();
        assert_eq!(second, first + 1);
        assert_eq!(slot.state.load(Relaxed) & 3, ACTIVE);
        slot.state.store(second << 2 | IDLE, Release);
        slot.release();
    }
}
