//! tern: an embedded, transactional key-value storage engine whose hot paths stay fast on many
//! cores.
//!
//! Start with [`Db`]: tables of ordered byte-string keys, snapshot-isolated transactions.
//!
//! Components, each in its own module with a doc that states its invariants:
//!
//! * [`db`]: the database: tables, transactions, every component's counters.
//! * [`txn`]: multi-version snapshot isolation; per-thread transaction contexts; garbage
//!   collection of versions.
//! * [`btree`]: the B+tree index.
//! * [`lock`]: the lock manager (lockers, modes, deadlock detection).
//! * [`sync`]: latches (mutex, scalable reader-writer latch, optimistic hybrid latch), their spin
//!   policies and counters.
//! * [`stats`]: one snapshot of the process-wide counters (latch classes).
//!
//! Errors from every component are one type, [`Error`].

pub mod btree;
pub mod db;
pub mod error;
pub mod lock;
pub mod stats;
pub mod sync;
pub mod txn;

pub use db::{Db, DbStats, Options, Table, TxnTracking};
pub use error::{Error, Result};
pub use txn::{Txn, TxnOptions};
