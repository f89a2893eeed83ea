//! The C engines, through the shims in `csrc/`: one table of entry points per engine ([`Api`]),
//! one adapter for all of them ([`ShimEngine`], [`ShimSession`]).
//!
//! Invariants the adapter keeps:
//! - a database handle lives as long as its [`ShimEngine`], and every session borrows the
//!   engine, so no session outlives the handle it was opened on;
//! - a session is used by one thread at a time (`&mut self`); the engines' handles below the
//!   session level (LMDB environment, WiredTiger connection, Berkeley DB environment with
//!   `DB_THREAD`, RocksDB TransactionDB) are documented as safe to share between threads;
//! - callbacks into Rust copy what they are given before returning: C buffers are only valid
//!   during the call;
//! - at [`Durability::Periodic`] a flusher thread owns one more session, used by that thread
//!   alone; the engine stops and joins the thread, then closes that session, before it closes
//!   the database.

use crate::{format_mib as mib, Durability, Engine, OpenOptions, PeerError, Result, Session};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const SHIM_OK: c_int = 0;
const SHIM_NOTFOUND: c_int = 1;
const SHIM_RETRY: c_int = 2;
const SHIM_ERRLEN: usize = 256;
// The durability levels of `csrc/shim.h`.
const SHIM_DURABILITY_NONE: c_int = 0;
const SHIM_DURABILITY_SYNC: c_int = 1;
const SHIM_DURABILITY_NOSYNC: c_int = 2;
const SHIM_DURABILITY_PERIODIC: c_int = 3;
// Flags of the shims' open (`csrc/shim.h`): the size is the run's `--cache`.
const SHIM_CACHE_GIVEN: c_uint = 1;

type Sink = unsafe extern "C" fn(*mut c_void, *const c_void, usize);
type Visit = unsafe extern "C" fn(*mut c_void, *const c_void, usize, *const c_void, usize) -> c_int;

/// One engine's shim entry points (see `csrc/shim.h`).
struct Api {
    name: &'static str,
    open: unsafe extern "C" fn(
        *const c_char,
        usize,
        c_uint,
        c_int,
        c_uint,
        *mut *mut c_void,
        *mut c_char,
        usize,
    ) -> c_int,
    close: unsafe extern "C" fn(*mut c_void),
    cache_bytes: unsafe extern "C" fn(*mut c_void) -> usize,
    session_open: unsafe extern "C" fn(*mut c_void) -> *mut c_void,
    session_close: unsafe extern "C" fn(*mut c_void),
    error: unsafe extern "C" fn(*mut c_void) -> *const c_char,
    get: unsafe extern "C" fn(*mut c_void, *const c_void, usize, Sink, *mut c_void) -> c_int,
    scan: unsafe extern "C" fn(*mut c_void, *const c_void, usize, usize, Visit, *mut c_void, *mut usize) -> c_int,
    begin: unsafe extern "C" fn(*mut c_void) -> c_int,
    txn_get: unsafe extern "C" fn(*mut c_void, *const c_void, usize, Sink, *mut c_void) -> c_int,
    txn_put: unsafe extern "C" fn(*mut c_void, *const c_void, usize, *const c_void, usize) -> c_int,
    commit: unsafe extern "C" fn(*mut c_void) -> c_int,
    abort: unsafe extern "C" fn(*mut c_void),
    sync: unsafe extern "C" fn(*mut c_void) -> c_int,
    version: unsafe extern "C" fn() -> *const c_char,
}

