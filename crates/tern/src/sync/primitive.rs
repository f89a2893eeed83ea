//! The one place where `sync` chooses between the real primitives and loom's models.
//!
//! Every latch in this module is written against these names, so that `RUSTFLAGS="--cfg loom"`
//! model-checks the same code that ships (the approach crossbeam-epoch takes). Statistics
//! counters deliberately use `std` atomics in both builds: they are not synchronisation, and
//! keeping them out of the model keeps loom's state space small.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

/// One PAUSE (x86) / YIELD (AArch64) hint; under loom a scheduling point.
#[inline(always)]
pub(crate) fn spin_loop() {
    #[cfg(loom)]
    loom::hint::spin_loop();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Gives up the CPU (`sched_yield` on Linux); under loom a scheduling point.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Monotonic nanoseconds since the first call in this process (a constant under loom, which
/// has no clock: time-based heuristics then never fire, and the model covers the rest).
#[inline]
pub(crate) fn now_ns() -> u64 {
    #[cfg(loom)]
    {
        0
    }
    #[cfg(not(loom))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let start = START.get_or_init(std::time::Instant::now);
        u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A cheap, monotonic-enough tick count for measuring waits and for heuristics (never for
/// correctness): the TSC on x86-64 (about 8 ns to read, against about 18 ns for the clock),
/// nanoseconds elsewhere and under loom. [`ticks_to_ns`] converts.
#[inline]
pub(crate) fn ticks() -> u64 {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU and has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    {
        now_ns()
    }
}

/// The first (ticks, nanoseconds) pair, for calibrating the TSC against the clock.
#[cfg(all(target_arch = "x86_64", not(loom)))]
static ANCHOR: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();

/// Records the calibration anchor if it is not yet set; called at every contended wait, so
/// by the time stats are read the calibration interval is usually long.
#[inline]
pub(crate) fn anchor_ticks() {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    ANCHOR.get_or_init(|| (ticks(), now_ns()));
}

/// Converts a [`ticks`] duration to nanoseconds, calibrating the TSC against the monotonic
/// clock since the anchor (over at least 10 ms: a call soon after the anchor waits for that).
pub(crate) fn ticks_to_ns(t: u64) -> u64 {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    {
        anchor_ticks();
        let &(t0, ns0) = ANCHOR.get().expect("anchored just above");
        let mut ns = now_ns();
        while ns.saturating_sub(ns0) < 10_000_000 {
            std::thread::sleep(std::time::Duration::from_millis(1));
            ns = now_ns();
        }
        let per_tick = (ns - ns0) as f64 / ticks().saturating_sub(t0).max(1) as f64;
        (t as f64 * per_tick) as u64
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    {
        t
    }
}

/// Between the store and the load of a store-load (Dekker) pair made of `SeqCst` accesses.
///
/// The C++/Rust memory model already orders such a pair, so in normal builds this is nothing.
/// Loom treats `SeqCst` accesses as `AcqRel` and would report false races (its README; loom
/// issue #180), but it models `SeqCst` fences fully: the fence gives the model the ordering the
/// real code has.
#[inline(always)]
pub(crate) fn dekker_fence() {
    #[cfg(loom)]
    fence(std::sync::atomic::Ordering::SeqCst);
}
