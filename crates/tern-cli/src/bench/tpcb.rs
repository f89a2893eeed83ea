//! `tern bench tpcb`: TPC-B-style debit/credit transactions on any engine.
//!
//! The database holds, per scale unit, one branch, 10 tellers and 100 000 accounts (100-byte
//! rows whose first 8 bytes are the balance), and a history that grows by one 50-byte row per
//! transaction. A transaction (as pgbench's "TPC-B (sort of)") picks an account, a teller and
//! a branch uniformly and a delta in -5000..=5000, adds the delta to the three balances (each
//! read with a write lock where the engine locks, then written) and appends a history row, in
//! one write transaction. A conflict or deadlock rolls it back; it is run again with the same
//! inputs, and the retries are counted and reported.
//!
//! Invariant, checked on every engine after the run: the sums of the branch, teller and
//! account balances each equal the sum of the history deltas (every transaction applied all
//! its updates or none).

use super::driver::{DriverArgs, EngineState, Job, JobSpec};
use super::harness::{Control, OpStats, SampleClock, ThreadResult};
use serde_json::{json, Value};
use std::sync::atomic::Ordering::Relaxed;
use tern_peers::{PeerError, Session};

const LONG_ABOUT: &str = "\
TPC-B-style debit/credit on tern and, with a `--features peers` build, LMDB, WiredTiger,
Berkeley DB and RocksDB, side by side. Per --scale unit: 1 branch, 10 tellers, 100 000 accounts
(100-byte rows). Each transaction adds a random delta to one account, one teller and one branch
balance and appends a history row, in one write transaction; conflicts and deadlocks are retried
with the same inputs and counted (`retries`). After the run, every engine's balances are checked
against the history. Engines run interleaved, once per round; medians are reported with each
engine's ratio to tern. Every engine commits at the same --durability (default nosync: every engine
writes its commits to the OS, none flushes them; see `tern bench ycsb --help`).";

/// Options of `tern bench tpcb`.
#[derive(clap::Args, Clone, Debug)]
#[command(about = "TPC-B-style debit/credit transactions on tern and peer engines", long_about = LONG_ABOUT)]
pub struct TpcbArgs {
    #[command(flatten)]
    pub driver: DriverArgs,
}

/// Rows per scale unit.
const TELLERS: u64 = 10;
const ACCOUNTS: u64 = 100_000;
/// Row sizes (TPC-B: 100-byte branch, teller and account rows; 50-byte history rows).
const ROW: usize = 100;
const HISTORY_ROW: usize = 50;

/// TPC-B at a scale factor, as a driver job.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TpcbJob {
    pub scale: u64,
    pub sample_every: u64,
}

/// Runs `tern bench tpcb`.
pub fn run(args: &TpcbArgs) -> Result<(), String> {
    let a = &args.driver;
    a.validate()?;
    if a.workload.is_some() || a.workload_file.is_some() {
        return Err("tern bench tpcb takes no --workload/--workload-file (see --scale)".into());
    }
    run_on(a, &a.engines(&["tern"])?)
}

/// Runs TPC-B on `engines`.
pub fn run_on(a: &DriverArgs, engines: &[String]) -> Result<(), String> {
    let job = TpcbJob { scale: a.scale, sample_every: a.sample_every };
    super::driver::run(&[&job], engines, a)
}

/// The table a row belongs to: its key's first byte. Keys are the byte, then the row number
/// big-endian (so each table is one contiguous key range, in row order).
#[derive(Clone, Copy)]
enum Table {
    Account = b'a' as isize,
    Branch = b'b' as isize,
    History = b'h' as isize,
    Teller = b't' as isize,
}

fn key(table: Table, row: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = table as u8;
    k[1..].copy_from_slice(&row.to_be_bytes());
    k
}

fn balance(row: &[u8]) -> Result<i64, String> {
    row.get(..8)
        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
        .ok_or_else(|| format!("a balance row of {} bytes", row.len()))
}

impl TpcbJob {
    fn branches(&self) -> u64 {
        self.scale
    }

    fn tellers(&self) -> u64 {
        self.scale * TELLERS
    }

    fn accounts(&self) -> u64 {
        self.scale * ACCOUNTS
    }

    /// Adds `delta` to the balance of `table`'s row `row`, in the open transaction.
    fn add(s: &mut dyn Session, table: Table, row: u64, delta: i64, buf: &mut Vec<u8>) -> Result<(), PeerError> {
        let k = key(table, row);
        if !s.txn_get(&k, buf)? {
            return Err(PeerError::Failed(format!("row {row} of table {:?} missing", table as u8 as char)));
        }
        let b = balance(buf).map_err(PeerError::Failed)?;
        buf[..8].copy_from_slice(&(b + delta).to_le_bytes());
        s.txn_put(&k, buf)
    }

    /// Sums the balances of `table`'s `rows` rows (history: the deltas), in one read.
    fn sum(s: &mut dyn Session, table: Table, rows: usize) -> Result<(i64, usize), String> {
        let (mut total, mut seen, mut bad) = (0i64, 0usize, None);
        s.scan(&key(table, 0), rows, &mut |k, v| {
            if k.first() == Some(&(table as u8)) {
                match balance(v) {
                    Ok(b) => total += b,
                    Err(m) => bad = Some(m),
                }
                seen += 1;
            }
        })
        .map_err(|e| e.to_string())?;
        bad.map_or(Ok((total, seen)), Err)
    }
}

