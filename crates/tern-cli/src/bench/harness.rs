//! Runs one measurement: N threads released together, stopped together after a duration.
//!
//! Each thread runs its body until [`Control::running`] turns false and returns what it counted.
//! Wall time is taken from the release of the threads to the last one finishing, so a thread that
//! notices the stop late lowers the reported rate rather than inflating it.

use super::counters::{CounterValues, ThreadCounters};
use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Set by the Ctrl-C handler: the current measurement ends early and is discarded.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether the user asked to stop.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Relaxed)
}

/// Installs the Ctrl-C handler (once; later calls are no-ops).
pub fn install_ctrlc() {
    install(true);
}

/// Installs the Ctrl-C handler without its message (worker processes: their parent says it).
pub fn install_ctrlc_quiet() {
    install(false);
}

fn install(announce: bool) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // If a handler cannot be installed, Ctrl-C simply kills the process as usual.
        let _ = ctrlc::set_handler(move || {
            if INTERRUPTED.swap(true, Relaxed) {
                // No unwinding from here: end the worker processes and remove their cgroups.
                super::worker::on_forced_exit();
                std::process::exit(130);
            }
            if announce {
                eprintln!(
                    "\ninterrupted: finishing the current point and printing what was measured (Ctrl-C again to quit)"
                );
            }
        });
    });
}

/// What a worker thread sees of the run. Padded: workers poll `stop` every operation, so it
/// must not share a cache line with anything they write.
pub struct Control {
    stop: CachePadded<AtomicBool>,
}

impl Control {
    /// False once the measurement's time is up (or the user interrupted).
    #[inline]
    pub fn running(&self) -> bool {
        !self.stop.load(Relaxed)
    }
}

/// Set by benchmarks that report hardware counters: each worker thread then counts its own
/// events from release to return (see [`super::counters`]).
static COUNT_HARDWARE: AtomicBool = AtomicBool::new(false);

/// Makes every later measurement read hardware counters per thread, where the kernel allows.
pub fn enable_hardware_counters() {
    COUNT_HARDWARE.store(true, Relaxed);
}

/// What one worker thread counted.
pub struct ThreadResult {
    /// Operations completed.
    pub ops: u64,
    /// Sampled operation latencies in nanoseconds, if the benchmark measures latency.
    pub latency: Option<Histogram<u64>>,
    /// Per operation type (YCSB's read, update, ...): operations and sampled latencies.
    pub by_op: Vec<OpStats>,
    /// Benchmark-specific counts (retries, values not found, ...), summed over threads.
    pub counts: Vec<(&'static str, u64)>,
    /// Hardware counters over the thread's run (filled in by the harness).
    pub counters: Option<CounterValues>,
}

impl ThreadResult {
    /// `ops` operations and the latencies sampled, nothing else.
    pub fn new(ops: u64, latency: Option<Histogram<u64>>) -> ThreadResult {
        ThreadResult { ops, latency, by_op: Vec::new(), counts: Vec::new(), counters: None }
    }
}

/// One operation type's share of a run.
#[derive(Clone)]
pub struct OpStats {
    pub name: &'static str,
    /// Operations of this type completed.
    pub ops: u64,
    /// Sampled latencies in nanoseconds.
    pub latency: Histogram<u64>,
}

impl OpStats {
    pub fn new(name: &'static str) -> OpStats {
        OpStats { name, ops: 0, latency: new_histogram() }
    }
}

/// Adds `from` into `into`, matching operation types by name (order of first appearance).
pub fn merge_op_stats(into: &mut Vec<OpStats>, from: &[OpStats]) {
    for op in from {
        match into.iter_mut().find(|o| o.name == op.name) {
            Some(o) => {
                o.ops += op.ops;
                o.latency.add(&op.latency).expect("histograms share bounds");
            }
            None => into.push(op.clone()),
        }
    }
}

/// One complete measurement of one variant at one point.
pub struct Sample {
    /// Operations completed by each thread.
    pub per_thread: Vec<u64>,
    /// Wall seconds from release to the last thread's end.
    pub secs: f64,
    /// Merged latency samples, if measured.
    pub latency: Option<Histogram<u64>>,
    /// Benchmark-specific figures (counters), already normalised.
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Per operation type, merged over threads.
    pub by_op: Vec<OpStats>,
    /// Benchmark-specific counts, summed over threads.
    pub counts: BTreeMap<&'static str, u64>,
    /// Hardware counters summed over threads, if every thread could read them.
    pub counters: Option<CounterValues>,
}

impl Sample {
    /// Adds `other`, a later part of the same work (a load in turns): operations per thread
    /// and seconds summed, latencies and counts merged, `other`'s figures added to `extra`
    /// where this one has none. Per-operation stats and hardware counters stay this sample's.
    pub fn absorb(&mut self, other: Sample) {
        if self.per_thread.len() < other.per_thread.len() {
            self.per_thread.resize(other.per_thread.len(), 0);
        }
        for (mine, theirs) in self.per_thread.iter_mut().zip(&other.per_thread) {
            *mine += theirs;
        }
        self.secs += other.secs;
        match (&mut self.latency, other.latency) {
            (Some(mine), Some(theirs)) => {
                let _ = mine.add(theirs);
            }
            (mine @ None, theirs) => *mine = theirs,
            _ => {}
        }
        for (name, n) in other.counts {
            *self.counts.entry(name).or_default() += n;
        }
        for (key, value) in other.extra {
            self.extra.entry(key).or_insert(value);
        }
    }

