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
//! * [`buffer`]: the buffer manager: pages in frames or in the page file, eviction.
//! * [`lock`]: the lock manager (lockers, modes, deadlock detection).
//! * [`wal`]: the write-ahead log: commit records, group commit, log files.
//! * [`checkpoint`]: checkpoint files (the database as of one snapshot).
//! * [`recovery`]: opening a directory: lock, load the checkpoint, replay the log.
//! * [`backup`]: hot backup, a consistent copy of a database made while it runs.
//! * `settings`: what a database's stored data depends on (its page size), kept in the
//!   database.
//! * [`fs`]: the file-system trait every write goes through (and a faulty one for tests).
//! * [`sync`]: latches (mutex, scalable reader-writer latch, optimistic hybrid latch), their spin
//!   policies and counters.
//! * [`stats`]: one snapshot of the process-wide counters (latch classes).
//!
//! Errors from every component are one type, [`Error`].

#![warn(missing_docs)]

pub mod backup;
pub mod btree;
pub mod buffer;
pub mod checkpoint;
pub mod db;
pub mod error;
pub mod fs;
pub mod lock;
pub mod recovery;
mod settings;
pub mod stats;
pub mod sync;
pub mod txn;
pub mod wal;

pub use backup::BackupInfo;
pub use db::{
    Db, DbStats, Options, Table, TxnTracking, DEFAULT_ROW_CACHE_PERCENT, MAX_ROW_CACHE_PERCENT, MAX_TABLE_NAME,
};
pub use error::{Error, Result};
pub use recovery::RecoveryStats;
pub use txn::{Txn, TxnCursor, TxnOptions, TxnRange};
pub use wal::{Durability, WalConfig};
