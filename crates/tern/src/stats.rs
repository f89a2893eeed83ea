//! Engine statistics: one snapshot of every component's counters.
//!
//! Components keep their counters where they are cheapest to update (latches: per thread, per
//! class) and this module gathers them. Snapshots serialize to JSON; subtracting two snapshots
//! (`LatchStats::since`) gives the activity between them.

use crate::sync::LatchStats;
use serde::Serialize;

/// Counters of every component, summed over all threads.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    /// Per latch class ([`crate::sync::LatchClass`]).
    pub latches: Vec<LatchStats>,
}

/// Takes a snapshot of every component's counters.
pub fn snapshot() -> Stats {
    Stats { latches: crate::sync::stats() }
}
