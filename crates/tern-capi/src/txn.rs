//! Transactions: begin, commit, abort, get, put, delete.

use crate::db::{tern_db, tern_table};
use crate::error::{
    guard, key_arg, non_null, value_arg, Failure, TERN_EBUSY, TERN_EINVAL, TERN_ETOOSMALL, TERN_EWRONG_THREAD,
    TERN_NOTFOUND, TERN_OK,
};
use std::ffi::c_int;
use std::sync::atomic::Ordering::SeqCst;
use std::thread::ThreadId;
use std::time::Duration;
use tern::lock::Wait;
use tern::{Table, Txn, TxnOptions};

/// A transaction. It belongs to the thread that began it.
pub struct tern_txn {
    /// Declared first, so dropped before what it borrows. Its lifetime is erased: it borrows
    /// the database behind `db`, which `tern_close` keeps alive while `live_txns` counts it.
    pub(crate) txn: Option<Txn<'static>>,
    pub(crate) db: *const tern_db,
    pub(crate) thread: ThreadId,
    /// Cursors opened on it and not closed: finishing it is refused while any is open.
    pub(crate) open_cursors: usize,
    /// The default table, for calls that pass a NULL table.
    pub(crate) default: Table,
    /// The last value `tern_get` returned (valid until the next call on the transaction).
    value: Vec<u8>,
}

impl tern_txn {
    pub(crate) fn txn(&self) -> &Txn<'static> {
        self.txn.as_ref().expect("a live handle holds its transaction until it is finished")
    }

    fn txn_mut(&mut self) -> &mut Txn<'static> {
        self.txn.as_mut().expect("a live handle holds its transaction until it is finished")
    }

    /// `table`, or the default table for NULL.
    ///
    /// # Safety
    /// `table` is NULL or a live table handle.
    pub(crate) unsafe fn table(&self, table: *const tern_table) -> &Table {
        if table.is_null() {
            &self.default
        } else {
            // SAFETY: a live handle (the caller's promise).
            unsafe { &(*table).table }
        }
    }

    /// A key argument of this transaction's database (see [`key_arg`]).
    ///
    /// # Safety
    /// As [`key_arg`].
    pub(crate) unsafe fn key_arg<'a>(&self, p: *const u8, len: usize, what: &str) -> Result<&'a [u8], Failure> {
        // SAFETY: the database outlives its live transactions (see `tern_begin_ex`); the rest
        // is forwarded.
        unsafe { key_arg(p, len, (*self.db).max_key, what) }
    }
}

/// The transaction behind `txn`, checked: non-null, and on the thread that began it.
///
/// # Safety
/// `txn` is NULL or a live handle.
pub(crate) unsafe fn checked<'a>(txn: *mut tern_txn) -> Result<&'a mut tern_txn, Failure> {
    non_null(txn, "txn")?;
    // SAFETY: a live handle (the caller's promise), used by one thread (checked next).
    let t = unsafe { &mut *txn };
    if t.thread != std::thread::current().id() {
        return Err(Failure::new(TERN_EWRONG_THREAD, "a transaction is used only on the thread that began it"));
    }
    Ok(t)
}

/// `tern_begin_ex`'s `lock_wait_ms`: wait for a lock until it is granted (or the transaction is
/// chosen as a deadlock victim), as `tern_begin` does.
pub const TERN_WAIT_FOREVER: i64 = -1;
/// `tern_begin_ex`'s `lock_wait_ms`: never wait; a write whose key another transaction has
/// locked fails at once with `TERN_EWOULDBLOCK`.
pub const TERN_NO_WAIT: i64 = 0;

/// The engine's lock wait for `tern_begin_ex`'s `lock_wait_ms`, checked.
fn lock_wait_arg(lock_wait_ms: i64) -> Result<Wait, Failure> {
    match lock_wait_ms {
        TERN_WAIT_FOREVER => Ok(Wait::Forever),
        TERN_NO_WAIT => Ok(Wait::No),
        ms if ms > 0 => Ok(Wait::Timeout(Duration::from_millis(ms.unsigned_abs()))),
        other => Err(Failure::new(
            TERN_EINVAL,
            format!(
                "lock_wait_ms {other} is invalid: TERN_WAIT_FOREVER ({TERN_WAIT_FOREVER}), TERN_NO_WAIT ({TERN_NO_WAIT}) or a number of milliseconds"
            ),
        )),
    }
}

