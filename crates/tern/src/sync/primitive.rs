//! The one place where `sync` chooses between the real primitives and loom's models.
//!
//! Every latch in this module is written against these names, so that `RUSTFLAGS="--cfg loom"`
//! model-checks the same code that ships (the approach crossbeam-epoch takes). Statistics
//! counters deliberately use `std` atomics in both builds: they are not synchronisation, and
//! keeping them out of the model keeps loom's state space small.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize};

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

/// A small number that differs between live threads, for hashing a thread to a slot.
///
/// Tokens are handed out from a global counter on a thread's first call and never reused while
/// the process lives, so two live threads never share one.
#[cfg(not(loom))]
#[inline]
pub(crate) fn thread_token() -> usize {
    use std::cell::Cell;
    std::thread_local! { static TOKEN: Cell<usize> = const { Cell::new(0) }; }
    TOKEN.with(|t| match t.get() {
        0 => {
            let token = next_token();
            t.set(token);
            token
        }
        token => token,
    })
}

/// Loom runs its model threads on one OS thread, so the token lives in loom's thread-locals,
/// and comes from a counter reset per execution, since loom needs every execution to be
/// deterministic.
#[cfg(loom)]
pub(crate) fn thread_token() -> usize {
    loom::lazy_static! {
        static ref NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    }
    loom::thread_local! {
        static TOKEN: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    TOKEN.with(|t| *t)
}

#[cfg(not(loom))]
fn next_token() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
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

/// A cheap, monotonic-enough tick count for heuristics (never for correctness): the TSC on
/// x86-64, nanoseconds elsewhere and under loom.
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