/// Declares one shim's C functions and the [`Api`] table that names them.
macro_rules! api {
    ($table:ident, $name:literal: $open:ident, $close:ident, $cache_bytes:ident, $session_open:ident, $session_close:ident,
     $error:ident, $get:ident, $scan:ident, $begin:ident, $txn_get:ident, $txn_put:ident, $commit:ident,
     $abort:ident, $sync:ident, $version:ident) => {
        extern "C" {
            fn $open(
                path: *const c_char,
                size: usize,
                sessions: c_uint,
                durability: c_int,
                flags: c_uint,
                db: *mut *mut c_void,
                err: *mut c_char,
                errlen: usize,
            ) -> c_int;
            fn $close(db: *mut c_void);
            fn $cache_bytes(db: *mut c_void) -> usize;
            fn $session_open(db: *mut c_void) -> *mut c_void;
            fn $session_close(s: *mut c_void);
            fn $error(s: *mut c_void) -> *const c_char;
            fn $get(s: *mut c_void, k: *const c_void, kl: usize, sink: Sink, ctx: *mut c_void) -> c_int;
            fn $scan(
                s: *mut c_void,
                start: *const c_void,
                sl: usize,
                count: usize,
                visit: Visit,
                ctx: *mut c_void,
                seen: *mut usize,
            ) -> c_int;
            fn $begin(s: *mut c_void) -> c_int;
            fn $txn_get(s: *mut c_void, k: *const c_void, kl: usize, sink: Sink, ctx: *mut c_void) -> c_int;
            fn $txn_put(s: *mut c_void, k: *const c_void, kl: usize, v: *const c_void, vl: usize) -> c_int;
            fn $commit(s: *mut c_void) -> c_int;
            fn $abort(s: *mut c_void);
            fn $sync(s: *mut c_void) -> c_int;
            fn $version() -> *const c_char;
        }
        static $table: Api = Api {
            name: $name,
            open: $open,
            close: $close,
            cache_bytes: $cache_bytes,
            session_open: $session_open,
            session_close: $session_close,
            error: $error,
            get: $get,
            scan: $scan,
            begin: $begin,
            txn_get: $txn_get,
            txn_put: $txn_put,
            commit: $commit,
            abort: $abort,
            sync: $sync,
            version: $version,
        };
    };
}

api!(LMDB, "lmdb": lm_open, lm_close, lm_cache_bytes, lm_session_open, lm_session_close, lm_error, lm_get, lm_scan, lm_begin,
     lm_txn_get, lm_txn_put, lm_commit, lm_abort, lm_sync, lm_version);
api!(WIREDTIGER, "wiredtiger": wt_open, wt_close, wt_cache_bytes, wt_session_open, wt_session_close, wt_error, wt_get, wt_scan,
     wt_begin, wt_txn_get, wt_txn_put, wt_commit, wt_abort, wt_sync, wt_version);
api!(BDB, "bdb": bdb_open, bdb_close, bdb_cache_bytes, bdb_session_open, bdb_session_close, bdb_error, bdb_get, bdb_scan, bdb_begin,
     bdb_txn_get, bdb_txn_put, bdb_commit, bdb_abort, bdb_sync, bdb_version);
api!(ROCKSDB, "rocksdb": rx_open, rx_close, rx_cache_bytes, rx_session_open, rx_session_close, rx_error, rx_get, rx_scan, rx_begin,
     rx_txn_get, rx_txn_put, rx_commit, rx_abort, rx_sync, rx_version);

/// A C engine, open on a directory of its own.
pub struct ShimEngine {
    api: &'static Api,
    db: *mut c_void,
    config: String,
    /// The cache the engine reports (`None`: it has none).
    cache: Option<u64>,
    /// The periodic flusher ([`Durability::Periodic`]), stopped before `db` is closed.
    flusher: Option<Flusher>,
    // Dropped after `db` is closed (field order does not matter: Drop closes `db` first).
    dir: tempfile::TempDir,
}

/// A raw session handle moved to the flusher thread.
struct SessionPtr(*mut c_void);

// SAFETY: the flusher thread is the only user of this session (it was opened for it, and the
// engine closes it only after joining the thread); the engines allow a session to be used
// from a thread other than the one that opened it, one thread at a time.
unsafe impl Send for SessionPtr {}

impl SessionPtr {
    fn get(&self) -> *mut c_void {
        self.0
    }
}

/// A thread that calls the shim's `sync` on a session of its own every interval.
struct Flusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
    session: *mut c_void,
}

