//! The database: named tables of ordered keys, transactions over them, and every component's
//! counters.
//!
//! ```
//! use tern::{Db, Options};
//! let db = Db::open_temporary(Options::default())?;
//! let users = db.create_table("users")?;
//! let mut txn = db.begin()?;
//! txn.put(b"config/version", b"3")?;
//! txn.put_in(&users, b"alice", b"admin")?;
//! txn.commit()?;
//! let read = db.begin_read()?;
//! assert_eq!(read.get_in(&users, b"alice")?.as_deref(), Some(&b"admin"[..]));
//! # Ok::<(), tern::Error>(())
//! ```
//!
//! **Durability.** [`Db::open`] keeps a database in a directory: every commit is logged
//! ([`crate::wal`]) and waits for the disk per its [`Durability`]; checkpoints
//! ([`crate::checkpoint`]) bound the log; opening recovers ([`crate::recovery`]). Tables live in one
//! buffer pool ([`crate::buffer`]) of [`Options::cache_bytes`] over the page file, so a
//! database can be larger than memory. [`Db::open_temporary`] keeps no files of its own.

use crate::btree::{BTree, TreeConfig, TreeStats};
use crate::buffer::{frame_bytes, BufferStats, Pool, PoolConfig, MIN_FRAMES, PAGE_FILE};
use crate::checkpoint::{self, CheckpointStats};
use crate::fs::{Fs, StdFs};
use crate::lock::{LockConfig, LockManager, LockStats};
use crate::recovery::{self, Deferred, DirLock, Recovered, RecoveryStats};
use crate::settings::{self, Settings};
use crate::sync::admit::{Gate, GateStats};
use crate::sync::{LatchClass, LatchStats, Mutex, RwLatch, SpinConfig, SpinPolicy};
use crate::txn::chains::Chains;
use crate::txn::gc::{self, Collected, Gc, Item};
use crate::txn::{Counter, Counters, GlobalList, Txn, TxnOptions, Writer};
use crate::wal::{Durability, Wal, WalConfig, WalStats};
use crate::{Error, Result};
use crossbeam_utils::CachePadded;
use serde::Serialize;
use std::collections::HashMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::{Arc, Condvar, Mutex as StdMutex, Weak};
use std::time::{Duration, Instant};

/// How running transactions are tracked: the A/B switch of the begin/commit path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnTracking {
    /// Each transaction announces itself in a slot of its thread's context (tern).
    PerThread,
    /// One list of running transactions under one global latch that waits by `sched_yield`
    /// (NoisePage's design). For measurement only.
    GlobalLatch,
}

/// Database options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Every table's B+tree.
    pub tree: TreeConfig,
    /// The lock manager (writers lock keys exclusively; deadlocks are detected).
    pub locks: LockConfig,
    /// How running transactions are tracked.
    pub tracking: TxnTracking,
    /// The write-ahead log (databases opened with [`Db::open`]).
    pub wal: WalConfig,
    /// Bytes of memory for pages (the buffer pool) and the row cache
    /// ([`row_cache_percent`](Self::row_cache_percent) of it once the data outgrows the
    /// cache): pages beyond it live in the database's page file and are read back on demand. Default:
    /// [`Options::default_cache_bytes`].
    pub cache_bytes: u64,
    /// The percentage of [`cache_bytes`](Self::cache_bytes) given to the **row cache** once
    /// the data outgrows the cache (0 to [`MAX_ROW_CACHE_PERCENT`]). While the data fits, the
    /// pages may use the whole cache and the row cache holds nothing. The first time the pool
    /// must evict, it shrinks to the rest of the cache for as long as it is open: the frames
    /// past that are emptied by the background evictor and their memory given back, and then
    /// the row cache opens. A point read that has to read its leaf from disk, or that finds
    /// it about to be evicted, keeps that key's value in the row cache, and later point reads
    /// of the key are answered from it while the leaf is on disk, without reading the page:
    /// with skewed reads over data several times the cache, the hot keys are a small part of
    /// each leaf, and whole pages hold far fewer of them per byte. Scans, writes and reads of
    /// resident leaves never touch it. An entry is used only while its leaf is on disk exactly as
    /// it was read, so the cache never returns a value the leaf does not hold. The frames keep
    /// at least 16 pages ([`crate::buffer::MIN_FRAMES`]): in a cache too small for
    /// those and this share, the row cache gets what they leave. Default:
    /// [`DEFAULT_ROW_CACHE_PERCENT`]; 0 turns it off. Figures: `DbStats::buffer.row_*`.
    pub row_cache_percent: u8,
    /// **Admission**: how many write transactions ([`Db::begin`], [`Db::begin_with`] without
    /// `read_only`) run at once while the process has more threads using tern than this. A
    /// write transaction that finds them all taken waits before it begins, holding nothing
    /// (read-only transactions never wait). With more threads than CPUs, this keeps the
    /// operating system from preempting writers that hold a hot row's lock or a page latch
    /// that the others then wait for (TPC-B at 8 threads on 2 CPUs: 0.57x one thread
    /// without it). Waiters take turns about every 0.5 ms ([`crate::sync::admit::WINDOW`]);
    /// if no ticket comes back for 10 ms ([`crate::sync::admit::STALL`]), as when the
    /// holders are long transactions, everyone enters until one does, so a write never waits
    /// on admission much longer than that. A transaction blocked on a disk read lends its
    /// ticket meanwhile; a commit returns it before it waits for its log flush. A thread
    /// running two write transactions at once enters at once. Default: the CPUs this process
    /// may run on (`std::thread::available_parallelism`); 0 turns admission off. Figures:
    /// [`DbStats::admission`](crate::DbStats::admission).
    pub write_tickets: usize,
}

/// The default [`Options::row_cache_percent`].
pub const DEFAULT_ROW_CACHE_PERCENT: u8 = 50;
/// The largest [`Options::row_cache_percent`].
pub const MAX_ROW_CACHE_PERCENT: u8 = 90;

impl Options {
    /// The default cache: the smaller of 1 GiB and a quarter of the machine's memory.
    pub fn default_cache_bytes() -> u64 {
        // SAFETY: `sysconf` reads system constants; no memory is touched.
        let (pages, size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        let ram = u64::try_from(pages).unwrap_or(0).saturating_mul(u64::try_from(size).unwrap_or(0));
        match ram {
            0 => 1 << 30,
            ram => (ram / 4).min(1 << 30),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tree: TreeConfig::default(),
            locks: LockConfig::default(),
            tracking: TxnTracking::PerThread,
            wal: WalConfig::default(),
            cache_bytes: Options::default_cache_bytes(),
            row_cache_percent: DEFAULT_ROW_CACHE_PERCENT,
            write_tickets: std::thread::available_parallelism().map_or(4, |n| n.get()),
        }
    }
}

/// A handle to an open database: cheap to clone, `Send + Sync`; the database closes when the
/// last handle is dropped.
#[derive(Clone)]
pub struct Db {
    pub(crate) inner: Arc<DbInner>,
}

/// A table: one ordered keyspace of a database. Cheap to clone.
#[derive(Clone)]
pub struct Table {
    pub(crate) inner: Arc<TableInner>,
}

pub(crate) struct TableInner {
    /// The database's id (a table handle of another database is refused).
    pub db: u64,
    pub id: u32,
    pub name: String,
    pub tree: BTree,
}

impl Table {
    /// The table's name (`""` for the default table).
    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &self.inner.name).field("id", &self.inner.id).finish()
    }
}

