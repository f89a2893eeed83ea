//! The lock manager: lockers, five lock modes, FIFO waiting, deadlock detection, and no global
//! mutex on the request path.
//!
//! Transactions use it for record locks; applications can use it directly:
//!
//! ```
//! use tern::lock::{LockConfig, LockManager, LockMode, Wait};
//!
//! let lm = LockManager::new(LockConfig::default())?;
//! let (a, b) = (lm.locker(), lm.locker());
//! lm.lock(&a, b"account/7", LockMode::S, Wait::Forever)?;
//! lm.lock(&b, b"account/7", LockMode::S, Wait::Forever)?; // shared with a
//! assert!(matches!(lm.lock(&b, b"account/7", LockMode::X, Wait::No), Err(tern::Error::WouldBlock)));
//! lm.unlock_all(&a)?;
//! lm.lock(&b, b"account/7", LockMode::X, Wait::No)?; // b was alone: upgraded
//! # Ok::<(), tern::Error>(())
//! ```
//!
//! # Design
//!
//! * **Lockers are handles.** [`Locker`] carries its own state; a call never resolves a locker
//!   id through a shared table. (Berkeley DB's `lock_get` does, under one region-wide mutex
//!   held exclusive: its scaling limit. [`LockerLookup::GlobalMutex`] reproduces that step so
//!   the difference is measured in one run.) The locker's private records know what it holds
//!   and how often: re-entrant locks and non-final unlocks touch no shared memory.
//! * **Partitioned object table** (`table.rs`). An object's hash picks a partition (default:
//!   16 per core, at least 64); each has its own [`RwLatch`](crate::sync::RwLatch) over a hash
//!   table of entries. Nothing is global. Tables grow as needed and are swept of idle entries
//!   when they double: there are no lock, object or locker limits.
//! * **Sole owners.** An entry's *owner word* names a sole owner (one locker, one mode, nobody
//!   waiting) or says the entry is in *slow mode* (holders and a FIFO queue under the latch).
//!   An uncontended lock swaps the word from free to itself; its unlock swaps it back: one
//!   atomic instruction each, no latch. A locker finds the entry of an object it locked lately
//!   in its own small cache; otherwise it takes the partition's write latch once to find or
//!   create it. A request that meets a sole owner *inflates* the entry to slow mode, recording
//!   the owner as a holder; the owner's swap then fails and it releases under the latch.
//! * **Scalable shared mode** (`bias.rs`). An entry that keeps seeing only `IS`/`S` requests
//!   turns on its *bias*: read requests then take the partition's read latch (a BRAVO reader:
//!   writes only its own slot) and publish the lock in one of the locker's own fast slots, so
//!   many readers of one object write no shared cache line. Any other mode revokes the bias,
//!   turning the fast holders into ordinary holders first. Switch: [`LockConfig::fast_shared`].
//! * **Waiting** (`wait.rs`) is FIFO per object; conversions (a holder asking for a stronger
//!   mode) queue ahead of new requests. *Barging* ([`LockConfig::barging`]): a release whose
//!   first waiter wants `X` leaves the lock open to the next compatible request and sends that
//!   waiter back to ask again (at the front if it loses); at least every millisecond per lock a
//!   release hands over to the first waiter instead (`Slow::grant_waiters`). A waiter parks
//!   on its locker's wait cell; whoever grants, sends back or refuses the request changes the
//!   cell under the partition latch and unparks it.
//! * **Deadlocks** (`deadlock.rs`, [`DeadlockPolicy`]): detection when a request must wait, by a
//!   background thread at an interval, or timeouts alone; the victim ([`VictimPolicy`]) gets
//!   [`Error::Deadlock`](crate::Error::Deadlock) and keeps the locks it holds.
//!
//! # Invariants
//!
//! 1. An entry's holders are pairwise compatible, counting its sole owner and fast holders: a
//!    sole owner exists only while no other locker holds or waits (anyone else inflates
//!    first), and while an entry is biased all its holders hold `IS`/`S` (any other request
//!    revokes the bias, converting the fast holders, before it checks compatibility).
//! 2. The owner word changes from free only by a compare-and-swap (to a sole owner, or by a
//!    sweep to retired), from a sole owner only by that owner's swap back to free or by an
//!    inflation under the write latch, and from slow to free only under the write latch when
//!    the slow state is idle (no holder, no waiter, no bias).
//! 3. Entries are type-stable: retired onto a free list and reused, freed only with the
//!    manager. An address a locker record, fast slot, cache line or wait target holds therefore
//!    always points at an entry; records, fast slots and wait targets keep their entry out of
//!    the free list, and a cached address is re-checked (hash, then the key once owned).
//! 4. A locker's wait cell leaves `WAITING` only under the latch of the partition its request
//!    is queued in: by a grant, by a barging release sending it back (`RETRY`: the request is
//!    out of the queue and the entry counts it in `woken`, which keeps the entry from going
//!    idle until it asks again), by the detector choosing it as victim, or by its own timeout.
//! 5. Latch order: detector mutex, then partition latches in ascending index order (only the
//!    detector holds more than one), then the locker registry, then a locker's `waiting_on`.
//!    `docs/latch-order.md` has the whole engine's order.
//!
//! Re-entrancy: each successful [`LockManager::lock`] must be matched by one
//! [`LockManager::unlock`], or all released by [`LockManager::unlock_all`]; a locker holds the
//! join of the modes it asked for until it releases the object. A locker is `Send` but not
//! `Sync`: one thread at a time.

