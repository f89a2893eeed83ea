//! Backup: a consistent copy of a database in a new directory, from an open database while
//! its readers and writers go on ([`Db::backup`]), or from a closed one without writing to it
//! ([`backup_dir`], `tern backup SRC DST`).
//!
//! A copy is the database's page size (`SETTINGS`) and a checkpoint of every table as of one
//! snapshot, with no log after it: it opens as a database of its own, with nothing to replay.
//!
//! # Invariants
//! 1. The copy holds exactly the commits of one snapshot. From an open database the snapshot
//!    is taken after `backup` is called: every commit acknowledged before the call is in it,
//!    and of each transaction committed meanwhile either all of its writes or none. From a
//!    closed one it is what opening it would recover.
//! 2. The destination appears whole or not at all. Everything is written and synced in a
//!    staging directory of this backup's own beside it (`.<name>.backup-<pid>-<n>`, created
//!    exclusively, so concurrent backups never share one), which is renamed to the
//!    destination last, and the parent directory synced. An error removes the staging
//!    directory (if the file system lets it); a crash leaves it behind, hidden, to be deleted
//!    by hand. (If only syncing the
//!    parent fails, the error is returned and the destination is complete, but a crash may yet
//!    undo its rename.)
//! 3. Nothing in the source's directory is written: a destination inside it is refused, and a
//!    closed source is recovered read-only into a scratch pool, as `tern check` does.
//!
//! Cost: the copy is a logical checkpoint (every entry; `checkpoint/mod.rs`), so a backup reads
//! and writes the whole database, and opening the copy loads it into a new page file.

use crate::btree::TreeConfig;
use crate::checkpoint::Writer;
use crate::db::Db;
use crate::fs::{Fs, StdFs};
use crate::settings::{self, Settings};
use crate::{Error, Result, TxnOptions};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// What a backup wrote.
#[derive(Clone, Debug, Serialize)]
pub struct BackupInfo {
    /// The new database directory.
    pub path: PathBuf,
    /// The snapshot it holds (the commit timestamp every commit in it is at or below).
    pub snapshot: u64,
    /// Tables copied, the default table included.
    pub tables: usize,
    /// Entries copied.
    pub entries: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Time taken, in milliseconds.
    pub millis: u64,
}

impl Db {
    /// Writes a consistent copy of this database to the new directory `dst` while readers and
    /// writers go on (see [`backup`](crate::backup) for what the copy holds). `dst` must not
    /// exist and must not be inside this database's directory; its parent must exist. The copy
    /// is a database of its own: open it with [`Db::open`]. Works on a temporary database too
    /// (its copy is on disk).
    pub fn backup(&self, dst: impl AsRef<Path>) -> Result<BackupInfo> {
        let started = Instant::now();
        let target = Target::check(dst.as_ref(), self.path())?;
        let fs = self.inner.fs();
        let txn = self.begin_with(TxnOptions { read_only: true, ..TxnOptions::default() })?;
        let snapshot = txn.snapshot();
        let written = target.write(fs, &self.inner.options.tree, snapshot, |w| self.inner.write_tables(&txn, w))?;
        Ok(written.info(snapshot, started))
    }
}

/// Writes a consistent copy of the closed database in `src` to the new directory `dst`,
/// without writing to `src`: it is locked ([`Error::Locked`] while open elsewhere) and
/// recovered read-only into a scratch pool, and the copy holds what opening it would recover.
pub fn backup_dir(src: &Path, dst: &Path) -> Result<BackupInfo> {
    let started = Instant::now();
    let target = Target::check(dst, Some(src))?;
    crate::recovery::recover_read_only(src, |recovered, config| {
        let snapshot = recovered.max_ts;
        let written = target.write(Arc::new(StdFs), &config, snapshot, |w| {
            let chains = crate::recovery::RestoredChains::of(&recovered.chains);
            for (id, name, tree) in &recovered.tables {
                w.table(*id, name)?;
                let mut entries = tree.range_with(.., chains.clone());
                for (key, value) in &mut entries {
                    w.entry(&key, &value)?;
                }
                if let Some(e) = entries.take_error() {
                    return Err(e);
                }
            }
            Ok(recovered.tables.len())
        })?;
        Ok(written.info(snapshot, started))
    })
}

