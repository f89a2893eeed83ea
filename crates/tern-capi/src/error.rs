//! Error codes, their names, the calling thread's last message, and the boundary every
//! function crosses (`guard`: panics caught, errors turned into codes).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use tern::btree::MAX_VALUE;

/// Success.
pub const TERN_OK: c_int = 0;
/// The key (or, for a cursor, an entry in that direction) does not exist. Not a failure.
pub const TERN_NOTFOUND: c_int = 1;
/// An argument was invalid: a null pointer, an empty or too long key, a too long value, a
/// table name that is not UTF-8, an unknown option.
pub const TERN_EINVAL: c_int = -1;
/// A no-wait lock request found the lock taken.
pub const TERN_EWOULDBLOCK: c_int = -2;
/// A lock wait timed out.
pub const TERN_ETIMEDOUT: c_int = -3;
/// The transaction was chosen as a deadlock victim; abort it and retry.
pub const TERN_EDEADLOCK: c_int = -4;
/// A write conflicted with a transaction that committed after this one began; abort and retry.
pub const TERN_ECONFLICT: c_int = -5;
/// The transaction failed earlier (conflict or deadlock) and can only be aborted.
pub const TERN_ETXNFAILED: c_int = -6;
/// A write in a read-only transaction, or to a database opened read-only.
pub const TERN_EREADONLY: c_int = -7;
/// No table of that name.
pub const TERN_ENOTABLE: c_int = -8;
/// A table of that name exists already.
pub const TERN_EEXIST: c_int = -9;
/// An I/O error (the message names the file); a commit that returns it may not be durable.
pub const TERN_EIO: c_int = -10;
/// Damaged data was found (the message names the file and offset); nothing wrong was returned.
pub const TERN_ECORRUPT: c_int = -11;
/// The database directory is open in another process.
pub const TERN_ELOCKED: c_int = -12;
/// The handle still has dependents: transactions of a database, cursors of a transaction.
pub const TERN_EBUSY: c_int = -13;
/// A transaction or cursor was used on another thread than the one that began the transaction.
pub const TERN_EWRONG_THREAD: c_int = -14;
/// `tern_get_copy`: the caller's buffer is too small (the value's length is in `*value_len`).
pub const TERN_ETOOSMALL: c_int = -15;
/// tern panicked (a bug); the message says where. The handle may be unusable.
pub const TERN_EPANIC: c_int = -16;
/// Any other error; the message says what.
pub const TERN_EOTHER: c_int = -17;

/// The name and meaning of an error code, as a static NUL-terminated string.
#[no_mangle]
pub extern "C" fn tern_strerror(code: c_int) -> *const c_char {
    let s: &'static [u8] = match code {
        TERN_OK => b"TERN_OK: success\0",
        TERN_NOTFOUND => b"TERN_NOTFOUND: no such key\0",
        TERN_EINVAL => b"TERN_EINVAL: invalid argument\0",
        TERN_EWOULDBLOCK => b"TERN_EWOULDBLOCK: the lock is taken (no-wait request)\0",
        TERN_ETIMEDOUT => b"TERN_ETIMEDOUT: lock wait timed out\0",
        TERN_EDEADLOCK => b"TERN_EDEADLOCK: deadlock victim; abort and retry\0",
        TERN_ECONFLICT => b"TERN_ECONFLICT: write conflict; abort and retry\0",
        TERN_ETXNFAILED => b"TERN_ETXNFAILED: the transaction failed earlier and can only be aborted\0",
        TERN_EREADONLY => b"TERN_EREADONLY: write in a read-only transaction or database\0",
        TERN_ENOTABLE => b"TERN_ENOTABLE: no such table\0",
        TERN_EEXIST => b"TERN_EEXIST: the table exists\0",
        TERN_EIO => b"TERN_EIO: I/O error\0",
        TERN_ECORRUPT => b"TERN_ECORRUPT: damaged data found\0",
        TERN_ELOCKED => b"TERN_ELOCKED: the database is open in another process\0",
        TERN_EBUSY => b"TERN_EBUSY: the handle still has live transactions or cursors\0",
        TERN_EWRONG_THREAD => b"TERN_EWRONG_THREAD: a transaction used off the thread that began it\0",
        TERN_ETOOSMALL => b"TERN_ETOOSMALL: the buffer is too small\0",
        TERN_EPANIC => b"TERN_EPANIC: internal error (a bug in tern)\0",
        TERN_EOTHER => b"TERN_EOTHER: error (see tern_last_error)\0",
        _ => b"unknown tern error code\0",
    };
    s.as_ptr().cast()
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// The message of the calling thread's last failed call (empty if none): NUL-terminated, valid
/// until the thread's next failing call.
#[no_mangle]
pub extern "C" fn tern_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// A failure crossing the boundary: its code and message.
pub(crate) struct Failure {
    pub code: c_int,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(code: c_int, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into() }
    }
}

