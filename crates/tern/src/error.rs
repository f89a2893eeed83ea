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