/// A backup's destination, checked.
struct Target {
    dst: PathBuf,
    parent: PathBuf,
    name: String,
}

/// Tables, entries and bytes of a copy.
struct Written {
    dst: PathBuf,
    tables: usize,
    entries: u64,
    bytes: u64,
}

impl Written {
    fn info(self, snapshot: u64, started: Instant) -> BackupInfo {
        BackupInfo {
            path: self.dst,
            snapshot,
            tables: self.tables,
            entries: self.entries,
            bytes: self.bytes,
            millis: started.elapsed().as_millis() as u64,
        }
    }
}

impl Target {
    /// Refuses a destination that exists, has no parent, or lies inside `source`.
    fn check(dst: &Path, source: Option<&Path>) -> Result<Target> {
        let invalid = |why: &str| Error::InvalidArgument(format!("backup to {}: {why}", dst.display()));
        let name = dst.file_name().ok_or_else(|| invalid("not a directory name"))?.to_string_lossy().into_owned();
        if dst.exists() {
            return Err(invalid("it exists (a backup goes to a new directory)"));
        }
        let parent = match dst.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let parent = parent.canonicalize().map_err(|_| invalid("its parent directory does not exist"))?;
        if let Some(source) = source.and_then(|s| s.canonicalize().ok()) {
            if parent.starts_with(&source) {
                return Err(invalid("it is inside the database's own directory"));
            }
        }
        Ok(Target { dst: parent.join(&name), parent, name })
    }

    /// Writes the copy (settings, then a checkpoint of snapshot `snapshot` whose tables
    /// `tables` writes) in a staging directory of its own, then renames it into place.
    fn write(
        &self,
        fs: Arc<dyn Fs>,
        tree: &TreeConfig,
        snapshot: u64,
        tables: impl FnOnce(&mut Writer) -> Result<usize>,
    ) -> Result<Written> {
        let io = |what: String| move |source| Error::Io { what, source };
        static STAGED: AtomicU64 = AtomicU64::new(0);
        let staging = loop {
            let n = STAGED.fetch_add(1, Relaxed);
            let staging = self.parent.join(format!(".{}.backup-{}-{n}", self.name, std::process::id()));
            // Exclusive: a directory left by a crashed process with the same id is skipped.
            match fs.create_dir(&staging) {
                Ok(()) => break staging,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(Error::Io { what: format!("creating {}", staging.display()), source }),
            }
        };
        let result = (|| {
            settings::write(&*fs, &staging, &Settings::of(tree))?;
            // No log follows the checkpoint: position 0, nothing to replay.
            let mut w = Writer::create(fs.clone(), &staging, 1, snapshot, 0)?;
            let tables = tables(&mut w)?;
            let written = w.finish()?;
            let renamed = format!("renaming {} to {}", staging.display(), self.dst.display());
            fs.rename(&staging, &self.dst).map_err(io(renamed))?;
            Ok(Written { dst: self.dst.clone(), tables, entries: written.entries, bytes: written.bytes })
        })();
        match result {
            Ok(written) => {
                fs.sync_dir(&self.parent).map_err(io(format!("syncing directory {}", self.parent.display())))?;
                Ok(written)
            }
            Err(e) => {
                let _ = remove_staging(&*fs, &staging);
                Err(e)
            }
        }
    }
}

/// Removes a staging directory and the files in it.
fn remove_staging(fs: &dyn Fs, staging: &Path) -> std::io::Result<()> {
    for name in fs.list(staging)? {
        fs.remove(&staging.join(name))?;
    }
    fs.remove_dir(staging)
}