/// Begins a transaction (`read_only` non-zero: a read-only one, which never blocks writers)
/// and stores its handle in `*out`. A write waits for another transaction's lock on its key
/// until it is granted: `tern_begin_ex(db, read_only, TERN_WAIT_FOREVER, out)`.
///
/// # Safety
/// `db` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tern_begin(db: *const tern_db, read_only: c_int, out: *mut *mut tern_txn) -> c_int {
    // SAFETY: forwarded.
    unsafe { tern_begin_ex(db, read_only, TERN_WAIT_FOREVER, out) }
}

/// As `tern_begin`, with the longest a write of this transaction waits for a lock another
/// transaction holds on its key: `TERN_WAIT_FOREVER` (-1: until granted, or until chosen as a
/// deadlock victim, `TERN_EDEADLOCK`), `TERN_NO_WAIT` (0: the write fails at once with
/// `TERN_EWOULDBLOCK`), or a number of milliseconds (then `TERN_ETIMEDOUT`). Another negative
/// value is `TERN_EINVAL`. After `TERN_EWOULDBLOCK` or `TERN_ETIMEDOUT` the transaction is still
/// usable (the write did not happen). Read-only transactions take no locks: for them
/// `lock_wait_ms` is checked and has no effect.
///
/// One thread that runs two write transactions at once, and writes one key in both, makes the
/// second wait for the first, which cannot finish meanwhile: with `TERN_WAIT_FOREVER` the
/// thread hangs (the holder is not waiting, so no deadlock is detected). Interleave write
/// transactions on one thread only with `TERN_NO_WAIT` or a timeout.
///
/// # Safety
/// `db` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tern_begin_ex(
    db: *const tern_db,
    read_only: c_int,
    lock_wait_ms: i64,
    out: *mut *mut tern_txn,
) -> c_int {
    guard(|| {
        non_null(db, "db")?;
        non_null(out, "out")?;
        let options =
            TxnOptions { read_only: read_only != 0, lock_wait: lock_wait_arg(lock_wait_ms)?, durability: None };
        // SAFETY: a live handle (the caller's promise).
        let handle = unsafe { &*db };
        let txn = handle.db.begin_with(options)?;
        let default = txn.table("")?;
        // SAFETY: only the lifetime changes. The database is boxed (its address is stable) and
        // `tern_close` does not free it while `live_txns`, incremented here and decremented when
        // this transaction is finished, is non-zero.
        let txn = unsafe { std::mem::transmute::<Txn<'_>, Txn<'static>>(txn) };
        handle.live_txns.fetch_add(1, SeqCst);
        let t = tern_txn {
            txn: Some(txn),
            db,
            thread: std::thread::current().id(),
            open_cursors: 0,
            default,
            value: Vec::new(),
        };
        // SAFETY: `out` is non-null and writable (the caller's promise).
        unsafe { *out = Box::into_raw(Box::new(t)) };
        Ok(TERN_OK)
    })
}

/// Takes a transaction handle apart for commit or abort, once its cursors are closed.
///
/// # Safety
/// `txn` is NULL or a live handle; on success it is freed.
unsafe fn finish(txn: *mut tern_txn) -> Result<Txn<'static>, Failure> {
    // SAFETY: forwarded.
    let t = unsafe { checked(txn) }?;
    if t.open_cursors > 0 {
        return Err(Failure::new(TERN_EBUSY, format!("{} cursors are open: close them first", t.open_cursors)));
    }
    // SAFETY: a live handle allocated by `tern_begin`, given up by the caller.
    let mut handle = unsafe { Box::from_raw(txn) };
    let inner = handle.txn.take().expect("a live handle holds its transaction");
    // SAFETY: the database outlives its live transactions (see `tern_begin`).
    unsafe { &*handle.db }.live_txns.fetch_sub(1, SeqCst);
    Ok(inner)
}

/// Commits the transaction and frees the handle, whatever the outcome (after a failure
/// nothing of it is applied). Fails with `TERN_EBUSY`, freeing nothing, while cursors are open.
///
/// # Safety
/// `txn` is a live handle, not used after this returns anything but `TERN_EBUSY` or
/// `TERN_EWRONG_THREAD`.
#[no_mangle]
pub unsafe extern "C" fn tern_commit(txn: *mut tern_txn) -> c_int {
    guard(|| {
        // SAFETY: forwarded.
        let inner = unsafe { finish(txn) }?;
        inner.commit()?;
        Ok(TERN_OK)
    })
}

/// Aborts the transaction and frees the handle. Fails with `TERN_EBUSY`, freeing nothing, while
/// cursors are open.
///
/// # Safety
/// As `tern_commit`.
#[no_mangle]
pub unsafe extern "C" fn tern_abort(txn: *mut tern_txn) -> c_int {
    guard(|| {
        // SAFETY: forwarded.
        let inner = unsafe { finish(txn) }?;
        inner.abort();
        Ok(TERN_OK)
    })
}

