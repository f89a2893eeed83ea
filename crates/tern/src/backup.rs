//! Hot backup: a consistent copy of a database, made while its readers and writers go on.
//!
//! [`Db::backup`] writes the database as of one snapshot into a new directory: its page size
//! (`SETTINGS`) and a checkpoint of every table at a snapshot taken when the backup begins,
//! with no log after it. The copy opens as a database of its own, with nothing to replay.
//!
//! # Invariants
//! 1. The copy holds exactly the commits of one snapshot, taken after `backup` was called:
//!    every commit acknowledged before the call is in it, and of each transaction committed
//!    meanwhile either all of its writes or none.
//! 2. The destination appears whole or not at all. Everything is written and synced in a
//!    staging directory beside it (`.<name>.backup-tmp`), which is renamed to the destination
//!    last, and the parent directory synced. An error or a crash leaves at most the staging
//!    directory, which is removed on error and by the next backup to the same destination.
//!    (If only syncing the parent fails, the error is returned and the destination is
//!    complete, but a crash may yet undo its rename.)
//! 3. Nothing in the source's directory is written; its checkpoints and log go on as before.
//!
//! Cost: checkpoints are still a logical dump of every entry (until page checkpoints,
//! `docs/page-checkpoints.md`), so a backup reads and writes the whole database.

use crate::checkpoint::Writer;
use crate::db::Db;
use crate::fs::Fs;
use crate::settings::{self, Settings};
use crate::{Error, Result, TxnOptions};
use serde::Serialize;
use std::path::{Path, PathBuf};
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
    /// exist; its parent must. The copy is a database of its own: open it with [`Db::open`].
    /// Works on a temporary database too (its copy is on disk).
    pub fn backup(&self, dst: impl AsRef<Path>) -> Result<BackupInfo> {
        let started = Instant::now();
        let dst = dst.as_ref();
        let invalid = |why: &str| Error::InvalidArgument(format!("backup to {}: {why}", dst.display()));
        let name = dst.file_name().ok_or_else(|| invalid("not a directory name"))?;
        if dst.exists() {
            return Err(invalid("it exists (a backup goes to a new directory)"));
        }
        let parent = match dst.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !parent.is_dir() {
            return Err(invalid("its parent directory does not exist"));
        }
        let staging = parent.join(format!(".{}.backup-tmp", name.to_string_lossy()));
        let fs = self.inner.fs();
        if staging.exists() {
            // A backup to the same place that an error or a crash cut short.
            remove_staging(&*fs, &staging)?;
        }
        let result = self.write_backup(&*fs, &staging, dst, parent);
        if result.is_err() {
            let _ = remove_staging(&*fs, &staging);
        }
        let (snapshot, tables, entries, bytes) = result?;
        Ok(BackupInfo {
            path: dst.to_path_buf(),
            snapshot,
            tables,
            entries,
            bytes,
            millis: started.elapsed().as_millis() as u64,
        })
    }

    /// Writes the copy into `staging` and renames it to `dst`: (snapshot, tables, entries, bytes).
    fn write_backup(&self, fs: &dyn Fs, staging: &Path, dst: &Path, parent: &Path) -> Result<(u64, usize, u64, u64)> {
        let io = |what: String| move |source| Error::Io { what, source };
        fs.create_dir_all(staging).map_err(io(format!("creating {}", staging.display())))?;
        settings::write(fs, staging, &Settings::of(&self.inner.options.tree))?;
        let txn = self.begin_with(TxnOptions { read_only: true, ..TxnOptions::default() })?;
        let snapshot = txn.snapshot();
        // No log follows it: position 0, nothing to replay.
        let mut w = Writer::create(self.inner.fs(), staging, 1, snapshot, 0)?;
        let tables = self.inner.write_tables(&txn, &mut w)?;
        drop(txn);
        let written = w.finish()?;
        fs.rename(staging, dst).map_err(io(format!("renaming {} to {}", staging.display(), dst.display())))?;
        fs.sync_dir(parent).map_err(io(format!("syncing directory {}", parent.display())))?;
        Ok((snapshot, tables, written.entries, written.bytes))
    }
}

/// Removes a staging directory and the files in it.
fn remove_staging(fs: &dyn Fs, staging: &Path) -> Result<()> {
    let io = |what: String| move |source| Error::Io { what, source };
    let what = || format!("removing an unfinished backup, {}", staging.display());
    for name in fs.list(staging).map_err(io(what()))? {
        fs.remove(&staging.join(name)).map_err(io(what()))?;
    }
    fs.remove_dir(staging).map_err(io(what()))
}
