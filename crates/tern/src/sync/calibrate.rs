//! What waiting costs on the running CPU, measured once per process.
//!
//! Spin budgets ([`SpinConfig`]) are in nanoseconds, but a spinning waiter executes PAUSE
//! instructions, whose latency differs by an order of magnitude between CPU generations and
//! vendors (about 9 ns on the Intel Xeon the first schedule was tuned on, about 28 ns on an AMD
//! EPYC). So the waiting code needs, once, the cost of a PAUSE and the rate of the tick counter
//! it times waits with. [`wait_costs`] measures both on the first contended wait (about 0.3 ms
//! on a CPU whose PAUSE takes 28 ns), together with the number of CPUs the process may run on.
//! [`calibration`] adds, for people and benchmarks, the CPU's name and the cost of a park/unpark
//! round trip between two threads (a few milliseconds: 1,000 round trips).
//!
//! Invariants: each figure is measured once, is finite and positive, and later calls return the
//! same values; [`Calibration::pause_ns`] is the figure the spin loops use. Under loom nothing is
//! measured: one PAUSE counts as 1 ns and ticks are nanoseconds, so budgets become round counts.

#[cfg(not(loom))]
use super::primitive::{spin_loop, ticks};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Release};
#[cfg(not(loom))]
use std::sync::{Arc, OnceLock};
#[cfg(not(loom))]
use std::time::Instant;

/// The figures the spin loops convert budgets with (see [`wait_costs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WaitCosts {
    /// Picoseconds per PAUSE; at least 1.
    pub pause_ps: u64,
    /// [`ticks`](super::primitive::ticks) per microsecond; at least 1.
    pub ticks_per_us: u64,
    /// CPUs this process may run on; at least 1.
    pub cpus: u32,
    /// A `sched_yield` that takes longer than this many ticks ran another thread: 8 times the
    /// fastest of 20 (a yield with nothing else to run), and at least 2 µs.
    pub crowded_yield_ticks: u64,
}

impl WaitCosts {
    /// How many PAUSEs spin for about `ns` nanoseconds (at least one; `u64::MAX` for a span
    /// too long to count in a `u64`).
    #[inline]
    pub(crate) fn pauses(&self, ns: u64) -> u64 {
        let pauses = u128::from(ns) * 1000 / u128::from(self.pause_ps);
        u64::try_from(pauses).unwrap_or(u64::MAX).max(1)
    }

    /// Nanoseconds in `t` ticks.
    #[inline]
    pub(crate) fn ticks_to_ns(&self, t: u64) -> u64 {
        t.saturating_mul(1000) / self.ticks_per_us
    }

    /// Ticks in `ns` nanoseconds.
    #[inline]
    pub(crate) fn ticks_for_ns(&self, ns: u64) -> u64 {
        ns.saturating_mul(self.ticks_per_us) / 1000
    }
}

/// The running CPU's PAUSE cost and tick rate, measured on the first call.
#[cfg(not(loom))]
pub(crate) fn wait_costs() -> &'static WaitCosts {
    static MEASURED: OnceLock<WaitCosts> = OnceLock::new();
    MEASURED.get_or_init(measure_wait_costs)
}

/// Under loom: a PAUSE counts as 1 ns and ticks are nanoseconds (and never advance).
#[cfg(loom)]
pub(crate) fn wait_costs() -> &'static WaitCosts {
    static MODEL: WaitCosts = WaitCosts { pause_ps: 1000, ticks_per_us: 1000, cpus: 2, crowded_yield_ticks: 2000 };
    &MODEL
}

/// The fastest of 5 runs of 2,000 PAUSEs gives both the PAUSE cost and, from the same window,
/// the tick rate (a preempted run is slow, so it is not the one kept); the fastest of 20
/// `sched_yield` calls is a yield that found nothing else to run.
#[cfg(not(loom))]
#[cold]
fn measure_wait_costs() -> WaitCosts {
    const PAUSES: u64 = 2_000;
    let run = || {
        let (start, t0) = (Instant::now(), ticks());
        for _ in 0..PAUSES {
            spin_loop();
        }
        let t = ticks().wrapping_sub(t0);
        (start.elapsed().as_nanos().max(1) as u64, t)
    };
    let (ns, t) = (0..5).map(|_| run()).min_by_key(|&(ns, _)| ns).expect("five runs");
    let ticks_per_us = (t.saturating_mul(1000) / ns).max(1);
    let bare_yield = (0..20)
        .map(|_| {
            let t0 = ticks();
            std::thread::yield_now();
            ticks().wrapping_sub(t0)
        })
        .min()
        .expect("twenty yields");
    // An override for experiments: spin as if a PAUSE took this long (see docs/sync.md).
    let pause_ps = std::env::var("TERN_PAUSE_NS")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ns| ns.is_finite() && *ns > 0.0 && *ns < 1e6)
        .map_or(ns * 1000 / PAUSES, |ns| (ns * 1000.0) as u64);
    WaitCosts {
        pause_ps: pause_ps.max(1),
        ticks_per_us,
        crowded_yield_ticks: bare_yield.saturating_mul(8).max(2 * ticks_per_us),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get().min(u32::MAX as usize) as u32),
    }
}

/// The running CPU's waiting costs ([`calibration`]).
#[cfg(not(loom))]
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Calibration {
    /// The CPU's model name (`/proc/cpuinfo`), or `"unknown CPU"`.
    pub cpu_model: String,
    /// CPUs this process may run on (`std::thread::available_parallelism`).
    pub cpus: usize,
    /// Nanoseconds per PAUSE (`core::hint::spin_loop`): the fastest of 5 runs of 2,000, or the
    /// value of the `TERN_PAUSE_NS` environment variable when it is set (an experiment: spin as
    /// if on a CPU whose PAUSE takes that long). This is the figure spin budgets are converted
    /// with.
    pub pause_ns: f64,
    /// Nanoseconds for one thread to wake another and be woken back
    /// (`std::thread::unpark` / `park`), averaged over 1,000 round trips.
    pub park_round_trip_ns: f64,
}

#[cfg(not(loom))]
impl Calibration {
    /// How many PAUSEs `ns` nanoseconds of spinning execute on this CPU (at least one; any
    /// `ns` is accepted, the count saturating at `u64::MAX`).
    pub fn pauses_in(&self, ns: u64) -> u64 {
        wait_costs().pauses(ns)
    }

    /// Spins as a spin round of `ns` nanoseconds does (that many nanoseconds' worth of PAUSEs
    /// by the calibration) and returns the nanoseconds it actually took: a check that budgets
    /// mean the same time on this CPU as on any other.
    pub fn time_round(&self, ns: u64) -> f64 {
        let start = Instant::now();
        for _ in 0..self.pauses_in(ns) {
            spin_loop();
        }
        start.elapsed().as_nanos() as f64
    }
}

/// The running CPU's waiting costs, measured on the first call.
#[cfg(not(loom))]
pub fn calibration() -> &'static Calibration {
    static MEASURED: OnceLock<Calibration> = OnceLock::new();
    MEASURED.get_or_init(|| {
        let costs = wait_costs();
        Calibration {
            cpu_model: cpu_model(),
            cpus: costs.cpus as usize,
            pause_ns: costs.pause_ps as f64 / 1000.0,
            park_round_trip_ns: park_round_trip_ns(),
        }
    })
}

#[cfg(not(loom))]
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

#[cfg(not(loom))]
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