mod bias;
mod deadlock;
mod locker;
mod manager;
mod mode;
mod object;
mod table;
mod wait;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;

pub use locker::Locker;
pub use manager::{LockManager, MAX_HOLDS};
pub use mode::LockMode;
pub use object::LockObject;

use serde::Serialize;
use std::time::Duration;

/// The 64-bit lock id of `key` in table `table` (the transaction layer locks keys by id: no key
/// bytes stored in the lock table; two keys colliding on 64 bits only ever share a lock).
pub(crate) fn key_id(table: u32, key: &[u8]) -> u64 {
    object::mix64(object::hash(LockObject::Bytes(key)) ^ u64::from(table).rotate_left(32))
}

/// How long a request may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Fail at once with [`Error::WouldBlock`](crate::Error::WouldBlock) if the lock is not free.
    No,
    /// Wait until granted (or chosen as a deadlock victim).
    Forever,
    /// Wait at most this long, then fail with [`Error::LockTimeout`](crate::Error::LockTimeout).
    Timeout(Duration),
}

/// When deadlocks are looked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadlockPolicy {
    /// Whenever a request must wait, before it sleeps (the default: deadlocks end at once).
    OnConflict,
    /// By a background thread, every interval (requests that wait do not pay for detection).
    Periodic(Duration),
    /// No detection: a [`Wait::Forever`] request waits at most this long, then fails with
    /// [`Error::LockTimeout`](crate::Error::LockTimeout). A [`Wait::Timeout`] request keeps its
    /// own timeout.
    Timeout(Duration),
}

/// Which locker on a deadlock cycle loses its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VictimPolicy {
    /// The most recently created locker (least work lost, usually).
    Youngest,
    /// The locker holding the fewest locks (ties: the youngest).
    FewestLocks,
}

/// How a lock call finds its locker's state: the A/B switch against Berkeley DB's design.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockerLookup {
    /// The handle carries it (tern).
    Handle,
    /// Every call also looks the locker up in a global table under one global mutex (Berkeley
    /// DB's `lock_get`). For measurement only.
    GlobalMutex,
}

/// Lock manager configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockConfig {
    /// Object-table partitions, rounded up to a power of two; 0: 16 per core, 64 to 4096.
    pub partitions: usize,
    /// When to look for deadlocks.
    pub deadlock: DeadlockPolicy,
    /// Who loses a deadlock.
    pub victim: VictimPolicy,
    /// The scalable shared mode (fast slots on biased entries).
    pub fast_shared: bool,
    /// How calls find their locker.
    pub locker_lookup: LockerLookup,
    /// Barging: a released lock whose first waiter wants `X` is left open to the next
    /// compatible request (usually a running thread) and the waiter woken to ask again (at
    /// the front of the queue if it loses), with a hand-over to the first waiter at least
    /// every millisecond per lock. `false`: strict FIFO hand-over on every release (see
    /// `docs/lock.md`, Waiting).
    pub barging: bool,
    /// Waiters that may spin at once (per lock manager) for up to 50 µs before they park, while
    /// their thread finds the CPU not crowded: a waiter spinning on an idle core takes a hot
    /// lock the moment it is released, where a parked one costs the release a wake-up and the
    /// lock sits free until the waiter runs. Waiters beyond this number, and all of them on a
    /// crowded CPU, wait as the `lock.wait` latch class's policy says. 0: none spins this way.
    /// Default: the CPUs available minus one (see `docs/lock.md`, Waiting).
    pub spinning_waiters: usize,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            partitions: 0,
            deadlock: DeadlockPolicy::OnConflict,
            victim: VictimPolicy::Youngest,
            fast_shared: true,
            locker_lookup: LockerLookup::Handle,
            barging: true,
            spinning_waiters: std::thread::available_parallelism().map_or(0, |n| n.get() - 1),
        }
    }
}

/// Lock manager counters, summed over lockers (live and dropped).
#[derive(Clone, Debug, Default, Serialize)]
pub struct LockStats {
    /// `lock` calls.
    pub requests: u64,
    /// Requests granted through a fast shared slot.
    pub fast_grants: u64,
    /// Requests that had to wait.
    pub waits: u64,
    /// Total time spent waiting, in nanoseconds.
    pub wait_ns: u64,
    /// Requests refused as deadlock victims.
    pub deadlocks: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// `Wait::No` requests refused.
    pub would_block: u64,
    /// Biases revoked (fast holders converted into grants).
    pub revocations: u64,
    /// Live lockers.
    pub lockers: usize,
    /// Objects locked, waited for or biased now.
    pub objects: usize,
    /// Entries in the object tables (the objects above, plus idle entries kept for reuse until
    /// a table's next sweep).
    pub entries: usize,
    /// Per partition: write-latch acquisitions that found the latch taken.
    pub partition_contention: Vec<u64>,
}
