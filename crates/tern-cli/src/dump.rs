//! `tern dump PATH`: writes tables as a `db_dump`/`mdb_dump` text dump.

use crate::dumpfile::{Format, Writer};
use crate::opendb::{self, Create};
use crate::output::Failure;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

/// Options of `tern dump`.
#[derive(clap::Args, Debug)]
pub struct DumpCmd {
    /// The database directory. It must not be open in another process.
    pub path: PathBuf,
    /// Dump only this table ("" is the default table); repeat for several. Default: every
    /// table, the default table first (left out when it is empty and other tables exist).
    #[arg(long, value_name = "NAME")]
    pub table: Vec<String>,
    /// How keys and values are written: hex pairs, or printable text with \xx escapes.
    #[arg(long, value_enum, default_value = "bytevalue")]
    pub format: Format,
    /// Shorthand for --format print (as db_dump -p and mdb_dump -p).
    #[arg(short = 'p', conflicts_with = "format")]
    pub print: bool,
    /// Write to this file instead of standard output.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Add LMDB's `mapsize=BYTES` header line, from which `mdb_load` sizes the environment it
    /// creates (its default, 1 MiB, is too small for most dumps; `db_load` rejects the line).
    #[arg(long, value_name = "BYTES")]
    pub mapsize: Option<u64>,
}

/// Dumps each table from one read transaction, so the dump is a consistent snapshot.
pub fn run(cmd: DumpCmd) -> Result<(), Failure> {
    opendb::with(&cmd.path, Create::No, |db| dump(db, &cmd))
}

fn dump(db: &tern::Db, cmd: &DumpCmd) -> Result<(), Failure> {
    let shown = cmd.path.display();
    let out: Box<dyn Write> = match &cmd.file {
        Some(f) => Box::new(std::fs::File::create(f).map_err(|e| format!("{}: {e}", f.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let format = if cmd.print { Format::Print } else { cmd.format };
    let extra = cmd.mapsize.map(|m| format!("mapsize={m}")).into_iter().collect();
    let mut writer = Writer::new(BufWriter::with_capacity(1 << 20, out), format, extra);
    let txn = db.begin_read().map_err(|e| format!("{shown}: {e}"))?;
    let names = if cmd.table.is_empty() { db.table_names() } else { cmd.table.clone() };
    let bar = opendb::progress("dumping");
    let write_err = |e| Failure::writing("the dump", e);
    for name in &names {
        let table = txn.table(name).map_err(|e| format!("{shown}: {e}"))?;
        let mut cursor = txn.cursor_in(&table, ..).map_err(|e| format!("{shown}: {e}"))?;
        let mut entry = cursor.first().map_err(|e| format!("{shown}: table {name:?}: {e}"))?;
        if name.is_empty() && entry.is_none() && cmd.table.is_empty() && names.len() > 1 {
            continue; // an empty default table beside named ones: as mdb_dump -a, not dumped
        }
        writer.begin((!name.is_empty()).then_some(name.as_str())).map_err(write_err)?;
        while let Some((key, value)) = entry {
            writer.entry(key, value).map_err(write_err)?;
            bar.inc(1);
            entry = cursor.next().map_err(|e| format!("{shown}: table {name:?}: {e}"))?;
        }
        writer.end().map_err(write_err)?;
    }
    bar.finish_and_clear();
    writer.finish().map_err(write_err)?;
    Ok(())
}
