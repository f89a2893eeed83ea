//! `tern stat PATH`: what a database holds, and what opening it found.

use crate::opendb::{self, Create};
use crate::output::{self, Failure, Output};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Options of `tern stat`.
#[derive(clap::Args, Debug)]
pub struct StatCmd {
    /// The database directory. It must not be open in another process.
    pub path: PathBuf,
    /// Skip counting each table's records and bytes (a scan of the data).
    #[arg(long)]
    pub no_count: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// One table.
#[derive(Debug, Serialize)]
struct TableReport {
    name: String,
    /// Records, key bytes and value bytes (absent with `--no-count`).
    records: Option<u64>,
    key_bytes: Option<u64>,
    value_bytes: Option<u64>,
    /// Pages the table's tree uses (nodes and overflow pages).
    pages: usize,
}

/// One file of the database directory.
#[derive(Debug, Serialize)]
struct FileReport {
    name: String,
    bytes: u64,
}

/// What `tern stat` prints.
#[derive(Debug, Serialize)]
struct Report {
    path: PathBuf,
    page_size: u64,
    tables: Vec<TableReport>,
    /// Pages allocated to tables, and the page file's length in pages (the difference is free
    /// space, reused before the file grows).
    pages_used: u64,
    pages_in_file: u64,
    pages_free: u64,
    /// What opening found: the checkpoint loaded and the log replayed after it.
    recovery: Option<tern::recovery::RecoveryStats>,
    /// The directory's files: page file, checkpoint, settings, log files.
    files: Vec<FileReport>,
    /// The buffer pool of this open: capacity, resident pages, reads (faults).
    cache: tern::buffer::BufferStats,
}

/// Opens the database (replaying its log, as any open does), counts each table in one read
/// transaction, and reports.
pub fn run(cmd: StatCmd) -> Result<(), Failure> {
    let report = opendb::with(&cmd.path, Create::No, |db| report(db, &cmd))?;
    if cmd.json {
        output::json(&report)
    } else {
        print(&report)
    }
}

fn report(db: &tern::Db, cmd: &StatCmd) -> Result<Report, String> {
    let shown = cmd.path.display();
    let txn = db.begin_read().map_err(|e| format!("{shown}: {e}"))?;
    let bar = opendb::progress("counting");
    let mut tables = Vec::new();
    for name in db.table_names() {
        let table = txn.table(&name).map_err(|e| format!("{shown}: {e}"))?;
        let (mut records, mut key_bytes, mut value_bytes) = (0u64, 0u64, 0u64);
        if !cmd.no_count {
            let mut cursor = txn.cursor_in(&table, ..).map_err(|e| format!("{shown}: {e}"))?;
            let mut entry = cursor.first().map_err(|e| format!("{shown}: table {name:?}: {e}"))?;
            while let Some((k, v)) = entry {
                records += 1;
                key_bytes += k.len() as u64;
                value_bytes += v.len() as u64;
                bar.inc(1);
                entry = cursor.next().map_err(|e| format!("{shown}: table {name:?}: {e}"))?;
            }
        }
        let counted = |x: u64| (!cmd.no_count).then_some(x);
        tables.push((name, counted(records), counted(key_bytes), counted(value_bytes)));
    }
    bar.finish_and_clear();
    drop(txn);
    let stats = db.stats();
    let pages_of = |name: &str| stats.tables.iter().find(|t| t.name == name).map_or(0, |t| t.tree.pages);
    let tables = tables
        .into_iter()
        .map(|(name, records, key_bytes, value_bytes)| TableReport {
            pages: pages_of(&name),
            name,
            records,
            key_bytes,
            value_bytes,
        })
        .collect();
    let b = &stats.buffer;
    Ok(Report {
        path: cmd.path.clone(),
        page_size: b.page_size,
        tables,
        pages_used: b.live_pages,
        pages_in_file: b.file_pages,
        pages_free: b.file_pages.saturating_sub(b.live_pages),
        recovery: stats.recovery.clone(),
        files: files(&cmd.path)?,
        cache: *b,
    })
}

fn files(dir: &Path) -> Result<Vec<FileReport>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    let mut files: Vec<FileReport> = entries
        .flatten()
        .filter_map(|e| {
            let meta = e.metadata().ok().filter(|m| m.is_file())?;
            Some(FileReport { name: e.file_name().to_string_lossy().into_owned(), bytes: meta.len() })
        })
        .collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

fn print(r: &Report) -> Result<(), Failure> {
    let mut out = Output::new();
    out.line(r.path.display())?;
    out.line(format_args!(
        "  {:<24} {:>12} {:>14} {:>14} {:>10}",
        "table", "records", "key bytes", "value bytes", "pages"
    ))?;
    let opt = |x: Option<u64>| x.map_or("-".to_string(), |x| x.to_string());
    for t in &r.tables {
        let name = if t.name.is_empty() { "(default)" } else { &t.name };
        out.line(format_args!(
            "  {:<24} {:>12} {:>14} {:>14} {:>10}",
            name,
            opt(t.records),
            opt(t.key_bytes),
            opt(t.value_bytes),
            t.pages
        ))?;
    }
    out.line(format_args!(
        "  pages        {} bytes each: {} used, {} in the page file, {} free",
        r.page_size, r.pages_used, r.pages_in_file, r.pages_free
    ))?;
    if let Some(rec) = &r.recovery {
        out.line(format_args!("  checkpoint   {}", rec.checkpoint.as_deref().unwrap_or("(none)")))?;
        out.line(format_args!(
            "  log          {} files read at open: {} records ({} bytes) after the checkpoint, replayed in {} ms",
            rec.log_files, rec.records_replayed, rec.bytes_replayed, rec.replay_millis
        ))?;
    }
    let c = &r.cache;
    let capacity = if c.capacity_pages == 0 { "unbounded".to_string() } else { format!("{} pages", c.capacity_pages) };
    out.line(format_args!(
        "  cache        {capacity}; {} resident, {} read from disk during this command",
        c.resident_pages, c.reads
    ))?;
    out.line("  files")?;
    for f in &r.files {
        out.line(format_args!("    {:<40} {:>14} bytes", f.name, f.bytes))?;
    }
    out.finish()
}
