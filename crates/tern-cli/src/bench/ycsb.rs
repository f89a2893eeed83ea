//! `tern bench ycsb`: the YCSB core workloads ([`super::workload`]) on any engine.
//!
//! Each operation is one transaction of the engine: a read or a scan in a read-only
//! transaction, an update or an insert in a write transaction of one put, a
//! read-modify-write in a write transaction that reads (with a write lock where the engine
//! locks) and writes the record back. Every value read is checked against the record it was
//! read for; a read of a loaded record that finds nothing, or a wrong value, fails the run.

use super::driver::{DriverArgs, EngineState, Job, JobSpec};
use super::harness::{Control, OpStats, SampleClock, ThreadResult};
use super::workload::{check_value, key_of, tag_value, Generator, Op, RequestDist, Workload};
use serde_json::{json, Value};
use std::sync::atomic::Ordering::{Relaxed, Release};
use tern_peers::Session;

const LONG_ABOUT: &str = "\
YCSB core workloads on tern and, with a `--features peers` build, LMDB, WiredTiger, Berkeley DB
and RocksDB, measured side by side:

  a  read 50%, update 50%, zipfian          d  read 95%, insert 5%, latest
  b  read 95%, update 5%, zipfian           e  scan 95% (1..=100), insert 5%, zipfian
  c  read 100%, zipfian                     f  read 50%, read-modify-write 50%, zipfian

Zipfian is YCSB's scrambled zipfian (theta 0.99), latest favours the newest records. Each
engine is loaded once (--records records of --key-size-byte keys and --value-size-byte values,
in write transactions of 1000 records, in random key order); the workloads then run in the
order given on the same data. Every point (workload, thread count) runs each engine once per
round, interleaved; medians are reported, with each engine's ratio to tern. Each operation is
one transaction. --workload-file reads a YCSB property file instead.

Every engine commits at the same --durability: nosync (the default: each commit written to the
OS, not flushed), sync (each commit flushed to stable storage before it returns), periodic
(flushed every --periodic-ms) or none (tern in memory with no log, WiredTiger and RocksDB
without theirs, data on tmpfs: not like for like, kept for the results before tern had a log).
Except at none the data directories are made under --dir (default: the system's temporary
directory) and the report adds commits per second and, for tern, the log's syncs and group
commit sizes.";

/// Options of `tern bench ycsb`.
#[derive(clap::Args, Clone, Debug)]
#[command(about = "YCSB workloads A-F (or a property file) on tern and peer engines", long_about = LONG_ABOUT)]
pub struct YcsbArgs {
    #[command(flatten)]
    pub driver: DriverArgs,
}

/// A YCSB workload as a driver job.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct YcsbJob {
    pub workload: Workload,
    pub key_size: usize,
    pub sample_every: u64,
}

/// The workloads the arguments name: the property file, or the presets (default `default`).
pub fn workloads(args: &DriverArgs, default: &[&str]) -> Result<Vec<Workload>, String> {
    let mut out = Vec::new();
    if let Some(path) = &args.workload_file {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let name = path.file_name().map_or("file".into(), |n| n.to_string_lossy().into_owned());
        let mut w = Workload::from_properties(&name, &text)?;
        if let Some(v) = args.value_size {
            w.value_size = v;
        }
        if args.strict && !w.unsupported.is_empty() {
            return Err(format!("{name}: unsupported properties (--strict): {}", w.unsupported.join(", ")));
        }
        out.push(w);
    } else {
        let names: Vec<String> =
            args.workload.clone().unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect());
        for name in names {
            if name == "tpcb" {
                return Err(
                    "tpcb is not a YCSB workload: run `tern bench tpcb` or `tern bench compare --workload tpcb`".into(),
                );
            }
            out.push(Workload::preset(&name, args.records, args.value_size.unwrap_or(100))?);
        }
    }
    if let Some(d) = &args.dist {
        let dist = RequestDist::parse(d).map_err(|e| format!("--dist: {e}"))?;
        out.iter_mut().for_each(|w| w.dist = dist);
    }
    Ok(out)
}

/// Runs `tern bench ycsb`.
pub fn run(args: &YcsbArgs) -> Result<(), String> {
    let a = &args.driver;
    a.validate()?;
    let engines = a.engines(&["tern"])?;
    run_workloads(a, &engines, &workloads(a, &["a", "b", "c", "d", "e", "f"])?)
}

