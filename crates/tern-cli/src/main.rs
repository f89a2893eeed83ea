//! `tern`: the command-line interface and benchmark driver of the tern storage engine.

mod backup;
mod bench;
mod check;
mod compact;
mod dump;
mod dumpfile;
mod kv;
mod load;
mod opendb;
mod output;
mod stat;

use clap::{Parser, Subcommand};
use output::Failure;
use std::io::Write;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "tern", version, about = "tern: an embedded transactional key-value engine (CLI and benchmarks)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run benchmarks: with no name, a short default suite (about two minutes).
    Bench(Box<bench::BenchCmd>),
    /// Verify a database directory without changing it: checksums of the checkpoint and the
    /// log, the log's continuity, every record, every table's tree.
    Check(check::CheckCmd),
    /// Copy a database directory (not open elsewhere) to a new directory, consistently: the
    /// copy opens as a database of its own.
    Backup(backup::BackupCmd),
    /// Rewrite a database directory (not open elsewhere) densely: the log is folded into a new
    /// checkpoint and deleted.
    Compact(compact::CompactCmd),
    /// Tables with their records and sizes, pages used and free, checkpoint, log and cache.
    Stat(stat::StatCmd),
    /// Write tables as a text dump in the format of db_dump and mdb_dump (one section per
    /// table), for `tern load`, `db_load` or `mdb_load`.
    Dump(dump::DumpCmd),
    /// Load a text dump made by `tern dump`, `db_dump` or `mdb_dump` (every section into the
    /// table its `database=` line names); creates the database if needed.
    Load(load::LoadCmd),
    /// Print the values of keys.
    Get(kv::GetCmd),
    /// Write keys and values, in one transaction.
    Put(kv::PutCmd),
    /// Delete keys, in one transaction.
    Delete(kv::DeleteCmd),
    /// Print entries in key order (or reverse) within an optional range.
    Scan(kv::ScanCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(cmd) => bench::run(*cmd).map_err(Failure::from),
        Command::Check(cmd) => check::run(cmd),
        Command::Backup(cmd) => backup::run(cmd),
        Command::Compact(cmd) => compact::run(cmd),
        Command::Stat(cmd) => stat::run(cmd),
        Command::Dump(cmd) => dump::run(cmd),
        Command::Load(cmd) => load::run(cmd),
        Command::Get(cmd) => kv::get(cmd),
        Command::Put(cmd) => kv::put(cmd),
        Command::Delete(cmd) => kv::delete(cmd),
        Command::Scan(cmd) => kv::scan(cmd),
    };
    match result {
        // A closed pipe: whoever read the output wanted no more of it.
        Ok(()) | Err(Failure::ReaderGone) => ExitCode::SUCCESS,
        Err(Failure::Error(message)) => {
            // Not eprintln!, which panics if standard error cannot be written either.
            let _ = writeln!(std::io::stderr(), "tern: {message}");
            ExitCode::FAILURE
        }
    }
}
