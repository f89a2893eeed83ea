//! `tern bench compare`: one workload on every engine of the build, side by side.

use super::driver::DriverArgs;
use super::{tpcb, ycsb};

const LONG_ABOUT: &str = "\
Runs a workload (YCSB a..f, or tpcb) on every engine in this build (tern; with `--features peers`,
LMDB, WiredTiger, Berkeley DB and RocksDB) in turn: each engine is loaded once, then every point
runs the engines interleaved, once per round, and reports each engine's median throughput and its
ratio to tern, and tern over the best peer. Same options as `tern bench ycsb` and `tern bench tpcb`.";

/// Options of `tern bench compare`.
#[derive(clap::Args, Clone, Debug)]
#[command(about = "One workload (YCSB a-f or tpcb) on every engine, with ratios to tern", long_about = LONG_ABOUT)]
pub struct CompareArgs {
    #[command(flatten)]
    pub driver: DriverArgs,
}

/// Runs `tern bench compare`.
pub fn run(args: &CompareArgs) -> Result<(), String> {
    let a = &args.driver;
    a.validate()?;
    let engines = a.engines(&tern_peers::available())?;
    let asked = a.workload.clone().unwrap_or_else(|| vec!["c".into()]);
    let (tpcb, ycsb): (Vec<String>, Vec<String>) = asked.into_iter().partition(|w| w == "tpcb");
    if !ycsb.is_empty() || a.workload_file.is_some() {
        let mut y = a.clone();
        y.workload = (!ycsb.is_empty()).then_some(ycsb);
        ycsb::run_workloads(&y, &engines, &ycsb::workloads(&y, &[])?)?;
    }
    if !tpcb.is_empty() && !super::harness::interrupted() {
        tpcb::run_on(a, &engines)?;
    }
    Ok(())
}
