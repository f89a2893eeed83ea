//! `tern backup SRC DST`: a consistent copy of a database directory in a new directory.

use crate::output::{self, Failure};
use std::path::PathBuf;

/// Options of `tern backup`.
#[derive(clap::Args, Debug)]
pub struct BackupCmd {
    /// The database directory to copy. It must not be open in another process (the
    /// directory is locked while open): a running program backs up with `Db::backup`.
    pub src: PathBuf,
    /// The new directory the copy goes to (it must not exist; its parent must).
    pub dst: PathBuf,
    /// Print what was copied as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Copies `src` without writing to it but for its lock file, `LOCK`, created if missing (it is
/// recovered read-only, as `tern check` does).
pub fn run(cmd: BackupCmd) -> Result<(), Failure> {
    let src = cmd.src.display();
    let info = tern::backup::backup_dir(&cmd.src, &cmd.dst).map_err(|e| match e {
        tern::Error::Locked { .. } => {
            format!("{src}: {e} (close it, or back it up from the program that has it open with Db::backup)")
        }
        e => format!("{src}: {e}"),
    })?;
    if cmd.json {
        output::json(&info)
    } else {
        output::line(format_args!(
            "{src} -> {}: {} tables, {} entries, {} bytes, snapshot {}, {} ms",
            info.path.display(),
            info.tables,
            info.entries,
            info.bytes,
            info.snapshot,
            info.millis
        ))
    }
}