/// Runs YCSB `workloads` on `engines`: each engine loaded once, the workloads in order.
pub fn run_workloads(a: &DriverArgs, engines: &[String], workloads: &[Workload]) -> Result<(), String> {
    for w in workloads {
        for u in &w.unsupported {
            eprintln!("{}: property not supported, ignored: {u}", w.name);
        }
        for u in &w.approximated {
            eprintln!("{}: {u}", w.name);
        }
    }
    let jobs: Vec<YcsbJob> = workloads
        .iter()
        .map(|w| YcsbJob { workload: w.clone(), key_size: a.key_size, sample_every: a.sample_every })
        .collect();
    // The presets share one load (as YCSB runs A, B, C, F, D on one load); a property file
    // sets the operations, threads and time it asks for.
    let mut a = a.clone();
    if let Some(n) = workloads.first().and_then(|w| w.operations) {
        a.operations.get_or_insert(n);
    }
    if let Some(t) = workloads.first().and_then(|w| w.threads) {
        if a.threads == [1, 2] {
            a.threads = vec![t];
        }
    }
    if let Some(s) = workloads.first().and_then(|w| w.max_secs) {
        a.duration = s;
    }
    let refs: Vec<&dyn Job> = jobs.iter().map(|j| j as &dyn Job).collect();
    super::driver::run(&refs, engines, &a)
}

impl Job for YcsbJob {
    fn bench(&self) -> &'static str {
        "ycsb"
    }

    fn workload(&self) -> String {
        self.workload.name.clone()
    }

    fn params(&self) -> Vec<(&'static str, Value)> {
        vec![
            ("records", json!(self.workload.records)),
            ("dist", json!(self.workload.dist.name())),
            ("key_size", json!(self.key_size)),
            ("value_size", json!(self.workload.value_size)),
        ]
    }

    fn describe(&self) -> String {
        let w = &self.workload;
        let mut s = format!(
            "YCSB {}: {}; {} records, {} B keys, {} B values; one transaction per operation",
            w.name,
            w.describe(),
            w.records,
            self.key_size,
            w.value_size
        );
        if !w.unsupported.is_empty() {
            s.push_str(&format!("; properties not supported (ignored): {}", w.unsupported.join(", ")));
        }
        if !w.approximated.is_empty() {
            s.push_str(&format!("; {}", w.approximated.join("; ")));
        }
        s
    }

    fn load_items(&self) -> u64 {
        self.workload.records
    }

    fn data_bytes(&self) -> u64 {
        self.workload.records * (self.key_size + self.workload.value_size) as u64
    }

    fn load_item(&self, i: u64, key: &mut Vec<u8>, value: &mut Vec<u8>) {
        key.resize(self.key_size, 0);
        key_of(i, self.key_size, key);
        value.clear();
        value.extend((0..self.workload.value_size).map(|j| (i as usize + j) as u8 | 1));
        tag_value(i, value);
    }

    fn loaded(&self, e: &EngineState) {
        // Inserts continue after the loaded records (and after earlier workloads' inserts).
        let n = self.workload.records.max(e.acked.load(Relaxed));
        e.next.fetch_max(n, Relaxed);
        e.acked.fetch_max(n, Release);
        // The zipfian constants are a sum over every record (about 0.2 s at 10M), computed once
        // per process: here, not inside the first measured point.
        let _ = Generator::new(&self.workload, 0);
    }

    fn run_thread(
        &self,
        e: &EngineState,
        s: &mut dyn Session,
        seed: u64,
        quota: Option<u64>,
        ctl: &Control,
    ) -> Result<ThreadResult, String> {
        YcsbThread::new(self, seed).run(e, s, quota, ctl)
    }

    fn check(&self, _e: &EngineState) -> Result<Option<String>, String> {
        Ok(None)
    }

    fn spec(&self) -> JobSpec {
        JobSpec::Ycsb(self.clone())
    }
}

/// One thread's state for a YCSB run.
struct YcsbThread<'j> {
    job: &'j YcsbJob,
    gen: Generator,
    key: [u8; 512],
    value: Vec<u8>,
    out: Vec<u8>,
    stats: Vec<OpStats>,
    clock: SampleClock,
    retries: u64,
    not_found: u64,
    scanned: u64,
}

