//! The engines tern is measured against, behind one interface.
//!
//! [`Engine`] opens [`Session`]s (one per benchmark thread); a session runs single-key reads and
//! range scans in their own read transactions, and write transactions of any size
//! (`begin`, `txn_get`, `txn_put`, `commit`). Everything else a benchmark needs is composed
//! from those ([`put`], [`read_modify_write`], [`load`], [`transaction`]).
//!
//! Engines: `tern` always; with the `peers` feature, LMDB, WiredTiger, Berkeley DB and RocksDB,
//! linked from their C libraries through small C shims (`csrc/`). Each engine states its
//! configuration ([`Engine::config`]): its cache (the size the run asked for, or by default one
//! sized to hold the data), one transaction per operation, and the [`Durability`] every engine
//! of a run shares (the config line says how each engine gets it).

#[cfg(feature = "peers")]
mod shim;
mod tern_engine;

pub use tern_engine::{own_process, TernEngine, Variant};

use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// The write-ahead log's counters, for an engine that reports them (tern with a log).
    fn wal_stats(&self) -> Option<tern::wal::WalStats> {
        None
    }
    /// Latch counters by class, for an engine that keeps them (tern: the process's,
    /// [`tern::sync::stats`]).
    fn latch_stats(&self) -> Option<Vec<tern::sync::LatchStats>> {
        None
    }
    /// The bytes of cache the engine has, as it reports them where it can; `None` for an
    /// engine without a cache of its own (LMDB reads through the OS page cache).
    fn cache_bytes(&self) -> Option<u64> {
        None
    }
    /// The directory holding the engine's files (`None`: it keeps its data in memory only).
    fn data_dir(&self) -> Option<&Path> {
        None
    }
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

/// tern's A/B variants, opened by name beside the engines (never in a default list):
/// `tern-written`, tern with its log written by a group-commit leader's `write` instead of
/// copied into mapped log files (`WalConfig::mapped` off); `tern-fifo`, tern handing every
/// released lock to its first waiter (`LockConfig::barging` off); `tern-chain`, tern's group
/// commit leaders chaining up to 8 flushes (`WalConfig::chain_flushes`, 0 by default);
/// `tern-pause`, tern's latches with the fixed PAUSE policy instead of the adaptive default (in
/// a worker process of its own only: `--memory-limit`); `tern-norows`, tern without its row
/// cache (`Options::row_cache_percent` 0: the pages get the whole cache); `tern-noadmit`, tern
/// letting every write transaction begin at once (`Options::write_tickets` 0: no admission).
pub const TERN_VARIANTS: [&str; 6] =
    ["tern-written", "tern-fifo", "tern-chain", "tern-pause", "tern-norows", "tern-noadmit"];

/// Every engine a build with `--features peers` can open, tern first.
pub const ENGINES: [&str; 5] = ["tern", "lmdb", "wiredtiger", "bdb", "rocksdb"];

/// The error message for an engine name that is neither an engine nor a tern variant.
pub fn unknown_engine(name: &str) -> String {
    let known: Vec<&str> = ENGINES.iter().chain(&TERN_VARIANTS).copied().collect();
    format!("unknown engine {name:?} ({})", known.join(", "))
}

/// The engines this build can open, tern first.
pub fn available() -> Vec<&'static str> {
    let mut names = vec!["tern"];
    if cfg!(feature = "peers") {
        names.extend(["lmdb", "wiredtiger", "bdb", "rocksdb"]);
    }
    names
}

/// When a commit returns, relative to its changes reaching stable storage: one level for every
/// engine of a run. Each engine's [`Engine::config`] names the settings that give it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// The settings from before tern had a log (comparable with earlier results): tern in
    /// memory; LMDB and Berkeley DB never flush, WiredTiger and RocksDB log nothing; data on
    /// tmpfs.
    #[default]
    None,
    /// A commit returns once its changes are written and flushed (`fsync`/`fdatasync`).
    Sync,
    /// A commit returns once its changes are written to the operating system, not flushed:
    /// survives a crash of the process, not of the machine.
    NoSync,
    /// A commit returns at once; the log is written and flushed every interval (by the
    /// engine, or where it has no such mode, by a thread of the adapter).
    Periodic(Duration),
}

impl Durability {
    /// The level's name as the command line spells it: `none`, `sync`, `nosync`, `periodic`.
    pub fn name(self) -> &'static str {
        match self {
            Durability::None => "none",
            Durability::Sync => "sync",
            Durability::NoSync => "nosync",
            Durability::Periodic(_) => "periodic",
        }
    }

    /// One line for a report.
    pub fn describe(self) -> String {
        match self {
            Durability::None => "none: no engine flushes commits to stable storage (tern in memory)".into(),
            Durability::Sync => "sync: every commit is written and flushed to stable storage before it returns".into(),
            Durability::NoSync => {
                "nosync: every commit is written to the operating system before it returns, not flushed".into()
            }
            Durability::Periodic(every) => {
                format!("periodic: commits return at once; the log is written and flushed every {every:?}")
            }
        }
    }
}