#[derive(Default)]
struct Catalog {
    by_name: HashMap<String, Arc<TableInner>>,
    by_id: Vec<Arc<TableInner>>,
}

/// The longest table name, in bytes.
pub const MAX_TABLE_NAME: usize = 1024;

/// Write states (locker and write list) kept for reuse, per shard of threads: a write transaction
/// takes one at its first write and returns it at its end.
const WRITER_SHARDS: usize = 16;

/// One shard of pooled write states.
type WriterPool = CachePadded<Mutex<Vec<Box<Writer>>>>;

pub(crate) struct DbInner {
    /// Unique within the process (tags this database's transaction slots).
    pub id: u64,
    pub options: Options,
    path: Option<PathBuf>,
    catalog: RwLatch<Catalog>,
    /// Held while a table is created or loaded: table ids are taken in order, and a loaded
    /// table is the last of the catalog until it is published.
    creating: StdMutex<()>,
    /// The default table (id 0), reached without the catalog.
    pub default_table: Arc<TableInner>,
    pub locks: LockManager,
    writers: Box<[WriterPool]>,
    pub gc: Gc,
    /// Version chains of every table (leaf slots hold their ids).
    pub chains: Chains,
    pub counters: Counters,
    pub global: Option<GlobalList>,
    /// The log, checkpoints and directory lock of a database on disk.
    pub durable: Option<Durable>,
    /// Where every table's pages live.
    pub pool: Arc<Pool>,
    /// The log's last batch of writes, applied after the open (`recovery/deferred.rs`).
    redo: Option<Redo>,
    /// `redo` has writes left to apply, as far as transactions know (cleared by the first
    /// settle that finds them all applied).
    redo_pending: AtomicBool,
    /// Admission of write transactions (`Options::write_tickets`; `None`: off).
    pub gate: Option<Arc<Gate>>,
}

/// Unit tests: the `tern-redo` threads started while this is set wait (until it is cleared or
/// their database closes), so that transactions meet every deferred write first.
#[cfg(test)]
pub(crate) static HOLD_REDO: AtomicBool = AtomicBool::new(false);

/// The deferred writes of a replay and the thread that applies them.
struct Redo {
    deferred: Arc<Deferred>,
    thread: StdMutex<Option<std::thread::JoinHandle<()>>>,
}

impl Redo {
    /// Starts the thread applying `deferred` to `tables` (those of the open); its errors go
    /// to the `LOG` in `dir`. Without the thread (it could not be started, said in the `LOG`),
    /// the writes are still applied by whoever needs them, and by the next checkpoint.
    fn start(deferred: Arc<Deferred>, tables: Vec<Arc<TableInner>>, dir: PathBuf) -> Redo {
        let work = deferred.clone();
        let log = dir.clone();
        let spawned = std::thread::Builder::new().name("tern-redo".into()).spawn(move || {
            #[cfg(test)]
            while HOLD_REDO.load(Acquire) && !work.stopped() {
                std::thread::sleep(Duration::from_millis(1));
            }
            let trees = |id: u32| tables.get(id as usize).map(|t: &Arc<TableInner>| &t.tree);
            // The error stays with its chunk too (deferred.rs, invariant 3): whoever needs the
            // chunk next, or the next checkpoint, applies it again or gets the error.
            if let Err(e) = work.settle_all(&trees, true) {
                note(&log, &format!("deferred replay: {e}"));
            }
        });
        let thread = match spawned {
            Ok(thread) => Some(thread),
            Err(e) => {
                note(&dir, &format!("deferred replay: no thread ({e}): writes apply as they are needed"));
                None
            }
        };
        Redo { deferred, thread: StdMutex::new(thread) }
    }

    /// Stops the thread after its chunk and waits for it.
    fn stop(&self) {
        self.deferred.stop();
        if let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = thread.join();
        }
    }
}

/// What a database on disk has besides its tables.
pub(crate) struct Durable {
    pub wal: Arc<Wal>,
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    /// One checkpoint at a time; the newest checkpoint's sequence number.
    checkpointing: StdMutex<Option<u64>>,
    /// Whether the next checkpoint is written even if nothing was logged since the newest: that
    /// one is a logical checkpoint (written by tern before page checkpoints, or a backup's
    /// copy), which every open loads entry by entry; or the open folded some of its chain
    /// values back into leaves, which only a checkpoint writes. Changed under `checkpointing`.
    checkpoint_due: AtomicBool,
    /// What the chain ids in the durable page checkpoint's leaves stand for, by page: for the
    /// pages the next checkpoint may keep as they are (a leaf whose chains the open folded is
    /// changed, so the next checkpoint writes it, and its ids are not here).
    checkpoint_chains: StdMutex<checkpoint::pages::Chains>,
    checkpoint_stats: StdMutex<CheckpointStats>,
    recovery: RecoveryStats,
    /// Wakes the checkpointer thread: (asked, stop).
    signal: Arc<(StdMutex<(bool, bool)>, Condvar)>,
    checkpointer: StdMutex<Option<std::thread::JoinHandle<()>>>,
    /// Held by [`Db::close`] while it stops the checkpointer, counts the handles and restarts
    /// the thread: two closes at once otherwise cleared each other's stop request while one
    /// waited for the thread to end (for good).
    closing: StdMutex<()>,
    _lock: DirLock,
}

static NEXT_DB_ID: AtomicU64 = AtomicU64::new(1);

/// A table name a new table may take: 1 to [`MAX_TABLE_NAME`] bytes.
fn check_table_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument("table names must not be empty (\"\" is the default table)".into()));
    }
    if name.len() > MAX_TABLE_NAME {
        return Err(Error::InvalidArgument(format!(
            "a table name of {} bytes is longer than the maximum of {MAX_TABLE_NAME}",
            name.len()
        )));
    }
    Ok(())
}

