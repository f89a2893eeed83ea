//! Databases and tables: open, close, tables, checkpoints, statistics.

use crate::error::{guard, non_null, Failure, TERN_EBUSY, TERN_EINVAL, TERN_OK};
use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use tern::{Db, Options, Table};

/// How `tern_open_ex` makes commits durable: `TERN_SYNC` or `TERN_NOSYNC`. A plain integer, so
/// that any value can be passed and checked: another value is `TERN_EINVAL`.
pub type tern_durability = c_int;

/// A commit returns once its log record is written and synced (the default).
pub const TERN_SYNC: tern_durability = 0;
/// A commit returns once its log record is written to the operating system, not synced: it
/// survives a crash of the process, not of the machine.
pub const TERN_NOSYNC: tern_durability = 1;

/// The engine's durability for a `tern_durability`, checked.
fn durability_arg(durability: tern_durability) -> Result<tern::Durability, Failure> {
    match durability {
        TERN_SYNC => Ok(tern::Durability::Sync),
        TERN_NOSYNC => Ok(tern::Durability::NoSync),
        other => Err(Failure::new(
            TERN_EINVAL,
            format!("durability {other} is unknown: TERN_SYNC ({TERN_SYNC}) or TERN_NOSYNC ({TERN_NOSYNC})"),
        )),
    }
}

/// An open database. Any thread may use it.
pub struct tern_db {
    pub(crate) db: Db,
    /// Transactions begun and not yet finished: `tern_close` refuses while any is live.
    pub(crate) live_txns: AtomicUsize,
    /// The longest key the database accepts (an eighth of its page size, as the engine's
    /// `BTree::max_key_len`): longer key arguments are refused before they are read.
    pub(crate) max_key: usize,
}

/// A table of a database (a handle; the table itself lives in the database).
pub struct tern_table {
    pub(crate) table: Table,
}

fn path_arg<'a>(path: *const c_char) -> Result<&'a str, Failure> {
    non_null(path, "path")?;
    // SAFETY: non-null; the caller passes a NUL-terminated string that outlives the call.
    let path = unsafe { CStr::from_ptr(path) };
    path.to_str().map_err(|_| Failure::new(TERN_EINVAL, "path is not UTF-8"))
}

fn name_arg<'a>(name: *const c_char) -> Result<&'a str, Failure> {
    if name.is_null() {
        return Ok(""); // the default table
    }
    // SAFETY: non-null; the caller passes a NUL-terminated string that outlives the call.
    let name = unsafe { CStr::from_ptr(name) };
    name.to_str().map_err(|_| Failure::new(TERN_EINVAL, "table name is not UTF-8"))
}

/// Writes a new handle to `*out`.
fn give<T>(out: *mut *mut T, value: T) -> Result<c_int, Failure> {
    non_null(out, "out")?;
    // SAFETY: `out` is non-null and the caller passes a writable pointer slot.
    unsafe { *out = Box::into_raw(Box::new(value)) };
    Ok(TERN_OK)
}

/// Opens (creating if needed) the database in directory `path` with default options, and
/// stores its handle in `*out`.
#[no_mangle]
pub extern "C" fn tern_open(path: *const c_char, out: *mut *mut tern_db) -> c_int {
    tern_open_ex(path, 0, TERN_SYNC, out)
}

/// As `tern_open`, with a cache of `cache_bytes` (0: the default, a quarter of memory) and the
/// given durability (`TERN_SYNC` or `TERN_NOSYNC`; another value is `TERN_EINVAL`, and nothing
/// is opened).
#[no_mangle]
pub extern "C" fn tern_open_ex(
    path: *const c_char,
    cache_bytes: u64,
    durability: tern_durability,
    out: *mut *mut tern_db,
) -> c_int {
    guard(|| {
        non_null(out, "out")?;
        let path = path_arg(path)?;
        let mut options = Options::default();
        if cache_bytes > 0 {
            options.cache_bytes = cache_bytes;
        }
        options.wal.durability = durability_arg(durability)?;
        let db = Db::open(path, options)?;
        let max_key = db.max_key_len();
        give(out, tern_db { db, live_txns: AtomicUsize::new(0), max_key })
    })
}