    /// Total operations.
    pub fn ops(&self) -> u64 {
        self.per_thread.iter().sum()
    }

    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        super::report::rate(self.ops(), self.secs)
    }

    /// Least over most operations per thread: 1.0 when every thread got the same share.
    pub fn fairness(&self) -> f64 {
        let max = self.per_thread.iter().copied().max().unwrap_or(0);
        let min = self.per_thread.iter().copied().min().unwrap_or(0);
        if max == 0 {
            0.0
        } else {
            min as f64 / max as f64
        }
    }
}

/// Times one operation in `every` (0: none) into a histogram. A countdown picks the sampled
/// operations: a division per operation (`ops % every`) would cost more than a lock or a
/// transaction begin it is measuring.
pub struct LatencySampler {
    clock: SampleClock,
    hist: Option<Histogram<u64>>,
}

/// Picks one operation in `every` (0: none) to time, by countdown.
pub struct SampleClock {
    every: u64,
    countdown: u64,
}

impl SampleClock {
    pub fn new(every: u64) -> SampleClock {
        SampleClock { every, countdown: every }
    }

    /// The start time if this operation is sampled (the clock costs ~20 ns, so not every one).
    #[inline]
    pub fn begin(&mut self) -> Option<Instant> {
        if self.every == 0 {
            return None;
        }
        self.countdown -= 1;
        if self.countdown > 0 {
            return None;
        }
        self.countdown = self.every;
        Some(Instant::now())
    }
}

impl LatencySampler {
    pub fn new(every: u64) -> LatencySampler {
        LatencySampler { clock: SampleClock::new(every), hist: (every != 0).then(new_histogram) }
    }

    /// The start time if this operation is sampled.
    #[inline]
    pub fn begin(&mut self) -> Option<Instant> {
        self.clock.begin()
    }

    /// Records the time from `start` to `end`, if sampled.
    #[inline]
    pub fn record(&mut self, start: Option<Instant>, end: Option<Instant>) {
        if let (Some(h), Some(s), Some(e)) = (self.hist.as_mut(), start, end) {
            // Saturates instead of failing for out-of-range values; nothing to report.
            h.saturating_record(e.duration_since(s).as_nanos().max(1) as u64);
        }
    }