/// The buffer pool of a temporary database: `cache_bytes` of frames over a page file in the
/// system's temporary directory, unlinked as soon as it is open (the space goes back when the
/// pool closes it, even after a crash); a pool in memory only if no such file can be made.
fn scratch_pool(options: &Options) -> Result<Arc<Pool>> {
    static SCRATCH: AtomicU64 = AtomicU64::new(0);
    let n = SCRATCH.fetch_add(1, Relaxed);
    let path = std::env::temp_dir().join(format!("tern-temporary-{}-{n}.pages", std::process::id()));
    match Pool::with_file(pool_config(options), Arc::new(StdFs), path.clone()) {
        Ok(pool) => {
            let _ = std::fs::remove_file(&path);
            Ok(pool)
        }
        Err(_) => Pool::memory(options.tree.page_size, options.tree.huge_pages),
    }
}

impl Db {
    /// Opens (or creates) the database in directory `path`: locks the directory against other
    /// openers ([`Error::Locked`]), loads the newest checkpoint and replays the log after it
    /// ([`DbStats::recovery`] says what it did), and logs every commit from then on.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        Db::open_with_fs(path, options, Arc::new(StdFs))
    }

    /// [`Db::open`] through file system `fs` (tests inject faults with [`crate::fs::FaultFs`]).
    pub fn open_with_fs(path: impl AsRef<Path>, options: Options, fs: Arc<dyn Fs>) -> Result<Db> {
        let dir = path.as_ref();
        check_wal_config(&options.wal)?;
        check_cache(&options)?;
        options.tree.validate()?;
        create_dir(&*fs, dir)?;
        let lock = recovery::lock_dir(dir)?;
        // The page size, search layout and hints are the database's once it exists (see
        // `settings`).
        let stored = settings::read(&*fs, dir)?;
        let mut options = options;
        if let Some(s) = stored {
            options.tree = s.apply(options.tree);
            if s.shape.is_some() && !s.shared_heads {
                // Before this tern writes a page an earlier one would misread (`settings`
                // invariant 4).
                settings::write(&*fs, dir, &Settings { shared_heads: true, ..s })?;
            }
        }
        // The page file holds the newest page checkpoint's pages; without one, it starts
        // afresh (see `buffer` and `checkpoint`).
        let pool_config = pool_config(&options);
        let open_pool = |map: Option<&checkpoint::map::PageMap>| match map {
            Some(map) => Pool::open_file(
                pool_config.clone(),
                fs.clone(),
                dir.join(PAGE_FILE),
                false,
                map.chunk_pages,
                &map.pages,
            ),
            None => Pool::with_file(pool_config.clone(), fs.clone(), dir.join(PAGE_FILE)),
        };
        let (batch, defer) = (options.wal.replay_batch_bytes, options.wal.deferred_replay);
        let recovered = recovery::recover(&*fs, dir, options.tree, &open_pool, true, batch, defer)?;
        if stored.is_none() {
            settings::write(&*fs, dir, &Settings::of(&options.tree))?;
        }
        crate::txn::context::clock_advance_to(recovered.max_ts);
        let Recovered {
            pool,
            chains,
            tables,
            log_files,
            end,
            next_log_seq,
            checkpoint_seq,
            checkpoint_due,
            checkpoint_lsn,
            deferred,
            stats,
            ..
        } = recovered;
        let restored = Chains::new();
        for (pid, id, value) in &chains {
            if !restored.restore(*id, value.clone()) {
                return Err(Error::Corruption {
                    file: checkpoint_seq.map(checkpoint::file_name).unwrap_or_default(),
                    offset: 0,
                    reason: format!("leaf {pid}: chain id {id} is invalid or listed twice"),
                });
            }
        }
        let wal = Wal::create(fs.clone(), dir, options.wal, log_files, next_log_seq, end, checkpoint_lsn)?;
        note(dir, &format!("opened: {stats}"));
        let durable = Durable {
            wal,
            fs,
            dir: dir.to_path_buf(),
            checkpointing: StdMutex::new(checkpoint_seq),
            checkpoint_due: AtomicBool::new(checkpoint_due),
            checkpoint_chains: StdMutex::new(checkpoint::pages::chains_by_page(&chains)),
            checkpoint_stats: StdMutex::new(CheckpointStats::default()),
            recovery: stats,
            signal: Arc::new((StdMutex::new((false, false)), Condvar::new())),
            checkpointer: StdMutex::new(None),
            closing: StdMutex::new(()),
            _lock: lock,
        };
        let mut db = Db::new(Some(dir.to_path_buf()), options, pool, tables, restored, Some(durable))?;
        if let Some(deferred) = deferred {
            let inner = Arc::get_mut(&mut db.inner).expect("a new database has one handle");
            let tables = inner.catalog.read().by_id.clone();
            inner.redo = Some(Redo::start(Arc::new(deferred), tables, dir.to_path_buf()));
            *inner.redo_pending.get_mut() = true;
        }
        db.start_checkpointer();
        Ok(db)
    }

    /// A database without files of its own, gone when the last handle is dropped: no log, no
    /// checkpoints. Its pages live in a buffer pool of [`Options::cache_bytes`] over a page
    /// file in the system's temporary directory (unlinked at once), so it too can be larger
    /// than memory; if no such file can be made, in memory only.
    pub fn open_temporary(options: Options) -> Result<Db> {
        check_cache(&options)?;
        options.tree.validate()?;
        let pool = scratch_pool(&options)?;
        let table = BTree::with_pool(options.tree, pool.clone())?;
        Db::new(None, options, pool, vec![(0, String::new(), table)], Chains::new(), None)
    }

    fn new(
        path: Option<PathBuf>,
        options: Options,
        pool: Arc<Pool>,
        tables: Vec<(u32, String, BTree)>,
        chains: Chains,
        durable: Option<Durable>,
    ) -> Result<Db> {
        let id = NEXT_DB_ID.fetch_add(1, Relaxed);
        let mut catalog = Catalog::default();
        for (table, name, tree) in tables {
            let table = Arc::new(TableInner { db: id, id: table, name, tree });
            catalog.by_name.insert(table.name.clone(), table.clone());
            catalog.by_id.push(table);
        }
        let default_table = catalog.by_id[0].clone();
        let writer_class = LatchClass::register("db.writers")?;
        let global = match options.tracking {
            TxnTracking::PerThread => None,
            TxnTracking::GlobalLatch => {
                let class = LatchClass::register("txn.global")?;
                class.set_config(SpinConfig { policy: SpinPolicy::Yield, ..SpinConfig::DEFAULT })?;
                Some(GlobalList::new(class))
            }
        };
        Ok(Db {
            inner: Arc::new(DbInner {
                id,
                options,
                path,
                catalog: RwLatch::with_class(catalog, LatchClass::register("db.catalog")?),
                creating: StdMutex::new(()),
                default_table,
                locks: LockManager::new(options.locks)?,
                writers: (0..WRITER_SHARDS)
                    .map(|_| CachePadded::new(Mutex::with_class(Vec::new(), writer_class)))
                    .collect(),
                gc: Gc::new()?,
                chains,
                counters: Counters::new(),
                global,
                durable,
                pool,
                redo: None,
                redo_pending: AtomicBool::new(false),
                gate: (options.write_tickets > 0).then(|| Gate::new(options.write_tickets)),
            }),
        })
    }

    /// Starts the thread that runs checkpoints once enough log was written.
    fn start_checkpointer(&self) {
        let Some(d) = &self.inner.durable else { return };
        let (signal, db) = (d.signal.clone(), Arc::downgrade(&self.inner));
        let interval = self.inner.options.wal.checkpoint_interval;
        let spawned = std::thread::Builder::new()
            .name("tern-checkpoint".into())
            .spawn(move || checkpointer(signal, db, interval));
        if let Ok(handle) = spawned {
            *d.checkpointer.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        }
    }

    /// Writes a checkpoint now (see [`crate::checkpoint`]): the database as of this moment,
    /// without stopping readers or writers; the log before it is deleted. `Ok(None)` for a
    /// database in memory, or when nothing was logged since the last checkpoint (unless the
    /// open left one due: the newest was a logical checkpoint, as a backup's copy holds, or
    /// the open folded some of its version values back into their leaves).
    pub fn checkpoint(&self) -> Result<Option<CheckpointInfo>> {
        self.inner.checkpoint()
    }

    /// Closes this handle cleanly: if it is the last one, folds every version no transaction
    /// needs any more (a [`Db::gc`] pass), checkpoints, syncs the log, and
    /// releases the directory by the time it returns, reporting any error (dropping the last
    /// handle does the same but cannot report, and may leave the release to a background
    /// thread that is finishing a checkpoint). Other handles stay usable.
    pub fn close(self) -> Result<()> {
        // One close at a time (see `Durable::closing`).
        let _closing = self.inner.durable.as_ref().map(|d| d.closing.lock().unwrap_or_else(|p| p.into_inner()));
        // The checkpointer holds a handle while it works: stop it first so that the count
        // below is the callers' alone.
        self.inner.stop_checkpointer();
        if Arc::strong_count(&self.inner) == 1 {
            return self.inner.shutdown();
        }
        if let Some(d) = &self.inner.durable {
            d.signal.0.lock().unwrap_or_else(|p| p.into_inner()).1 = false;
        }
        self.start_checkpointer();
        Ok(())
    }

    /// The directory given to [`Db::open`], if any.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The longest key this database takes, in bytes: an eighth of its page size (2048 at the
    /// default 16 KiB). Longer keys get [`Error::KeyTooLarge`].
    pub fn max_key_len(&self) -> usize {
        self.inner.default_table.tree.max_key_len()
    }

    /// The options the database was opened with, with the ones its stored data depends on
    /// (the page size, search layout and hints recorded when it was created) as recorded.
    pub fn options(&self) -> Options {
        self.inner.options
    }

    /// A read-write transaction (snapshot isolation).
    #[inline(always)]
    pub fn begin(&self) -> Result<Txn<'_>> {
        self.begin_with(TxnOptions::default())
    }

    /// A read-only transaction: takes no locks and never aborts.
    #[inline(always)]
    pub fn begin_read(&self) -> Result<Txn<'_>> {
        self.begin_with(TxnOptions { read_only: true, ..TxnOptions::default() })
    }

    /// A transaction with explicit options.
    #[inline(always)]
    pub fn begin_with(&self, options: TxnOptions) -> Result<Txn<'_>> {
        Ok(Txn::begin(&self.inner, options))
    }

    /// Creates table `name` ([`Error::TableExists`] if taken). Names are any UTF-8 of 1 to
    /// [`MAX_TABLE_NAME`] bytes (`""` is the default table's).
    pub fn create_table(&self, name: &str) -> Result<Table> {
        check_table_name(name)?;
        let _creating = self.inner.creating.lock().unwrap_or_else(|p| p.into_inner());
        let mut catalog = self.inner.catalog.write();
        if catalog.by_name.contains_key(name) {
            return Err(Error::TableExists { name: name.into() });
        }
        let id = u32::try_from(catalog.by_id.len())
            .map_err(|_| Error::InvalidArgument("too many tables (at most 2^32)".into()))?;
        let tree = BTree::with_pool(self.inner.options.tree, self.inner.pool.clone())?;
        if let Some(d) = &self.inner.durable {
            // Logged (and synced) under the catalog latch: table ids enter the log in order.
            let mut payload = crate::wal::record::Payload::default();
            payload.create_table(id, name);
            let (_, lsn) = d.wal.append_commit(&mut payload, crate::txn::context::clock_now)?;
            d.wal.wait(lsn, true)?;
        }
        let table = Arc::new(TableInner { db: self.inner.id, id, name: name.into(), tree });
        catalog.by_name.insert(name.into(), table.clone());
        catalog.by_id.push(table.clone());
        Ok(Table { inner: table })
    }

    /// Creates table `name` holding `entries`, given in strictly increasing key order: the
    /// bulk load for sorted input. The tree is built bottom up (leaves filled to 90%, no
    /// splits, no versions) and made durable by a checkpoint instead of the log (nothing of it
    /// is logged), so it costs about one write of the data.
    ///
    /// Atomic: the table appears, with every entry, when this returns; a crash before that
    /// leaves no trace of it (a crash after the checkpoint and before the return leaves it
    /// whole). Like [`Db::create_table`], tables are not versioned: a transaction begun earlier
    /// that asks for the table afterwards sees all its entries.
    ///
    /// Errors: [`Error::InvalidArgument`] for keys out of order or repeated (nothing is
    /// created), [`Error::TableExists`], the key and value errors of [`Txn::put`], and the
    /// checkpoint's I/O errors (the table is then not created). Other table creations wait for
    /// the load. `entries` must not write to this database: a checkpoint that starts meanwhile
    /// waits for the load, and a write waits for that checkpoint. A load that fails half-way
    /// frees every page it wrote before it returns.
    ///
    /// With a page file, finished pages are written back from a second thread while the load
    /// goes on, so the checkpoint at the end has little left to write.
    pub fn load_table<K, V>(&self, name: &str, entries: impl IntoIterator<Item = (K, V)>) -> Result<Table>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        check_table_name(name)?;
        let inner = &*self.inner;
        let _creating = inner.creating.lock().unwrap_or_else(|p| p.into_inner());
        if inner.catalog.read().by_name.contains_key(name) {
            return Err(Error::TableExists { name: name.into() });
        }
        if let Some(d) = &inner.durable {
            d.wal.check_writable()?;
        }
        let tree = BTree::bulk_load_in(inner.options.tree, inner.pool.clone(), entries)?;
        let table = {
            // In the catalog (checkpoints take it) but not by name (nobody can use it, so no
            // logged write names its id before a checkpoint holds the table).
            let mut catalog = inner.catalog.write();
            let id = u32::try_from(catalog.by_id.len())
                .map_err(|_| Error::InvalidArgument("too many tables (at most 2^32)".into()))?;
            let table = Arc::new(TableInner { db: inner.id, id, name: name.into(), tree });
            catalog.by_id.push(table.clone());
            table
        };
        if inner.durable.is_some() {
            if let Err(e) = inner.checkpoint_with(true) {
                // Not created: ours is the catalog's last table (creations wait for us).
                let popped = inner.catalog.write().by_id.pop();
                debug_assert!(popped.as_ref().is_some_and(|t| Arc::ptr_eq(t, &table)));
                drop(popped);
                if let Ok(t) = Arc::try_unwrap(table) {
                    t.tree.free_all();
                }
                return Err(e);
            }
        }
        inner.catalog.write().by_name.insert(name.into(), table.clone());
        Ok(Table { inner: table })
    }

    /// Table `name` ([`Error::NoSuchTable`] if there is none; `""` is the default table).
    pub fn table(&self, name: &str) -> Result<Table> {
        self.inner.table(name)
    }

    /// Every table's name, the default table (`""`) first.
    pub fn table_names(&self) -> Vec<String> {
        let catalog = self.inner.catalog.read();
        // A table being loaded is in `by_id` before it has a name to be found by.
        catalog.by_id.iter().filter(|t| catalog.by_name.contains_key(&t.name)).map(|t| t.name.clone()).collect()
    }

    /// Runs a garbage-collection pass over every queued key now (passes also run on their own as
    /// writes commit); returns what it did.
    pub fn gc(&self) -> GcPass {
        let done = self.inner.collect_all();
        GcPass { pruned: done.pruned, folded: done.folded, remaining: done.remaining }
    }

    /// Counters of every component.
    pub fn stats(&self) -> DbStats {
        let inner = &*self.inner;
        let c = |counter| inner.counters.sum(counter);
        let created = c(Counter::VersionsCreated);
        let freed = c(Counter::VersionsPruned) + c(Counter::VersionsFolded) + c(Counter::VersionsAborted);
        DbStats {
            txn: TxnStats {
                committed: c(Counter::Committed),
                read_only: c(Counter::ReadOnlyEnded),
                aborted: c(Counter::Aborted),
                conflicts: c(Counter::Conflicts),
                conflicts_before_wait: c(Counter::ConflictsBeforeWait),
                deadlocks: c(Counter::Deadlocks),
            },
            gc: GcStats {
                passes: c(Counter::GcPasses),
                versions_created: created,
                versions_pruned: c(Counter::VersionsPruned),
                versions_folded: c(Counter::VersionsFolded),
                versions_aborted: c(Counter::VersionsAborted),
                versions_live: created.saturating_sub(freed),
                queued_keys: inner.gc.queued(),
                keys_looked: c(Counter::GcKeysLooked),
            },
            locks: inner.locks.stats(),
            tables: inner
                .catalog
                .read()
                .by_id
                .iter()
                .map(|t| TableStats { name: t.name.clone(), tree: t.tree.stats() })
                .collect(),
            latches: crate::sync::stats(),
            wal: inner.durable.as_ref().map(|d| d.wal.stats()),
            checkpoints: inner
                .durable
                .as_ref()
                .map(|d| d.checkpoint_stats.lock().unwrap_or_else(|p| p.into_inner()).clone())
                .unwrap_or_default(),
            recovery: inner.durable.as_ref().map(|d| {
                let mut recovery = d.recovery.clone();
                recovery.deferred_millis = inner.redo.as_ref().and_then(|r| r.deferred.finished_millis());
                recovery.deferred_error = inner.redo.as_ref().and_then(|r| r.deferred.failure());
                recovery
            }),
            buffer: inner.pool.stats(),
            admission: inner.gate.as_ref().map(|g| g.stats()),
        }
    }
}

