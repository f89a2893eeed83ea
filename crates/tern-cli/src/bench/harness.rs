//! Runs one measurement: N threads released together, stopped together after a duration.
//!
//! Each thread runs its body until [`Control::running`] turns false and returns what it counted.
//! Wall time is taken from the release of the threads to the last one finishing, so a thread that
//! notices the stop late lowers the reported rate rather than inflating it.

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
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
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // If a handler cannot be installed, Ctrl-C simply kills the process as usual.
        let _ = ctrlc::set_handler(|| {
            if INTERRUPTED.swap(true, Relaxed) {
                std::process::exit(130);
            }
            eprintln!(
                "\ninterrupted: finishing the current point and printing what was measured (Ctrl-C again to quit)"
            );
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

/// What one worker thread counted.
pub struct ThreadResult {
    /// Operations completed.
    pub ops: u64,
    /// Sampled operation latencies in nanoseconds, if the benchmark measures latency.
    pub latency: Option<Histogram<u64>>,
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
}

impl Sample {
    /// Total operations.
    pub fn ops(&self) -> u64 {
        self.per_thread.iter().sum()
    }

    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops() as f64 / self.secs.max(f64::MIN_POSITIVE)
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
    every: u64,
    countdown: u64,
    hist: Option<Histogram<u64>>,
}

impl LatencySampler {
    pub fn new(every: u64) -> LatencySampler {
        LatencySampler { every, countdown: every, hist: (every != 0).then(new_histogram) }
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
        ThreadResult { ops, latency: self.hist }
    }
}

/// A latency histogram covering 1 ns to 100 s at 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("static histogram bounds are valid")
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
    let (results, secs) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (body, control, barrier) = (&body, &control, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    body(i, control)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let finished = || handles.iter().all(|h| h.is_finished());
        while duration.is_none_or(|d| start.elapsed() < d) && !interrupted() && !finished() {
            let left = duration.map_or(Duration::from_millis(5), |d| d.saturating_sub(start.elapsed()));
            std::thread::sleep(left.min(Duration::from_millis(5)));
        }
        control.stop.store(true, Relaxed);
        let results: Vec<ThreadResult> =
            handles.into_iter().map(|h| h.join().expect("benchmark thread panicked")).collect();
        (results, start.elapsed().as_secs_f64())
    });
    if interrupted() {
        return None;
    }
    let mut latency: Option<Histogram<u64>> = None;
    let mut per_thread = Vec::with_capacity(threads);
    for r in results {
        per_thread.push(r.ops);
        if let Some(h) = r.latency {
            latency.get_or_insert_with(new_histogram).add(&h).expect("histograms share bounds");
        }
    }
    Some(Sample { per_thread, secs, latency, extra: serde_json::Map::new() })
}