/// What an engine is opened for.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Bytes of cache for every engine that has one (`--cache`: tern's `Options::cache_bytes`,
    /// WiredTiger's `cache_size`, Berkeley DB's `set_cachesize`, RocksDB's block cache; LMDB has
    /// none). `None`: each engine's default for the run: [`OpenOptions::default_cache_bytes`]
    /// for the peers, `Options::default_cache_bytes` for tern.
    pub cache_bytes: Option<u64>,
    /// Bytes of data the run loads (keys and values): sizes the peers' default cache and LMDB's
    /// map.
    pub data_bytes: u64,
    /// Sessions (threads) that will be open at once.
    pub sessions: usize,
    /// How durable a commit is when it returns.
    pub durability: Durability,
    /// Where the engine's data directory is created (see [`OpenOptions::parent_dir`]).
    pub dir: Option<PathBuf>,
    /// tern's page size in bytes (`Options::tree.page_size`); `None`: tern's default (16 KiB).
    /// The peers keep theirs.
    pub tern_page_size: Option<usize>,
    /// tern's row cache share (`Options::row_cache_percent`); `None`: tern's default.
    pub tern_row_cache_percent: Option<u8>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            cache_bytes: None,
            data_bytes: 0,
            sessions: 4,
            durability: Durability::None,
            dir: None,
            tern_page_size: None,
            tern_row_cache_percent: None,
        }
    }
}

/// The smallest default cache of a peer engine.
const MIN_DEFAULT_CACHE: u64 = 64 << 20;

impl OpenOptions {
    /// A peer's cache when the run names none: sized to hold the data (twice the raw bytes,
    /// for page slack and indexes), at least 64 MiB.
    pub fn default_cache_bytes(&self) -> u64 {
        self.data_bytes.saturating_mul(2).max(MIN_DEFAULT_CACHE)
    }

    /// The cache a peer engine is opened with: `cache_bytes`, or the default.
    pub fn peer_cache_bytes(&self) -> u64 {
        self.cache_bytes.unwrap_or_else(|| self.default_cache_bytes())
    }

    /// LMDB's map (the most its file can grow to): four times the default cache, whatever
    /// `cache_bytes` says (the data must fit in it; LMDB has no cache to size).
    pub fn lmdb_map_bytes(&self) -> u64 {
        self.default_cache_bytes().saturating_mul(4)
    }

    /// The directory the engine's own data directory is created in: `dir` if given; else
    /// [`data_root`] (tmpfs) at [`Durability::None`], and the system's temporary directory
    /// otherwise (a flush to tmpfs costs nothing, so a durable level must run on a disk).
    pub fn parent_dir(&self) -> PathBuf {
        match (&self.dir, self.durability) {
            (Some(dir), _) => dir.clone(),
            (None, Durability::None) => data_root(),
            (None, _) => std::env::temp_dir(),
        }
    }

    /// A fresh data directory for engine `name` under [`OpenOptions::parent_dir`], removed
    /// when dropped.
    pub fn data_dir(&self, name: &str) -> Result<tempfile::TempDir> {
        let parent = self.parent_dir();
        scratch_dir(&parent, &format!("tern-peer-{name}-"))
            .map_err(|e| PeerError::Failed(format!("{name}: creating a data directory in {}: {e}", parent.display())))
    }
}

/// Bytes as MiB for a report: whole MiB as `192 MiB`, others with one decimal (`488.3 MiB`).
pub fn format_mib(bytes: u64) -> String {
    if bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

/// Opens engine `name` in a fresh directory of its own (removed when the engine is dropped).
pub fn open(name: &str, options: OpenOptions) -> Result<Box<dyn Engine>> {
    if let Durability::Periodic(every) = options.durability {
        if every.is_zero() {
            return Err(PeerError::Failed("a periodic flush interval must be above zero".into()));
        }
    }
    match name {
        "tern" => Ok(Box::new(TernEngine::open_with(&options)?)),
        "tern-written" => Ok(Box::new(TernEngine::open_variant(&options, Variant::Written)?)),
        "tern-fifo" => Ok(Box::new(TernEngine::open_variant(&options, Variant::Fifo)?)),
        "tern-chain" => Ok(Box::new(TernEngine::open_variant(&options, Variant::Chain)?)),
        "tern-pause" => Ok(Box::new(TernEngine::open_variant(&options, Variant::Pause)?)),
        "tern-norows" => Ok(Box::new(TernEngine::open_variant(&options, Variant::NoRows)?)),
        "tern-noadmit" => Ok(Box::new(TernEngine::open_variant(&options, Variant::NoAdmit)?)),
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
        _ => Err(PeerError::Failed(unknown_engine(name))),
    }
}

/// A fresh directory named `prefix...` in `parent`, removed when dropped (for benchmarks that
/// open databases of their own).
pub fn scratch_dir(parent: &std::path::Path, prefix: &str) -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix(prefix).tempdir_in(parent)
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
