//! `--memory-limit`: each engine in a long-lived worker process of its own, in a memory cgroup
//! ([`super::cgroup`]), driven by the parent, which keeps scheduling the rounds (engines
//! interleaved, as in one process).
//!
//! The worker is this same binary, re-run as the hidden `tern bench worker`. The parent spawns
//! it, moves it into its cgroup (before it opens anything), and then talks to it over its
//! stdin and stdout, one JSON object per line: a [`Request`], then one [`Reply`]. `Open` names
//! the engine, the driver's options and the jobs; `Load`, `Prepare`, `Measure` and `Check` run
//! the driver's steps on the engine in the worker ([`LocalEngine`]), where each measurement also
//! reads `/proc/self/io`, the worker's own I/O counters. Samples travel whole (latency
//! histograms as their recorded values), so the parent computes medians and ratios as always.
//! Lines on the worker's stdout that are not replies (a C library printing) go to stderr.
//!
//! Cleanup: dropping a [`Worker`] asks it to quit (it closes the engine, which removes its
//! data directory), kills it if it does not exit, removes a data directory it left, then its
//! cgroup. A second Ctrl-C, which exits at once, kills the workers and removes the cgroups
//! first ([`on_forced_exit`]). A parent killed outright cleans nothing: each worker watches its
//! parent's process id (`watch_parent`) and, once it changed, removes its data directory and
//! exits; the next run removes the empty cgroups (`cgroup::sweep_stale`).

use super::cgroup::{self, MemoryCgroup, Version};
use super::counters::CounterValues;
use super::driver::{DriverArgs, EngineRun, Job, JobSpec, LocalEngine};
use super::harness::{self, new_histogram, OpStats, Sample};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `tern bench worker` (hidden): serves one engine to a parent `tern bench` over stdin/stdout.
#[derive(clap::Args, Clone, Debug)]
pub struct WorkerArgs {}

/// What the parent asks; jobs are named by their index in `Open`'s list. `Measure` with `secs`
/// is a warm-up of that length instead of the run's `--duration`/`--operations`.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Open { engine: String, args: Box<DriverArgs>, jobs: Vec<JobSpec> },
    Load { start: u64, end: u64 },
    Prepare { job: usize },
    Measure { job: usize, threads: usize, secs: Option<f64> },
    Check { job: usize },
    Quit,
}

/// The worker's answer to one request.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Opened {
        config: String,
        cache_bytes: Option<u64>,
        data_dir: Option<PathBuf>,
    },
    Loaded {
        sample: Option<WireSample>,
        disk_bytes: Option<u64>,
    },
    Done,
    Measured {
        sample: Option<WireSample>,
        failures: Vec<String>,
    },
    Checked {
        line: Option<String>,
    },
    /// The request failed; the message says why.
    Failed {
        message: String,
    },
}

/// A [`Sample`] as data.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireSample {
    per_thread: Vec<u64>,
    secs: f64,
    latency: Option<WireHistogram>,
    extra: Map<String, Value>,
    /// Per operation type: name, operations, latencies.
    by_op: Vec<(String, u64, WireHistogram)>,
    counts: Vec<(String, u64)>,
    counters: Option<CounterValues>,
}

/// A histogram as data: its recorded values and their counts (each value stands for its bucket).
type WireHistogram = Vec<(u64, u64)>;

/// A histogram's recorded values and their counts.
fn histogram_to_wire(h: &Histogram<u64>) -> WireHistogram {
    h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect()
}

fn histogram_from_wire(values: &[(u64, u64)]) -> Histogram<u64> {
    let mut h = new_histogram();
    for &(value, count) in values {
        h.saturating_record_n(value, count);
    }
    h
}

/// A name that came over the wire, as the `&'static str` samples keep (each distinct name is
/// kept once: operation types and counts, a handful).
fn intern(name: &str) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = names.iter().find(|n| **n == name) {
        return known;
    }
    let kept: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.push(kept);
    kept
}

impl WireSample {
    pub fn from_sample(s: &Sample) -> WireSample {
        WireSample {
            per_thread: s.per_thread.clone(),
            secs: s.secs,
            latency: s.latency.as_ref().map(histogram_to_wire),
            extra: s.extra.clone(),
            by_op: s.by_op.iter().map(|o| (o.name.to_string(), o.ops, histogram_to_wire(&o.latency))).collect(),
            counts: s.counts.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            counters: s.counters,
        }
    }

