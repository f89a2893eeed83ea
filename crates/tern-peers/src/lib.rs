//! The engines tern is measured against, behind one interface.
//!
//! [`Engine`] opens [`Session`]s (one per benchmark thread); a session runs single-key reads and
//! range scans in their own read transactions, and write transactions of any size
//! (`begin`, `txn_get`, `txn_put`, `commit`). Everything else a benchmark needs is composed
//! from those ([`put`], [`read_modify_write`], [`load`], [`transaction`]).
//!
//! Engines: `tern` always; with the `peers` feature, LMDB, WiredTiger, Berkeley DB and RocksDB,
//! linked from their C libraries through small C shims (`csrc/`). Each engine states its
//! configuration ([`Engine::config`]): cache sized to hold the data, the same durability as the
//! tern run (nothing flushed; tern keeps nothing on disk yet), one transaction per operation.

#[cfg(feature = "peers")]
mod shim;
mod tern_engine;

pub use tern_engine::TernEngine;

use std::path::PathBuf;

/// What went wrong in an engine call.
#[derive(Debug)]
pub enum PeerError {
    /// A conflict or a deadlock: the transaction was rolled back and may be run again.
    Retry,
    /// The engine reported an error.
    Failed(String),
}

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerError::Retry => f.write_str("conflict or deadlock (retryable)"),
            PeerError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PeerError {}

pub type Result<T, E = PeerError> = std::result::Result<T, E>;

/// One storage engine under test.
pub trait Engine: Send + Sync {
    /// Its short name (`tern`, `lmdb`, `wiredtiger`, `bdb`, `rocksdb`).
    fn name(&self) -> &'static str;
    /// How it is configured, for the report.
    fn config(&self) -> String;
    /// A session for one thread.
    fn session(&self) -> Result<Box<dyn Session + '_>>;
}

/// One thread's handle on an engine.
pub trait Session {
    /// Copies `key`'s value into `out` (cleared first), in a read-only transaction of its own;
    /// false if absent.
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Visits up to `count` entries from the first key `>= start`, in a read-only transaction
    /// of its own; returns how many.
    fn scan(&mut self, start: &[u8], count: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize>;
    /// Begins a write transaction.
    fn begin(&mut self) -> Result<()>;
    /// A read inside the write transaction (with a write lock where the engine locks).
    fn txn_get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// A write inside the write transaction.
    fn txn_put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Commits the write transaction.
    fn commit(&mut self) -> Result<()>;
    /// Rolls the write transaction back (nothing if none is open).
    fn abort(&mut self);
}

/// Runs `body` in a write transaction, again while it ends in [`PeerError::Retry`]; returns
/// how many times it had to be run again.
pub fn transaction(s: &mut dyn Session, mut body: impl FnMut(&mut dyn Session) -> Result<()>) -> Result<u64> {
    let mut retries = 0;
    loop {
        s.begin()?;
        match body(s).and_then(|()| s.commit()) {
            Ok(()) => return Ok(retries),
            Err(PeerError::Retry) => {
                s.abort();
                retries += 1;
            }
            Err(e) => {
                s.abort();
                return Err(e);
            }
        }
    }
}

/// Sets `key` to `value` in a transaction of its own; returns the retries.
pub fn put(s: &mut dyn Session, key: &[u8], value: &[u8]) -> Result<u64> {
    transaction(s, |s| s.txn_put(key, value))
}

/// Reads `key` and writes `value` back in one transaction (YCSB's read-modify-write);
/// returns whether the key existed, and the retries.
pub fn read_modify_write(s: &mut dyn Session, key: &[u8], value: &[u8], scratch: &mut Vec<u8>) -> Result<(bool, u64)> {
    let mut found = false;
    let retries = transaction(s, |s| {
        found = s.txn_get(key, scratch)?;
        s.txn_put(key, value)
    })?;
    Ok((found, retries))
}

/// Writes `items` in one transaction (a load batch).
pub fn load(s: &mut dyn Session, items: &[(Vec<u8>, Vec<u8>)]) -> Result<u64> {
    transaction(s, |s| items.iter().try_for_each(|(k, v)| s.txn_put(k, v)))
}

/// The engines this build can open, tern first.
pub fn available() -> Vec<&'static str> {
    let mut names = vec!["tern"];
    if cfg!(feature = "peers") {
        names.extend(["lmdb", "wiredtiger", "bdb", "rocksdb"]);
    }
    names
}

/// What an engine is opened for.
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// Bytes of cache to give the engine (enough to hold the data set).
    pub cache_bytes: usize,
    /// Sessions (threads) that will be open at once.
    pub sessions: usize,
}

/// Opens engine `name` in a fresh directory of its own (removed when the engine is dropped).
pub fn open(name: &str, options: OpenOptions) -> Result<Box<dyn Engine>> {
    match name {
        "tern" => Ok(Box::new(TernEngine::open()?)),
        #[cfg(feature = "peers")]
        "lmdb" | "wiredtiger" | "bdb" | "rocksdb" => shim::open(name, options),
        #[cfg(not(feature = "peers"))]
        "lmdb" | "wiredtiger" | "bdb" | "rocksdb" => {
            let _ = options;
            Err(PeerError::Failed(format!(
                "engine {name:?} is not in this build: build with `--features peers` (after \
                 `scripts/install-peers.sh`)"
            )))
        }
        _ => Err(PeerError::Failed(format!("unknown engine {name:?} (tern, lmdb, wiredtiger, bdb, rocksdb)"))),
    }
}

/// Where engines keep their files: tmpfs (`/dev/shm`) when there is one, so that no engine
/// waits for a disk the tern run does not use either; the system's temporary directory
/// otherwise.
pub fn data_root() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}
