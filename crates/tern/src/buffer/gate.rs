//! The write gate: tree operations that latch pages exclusively run inside it, and a
//! checkpoint closes it for an instant when none is inside (`capture.rs`).
//!
//! Entering adds one to the entering thread's stripe of counters and then checks that the
//! gate is open; closing raises `pending` and then waits until every stripe is zero. A
//! sequentially consistent fence sits between each side's store and its load (a Dekker pair):
//! either the closer sees the entrant's count, or the entrant sees `pending` and backs out. So while the closer runs its
//! instant, no operation is inside, and an operation that entered before has left.
//!
//! Invariants:
//! 1. No operation is inside the gate while [`Gate::at_instant`] runs its closure (loom model
//!    in `loom_tests.rs`).
//! 2. A thread already inside enters again without waiting ([`Gate::enter_nested`]): a
//!    nested operation must not wait for a closer that waits for it.
//! 3. Nothing waits inside the gate for a closer: entrants wait outside, holding no latch.

use crate::sync::primitive::{fence, yield_now, AtomicBool, AtomicUsize};
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

pub(crate) struct Gate {
    /// Operations inside, by stripe.
    inside: Box<[CachePadded<AtomicUsize>]>,
    /// Closing: entrants wait outside.
    pending: AtomicBool,
}

impl Gate {
    pub(crate) fn new(stripes: usize) -> Gate {
        Gate {
            inside: (0..stripes.max(1)).map(|_| CachePadded::new(AtomicUsize::new(0))).collect(),
            pending: AtomicBool::new(false),
        }
    }

    /// The stripes (threads pick one by their own index).
    pub(crate) fn stripes(&self) -> usize {
        self.inside.len()
    }

    /// Enters through stripe `stripe`, waiting while the gate is closed.
    pub(crate) fn enter(&self, stripe: usize) {
        let count = &self.inside[stripe];
        loop {
            count.fetch_add(1, Relaxed);
            fence(SeqCst);
            if !self.pending.load(Acquire) {
                return;
            }
            count.fetch_sub(1, Release);
            while self.pending.load(Acquire) {
                yield_now();
            }
        }
    }

    /// Enters again from inside (never waits).
    pub(crate) fn enter_nested(&self, stripe: usize) {
        self.inside[stripe].fetch_add(1, Relaxed);
    }

    /// Leaves through the stripe it entered by.
    pub(crate) fn leave(&self, stripe: usize) {
        self.inside[stripe].fetch_sub(1, Release);
    }

    /// Closes the gate, waits until no operation is inside, runs `f`, and opens it again.
    pub(crate) fn at_instant<R>(&self, f: impl FnOnce() -> R) -> R {
        self.pending.store(true, Relaxed);
        fence(SeqCst);
        while self.inside.iter().map(|c| c.load(Acquire)).sum::<usize>() != 0 {
            yield_now();
        }
        let r = f();
        self.pending.store(false, Release);
        r
    }
}