    /// Records the time since `start`, if sampled.
    #[inline]
    pub fn record_since(&mut self, start: Option<Instant>) {
        if start.is_some() {
            self.record(start, Some(Instant::now()));
        }
    }

    /// The thread's result: `ops` operations and the sampled latencies.
    pub fn finish(self, ops: u64) -> ThreadResult {
        ThreadResult::new(ops, self.hist)
    }
}

/// A latency histogram covering 1 ns to 100 s at 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("static histogram bounds are valid")
}

/// How often the main thread looks whether a measurement is over.
const POLL: Duration = Duration::from_millis(5);

/// When one worker thread ran its body.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: Instant,
    end: Instant,
}

/// A measurement's wall time: from the first thread's release to the last thread's finish,
/// each read by the worker threads themselves. Not the main thread's view: it wakes every
/// [`POLL`] to look whether the threads are done (fixed work would be padded to that), and may
/// itself be descheduled after the release (fixed work would then look nearly instant). Never
/// zero.
fn wall_secs(spans: &[Span]) -> f64 {
    let start = spans.iter().map(|s| s.start).min();
    let end = spans.iter().map(|s| s.end).max();
    let secs = start.zip(end).map_or(0.0, |(start, end)| end.saturating_duration_since(start).as_secs_f64());
    secs.max(1e-9)
}

/// Runs `body` on `threads` threads for `duration`; `None` if interrupted (the sample is
/// incomplete and must not be reported).
pub fn run_threads<F>(threads: usize, duration: Duration, body: F) -> Option<Sample>
where
    F: Fn(usize, &Control) -> ThreadResult + Sync,
{
    run(threads, Some(duration), body)
}

/// Runs `body` on `threads` threads until each returns (fixed work, e.g. "insert N keys");
/// `Control::running` turns false only on Ctrl-C. `None` if interrupted.
pub fn run_threads_to_completion<F>(threads: usize, body: F) -> Option<Sample>
where
    F: Fn(usize, &Control) -> ThreadResult + Sync,
{
    run(threads, None, body)
}

