//! Calibrated busy work: stands in for the work a thread does inside and outside a latch.
//!
//! One unit is one step of a 64-bit linear congruential generator whose steps depend on each
//! other, so the CPU cannot overlap or skip them. The cost of a unit is measured at start-up,
//! and nanosecond requests are converted to units with it.

use std::hint::black_box;
use std::time::Instant;

/// Runs `units` dependent steps starting from `seed`; returns the final state.
#[inline]
pub fn spin(units: u64, seed: u64) -> u64 {
    let mut x = seed;
    for _ in 0..black_box(units) {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
    }
    black_box(x)
}

/// Nanoseconds per unit on this machine: the fastest of a few timed batches (the least
/// disturbed by other load).
pub fn ns_per_unit() -> f64 {
    const UNITS: u64 = 2_000_000;
    (0..5)
        .map(|i| {
            let start = Instant::now();
            spin(UNITS, i);
            start.elapsed().as_secs_f64() * 1e9 / UNITS as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// The number of units that take about `ns` nanoseconds.
pub fn units_for(ns: u64, ns_per_unit: f64) -> u64 {
    (ns as f64 / ns_per_unit).round() as u64
}