impl Flusher {
    /// Starts flushing `db` every `every`.
    fn start(api: &'static Api, db: *mut c_void, every: Duration) -> Result<Flusher> {
        // SAFETY: `db` is open (the caller just opened it) and stays open until `stop`.
        let session = unsafe { (api.session_open)(db) };
        if session.is_null() {
            return Err(PeerError::Failed(format!("{}: cannot open the flusher's session", api.name)));
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (signal, handle) = (stop.clone(), SessionPtr(session));
        let spawned = std::thread::Builder::new().name(format!("{}-flush", api.name)).spawn(move || {
            let s = handle.get();
            let (lock, cond) = &*signal;
            let mut stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
            let mut reported = false;
            loop {
                stopped = cond.wait_timeout(stopped, every).unwrap_or_else(|p| p.into_inner()).0;
                if *stopped {
                    return;
                }
                // SAFETY: `s` is open until the engine joins this thread, and only this thread
                // uses it.
                let rc = unsafe { (api.sync)(s) };
                if rc != SHIM_OK && !reported {
                    // SAFETY: as above; the shim's error text is NUL-terminated.
                    let message = unsafe { CStr::from_ptr((api.error)(s)) }.to_string_lossy();
                    eprintln!("{}: periodic flush failed: {message}", api.name);
                    reported = true;
                }
            }
        });
        match spawned {
            Ok(thread) => Ok(Flusher { stop, thread: Some(thread), session }),
            Err(e) => {
                // SAFETY: the session was opened above and no thread uses it.
                unsafe { (api.session_close)(session) };
                Err(PeerError::Failed(format!("{}: starting the flusher thread: {e}", api.name)))
            }
        }
    }

    /// Stops and joins the thread, then closes its session (before the database closes).
    fn stop(mut self, api: &Api) {
        *self.stop.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // SAFETY: the only user of the session, the thread, has ended; closed once, here.
        unsafe { (api.session_close)(self.session) };
    }
}

// SAFETY: the database handle is only passed to the shim's open/close and session_open, which
// the engines document as thread-safe on a shared environment/connection (see the module doc);
// all per-thread state lives in sessions, which are not shared. The flusher's session is used
// by the flusher thread alone, and closed by Drop after that thread has been joined.
unsafe impl Send for ShimEngine {}
// SAFETY: as above: `&ShimEngine` only opens sessions, which the engines allow concurrently.
unsafe impl Sync for ShimEngine {}

/// The size argument engine `api`'s shim open takes for a run with `o`: LMDB's map, the
/// others' cache.
fn open_size(api: &Api, o: &OpenOptions) -> usize {
    let bytes = if api.name == "lmdb" { o.lmdb_map_bytes() } else { o.peer_cache_bytes() };
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// Where a cache size came from, for a configuration line: `--cache`, or sized to hold the data.
fn cache_origin(o: &OpenOptions) -> &'static str {
    if o.cache_bytes.is_some() {
        "--cache"
    } else {
        "sized to hold the data"
    }
}

/// How engine `api`, open as `db` for a run with `o`, is configured: the report's line, with the
/// cache it got (`cache`, as the library reports it; `None` for LMDB).
fn describe(api: &Api, db: *mut c_void, o: &OpenOptions, cache: Option<u64>) -> String {
    let v = version(api);
    let d = durability_settings(api.name, o.durability);
    let asked = o.peer_cache_bytes();
    let got = cache.unwrap_or(0);
    match api.name {
        "lmdb" => {
            // The map is the cache: the data lives in it. Sized with room for half-full pages
            // and copy-on-write; pages untouched cost nothing on tmpfs.
            let given = if o.cache_bytes.is_some() { " (--cache does not apply)" } else { "" };
            format!(
                "{v}: no cache of its own{given}: reads go through the OS page cache (mmap), map {}, {d}, \
                 MDB_NOTLS, MDB_NORDAHEAD, one read txn per operation (reset/renew), writers serialized by LMDB",
                mib(o.lmdb_map_bytes())
            )
        }
        "wiredtiger" => format!(
            "{v}: cache {} (wiredtiger_open cache_size, {}), {d}, snapshot isolation, one transaction per \
             operation, reads included",
            mib(got),
            cache_origin(o)
        ),
        "bdb" => {
            let adjusted = if got != asked && got != 0 {
                format!("; DB_ENV->set_cachesize {}, enlarged by Berkeley DB for its overhead", mib(asked))
            } else {
                String::new()
            };
            format!(
                "{v}: btree, transactional (DB_INIT_TXN|DB_INIT_LOCK|DB_INIT_LOG), cache {} ({}{adjusted}; \
                 regions in __db.* files), {d}, deadlock detection on conflict, one transaction per operation, \
                 reads included",
                mib(got),
                cache_origin(o)
            )
        }
        _ => {
            let (mut bytes, mut number) = (0usize, 0 as c_int);
            // SAFETY: `db` is the RocksDB shim's open handle; the two outputs are valid for writes.
            unsafe { rx_write_buffers(db, &mut bytes, &mut number) };
            let index = if o.cache_bytes.is_some() {
                "index and filter blocks in the block cache (L0's pinned)"
            } else {
                "index and filter blocks on the heap (RocksDB's default)"
            };
            format!(
                "{v}: TransactionDB (pessimistic, deadlock detection), block cache {} (LRU, {}), {index}, \
                 memtables outside it ({} write buffer, at most {number}), {d}, point reads and scans outside \
                 transactions (implicit snapshot), writes in one transaction per operation",
                mib(got),
                cache_origin(o),
                mib(bytes as u64)
            )
        }
    }
}

extern "C" {
    /// RocksDB's memtables: bytes each, and how many at most (`csrc/rocksdb_shim.c`).
    fn rx_write_buffers(db: *mut c_void, bytes: *mut usize, number: *mut c_int);
}

/// The settings that give engine `name` durability level `d`, as the report states them.
fn durability_settings(name: &str, d: Durability) -> String {
    let level = d.name();
    let how = match (name, d) {
        ("lmdb", Durability::None) => "MDB_NOSYNC|MDB_NOMETASYNC (commits not flushed)".to_string(),
        ("lmdb", Durability::Sync) => "no MDB_NOSYNC/MDB_NOMETASYNC (commit fdatasyncs data, then meta)".into(),
        ("lmdb", Durability::NoSync) => "MDB_NOSYNC (commit written with pwrite, not flushed)".into(),
        ("lmdb", Durability::Periodic(every)) => {
            format!("MDB_NOSYNC + mdb_env_sync(force) every {every:?} from an adapter thread (LMDB has no timer)")
        }
        ("wiredtiger", Durability::None) => "log disabled (no durability)".into(),
        ("wiredtiger", Durability::Sync) => "log on, transaction_sync=(enabled=true,method=fsync)".into(),
        ("wiredtiger", Durability::NoSync) => {
            "log on, transaction_sync=(enabled=true,method=none) (written to the OS, not flushed)".into()
        }
        ("wiredtiger", Durability::Periodic(every)) => format!(
            "log on, transaction_sync=(enabled=false) + WT_SESSION::log_flush(sync=on) every {every:?} from an \
             adapter thread (as MongoDB's journal flusher)"
        ),
        ("bdb", Durability::None) => "DB_TXN_NOSYNC (commits not flushed)".into(),
        ("bdb", Durability::Sync) => "no DB_TXN_NOSYNC (commit writes and flushes the log)".into(),
        ("bdb", Durability::NoSync) => "DB_TXN_WRITE_NOSYNC (written to the OS, not flushed)".into(),
        ("bdb", Durability::Periodic(every)) => {
            format!("DB_TXN_NOSYNC + DB_ENV->log_flush(NULL) every {every:?} from an adapter thread")
        }
        (_, Durability::None) => "WAL disabled (no durability)".into(),
        (_, Durability::Sync) => "WAL on, WriteOptions.sync=true (fdatasync at commit)".into(),
        (_, Durability::NoSync) => "WAL on, WriteOptions.sync=false (written to the OS, not flushed)".into(),
        (_, Durability::Periodic(every)) => format!(
            "WAL on, sync=false, manual_wal_flush=true + FlushWAL(sync=true) every {every:?} from an adapter thread"
        ),
    };
    format!("durability {level}: {how}")
}

/// The library's own version string.
fn version(api: &Api) -> String {
    // SAFETY: every shim's version function returns a static NUL-terminated string.
    unsafe { CStr::from_ptr((api.version)()) }.to_string_lossy().into_owned()
}

/// Opens `name` (lmdb, wiredtiger, bdb, rocksdb) in a fresh directory under [`crate::data_root`].
pub fn open(name: &str, options: OpenOptions) -> Result<Box<dyn Engine>> {
    let api: &'static Api = match name {
        "lmdb" => &LMDB,
        "wiredtiger" => &WIREDTIGER,
        "bdb" => &BDB,
        "rocksdb" => &ROCKSDB,
        _ => return Err(PeerError::Failed(format!("unknown peer engine {name:?}"))),
    };
    let dir = options.data_dir(name)?;
    let flags = if options.cache_bytes.is_some() { SHIM_CACHE_GIVEN } else { 0 };
    let db = open_in(api, dir.path(), open_size(api, &options), options.sessions, options.durability, flags)?;
    // SAFETY: `db` was just opened by this shim and is not closed yet.
    let cache = u64::try_from(unsafe { (api.cache_bytes)(db) }).ok().filter(|&b| b > 0);
    let config = describe(api, db, &options, cache);
    let mut engine = ShimEngine { api, db, config, cache, flusher: None, dir };
    if let Durability::Periodic(every) = options.durability {
        // On failure `engine` is dropped, which closes `db`.
        engine.flusher = Some(Flusher::start(api, engine.db, every)?);
    }
    Ok(Box::new(engine))
}

