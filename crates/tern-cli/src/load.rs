//! `tern load PATH`: loads a `db_dump`/`mdb_dump` text dump into a database.

use crate::dumpfile::Reader;
use crate::opendb::{self, Create};
use crate::output::{self, Failure};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::Instant;
use tern::{Db, Table};

/// Options of `tern load`.
#[derive(clap::Args, Debug)]
pub struct LoadCmd {
    /// The database directory; a new database is created if it is missing or empty (a directory
    /// holding other files is refused). It must not be open in another process.
    pub path: PathBuf,
    /// Read the dump from this file instead of standard input.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Load every section into this table (created if missing; "" is the default table),
    /// whatever its `database=` line says.
    #[arg(long, value_name = "NAME")]
    pub table: Option<String>,
    /// Keep the value of keys that already exist instead of overwriting it (counted as
    /// skipped).
    #[arg(long)]
    pub no_overwrite: bool,
    /// Entries per transaction.
    #[arg(long, default_value_t = 10_000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Print what was loaded as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What `tern load` did.
#[derive(Debug, Default, Serialize)]
struct Loaded {
    /// Entries written.
    entries: u64,
    /// Entries not written because the key existed (`--no-overwrite`).
    skipped: u64,
    /// Tables written to, in the order their sections came.
    tables: Vec<String>,
    /// Tables created.
    created: Vec<String>,
    millis: u64,
}

/// Loads the dump section by section, committing every `--batch` entries. A load that fails
/// half-way keeps the batches committed before the failure (the message says how many entries
/// that is); running it again overwrites them with the same values.
pub fn run(cmd: LoadCmd) -> Result<(), Failure> {
    let started = Instant::now();
    let input: Box<dyn BufRead> = match &cmd.file {
        Some(f) => Box::new(BufReader::with_capacity(
            1 << 20,
            std::fs::File::open(f).map_err(|e| format!("{}: {e}", f.display()))?,
        )),
        None => Box::new(BufReader::with_capacity(1 << 20, std::io::stdin().lock())),
    };
    let mut done = Loaded::default();
    opendb::with(&cmd.path, Create::IfMissing, |db| {
        load(db, &cmd, input, &mut done)
            .map_err(|e| format!("{e} ({} entries loaded before it, in committed batches)", done.entries))
    })?;
    done.millis = started.elapsed().as_millis() as u64;
    if cmd.json {
        output::json(&done)
    } else {
        let skipped = if cmd.no_overwrite { format!(", {} existing keys kept", done.skipped) } else { String::new() };
        output::line(format_args!(
            "{}: loaded {} entries into {} ({} created){skipped}; {} ms",
            cmd.path.display(),
            done.entries,
            names(&done.tables),
            done.created.len(),
            done.millis
        ))
    }
}

fn names(tables: &[String]) -> String {
    let shown: Vec<String> =
        tables.iter().map(|t| if t.is_empty() { "the default table".into() } else { format!("table {t:?}") }).collect();
    if shown.is_empty() {
        "no table".into()
    } else {
        shown.join(", ")
    }
}

fn load(db: &Db, cmd: &LoadCmd, input: impl BufRead, done: &mut Loaded) -> Result<(), String> {
    let source = cmd.file.as_ref().map_or("standard input".to_string(), |f| f.display().to_string());
    let mut reader = Reader::new(input);
    let bar = opendb::progress("loading");
    let (mut key, mut value) = (Vec::new(), Vec::new());
    while let Some(header) = reader.next_section().map_err(|e| format!("{source}: {e}"))? {
        let name = cmd.table.clone().or(header.database).unwrap_or_default();
        let table = table(db, &name, done).map_err(|e| format!("{source}: line {}: {e}", header.line))?;
        if !done.tables.contains(&name) {
            done.tables.push(name.clone());
        }
        let mut txn = db.begin().map_err(|e| e.to_string())?;
        let mut in_txn = 0u64;
        while reader.next_entry(&mut key, &mut value).map_err(|e| format!("{source}: {e}"))? {
            let refused =
                |e: tern::Error| format!("{source}: line {}: an entry of table {name:?}: {e}", reader.entry_line());
            if cmd.no_overwrite && txn.get_in(&table, &key).map_err(refused)?.is_some() {
                done.skipped += 1;
                continue;
            }
            txn.put_in(&table, &key, &value).map_err(refused)?;
            in_txn += 1;
            if in_txn == cmd.batch {
                txn.commit().map_err(|e| format!("committing: {e}"))?;
                done.entries += in_txn;
                bar.set_position(done.entries);
                in_txn = 0;
                txn = db.begin().map_err(|e| e.to_string())?;
            }
        }
        txn.commit().map_err(|e| format!("committing: {e}"))?;
        done.entries += in_txn;
        bar.set_position(done.entries);
    }
    bar.finish_and_clear();
    Ok(())
}

/// The table called `name`, created if missing.
fn table(db: &Db, name: &str, done: &mut Loaded) -> tern::Result<Table> {
    match db.table(name) {
        Err(tern::Error::NoSuchTable { .. }) => {
            let t = db.create_table(name)?;
            done.created.push(name.to_string());
            Ok(t)
        }
        other => other,
    }
}
