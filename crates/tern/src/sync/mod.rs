//! Latches: the short-term locks that protect tern's in-memory structures.
//!
//! Every other component (tree nodes, transaction table, lock manager partitions, log buffer)
//! builds on these, so they are small, measurable, and model-checked:
//!
//! | latch | size | modes | for |
//! |---|---|---|---|
//! | [`Mutex<T>`] | 2 bytes + `T` | exclusive | short critical sections |
//! | [`RwLatch<T>`] | 32 bytes + `T` | shared (scalable), exclusive | read-mostly shared state |
//! | [`HybridLatch<T>`] | 24 bytes + `T` | optimistic, shared, exclusive | B+tree nodes (optimistic lock coupling) |
//!
//! ## Waiting
//! A latch that cannot be taken at once waits as its [`LatchClass`]'s [`SpinConfig`] says:
//! adaptively (the default: PAUSE rounds, then `sched_yield` calls, each phase as long as this
//! thread has found it to pay, then park), PAUSE-spin with exponential backoff then park,
//! `sched_yield` spinning, or parking at once (`spin.rs` explains each). Sleeping uses a global parking table
//! keyed by the latch's address (`park.rs`), so a latch is a single word. What a PAUSE and a
//! park/unpark round trip cost on the running CPU is measured once per process
//! ([`calibration`], `calibrate.rs`), since PAUSE's latency differs tenfold between CPUs.
//!
//! ## Counters
//! Per class, per thread, summed on read ([`stats`]): contended acquisitions, spin rounds, parks,
//! time waited, bias revocations and optimistic restarts, always; acquisitions and optimistic
//! reads only while [`set_count_acquisitions`] has switched them on (off by default: they are
//! the only counters an uncontended acquisition would bump).
//!
//! ## Invariants
//! * A `Mutex` or `RwLatch` in exclusive mode has exactly one holder, and no shared holder.
//! * No wakeup is lost: a waiter sets its latch's parked bit, then parks only if, re-checked
//!   under the parking queue's lock, the latch is still held with the bit set; releasers that
//!   see the bit wake under the same queue lock (`mutex.rs`, `rwlock.rs`).
//! * Writers are not starved by readers: once a writer owns the writer bit of a `RawRwLock`, no
//!   new slow reader enters (`rwlock.rs`); an `RwLatch` writer then revokes the reader bias, after
//!   which no fast reader enters either (`rwlatch.rs`). It waits only for readers already inside.
//! * A `HybridLatch`'s version is odd exactly while an exclusive holder is inside; an optimistic
//!   read that validates saw no write (`hybrid.rs`).
//! * Latches do not nest by themselves; the order in which components may hold several is in
//!   `docs/latch-order.md`.
//!
//! ## Model checking
//! Under `RUSTFLAGS="--cfg loom"` the atomics, spinning and parking switch to loom's models
//! (`primitive.rs`, `park.rs`) and the tests in `loom_tests` explore the interleavings of the
//! real latch code.

pub mod admit;
pub(crate) mod aligned;
pub mod asymmetric;
mod calibrate;
mod class;
pub(crate) mod counters;
mod hybrid;
mod mutex;
pub(crate) mod park;
pub(crate) mod primitive;
mod reader_table;
mod rwlatch;
mod rwlock;
pub(crate) mod segmented;
pub(crate) mod spin;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(not(loom))]
pub use calibrate::{calibration, Calibration};
pub use class::{set_all_configs, set_all_policies, LatchClass, MAX_CLASSES};
pub use counters::{class_stats, counts_acquisitions, set_count_acquisitions, stats, LatchStats};
pub use hybrid::{ExclusiveGuard, HybridLatch, OptimisticGuard, Restart, SharedGuard};
pub use mutex::{Mutex, MutexGuard, RawMutex};
pub use rwlatch::{RwLatch, RwLatchReadGuard, RwLatchWriteGuard};
pub use spin::{SpinConfig, SpinPolicy};
