//! The engine benchmark driver behind `tern bench ycsb`, `tern bench tpcb` and
//! `tern bench compare`: the same job on each engine (tern and, with the `peers` feature,
//! LMDB, WiredTiger, Berkeley DB, RocksDB), loaded once per engine, then measured with the
//! engines interleaved round by round ([`super::runner`]), each engine's throughput reported
//! with its ratio to tern.
//!
//! A [`Job`] is what runs: a YCSB workload ([`super::ycsb`]) or TPC-B ([`super::tpcb`]). The
//! load phase and the run phase are reported separately; the run reports latency percentiles
//! per operation type and, where the kernel allows, hardware counters per operation
//! ([`super::counters`]). Any engine error stops that engine's thread and fails the command
//! after printing what was measured: a benchmark that loses a write must not report a rate.
//!
//! Every engine of a run commits at the same durability level (`--durability`, see
//! [`tern_peers::Durability`]); for tern with a log, each measurement also reports what the
//! log did during it (flushes, syncs, group sizes: [`wal_figures`]).

use super::counters;
use super::harness::{self, run_threads, run_threads_to_completion, Control, Sample, ThreadResult};
use super::plot::{self, Series};
use super::recovery::parse_bytes;
use super::report::{emit, ns, si, Record};
use super::runner::{self, Case, RunFn};
use clap::Args;
use crossbeam_utils::CachePadded;
use indicatif::{ProgressBar, ProgressStyle};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tern::sync::LatchStats;
use tern::wal::{WalStats, GROUP_BUCKETS};
use tern_peers::{Durability, Engine, OpenOptions, Session};

/// `--durability`: when a commit returns, the same level on every engine.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DurabilityArg {
    /// As before tern had a log: tern in memory, no peer flushes (data on tmpfs).
    None,
    /// Each commit written and flushed to stable storage before it returns.
    Sync,
    /// Each commit written to the operating system before it returns, not flushed.
    Nosync,
    /// Commits return at once; the log is written and flushed every --periodic-ms.
    Periodic,
}

/// `--periodic-ms` when not given.
const DEFAULT_PERIODIC_MS: u64 = 10;

/// Options shared by `tern bench ycsb`, `tpcb` and `compare` (serialized whole to the worker
/// processes of `--memory-limit`).
#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct DriverArgs {
    /// Engines, comma separated: tern, lmdb, wiredtiger, bdb, rocksdb (peers need a build with
    /// `--features peers`), and tern's A/B variants tern-written (its log written by a group
    /// commit leader's write(2), not mapped), tern-fifo (every released lock handed to its
    /// first waiter: no barging), tern-chain (group commit leaders run up to 8 flushes in a
    /// row while others wait, instead of waking the next one's leader), tern-pause (every
    /// latch class on the fixed PAUSE policy instead of the adaptive default; only with
    /// --memory-limit, which gives each engine a process of its own), tern-norows (no row
    /// cache: the pages get the whole cache) and tern-noadmit (no admission: every write
    /// transaction begins at once) [default: tern; compare: every engine in this build].
    #[arg(long, value_delimiter = ',', value_name = "ENGINE,...")]
    pub engine: Option<Vec<String>>,
    /// Workloads, comma separated: YCSB a..f, write1 (one put per transaction, uniform keys),
    /// scan1, scan10, scan100, scan1000 (scans only, of that many entries, from uniform keys;
    /// rows/s reported), scanall (the whole table per scan); compare also takes tpcb
    /// [default: ycsb: a,b,c,d,e,f; compare: c].
    #[arg(long, value_delimiter = ',', value_name = "W,...")]
    pub workload: Option<Vec<String>>,
    /// A YCSB workload property file (recordcount, operationcount, *proportion,
    /// requestdistribution, ...) instead of the presets; properties not acted on are reported.
    #[arg(long, value_name = "FILE", conflicts_with = "workload")]
    pub workload_file: Option<PathBuf>,
    /// Records loaded before the run (YCSB; a property file's recordcount wins).
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub records: u64,
    /// Operations per measured point, split over the threads (instead of --duration).
    #[arg(long, value_name = "N")]
    pub operations: Option<u64>,
    /// Seconds per measured point (one engine, one round).
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    pub duration: f64,
    /// Seconds each engine runs each workload, unmeasured, before its first measured point
    /// (one engine after the other, at the largest --threads), so that the points measure
    /// caches that have settled rather than the state the load left [default: 0, none].
    #[arg(long, default_value_t = 0.0, value_name = "SECS")]
    pub warmup: f64,
    /// Thread counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_name = "N,...")]
    pub threads: Vec<usize>,
    /// Rounds per point: engines run interleaved once per round; medians are reported.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub rounds: usize,
    /// Key size in bytes (8..=512).
    #[arg(long, default_value_t = 16, value_name = "BYTES")]
    pub key_size: usize,
    /// Value size in bytes [default: 100; a property file: fieldcount × fieldlength].
    #[arg(long, value_name = "BYTES")]
    pub value_size: Option<usize>,
    /// Override the workloads' request distribution: uniform, zipfian, latest.
    #[arg(long, value_name = "DIST")]
    pub dist: Option<String>,
    /// TPC-B scale factor: branches (each with 10 tellers and 100 000 accounts).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub scale: u64,
    /// Threads for the load phase [default: the largest --threads].
    #[arg(long, value_name = "N")]
    pub load_threads: Option<usize>,
    /// Items per write transaction in the load phase (reported as `load_batch`). Each load
    /// thread writes its share of the items, in the job's order, in transactions this large (at
    /// most 1,000,000: a batch is built in memory first).
    #[arg(long, default_value_t = DEFAULT_LOAD_BATCH, value_name = "N")]
    pub load_batch: u64,
    /// Load the engines in this many turns: each loads the next 1/N of the items, then the next
    /// engine does, so that every engine's data is written over the same span of time. With 1
    /// (the default) each engine loads everything in turn, and the engine loaded last has the
    /// most recently written files: a disk that reads recent blocks faster (a VM's host cache)
    /// favours it (docs/buffer.md).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub load_parts: u64,
    /// Time one operation in this many (0: none).
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub sample_every: u64,
    /// Seed for keys and operation mixes (every engine sees the same sequence).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Fail on workload properties that are not supported (instead of reporting them).
    #[arg(long)]
    pub strict: bool,
    /// Write a throughput chart (per engine, against threads) to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Durability of every commit, on every engine: nosync (the default: every engine writes
    /// its commits to the OS, none flushes), sync (flushed before the commit returns),
    /// periodic (flushed every --periodic-ms), none (tern in memory with no log, WiredTiger and
    /// RocksDB without theirs, data on tmpfs: the results before tern had a log, not like for
    /// like). Each engine's configuration line names its settings.
    #[arg(long, value_enum, default_value = "nosync", value_name = "LEVEL")]
    pub durability: DurabilityArg,
    /// Flush interval of --durability periodic, in milliseconds [default: 10].
    #[arg(long, value_name = "MS")]
    pub periodic_ms: Option<u64>,
    /// Directory the engines' data directories are created in (each removed afterwards)
    /// [default: --durability none: /dev/shm (tmpfs); otherwise (nosync, the default, included) the system's temporary
    /// directory, which must be on the disk to be measured].
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Cache of every engine that has one: bytes, or with a unit (192MiB, 1GiB): tern's
    /// Options::cache_bytes, WiredTiger's cache_size, RocksDB's block cache, Berkeley DB's
    /// set_cachesize; LMDB has none (it reads through the OS page cache) [default: each engine's
    /// own: tern the smaller of 1 GiB and a quarter of RAM; the peers twice the data, at least
    /// 64 MiB].
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub cache: Option<u64>,
    /// tern's page size: 4096 to 65536 bytes, a power of two (4KiB, 16KiB) [default: 16 KiB];
    /// the peers keep their own.
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub tern_page_size: Option<u64>,
    /// tern's row cache, as a percentage of its cache (`Options::row_cache_percent`, 0 to 90)
    /// [default: tern's, 50]; the `tern-norows` variant runs without one.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(0..=90))]
    pub tern_row_cache: Option<u8>,
    /// Run each engine (its load and run phases) in a worker process of its own, placed in a
    /// memory cgroup with this limit (bytes, or 512MiB, 2GiB): the engine's heap and the OS page
    /// cache of its files both count. cgroup v2 if its memory controller is usable, else v1; the
    /// engines stay interleaved round by round. The data directories then default to the
    /// system's temporary directory (a disk: data on tmpfs cannot be evicted).
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub memory_limit: Option<u64>,
    /// Print one JSON object per result on stdout (JSON Lines); the tables go to stderr.
    #[arg(long)]
    pub json: bool,
}