fn open_in(
    api: &Api,
    dir: &Path,
    size: usize,
    sessions: usize,
    durability: Durability,
    flags: c_uint,
) -> Result<*mut c_void> {
    let path = CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| PeerError::Failed(format!("{}: the data directory's path contains a NUL byte", api.name)))?;
    let mut err = [0 as c_char; SHIM_ERRLEN];
    let mut db: *mut c_void = std::ptr::null_mut();
    // Two spare sessions, and the flusher's.
    let sessions = c_uint::try_from(sessions.saturating_add(3)).unwrap_or(c_uint::MAX);
    let level = match durability {
        Durability::None => SHIM_DURABILITY_NONE,
        Durability::Sync => SHIM_DURABILITY_SYNC,
        Durability::NoSync => SHIM_DURABILITY_NOSYNC,
        Durability::Periodic(_) => SHIM_DURABILITY_PERIODIC,
    };
    // SAFETY: `path` is a NUL-terminated string; `db` and `err` are valid for writes, and the
    // shim writes at most `err.len()` bytes (NUL included) into `err`.
    let rc = unsafe { (api.open)(path.as_ptr(), size, sessions, level, flags, &mut db, err.as_mut_ptr(), err.len()) };
    if rc != SHIM_OK || db.is_null() {
        // SAFETY: the shim NUL-terminates what it writes (snprintf), and `err` started zeroed.
        let message = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
        return Err(PeerError::Failed(format!("{}: {message}", api.name)));
    }
    Ok(db)
}

