//! `tern`: the command-line interface and benchmark driver of the tern storage engine.

mod backup;
mod bench;
mod check;
mod compact;

use clap::{Parser, Subcommand};
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(cmd) => bench::run(*cmd),
        Command::Check(cmd) => check::run(cmd),
        Command::Backup(cmd) => backup::run(cmd),
        Command::Compact(cmd) => compact::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tern: {message}");
            ExitCode::FAILURE
        }
    }
}
