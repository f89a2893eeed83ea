//! `tern compact PATH`: rewrites a database densely, offline.

use crate::output::{self, Failure};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tern::{Db, Options};

/// Options of `tern compact`.
#[derive(clap::Args, Debug)]
pub struct CompactCmd {
    /// The database directory. It must not be open in another process (the directory is
    /// locked while open).
    pub path: PathBuf,
    /// Print what was done as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What `tern compact` did.
#[derive(Debug, Serialize)]
struct Compacted {
    path: PathBuf,
    /// Bytes the database's files occupy on disk (allocated blocks) before and after.
    bytes_before: u64,
    bytes_after: u64,
    /// Log records replayed by the open (folded into the new checkpoint).
    records_replayed: u64,
    /// The checkpoint the log was folded into, if anything was logged since the last one.
    checkpoint: Option<String>,
    /// Entries in the rewritten database.
    entries: u64,
    millis: u64,
}

/// Compacts the database offline in two steps. First it opens it (replaying the log), writes a
/// checkpoint and closes it: the log is folded into the checkpoint and deleted. Then it copies
/// every entry into a new database beside it (`.<name>.compact-<pid>`: pages loaded full, in
/// key order, one page checkpoint), and swaps the two directories (the old one is renamed to
/// `.<name>.old-<pid>`, the new one into place, then the old one removed). A failure before the
/// swap leaves the database as it was; a crash between the two renames leaves it whole under
/// `.<name>.compact-<pid>`, which the error message names.
pub fn run(cmd: CompactCmd) -> Result<(), Failure> {
    let done = compact(&cmd.path)?;
    if cmd.json {
        return output::json(&done);
    }
    output::line(format_args!(
        "{}: {} -> {} bytes; {} log records folded into {}; {} entries; {} ms",
        done.path.display(),
        done.bytes_before,
        done.bytes_after,
        done.records_replayed,
        done.checkpoint.as_deref().unwrap_or("the existing checkpoint (nothing was logged after it)"),
        done.entries,
        done.millis
    ))
}

/// Compacts the database at `given_path` (see [`run`]).
fn compact(given_path: &Path) -> Result<Compacted, String> {
    let given = given_path.display();
    if !given_path.is_dir() || !tern::recovery::is_database(given_path).map_err(|e| format!("{given}: {e}"))? {
        return Err(format!("{given} is not a database directory"));
    }
    // The directory itself, by its name in its parent: `db/.`, `.` and a symbolic link name
    // the same one (the copy replaces the directory the link points to, not the link).
    let path = &std::fs::canonicalize(given_path).map_err(|e| format!("{given}: {e}"))?;
    let shown = path.display();
    let swap = Swap::beside(path)?;
    let started = Instant::now();
    let bytes_before = dir_bytes(path)?;
    let db = Db::open(path, Options::default()).map_err(|e| match e {
        tern::Error::Locked { .. } => format!("{shown}: {e} (compact works offline: close it first)"),
        e => format!("{shown}: {e}"),
    })?;
    let records_replayed = db.stats().recovery.map_or(0, |r| r.records_replayed);
    let info = db.checkpoint().map_err(|e| format!("{shown}: checkpoint: {e}"))?;
    db.close().map_err(|e| format!("{shown}: closing: {e}"))?;
    let entries = rewrite(path, &swap)?;
    Ok(Compacted {
        path: path.clone(),
        bytes_before,
        bytes_after: dir_bytes(path)?,
        records_replayed,
        checkpoint: info.as_ref().map(|i| i.file.clone()),
        entries,
        millis: started.elapsed().as_millis() as u64,
    })
}

/// The two directories beside the database that the rewrite uses.
struct Swap {
    /// The compacted copy, moved into place at the end.
    fresh: PathBuf,
    /// Where the database is moved aside to, then removed.
    old: PathBuf,
}

impl Swap {
    /// The names beside `path` (absolute, symbolic links resolved), checked before any work.
    fn beside(path: &Path) -> Result<Swap, String> {
        let shown = path.display();
        let (Some(name), Some(parent)) = (path.file_name(), path.parent()) else {
            return Err(format!(
                "{shown}: the root directory cannot be compacted (it is swapped with a copy beside it)"
            ));
        };
        let name = name.to_string_lossy();
        let pid = std::process::id();
        Ok(Swap {
            fresh: parent.join(format!(".{name}.compact-{pid}")),
            old: parent.join(format!(".{name}.old-{pid}")),
        })
    }
}

/// Copies the closed database at `path` densely into a new directory beside it and swaps the
/// two; returns the entries copied.
fn rewrite(path: &Path, swap: &Swap) -> Result<u64, String> {
    let shown = path.display();
    let (fresh, old) = (&swap.fresh, &swap.old);
    let copied = tern::backup::backup_dir(path, fresh).map_err(|e| format!("{shown}: copying: {e}"))?;
    // Opening loads the copy (a logical checkpoint) into full pages; its first checkpoint
    // writes them as one page checkpoint.
    let reopened = Db::open(fresh, Options::default()).and_then(|db| {
        db.checkpoint()?;
        db.close()
    });
    if let Err(e) = reopened {
        let _ = std::fs::remove_dir_all(fresh);
        return Err(format!("{shown}: writing the compacted copy: {e}"));
    }
    std::fs::rename(path, old).map_err(|e| format!("{shown}: moving it aside to {}: {e}", old.display()))?;
    if let Err(e) = std::fs::rename(fresh, path) {
        return Err(format!(
            "{shown}: moving the compacted copy into place: {e}; the database is at {} (compacted) and {} (as it was)",
            fresh.display(),
            old.display()
        ));
    }
    std::fs::remove_dir_all(old).map_err(|e| format!("{shown}: removing the old copy {}: {e}", old.display()))?;
    Ok(copied.entries)
}

/// Bytes the files in `dir` occupy on disk: allocated blocks, not lengths (the page file has
/// two slots per page and one of them is usually a hole).
fn dir_bytes(dir: &Path) -> Result<u64, String> {
    use std::os::unix::fs::MetadataExt;
    let entries = std::fs::read_dir(dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    Ok(entries.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.blocks() * 512).sum())
}