/// The smallest `--cache` and `--memory-limit` accepted, and the largest.
const MIN_CACHE: u64 = 1 << 20;
const MIN_MEMORY_LIMIT: u64 = 16 << 20;
const MAX_BYTES: u64 = 1 << 44;

impl DriverArgs {
    /// Rejects values that would make a run meaningless.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.duration.is_finite() && self.duration > 0.0 && self.duration <= 3600.0) {
            return Err(format!("--duration must be in (0, 3600] seconds, got {}", self.duration));
        }
        if !(self.warmup.is_finite() && (0.0..=3600.0).contains(&self.warmup)) {
            return Err(format!("--warmup must be in [0, 3600] seconds, got {}", self.warmup));
        }
        if self.threads.is_empty() || self.threads.iter().any(|&t| t == 0 || t > 1024) {
            return Err(format!("--threads must list counts in 1..=1024, got {:?}", self.threads));
        }
        if self.rounds == 0 || self.rounds > 1000 {
            return Err(format!("--rounds must be in 1..=1000, got {}", self.rounds));
        }
        if !(8..=512).contains(&self.key_size) {
            return Err(format!("--key-size must be in 8..=512, got {}", self.key_size));
        }
        if let Some(v) = self.value_size.filter(|v| !(8..=1 << 20).contains(v)) {
            return Err(format!("--value-size must be in 8..=1048576, got {v}"));
        }
        if self.records == 0 || self.records > 1 << 40 {
            return Err(format!("--records must be in 1..=2^40, got {}", self.records));
        }
        if self.operations == Some(0) {
            return Err("--operations must be positive".into());
        }
        if self.scale == 0 || self.scale > 10_000 {
            return Err(format!("--scale must be in 1..=10000, got {}", self.scale));
        }
        if self.load_threads.is_some_and(|t| t == 0 || t > 1024) {
            return Err("--load-threads must be in 1..=1024".into());
        }
        if !(1..=1000).contains(&self.load_parts) {
            return Err(format!("--load-parts must be in 1..=1000, got {}", self.load_parts));
        }
        if !(1..=MAX_LOAD_BATCH).contains(&self.load_batch) {
            return Err(format!("--load-batch must be in 1..={MAX_LOAD_BATCH}, got {}", self.load_batch));
        }
        if let Some(ms) = self.periodic_ms {
            if self.durability != DurabilityArg::Periodic {
                return Err("--periodic-ms applies to --durability periodic only".into());
            }
            if !(1..=60_000).contains(&ms) {
                return Err(format!("--periodic-ms must be in 1..=60000, got {ms}"));
            }
        }
        if let Some(c) = self.cache.filter(|c| !(MIN_CACHE..=MAX_BYTES).contains(c)) {
            return Err(format!("--cache must be in 1MiB..=16TiB, got {c} bytes"));
        }
        if let Some(m) = self.memory_limit.filter(|m| !(MIN_MEMORY_LIMIT..=MAX_BYTES).contains(m)) {
            return Err(format!("--memory-limit must be in 16MiB..=16TiB, got {m} bytes"));
        }
        if let Some(dir) = &self.dir {
            check_dir(dir)?;
        }
        Ok(())
    }

    /// Where the engines' data directories are made: `--dir`; with `--memory-limit` and no
    /// `--dir`, the system's temporary directory (a disk: the page cache of files on tmpfs
    /// cannot be evicted, so the limit would meet the data itself); otherwise the engines'
    /// default ([`OpenOptions::parent_dir`]).
    pub fn data_parent(&self) -> Option<PathBuf> {
        self.dir.clone().or_else(|| self.memory_limit.map(|_| std::env::temp_dir()))
    }

    /// How each engine is opened for `job`: the cache asked for (or each engine's default), the
    /// data's size, enough sessions, the durability and the data directory's parent.
    pub fn open_options(&self, job: &dyn Job) -> OpenOptions {
        OpenOptions {
            cache_bytes: self.cache,
            data_bytes: job.data_bytes(),
            sessions: self.threads.iter().copied().max().unwrap_or(1).max(self.load_threads()) + 2,
            durability: self.durability(),
            dir: self.data_parent(),
            tern_page_size: self.tern_page_size.map(|b| usize::try_from(b).unwrap_or(usize::MAX)),
            tern_row_cache_percent: self.tern_row_cache,
        }
    }

    /// The durability level asked for.
    pub fn durability(&self) -> Durability {
        match self.durability {
            DurabilityArg::None => Durability::None,
            DurabilityArg::Sync => Durability::Sync,
            DurabilityArg::Nosync => Durability::NoSync,
            DurabilityArg::Periodic => {
                Durability::Periodic(Duration::from_millis(self.periodic_ms.unwrap_or(DEFAULT_PERIODIC_MS)))
            }
        }
    }

    /// The parameters that name the durability in each record: `durability`, and
    /// `periodic_ms` for the periodic level.
    fn durability_params(&self) -> Vec<(&'static str, Value)> {
        let d = self.durability();
        let mut params = vec![("durability", json!(d.name()))];
        if let Durability::Periodic(every) = d {
            params.push(("periodic_ms", json!(every.as_millis() as u64)));
        }
        params
    }

    /// The engines asked for, or `default`; each checked against this build.
    pub fn engines(&self, default: &[&str]) -> Result<Vec<String>, String> {
        let names: Vec<String> = self.engine.clone().unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect());
        let available = tern_peers::available();
        for n in &names {
            if !available.contains(&n.as_str()) && !tern_peers::TERN_VARIANTS.contains(&n.as_str()) {
                return Err(if tern_peers::ENGINES.contains(&n.as_str()) {
                    format!(
                        "engine {n:?} is not in this build: build with `--features peers` (after \
                         scripts/install-peers.sh), e.g. `cargo run --release --features peers -- bench ...`"
                    )
                } else {
                    tern_peers::unknown_engine(n)
                });
            }
        }
        if names.is_empty() {
            return Err("--engine names no engine".into());
        }
        Ok(names)
    }

    fn load_threads(&self) -> usize {
        self.load_threads.unwrap_or_else(|| self.threads.iter().copied().max().unwrap_or(1))
    }
}

