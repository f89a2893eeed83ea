//! Transactions: multi-version snapshot isolation, with a begin/commit path free of global
//! latches.
//!
//! ```
//! use tern::{Db, Error, Options};
//! let db = Db::open_temporary(Options::default())?;
//! let mut t1 = db.begin()?;
//! t1.put(b"x", b"1")?;
//! let t2 = db.begin_read()?;          // snapshot taken now: t1 has not committed
//! t1.commit()?;
//! assert_eq!(t2.get(b"x")?, None);   // t2 keeps its snapshot
//! assert_eq!(db.begin_read()?.get(b"x")?.as_deref(), Some(&b"1"[..]));
//! # Ok::<(), Error>(())
//! ```
//!
//! # Semantics
//! * A transaction reads the snapshot of its begin timestamp (every commit with a timestamp at or
//!   below it, nothing else) plus its own writes.
//! * A write locks its key exclusively through the lock manager (writers of one key queue;
//!   deadlocks are detected and one victim gets [`Error::Deadlock`](crate::Error::Deadlock)),
//!   then fails with [`Error::Conflict`](crate::Error::Conflict) if the key's newest committed
//!   version is newer than the snapshot (first updater wins). Either error dooms the
//!   transaction: it can then only be aborted. Locks are held until commit or abort.
//! * Read-only transactions take no locks and never fail.
//! * Write skew (G2-item) is allowed, as snapshot isolation allows it.
//!
//! # Structure
//! * `context.rs`: per-thread transaction contexts (snapshot and write-phase slots), the commit
//!   clock, and the scan of running snapshots (module doc: why the protocol is sound).
//! * `version.rs`: version chains hanging off leaf slots, and visibility.
//! * `chains.rs`: the chain table: leaf slots hold chain ids, the table their newest versions.
//! * `gc.rs`: pruning and folding of versions no snapshot needs.
//! * `transaction.rs`: [`Txn`]: reads, writes, commit, abort.
//! * `scan.rs`: [`TxnCursor`] and [`TxnRange`]: scans as a transaction sees them.
//!
//! # Invariants
//! 1. A transaction with snapshot `s` sees a version iff it wrote it, or the version committed
//!    at `t <= s`. Its snapshot is announced in its slot before it reads anything, and a
//!    collector never frees a version an announced snapshot (or one taken after the
//!    collector's scan began) sees.
//! 2. At most one uncommitted version exists per key, as the chain's newest, written by the
//!    holder of the key's exclusive lock; chains change only under their leaf's exclusive latch.
//! 3. A commit's versions become visible together: readers that meet one while it commits wait
//!    for the commit's timestamp (a few instructions) instead of guessing.
//! 4. A plain value in a leaf is visible to every running and future snapshot.

pub(crate) mod chains;
pub(crate) mod context;
pub(crate) mod gc;
mod scan;
mod transaction;
pub(crate) mod version;

pub use scan::{Entry, TxnCursor, TxnRange};
pub use transaction::Txn;
pub(crate) use transaction::Writer;

use crate::lock::Wait;
use crate::sync::aligned::Isolated;
use crate::sync::{LatchClass, Mutex};
use crate::wal::Durability;
use context::Slot;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Options of one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnOptions {
    /// Reads only: no locks, never fails. Writes return [`Error::ReadOnlyTxn`](crate::Error::ReadOnlyTxn).
    pub read_only: bool,
    /// How long a write waits for another writer's lock on the same key. Beware: a thread
    /// that runs two write transactions at once and writes one key in both waits for itself
    /// with `Wait::Forever` (the holder is not waiting, so there is no cycle to detect); use a
    /// timeout when one thread interleaves transactions.
    pub lock_wait: Wait,
    /// When commit returns relative to the disk (`None`: the database's default,
    /// [`WalConfig::durability`](crate::WalConfig)). A transaction that picks
    /// `Periodic` in a database whose default is not is flushed within a second.
    pub durability: Option<Durability>,
}

impl Default for TxnOptions {
    fn default() -> Self {
        TxnOptions { read_only: false, lock_wait: Wait::Forever, durability: None }
    }
}

/// The counted events.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Counter {
    Committed,
    ReadOnlyEnded,
    Aborted,
    Conflicts,
    ConflictsBeforeWait,
    Deadlocks,
    VersionsCreated,
    VersionsPruned,
    VersionsFolded,
    VersionsAborted,
    GcPasses,
    GcKeysLooked,
}

const COUNTERS: usize = 12;
/// Shards written by one thread each (load and store, no read-modify-write); one more for
/// everyone else.
const OWN_SHARDS: usize = 64;

/// A database's transaction counters, sharded by thread context.
pub(crate) struct Counters {
    shards: Box<[Isolated<[AtomicU64; COUNTERS]>]>,
}

impl Counters {
    pub fn new() -> Counters {
        Counters { shards: (0..=OWN_SHARDS).map(|_| Isolated::default()).collect() }
    }

    /// Counts for the thread owning context `owner` (`None`: a shared context).
    #[inline]
    pub fn add(&self, owner: Option<usize>, counter: Counter, n: u64) {
        match owner {
            Some(i) if i < OWN_SHARDS => {
                let c = &self.shards[i][counter as usize];
                c.store(c.load(Relaxed) + n, Relaxed);
            }
            _ => self.add_shared(counter, n),
        }
    }

    /// Counts from any thread.
    pub fn add_shared(&self, counter: Counter, n: u64) {
        self.shards[OWN_SHARDS][counter as usize].fetch_add(n, Relaxed);
    }

    pub fn sum(&self, counter: Counter) -> u64 {
        self.shards.iter().map(|s| s[counter as usize].load(Relaxed)).sum()
    }
}

/// NoisePage's design, for A/B measurement: every begin and end takes one latch (spinning with
/// `sched_yield`) around one list of running transactions.
pub(crate) struct GlobalList {
    /// (slot address, snapshot) of every running transaction.
    running: Mutex<Vec<(usize, u64)>>,
}

impl GlobalList {
    pub fn new(class: LatchClass) -> GlobalList {
        GlobalList { running: Mutex::with_class(Vec::new(), class) }
    }

    /// Registers the transaction in `slot`; returns its snapshot.
    pub fn begin(&self, slot: &Slot) -> u64 {
        let mut running = self.running.lock();
        let snapshot = context::clock_now();
        running.push((slot as *const Slot as usize, snapshot));
        snapshot
    }

    pub fn end(&self, slot: &Slot) {
        let mut running = self.running.lock();
        if let Some(i) = running.iter().position(|&(s, _)| s == slot as *const Slot as usize) {
            running.swap_remove(i);
        }
    }

    /// The running snapshots, sorted, and the clock read before the latch was taken.
    pub fn snapshots(&self) -> (Vec<u64>, u64) {
        let horizon = context::clock_now();
        let mut s: Vec<u64> = self.running.lock().iter().map(|&(_, s)| s).collect();
        s.sort_unstable();
        (s, horizon)
    }
}