/// Reads `key` in `table` (NULL: the default table): on `TERN_OK`, `*value` and `*value_len`
/// give the value, valid until the next call on this transaction; `TERN_NOTFOUND` if absent.
///
/// # Safety
/// `txn` is a live handle, `table` NULL or a live table handle, `key` points to `key_len`
/// bytes, `value` and `value_len` are writable.
#[no_mangle]
pub unsafe extern "C" fn tern_get(
    txn: *mut tern_txn,
    table: *const tern_table,
    key: *const u8,
    key_len: usize,
    value: *mut *const u8,
    value_len: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded.
        let t = unsafe { checked(txn) }?;
        non_null(value, "value")?;
        non_null(value_len, "value_len")?;
        // SAFETY: forwarded.
        let key = unsafe { t.key_arg(key, key_len, "key") }?;
        let mut out = std::mem::take(&mut t.value);
        // SAFETY: forwarded.
        let found = t.txn().get_into_in(unsafe { t.table(table) }, key, &mut out);
        t.value = out;
        if !found? {
            return Ok(TERN_NOTFOUND);
        }
        // SAFETY: both are non-null and writable (the caller's promise).
        unsafe {
            *value = t.value.as_ptr();
            *value_len = t.value.len();
        }
        Ok(TERN_OK)
    })
}

/// Reads `key` into the caller's buffer `buf` of `buf_len` bytes; `*value_len` gets the value's
/// length. `TERN_ETOOSMALL` (nothing copied) if it does not fit, `TERN_NOTFOUND` if absent.
///
/// # Safety
/// As `tern_get`; `buf` points to `buf_len` writable bytes (may be NULL if `buf_len` is 0).
#[no_mangle]
pub unsafe extern "C" fn tern_get_copy(
    txn: *mut tern_txn,
    table: *const tern_table,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    buf_len: usize,
    value_len: *mut usize,
) -> c_int {
    let mut value: *const u8 = std::ptr::null();
    let mut len = 0usize;
    // SAFETY: forwarded; `value` and `len` are local.
    let code = unsafe { tern_get(txn, table, key, key_len, &mut value, &mut len) };
    if code != TERN_OK {
        return code;
    }
    guard(|| {
        non_null(value_len, "value_len")?;
        // SAFETY: non-null and writable (the caller's promise).
        unsafe { *value_len = len };
        if len > buf_len {
            return Err(Failure::new(TERN_ETOOSMALL, format!("the value has {len} bytes, the buffer {buf_len}")));
        }
        if len > 0 {
            non_null(buf, "buf")?;
            // SAFETY: `value` holds `len` bytes (the transaction's buffer), `buf` has room for
            // them (checked), and the two do not overlap (tern owns one, the caller the other).
            unsafe { std::ptr::copy_nonoverlapping(value, buf, len) };
        }
        Ok(TERN_OK)
    })
}

/// Writes `key` = `value` in `table` (NULL: the default table).
///
/// # Safety
/// `txn` is a live handle, `table` NULL or a live table handle, `key` and `value` point to
/// their lengths in bytes.
#[no_mangle]
pub unsafe extern "C" fn tern_put(
    txn: *mut tern_txn,
    table: *const tern_table,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded.
        let t = unsafe { checked(txn) }?;
        // SAFETY: forwarded.
        let (key, value) = unsafe { (t.key_arg(key, key_len, "key")?, value_arg(value, value_len)?) };
        // SAFETY: forwarded.
        let table = unsafe { t.table(table) }.clone();
        t.txn_mut().put_in(&table, key, value)?;
        Ok(TERN_OK)
    })
}

/// Deletes `key` from `table` (NULL: the default table); `TERN_NOTFOUND` if it was absent.
///
/// # Safety
/// As `tern_put`, without the value.
#[no_mangle]
pub unsafe extern "C" fn tern_delete(
    txn: *mut tern_txn,
    table: *const tern_table,
    key: *const u8,
    key_len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded.
        let t = unsafe { checked(txn) }?;
        // SAFETY: forwarded.
        let key = unsafe { t.key_arg(key, key_len, "key") }?;
        // SAFETY: forwarded.
        let table = unsafe { t.table(table) }.clone();
        Ok(if t.txn_mut().delete_in(&table, key)? { TERN_OK } else { TERN_NOTFOUND })
    })
}
