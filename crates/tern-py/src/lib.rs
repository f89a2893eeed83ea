//! `tern` for Python: databases, transactions as context managers, bytes keys and values,
//! ordered ranges both ways, tables, exceptions mapped from `engine::Error`.
//!
//! ```python
//! import tern
//! db = tern.open("my-db")
//! with db.begin() as txn:          # commits on success, aborts on an exception
//!     txn[b"greeting"] = b"hello"
//! with db.begin_read() as txn:
//!     print(txn[b"greeting"])      # b'hello'
//! db.close()
//! ```
//!
//! Invariants:
//! * A transaction's engine state owns a clone of its database handle, declared after the
//!   transaction it keeps alive, so the engine's transaction never outlives the database it
//!   borrows.
//! * A `Transaction` is bound to the thread that began it (tern's transactions are): used from
//!   another thread it raises `RuntimeError`; dropped on another thread it is aborted by its own
//!   thread, at that thread's next call into tern or when it exits (`pinned`).
//! * The GIL is released around every engine call (`Python::detach`); the closures run on the
//!   calling thread, so the thread binding holds.
//! * Range iteration holds no borrow across Python calls: each batch of entries is read by a
//!   fresh cursor positioned after the last key returned.

mod pinned;

use engine::lock::Wait;
use pinned::{reap, Pinned};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

create_exception!(tern, Error, PyException, "Any error from tern.");
create_exception!(tern, ConflictError, Error, "A write conflicted with a later commit: abort and retry.");
create_exception!(tern, DeadlockError, Error, "The transaction was chosen as a deadlock victim: abort and retry.");
create_exception!(
    tern,
    LockTimeoutError,
    Error,
    "A lock wait timed out (or, with lock_timeout=0, the lock was taken)."
);
create_exception!(tern, ReadOnlyError, Error, "A write in a read-only transaction or database.");
create_exception!(tern, NoSuchTableError, Error, "No table of that name.");
create_exception!(tern, TableExistsError, Error, "A table of that name exists already.");
create_exception!(tern, IOError, Error, "An I/O error (the message names the file).");
create_exception!(tern, CorruptionError, Error, "Damaged data was found (the message names the file and offset).");
create_exception!(tern, LockedError, Error, "The database directory is open in another process.");
create_exception!(tern, TransactionError, Error, "The transaction is finished or failed.");