/// Creates the database directory `dir` and any missing parents, and syncs the directory
/// above each one created, so that the new directory survives a power loss with the files
/// that will be synced in it.
fn create_dir(fs: &dyn Fs, dir: &Path) -> Result<()> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).collect();
    let io = |what: String| move |source| Error::Io { what, source };
    fs.create_dir_all(dir).map_err(io(format!("creating database directory {}", dir.display())))?;
    for created in missing {
        let parent = match created.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        fs.sync_dir(parent).map_err(io(format!("syncing directory {}", parent.display())))?;
    }
    Ok(())
}

/// The buffer pool's settings from `options`.
fn pool_config(options: &Options) -> PoolConfig {
    // The frames keep at least `MIN_FRAMES`: in a cache too small for those and the row
    // cache's share, the row cache gets what they leave, so that the two stay within it.
    let floor = MIN_FRAMES as u64 * frame_bytes(options.tree.page_size) as u64;
    let share = options.cache_bytes / 100 * u64::from(options.row_cache_percent);
    PoolConfig {
        page_size: options.tree.page_size,
        cache_bytes: Some(options.cache_bytes),
        row_cache_bytes: share.min(options.cache_bytes.saturating_sub(floor)),
        huge_pages: options.tree.huge_pages,
    }
}

/// Refuses cache settings out of range.
fn check_cache(options: &Options) -> Result<()> {
    if options.row_cache_percent > MAX_ROW_CACHE_PERCENT {
        return Err(Error::InvalidArgument(format!(
            "a row cache of {}% of the cache is out of range (0 to {MAX_ROW_CACHE_PERCENT}%)",
            options.row_cache_percent
        )));
    }
    Ok(())
}

