//! tern, through its public `Db` API: a read is `begin_read` + `get` + commit; a write
//! transaction is `begin` + puts + `commit`.
//!
//! At [`Durability::None`] the database has no directory (`Db::open_temporary`: no log, pages
//! beyond the cache in an unlinked scratch file); at every
//! other level it is opened with `Db::open` in a fresh directory, its log at that level. The
//! cache is [`OpenOptions::cache_bytes`] when the run names one (`Options::cache_bytes`), tern's
//! default otherwise.

use crate::{format_mib, Durability, Engine, OpenOptions, PeerError, Result, Session};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use tern::sync::SpinPolicy;
use tern::{Db, Error, Options, Txn, WalConfig};

/// tern as the benchmarks open it, or one of its A/B variants (named beside the engines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// tern's defaults (`tern`).
    Default,
    /// Log written by a group-commit leader's `write` (`WalConfig::mapped` off; `tern-written`).
    Written,
    /// Strict FIFO lock hand-over (`LockConfig::barging` off; `tern-fifo`).
    Fifo,
    /// Group commit with chained flushes (`WalConfig::chain_flushes` 8; `tern-chain`).
    Chain,
    /// Every latch class waiting with the fixed `SpinPolicy::Pause` instead of the adaptive
    /// default (`tern-pause`). Latch policies are process-wide, so this variant opens only in a
    /// process of its own ([`own_process`]: the worker processes of `--memory-limit`).
    Pause,
    /// No row cache (`Options::row_cache_percent` 0: the pages get the whole cache;
    /// `tern-norows`).
    NoRows,
    /// No admission of write transactions (`Options::write_tickets` 0: every writer begins at
    /// once; `tern-noadmit`).
    NoAdmit,
}

/// Set once this process runs one engine only (a benchmark's worker process): variants that
/// change process-wide settings may open.
static OWN_PROCESS: AtomicBool = AtomicBool::new(false);

/// Declares that this process runs a single engine (the benchmark worker calls it first).
pub fn own_process() {
    OWN_PROCESS.store(true, Relaxed);
}

impl Variant {
    /// The engine name the variant runs under.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Default => "tern",
            Variant::Written => "tern-written",
            Variant::Fifo => "tern-fifo",
            Variant::Chain => "tern-chain",
            Variant::Pause => "tern-pause",
            Variant::NoRows => "tern-norows",
            Variant::NoAdmit => "tern-noadmit",
        }
    }

    /// `tern-pause`'s switch, once the database is open: every latch class registered by then
    /// (the database's latches, pages, locks and log) waits with the fixed PAUSE policy, its
    /// other settings kept.
    fn apply_latch_policy(self) -> Result<()> {
        if self == Variant::Pause {
            tern::sync::set_all_policies(SpinPolicy::Pause).map_err(failed)?;
        }
        Ok(())
    }
}

/// tern: in memory, or on disk with a write-ahead log.
pub struct TernEngine {
    // Dropped first: the database closes (syncing its log) before its directory goes.
    db: Db,
    durability: Durability,
    /// Whether the run named the cache (`--cache`) rather than taking tern's default.
    cache_given: bool,
    variant: Variant,
    dir: Option<tempfile::TempDir>,
}

impl TernEngine {
    /// tern in memory ([`Durability::None`]).
    pub fn open() -> Result<TernEngine> {
        TernEngine::open_with(&OpenOptions::default())
    }

    /// tern at `options.durability`: in memory at [`Durability::None`], else in a fresh
    /// directory under [`OpenOptions::parent_dir`] (removed when the engine is dropped), with
    /// the log's default file and checkpoint sizes and no checkpoint on close (the directory
    /// is thrown away).
    pub fn open_with(options: &OpenOptions) -> Result<TernEngine> {
        TernEngine::open_variant(options, Variant::Default)
    }

    /// As [`TernEngine::open_with`], as `variant` says.
    pub fn open_variant(options: &OpenOptions, variant: Variant) -> Result<TernEngine> {
        if variant == Variant::Pause && !OWN_PROCESS.load(Relaxed) {
            return Err(PeerError::Failed(
                "tern-pause sets the latch policy of its whole process, so it runs only in a worker process \
                 of its own: add --memory-limit"
                    .into(),
            ));
        }

        let mut base = Options {
            cache_bytes: options.cache_bytes.unwrap_or_else(Options::default_cache_bytes),
            ..Options::default()
        };
        base.locks.barging = variant != Variant::Fifo;
        let mapped = variant != Variant::Written;
        if let Some(page_size) = options.tern_page_size {
            base.tree.page_size = page_size;
        }
        if let Some(percent) = options.tern_row_cache_percent {
            base.row_cache_percent = percent;
        }
        if variant == Variant::NoRows {
            base.row_cache_percent = 0;
        }
        if variant == Variant::NoAdmit {
            base.write_tickets = 0;
        }
        let cache_given = options.cache_bytes.is_some();
        let durability = match options.durability {
            Durability::None => {
                let db = Db::open_temporary(base).map_err(failed)?;
                variant.apply_latch_policy()?;
                return Ok(TernEngine { db, durability: Durability::None, cache_given, variant, dir: None });
            }
            Durability::Sync => tern::Durability::Sync,
            Durability::NoSync => tern::Durability::NoSync,
            Durability::Periodic(every) => tern::Durability::Periodic(every),
        };
        let dir = options.data_dir("tern")?;
        let chain_flushes = if variant == Variant::Chain { 8 } else { WalConfig::default().chain_flushes };
        let wal = WalConfig { durability, checkpoint_on_close: false, mapped, chain_flushes, ..WalConfig::default() };
        let db = Db::open(dir.path(), Options { wal, ..base }).map_err(failed)?;
        variant.apply_latch_policy()?;
        Ok(TernEngine { db, durability: options.durability, cache_given, variant, dir: Some(dir) })
    }