/// One engine under test and the shared state a job's threads use on it.
pub struct EngineState {
    pub name: String,
    pub engine: Box<dyn Engine>,
    /// The next item to insert (YCSB inserts, TPC-B history rows).
    pub next: CachePadded<AtomicU64>,
    /// Items `0..acked` are known to be in (YCSB: for `latest`).
    pub acked: CachePadded<AtomicU64>,
    /// Measurements run so far: with the seed, picks each run's sequence, the same on every
    /// engine.
    runs: AtomicU64,
}

/// What a benchmark runs on each engine.
pub trait Job: Sync {
    /// The `bench` field of its records.
    fn bench(&self) -> &'static str;
    /// The workload name (`a`, ..., `tpcb`).
    fn workload(&self) -> String;
    /// Parameters reported with each record besides workload and threads.
    fn params(&self) -> Vec<(&'static str, Value)>;
    /// A line describing the job for the report's title.
    fn describe(&self) -> String;
    /// Items in the load phase.
    fn load_items(&self) -> u64;
    /// Bytes of data (for sizing engine caches).
    fn data_bytes(&self) -> u64;
    /// Item `i` of the load phase: its key and value.
    fn load_item(&self, i: u64, key: &mut Vec<u8>, value: &mut Vec<u8>);
    /// Called once per engine after its load: sets up shared state.
    fn loaded(&self, engine: &EngineState);
    /// One thread of one measurement: runs operations until `ctl` stops it or `quota` is
    /// done. An engine error ends the thread with `Err`.
    fn run_thread(
        &self,
        engine: &EngineState,
        session: &mut dyn Session,
        seed: u64,
        quota: Option<u64>,
        ctl: &Control,
    ) -> Result<ThreadResult, String>;
    /// After the run: checks the engine's data (TPC-B's balances); a line for the report.
    fn check(&self, engine: &EngineState) -> Result<Option<String>, String>;
    /// The job as data, to run it in a worker process.
    fn spec(&self) -> JobSpec;
}

/// `--dir`: an existing directory, or one that can be created.
pub fn check_dir(dir: &Path) -> Result<(), String> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!("--dir {}: not a directory", dir.display()));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("--dir {}: {e}", dir.display()))
}

/// Which job a serialized [`Job`] is: what a worker process (`--memory-limit`) is told to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum JobSpec {
    Ycsb(super::ycsb::YcsbJob),
    Tpcb(super::tpcb::TpcbJob),
}

impl JobSpec {
    /// The job itself.
    pub fn into_job(self) -> Box<dyn Job> {
        match self {
            JobSpec::Ycsb(j) => Box::new(j),
            JobSpec::Tpcb(j) => Box::new(j),
        }
    }
}

/// An engine the driver runs jobs on: open in this process ([`LocalEngine`]), or in a worker
/// process of its own in a memory cgroup ([`super::worker::Worker`], `--memory-limit`). Jobs are
/// named by their index in the run's job list.
pub trait EngineRun {
    /// The engine's name (`tern`, `lmdb`, ...).
    fn name(&self) -> &str;
    /// The engine's configuration line.
    fn config(&self) -> String;
    /// The cache the engine has (`None`: no cache of its own, LMDB).
    fn cache_bytes(&self) -> Option<u64>;
    /// Bytes the engine's data directory took after the load (allocated blocks, as `du`);
    /// `None` before the load and for an engine without a directory (tern in memory).
    fn disk_bytes(&self) -> Option<u64>;
    /// The memory limit the engine runs under (its worker's cgroup), if any.
    fn memory_limit(&self) -> Option<u64> {
        None
    }
    /// A line on how the memory limit is applied, for the report.
    fn limit_note(&self) -> Option<String> {
        None
    }
    /// The engine's data directory (`None`: none, or not known yet).
    fn data_dir(&self) -> Option<PathBuf>;
    /// Loads job `job`'s items `items` (timed; in job order, split over the load threads);
    /// `None` if interrupted.
    fn load(&self, job: usize, items: std::ops::Range<u64>) -> Result<Option<Sample>, String>;
    /// Sets up job `job`'s shared state after the load and earlier jobs ([`Job::loaded`]).
    fn prepare(&self, job: usize) -> Result<(), String>;
    /// One measurement of job `job` with `threads` threads, for `secs` seconds if given (a
    /// warm-up), else as the run's `--duration` or `--operations` say; failures are collected
    /// (the sample then does not count the failed threads); `None` if interrupted.
    fn measure(&self, job: usize, threads: usize, secs: Option<f64>, failures: &Mutex<Vec<String>>) -> Option<Sample>;
    /// Checks the engine's data after job `job`'s run ([`Job::check`]).
    fn check(&self, job: usize) -> Result<Option<String>, String>;
}

/// An engine open in this process, with the jobs of the run.
pub struct LocalEngine<'a> {
    pub state: EngineState,
    jobs: &'a [&'a dyn Job],
    args: &'a DriverArgs,
    /// Set by the load.
    disk_bytes: Mutex<Option<u64>>,
    /// Draw a progress bar while loading (not in a worker process).
    progress: bool,
}

impl<'a> LocalEngine<'a> {
    /// Opens engine `name` for `jobs` (sized for the first one's data) as `args` asks.
    pub fn open(
        name: &str,
        args: &'a DriverArgs,
        jobs: &'a [&'a dyn Job],
        progress: bool,
    ) -> Result<LocalEngine<'a>, String> {
        let first = *jobs.first().ok_or("no workload to run")?;
        let engine = tern_peers::open(name, args.open_options(first)).map_err(|e| format!("opening {name}: {e}"))?;
        let state = EngineState {
            name: name.to_string(),
            engine,
            next: CachePadded::new(AtomicU64::new(0)),
            acked: CachePadded::new(AtomicU64::new(0)),
            runs: AtomicU64::new(0),
        };
        Ok(LocalEngine { state, jobs, args, disk_bytes: Mutex::new(None), progress })
    }

    /// The engine's data directory, if it has one.
    pub fn data_dir(&self) -> Option<PathBuf> {
        self.state.engine.data_dir().map(Path::to_path_buf)
    }

    fn job(&self, i: usize) -> Result<&'a dyn Job, String> {
        self.jobs.get(i).copied().ok_or_else(|| format!("no job {i} (the run has {})", self.jobs.len()))
    }
}

