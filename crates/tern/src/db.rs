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
//! **Durability: none yet.** Data lives in memory only and is gone when the last `Db` handle is
//! dropped; [`Db::open`] accepts a directory so that code written now keeps working when the
//! write-ahead log lands, but writes nothing there.

use crate::btree::{BTree, TreeConfig, TreeStats};
use crate::lock::{LockConfig, LockManager, LockStats};
use crate::sync::{LatchClass, LatchStats, Mutex, RwLatch, SpinConfig, SpinPolicy};
use crate::txn::gc::{self, Collected, Gc, Item};
use crate::txn::{Counter, Counters, GlobalList, Txn, TxnOptions, Writer};
use crate::{Error, Result};
use crossbeam_utils::CachePadded;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

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
}

impl Default for Options {
    fn default() -> Self {
        Options { tree: TreeConfig::default(), locks: LockConfig::default(), tracking: TxnTracking::PerThread }
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
    /// The default table (id 0), reached without the catalog.
    pub default_table: Arc<TableInner>,
    pub locks: LockManager,
    writers: Box<[WriterPool]>,
    pub gc: Gc,
    pub counters: Counters,
    pub global: Option<GlobalList>,
}

static NEXT_DB_ID: AtomicU64 = AtomicU64::new(1);

impl Db {
    /// Opens the database in directory `path`, creating the directory if needed.
    ///
    /// **Nothing is written there yet**: until the write-ahead log lands, a database lives in
    /// memory only and is empty every time it is opened.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        let path = path.as_ref();
        std::fs::create_dir_all(path)
            .map_err(|source| Error::Io { what: format!("creating database directory {}", path.display()), source })?;
        Db::new(Some(path.to_path_buf()), options)
    }

    /// A database in memory only, gone when the last handle is dropped.
    pub fn open_temporary(options: Options) -> Result<Db> {
        Db::new(None, options)
    }

    fn new(path: Option<PathBuf>, options: Options) -> Result<Db> {
        let id = NEXT_DB_ID.fetch_add(1, Relaxed);
        let default_table =
            Arc::new(TableInner { db: id, id: 0, name: String::new(), tree: BTree::new(options.tree)? });
        let mut catalog = Catalog::default();
        catalog.by_name.insert(String::new(), default_table.clone());
        catalog.by_id.push(default_table.clone());
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
                default_table,
                locks: LockManager::new(options.locks)?,
                writers: (0..WRITER_SHARDS)
                    .map(|_| CachePadded::new(Mutex::with_class(Vec::new(), writer_class)))
                    .collect(),
                gc: Gc::new()?,
                counters: Counters::new(),
                global,
            }),
        })
    }

    /// The directory given to [`Db::open`], if any.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The options the database was opened with.
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

    /// Creates table `name` ([`Error::TableExists`] if taken). Names are any UTF-8 but `""`,
    /// the default table's.
    pub fn create_table(&self, name: &str) -> Result<Table> {
        if name.is_empty() {
            return Err(Error::InvalidArgument("table names must not be empty (\"\" is the default table)".into()));
        }
        let mut catalog = self.inner.catalog.write();
        if catalog.by_name.contains_key(name) {
            return Err(Error::TableExists { name: name.into() });
        }
        let id = u32::try_from(catalog.by_id.len())
            .map_err(|_| Error::InvalidArgument("too many tables (at most 2^32)".into()))?;
        let tree = BTree::new(self.inner.options.tree)?;
        let table = Arc::new(TableInner { db: self.inner.id, id, name: name.into(), tree });
        catalog.by_name.insert(name.into(), table.clone());
        catalog.by_id.push(table.clone());
        Ok(Table { inner: table })
    }

    /// Table `name` ([`Error::NoSuchTable`] if there is none; `""` is the default table).
    pub fn table(&self, name: &str) -> Result<Table> {
        self.inner.table(name)
    }

    /// Every table's name, the default table (`""`) first.
    pub fn table_names(&self) -> Vec<String> {
        self.inner.catalog.read().by_id.iter().map(|t| t.name.clone()).collect()
    }

    /// Runs a garbage-collection pass over every queued key now (passes also run on their own as
    /// writes commit); returns what it did.
    pub fn gc(&self) -> GcPass {
        let active = self.inner.active_snapshots();
        let mut done = Collected::default();
        for (shard, items) in self.inner.gc.take_all() {
            done.add(self.inner.collect_with(shard, items, active.clone()));
        }
        self.inner.count_pass(done);
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
        }
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.inner.path).field("options", &self.inner.options).finish()
    }
}

impl DbInner {
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

    fn collect(&self, shard: usize, items: Vec<Item>) {
        let done = self.collect_with(shard, items, self.active_snapshots());
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
    fn collect_with(&self, shard: usize, items: Vec<Item>, active: (Vec<u64>, u64)) -> Collected {
        let tables: Vec<Arc<TableInner>> = self.catalog.read().by_id.clone();
        let (rest, done) = gc::collect(active, items, |id| tables.get(id as usize).map(|t| &t.tree));
        self.gc.put_back(shard, rest);
        done
    }

    fn count_pass(&self, done: Collected) {
        self.counters.add_shared(Counter::GcPasses, 1);
        self.counters.add_shared(Counter::VersionsPruned, done.pruned);
        self.counters.add_shared(Counter::VersionsFolded, done.folded);
    }
}

impl Drop for DbInner {
    fn drop(&mut self) {
        // No transaction is left (each borrows a handle), so no chain is in use: free them all.
        let guard = crossbeam_epoch::pin();
        for table in &self.catalog.get_mut().by_id {
            for chain in table.tree.chains() {
                // SAFETY: the database is being dropped: nothing reads or writes its chains.
                unsafe { crate::txn::version::free_chain(chain as *mut _, &guard) };
            }
        }
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
    /// Writes refused as deadlock victims.
    pub deadlocks: u64,
}

/// Version and garbage-collection counters.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct GcStats {
    pub passes: u64,
    pub versions_created: u64,
    pub versions_pruned: u64,
    pub versions_folded: u64,
    pub versions_aborted: u64,
    /// Versions allocated now (created minus freed or about to be freed).
    pub versions_live: u64,
    pub queued_keys: usize,
}

/// One table's counters.
#[derive(Clone, Debug, Serialize)]
pub struct TableStats {
    pub name: String,
    pub tree: TreeStats,
}

/// Counters of every component of one database, and of the process's latch classes.
#[derive(Clone, Debug, Serialize)]
pub struct DbStats {
    pub txn: TxnStats,
    pub gc: GcStats,
    pub locks: LockStats,
    pub tables: Vec<TableStats>,
    pub latches: Vec<LatchStats>,
}