/// Maps a tern error to its Python exception.
fn py_err(e: engine::Error) -> PyErr {
    use engine::Error as E;
    let msg = e.to_string();
    match e {
        E::InvalidArgument(_) | E::KeyEmpty | E::KeyTooLarge { .. } | E::ValueTooLarge { .. } => {
            PyValueError::new_err(msg)
        }
        E::Conflict => ConflictError::new_err(msg),
        E::Deadlock => DeadlockError::new_err(msg),
        E::LockTimeout | E::WouldBlock => LockTimeoutError::new_err(msg),
        E::ReadOnlyTxn | E::ReadOnly { .. } => ReadOnlyError::new_err(msg),
        E::NoSuchTable { .. } => NoSuchTableError::new_err(msg),
        E::TableExists { .. } => TableExistsError::new_err(msg),
        E::Io { .. } | E::CommitNotDurable { .. } => IOError::new_err(msg),
        E::Corruption { .. } => CorruptionError::new_err(msg),
        E::Locked { .. } => LockedError::new_err(msg),
        E::TxnFailed { .. } | E::LockNotHeld => TransactionError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// Runs `f` with the GIL released. `f` may capture thread-bound engine handles: it runs on the
/// calling thread, which is what their binding asks.
fn released<T: Send>(py: Python<'_>, f: impl FnOnce() -> T) -> T {
    /// Moves a closure into `detach`, which asks for `Send` because another Python thread may
    /// run meanwhile; the closure itself runs right here.
    struct Here<F>(F);
    impl<F> Here<F> {
        fn run<T>(self) -> T
        where
            F: FnOnce() -> T,
        {
            (self.0)()
        }
    }
    // SAFETY: `Python::detach` calls the closure on the current thread before it returns, so
    // nothing it captures crosses to another thread; other Python threads run only code that
    // cannot reach these captures (they are borrowed by this call).
    unsafe impl<F> Send for Here<F> {}
    let here = Here(f);
    py.detach(move || here.run())
}

/// An open database. Any thread may use it.
#[pyclass(module = "tern", frozen)]
struct Database {
    db: std::sync::Mutex<Option<engine::Db>>,
}

impl Database {
    /// The engine's handle (after ending the calling thread's orphaned transactions).
    fn handle(&self) -> PyResult<engine::Db> {
        reap();
        self.db
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| TransactionError::new_err("the database is closed"))
    }
}

/// `tern.open(path, cache_bytes=None, durability="sync")`: opens (creating if needed) the
/// database in directory `path`. `durability` is "sync" (a commit returns once its log record
/// is synced) or "nosync" (once written to the operating system).
#[pyfunction]
#[pyo3(signature = (path, cache_bytes=None, durability="sync"))]
fn open(py: Python<'_>, path: std::path::PathBuf, cache_bytes: Option<u64>, durability: &str) -> PyResult<Database> {
    reap();
    let mut options = engine::Options::default();
    if let Some(bytes) = cache_bytes {
        options.cache_bytes = bytes;
    }
    options.wal.durability = match durability {
        "sync" => engine::Durability::Sync,
        "nosync" => engine::Durability::NoSync,
        other => {
            return Err(PyValueError::new_err(format!("durability must be \"sync\" or \"nosync\", not {other:?}")))
        }
    };
    let db = released(py, move || engine::Db::open(path, options)).map_err(py_err)?;
    Ok(Database { db: std::sync::Mutex::new(Some(db)) })
}

#[pymethods]
impl Database {
    /// Begins a read-write transaction (use it in a `with` block). `lock_timeout`: how long a
    /// write waits for a lock another transaction holds on its key, in seconds; `None` (the
    /// default) waits until it is granted (or a deadlock is found), 0 does not wait. A wait that
    /// ends ungranted raises `LockTimeoutError`; the transaction stays usable. One thread that
    /// interleaves two write transactions writing one key needs a timeout: the second waits for
    /// the first, which cannot finish meanwhile, so with `None` the thread hangs.
    #[pyo3(signature = (lock_timeout=None))]
    fn begin(&self, lock_timeout: Option<f64>) -> PyResult<Transaction> {
        let lock_wait = lock_wait(lock_timeout)?;
        Transaction::begin(self.handle()?, engine::TxnOptions { lock_wait, ..engine::TxnOptions::default() })
    }

    /// Begins a read-only transaction: a snapshot, no locks.
    fn begin_read(&self) -> PyResult<Transaction> {
        Transaction::begin(self.handle()?, engine::TxnOptions { read_only: true, ..engine::TxnOptions::default() })
    }

    /// Creates table `name`.
    fn create_table(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let db = self.handle()?;
        released(py, || db.create_table(name)).map(drop).map_err(py_err)
    }

    /// Every table's name, the default table ("") first.
    fn table_names(&self) -> PyResult<Vec<String>> {
        Ok(self.handle()?.table_names())
    }

    /// Writes a checkpoint now.
    fn checkpoint(&self, py: Python<'_>) -> PyResult<()> {
        let db = self.handle()?;
        released(py, || db.checkpoint()).map(drop).map_err(py_err)
    }

    /// Closes the database (final checkpoint). Live transactions keep the engine open until
    /// they end; later calls on this object raise.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        reap();
        let db = self.db.lock().unwrap_or_else(|p| p.into_inner()).take();
        match db {
            Some(db) => released(py, || db.close()).map_err(py_err),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

/// The engine's lock wait for `Database.begin`'s `lock_timeout`, checked.
fn lock_wait(lock_timeout: Option<f64>) -> PyResult<Wait> {
    match lock_timeout {
        None => Ok(Wait::Forever),
        Some(0.0) => Ok(Wait::No), // -0.0 too
        Some(secs) => std::time::Duration::try_from_secs_f64(secs).map(Wait::Timeout).map_err(|_| {
            PyValueError::new_err(format!("lock_timeout must be None or a finite number of seconds >= 0, not {secs}"))
        }),
    }
}

/// A transaction, bound to the thread that began it: another thread gets a `RuntimeError`. As
/// a context manager it commits when the block ends normally and aborts when it raises.
#[pyclass(module = "tern", frozen)]
struct Transaction {
    pinned: Pinned,
    read_only: bool,
}

impl Transaction {
    fn begin(db: engine::Db, options: engine::TxnOptions) -> PyResult<Transaction> {
        let read_only = options.read_only;
        Ok(Transaction { pinned: Pinned::begin(db, options).map_err(py_err)?, read_only })
    }

    /// Runs `f` with the live transaction: `RuntimeError` on another thread than the one that
    /// began it, `TransactionError` once it is finished.
    fn live<T>(&self, f: impl FnOnce(&mut engine::Txn<'static>) -> PyResult<T>) -> PyResult<T> {
        self.pinned.with(|live| f(live.ok_or_else(|| TransactionError::new_err("the transaction is finished"))?.txn()))
    }

    /// As [`Transaction::live`], with `table`'s handle too (None: the default table).
    fn with<T>(
        &self,
        table: Option<&str>,
        f: impl FnOnce(&mut engine::Txn<'static>, engine::Table) -> PyResult<T>,
    ) -> PyResult<T> {
        self.live(|txn| {
            let table = txn.table(table.unwrap_or("")).map_err(py_err)?;
            f(txn, table)
        })
    }
}

#[pymethods]
impl Transaction {
    /// The value of `key`, or `default` (None) if absent.
    #[pyo3(signature = (key, default=None, table=None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &[u8],
        default: Option<Py<PyAny>>,
        table: Option<&str>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let found = self.with(table, |txn, t| released(py, || txn.get_in(&t, key)).map_err(py_err))?;
        Ok(match found {
            Some(v) => Some(PyBytes::new(py, &v).into_any().unbind()),
            None => default,
        })
    }

    /// Writes `key` = `value`.
    #[pyo3(signature = (key, value, table=None))]
    fn put(&self, py: Python<'_>, key: &[u8], value: &[u8], table: Option<&str>) -> PyResult<()> {
        self.with(table, |txn, t| released(py, || txn.put_in(&t, key, value)).map_err(py_err))
    }

    /// Deletes `key`; returns whether it was there.
    #[pyo3(signature = (key, table=None))]
    fn delete(&self, py: Python<'_>, key: &[u8], table: Option<&str>) -> PyResult<bool> {
        self.with(table, |txn, t| released(py, || txn.delete_in(&t, key)).map_err(py_err))
    }

    fn __getitem__(&self, py: Python<'_>, key: &[u8]) -> PyResult<Py<PyAny>> {
        self.get(py, key, None, None)?.ok_or_else(|| PyKeyError::new_err(PyBytes::new(py, key).unbind()))
    }

    fn __setitem__(&self, py: Python<'_>, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.put(py, key, value, None)
    }

    fn __delitem__(&self, py: Python<'_>, key: &[u8]) -> PyResult<()> {
        if self.delete(py, key, None)? {
            Ok(())
        } else {
            Err(PyKeyError::new_err(PyBytes::new(py, key).unbind()))
        }
    }

    fn __contains__(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        Ok(self.get(py, key, None, None)?.is_some())
    }

    /// Iterates `(key, value)` pairs with `start <= key < end` (either may be None), in key
    /// order, or from the last down with `reverse=True`.
    #[pyo3(signature = (start=None, end=None, reverse=false, table=None))]
    fn range(
        slf: Bound<'_, Self>,
        start: Option<Vec<u8>>,
        end: Option<Vec<u8>>,
        reverse: bool,
        table: Option<String>,
    ) -> PyResult<RangeIter> {
        let t = slf.get().with(table.as_deref(), |_, t| Ok(t))?;
        Ok(RangeIter { txn: slf.unbind(), table: t, start, end, reverse, after: None, batch: Vec::new(), done: false })
    }

    /// Commits. Afterwards the transaction is finished.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let live = self.pinned.take()?.ok_or_else(|| TransactionError::new_err("the transaction is finished"))?;
        released(py, move || live.commit()).map_err(py_err)
    }

    /// Aborts (nothing of it is applied). Aborting a finished transaction does nothing.
    fn abort(&self) -> PyResult<()> {
        drop(self.pinned.take()?); // a live transaction dropped unfinished is aborted
        Ok(())
    }

    /// Whether the transaction is read-only.
    #[getter]
    fn read_only(&self) -> bool {
        self.read_only
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, _exc_value, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc_value: Option<Bound<'_, PyAny>>,
        _traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some() || self.pinned.with(|live| Ok(live.is_none()))? {
            self.abort()?;
        } else {
            self.commit(py)?;
        }
        Ok(false)
    }
}

/// Entries read per batch of a range iteration.
const BATCH: usize = 256;

/// An iteration over a transaction's range, in batches (no borrow is held between them). Bound
/// to the transaction's thread, as the transaction is.
#[pyclass(module = "tern")]
struct RangeIter {
    txn: Py<Transaction>,
    table: engine::Table,
    start: Option<Vec<u8>>,
    end: Option<Vec<u8>>,
    reverse: bool,
    /// The last key returned (the next batch starts past it).
    after: Option<Vec<u8>>,
    /// The current batch, reversed so that `pop` gives the next entry.
    batch: Vec<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

impl RangeIter {
    fn fill(&mut self, py: Python<'_>) -> PyResult<()> {
        use std::ops::Bound as B;
        let (table, reverse, after) = (&self.table, self.reverse, self.after.as_deref());
        let (lo, hi) = (self.start.as_deref(), self.end.as_deref());
        let batch = self.txn.get().live(|txn| {
            released(py, || -> engine::Result<Vec<(Vec<u8>, Vec<u8>)>> {
                // The range still to walk: past `after` in the direction of travel.
                let lower = match (reverse, after) {
                    (false, Some(a)) => B::Excluded(a),
                    _ => lo.map_or(B::Unbounded, B::Included),
                };
                let upper = match (reverse, after) {
                    (true, Some(a)) => B::Excluded(a),
                    _ => hi.map_or(B::Unbounded, B::Excluded),
                };
                let mut cursor = txn.cursor_in(table, (lower, upper))?;
                let mut out = Vec::with_capacity(BATCH);
                let mut entry = if reverse { cursor.last()? } else { cursor.first()? };
                while let Some((k, v)) = entry {
                    out.push((k.to_vec(), v.to_vec()));
                    if out.len() == BATCH {
                        break;
                    }
                    entry = if reverse { cursor.prev()? } else { cursor.next()? };
                }
                Ok(out)
            })
            .map_err(py_err)
        })?;
        self.done = batch.len() < BATCH;
        self.after = batch.last().map(|(k, _)| k.clone());
        self.batch = batch;
        self.batch.reverse();
        Ok(())
    }
}

#[pymethods]
impl RangeIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<(Py<PyBytes>, Py<PyBytes>)>> {
        self.txn.get().pinned.check()?;
        if self.batch.is_empty() && !self.done {
            self.fill(py)?;
        }
        Ok(self.batch.pop().map(|(k, v)| (PyBytes::new(py, &k).unbind(), PyBytes::new(py, &v).unbind())))
    }
}

/// The Python module `tern`.
#[pymodule]
fn tern(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_class::<Database>()?;
    m.add_class::<Transaction>()?;
    m.add_class::<RangeIter>()?;
    for (name, ty) in [
        ("Error", py.get_type::<Error>()),
        ("ConflictError", py.get_type::<ConflictError>()),
        ("DeadlockError", py.get_type::<DeadlockError>()),
        ("LockTimeoutError", py.get_type::<LockTimeoutError>()),
        ("ReadOnlyError", py.get_type::<ReadOnlyError>()),
        ("NoSuchTableError", py.get_type::<NoSuchTableError>()),
        ("TableExistsError", py.get_type::<TableExistsError>()),
        ("IOError", py.get_type::<IOError>()),
        ("CorruptionError", py.get_type::<CorruptionError>()),
        ("LockedError", py.get_type::<LockedError>()),
        ("TransactionError", py.get_type::<TransactionError>()),
    ] {
        m.add(name, ty)?;
    }
    Ok(())
}