impl EngineRun for LocalEngine<'_> {
    fn name(&self) -> &str {
        &self.state.name
    }

    fn config(&self) -> String {
        self.state.engine.config()
    }

    fn cache_bytes(&self) -> Option<u64> {
        self.state.engine.cache_bytes()
    }

    fn disk_bytes(&self) -> Option<u64> {
        *self.disk_bytes.lock()
    }

    fn data_dir(&self) -> Option<PathBuf> {
        LocalEngine::data_dir(self)
    }

    fn load(&self, i: usize, items: std::ops::Range<u64>) -> Result<Option<Sample>, String> {
        let (job, e, args) = (self.job(i)?, &self.state, self.args);
        let threads = args.load_threads();
        let (first, total) = (items.start, items.end.saturating_sub(items.start));
        let progress = if self.progress { ProgressBar::new(total) } else { ProgressBar::hidden() };
        progress.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        progress.set_message(format!("{}: loading {} into {}", job.bench(), job.workload(), e.name));
        let failure = Mutex::new(None);
        let sample = run_threads_to_completion(threads, |t, ctl| {
            let lo = first + total * t as u64 / threads as u64;
            let hi = first + total * (t as u64 + 1) / threads as u64;
            match load_range(e, job, lo..hi, args.load_batch, ctl, &progress) {
                Ok(n) => ThreadResult::new(n, None),
                Err(m) => {
                    failure.lock().get_or_insert(m);
                    ThreadResult::new(0, None)
                }
            }
        });
        progress.finish_and_clear();
        if let Some(m) = failure.into_inner() {
            return Err(format!("{}: loading {}: {m}", e.name, job.workload()));
        }
        *self.disk_bytes.lock() = e.engine.data_dir().map(dir_bytes);
        Ok(sample)
    }

    fn prepare(&self, i: usize) -> Result<(), String> {
        self.job(i)?.loaded(&self.state);
        Ok(())
    }

    fn measure(&self, i: usize, threads: usize, secs: Option<f64>, failures: &Mutex<Vec<String>>) -> Option<Sample> {
        match self.job(i) {
            Ok(job) => measure(job, &self.state, self.args, threads, secs, failures),
            Err(m) => {
                failures.lock().push(format!("{}: {m}", self.state.name));
                None
            }
        }
    }

    fn check(&self, i: usize) -> Result<Option<String>, String> {
        self.job(i)?.check(&self.state)
    }
}

/// Bytes the files under `dir` take on disk (allocated blocks, as `du`: LMDB's map file is
/// sparse); what cannot be read counts nothing.
pub fn dir_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&entry.path()),
            Ok(m) => m.blocks().saturating_mul(512),
            Err(_) => 0,
        })
        .sum()
}

/// This process's reads so far, from `/proc/self/io` (in a worker process, that is
/// `/proc/<worker pid>/io`): `read_bytes`, the bytes it caused to be fetched from the storage
/// layer (block devices; page-cache hits and tmpfs count nothing, page faults on a mapped file
/// count), and `syscr`, its read system calls (`read`, `pread64`, `readv`, ...; served from the
/// page cache or not; page faults are not calls). `None` where the kernel does not keep them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcIo {
    pub read_bytes: u64,
    pub syscr: u64,
}

impl ProcIo {
    /// The counters now.
    pub fn now() -> Option<ProcIo> {
        ProcIo::parse(&std::fs::read_to_string("/proc/self/io").ok()?)
    }

    /// Reads the two fields from the text of a `/proc/<pid>/io` file.
    pub fn parse(text: &str) -> Option<ProcIo> {
        let field =
            |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse::<u64>().ok());
        Some(ProcIo { read_bytes: field("read_bytes")?, syscr: field("syscr")? })
    }
}

/// Load batches: this many items per write transaction unless `--load-batch` says otherwise.
const DEFAULT_LOAD_BATCH: u64 = 1000;
/// The largest `--load-batch`: each load thread builds its batch in memory before writing it
/// (two vectors per item: about 230 MB per thread at a million 116-byte items, inside the
/// engine's worker under `--memory-limit`).
const MAX_LOAD_BATCH: u64 = 1_000_000;

fn load_range(
    e: &EngineState,
    job: &dyn Job,
    range: std::ops::Range<u64>,
    batch_items: u64,
    ctl: &Control,
    progress: &ProgressBar,
) -> Result<u64, String> {
    let mut session = e.engine.session().map_err(|m| m.to_string())?;
    let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut start = range.start;
    while start < range.end && ctl.running() {
        let end = (start + batch_items).min(range.end);
        batch.resize_with((end - start) as usize, Default::default);
        for (i, (k, v)) in (start..end).zip(batch.iter_mut()) {
            job.load_item(i, k, v);
        }
        tern_peers::load(session.as_mut(), &batch).map_err(|m| m.to_string())?;
        progress.inc(end - start);
        start = end;
    }
    Ok(start - range.start)
}

fn phase_record(
    job: &dyn Job,
    e: &dyn EngineRun,
    phase: &str,
    threads: usize,
    s: &Sample,
    durability: Vec<(&'static str, Value)>,
) -> Record {
    let mut params = serde_json::Map::new();
    params.insert("workload".into(), json!(job.workload()));
    params.insert("phase".into(), json!(phase));
    for (k, v) in job.params().into_iter().chain(durability) {
        params.insert(k.into(), v);
    }
    let mut extra = serde_json::Map::new();
    extra.insert("engine".into(), json!(e.name()));
    extra.insert("fairness".into(), runner::round3(s.fairness()));
    extra.extend(engine_fields(e));
    Record {
        ops_per_sec: s.ops_per_sec(),
        min_ops_per_sec: s.ops_per_sec(),
        max_ops_per_sec: s.ops_per_sec(),
        ..Record::single(job.bench(), e.name().to_string(), threads, params, s.ops(), s.secs, extra)
    }
}

/// What every record of an engine carries about its memory: `cache_bytes` (null: no cache of
/// its own), `memory_limit_bytes` (null: none), `disk_bytes` (null: no data directory).
fn engine_fields(e: &dyn EngineRun) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("cache_bytes".into(), json!(e.cache_bytes()));
    m.insert("memory_limit_bytes".into(), json!(e.memory_limit()));
    m.insert("disk_bytes".into(), json!(e.disk_bytes()));
    m
}

/// One measurement of `job` on `e` with `threads` threads, for `secs` if given (else as `args`
/// say); failures are collected. Adds the process's reads during it per operation:
/// `read_bytes_per_op` and `reads_per_op` (from [`ProcIo`]; null where unavailable).
fn measure(
    job: &dyn Job,
    e: &EngineState,
    args: &DriverArgs,
    threads: usize,
    secs: Option<f64>,
    failures: &Mutex<Vec<String>>,
) -> Option<Sample> {
    let run = e.runs.fetch_add(1, Relaxed);
    let body = |t: usize, ctl: &Control| {
        // A warm-up runs for its time, whatever --operations says.
        let quota = args
            .operations
            .filter(|_| secs.is_none())
            .map(|n| n / threads as u64 + u64::from((t as u64) < n % threads as u64));
        let seed = args.seed ^ (run << 32) ^ ((t as u64 + 1) << 16);
        let result = e
            .engine
            .session()
            .map_err(|m| m.to_string())
            .and_then(|mut s| job.run_thread(e, s.as_mut(), seed, quota, ctl));
        result.unwrap_or_else(|m| {
            failures.lock().push(format!("{}: {m}", e.name));
            ThreadResult::new(0, None)
        })
    };
    let before = e.engine.wal_stats();
    let latches_before = e.engine.latch_stats();
    let io_before = ProcIo::now();
    let mut sample = match (secs, args.operations) {
        (Some(secs), _) => run_threads(threads, Duration::from_secs_f64(secs), body),
        (None, Some(_)) => run_threads_to_completion(threads, body),
        (None, None) => run_threads(threads, Duration::from_secs_f64(args.duration), body),
    }?;
    let io = io_before.zip(ProcIo::now());
    let ops = sample.ops().max(1) as f64;
    let per_op = |f: fn(&ProcIo) -> u64| {
        io.map_or(Value::Null, |(a, b)| runner::round3(f(&b).saturating_sub(f(&a)) as f64 / ops))
    };
    sample.extra.insert("read_bytes_per_op".into(), per_op(|x| x.read_bytes));
    sample.extra.insert("reads_per_op".into(), per_op(|x| x.syscr));
    let commits: u64 = sample.by_op.iter().filter(|o| WRITE_OPS.contains(&o.name)).map(|o| o.ops).sum();
    sample.extra.insert("commits_per_sec".into(), runner::round3(commits as f64 / sample.secs.max(1e-9)));
    if let (Some(before), Some(after)) = (before, e.engine.wal_stats()) {
        sample.extra.extend(wal_figures(&before, &after, sample.secs));
    }
    if let (Some(before), Some(after)) = (latches_before, e.engine.latch_stats()) {
        sample.extra.insert("latch_waits".into(), latch_figures(&before, &after, ops));
    }
    Some(sample)
}