impl<'j> YcsbThread<'j> {
    fn new(job: &'j YcsbJob, seed: u64) -> YcsbThread<'j> {
        let w = &job.workload;
        let mut value = vec![0u8; w.value_size];
        let mut rng = super::dist::SplitMix64::new(seed);
        value.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        YcsbThread {
            job,
            gen: Generator::new(w, seed),
            key: [0; 512],
            value,
            out: Vec::with_capacity(w.value_size),
            stats: Op::ALL.iter().map(|op| OpStats::new(op.name())).collect(),
            clock: SampleClock::new(job.sample_every),
            retries: 0,
            not_found: 0,
            scanned: 0,
        }
    }

    fn run(
        mut self,
        e: &EngineState,
        s: &mut dyn Session,
        quota: Option<u64>,
        ctl: &Control,
    ) -> Result<ThreadResult, String> {
        let quota = quota.unwrap_or(u64::MAX);
        let mut ops = 0u64;
        while ops < quota && ctl.running() {
            let op = self.gen.op();
            let start = self.clock.begin();
            self.one(op, e, s).map_err(|m| format!("{}: {m}", op.name()))?;
            let stats = &mut self.stats[op as usize];
            stats.ops += 1;
            if let Some(start) = start {
                stats.latency.saturating_record(start.elapsed().as_nanos().max(1) as u64);
            }
            ops += 1;
        }
        let mut r = ThreadResult::new(ops, None);
        r.by_op = self.stats.into_iter().filter(|s| s.ops > 0).collect();
        r.counts = vec![("retries", self.retries), ("not_found", self.not_found)];
        if self.job.workload.mix[Op::Scan as usize] > 0.0 {
            r.counts.push(("scanned", self.scanned));
        }
        Ok(r)
    }

    fn one(&mut self, op: Op, e: &EngineState, s: &mut dyn Session) -> Result<(), String> {
        let ks = self.job.key_size;
        let err = |m: tern_peers::PeerError| m.to_string();
        match op {
            Op::Read => {
                let i = self.gen.record(e.acked.load(Relaxed));
                let found = s.get(key_of(i, ks, &mut self.key), &mut self.out).map_err(err)?;
                self.check_read(i, found)?;
            }
            Op::Update => {
                let i = self.gen.record(e.acked.load(Relaxed));
                tag_value(i, &mut self.value);
                self.retries += tern_peers::put(s, key_of(i, ks, &mut self.key), &self.value).map_err(err)?;
            }
            Op::Insert => {
                let i = e.next.fetch_add(1, Relaxed);
                tag_value(i, &mut self.value);
                self.retries += tern_peers::put(s, key_of(i, ks, &mut self.key), &self.value).map_err(err)?;
                // `latest` reads may now pick it (an insert still in flight on another thread
                // may be picked too: counted as not found, as YCSB would).
                e.acked.fetch_max(i + 1, Release);
            }
            Op::Scan => {
                let i = self.gen.record(e.acked.load(Relaxed));
                let len = self.gen.scan_length() as usize;
                // A scan of the whole table (`scanall`) starts below every key.
                let start = if len as u64 >= self.job.workload.records {
                    self.key[..ks].fill(0);
                    &self.key[..ks]
                } else {
                    key_of(i, ks, &mut self.key)
                };
                // As YCSB's client does, a scan materialises each record it returns: the key and
                // value are copied out (into a buffer reused from row to row), and the value is
                // checked against the record its key names, as a point read checks its value.
                let (mut bytes, mut wrong, vs) = (0usize, 0usize, self.job.workload.value_size);
                let row = &mut self.out;
                let seen = s
                    .scan(start, len, &mut |k, v| {
                        row.clear();
                        row.extend_from_slice(k);
                        row.extend_from_slice(v);
                        bytes += row.len();
                        let record = k.get(8..16).and_then(|t| t.try_into().ok()).map(u64::from_be_bytes);
                        wrong += usize::from(record.is_some_and(|i| !check_value(i, v, vs)));
                    })
                    .map_err(err)?;
                if seen > len || bytes < seen * ks || wrong > 0 {
                    return Err(format!(
                        "scan of {len} returned {seen} entries of {bytes} bytes, {wrong} of them with a value not \
                         written for their key"
                    ));
                }
                self.scanned += seen as u64;
            }
            Op::ReadModifyWrite => {
                let i = self.gen.record(e.acked.load(Relaxed));
                tag_value(i, &mut self.value);
                let (found, retries) =
                    tern_peers::read_modify_write(s, key_of(i, ks, &mut self.key), &self.value, &mut self.out)
                        .map_err(err)?;
                self.retries += retries;
                self.check_read(i, found)?;
            }
        }
        Ok(())
    }

    /// A read of record `i`: a wrong value fails the run; a missing one fails it unless the
    /// workload inserts (a `latest` read can pick an insert still in flight).
    fn check_read(&mut self, i: u64, found: bool) -> Result<(), String> {
        let w = &self.job.workload;
        if !found {
            if i < w.records && w.mix[Op::Insert as usize] == 0.0 {
                return Err(format!("loaded record {i} not found"));
            }
            self.not_found += 1;
        } else if !check_value(i, &self.out, w.value_size) {
            return Err(format!("record {i}: wrong value ({} bytes)", self.out.len()));
        }
        Ok(())
    }
}
