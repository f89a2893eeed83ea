//! `tern compact PATH`: rewrites a database densely, offline.

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
    /// Bytes of the database's files before and after.
    bytes_before: u64,
    bytes_after: u64,
    /// Log records replayed by the open (folded into the new checkpoint).
    records_replayed: u64,
    /// The checkpoint written, if anything was logged since the last one.
    checkpoint: Option<String>,
    entries: Option<u64>,
    millis: u64,
}

/// Opens the database (recovering it), writes a checkpoint of everything in it and closes it:
/// the log is folded into the checkpoint and deleted, and the scratch page file removed.
pub fn run(cmd: CompactCmd) -> Result<(), String> {
    let path = &cmd.path;
    let shown = path.display();
    if !path.is_dir() || !tern::recovery::is_database(path).map_err(|e| format!("{shown}: {e}"))? {
        return Err(format!("{shown} is not a database directory"));
    }
    let started = Instant::now();
    let bytes_before = dir_bytes(path)?;
    let db = Db::open(path, Options::default()).map_err(|e| match e {
        tern::Error::Locked { .. } => format!("{shown}: {e} (compact works offline: close it first)"),
        e => format!("{shown}: {e}"),
    })?;
    let records_replayed = db.stats().recovery.map_or(0, |r| r.records_replayed);
    let info = db.checkpoint().map_err(|e| format!("{shown}: checkpoint: {e}"))?;
    db.close().map_err(|e| format!("{shown}: closing: {e}"))?;
    let done = Compacted {
        path: path.clone(),
        bytes_before,
        bytes_after: dir_bytes(path)?,
        records_replayed,
        checkpoint: info.as_ref().map(|i| i.file.clone()),
        entries: info.as_ref().map(|i| i.entries),
        millis: started.elapsed().as_millis() as u64,
    };
    if cmd.json {
        println!("{}", serde_json::to_string(&done).map_err(|e| e.to_string())?);
    } else {
        println!(
            "{shown}: {} -> {} bytes; {} log records folded into {}; {} ms",
            done.bytes_before,
            done.bytes_after,
            done.records_replayed,
            done.checkpoint.as_deref().unwrap_or("the existing checkpoint (nothing was logged after it)"),
            done.millis
        );
    }
    Ok(())
}

/// Bytes of the files in `dir`.
fn dir_bytes(dir: &Path) -> Result<u64, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    Ok(entries.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
}