/// The latch classes that waited between two snapshots of the counters, longest total wait
/// first, each with `class`, `waits` (acquisitions that had to wait), `parks`, `spin_rounds`,
/// `wait_ns` (summed over the waiting threads), and per operation of the run
/// (`ops`): `waits_per_kop`, `parks_per_kop` (per 1000) and `wait_ns_per_op`.
fn latch_figures(before: &[LatchStats], after: &[LatchStats], ops: f64) -> Value {
    let mut waited: Vec<LatchStats> = after
        .iter()
        .map(|a| before.iter().find(|b| b.class == a.class).map_or_else(|| a.clone(), |b| a.since(b)))
        .filter(|d| d.contended > 0)
        .collect();
    waited.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.class.cmp(b.class)));
    let per = |n: u64, scale: f64| runner::round3(n as f64 * scale / ops.max(1.0));
    Value::Array(
        waited
            .iter()
            .map(|d| {
                json!({
                    "class": d.class,
                    "waits": d.contended,
                    "parks": d.parks,
                    "spin_rounds": d.spin_rounds,
                    "wait_ns": d.wait_ns,
                    "waits_per_kop": per(d.contended, 1000.0),
                    "parks_per_kop": per(d.parks, 1000.0),
                    "wait_ns_per_op": per(d.wait_ns, 1.0),
                })
            })
            .collect(),
    )
}

/// Operation types that commit a write transaction (`commits_per_sec` counts them).
const WRITE_OPS: [&str; 4] = ["update", "insert", "rmw", "txn"];

/// The largest group size bucket `i` of [`WalStats::group_sizes`] holds (the last is open).
fn bucket_top(i: usize) -> u64 {
    if i + 1 < GROUP_BUCKETS {
        1 << i
    } else {
        u64::MAX
    }
}

/// The label of group size bucket `i`: `1`, `2`, `3-4`, ..., `129+`.
pub fn bucket_label(i: usize) -> String {
    match i {
        0 => "1".into(),
        1 => "2".into(),
        _ if i + 1 == GROUP_BUCKETS => format!("{}+", (1u64 << (i - 1)) + 1),
        _ => format!("{}-{}", (1u64 << (i - 1)) + 1, 1u64 << i),
    }
}

/// What the log did between two snapshots of its counters `secs` apart: `wal_records`
/// (commits logged), `wal_flushes` (writes, one per group), `wal_syncs` (`fdatasync`s),
/// `syncs_per_sec`, `commits_per_sync`, `commits_per_flush`, `group_sizes` (flushes per group
/// size bucket: 1, 2, 3-4, ..., 65-128, 129+), `group_median` (the median group's bucket's upper
/// bound, as [`WalStats::group_median`]) and `group_max`. The log keeps only its all-time
/// largest group: `group_max` is exact when this interval raised it (`group_max_exact`), and
/// otherwise the least of that all-time largest and the top of the highest bucket used.
pub fn wal_figures(before: &WalStats, after: &WalStats, secs: f64) -> serde_json::Map<String, Value> {
    let records = after.records.saturating_sub(before.records);
    let written = after.records_written.saturating_sub(before.records_written);
    let flushes = after.flushes.saturating_sub(before.flushes);
    let syncs = after.syncs.saturating_sub(before.syncs);
    let groups: [u64; GROUP_BUCKETS] =
        std::array::from_fn(|i| after.group_sizes[i].saturating_sub(before.group_sizes[i]));
    let median = WalStats { group_sizes: groups, ..WalStats::default() }.group_median();
    let (max, exact) = if after.max_group > before.max_group {
        (after.max_group, true)
    } else {
        match groups.iter().rposition(|&n| n > 0) {
            None => (0, true),
            Some(i) => (before.max_group.min(bucket_top(i)), i == 0),
        }
    };
    let per = |a: u64, b: u64| if b == 0 { Value::Null } else { runner::round3(a as f64 / b as f64) };
    let mut m = serde_json::Map::new();
    m.insert("wal_records".into(), json!(records));
    m.insert("wal_flushes".into(), json!(flushes));
    m.insert("wal_syncs".into(), json!(syncs));
    m.insert("syncs_per_sec".into(), runner::round3(syncs as f64 / secs.max(1e-9)));
    m.insert("commits_per_sync".into(), per(written, syncs));
    m.insert("commits_per_flush".into(), per(written, flushes));
    m.insert("group_median".into(), json!(median));
    m.insert("group_max".into(), json!(max));
    m.insert("group_max_exact".into(), json!(exact));
    m.insert("group_sizes".into(), json!(groups));
    m
}