impl Job for TpcbJob {
    fn bench(&self) -> &'static str {
        "tpcb"
    }

    fn workload(&self) -> String {
        "tpcb".into()
    }

    fn params(&self) -> Vec<(&'static str, Value)> {
        vec![("scale", json!(self.scale)), ("records", json!(self.load_items()))]
    }

    fn describe(&self) -> String {
        format!(
            "TPC-B: scale {} ({} branches, {} tellers, {} accounts of {ROW} B); one write transaction per \
             debit/credit (3 balance updates + 1 history insert), retried on conflict or deadlock",
            self.scale,
            self.branches(),
            self.tellers(),
            self.accounts()
        )
    }

    fn load_items(&self) -> u64 {
        self.branches() + self.tellers() + self.accounts()
    }

    fn data_bytes(&self) -> u64 {
        self.load_items() * (ROW as u64 + 9)
    }

    fn load_item(&self, i: u64, k: &mut Vec<u8>, value: &mut Vec<u8>) {
        let (table, row) = if i < self.branches() {
            (Table::Branch, i)
        } else if i < self.branches() + self.tellers() {
            (Table::Teller, i - self.branches())
        } else {
            (Table::Account, i - self.branches() - self.tellers())
        };
        k.clear();
        k.extend_from_slice(&key(table, row));
        value.clear();
        value.resize(ROW, b' ');
        value[..8].copy_from_slice(&0i64.to_le_bytes());
    }

    fn loaded(&self, _e: &EngineState) {}

    fn run_thread(
        &self,
        e: &EngineState,
        s: &mut dyn Session,
        seed: u64,
        quota: Option<u64>,
        ctl: &Control,
    ) -> Result<ThreadResult, String> {
        let mut rng = super::dist::SplitMix64::new(seed);
        let mut stats = OpStats::new("txn");
        let (mut buf, mut history) = (Vec::with_capacity(ROW), vec![b' '; HISTORY_ROW]);
        let (mut retries, mut clock) = (0u64, SampleClock::new(self.sample_every));
        let quota = quota.unwrap_or(u64::MAX);
        while stats.ops < quota && ctl.running() {
            let (aid, tid, bid) = (rng.below(self.accounts()), rng.below(self.tellers()), rng.below(self.branches()));
            let delta = rng.below(10_001) as i64 - 5000;
            let h = e.next.fetch_add(1, Relaxed);
            history[..8].copy_from_slice(&delta.to_le_bytes());
            history[8..16].copy_from_slice(&aid.to_le_bytes());
            history[16..24].copy_from_slice(&tid.to_le_bytes());
            history[24..32].copy_from_slice(&bid.to_le_bytes());
            let start = clock.begin();
            retries += tern_peers::transaction(s, |s| {
                Self::add(s, Table::Account, aid, delta, &mut buf)?;
                Self::add(s, Table::Teller, tid, delta, &mut buf)?;
                Self::add(s, Table::Branch, bid, delta, &mut buf)?;
                s.txn_put(&key(Table::History, h), &history)
            })
            .map_err(|m| m.to_string())?;
            if let Some(start) = start {
                stats.latency.saturating_record(start.elapsed().as_nanos().max(1) as u64);
            }
            stats.ops += 1;
        }
        let mut r = ThreadResult::new(stats.ops, None);
        r.by_op = vec![stats];
        r.counts = vec![("retries", retries)];
        Ok(r)
    }

    fn check(&self, e: &EngineState) -> Result<Option<String>, String> {
        let mut s = e.engine.session().map_err(|m| m.to_string())?;
        let s = s.as_mut();
        let history_rows = e.next.load(Relaxed) as usize;
        let (branches, nb) = Self::sum(s, Table::Branch, self.branches() as usize)?;
        let (tellers, nt) = Self::sum(s, Table::Teller, self.tellers() as usize)?;
        let (accounts, na) = Self::sum(s, Table::Account, self.accounts() as usize)?;
        let (history, nh) = Self::sum(s, Table::History, history_rows)?;
        let rows = [nb as u64, nt as u64, na as u64];
        if rows != [self.branches(), self.tellers(), self.accounts()] {
            return Err(format!(
                "row counts {rows:?}, expected {}/{}/{}",
                self.branches(),
                self.tellers(),
                self.accounts()
            ));
        }
        if nh != history_rows {
            return Err(format!("{nh} history rows, {history_rows} transactions committed"));
        }
        if !(branches == history && tellers == history && accounts == history) {
            return Err(format!(
                "balances disagree: branches {branches}, tellers {tellers}, accounts {accounts}, history {history}"
            ));
        }
        Ok(Some(format!(
            "consistent: {nh} transactions; branch, teller and account balances each sum to the history's {history}"
        )))
    }

    fn spec(&self) -> JobSpec {
        JobSpec::Tpcb(self.clone())
    }
}
