//! What waiting costs on the running CPU, measured once per process.
//!
//! The spin schedule ([`SpinConfig`]) counts PAUSE instructions, and the latency of PAUSE
//! differs by an order of magnitude between CPU generations and vendors. It was about 9 ns on
//! the Intel Xeon the default was tuned on. The same count therefore spins for very different
//! times on different machines, and a schedule sized against the cost of parking on one CPU is
//! wrong on another. [`calibration`] measures, on first use, the cost of one PAUSE and of a
//! park/unpark round trip between two threads, and names the CPU. Benchmarks print these
//! beside their figures, and [`Calibration::schedule_ns`] turns a schedule into time.
//!
//! Invariants: the figures are measured once, are finite and positive, and later calls return
//! the same values. Measuring takes a few milliseconds: 5 × 20,000 PAUSEs, and 1,000 round
//! trips after 100 for warm-up.

use super::primitive::spin_loop;
use super::spin::round_pauses;
use super::SpinConfig;
use std::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Release};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The running CPU's waiting costs ([`calibration`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Calibration {
    /// The CPU's model name (`/proc/cpuinfo`), or `"unknown CPU"`.
    pub cpu_model: String,
    /// Nanoseconds per PAUSE (`core::hint::spin_loop`): the fastest of 5 runs of 20,000.
    pub pause_ns: f64,
    /// Nanoseconds for one thread to wake another and be woken back
    /// (`std::thread::unpark` / `park`), averaged over 1,000 round trips.
    pub park_round_trip_ns: f64,
}

impl Calibration {
    /// How long `config`'s full spin schedule (every round at its longest, before parking)
    /// takes on this CPU, in nanoseconds.
    pub fn schedule_ns(&self, config: SpinConfig) -> f64 {
        let pauses: u64 = (0..u32::from(config.spin_rounds)).map(|r| u64::from(round_pauses(config, r))).sum();
        pauses as f64 * self.pause_ns
    }
}

/// The running CPU's waiting costs, measured on the first call.
pub fn calibration() -> &'static Calibration {
    static MEASURED: OnceLock<Calibration> = OnceLock::new();
    MEASURED.get_or_init(|| Calibration {
        cpu_model: cpu_model(),
        pause_ns: pause_ns(),
        park_round_trip_ns: park_round_trip_ns(),
    })
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown CPU".to_string())
}

fn pause_ns() -> f64 {
    const PAUSES: u32 = 20_000;
    let run = || {
        let start = Instant::now();
        for _ in 0..PAUSES {
            spin_loop();
        }
        start.elapsed().as_nanos() as f64 / f64::from(PAUSES)
    };
    (0..5).map(|_| run()).fold(f64::INFINITY, f64::min).max(f64::MIN_POSITIVE)
}

fn park_round_trip_ns() -> f64 {
    const WARM_UP: u32 = 100;
    const TRIPS: u32 = 1_000;
    // A turn handed back and forth: each side unparks the other, then parks until the turn is
    // its own again (park can return spuriously, so the flag decides).
    let ping = Arc::new(AtomicBool::new(false));
    let main = std::thread::current();
    let echo = {
        let ping = ping.clone();
        std::thread::spawn(move || {
            for _ in 0..WARM_UP + TRIPS {
                while !ping.load(Acquire) {
                    std::thread::park();
                }
                ping.store(false, Release);
                main.unpark();
            }
        })
    };
    let mut start = Instant::now();
    for trip in 0..WARM_UP + TRIPS {
        if trip == WARM_UP {
            start = Instant::now();
        }
        ping.store(true, Release);
        echo.thread().unpark();
        while ping.load(Acquire) {
            std::thread::park();
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(TRIPS);
    echo.join().expect("the echo thread does not panic");
    ns.max(f64::MIN_POSITIVE)
}
