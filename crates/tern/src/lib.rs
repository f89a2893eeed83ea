//! tern: an embedded, transactional key-value storage engine whose hot paths stay fast on many
//! cores.
//!
//! Components, each in its own module with a doc that states its invariants:
//!
//! * [`btree`]: the B+tree index.
//! * [`lock`]: the lock manager (lockers, modes, deadlock detection).
//! * [`sync`]: latches (mutex, scalable reader-writer latch, optimistic hybrid latch), their spin
//!   policies and counters.
//! * [`stats`]: one snapshot of every component's counters.
//!
//! Errors from every component are one type, [`Error`].

pub mod btree;
pub mod error;
pub mod lock;
pub mod stats;
pub mod sync;

pub use error::{Error, Result};
