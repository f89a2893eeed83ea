//! Opening a database directory: lock it, load the newest checkpoint, replay the log after it.
//!
//! # Invariants
//! 1. One process (one open handle) at a time: the directory's `LOCK` file is locked
//!    exclusively (`flock`) for as long as the database is open; a second open fails with
//!    [`Error::Locked`] instead of two writers interleaving their logs.
//! 2. Recovered state = the checkpoint (commits at or below its snapshot) + every log record
//!    after its LSN, in log order, each applied whole. A commit is one record, so no partial
//!    transaction is ever applied.
//! 3. Nothing is silently dropped: a torn tail (see `wal/reader.rs`) is the only thing cut, and
//!    it is reported; any other damage fails the open with [`Error::Corruption`].
//! 4. The commit clock moves past every recovered timestamp before the database is used, so
//!    new commits log above the checkpoint's snapshot.

use crate::btree::{BTree, TreeConfig};
use crate::buffer::{Pool, PoolConfig, PAGE_FILE};
use crate::checkpoint;
use crate::fs::Fs;
use crate::wal::reader::{scan, TornTail};
use crate::wal::record::Record;
use crate::{Error, Result};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
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
    /// Time spent, in milliseconds.
    pub millis: u64,
}

impl std::fmt::Display for RecoveryStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.checkpoint {
            Some(c) => {
                write!(f, "loaded {c} ({} entries, snapshot {})", self.checkpoint_entries, self.checkpoint_snapshot)?
            }
            None => write!(f, "no checkpoint")?,
        }
        write!(
            f,
            "; replayed {} log records ({} bytes) from {} log files in {} ms",
            self.records_replayed, self.bytes_replayed, self.log_files, self.millis
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
/// without (`tern check`), nothing is changed.
pub(crate) fn recover(
    fs: &dyn Fs,
    dir: &Path,
    config: TreeConfig,
    pool: &Arc<Pool>,
    repair: bool,
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
    let log = scan(fs, dir, lsn, repair, |record| apply(&mut tables, snapshot, config, pool, record))?;
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

/// Applies one log record; an error says why the record cannot be (the scan names its place).
fn apply(
    tables: &mut Vec<(u32, String, BTree)>,
    snapshot: u64,
    config: TreeConfig,
    pool: &Arc<Pool>,
    record: Record<'_>,
) -> std::result::Result<(), String> {
    match record {
        // Already in the checkpoint (cannot happen after its LSN, see `wal` invariant 1).
        Record::Commit { ts, .. } if ts <= snapshot => Ok(()),
        Record::Commit { ops, .. } => {
            for op in ops {
                let Some((_, _, tree)) = tables.get(op.table as usize) else {
                    return Err(format!("a commit writes to table {}, which does not exist", op.table));
                };
                match op.value {
                    Some(value) => tree.upsert(op.key, value).map(drop),
                    None => tree.delete(op.key).map(drop),
                }
                .map_err(|e| format!("replaying a write to table {}: {e}", op.table))?;
            }
            Ok(())
        }
        // `scan` hands out whole commits, parts merged.
        Record::Part { .. } => Err("a commit part outside its commit".into()),
        Record::CreateTable { id, name, .. } => match tables.get(id as usize) {
            Some((_, existing, _)) if existing == name => Ok(()),
            Some((_, existing, _)) => Err(format!("table {id} is named {existing:?}, the log says {name:?}")),
            None if id as usize == tables.len() => {
                let tree = BTree::with_pool(config, pool.clone()).map_err(|e| e.to_string())?;
                tables.push((id, name.to_string(), tree));
                Ok(())
            }
            None => Err(format!("table {id} is created before table {}", tables.len())),
        },
    }
}

/// The exclusive lock on a database directory, held while it is open.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: std::fs::File,
}

/// Locks `dir` against a second opener.
pub(crate) fn lock_dir(dir: &Path) -> Result<DirLock> {
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|source| Error::Io { what: format!("opening {}", path.display()), source })?;
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` on a file descriptor we own and keep open; it touches no memory.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked == 0 {
        return Ok(DirLock { _file: file });
    }
    let source = std::io::Error::last_os_error();
    match source.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Err(Error::Locked { path: dir.to_path_buf() }),
        _ => Err(Error::Io { what: format!("locking {}", path.display()), source }),
    }
}

/// One table as `tern check` found it.
#[derive(Clone, Debug, Serialize)]
pub struct TableCheck {
    /// Its name (`""`: the default table).
    pub name: String,
    /// Entries after recovery.
    pub entries: u64,
    /// Levels of its tree.
    pub height: usize,
    /// Leaf pages.
    pub leaves: usize,
}

/// What [`check`] found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// What recovery would do (the torn tail it would cut, the records it would replay).
    pub recovery: RecoveryStats,
    /// Every table, by id.
    pub tables: Vec<TableCheck>,
    /// Log files present, oldest first.
    pub log_files: Vec<String>,
}

/// Verifies the database in `dir` without changing it: every checksum of the newest
/// checkpoint and of the log, the log's continuity, that every record applies, and the shape
/// of every recovered tree. Fails with [`Error::Corruption`] naming the file and offset of the
/// first damage, and with [`Error::Locked`] while the database is open.
pub fn check(dir: &Path) -> Result<CheckReport> {
    if !dir.is_dir() {
        return Err(Error::InvalidArgument(format!("{} is not a database directory", dir.display())));
    }
    let _lock = lock_dir(dir)?;
    let fs = crate::fs::StdFs;
    let config = match crate::settings::read(&fs, dir)? {
        Some(settings) => settings.apply(TreeConfig::default()),
        None => TreeConfig::default(),
    };
    // Trees are rebuilt in a pool of the default cache size over a scratch page file outside
    // the database directory, which this check must not change.
    static CHECKS: AtomicU64 = AtomicU64::new(0);
    let n = CHECKS.fetch_add(1, Relaxed);
    let scratch = std::env::temp_dir().join(format!("tern-check-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .map_err(|source| Error::Io { what: format!("creating {}", scratch.display()), source })?;
    let pool_config = PoolConfig {
        page_size: config.page_size,
        cache_bytes: Some(crate::Options::default_cache_bytes()),
        huge_pages: config.huge_pages,
    };
    let result = Pool::with_file(pool_config, Arc::new(crate::fs::StdFs), scratch.join(PAGE_FILE))
        .and_then(|pool| check_with(dir, &fs, config, &pool));
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn check_with(dir: &Path, fs: &dyn Fs, config: TreeConfig, pool: &Arc<Pool>) -> Result<CheckReport> {
    let recovered = recover(fs, dir, config, pool, false)?;
    let mut tables = Vec::new();
    for (_, name, tree) in &recovered.tables {
        let shape = tree.check().map_err(|why| Error::Corruption {
            file: "(recovered tree)".into(),
            offset: 0,
            reason: format!("table {name:?}: {why}"),
        })?;
        tables.push(TableCheck {
            name: name.clone(),
            entries: shape.keys as u64,
            height: shape.height,
            leaves: shape.leaves,
        });
    }
    let log_files = recovered.log_files.iter().map(|&(seq, _)| crate::wal::file_name(seq)).collect();
    Ok(CheckReport { recovery: recovered.stats, tables, log_files })
}