impl Drop for ShimEngine {
    fn drop(&mut self) {
        if let Some(flusher) = self.flusher.take() {
            flusher.stop(self.api);
        }
        // SAFETY: `db` came from a successful open and is closed once, here; no session is open
        // (each borrows the engine, so all were dropped first; the flusher's was closed above).
        unsafe { (self.api.close)(self.db) }
    }
}

impl Engine for ShimEngine {
    fn name(&self) -> &'static str {
        self.api.name
    }

    fn config(&self) -> String {
        self.config.clone()
    }

    fn cache_bytes(&self) -> Option<u64> {
        self.cache
    }

    fn data_dir(&self) -> Option<&Path> {
        Some(self.dir.path())
    }

    fn session(&self) -> Result<Box<dyn Session + '_>> {
        // SAFETY: `db` is open for the life of `self`, which the session borrows.
        let s = unsafe { (self.api.session_open)(self.db) };
        if s.is_null() {
            return Err(PeerError::Failed(format!("{}: cannot open a session", self.api.name)));
        }
        Ok(Box::new(ShimSession { api: self.api, s, _engine: std::marker::PhantomData }))
    }
}

/// One thread's session on a C engine.
struct ShimSession<'a> {
    api: &'static Api,
    s: *mut c_void,
    _engine: std::marker::PhantomData<&'a ShimEngine>,
}

impl Drop for ShimSession<'_> {
    fn drop(&mut self) {
        // SAFETY: `s` came from session_open and is closed once, here (the shim rolls back any
        // open transaction).
        unsafe { (self.api.session_close)(self.s) }
    }
}

/// Copies a value read by the shim into the `Vec<u8>` at `ctx`.
unsafe extern "C" fn sink_into_vec(ctx: *mut c_void, data: *const c_void, len: usize) {
    // SAFETY: `ctx` is the `&mut Vec<u8>` passed by `ShimSession::read`, live for the call;
    // `data` points at `len` readable bytes for the duration of this callback.
    let (out, bytes) = unsafe { (&mut *ctx.cast::<Vec<u8>>(), bytes(data, len)) };
    out.clear();
    out.extend_from_slice(bytes);
}