    pub fn into_sample(self) -> Sample {
        Sample {
            per_thread: self.per_thread,
            secs: self.secs,
            latency: self.latency.as_deref().map(histogram_from_wire),
            extra: self.extra,
            by_op: self
                .by_op
                .into_iter()
                .map(|(name, ops, latency)| OpStats {
                    name: intern(&name),
                    ops,
                    latency: histogram_from_wire(&latency),
                })
                .collect(),
            counts: self.counts.into_iter().map(|(k, v)| (intern(&k), v)).collect(),
            counters: self.counters,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The worker process.

/// Runs `tern bench worker`: reads requests from stdin, answers on stdout, until `Quit` or the
/// end of stdin (the parent is gone).
pub fn serve() -> Result<(), String> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout().lock();
    let mut send = |reply: &Reply| -> Result<(), String> {
        let text = serde_json::to_string(reply).map_err(|e| format!("worker: encoding a reply: {e}"))?;
        writeln!(out, "{text}").and_then(|()| out.flush()).map_err(|e| format!("worker: writing a reply: {e}"))
    };
    let mut next = || -> Result<Option<Request>, String> {
        match lines.next() {
            None => Ok(None),
            Some(line) => {
                let line = line.map_err(|e| format!("worker: reading a request: {e}"))?;
                serde_json::from_str(&line).map(Some).map_err(|e| format!("worker: a request that is not one ({e})"))
            }
        }
    };
    let (name, args, specs) = match next()? {
        Some(Request::Open { engine, args, jobs }) => (engine, args, jobs),
        Some(Request::Quit) | None => return Ok(()),
        Some(other) => return Err(format!("worker: the first request must be Open, got {other:?}")),
    };
    harness::enable_hardware_counters();
    // One engine per worker: tern's variants that change process-wide settings may open.
    tern_peers::own_process();
    let owned: Vec<Box<dyn Job>> = specs.into_iter().map(JobSpec::into_job).collect();
    let jobs: Vec<&dyn Job> = owned.iter().map(|j| j.as_ref()).collect();
    let engine = match LocalEngine::open(&name, &args, &jobs, false) {
        Ok(e) => e,
        Err(message) => return send(&Reply::Failed { message }),
    };
    watch_parent(engine.data_dir());
    send(&Reply::Opened { config: engine.config(), cache_bytes: engine.cache_bytes(), data_dir: engine.data_dir() })?;
    while let Some(request) = next()? {
        let reply = match request {
            Request::Open { .. } => Reply::Failed { message: "the engine is already open".into() },
            Request::Load { start, end } => match engine.load(0, start..end) {
                Ok(sample) => Reply::Loaded {
                    sample: sample.as_ref().map(WireSample::from_sample),
                    disk_bytes: engine.disk_bytes(),
                },
                Err(message) => Reply::Failed { message },
            },
            Request::Prepare { job } => match engine.prepare(job) {
                Ok(()) => Reply::Done,
                Err(message) => Reply::Failed { message },
            },
            Request::Measure { job, threads, secs } => {
                let failures = Mutex::new(Vec::new());
                let sample = engine.measure(job, threads, secs, &failures);
                Reply::Measured {
                    sample: sample.as_ref().map(WireSample::from_sample),
                    failures: failures.into_inner(),
                }
            }
            Request::Check { job } => match engine.check(job) {
                Ok(line) => Reply::Checked { line },
                Err(message) => Reply::Failed { message },
            },
            Request::Quit => break,
        };
        send(&reply)?;
    }
    // Closing the engine removes its data directory.
    drop(engine);
    Ok(())
}

/// Ends this worker once its parent (the benchmark) is gone, even in the middle of a request:
/// a worker busy loading reads no request, so the end of its stdin alone would leave it running
/// for minutes. Polls the parent's process id every 250 ms; once it changed (the worker was
/// handed to another process), removes the engine's data directory and exits.
fn watch_parent(data_dir: Option<PathBuf>) {
    let parent = std::os::unix::process::parent_id();
    let watch = move || loop {
        std::thread::sleep(std::time::Duration::from_millis(250));
        if std::os::unix::process::parent_id() != parent {
            // The engine's own threads may still add files meanwhile: a few tries.
            for _ in 0..5 {
                match &data_dir {
                    Some(dir) if std::fs::remove_dir_all(dir).is_err() && dir.exists() => {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    _ => break,
                }
            }
            eprintln!("worker: the benchmark that started this worker is gone; exiting");
            std::process::exit(3);
        }
    };
    // Without the thread, the end of stdin still ends the worker between requests.
    let _ = std::thread::Builder::new().name("tern-worker-watch".into()).spawn(watch);
}

// ---------------------------------------------------------------------------------------------
// The parent's side.

/// The pipes to a worker.
struct Pipe {
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// An engine in a worker process, in a memory cgroup.
pub struct Worker {
    name: String,
    pid: u32,
    child: Arc<std::sync::Mutex<Child>>,
    pipe: Mutex<Pipe>,
    /// Why the worker is gone, once it is.
    dead: Mutex<Option<String>>,
    /// Whether a measurement already reported the worker's death.
    reported: AtomicBool,
    config: String,
    cache: Option<u64>,
    data_dir: Option<PathBuf>,
    disk: Mutex<Option<u64>>,
    /// The registration for [`on_forced_exit`].
    id: u64,
    // Dropped after `Drop::drop` has ended the process.
    cgroup: MemoryCgroup,
}

/// A worker alive, for [`on_forced_exit`]: registration, process, cgroup, data directory.
type Live = (u64, Arc<std::sync::Mutex<Child>>, PathBuf, Option<PathBuf>);
static LIVE: std::sync::Mutex<Vec<Live>> = std::sync::Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// The process is about to exit without unwinding (a second Ctrl-C): kills every worker and
/// removes its cgroup (what cannot be locked at once is left alone).
pub fn on_forced_exit() {
    let Ok(live) = LIVE.try_lock() else { return };
    for (_, child, group, data) in live.iter() {
        if let Ok(mut c) = child.try_lock() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = cgroup::remove(group);
        if let Some(dir) = data {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Starts one worker per engine of `names`, each in a memory cgroup of `limit` bytes, and
/// opens its engine for `jobs`.
pub fn spawn_all(names: &[String], args: &DriverArgs, jobs: &[&dyn Job], limit: u64) -> Result<Vec<Worker>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("--memory-limit: finding this program to re-run it: {e}"))?;
    let specs: Vec<JobSpec> = jobs.iter().map(|j| j.spec()).collect();
    let mut workers = Vec::new();
    for name in names {
        let group = MemoryCgroup::create(&cgroup::group_name(name), limit)?;
        let mut child = Command::new(&exe)
            .args(["bench", "worker"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting the worker for {name} ({}): {e}", exe.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the worker for {name} has no pipes"));
        };
        let id = NEXT_ID.fetch_add(1, Relaxed);
        let pid = child.id();
        let child = Arc::new(std::sync::Mutex::new(child));
        LIVE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((
            id,
            child.clone(),
            group.path().to_path_buf(),
            None,
        ));
        let mut worker = Worker {
            name: name.clone(),
            pid,
            child,
            pipe: Mutex::new(Pipe { stdin: Some(stdin), stdout: BufReader::new(stdout) }),
            dead: Mutex::new(None),
            reported: AtomicBool::new(false),
            config: String::new(),
            cache: None,
            data_dir: None,
            disk: Mutex::new(None),
            id,
            cgroup: group,
        };
        // Into the cgroup before it opens the engine (it waits for `Open`).
        worker.cgroup.add(worker.pid).map_err(|m| format!("--memory-limit: {m}"))?;
        let open = Request::Open { engine: name.clone(), args: Box::new(args.clone()), jobs: specs.clone() };
        match worker.call(&open)? {
            Reply::Opened { config, cache_bytes, data_dir } => {
                worker.config = config;
                worker.cache = cache_bytes;
                worker.data_dir = data_dir.clone();
                let mut live = LIVE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(entry) = live.iter_mut().find(|e| e.0 == id) {
                    entry.3 = data_dir;
                }
            }
            other => return Err(format!("the worker for {name} answered Open with {other:?}")),
        }
        workers.push(worker);
    }
    Ok(workers)
}

fn lock(child: &std::sync::Mutex<Child>) -> std::sync::MutexGuard<'_, Child> {
    child.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Worker {
    /// Sends `request` and waits for the reply; a worker that is gone, or replies `Failed`,
    /// gives an error.
    fn call(&self, request: &Request) -> Result<Reply, String> {
        if let Some(why) = self.dead.lock().clone() {
            return Err(why);
        }
        let mut pipe = self.pipe.lock();
        let text = serde_json::to_string(request).map_err(|e| format!("encoding a request: {e}"))?;
        let sent = match pipe.stdin.as_mut() {
            Some(stdin) => writeln!(stdin, "{text}").and_then(|()| stdin.flush()).is_ok(),
            None => false,
        };
        if !sent {
            return Err(self.died());
        }
        let mut line = String::new();
        loop {
            line.clear();
            match pipe.stdout.read_line(&mut line) {
                Ok(0) | Err(_) => return Err(self.died()),
                Ok(_) => {}
            }
            match serde_json::from_str::<Reply>(line.trim_end()) {
                Ok(Reply::Failed { message }) => return Err(message),
                Ok(reply) => return Ok(reply),
                // Not a reply: something in the worker printed to stdout.
                Err(_) => eprint!("[{} worker] {line}", self.name),
            }
        }
    }

    /// The worker's end, once it is gone: why, as a message (also kept for later calls).
    fn died(&self) -> String {
        let start = Instant::now();
        let status = loop {
            match lock(&self.child).try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if start.elapsed() < Duration::from_secs(5) => std::thread::sleep(Duration::from_millis(10)),
                _ => break None,
            }
        };
        let mut why = format!("the worker process of {} (pid {}) ", self.name, self.pid);
        match status {
            None => why.push_str("stopped answering"),
            Some(status) => {
                use std::os::unix::process::ExitStatusExt;
                match (status.code(), status.signal()) {
                    (Some(code), _) => why.push_str(&format!("exited with status {code}")),
                    (None, Some(signal)) => why.push_str(&format!("was killed by signal {signal}")),
                    _ => why.push_str(&format!("ended: {status}")),
                }
            }
        }
        if let Some(kills) = self.cgroup.oom_kills().filter(|&k| k > 0) {
            why.push_str(&format!(
                ": the kernel's OOM killer ended {kills} process(es) in its cgroup: the engine needs more than \
                 --memory-limit {}",
                tern_peers::format_mib(self.cgroup.limit())
            ));
        }
        *self.dead.lock() = Some(why.clone());
        why
    }

    /// A sample of nothing done: what a measurement on a dead worker counts.
    fn nothing(threads: usize) -> Sample {
        Sample {
            per_thread: vec![0; threads],
            secs: 0.0,
            latency: None,
            extra: Map::new(),
            by_op: Vec::new(),
            counts: Default::default(),
            counters: None,
        }
    }
}

impl EngineRun for Worker {
    fn name(&self) -> &str {
        &self.name
    }

    fn config(&self) -> String {
        self.config.clone()
    }

    fn cache_bytes(&self) -> Option<u64> {
        self.cache
    }

    fn disk_bytes(&self) -> Option<u64> {
        *self.disk.lock()
    }

    fn memory_limit(&self) -> Option<u64> {
        Some(self.cgroup.limit())
    }

    fn limit_note(&self) -> Option<String> {
        let version = match self.cgroup.version() {
            Version::V1 => "v1",
            Version::V2 => "v2",
        };
        let peak = self.cgroup.peak().map_or(String::new(), |p| format!(", peak so far {}", tern_peers::format_mib(p)));
        let oom = self.cgroup.oom_kills().filter(|&k| k > 0).map_or(String::new(), |k| format!(", {k} OOM kill(s)"));
        Some(format!(
            "worker pid {}, limit {}{peak}{oom} (cgroup {version} {})",
            self.pid,
            tern_peers::format_mib(self.cgroup.limit()),
            self.cgroup.path().display()
        ))
    }

    fn data_dir(&self) -> Option<PathBuf> {
        self.data_dir.clone()
    }

    fn load(&self, _job: usize, items: std::ops::Range<u64>) -> Result<Option<Sample>, String> {
        let spinner = ProgressBar::new_spinner();
        spinner.set_style(ProgressStyle::with_template("{elapsed_precise} {spinner} {msg}").expect("static template"));
        spinner.set_message(format!("loading {} in its worker process (pid {})", self.name, self.pid));
        spinner.enable_steady_tick(Duration::from_millis(200));
        let reply = self.call(&Request::Load { start: items.start, end: items.end });
        spinner.finish_and_clear();
        match reply? {
            Reply::Loaded { sample, disk_bytes } => {
                *self.disk.lock() = disk_bytes;
                Ok(sample.map(WireSample::into_sample))
            }
            other => Err(format!("{}: the worker answered Load with {other:?}", self.name)),
        }
    }

    fn prepare(&self, job: usize) -> Result<(), String> {
        match self.call(&Request::Prepare { job })? {
            Reply::Done => Ok(()),
            other => Err(format!("{}: the worker answered Prepare with {other:?}", self.name)),
        }
    }

    fn measure(&self, job: usize, threads: usize, secs: Option<f64>, failures: &Mutex<Vec<String>>) -> Option<Sample> {
        if harness::interrupted() {
            return None;
        }
        let sample = match self.call(&Request::Measure { job, threads, secs }) {
            Ok(Reply::Measured { sample, failures: theirs }) => {
                failures.lock().extend(theirs.into_iter().map(|m| format!("{}: {m}", self.name)));
                sample.map(WireSample::into_sample)
            }
            Ok(other) => {
                failures.lock().push(format!("{}: the worker answered Measure with {other:?}", self.name));
                Some(Worker::nothing(threads))
            }
            // Ended by a second Ctrl-C ([`on_forced_exit`]): nothing to report.
            Err(_) if harness::interrupted() => return None,
            Err(m) => {
                if !self.reported.swap(true, Relaxed) {
                    failures.lock().push(format!("{}: {m}", self.name));
                }
                Some(Worker::nothing(threads))
            }
        };
        // As in one process: a measurement the user interrupted is not reported.
        sample.filter(|_| !harness::interrupted())
    }

    fn check(&self, job: usize) -> Result<Option<String>, String> {
        if self.reported.load(Relaxed) {
            return Ok(None); // its death is reported already
        }
        match self.call(&Request::Check { job })? {
            Reply::Checked { line } => Ok(line),
            other => Err(format!("{}: the worker answered Check with {other:?}", self.name)),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        {
            let mut pipe = self.pipe.lock();
            if let Some(mut stdin) = pipe.stdin.take() {
                let quit = serde_json::to_string(&Request::Quit).unwrap_or_default();
                let _ = writeln!(stdin, "{quit}").and_then(|()| stdin.flush());
                // Dropping stdin ends its input too.
            }
        }
        let start = Instant::now();
        {
            let mut child = lock(&self.child);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    // Closing an engine flushes or syncs what it holds: give it a minute.
                    Ok(None) if start.elapsed() < Duration::from_secs(60) => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Ok(None) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        if let Some(dir) = self.data_dir.as_ref().filter(|d| d.exists()) {
            // The worker did not get to close its engine.
            let _ = std::fs::remove_dir_all(dir);
        }
        LIVE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|(id, ..)| *id != self.id);
        // `self.cgroup` is dropped next: the group is removed.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_cross_the_pipe_whole() {
        let mut latency = new_histogram();
        for v in [1u64, 90, 1234, 99_999, 5_000_000] {
            latency.record_n(v, v % 7 + 1).unwrap();
        }
        let mut read = OpStats::new("read");
        read.ops = 42;
        read.latency = latency.clone();
        let mut counts = std::collections::BTreeMap::new();
        counts.insert("retries", 3);
        let mut extra = Map::new();
        extra.insert("reads_per_op".into(), serde_json::json!(0.25));
        let s = Sample {
            per_thread: vec![20, 22],
            secs: 0.5,
            latency: Some(latency.clone()),
            extra,
            by_op: vec![read],
            counts,
            counters: Some(CounterValues { cycles: Some(7), ..CounterValues::default() }),
        };
        let text = serde_json::to_string(&WireSample::from_sample(&s)).unwrap();
        let back = serde_json::from_str::<WireSample>(&text).unwrap().into_sample();
        assert_eq!((back.per_thread.clone(), back.secs, back.counters), (s.per_thread.clone(), s.secs, s.counters));
        assert_eq!(back.extra, s.extra);
        assert_eq!(back.counts, s.counts);
        for q in [0.0, 0.5, 0.99, 0.999, 1.0] {
            assert_eq!(back.latency.as_ref().unwrap().value_at_quantile(q), latency.value_at_quantile(q));
            assert_eq!(back.by_op[0].latency.value_at_quantile(q), latency.value_at_quantile(q));
        }
        assert_eq!((back.by_op[0].name, back.by_op[0].ops), ("read", 42));
        assert_eq!(intern("read"), intern(&String::from("read")));
    }
}