/// Closes the database and frees the handle: writes a final checkpoint. Fails with
/// `TERN_EBUSY` (and frees nothing) while a transaction of it is live. NULL is a no-op.
///
/// # Safety
/// `db` is NULL or a handle from `tern_open` not yet closed; it is not used after success.
#[no_mangle]
pub unsafe extern "C" fn tern_close(db: *mut tern_db) -> c_int {
    guard(|| {
        if db.is_null() {
            return Ok(TERN_OK);
        }
        // SAFETY: a live handle from `tern_open` (the caller's promise).
        let live = unsafe { &*db }.live_txns.load(SeqCst);
        if live > 0 {
            return Err(Failure::new(TERN_EBUSY, format!("{live} transactions are live: finish them first")));
        }
        // SAFETY: as above; no transaction borrows it, and the caller gives it up.
        let handle = unsafe { Box::from_raw(db) };
        handle.db.close()?;
        Ok(TERN_OK)
    })
}

/// Writes a checkpoint now.
///
/// # Safety
/// `db` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tern_checkpoint(db: *const tern_db) -> c_int {
    guard(|| {
        non_null(db, "db")?;
        // SAFETY: a live handle (the caller's promise).
        unsafe { &*db }.db.checkpoint()?;
        Ok(TERN_OK)
    })
}

/// Creates table `name` and stores its handle in `*out` (`TERN_EEXIST` if it exists).
///
/// # Safety
/// `db` is a live handle; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tern_create_table(
    db: *const tern_db,
    name: *const c_char,
    out: *mut *mut tern_table,
) -> c_int {
    guard(|| {
        non_null(db, "db")?;
        non_null(name, "name")?;
        // SAFETY: a live handle (the caller's promise).
        let table = unsafe { &*db }.db.create_table(name_arg(name)?)?;
        give(out, tern_table { table })
    })
}

/// Stores the handle of table `name` in `*out` (NULL or "" is the default table;
/// `TERN_ENOTABLE` if there is none).
///
/// # Safety
/// `db` is a live handle; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tern_table_open(db: *const tern_db, name: *const c_char, out: *mut *mut tern_table) -> c_int {
    guard(|| {
        non_null(db, "db")?;
        // SAFETY: a live handle (the caller's promise).
        let table = unsafe { &*db }.db.table(name_arg(name)?)?;
        give(out, tern_table { table })
    })
}

/// Frees a table handle (the table stays in the database). NULL is a no-op.
///
/// # Safety
/// `table` is NULL or a handle from `tern_create_table`/`tern_table_open`, freed once.
#[no_mangle]
pub unsafe extern "C" fn tern_table_free(table: *mut tern_table) {
    if !table.is_null() {
        // SAFETY: the caller's promise: a live handle, given up here.
        drop(unsafe { Box::from_raw(table) });
    }
}

/// The database's statistics (transactions, locks, tables, log, checkpoints, buffer pool) as a
/// JSON object in `*out`, to be freed with `tern_free_string`.
///
/// # Safety
/// `db` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tern_stats_json(db: *const tern_db, out: *mut *mut c_char) -> c_int {
    guard(|| {
        non_null(db, "db")?;
        non_null(out, "out")?;
        // SAFETY: a live handle (the caller's promise).
        let stats = unsafe { &*db }.db.stats();
        let json = serde_json::to_string(&stats).map_err(|e| Failure::new(crate::error::TERN_EOTHER, e.to_string()))?;
        let json = CString::new(json).map_err(|e| Failure::new(crate::error::TERN_EOTHER, e.to_string()))?;
        // SAFETY: `out` is non-null and writable (the caller's promise).
        unsafe { *out = json.into_raw() };
        Ok(TERN_OK)
    })
}

/// Frees a string returned by tern. NULL is a no-op.
///
/// # Safety
/// `s` is NULL or a string from `tern_stats_json`, freed once.
#[no_mangle]
pub unsafe extern "C" fn tern_free_string(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: the caller's promise: a string tern allocated with `CString::into_raw`.
        drop(unsafe { CString::from_raw(s) });
    }
}