/// Refuses log settings that cannot work.
fn check_wal_config(config: &WalConfig) -> Result<()> {
    if config.file_bytes < 4096 {
        return Err(Error::InvalidArgument(format!(
            "log files of {} bytes are too small (at least 4096)",
            config.file_bytes
        )));
    }
    if config.replay_batch_bytes.is_some_and(|b| b < 1 << 20) {
        return Err(Error::InvalidArgument("a replay batch must be at least 1 MiB".into()));
    }
    if config.checkpoint_interval.is_some_and(|i| i < Duration::from_millis(1)) {
        return Err(Error::InvalidArgument("a checkpoint interval must be at least 1 ms".into()));
    }
    if let Durability::Periodic(every) = config.durability {
        if every.is_zero() {
            return Err(Error::InvalidArgument("a periodic flush interval must be above zero".into()));
        }
    }
    Ok(())
}

/// Appends a line to the database's human-readable `LOG` file (best effort: it is a diary,
/// not data).
fn note(dir: &Path, line: &str) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("LOG")) {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let _ = writeln!(f, "{secs} {line}");
    }
}

/// The checkpointer thread: waits to be asked (or stopped) or for `interval` to pass since its
/// last checkpoint, checkpoints (which writes nothing if nothing was logged since the last and
/// the open left none due).
fn checkpointer(signal: Arc<(StdMutex<(bool, bool)>, Condvar)>, db: Weak<DbInner>, interval: Option<Duration>) {
    let (lock, cond) = &*signal;
    loop {
        {
            // An interval too long to add to the clock is no deadline.
            let deadline = interval.and_then(|i| Instant::now().checked_add(i));
            let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
            while !state.0 && !state.1 {
                let Some(deadline) = deadline else {
                    state = cond.wait(state).unwrap_or_else(|p| p.into_inner());
                    continue;
                };
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                state = cond.wait_timeout(state, left).unwrap_or_else(|p| p.into_inner()).0;
            }
            if state.1 {
                return;
            }
            state.0 = false;
        }
        let Some(db) = db.upgrade() else { return };
        // Failures are counted in the checkpoint stats; the log keeps everything meanwhile.
        let _ = db.checkpoint();
    }
}

