//! `tern bench`: the benchmark driver.
//!
//! Every benchmark measures named variants side by side, interleaved in one process
//! ([`runner`]), and prints a table and, with `--json`, JSON Lines ([`report`]). Options common
//! to all benchmarks are in [`Common`].

pub mod cgroup;
pub mod compare;
pub mod counters;
pub mod dist;
pub mod driver;
pub mod harness;
pub mod ingest;
pub mod latch;
pub mod lock;
pub mod open;
pub mod plot;
pub mod recovery;
pub mod report;
pub mod runner;
pub mod search;
pub mod settle;
pub mod tpcb;
pub mod tree;
pub mod txn;
pub mod work;
pub mod worker;
pub mod workload;
pub mod ycsb;

use clap::{Args, Subcommand};
use std::time::Duration;

/// Options every benchmark takes.
#[derive(Args, Clone, Debug)]
pub struct Common {
    /// Seconds per measured point (one variant, one round).
    #[arg(long, default_value_t = 0.5, value_name = "SECS")]
    pub duration: f64,
    // A benchmark with another default sets it with `mut_arg("threads", ...)`, so that the
    // help shows the one that applies.
    /// Thread counts to measure, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16", value_name = "N,N,...")]
    pub threads: Vec<usize>,
    /// Rounds per point: variants run interleaved once per round; medians are reported.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub rounds: usize,
    /// Print one JSON object per result on stdout (JSON Lines); the table goes to stderr.
    #[arg(long)]
    pub json: bool,
}

impl Common {
    /// Rejects values that would make a run meaningless.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.duration.is_finite() && self.duration > 0.0 && self.duration <= 3600.0) {
            return Err(format!("--duration must be in (0, 3600] seconds, got {}", self.duration));
        }
        let t = &self.threads;
        if t.is_empty() || t.iter().any(|&t| t == 0 || t > 1024) {
            return Err(format!("--threads must list counts in 1..=1024, got {t:?}"));
        }
        if self.rounds == 0 || self.rounds > 1000 {
            return Err(format!("--rounds must be in 1..=1000, got {}", self.rounds));
        }
        Ok(())
    }

    /// The thread counts asked for, or the benchmark's default.
    pub fn threads(&self) -> Vec<usize> {
        self.threads.clone()
    }

    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.duration)
    }
}

/// `tern bench [NAME]`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCmd {
    #[command(subcommand)]
    pub which: Option<Which>,
    /// Print JSON Lines on stdout (default suite).
    #[arg(long)]
    pub json: bool,
    /// Seconds per measured point (default suite).
    #[arg(long, default_value_t = 0.3, value_name = "SECS")]
    pub duration: f64,
    /// Rounds per point (default suite).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub rounds: usize,
}

/// The benchmarks.
#[derive(Subcommand, Debug)]
pub enum Which {
    Latch(latch::LatchArgs),
    Lock(lock::LockArgs),
    Search(search::SearchArgs),
    Tree(tree::TreeArgs),
    Txn(txn::TxnArgs),
    Ycsb(ycsb::YcsbArgs),
    Tpcb(tpcb::TpcbArgs),
    Compare(compare::CompareArgs),
    Recovery(recovery::RecoveryArgs),
    Open(open::OpenArgs),
    Ingest(ingest::IngestArgs),
    /// One engine for a parent `tern bench` run with --memory-limit, over stdin and stdout.
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

/// Runs the named benchmark, or the default suite.
pub fn run(cmd: BenchCmd) -> Result<(), String> {
    if let Some(Which::Worker(_)) = cmd.which {
        // A worker stops its measurement on Ctrl-C like its parent, without saying so.
        harness::install_ctrlc_quiet();
        return worker::serve();
    }
    harness::install_ctrlc();
    match cmd.which {
        Some(Which::Latch(args)) => latch::run(&args),
        Some(Which::Lock(args)) => lock::run(&args),
        Some(Which::Search(args)) => search::run(&args),
        Some(Which::Tree(args)) => tree::run(&args),
        Some(Which::Txn(args)) => txn::run(&args),
        Some(Which::Ycsb(args)) => ycsb::run(&args),
        Some(Which::Tpcb(args)) => tpcb::run(&args),
        Some(Which::Compare(args)) => compare::run(&args),
        Some(Which::Recovery(args)) => recovery::run(&args),
        Some(Which::Open(args)) => open::run(&args),
        Some(Which::Ingest(args)) => ingest::run(&args),
        Some(Which::Worker(_)) => unreachable!("handled above"),
        None => default_suite(cmd.json, cmd.duration, cmd.rounds),
    }?;
    if harness::interrupted() {
        return Err("interrupted; the results above are what was measured before the stop".into());
    }
    Ok(())
}

/// About two minutes: each benchmark at a few telling points (the full benchmarks take
/// `tern bench <name>`): latches at 1, 2 and 8 threads, saturated and lightly contended; lock
/// manager lock+unlock at 1 and 2 threads; transactions through the public `Db` API (empty,
/// one read, one write) at 1, 2 and 32 threads; the search kernels in the cache and far beyond
/// it; tree lookups at 1M keys; YCSB C and A on tern at 1M records (against the peers:
/// `tern bench compare`).
fn default_suite(json: bool, duration: f64, rounds: usize) -> Result<(), String> {
    let (d, r) = (duration.to_string(), rounds.to_string());
    let mut common: Vec<&str> = vec!["--duration", &d, "--rounds", &r];
    if json {
        common.push("--json");
    }
    if !json {
        println!(
            "tern default benchmark suite: {duration} s per point, {rounds} rounds (`tern bench <name> --help` for each \
             benchmark in full)"
        );
    }
    let with = |extra: &[&'static str]| -> Vec<&str> { common.iter().copied().chain(extra.iter().copied()).collect() };
    let steps: [&dyn Fn() -> Result<(), String>; 7] = [
        &|| latch::run(&suite_args(&with(&["--threads", "1,2,8", "--cs-ns", "0"]))),
        &|| {
            let light = ["--mode", "exclusive", "--threads", "2,8", "--cs-ns", "20", "--think-ns", "200"];
            latch::run(&suite_args(&with(&light)))
        },
        &|| lock::run(&suite_args(&with(&["--threads", "1,2", "--object", "bytes"]))),
        &|| txn::run(&suite_args(&with(&["--threads", "1,2,32"]))),
        &|| {
            search::run(&suite_args(&with(&["--key", "u64", "--log2", "12,24", "--prefetch", "0,2", "--threads", "1"])))
        },
        &|| {
            let tree = ["--keys", "1000000", "--dist", "uniform", "--layout", "sorted,branchfree", "--prefetch", "0,1"];
            tree::run(&suite_args(&with(&[&tree[..], &["--threads", "1,2", "--op", "get"]].concat())))
        },
        &|| ycsb::run(&suite_args(&with(&["--workload", "c,a", "--records", "1000000", "--threads", "1,2"]))),
    ];
    for step in steps {
        if harness::interrupted() {
            break;
        }
        step()?;
    }
    Ok(())
}

/// A benchmark's options parsed from `argv`, exactly as on the command line (so the suite
/// shares every default with `tern bench <name>`).
fn suite_args<T: clap::Args + clap::FromArgMatches>(argv: &[&str]) -> T {
    let command = T::augment_args(clap::Command::new("suite"));
    let matches = command
        .try_get_matches_from(std::iter::once("suite").chain(argv.iter().copied()))
        .expect("the suite's arguments are valid");
    T::from_arg_matches(&matches).expect("the suite's arguments are valid")
}
