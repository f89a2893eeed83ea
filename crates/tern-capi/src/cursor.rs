//! Cursors: ordered walks over a table within a transaction, both directions.

use crate::db::tern_table;
use crate::error::{guard, non_null, Failure, TERN_EINVAL, TERN_NOTFOUND, TERN_OK};
use crate::txn::{checked, tern_txn};
use std::ffi::c_int;
use tern::{Table, TxnCursor};

/// A cursor over one table of a transaction. It belongs to the transaction's thread.
pub struct tern_cursor {
    /// Declared first, so dropped before what it borrows. Its lifetime is erased: it borrows
    /// the transaction behind `txn` (boxed; not finished while `open_cursors` counts this) and
    /// `_table` (boxed here, dropped after it).
    cursor: TxnCursor<'static>,
    _table: Box<Table>,
    txn: *mut tern_txn,
}

/// Opens a cursor on `table` (NULL: the default table) of `txn`; it starts before the first
/// entry. Close it with `tern_cursor_close` before finishing the transaction.
///
/// # Safety
/// `txn` is a live handle, `table` NULL or a live table handle, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn tern_cursor_open(
    txn: *mut tern_txn,
    table: *const tern_table,
    out: *mut *mut tern_cursor,
) -> c_int {
    guard(|| {
        non_null(out, "out")?;
        // SAFETY: forwarded.
        let t = unsafe { checked(txn) }?;
        // SAFETY: forwarded.
        let table = Box::new(unsafe { t.table(table) }.clone());
        let cursor = t.txn().cursor_in(&table, ..)?;
        // SAFETY: only the lifetime changes. The cursor borrows the transaction, boxed in its
        // handle, which `tern_commit`/`tern_abort` refuse to finish while `open_cursors`
        // (incremented here, decremented by `tern_cursor_close`) counts this cursor; and the
        // table, boxed in this handle and dropped after the cursor (field order).
        let cursor = unsafe { std::mem::transmute::<TxnCursor<'_>, TxnCursor<'static>>(cursor) };
        t.open_cursors += 1;
        // SAFETY: `out` is non-null and writable (the caller's promise).
        unsafe { *out = Box::into_raw(Box::new(tern_cursor { cursor, _table: table, txn })) };
        Ok(TERN_OK)
    })
}

/// Closes a cursor. NULL is a no-op.
///
/// # Safety
/// `cursor` is NULL or a live cursor handle; not used after `TERN_OK`.
#[no_mangle]
pub unsafe extern "C" fn tern_cursor_close(cursor: *mut tern_cursor) -> c_int {
    guard(|| {
        if cursor.is_null() {
            return Ok(TERN_OK);
        }
        // SAFETY: a live handle (the caller's promise); its transaction is live while it is.
        let t = unsafe { checked((*cursor).txn) }?;
        t.open_cursors -= 1;
        // SAFETY: a live handle allocated by `tern_cursor_open`, given up by the caller.
        drop(unsafe { Box::from_raw(cursor) });
        Ok(TERN_OK)
    })
}

/// Which way `tern_cursor_get` moves a cursor: one of the `TERN_FIRST` ... `TERN_SEEK_FOR_PREV`
/// constants. A plain integer, so that any value can be passed and checked: another value is
/// `TERN_EINVAL`.
pub type tern_cursor_op = c_int;

/// To the first entry.
pub const TERN_FIRST: tern_cursor_op = 0;
/// To the last entry.
pub const TERN_LAST: tern_cursor_op = 1;
/// To the next entry (the first, from a fresh cursor).
pub const TERN_NEXT: tern_cursor_op = 2;
/// To the previous entry (the last, from a fresh cursor).
pub const TERN_PREV: tern_cursor_op = 3;
/// To the first entry whose key is at least the seek key.
pub const TERN_SEEK: tern_cursor_op = 4;
/// To the last entry whose key is at most the seek key.
pub const TERN_SEEK_FOR_PREV: tern_cursor_op = 5;

/// Moves `cursor` as `op` says (`seek`, `seek_len`: the key for `TERN_SEEK` and
/// `TERN_SEEK_FOR_PREV`, ignored otherwise) and stores the entry it lands on in `*key`,
/// `*key_len`, `*value`, `*value_len`, valid until the cursor's next move or close.
/// `TERN_NOTFOUND` when there is no entry that way. An unknown `op`, or a seek key longer than
/// the database's longest key, is `TERN_EINVAL` (the cursor does not move).
///
/// # Safety
/// `cursor` is a live handle; `seek` points to `seek_len` bytes when the op seeks; the four
/// out-pointers are writable.
#[no_mangle]
pub unsafe extern "C" fn tern_cursor_get(
    cursor: *mut tern_cursor,
    op: tern_cursor_op,
    seek: *const u8,
    seek_len: usize,
    key: *mut *const u8,
    key_len: *mut usize,
    value: *mut *const u8,
    value_len: *mut usize,
) -> c_int {
    guard(|| {
        non_null(cursor, "cursor")?;
        // SAFETY: a live handle (the caller's promise); checked for the thread next.
        let c = unsafe { &mut *cursor };
        // SAFETY: its transaction is live while the cursor is.
        let t = unsafe { checked(c.txn) }?;
        for (p, what) in [
            (key as *const (), "key"),
            (key_len as *const (), "key_len"),
            (value as *const (), "value"),
            (value_len as *const (), "value_len"),
        ] {
            non_null(p, what)?;
        }
        let entry = match op {
            TERN_FIRST => c.cursor.first(),
            TERN_LAST => c.cursor.last(),
            TERN_NEXT => c.cursor.next(),
            TERN_PREV => c.cursor.prev(),
            // SAFETY: the caller's promise: `seek` holds `seek_len` bytes for this call.
            TERN_SEEK => c.cursor.seek(unsafe { t.key_arg(seek, seek_len, "seek") }?),
            // SAFETY: as above.
            TERN_SEEK_FOR_PREV => c.cursor.seek_for_prev(unsafe { t.key_arg(seek, seek_len, "seek") }?),
            other => {
                return Err(Failure::new(
                    TERN_EINVAL,
                    format!("op {other} is unknown: a tern_cursor_op is {TERN_FIRST} to {TERN_SEEK_FOR_PREV}"),
                ))
            }
        }?;
        let Some((k, v)) = entry else { return Ok(TERN_NOTFOUND) };
        // SAFETY: all four are non-null and writable (checked; the caller's promise). The
        // bytes stay valid until the cursor's next move (it lends them).
        unsafe {
            *key = k.as_ptr();
            *key_len = k.len();
            *value = v.as_ptr();
            *value_len = v.len();
        }
        Ok(TERN_OK)
    })
}