/// What a checkpoint wrote.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointInfo {
    /// The file.
    pub file: String,
    /// Its snapshot timestamp.
    pub snapshot: u64,
    /// The log position it replays from.
    pub lsn: u64,
    /// Pages in the checkpoint.
    pub pages: u64,
    /// Pages it wrote: those changed since the previous checkpoint and not already written
    /// since by eviction (the rest keep their blocks).
    pub pages_written: u64,
    /// Bytes written: page images and the page map.
    pub bytes: u64,
    /// Time taken, in milliseconds.
    pub millis: u64,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.inner.path).field("options", &self.inner.options).finish()
    }
}

impl DbInner {
    /// Asks the checkpointer thread for a checkpoint.
    pub fn ask_checkpoint(&self) {
        if let Some(d) = &self.durable {
            d.signal.0.lock().unwrap_or_else(|p| p.into_inner()).0 = true;
            d.signal.1.notify_one();
        }
    }

    fn checkpoint(&self) -> Result<Option<CheckpointInfo>> {
        self.checkpoint_with(false)
    }

    /// A checkpoint; with `force`, also when nothing was logged since the last one (a loaded
    /// table is not logged).
    fn checkpoint_with(&self, force: bool) -> Result<Option<CheckpointInfo>> {
        let Some(d) = &self.durable else { return Ok(None) };
        let result = self.write_checkpoint(d, force);
        let mut stats = d.checkpoint_stats.lock().unwrap_or_else(|p| p.into_inner());
        match &result {
            Ok(Some(info)) => {
                stats.written += 1;
                stats.bytes += info.bytes;
                stats.last_bytes = info.bytes;
                stats.last_millis = info.millis;
                note(
                    &d.dir,
                    &format!(
                        "checkpoint {} ({} pages, {} written, {} bytes, snapshot {}, log from {}) in {} ms",
                        info.file, info.pages, info.pages_written, info.bytes, info.snapshot, info.lsn, info.millis
                    ),
                );
            }
            Ok(None) => {}
            Err(e) => {
                stats.failed += 1;
                stats.last_error = Some(e.to_string());
                note(&d.dir, &format!("checkpoint failed: {e}"));
            }
        }
        result
    }

    fn write_checkpoint(&self, d: &Durable, force: bool) -> Result<Option<CheckpointInfo>> {
        let started = Instant::now();
        let mut newest = d.checkpointing.lock().unwrap_or_else(|p| p.into_inner());
        let result = (|| {
            d.wal.check_writable()?;
            let due = d.checkpoint_due.load(Relaxed);
            if !force && newest.is_some() && !due && d.wal.end() == d.wal.checkpoint_lsn() {
                return Ok(None);
            }
            // The checkpoint replaces the log that holds the deferred writes.
            self.settle_all()?;
            let read = TxnOptions { read_only: true, ..TxnOptions::default() };
            let (txn, lsn) = d.wal.fence(|| Txn::begin(self, read));
            // The log up to the checkpoint's position must be on disk before the checkpoint
            // replaces the log before it.
            d.wal.wait(lsn, true)?;
            let seq = newest.map_or(1, |s| s + 1);
            let snapshot = txn.snapshot();
            // The catalog is held until the capture's instant: no table is created between
            // the list read here and the instant (a creation holds the catalog, then enters the
            // trees' write gate; taking the catalog first keeps the two in one order).
            let catalog = self.catalog.read();
            let held: Vec<Arc<TableInner>> = catalog.by_id.clone();
            let tables: Vec<(u32, String, &BTree)> = held.iter().map(|t| (t.id, t.name.clone(), &t.tree)).collect();
            let view = txn.view();
            let request = checkpoint::pages::Request {
                fs: &*d.fs,
                dir: &d.dir,
                seq,
                snapshot,
                lsn,
                pool: &self.pool,
                tables: &tables,
                resolver: &view,
            };
            let mut chains = d.checkpoint_chains.lock().unwrap_or_else(|p| p.into_inner());
            let written = checkpoint::pages::write(&request, &mut chains, move || drop(catalog))?;
            drop(chains);
            drop(txn);
            d.checkpoint_due.store(false, Relaxed);
            if let Some(old) = newest.replace(seq) {
                let name = checkpoint::file_name(old);
                d.fs.remove(&d.dir.join(&name))
                    .map_err(|source| Error::Io { what: format!("removing {name}"), source })?;
            }
            d.wal.checkpoint_done(Some(lsn))?;
            Ok(Some(CheckpointInfo {
                file: written.name,
                snapshot,
                lsn,
                pages: written.pages,
                pages_written: written.written,
                bytes: written.bytes,
                millis: started.elapsed().as_millis() as u64,
            }))
        })();
        if let Err(e) = &result {
            if self.pool.writes_stopped() {
                // The page file took no more writes after a failed sync: nothing more may be
                // acknowledged either (see `checkpoint/pages.rs`).
                d.wal.stop(format!("checkpoint: {e}"));
            }
            d.wal.checkpoint_done(None)?;
        }
        result
    }

    /// Writes every table as `txn` sees it to checkpoint `w` (checkpoints and backups); returns
    /// how many tables.
    pub(crate) fn write_tables(&self, txn: &Txn<'_>, w: &mut checkpoint::Writer) -> Result<usize> {
        let tables: Vec<Arc<TableInner>> = self.catalog.read().by_id.clone();
        for table in &tables {
            w.table(table.id, &table.name)?;
            let table = Table { inner: table.clone() };
            let mut entries = txn.range_in(&table, ..)?;
            for (key, value) in &mut entries {
                w.entry(&key, &value)?;
            }
            // A page that could not be read ends the scan early: such a checkpoint would lack
            // the rest of the table (and the log that holds it would be dropped).
            if let Some(e) = entries.take_error() {
                return Err(e);
            }
        }
        Ok(tables.len())
    }

