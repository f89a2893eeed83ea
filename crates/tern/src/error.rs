//! The engine's one error type.
//!
//! Every fallible public function in `tern` returns [`Result`]. Variants name what went wrong in
//! terms a caller can act on; retryable conditions get their own variants as later components
//! add them (conflict, deadlock), so callers can match on them instead of parsing messages.

/// Everything that can go wrong in `tern`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A caller passed a value outside what the API accepts; the message says which and why.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Keys must have at least one byte.
    #[error("empty key: keys must have at least one byte")]
    KeyEmpty,

    /// The key is longer than this tree accepts (a function of its page size).
    #[error("key of {len} bytes exceeds the maximum of {max} bytes")]
    KeyTooLarge {
        /// The key's length.
        len: usize,
        /// The largest accepted key.
        max: usize,
    },

    /// The value is longer than the engine accepts.
    #[error("value of {len} bytes exceeds the maximum of {max} bytes")]
    ValueTooLarge {
        /// The value's length.
        len: usize,
        /// The largest accepted value.
        max: usize,
    },

    /// A `Wait::No` lock request found the lock taken.
    #[error("the lock is held in a conflicting mode (no-wait request)")]
    WouldBlock,

    /// A lock request waited longer than its timeout.
    #[error("lock wait timed out")]
    LockTimeout,

    /// The request was chosen as the victim of a deadlock; the locker keeps its other locks
    /// and should release them (abort) before retrying.
    #[error("deadlock: this lock request was chosen as the victim")]
    Deadlock,

    /// `unlock` of an object the locker does not hold.
    #[error("the locker does not hold a lock on this object")]
    LockNotHeld,

    /// A write found a newer committed version of its key than the transaction's snapshot
    /// (first updater wins). Retryable: abort and run the transaction again.
    #[error("write conflict: the key was changed by a transaction that committed after this one began")]
    Conflict,

    /// The transaction failed earlier (a conflict or a deadlock) and can only be aborted.
    #[error("the transaction failed earlier ({reason}); abort it and retry")]
    TxnFailed {
        /// What made it fail.
        reason: &'static str,
    },

    /// A write in a read-only transaction.
    #[error("this transaction is read-only (begin it with `Db::begin` to write)")]
    ReadOnlyTxn,

    /// No table has this name.
    #[error("no table named {name:?}")]
    NoSuchTable {
        /// The name asked for.
        name: String,
    },

    /// `create_table` with a name already taken.
    #[error("a table named {name:?} already exists")]
    TableExists {
        /// The name asked for.
        name: String,
    },

    /// An operating-system I/O call failed.
    #[error("{what}: {source}")]
    Io {
        /// What tern was doing, and on which file.
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A database file is damaged somewhere other than a torn final log record; nothing was
    /// dropped to get past it. Restore from a copy, or inspect it with `tern check`.
    #[error("corrupt database file {file} at offset {offset}: {reason}")]
    Corruption {
        /// The file (its name in the database directory).
        file: String,
        /// Where in it.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },

    /// The commit's log record could not be made durable (an I/O error on write or sync). The
    /// commit may be visible in this process, and may or may not be there after reopening; the
    /// database is read-only from now on.
    #[error("commit not durable: {cause}; the database is read-only until reopened")]
    CommitNotDurable {
        /// The I/O error that stopped the log.
        cause: String,
    },

    /// An earlier I/O error on the log turned the database read-only; reopen it to recover.
    #[error("the database is read-only after a log I/O error ({cause}); reopen it to recover")]
    ReadOnly {
        /// The I/O error that stopped the log.
        cause: String,
    },

    /// Another handle (in this or another process) has the database directory open.
    #[error("database {path} is locked: another process (or handle) has it open")]
    Locked {
        /// The database directory.
        path: std::path::PathBuf,
    },

    /// More distinct latch classes were registered than the fixed class table holds.
    #[error("cannot register latch class {name:?}: the table holds {max} classes")]
    TooManyLatchClasses {
        /// The class that did not fit.
        name: String,
        /// The table's capacity.
        max: usize,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
