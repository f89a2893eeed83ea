//! Opening a database directory: lock it, load the newest checkpoint, replay the log after it.
//!
//! A page checkpoint (`checkpoint/map.rs`) is loaded by reading its page map: the pool opens
//! over the page file with every page on disk, the trees start from their roots, and pages
//! come in on demand, so opening costs the map and the log after it, not the data (plus one
//! read of each leaf holding chain values, which are folded back into it: versions still in
//! use when the checkpoint ran). A logical checkpoint (older databases) is bulk-loaded into a
//! new page file.
//!
//! # Invariants
//! 1. One process (one open handle) at a time: the directory's `LOCK` file is locked
//!    exclusively (`flock`) for as long as the database is open; a second open fails with
//!    [`Error::Locked`] instead of two writers interleaving their logs.
//! 2. Recovered state = the checkpoint (commits at or below its snapshot) + every log record
//!    after its LSN, each applied whole, with the effect of applying them in log order (they
//!    are applied in sorted batches, see `replay.rs`). A commit is one record (its parts are
//!    joined first), so no partial transaction is ever applied.
//! 3. Nothing is silently dropped: a torn tail (see `wal/reader.rs`) is the only thing cut, and
//!    it is reported; any other damage fails the open with [`Error::Corruption`].
//! 4. The commit clock moves past every recovered timestamp before the database is used, so
//!    new commits log above the checkpoint's snapshot.
//!
//! 5. With deferred replay, the log's last batch is applied after the open returns, and every
//!    transaction, scan and checkpoint applies what it needs of it first (`deferred.rs`), so
//!    nothing observable differs from applying it before.
//!
//! Files: `lock.rs` (the directory lock), `replay.rs` (the log applied in sorted batches),
//! `deferred.rs` (the last batch, applied after the open), `check.rs` (`tern check`: recovery
//! into a scratch pool, then the trees' shapes).

mod check;
mod deferred;
mod lock;
mod replay;
#[cfg(test)]
mod tests;

pub(crate) use check::recover_read_only;
pub use check::{check, is_database, CheckReport, TableCheck};
pub(crate) use deferred::Deferred;
pub(crate) use lock::{lock_dir, DirLock};

use crate::btree::{BTree, TreeConfig};
use crate::buffer::Pool;
use crate::checkpoint::{self, map::ChainValue, map::PageMap};
use crate::fs::Fs;
use crate::wal::reader::{scan, TornTail};
use crate::{Error, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// What opening the database found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryStats {
    /// The checkpoint loaded, if there was one.
    pub checkpoint: Option<String>,
    /// Its snapshot timestamp.
    pub checkpoint_snapshot: u64,
    /// Entries loaded from it (a logical checkpoint; a page checkpoint loads none).
    pub checkpoint_entries: u64,
    /// Pages in its page map (a page checkpoint: they stay on disk until read).
    pub checkpoint_pages: u64,
    /// Log records replayed after it.
    pub records_replayed: u64,
    /// Bytes of those records.
    pub bytes_replayed: u64,
    /// Log files read.
    pub log_files: usize,
    /// A torn final record cut from the log, if there was one.
    pub torn_tail: Option<TornTail>,
    /// Leftovers deleted (unfinished or superseded checkpoint files).
    pub removed: Vec<String>,
    /// Time spent, in milliseconds: loading the checkpoint, replaying the log, and in all
    /// (the rest: listing and removing files, opening the page file).
    pub millis: u64,
    /// Of [`millis`](RecoveryStats::millis): loading the checkpoint (reading a page
    /// checkpoint's map, or bulk-loading a logical checkpoint's entries).
    pub checkpoint_millis: u64,
    /// Of [`millis`](RecoveryStats::millis): reading the log and applying it (the writes of
    /// its last batch only read, sorted and kept, with `WalConfig::deferred_replay`).
    pub replay_millis: u64,
    /// Writes of the log's last batch left to apply after the open returned
    /// (`WalConfig::deferred_replay`): a background thread applies them, and the first
    /// transaction to need one of their keys applies that key's chunk first.
    pub deferred_writes: u64,
    /// Milliseconds from the end of the log's reading (within the open) until every deferred
    /// write was applied (`None` while some are still to apply, or there were none).
    pub deferred_millis: Option<u64>,
    /// The error of the last failed application of deferred writes, while some are failed
    /// (the next operation that needs them, or the next checkpoint, applies them again).
    pub deferred_error: Option<String>,
}

