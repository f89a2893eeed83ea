//! Opening a database directory: lock it, load the newest checkpoint, replay the log after it.
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
//! Files: `lock.rs` (the directory lock), `replay.rs` (the log applied in sorted batches),
//! `check.rs` (`tern check`: recovery into a scratch pool, then the trees' shapes).

mod check;
mod lock;
mod replay;
#[cfg(test)]
mod tests;

pub(crate) use check::recover_read_only;
pub use check::{check, is_database, CheckReport, TableCheck};
pub(crate) use lock::{lock_dir, DirLock};

use crate::btree::{BTree, TreeConfig};
use crate::buffer::Pool;
use crate::checkpoint;
use crate::fs::Fs;
use crate::wal::reader::{scan, TornTail};
use crate::{Error, Result};
use serde::Serialize;
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
    /// Entries loaded from it.
    pub checkpoint_entries: u64,
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
    /// Of [`millis`](RecoveryStats::millis): loading the checkpoint.
    pub checkpoint_millis: u64,
    /// Of [`millis`](RecoveryStats::millis): reading the log and applying it.
    pub replay_millis: u64,
}

impl std::fmt::Display for RecoveryStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.checkpoint {
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
        if let Some(t) = &self.torn_tail {
            write!(f, "; cut a torn tail of {} bytes at {} offset {}", t.bytes, t.file, t.offset)?;
        }
        if !self.removed.is_empty() {
            write!(f, "; removed {}", self.removed.join(", "))?;
        }
        Ok(())
    }
}

/// The recovered database.
pub(crate) struct Recovered {
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
    /// The LSN it replays from.
    pub checkpoint_lsn: u64,
    pub stats: RecoveryStats,
}

/// Recovers the database in `dir`. With `repair`, leftovers are deleted and a torn tail cut;
/// without (`tern check`), nothing is changed. `batch_bytes`: the replay's batch size
/// (`None`: [`replay::batch_bytes`] of the pool).
pub(crate) fn recover(
    fs: &dyn Fs,
    dir: &Path,
    config: TreeConfig,
    pool: &Arc<Pool>,
    repair: bool,
    batch_bytes: Option<u64>,
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
    let (mut tables, snapshot, lsn) = match newest {
        Some(seq) => {
            let loaded = checkpoint::load(fs, dir, seq, config, pool)?;
            stats.checkpoint = Some(loaded.name);
            stats.checkpoint_snapshot = loaded.snapshot;
            stats.checkpoint_entries = loaded.entries;
            (loaded.tables, loaded.snapshot, loaded.lsn)
        }
        None => (vec![(0, String::new(), BTree::with_pool(config, pool.clone())?)], 0, 0),
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
    let batch = batch_bytes.map_or_else(|| replay::batch_bytes(pool), |b| usize::try_from(b).unwrap_or(usize::MAX));
    let log = replay::replay(&mut tables, snapshot, config, pool, batch, |r| {
        scan(fs, dir, lsn, repair, |record| r.record(record))
    })?;
    stats.replay_millis = replaying.elapsed().as_millis() as u64;
    stats.records_replayed = log.records;
    stats.bytes_replayed = log.bytes;
    stats.log_files = log.files.len();
    stats.torn_tail = log.torn;
    stats.millis = started.elapsed().as_millis() as u64;
    Ok(Recovered {
        tables,
        max_ts: log.max_ts.max(snapshot),
        next_log_seq: log.files.last().map_or(1, |&(seq, _)| seq + 1),
        log_files: log.files,
        end: log.end,
        checkpoint_seq: newest,
        checkpoint_lsn: lsn,
        stats,
    })
}