/// Loads the first job's `total` items into every engine, in `parts` turns of about
/// `total / parts` items each (engine after engine within a turn); returns each engine's load
/// as one sample (operations and seconds summed over its turns). Stops early, with the engines
/// loaded so far, if interrupted.
fn load_in_turns(engines: &[Box<dyn EngineRun + '_>], total: u64, parts: u64) -> Result<Vec<Sample>, String> {
    let mut loads: Vec<Option<Sample>> = engines.iter().map(|_| None).collect();
    for part in 0..parts {
        let items = total * part / parts..total * (part + 1) / parts;
        for (e, load) in engines.iter().zip(loads.iter_mut()) {
            let Some(sample) = e.load(0, items.clone())? else {
                return Ok(loads.into_iter().flatten().collect());
            };
            match load {
                Some(so_far) => so_far.absorb(sample),
                None => *load = Some(sample),
            }
        }
    }
    Ok(loads.into_iter().flatten().collect())
}

/// Runs `jobs` on `engine_names`: opens each engine and loads it once (with the first job's
/// load: the jobs must share it), then runs the jobs in order on the same data, every
/// (job, thread count) point with the engines interleaved; prints the tables and the key
/// ratios, writes the chart. With `--memory-limit` each engine lives in a worker process of
/// its own, in a memory cgroup ([`super::worker`]); the rounds are scheduled here the same way.
pub fn run(jobs: &[&dyn Job], engine_names: &[String], args: &DriverArgs) -> Result<(), String> {
    harness::enable_hardware_counters();
    let first = *jobs.first().ok_or("no workload to run")?;
    let engines: Vec<Box<dyn EngineRun + '_>> = match args.memory_limit {
        None => engine_names
            .iter()
            .map(|name| LocalEngine::open(name, args, jobs, true).map(|e| Box::new(e) as Box<dyn EngineRun>))
            .collect::<Result<_, _>>()?,
        Some(limit) => super::worker::spawn_all(engine_names, args, jobs, limit)?
            .into_iter()
            .map(|w| Box::new(w) as Box<dyn EngineRun>)
            .collect(),
    };
    let load_threads = args.load_threads();
    let loads = load_in_turns(&engines, first.load_items(), args.load_parts)?;
    let mut load_records = Vec::new();
    for (e, sample) in engines.iter().zip(&loads) {
        let params = [("load_batch", json!(args.load_batch)), ("load_parts", json!(args.load_parts))];
        let params = params.into_iter().chain(args.durability_params()).collect();
        load_records.push(phase_record(first, e.as_ref(), "load", load_threads, sample, params));
    }
    // Every engine's writes reach the disk before any run: the last engine loaded must not pay
    // for the write-back of the ones before it.
    let dirs: Vec<PathBuf> = engines.iter().filter_map(|e| e.data_dir()).collect();
    let settled = super::settle::sync_dirs(&dirs);
    for r in &mut load_records {
        r.extra.insert("synced_after_load_secs".into(), json!(runner::round3(settled.secs)));
    }
    let mut load_notes = memory_notes(&engines);
    load_notes.push(settled.line());
    let title = format!(
        "{} load phase ({} thread(s), {} items per transaction): {}",
        first.bench(),
        load_threads,
        args.load_batch,
        first.describe()
    );
    emit(&load_records, args.json, &title, &load_notes);
    let mut series: Vec<Series> = Vec::new();
    let mut failed = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        for e in &engines {
            e.prepare(j)?;
        }
        let failures = Mutex::new(Vec::new());
        let warm_note = warm_up(&engines, j, args, &failures);
        let mut cases = Vec::new();
        for &t in &args.threads {
            let variants: Vec<(String, RunFn<'_>)> = engines
                .iter()
                .map(|e| {
                    let failures = &failures;
                    (e.name().to_string(), Box::new(move || e.measure(j, t, None, failures)) as RunFn<'_>)
                })
                .collect();
            let mut params = vec![("workload", json!(job.workload())), ("phase", json!("run"))];
            params.extend(job.params());
            params.extend(args.durability_params());
            let baseline = engine_names.iter().any(|n| n == "tern").then(|| "tern".to_string());
            cases.push(Case { params, threads: t, variants, baseline });
        }
        let mut records =
            if harness::interrupted() { Vec::new() } else { runner::run(job.bench(), &cases, args.rounds) };
        for r in &mut records {
            r.extra.insert("engine".into(), json!(r.variant));
            r.extra.insert("warmup_secs".into(), json!(args.warmup));
            if let Some(e) = engines.iter().find(|e| e.name() == r.variant) {
                r.extra.extend(engine_fields(e.as_ref()));
            }
        }
        let mut notes = vec![format!("  {}", job.describe())];
        notes.extend(warm_note);
        notes.extend(engine_notes(&engines, args));
        notes.extend(io_table(&records));
        notes.extend(commit_table(&records, args.durability()));
        notes.extend(latency_table(&records, args.sample_every));
        notes.extend(latch_table(&records));
        let mut checks = Vec::new();
        for e in &engines {
            match e.check(j) {
                Ok(Some(line)) => checks.push(format!("  {}: {line}", e.name())),
                Ok(None) => {}
                Err(m) => failed.push(format!("{}: {m}", e.name())),
            }
        }
        if !checks.is_empty() {
            notes.push("\nchecks after the run:".into());
            notes.extend(checks);
        }
        notes.extend(key_ratios(&records));
        let title = format!(
            "{} {}: run phase, {}; {} round(s); {} CPUs",
            job.bench(),
            job.workload(),
            match args.operations {
                Some(n) => format!("{n} operations per point"),
                None => format!("{} s per point", args.duration),
            } + &if args.warmup > 0.0 { format!(" after a {} s warm-up", args.warmup) } else { String::new() },
            args.rounds,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        emit(&records, args.json, &title, &notes);
        failed.extend(failures.lock().drain(..));
        for r in &records {
            let name = if jobs.len() > 1 { format!("{} {}", r.variant, job.workload()) } else { r.variant.clone() };
            match series.iter_mut().find(|s| s.name == name) {
                Some(s) => s.points.push((r.threads, r.ops_per_sec)),
                None => series.push(Series { name, points: vec![(r.threads, r.ops_per_sec)] }),
            }
        }
        if harness::interrupted() {
            break;
        }
    }
    // Workers quit and their cgroups go before the chart and the verdict.
    drop(engines);
    if let Some(path) = &args.plot {
        if !series.is_empty() {
            let workloads: Vec<String> = jobs.iter().map(|j| j.workload()).collect();
            let title = format!("{} {}: throughput", jobs[0].bench(), workloads.join(", "));
            let subtitle = jobs.iter().map(|j| j.describe()).collect::<Vec<_>>().join("; ");
            plot::throughput_chart(path, &title, &subtitle, &series)?;
            eprintln!("chart written to {}", path.display());
        }
    }
    if !failed.is_empty() {
        failed.dedup();
        return Err(format!(
            "engine errors (the figures above do not count the failed threads):\n  {}",
            failed.join("\n  ")
        ));
    }
    Ok(())
}

/// `--warmup`: runs job `job` on each engine in turn for the warm-up's seconds at the largest
/// thread count, unmeasured (failures are collected); returns the report's line on it, none
/// without a warm-up.
fn warm_up(
    engines: &[Box<dyn EngineRun + '_>],
    job: usize,
    args: &DriverArgs,
    failures: &Mutex<Vec<String>>,
) -> Option<String> {
    if args.warmup <= 0.0 {
        return None;
    }
    let threads = args.threads.iter().copied().max().unwrap_or(1);
    let mut rates = Vec::new();
    for e in engines {
        if harness::interrupted() {
            break;
        }
        let done = e.measure(job, threads, Some(args.warmup), failures);
        rates.push(match done {
            Some(s) => format!("{} {} operations/s ({} operations)", e.name(), si(s.ops_per_sec()), s.ops()),
            None => format!("{} -", e.name()),
        });
    }
    Some(format!(
        "  warm-up before the points: each engine ran the workload for {} s at {threads} thread(s), not measured: {}",
        args.warmup,
        rates.join(", ")
    ))
}

/// A byte count for the tables: `-` when there is none.
fn mib_or(bytes: Option<u64>, none: &str) -> String {
    bytes.map_or_else(|| none.to_string(), tern_peers::format_mib)
}

/// After the load: each engine's cache, memory limit and data on disk.
fn memory_notes(engines: &[Box<dyn EngineRun + '_>]) -> Vec<String> {
    let mut notes = vec![
        "\nmemory per engine: cache (the engine's own), memory limit (its worker's cgroup: heap and page cache), \
         data on disk after the load (allocated blocks of its directory):"
            .to_string(),
    ];
    for e in engines {
        notes.push(format!(
            "  {:<10} cache {:<24} memory limit {:<10} on disk {}",
            e.name(),
            mib_or(e.cache_bytes(), "none (OS page cache)"),
            mib_or(e.memory_limit(), "none"),
            mib_or(e.disk_bytes(), "- (no directory)")
        ));
    }
    notes
}

/// Per record: the engine's cache, memory limit, data on disk, and its reads per operation
/// during the run (the median round's, from `/proc/<pid>/io`).
fn io_table(records: &[Record]) -> Vec<String> {
    if records.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![
        "\nmemory and reads per engine: cache, memory limit, data on disk after the load; per operation during \
         the run (median round, /proc/<pid>/io): read B/op = bytes fetched from storage (read_bytes: page-cache \
         hits and tmpfs count nothing), reads/op = read system calls (syscr, cached or not; mmap faults are \
         not calls):"
            .to_string(),
        format!(
            "  {:<10} {:>7}  {:>20}  {:>12}  {:>12}  {:>12}  {:>9}",
            "engine", "threads", "cache", "memory limit", "on disk", "read B/op", "reads/op"
        ),
    ];
    for r in records {
        let bytes = |k: &str| r.extra.get(k).and_then(Value::as_u64);
        let per_op = |k: &str| r.extra.get(k).and_then(Value::as_f64).map_or("-".into(), |x| format!("{x:.2}"));
        lines.push(format!(
            "  {:<10} {:>7}  {:>20}  {:>12}  {:>12}  {:>12}  {:>9}",
            r.variant,
            r.threads,
            mib_or(bytes("cache_bytes"), "none (page cache)"),
            mib_or(bytes("memory_limit_bytes"), "none"),
            mib_or(bytes("disk_bytes"), "no directory"),
            per_op("read_bytes_per_op"),
            per_op("reads_per_op")
        ));
    }
    lines
}

/// Each engine's configuration, the durability every engine ran with, where the data lived,
/// the memory limit, and the counters.
fn engine_notes(engines: &[Box<dyn EngineRun + '_>], args: &DriverArgs) -> Vec<String> {
    let durability = args.durability();
    let mut notes = vec![format!("\nengines (same durability everywhere: {}):", durability.describe())];
    for e in engines {
        notes.push(format!("  {:<10} {}", e.name(), e.config()));
    }
    let options = OpenOptions { durability, dir: args.data_parent(), ..OpenOptions::default() };
    let on_disk = engines.iter().any(|e| e.name() != "tern") || durability != Durability::None;
    if on_disk {
        let parent = options.parent_dir();
        let (device, fs) = mount_of(&parent).unwrap_or_else(|| ("?".into(), "?".into()));
        let mut line = format!("data directories under {} (on {device}, {fs})", parent.display());
        if fs == "tmpfs" && durability != Durability::None {
            line.push_str(": WARNING: a flush to tmpfs costs nothing, so this measures no disk");
        } else if fs == "tmpfs" && args.memory_limit.is_some() {
            line.push_str(
                ": WARNING: files on tmpfs are memory that cannot be evicted: they count against the limit in full \
                 and no read reaches a disk",
            );
        }
        notes.push(line);
    }
    if args.memory_limit.is_some() {
        notes.push(
            "memory limit: each engine in a worker process of its own, in a memory cgroup (heap, page cache of \
             its files and kernel memory count):"
                .into(),
        );
        notes.extend(engines.iter().filter_map(|e| e.limit_note().map(|l| format!("  {:<10} {l}", e.name()))));
    }
    notes.push(match counters::availability() {
        Ok(events) => format!("hardware counters: {} (per operation, in the JSON lines)", events.join(", ")),
        Err(why) => format!("hardware counters: unavailable ({why})"),
    });
    notes
}

/// The device and file system type `path` is on, from `/proc/self/mounts` (the longest mount
/// point that contains it).
fn mount_of(path: &Path) -> Option<(String, String)> {
    let path = std::fs::canonicalize(path).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let mut best: Option<(usize, String, String)> = None;
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(device), Some(point), Some(fs)) = (fields.next(), fields.next(), fields.next()) else { continue };
        // Mount points escape spaces as \040.
        let point = point.replace("\\040", " ");
        if path.starts_with(&point) && best.as_ref().is_none_or(|(len, ..)| point.len() >= *len) {
            best = Some((point.len(), device.to_string(), fs.to_string()));
        }
    }
    best.map(|(_, device, fs)| (device, fs))
}

/// Commits per second on every engine and, for tern with a log, how its commits were
/// grouped: one line per record (only when commits are durable at some level).
fn commit_table(records: &[Record], durability: Durability) -> Vec<String> {
    if durability == Durability::None || records.iter().all(|r| !r.extra.contains_key("commits_per_sec")) {
        return Vec::new();
    }
    let mut lines = vec![
        format!(
            "\ncommits (durability {}): commits/s = write transactions committed per second (median round); \
             tern's log: fdatasyncs per second, commits per sync, records per flush (group size: the median's \
             bucket, the largest) and flushes per group size",
            durability.name()
        ),
        format!(
            "  {:<10} {:>7}  {:>10}  {:>8}  {:>12}  {:>12}  {:>9}  group sizes (records: flushes)",
            "engine", "threads", "commits/s", "syncs/s", "commits/sync", "group median", "group max"
        ),
    ];
    for r in records {
        let f = |k: &str| r.extra.get(k).and_then(Value::as_f64);
        let commits = f("commits_per_sec").map_or("-".into(), si);
        let mut line = format!("  {:<10} {:>7}  {commits:>10}", r.variant, r.threads);
        if r.extra.contains_key("wal_syncs") {
            let syncs = f("syncs_per_sec").map_or("-".into(), si);
            let per_sync = f("commits_per_sync").map_or("-".into(), |x| format!("{x:.2}"));
            // `group_median` is the median bucket's upper bound (a power of two): show the bucket.
            let median = r.extra.get("group_median").and_then(Value::as_u64).map_or("-".into(), |x| match x {
                0 => "-".into(),
                x => bucket_label((x.trailing_zeros() as usize).min(GROUP_BUCKETS - 1)),
            });
            let exact = r.extra.get("group_max_exact").and_then(Value::as_bool).unwrap_or(true);
            let max = f("group_max").map_or("-".into(), |x| format!("{}{x}", if exact { "" } else { "<= " }));
            let groups: Vec<String> = r
                .extra
                .get("group_sizes")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .enumerate()
                        .filter_map(|(i, n)| n.as_u64().filter(|&n| n > 0).map(|n| format!("{}: {n}", bucket_label(i))))
                        .collect()
                })
                .unwrap_or_default();
            line.push_str(&format!("  {syncs:>8}  {per_sync:>12}  {median:>12}  {max:>9}  {}", groups.join(", ")));
        }
        lines.push(line.trim_end().to_string());
    }
    lines
}

/// Per-operation-type latencies and retries: one line per record.
fn latency_table(records: &[Record], sample_every: u64) -> Vec<String> {
    let ops = ["read", "update", "insert", "scan", "rmw", "txn"];
    let present: Vec<&str> =
        ops.into_iter().filter(|op| records.iter().any(|r| r.extra.contains_key(&format!("{op}_p50_ns")))).collect();
    if present.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "\nlatency per operation type, p50 / p99 / p99.9 (one operation in {sample_every} timed); retries: \
         transactions run again after a conflict or deadlock (median round):"
    )];
    let mut header = format!("  {:<10} {:>7}  {:>8}", "engine", "threads", "retries");
    for op in &present {
        header.push_str(&format!("  {op:<24}"));
    }
    lines.push(header.trim_end().to_string());
    for r in records {
        let retries = r.extra.get("retries").and_then(Value::as_u64).map_or("-".into(), |n| n.to_string());
        let mut line = format!("  {:<10} {:>7}  {retries:>8}", r.variant, r.threads);
        for op in &present {
            let get = |s: &str| r.extra.get(&format!("{op}_{s}")).and_then(Value::as_u64);
            let cell = match (get("p50_ns"), get("p99_ns"), get("p999_ns")) {
                (Some(a), Some(b), Some(c)) => format!("{} / {} / {}", ns(a), ns(b), ns(c)),
                _ => "-".into(),
            };
            line.push_str(&format!("  {cell:<24}"));
        }
        lines.push(line.trim_end().to_string());
    }
    lines
}