fn run<F>(threads: usize, duration: Option<Duration>, body: F) -> Option<Sample>
where
    F: Fn(usize, &Control) -> ThreadResult + Sync,
{
    let control = Control { stop: CachePadded::new(AtomicBool::new(false)) };
    let barrier = Barrier::new(threads + 1);
    let (results, spans): (Vec<ThreadResult>, Vec<Span>) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (body, control, barrier) = (&body, &control, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let counters = COUNT_HARDWARE.load(Relaxed).then(ThreadCounters::start).and_then(Result::ok);
                    // Each thread's own clock: released here, finished when its body returns.
                    let start = Instant::now();
                    let mut result = body(i, control);
                    let end = Instant::now();
                    result.counters = counters.map(ThreadCounters::stop);
                    (result, Span { start, end })
                })
            })
            .collect();
        barrier.wait();
        // The main thread only decides when to stop (a duration) or notices that the work is
        // done (fixed work); the time reported is the threads' own ([`wall_secs`]).
        let start = Instant::now();
        let finished = || handles.iter().all(|h| h.is_finished());
        while duration.is_none_or(|d| start.elapsed() < d) && !interrupted() && !finished() {
            let left = duration.map_or(POLL, |d| d.saturating_sub(start.elapsed()));
            std::thread::sleep(left.min(POLL));
        }
        control.stop.store(true, Relaxed);
        handles.into_iter().map(|h| h.join().expect("benchmark thread panicked")).unzip()
    });
    if interrupted() {
        return None;
    }
    let secs = wall_secs(&spans);
    let mut latency: Option<Histogram<u64>> = None;
    let mut per_thread = Vec::with_capacity(threads);
    let (mut by_op, mut counts) = (Vec::new(), BTreeMap::new());
    let mut counters: Option<Option<CounterValues>> = None;
    for r in results {
        per_thread.push(r.ops);
        // Per-type samples make up the overall latency when a benchmark keeps only those.
        let mut own = r.latency;
        if own.is_none() && r.by_op.iter().any(|o| !o.latency.is_empty()) {
            let mut all = new_histogram();
            r.by_op.iter().for_each(|o| all.add(&o.latency).expect("histograms share bounds"));
            own = Some(all);
        }
        if let Some(h) = own {
            latency.get_or_insert_with(new_histogram).add(&h).expect("histograms share bounds");
        }
        merge_op_stats(&mut by_op, &r.by_op);
        for (name, n) in r.counts {
            *counts.entry(name).or_insert(0) += n;
        }
        // A total is only reported when every thread counted.
        counters = Some(match (counters, r.counters) {
            (None, c) => c,
            (Some(Some(mut total)), Some(c)) => {
                total.merge(&c);
                Some(total)
            }
            _ => None,
        });
    }
    let counters = counters.flatten();
    Some(Sample { per_thread, secs, latency, extra: serde_json::Map::new(), by_op, counts, counters })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(per_thread: Vec<u64>, secs: f64, latency: &[u64], count: u64) -> Sample {
        let mut h = new_histogram();
        for &v in latency {
            h.record(v).unwrap();
        }
        let mut extra = serde_json::Map::new();
        extra.insert("first".into(), serde_json::json!(per_thread.len()));
        Sample {
            per_thread,
            secs,
            latency: (!latency.is_empty()).then_some(h),
            extra,
            by_op: Vec::new(),
            counts: [("retries", count)].into_iter().collect(),
            counters: None,
        }
    }

    #[test]
    fn wall_time_runs_from_the_first_release_to_the_last_finish() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let spans =
            [Span { start: at(2), end: at(7) }, Span { start: at(1), end: at(30) }, Span { start: at(3), end: at(4) }];
        assert_eq!(wall_secs(&spans), 0.029, "first start 1 ms, last end 30 ms");
        assert_eq!(wall_secs(&spans[..1]), 0.005);
        // No thread, or a body that took no measurable time: never zero (rates stay finite).
        assert_eq!(wall_secs(&[]), 1e-9);
        assert_eq!(wall_secs(&[Span { start: at(1), end: at(1) }]), 1e-9);
    }

    #[test]
    fn fixed_work_is_timed_by_the_threads_not_by_the_polling() {
        // Each body times itself: the sample's wall time covers every body, and the rate is
        // the operations over it.
        let own = std::sync::Mutex::new(Vec::new());
        let sample = run_threads_to_completion(2, |i, _| {
            let start = Instant::now();
            let x: u64 = (0..1000u64).map(std::hint::black_box).sum();
            own.lock().unwrap().push(start.elapsed().as_secs_f64());
            ThreadResult::new(x / 499_500 + i as u64, None)
        })
        .unwrap();
        assert_eq!(sample.ops(), 3);
        let longest = own.into_inner().unwrap().into_iter().fold(0.0, f64::max);
        assert!(sample.secs >= longest && sample.secs > 0.0, "{} < {longest}", sample.secs);
        assert!((sample.ops_per_sec() - 3.0 / sample.secs).abs() <= 1e-9 * sample.ops_per_sec());
    }

    #[test]
    fn a_sample_absorbs_a_later_part_of_the_same_work() {
        let mut a = sample(vec![10, 20], 1.5, &[100, 200], 1);
        a.absorb(sample(vec![1, 2, 3], 0.5, &[300], 2));
        assert_eq!((a.per_thread.clone(), a.secs, a.ops()), (vec![11, 22, 3], 2.0, 36));
        assert_eq!(a.latency.as_ref().map(|h| h.len()), Some(3));
        assert_eq!(a.counts["retries"], 3);
        assert_eq!(a.extra["first"], 2, "the first part's figures stay");
        let mut none = sample(vec![5], 1.0, &[], 0);
        none.absorb(sample(vec![5], 1.0, &[7], 0));
        assert_eq!(none.latency.map(|h| h.len()), Some(1));
    }
}
