//! `tern check PATH`: verifies a database directory without changing it.

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
pub fn run(cmd: CheckCmd) -> Result<(), String> {
    let report = tern::recovery::check(&cmd.path).map_err(|e| format!("{}: {e}", cmd.path.display()))?;
    if cmd.json {
        println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let r = &report.recovery;
    println!("{}: ok", cmd.path.display());
    println!("  checkpoint   {}", r.checkpoint.as_deref().unwrap_or("(none)"));
    if r.checkpoint.is_some() {
        if r.checkpoint_pages > 0 {
            println!("               snapshot {}, {} pages", r.checkpoint_snapshot, r.checkpoint_pages);
        } else {
            println!("               snapshot {}, {} entries", r.checkpoint_snapshot, r.checkpoint_entries);
        }
    }
    println!(
        "  pages        {} blocks checked; {} pages allocated, {} in tables",
        report.pages_checked, report.pages_live, report.pages_in_tables
    );
    println!("  log          {} files: {}", report.log_files.len(), report.log_files.join(" "));
    println!("               {} records ({} bytes) after the checkpoint", r.records_replayed, r.bytes_replayed);
    match &r.torn_tail {
        Some(t) => println!(
            "  torn tail    {} bytes at {} offset {} (an unacknowledged write; opening the database cuts it)",
            t.bytes, t.file, t.offset
        ),
        None => println!("  torn tail    none"),
    }
    println!("  {:<20} {:>12} {:>7} {:>9}", "table", "entries", "height", "leaves");
    for t in &report.tables {
        let name = if t.name.is_empty() { "(default)" } else { &t.name };
        println!("  {:<20} {:>12} {:>7} {:>9}", name, t.entries, t.height, t.leaves);
    }
    Ok(())
}