impl std::fmt::Display for RecoveryStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.checkpoint {
            Some(c) if self.checkpoint_pages > 0 => write!(
                f,
                "loaded {c} ({} pages on disk, snapshot {}) in {} ms",
                self.checkpoint_pages, self.checkpoint_snapshot, self.checkpoint_millis
            )?,
            Some(c) => write!(
                f,
                "loaded {c} ({} entries, snapshot {}) in {} ms",
                self.checkpoint_entries, self.checkpoint_snapshot, self.checkpoint_millis
            )?,
            None => write!(f, "no checkpoint")?,
        }
        write!(
            f,
            "; replayed {} log records ({} bytes) from {} log files in {} ms; {} ms in all",
            self.records_replayed, self.bytes_replayed, self.log_files, self.replay_millis, self.millis
        )?;
        if self.deferred_writes > 0 {
            write!(f, "; {} writes applied after the open", self.deferred_writes)?;
            if let Some(ms) = self.deferred_millis {
                write!(f, " (in {ms} ms)")?;
            }
        }
        if let Some(t) = &self.torn_tail {
            write!(f, "; cut a torn tail of {} bytes at {} offset {}", t.bytes, t.file, t.offset)?;
        }
        if !self.removed.is_empty() {
            write!(f, "; removed {}", self.removed.join(", "))?;
        }
        Ok(())
    }
}

/// Gives recovery its pool: over the page file holding a page checkpoint's pages (`Some`), or
/// a new one (`None`).
pub(crate) type OpenPool<'a> = dyn Fn(Option<&PageMap>) -> Result<Arc<Pool>> + 'a;

/// The recovered database.
pub(crate) struct Recovered {
    /// The pool its pages live in.
    pub pool: Arc<Pool>,
    /// What the chain ids in the page checkpoint's leaf images stand for, less those folded
    /// back into their leaves at open (restore them before anything reads the trees; they are
    /// also the next checkpoint's, for pages it keeps: a leaf the open folded is changed, so
    /// the next checkpoint writes it and keeps none of its chain ids).
    pub chains: Vec<ChainValue>,
    /// `(id, name, tree)` of every table, by id.
    pub tables: Vec<(u32, String, BTree)>,
    /// The largest timestamp recovered.
    pub max_ts: u64,
    /// `(seq, start LSN)` of the log files kept.
    pub log_files: Vec<(u64, u64)>,
    /// The LSN past the last valid record.
    pub end: u64,
    /// The sequence number of the next log file.
    pub next_log_seq: u64,
    /// The newest checkpoint's sequence number, if any.
    pub checkpoint_seq: Option<u64>,
    /// Whether the next checkpoint must be written even if nothing is logged before it: the
    /// newest checkpoint is a logical one (loaded entry by entry at every open), or the open
    /// folded some of its chain values into leaves (changed in memory only).
    pub checkpoint_due: bool,
    /// The LSN it replays from.
    pub checkpoint_lsn: u64,
    /// The log's last batch, not applied yet (`defer`).
    pub deferred: Option<Deferred>,
    pub stats: RecoveryStats,
}

/// Recovers the database in `dir`. With `repair`, leftovers are deleted and a torn tail cut;
/// without (`tern check`), nothing is changed. `open_pool` gives the pool: over the page file
/// with a page checkpoint's pages on disk (`Some`), or a new one (`None`: no checkpoint, or a
/// logical one, loaded into it). `batch_bytes`: the replay's batch size (`None`:
/// [`replay::batch_bytes`] of the pool). With `defer`, the log's last batch is read and
/// sorted but left to apply ([`Recovered::deferred`], see `deferred.rs`).
pub(crate) fn recover(
    fs: &dyn Fs,
    dir: &Path,
    config: TreeConfig,
    open_pool: &OpenPool<'_>,
    repair: bool,
    batch_bytes: Option<u64>,
    defer: bool,
) -> Result<Recovered> {
    let started = Instant::now();
    let mut stats = RecoveryStats::default();
    let (newest, mut others) = checkpoint::list(fs, dir)?;
    let names = fs.list(dir).map_err(|source| Error::Io { what: format!("listing {}", dir.display()), source })?;
    others.extend(names.into_iter().filter(|n| crate::wal::is_unfinished(n) || crate::settings::is_unfinished(n)));
    if repair {
        for name in others {
            fs.remove(&dir.join(&name)).map_err(|source| Error::Io { what: format!("removing {name}"), source })?;
            stats.removed.push(name);
        }
    }
    let loading = Instant::now();
    let mut chains = Vec::new();
    let mut folded = false;
    let page_map = match newest {
        Some(seq) => checkpoint::read_page_map(fs, dir, seq, config)?,
        None => None,
    };
    let logical = newest.is_some() && page_map.is_none();
    let (pool, mut tables, snapshot, lsn) = match (newest, page_map) {
        (Some(seq), Some(map)) => {
            let pool = open_pool(Some(&map))?;
            let mut tables = Vec::with_capacity(map.tables.len());
            for t in map.tables {
                let pages = usize::try_from(t.pages).unwrap_or(usize::MAX);
                tables.push((t.id, t.name, BTree::open_in(config, pool.clone(), t.root, pages)?));
            }
            stats.checkpoint = Some(checkpoint::file_name(seq));
            stats.checkpoint_snapshot = map.snapshot;
            stats.checkpoint_pages = map.pages.len() as u64;
            (chains, folded) = fold_restored_chains(&tables, map.chains);
            (pool, tables, map.snapshot, map.lsn)
        }
        (Some(seq), None) => {
            let pool = open_pool(None)?;
            let loaded = checkpoint::load(fs, dir, seq, config, &pool)?;
            stats.checkpoint = Some(loaded.name);
            stats.checkpoint_snapshot = loaded.snapshot;
            stats.checkpoint_entries = loaded.entries;
            (pool, loaded.tables, loaded.snapshot, loaded.lsn)
        }
        (None, _) => {
            let pool = open_pool(None)?;
            let table = BTree::with_pool(config, pool.clone())?;
            (pool, vec![(0, String::new(), table)], 0, 0)
        }
    };
    if tables.is_empty() {
        return Err(Error::Corruption {
            file: newest.map(checkpoint::file_name).unwrap_or_default(),
            offset: 0,
            reason: "the checkpoint has no default table".into(),
        });
    }
    stats.checkpoint_millis = loading.elapsed().as_millis() as u64;
    let replaying = Instant::now();
    let batch = match batch_bytes {
        // A batch is reserved whole: never more than the log's files could fill (a setting
        // past them, up to `u64::MAX`, means one batch for the whole log).
        Some(b) => usize::try_from(b.min(log_bytes(fs, dir).max(1 << 20))).unwrap_or(usize::MAX),
        None => replay::batch_bytes(&pool, log_bytes(fs, dir)),
    };
    let (log, last) = replay::replay(&mut tables, snapshot, config, &pool, batch, defer, |r| {
        scan(fs, dir, lsn, repair, |record| r.record(record))
    })?;
    let deferred = last.map(Deferred::new);
    stats.deferred_writes = deferred.as_ref().map_or(0, Deferred::writes);
    stats.replay_millis = replaying.elapsed().as_millis() as u64;
    stats.records_replayed = log.records;
    stats.bytes_replayed = log.bytes;
    stats.log_files = log.files.len();
    stats.torn_tail = log.torn;
    stats.millis = started.elapsed().as_millis() as u64;
    Ok(Recovered {
        pool,
        chains,
        tables,
        max_ts: log.max_ts.max(snapshot),
        next_log_seq: log.files.last().map_or(1, |&(seq, _)| seq + 1),
        log_files: log.files,
        end: log.end,
        checkpoint_seq: newest,
        checkpoint_due: logical || folded,
        checkpoint_lsn: lsn,
        deferred,
        stats,
    })
}