impl From<tern::Error> for Failure {
    fn from(e: tern::Error) -> Failure {
        use tern::Error as E;
        let code = match &e {
            E::InvalidArgument(_) | E::KeyEmpty | E::KeyTooLarge { .. } | E::ValueTooLarge { .. } => TERN_EINVAL,
            E::WouldBlock => TERN_EWOULDBLOCK,
            E::LockTimeout => TERN_ETIMEDOUT,
            E::Deadlock => TERN_EDEADLOCK,
            E::Conflict => TERN_ECONFLICT,
            E::TxnFailed { .. } | E::LockNotHeld => TERN_ETXNFAILED,
            E::ReadOnlyTxn | E::ReadOnly { .. } => TERN_EREADONLY,
            E::NoSuchTable { .. } => TERN_ENOTABLE,
            E::TableExists { .. } => TERN_EEXIST,
            E::Io { .. } | E::CommitNotDurable { .. } => TERN_EIO,
            E::Corruption { .. } => TERN_ECORRUPT,
            E::Locked { .. } => TERN_ELOCKED,
            _ => TERN_EOTHER,
        };
        Failure { code, message: e.to_string() }
    }
}

/// Runs `f`, turning its failure or panic into a code and the thread's last message.
pub(crate) fn guard(f: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err(Failure::new(TERN_EPANIC, format!("tern panicked: {what}")))
    });
    match outcome {
        Ok(code) => code,
        Err(failure) => {
            let message = CString::new(failure.message.replace('\0', "\\0")).unwrap_or_default();
            LAST.with(|l| *l.borrow_mut() = message);
            failure.code
        }
    }
}

/// `Err(TERN_EINVAL)` naming `what` if `p` is null.
pub(crate) fn non_null<T>(p: *const T, what: &str) -> Result<(), Failure> {
    if p.is_null() {
        Err(Failure::new(TERN_EINVAL, format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

/// The `len` bytes at `p` (which may be null when `len` is 0).
///
/// `len` is checked before any slice is formed: a length above `isize::MAX` (which no buffer
/// has, and which `slice::from_raw_parts` forbids) is `TERN_EINVAL`. Callers check tern's own
/// limits first ([`key_arg`], [`value_arg`]).
///
/// # Safety
/// Unless `len` is 0, `p` must point to `len` readable bytes that stay unchanged while the
/// slice lives.
unsafe fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if isize::try_from(len).is_err() {
        return Err(Failure::new(TERN_EINVAL, format!("{what} length {len} is larger than any buffer")));
    }
    non_null(p, what)?;
    // SAFETY: non-null, `len` is at most `isize::MAX` (checked), and the caller promises `len`
    // readable, unchanging bytes.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A key argument (`what`: "key" or "seek"): the `len` bytes at `p`, refused with the engine's
/// `KeyTooLarge` (`TERN_EINVAL`) when longer than `max_key`, the database's longest key, before
/// any slice is formed.
///
/// # Safety
/// As [`bytes`].
pub(crate) unsafe fn key_arg<'a>(p: *const u8, len: usize, max_key: usize, what: &str) -> Result<&'a [u8], Failure> {
    if len > max_key {
        return Err(tern::Error::KeyTooLarge { len, max: max_key }.into());
    }
    // SAFETY: forwarded.
    unsafe { bytes(p, len, what) }
}

/// A value argument: the `len` bytes at `p`, refused with the engine's `ValueTooLarge`
/// (`TERN_EINVAL`) when longer than `tern::btree::MAX_VALUE` (1 GiB), before any slice is
/// formed.
///
/// # Safety
/// As [`bytes`].
pub(crate) unsafe fn value_arg<'a>(p: *const u8, len: usize) -> Result<&'a [u8], Failure> {
    if len > MAX_VALUE {
        return Err(tern::Error::ValueTooLarge { len, max: MAX_VALUE }.into());
    }
    // SAFETY: forwarded.
    unsafe { bytes(p, len, "value") }
}