/// Where tern's threads waited for latches during the run (median round): the classes with
/// the longest total waits. Empty when no engine reports latch counters or none waited.
fn latch_table(records: &[Record]) -> Vec<String> {
    const SHOWN: usize = 4;
    let rows: Vec<(&Record, &Vec<Value>)> = records
        .iter()
        .filter_map(|r| r.extra.get("latch_waits").and_then(Value::as_array).map(|w| (r, w)))
        .filter(|(_, w)| !w.is_empty())
        .collect();
    if rows.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![
        format!(
            "\nlatch waits (tern's latch classes that waited during the run, median round, the {SHOWN} longest): \
             waits and parks per 1000 operations; wait per operation, summed over the waiting threads (a \
             thread that waits for a preempted holder counts the whole time, so with more threads than CPUs \
             it can exceed the operation's own time)"
        ),
        format!(
            "  {:<10} {:>7}  {:<18} {:>10}  {:>10}  {:>10}",
            "engine", "threads", "class", "waits/kop", "parks/kop", "wait/op"
        ),
    ];
    for (r, waited) in rows {
        for w in waited.iter().take(SHOWN) {
            let f = |k: &str| w.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            let class = w.get("class").and_then(Value::as_str).unwrap_or("?");
            lines.push(format!(
                "  {:<10} {:>7}  {class:<18} {:>10.2}  {:>10.2}  {:>10}",
                r.variant,
                r.threads,
                f("waits_per_kop"),
                f("parks_per_kop"),
                ns(f("wait_ns_per_op").round() as u64)
            ));
        }
    }
    lines
}