    /// The file system of a database on disk (the real one for a temporary database).
    pub(crate) fn fs(&self) -> Arc<dyn Fs> {
        match &self.durable {
            Some(d) => d.fs.clone(),
            None => Arc::new(StdFs),
        }
    }

    /// Stops the checkpointer thread and waits for it (unless it is the caller).
    fn stop_checkpointer(&self) {
        let Some(d) = &self.durable else { return };
        d.signal.0.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        d.signal.1.notify_one();
        if let Some(handle) = d.checkpointer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }

    /// Stops the background threads, checkpoints if anything was logged since the last
    /// checkpoint, and syncs the log.
    fn shutdown(&self) -> Result<()> {
        let Some(d) = &self.durable else { return Ok(()) };
        self.stop_checkpointer();
        // No thread of ours may touch the pages once the directory is released; what it left
        // is applied by the checkpoint below, or replayed again by the next open.
        if let Some(r) = &self.redo {
            r.stop();
        }
        d.wal.check_writable()?;
        if self.options.wal.checkpoint_on_close {
            // No transaction is left: every chain the collector has not reached folds now, so
            // the checkpoint holds none (the next open then reads no leaf to fold them).
            self.collect_all();
            self.checkpoint()?;
        }
        d.wal.shutdown()
    }

    /// Applies the deferred replayed write of `key` in `table`, if one is left (see
    /// `recovery/deferred.rs`): every transaction calls this before it reads or writes a key.
    /// One load while nothing is deferred.
    #[inline(always)]
    pub fn settle(&self, table: &TableInner, key: &[u8]) -> Result<()> {
        if self.redo_pending.load(Acquire) {
            return self.settle_slow(table, (Bound::Included(key), Bound::Included(key)));
        }
        Ok(())
    }

    /// Applies the deferred replayed writes of `table` within `range`, if any are left: every
    /// scan calls this before it starts.
    #[inline]
    pub fn settle_range(&self, table: &TableInner, range: (Bound<&[u8]>, Bound<&[u8]>)) -> Result<()> {
        if self.redo_pending.load(Acquire) {
            return self.settle_slow(table, range);
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn settle_slow(&self, table: &TableInner, range: (Bound<&[u8]>, Bound<&[u8]>)) -> Result<()> {
        let Some(r) = &self.redo else { return Ok(()) };
        if r.deferred.is_done() {
            // Every write is applied: the next callers need not look again. (Acquire above:
            // whoever sees `false` sees the pages as the appliers left them.)
            self.redo_pending.store(false, Release);
            return Ok(());
        }
        r.deferred.settle_range(table.id, range, &table.tree)
    }

    /// Applies every deferred replayed write left (a checkpoint must hold them all).
    fn settle_all(&self) -> Result<()> {
        match &self.redo {
            Some(r) if !r.deferred.is_done() => {
                let tables: Vec<Arc<TableInner>> = self.catalog.read().by_id.clone();
                r.deferred.settle_all(&|id| tables.get(id as usize).map(|t| &t.tree), false)
            }
            _ => Ok(()),
        }
    }

    pub fn table(&self, name: &str) -> Result<Table> {
        match self.catalog.read().by_name.get(name) {
            Some(t) => Ok(Table { inner: t.clone() }),
            None => Err(Error::NoSuchTable { name: name.into() }),
        }
    }

    /// A write state for a transaction on a thread of context `shard`.
    pub fn take_writer(&self, shard: usize) -> Box<Writer> {
        self.writers[shard % WRITER_SHARDS].lock().pop().unwrap_or_else(|| Box::new(Writer::new(self.locks.locker())))
    }

    /// Releases the locks of a transaction's write state and keeps it for reuse.
    pub fn return_writer(&self, shard: usize, writer: Box<Writer>) {
        self.locks.unlock_all(&writer.locker).expect("the locker belongs to this database's lock manager");
        self.writers[shard % WRITER_SHARDS].lock().push(writer);
    }

    /// Queues a commit's keys for collection, and collects the shard if it is due.
    pub fn queue_for_gc(&self, shard: usize, items: impl IntoIterator<Item = Item>) {
        if let Some(due) = self.gc.push(shard, items) {
            self.collect(shard, due);
        }
    }

    /// One collection pass over every queued key of every shard ([`Db::gc`]).
    fn collect_all(&self) -> Collected {
        let active = self.active_snapshots();
        let mut done = Collected::default();
        for (shard, items) in self.gc.take_all() {
            done.add(self.collect_with(shard, items, active.clone(), true));
        }
        self.count_pass(done);
        done
    }

    /// Runs the collection pass `items` of `shard` (made due by a push to `gc`).
    pub fn collect(&self, shard: usize, items: Vec<Item>) {
        let done = self.collect_with(shard, items, self.active_snapshots(), false);
        self.count_pass(done);
    }

    /// The running snapshots (sorted) and the horizon above which every other one lies.
    fn active_snapshots(&self) -> (Vec<u64>, u64) {
        match &self.global {
            Some(list) => list.snapshots(),
            None => crate::txn::context::active_snapshots(self.id),
        }
    }

    /// Collects `items` of `shard` given the running snapshots; requeues what is left.
    fn collect_with(&self, shard: usize, items: Vec<Item>, active: (Vec<u64>, u64), full: bool) -> Collected {
        self.gc.free_reclaimed(shard);
        let tables: Vec<Arc<TableInner>> = self.catalog.read().by_id.clone();
        let mut unlinked = gc::Unlinked::default();
        let (rest, done) = gc::collect(
            active,
            items,
            full,
            &self.chains,
            |id| tables.get(id as usize).map(|t| &t.tree),
            &mut unlinked,
        );
        self.gc.retire(shard, unlinked, &self.chains);
        self.gc.put_back(shard, rest);
        done
    }

    fn count_pass(&self, done: Collected) {
        self.counters.add_shared(Counter::GcPasses, 1);
        self.counters.add_shared(Counter::VersionsPruned, done.pruned);
        self.counters.add_shared(Counter::VersionsFolded, done.folded);
        self.counters.add_shared(Counter::GcKeysLooked, done.looked);
    }
}

impl Drop for DbInner {
    fn drop(&mut self) {
        // A clean close: errors cannot be reported from here (`Db::close` reports them); the
        // log holds every commit either way.
        let _ = self.shutdown();
        // The directory is released next (`Durable::_lock`), and the next open owns the page
        // file; but a `Table` handle keeps the pool alive, and its evictor would still write
        // back pages the close left dirty (its collection pass changes leaves, and its
        // checkpoint is skipped when nothing was logged since the last), to slots the next
        // open writes too. So, whatever the close did, the pool writes nothing more.
        self.pool.close();
        // The chains go with the chain table (no transaction is left: each borrows a handle).
    }
}

/// What a collection pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GcPass {
    /// Versions unlinked because no running snapshot sees them.
    pub pruned: u64,
    /// Chains folded back into plain values (or removed deletions).
    pub folded: u64,
    /// Keys still queued: their older versions are still needed by running snapshots, or the
    /// leaf had no room to fold them back yet.
    pub remaining: usize,
}

/// Transaction counters.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct TxnStats {
    /// Read-write transactions committed (with or without writes).
    pub committed: u64,
    /// Read-write transactions aborted (explicitly, dropped, or failed at commit).
    pub aborted: u64,
    /// Read-only transactions ended (committed or dropped: the same thing for them).
    pub read_only: u64,
    /// Writes refused by first-updater-wins.
    pub conflicts: u64,
    /// Of `conflicts`, those refused before waiting for the key's lock: another transaction
    /// held it and the key already had a commit after the writer's snapshot.
    pub conflicts_before_wait: u64,
    /// Writes refused as deadlock victims.
    pub deadlocks: u64,
}

