//! `tern check PATH`: verifies a database directory without changing it.

use crate::output::{self, Failure, Output};
use std::path::PathBuf;

/// Options of `tern check`.
#[derive(clap::Args, Debug)]
pub struct CheckCmd {
    /// The database directory.
    pub path: PathBuf,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs the check; an error names the damaged file and offset.
pub fn run(cmd: CheckCmd) -> Result<(), Failure> {
    let report = tern::recovery::check(&cmd.path).map_err(|e| format!("{}: {e}", cmd.path.display()))?;
    if cmd.json {
        return output::json(&report);
    }
    let r = &report.recovery;
    let mut out = Output::new();
    out.line(format_args!("{}: ok", cmd.path.display()))?;
    out.line(format_args!("  checkpoint   {}", r.checkpoint.as_deref().unwrap_or("(none)")))?;
    if r.checkpoint.is_some() {
        if r.checkpoint_pages > 0 {
            out.line(format_args!("               snapshot {}, {} pages", r.checkpoint_snapshot, r.checkpoint_pages))?;
        } else {
            out.line(format_args!(
                "               snapshot {}, {} entries",
                r.checkpoint_snapshot, r.checkpoint_entries
            ))?;
        }
    }
    out.line(format_args!(
        "  pages        {} blocks checked; {} pages allocated, {} in tables",
        report.pages_checked, report.pages_live, report.pages_in_tables
    ))?;
    out.line(format_args!("  log          {} files: {}", report.log_files.len(), report.log_files.join(" ")))?;
    out.line(format_args!(
        "               {} records ({} bytes) after the checkpoint",
        r.records_replayed, r.bytes_replayed
    ))?;
    match &r.torn_tail {
        Some(t) => out.line(format_args!(
            "  torn tail    {} bytes at {} offset {} (the last record fails its checksum and nothing valid follows: a write a crash cut short, unless the disk changed it; opening the database cuts it)",
            t.bytes, t.file, t.offset
        ))?,
        None => out.line("  torn tail    none")?,
    }
    out.line(format_args!("  {:<20} {:>12} {:>7} {:>9}", "table", "entries", "height", "leaves"))?;
    for t in &report.tables {
        let name = if t.name.is_empty() { "(default)" } else { &t.name };
        out.line(format_args!("  {:<20} {:>12} {:>7} {:>9}", name, t.entries, t.height, t.leaves))?;
    }
    out.finish()
}