/// Folds the chain values of a page checkpoint back into their leaves where they can be
/// (`BTree::fold_restored`); returns the ones left to restore as versions, and whether any
/// leaf changed (the next checkpoint must then be written even if nothing is logged before
/// it). A checkpoint holds chains where versions were still in use (a reader older than recent
/// commits, commits the collector had not reached): restored as versions, nothing would ever
/// fold them, so every later checkpoint wrote them again and every open restored them. Best
/// effort: a leaf that cannot be read keeps its chains (the read fails again, and is
/// reported, when it is needed). A map whose chain ids are not all valid and distinct is left
/// whole to the restore, which reports it as corruption.
fn fold_restored_chains(tables: &[(u32, String, BTree)], chains: Vec<ChainValue>) -> (Vec<ChainValue>, bool) {
    let mut by_page: std::collections::BTreeMap<u32, HashMap<u64, Option<&[u8]>>> = Default::default();
    let mut ids = std::collections::HashSet::new();
    for (pid, id, value) in &chains {
        let valid = *id != 0 && *id < u64::from(u32::MAX);
        if !valid || !ids.insert(*id) {
            return (chains, false);
        }
        by_page.entry(*pid).or_default().insert(*id, value.as_deref());
    }
    let mut folded = std::collections::HashSet::new();
    for (pid, held) in &by_page {
        // The page's own tree (the first whose inner nodes lead to it) folds what it can.
        if let Some(done) = tables.iter().find_map(|(_, _, tree)| tree.fold_restored(*pid, held)) {
            folded.extend(done);
        }
    }
    let changed = !folded.is_empty();
    (chains.into_iter().filter(|(_, id, _)| !folded.contains(id)).collect(), changed)
}

/// The bytes of the log files in `dir` (what a replay reads at most).
fn log_bytes(fs: &dyn Fs, dir: &Path) -> u64 {
    let names = fs.list(dir).unwrap_or_default();
    names.iter().filter(|n| crate::wal::parse_file_name(n).is_some()).filter_map(|n| fs.len(&dir.join(n)).ok()).sum()
}

/// The chain ids of a page checkpoint's leaf images, resolved to what they stood for: reads a
/// tree recovered without a transaction layer (`tern check`, an offline backup).
#[derive(Clone, Default)]
pub(crate) struct RestoredChains(Arc<std::collections::HashMap<u64, Option<Box<[u8]>>>>);

impl RestoredChains {
    pub(crate) fn of(chains: &[ChainValue]) -> RestoredChains {
        RestoredChains(Arc::new(chains.iter().map(|(_, id, v)| (*id, v.clone())).collect()))
    }
}

impl crate::btree::Resolve for RestoredChains {
    fn resolve(&self, chain: u64, out: &mut Vec<u8>) -> bool {
        match self.0.get(&chain) {
            Some(Some(value)) => {
                out.extend_from_slice(value);
                true
            }
            _ => false,
        }
    }
}