/// tern against the best other engine at each thread count.
fn key_ratios(records: &[Record]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut threads: Vec<usize> = records.iter().map(|r| r.threads).collect();
    threads.dedup();
    for t in threads {
        let at: Vec<&Record> = records.iter().filter(|r| r.threads == t).collect();
        let tern = at.iter().find(|r| r.variant == "tern");
        // A peer that measured nothing (its worker died, say) is no best peer.
        let best = at
            .iter()
            // tern's A/B variants (`tern-written`, `tern-norows`, ...) are no peers.
            .filter(|r| !r.variant.starts_with("tern") && r.ops_per_sec > 0.0)
            .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        match (tern, best) {
            (Some(tern), None) => {
                lines.push(format!("  {t} thread(s): tern {} ops/s, no peer measured", si(tern.ops_per_sec)))
            }
            (Some(tern), Some(best)) => {
                let mut line = format!(
                    "  {t} thread(s): tern {} ops/s, best peer {} {} ops/s: tern / best peer = {:.2}x (medians)",
                    si(tern.ops_per_sec),
                    best.variant,
                    si(best.ops_per_sec),
                    tern.ops_per_sec / best.ops_per_sec
                );
                let rows = |r: &Record| r.extra.get("rows_per_sec").and_then(serde_json::Value::as_f64);
                if let (Some(a), Some(b)) = (rows(tern), rows(best)) {
                    line += &format!("; rows/s {} vs {} = {:.2}x", si(a), si(b), a / b.max(f64::MIN_POSITIVE));
                }
                lines.push(line)
            }
            (None, _) => {}
        }
    }
    if !lines.is_empty() {
        lines.insert(0, "\nkey ratios:".into());
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::{key_ratios, latch_figures, latch_table, Record};
    use serde_json::{json, Map};
    use tern::sync::LatchStats;

    /// Only the classes that waited between the snapshots, longest total wait first, as
    /// differences, per operation; a class registered meanwhile counts from zero.
    #[test]
    fn latch_figures_are_the_run_s_waits_longest_first() {
        let stats =
            |class, contended, parks, wait_ns| LatchStats { class, contended, parks, wait_ns, ..LatchStats::default() };
        let before = [stats("a", 10, 1, 1_000), stats("b", 5, 0, 500), stats("c", 7, 7, 7_000)];
        let after =
            [stats("a", 30, 1, 3_000), stats("b", 5, 0, 500), stats("c", 8, 8, 107_000), stats("new", 2, 2, 4_000)];
        let got = latch_figures(&before, &after, 1000.0);
        let classes: Vec<&str> = got.as_array().unwrap().iter().map(|w| w["class"].as_str().unwrap()).collect();
        assert_eq!(classes, ["c", "new", "a"], "b did not wait during the run");
        assert_eq!(got[0]["waits"], json!(1));
        assert_eq!(got[0]["wait_ns_per_op"], json!(100.0));
        assert_eq!(got[2]["waits_per_kop"], json!(20.0));
        assert_eq!(got[1]["parks_per_kop"], json!(2.0));
        let mut extra = Map::new();
        extra.insert("latch_waits".into(), got);
        let r = Record::single("compare", "tern".into(), 32, Map::new(), 1000, 1.0, extra);
        let table = latch_table(&[r]);
        assert_eq!(table.len(), 5, "a title, a header and a line per class that waited: {table:?}");
        assert!(table[2].contains("c") && table[2].contains("100ns"), "{}", table[2]);
        assert!(latch_table(&[at("lmdb", 1, 5)]).is_empty(), "nothing for an engine without latch counters");
    }

    fn at(variant: &str, threads: usize, ops: u64) -> Record {
        Record::single("compare", variant.into(), threads, Map::new(), ops, 1.0, Map::new())
    }

    #[test]
    fn a_peer_that_measured_nothing_is_not_the_best_peer() {
        let lines = key_ratios(&[at("tern", 1, 100), at("lmdb", 1, 50), at("rocksdb", 1, 0)]);
        assert!(lines[1].contains("best peer lmdb") && lines[1].contains("2.00x"), "{lines:?}");
        let lines = key_ratios(&[at("tern", 2, 100), at("rocksdb", 2, 0)]);
        assert!(lines[1].contains("no peer measured") && !lines[1].contains("inf"), "{lines:?}");
    }
}