/// Passes a scanned entry to the closure at `ctx`; never asks to stop (the shim stops at the
/// count).
unsafe extern "C" fn visit_closure(
    ctx: *mut c_void,
    k: *const c_void,
    kl: usize,
    v: *const c_void,
    vl: usize,
) -> c_int {
    // SAFETY: `ctx` is the `&mut &mut dyn FnMut` passed by `ShimSession::scan`, live for the
    // call; `k`/`v` point at `kl`/`vl` readable bytes for the duration of this callback.
    let (visit, key, value) = unsafe { (&mut *ctx.cast::<&mut dyn FnMut(&[u8], &[u8])>(), bytes(k, kl), bytes(v, vl)) };
    visit(key, value);
    0
}

/// The `len` bytes at `data` (empty when `len` is 0, whatever `data` is).
///
/// # Safety
/// If `len > 0`, `data` must point at `len` readable bytes that outlive `'a`.
unsafe fn bytes<'a>(data: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: guaranteed by the caller for `len > 0`.
    unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }
}

impl ShimSession<'_> {
    fn error(&self, rc: c_int) -> PeerError {
        if rc == SHIM_RETRY {
            return PeerError::Retry;
        }
        // SAFETY: `s` is open; the shim's error buffer is NUL-terminated (zeroed at session
        // open, written with snprintf) and lives as long as the session.
        let message = unsafe { CStr::from_ptr((self.api.error)(self.s)) }.to_string_lossy();
        PeerError::Failed(format!("{}: {message}", self.api.name))
    }

    fn status(&self, rc: c_int) -> Result<()> {
        if rc == SHIM_OK {
            Ok(())
        } else {
            Err(self.error(rc))
        }
    }

    fn found(&self, rc: c_int) -> Result<bool> {
        match rc {
            SHIM_OK => Ok(true),
            SHIM_NOTFOUND => Ok(false),
            rc => Err(self.error(rc)),
        }
    }

    /// A point read through `get` or `txn_get`.
    fn read(
        &mut self,
        f: unsafe extern "C" fn(*mut c_void, *const c_void, usize, Sink, *mut c_void) -> c_int,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let ctx: *mut Vec<u8> = out;
        // SAFETY: `s` is open and used by this thread only; `key` is readable for the call;
        // `sink_into_vec` gets `ctx`, a live `&mut Vec<u8>`.
        let rc = unsafe { f(self.s, key.as_ptr().cast(), key.len(), sink_into_vec, ctx.cast()) };
        self.found(rc)
    }
}

impl Session for ShimSession<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.read(self.api.get, key, out)
    }

    fn scan(&mut self, start: &[u8], count: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let mut visit = visit;
        let ctx: *mut &mut dyn FnMut(&[u8], &[u8]) = &mut visit;
        let mut seen = 0usize;
        // SAFETY: `s` is open and used by this thread only; `start` is readable for the call;
        // `visit_closure` gets `ctx`, a live `&mut &mut dyn FnMut`; `seen` is writable.
        let rc = unsafe {
            (self.api.scan)(self.s, start.as_ptr().cast(), start.len(), count, visit_closure, ctx.cast(), &mut seen)
        };
        self.status(rc).map(|()| seen)
    }

    fn begin(&mut self) -> Result<()> {
        // SAFETY: `s` is open and used by this thread only.
        let rc = unsafe { (self.api.begin)(self.s) };
        self.status(rc)
    }

    fn txn_get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.read(self.api.txn_get, key, out)
    }

    fn txn_put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        // SAFETY: `s` is open and used by this thread only; `key` and `value` are readable for
        // the call (the engines copy them).
        let rc =
            unsafe { (self.api.txn_put)(self.s, key.as_ptr().cast(), key.len(), value.as_ptr().cast(), value.len()) };
        self.status(rc)
    }

    fn commit(&mut self) -> Result<()> {
        // SAFETY: `s` is open and used by this thread only.
        let rc = unsafe { (self.api.commit)(self.s) };
        self.status(rc)
    }

    fn abort(&mut self) {
        // SAFETY: `s` is open and used by this thread only; aborting with no transaction open
        // is a no-op in every shim.
        unsafe { (self.api.abort)(self.s) }
    }
}