    /// The database, for checks.
    pub fn db(&self) -> &Db {
        &self.db
    }
}

fn failed(e: Error) -> PeerError {
    match e {
        Error::Conflict | Error::Deadlock | Error::TxnFailed { .. } | Error::LockTimeout => PeerError::Retry,
        e => PeerError::Failed(e.to_string()),
    }
}

impl Engine for TernEngine {
    fn name(&self) -> &'static str {
        self.variant.name()
    }

    fn config(&self) -> String {
        let o = self.db.options();
        let storage = match (self.durability, &self.dir) {
            (Durability::None, _) | (_, None) => {
                "no directory (Db::open_temporary: no log; pages beyond the cache in an unlinked scratch file in the \
                 temporary directory)"
                    .to_string()
            }
            (level, Some(dir)) => {
                let how = match level {
                    Durability::Sync => "Durability::Sync (commit written and fdatasync'ed; group commit)".into(),
                    Durability::NoSync => "Durability::NoSync (commit written to the OS, not synced)".into(),
                    Durability::Periodic(every) => format!(
                        "Durability::Periodic({every:?}) (commit returns at once; log written and synced every \
                         interval)"
                    ),
                    Durability::None => unreachable!("matched above"),
                };
                let files = if o.wal.mapped { "mapped" } else { "written by a leader's write(2)" };
                format!(
                    "log {how}, Db::open in {}, {} MiB log files ({files}), group commit chaining up to {} \
                     flushes, checkpoint every {} MiB of log",
                    dir.path().display(),
                    o.wal.file_bytes >> 20,
                    o.wal.chain_flushes,
                    o.wal.checkpoint_bytes >> 20
                )
            }
        };
        let origin = if self.cache_given { "--cache" } else { "default: the smaller of 1 GiB and a quarter of RAM" };
        let handover = if o.locks.barging { "barging" } else { "strict FIFO" };
        // As the latch classes of this process are set now (`tern-pause` sets them all).
        let policies: std::collections::BTreeSet<&str> =
            tern::sync::LatchClass::all().into_iter().map(|c| c.config().policy.name()).collect();
        let latches = policies.into_iter().collect::<Vec<_>>().join(", ");
        let admission = match o.write_tickets {
            0 => "off".to_string(),
            n => format!("{n} write tickets while more threads run transactions"),
        };
        format!(
            "tern {}: {} KiB pages, cache {} (Options::cache_bytes, {origin}; row cache {}%), durability {}: \
             {storage}, snapshot isolation, one transaction per operation, lock hand-over {handover}, admission \
             {admission}, latch policy {latches}",
            env!("CARGO_PKG_VERSION"),
            o.tree.page_size / 1024,
            format_mib(o.cache_bytes),
            o.row_cache_percent,
            self.durability.name()
        )
    }

    fn cache_bytes(&self) -> Option<u64> {
        Some(self.db.options().cache_bytes)
    }

    fn data_dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.path())
    }

    fn session(&self) -> Result<Box<dyn Session + '_>> {
        Ok(Box::new(TernSession { db: &self.db, txn: None }))
    }

    fn wal_stats(&self) -> Option<tern::wal::WalStats> {
        self.db.stats().wal
    }

    fn latch_stats(&self) -> Option<Vec<tern::sync::LatchStats>> {
        Some(tern::sync::stats())
    }
}

struct TernSession<'a> {
    db: &'a Db,
    txn: Option<Txn<'a>>,
}

impl<'a> TernSession<'a> {
    fn txn(&mut self) -> Result<&mut Txn<'a>> {
        self.txn.as_mut().ok_or_else(|| PeerError::Failed("no transaction begun".into()))
    }
}

impl Session for TernSession<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let t = self.db.begin_read().map_err(failed)?;
        t.get_into(key, out).map_err(failed)
    }

    fn scan(&mut self, start: &[u8], count: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let t = self.db.begin_read().map_err(failed)?;
        // The cursor lends each entry (no allocation per entry), as LMDB's cursor does.
        let mut c = t.cursor(start..).map_err(failed)?;
        let mut seen = 0;
        let mut row = c.first().map_err(failed)?;
        while let Some((k, v)) = row {
            visit(k, v);
            seen += 1;
            if seen == count {
                break;
            }
            row = c.next().map_err(failed)?;
        }
        Ok(seen)
    }

    fn begin(&mut self) -> Result<()> {
        self.txn = Some(self.db.begin().map_err(failed)?);
        Ok(())
    }

    fn txn_get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        // A locking read (the contract: a write lock where the engine locks): the transaction's
        // read-modify-writes (TPC-B's balances, YCSB F) wait for a hot row, not fail on it.
        self.txn()?.get_for_update_into(key, out).map_err(failed)
    }

    fn txn_put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.txn()?.put(key, value).map_err(failed)
    }

    fn commit(&mut self) -> Result<()> {
        let t = self.txn.take().ok_or_else(|| PeerError::Failed("no transaction begun".into()))?;
        t.commit().map_err(failed)
    }

    fn abort(&mut self) {
        if let Some(t) = self.txn.take() {
            t.abort();
        }
    }
}