/// Version and garbage-collection counters.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct GcStats {
    /// Collection passes run (by committing writers and by `Db::gc`).
    pub passes: u64,
    /// Versions created by writes: one for the value a write makes, plus one for the value the
    /// key held before if that was a plain value in the leaf (it becomes the chain's base
    /// version); a transaction rewriting its own uncommitted write adds none.
    pub versions_created: u64,
    /// Versions unlinked because no running snapshot could see them any more.
    pub versions_pruned: u64,
    /// Versions folded back into a plain value in the leaf (the chain ended).
    pub versions_folded: u64,
    /// Versions of aborted transactions, removed.
    pub versions_aborted: u64,
    /// Versions allocated now (created minus freed or about to be freed).
    pub versions_live: u64,
    /// Keys queued for collection now.
    pub queued_keys: usize,
    /// Queued keys the passes looked at (each look reads the key's chain under its leaf's
    /// latch). A key whose chain cannot fold yet because a running snapshot is older than its
    /// commit is looked at when queued, then again only once that snapshot has ended or every
    /// fourth pass of its queue meanwhile (which prunes the versions of snapshots that ended
    /// since); `Db::gc` looks at every queued key.
    pub keys_looked: u64,
}

/// One table's counters.
#[derive(Clone, Debug, Serialize)]
pub struct TableStats {
    /// The table's name (`""`: the default table).
    pub name: String,
    /// Its B+tree's counters and page count.
    pub tree: TreeStats,
}

/// Counters of every component of one database, and of the process's latch classes.
#[derive(Clone, Debug, Serialize)]
pub struct DbStats {
    /// Transactions committed, aborted, refused.
    pub txn: TxnStats,
    /// Versions and their collection.
    pub gc: GcStats,
    /// The lock manager.
    pub locks: LockStats,
    /// Every table, the default table first.
    pub tables: Vec<TableStats>,
    /// Every latch class of the process (counters are per process, not per database).
    /// `acquisitions` and `optimistic` stay 0 for every class but the buffer pool's pages unless
    /// [`crate::sync::set_count_acquisitions`] switched counting on.
    pub latches: Vec<LatchStats>,
    /// The write-ahead log (`None` for a database in memory).
    pub wal: Option<WalStats>,
    /// Checkpoints written since the database opened.
    pub checkpoints: CheckpointStats,
    /// What opening the database recovered (`None` for a database in memory).
    pub recovery: Option<RecoveryStats>,
    /// The buffer pool every table's pages live in.
    pub buffer: BufferStats,
    /// The admission of write transactions ([`Options::write_tickets`]; `None`: off).
    pub admission: Option<GateStats>,
}

#[cfg(all(test, not(loom)))]
mod close_tests {
    use super::*;

    /// Once a database is closed, nothing of it writes its page file, even while a [`Table`]
    /// handle keeps its buffer pool (and the pool's evictor) alive: the next open owns the
    /// file. Here the close's collection pass folds versions into their leaves, dirtying them,
    /// and its checkpoint is skipped (nothing was logged since the last one); the evictor of the
    /// closed pool wrote them back to the slots the reopened database writes too, which then
    /// failed their checksums there (a scan stopped at the error).
    #[test]
    fn a_closed_database_writes_no_page_while_a_table_handle_keeps_its_pool() {
        let dir = tempfile::tempdir().unwrap();
        // A cache the table fits in: the evictor has no reason to write the leaves back before
        // the close (with the 16-frame floor it sometimes wrote them all first).
        let options = Options {
            cache_bytes: 16 << 20,
            tree: TreeConfig { page_size: 4096, ..TreeConfig::default() },
            wal: WalConfig { durability: Durability::NoSync, ..WalConfig::default() },
            ..Options::default()
        };
        let db = Db::open(dir.path(), options).unwrap();
        let t = db.create_table("t").unwrap();
        let mut txn = db.begin().unwrap();
        for i in 0..2000u32 {
            txn.put_in(&t, &i.to_be_bytes(), &[1; 100]).unwrap();
        }
        txn.commit().unwrap();
        db.gc();
        // A reader keeps the old versions: the leaves hold chains when the checkpoint runs,
        // and the close's collection pass folds them.
        let r = db.begin_read().unwrap();
        let mut txn = db.begin().unwrap();
        for i in 0..2000u32 {
            txn.put_in(&t, &i.to_be_bytes(), &[2; 100]).unwrap();
        }
        txn.commit().unwrap();
        db.checkpoint().unwrap();
        drop(r);
        db.close().unwrap();
        let pool = t.inner.tree.pool.clone();
        assert!(pool.stats().dirty_pages > 0, "the close left changed leaves in memory: {:?}", pool.stats());
        let pages = dir.path().join("pages");
        let before = std::fs::read(&pages).unwrap();
        // What the closed pool's evictor does when it wants frames: write back dirty pages.
        pool.flush().unwrap();
        assert!(std::fs::read(&pages).unwrap() == before, "the page file changed after the close");
        drop(t);
        let db = Db::open(dir.path(), options).unwrap();
        let t = db.table("t").unwrap();
        let r = db.begin_read().unwrap();
        let mut range = r.range_in(&t, ..).unwrap();
        assert_eq!(range.by_ref().filter(|(_, v)| v[..] == [2; 100]).count(), 2000);
        assert!(range.error().is_none(), "{:?}", range.error());
    }
}
