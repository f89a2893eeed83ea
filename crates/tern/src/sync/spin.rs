//! How a latch waits: spin policies and the per-acquisition wait state machine.
//!
//! Every latch's slow path is the same loop: try to acquire; if that fails, ask [`Wait::spin`]
//! whether to spin one more round; when it says no, park until woken. The policy decides the
//! spinning:
//!
//! * [`SpinPolicy::Pause`] (default): up to `spin_rounds` rounds of PAUSE instructions, starting
//!   at `first_pauses` and doubling per round up to `max_pauses` (exponential backoff keeps
//!   spinners off the latch's cache line), each round's length drawn at random from its upper
//!   half (jitter breaks the lockstep two waiters fall into after one collision), then park. PAUSE tells the core a spin loop is running, so a hyper-thread sibling gets the
//!   pipeline and the exit from the loop is not a memory-order mis-speculation.
//! * [`SpinPolicy::Yield`]: call `sched_yield` in a loop and never park: the pattern that made
//!   NoisePage's transaction begin collapse under load. Kept for A/B measurement.
//! * [`SpinPolicy::Park`]: no spinning at all; park at once.
//! * [`SpinPolicy::Adaptive`]: like `Pause`, but the class's spin limit follows how often a full
//!   spin recently succeeded: limit = `spin_rounds` × P(success). P is an exponential moving
//!   average kept per thread and class, updated only by waits that were allowed the full
//!   `spin_rounds` (one in 16 contended waits always is, so P keeps being measured when the limit
//!   is low). When
//!   spinning stops paying (oversubscribed cores, long critical sections) waiters park almost at
//!   once; when it pays again, the limit climbs back.

use super::class::{LatchClass, MAX_CLASSES};
use super::counters::add_wait;
use super::park;
use super::primitive::{anchor_ticks, spin_loop, ticks, yield_now};
use crate::{Error, Result};
use std::cell::Cell;

/// How a latch waits for a holder to leave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[repr(u8)]
pub enum SpinPolicy {
    /// Spin with PAUSE and exponential backoff for a bounded number of rounds, then park.
    Pause = 0,
    /// Spin on `sched_yield`, never park.
    Yield = 1,
    /// Park immediately.
    Park = 2,
    /// `Pause`, with the spin limit tuned from recent spin success.
    Adaptive = 3,
}

impl SpinPolicy {
    /// Every policy, in declaration order.
    pub const ALL: [SpinPolicy; 4] = [SpinPolicy::Pause, SpinPolicy::Yield, SpinPolicy::Park, SpinPolicy::Adaptive];

    /// The policy's lower-case name (`pause`, `yield`, `park`, `adaptive`).
    pub fn name(self) -> &'static str {
        match self {
            SpinPolicy::Pause => "pause",
            SpinPolicy::Yield => "yield",
            SpinPolicy::Park => "park",
            SpinPolicy::Adaptive => "adaptive",
        }
    }

    const fn from_u8(v: u8) -> SpinPolicy {
        match v {
            1 => SpinPolicy::Yield,
            2 => SpinPolicy::Park,
            3 => SpinPolicy::Adaptive,
            _ => SpinPolicy::Pause,
        }
    }
}

impl std::str::FromStr for SpinPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<SpinPolicy> {
        SpinPolicy::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::InvalidArgument(format!("unknown spin policy {s:?} (pause, yield, park, adaptive)")))
    }
}

/// A latch class's waiting configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct SpinConfig {
    /// The policy.
    pub policy: SpinPolicy,
    /// Spin rounds before parking (`Pause`; the ceiling for `Adaptive`). At most
    /// [`SpinConfig::MAX_ROUNDS`].
    pub spin_rounds: u8,
    /// PAUSE instructions in the first round; each round doubles it, up to `max_pauses`. At
    /// least 1.
    pub first_pauses: u16,
    /// PAUSE instructions in the longest round. At least `first_pauses`.
    pub max_pauses: u16,
}

impl SpinConfig {
    /// The largest accepted `spin_rounds`.
    pub const MAX_ROUNDS: u8 = 32;

    /// The default: `Pause`, 6 rounds of 32, 64, 128, 256, 256, 256 PAUSEs (about 9 us on a
    /// CPU whose PAUSE takes 9 ns: roughly what a park and wake-up cost, the break-even point
    /// past which spinning loses to sleeping). The long first round matters most: a thread that
    /// just lost the latch waits long enough for the new owner to run several critical sections
    /// before its line is pulled away again. Chosen by a grid of `tern bench latch` runs; see
    /// docs/sync.md.
    pub const DEFAULT: SpinConfig =
        SpinConfig { policy: SpinPolicy::Pause, spin_rounds: 6, first_pauses: 32, max_pauses: 256 };

    /// Checks the limits documented on the fields.
    pub fn validate(&self) -> Result<()> {
        if self.spin_rounds > Self::MAX_ROUNDS {
            return Err(Error::InvalidArgument(format!(
                "spin_rounds {} exceeds {}",
                self.spin_rounds,
                Self::MAX_ROUNDS
            )));
        }
        if self.first_pauses == 0 || self.max_pauses < self.first_pauses {
            return Err(Error::InvalidArgument(format!(
                "need 1 <= first_pauses <= max_pauses, got first_pauses {} and max_pauses {}",
                self.first_pauses, self.max_pauses
            )));
        }
        Ok(())
    }

    pub(crate) const fn pack(self) -> u64 {
        self.policy as u64
            | (self.spin_rounds as u64) << 8
            | (self.first_pauses as u64) << 16
            | (self.max_pauses as u64) << 32
    }

    pub(crate) const fn unpack(v: u64) -> SpinConfig {
        SpinConfig {
            policy: SpinPolicy::from_u8(v as u8),
            spin_rounds: (v >> 8) as u8,
            first_pauses: (v >> 16) as u16,
            max_pauses: (v >> 32) as u16,
        }
    }
}

impl Default for SpinConfig {
    fn default() -> Self {
        SpinConfig::DEFAULT
    }
}

/// PAUSEs in round `round` before jitter: `first_pauses` doubled per round, saturating at
/// `max_pauses` (also where doubling would overflow).
pub(crate) fn round_pauses(config: SpinConfig, round: u32) -> u32 {
    let first = u32::from(config.first_pauses);
    let max = u32::from(config.max_pauses);
    if round >= first.leading_zeros() {
        max
    } else {
        (first << round).min(max)
    }
}

/// One in this many contended `Adaptive` waits spins the full `spin_rounds` to keep measuring.
const ADAPTIVE_EXPLORE_EVERY: u64 = 16;

/// Fixed-point 1.0 for the adaptive success ratio.
const SUCCESS_ONE: u32 = 1024;

std::thread_local! {
    /// Per class, this thread's recent probability (in 1/1024ths) that a full spin succeeded.
    /// Thread-local so that tuning writes no shared cache line: each thread learns from its
    /// own waits, which also sees the contention it actually meets.
    static SPIN_SUCCESS: [Cell<u16>; MAX_CLASSES] = const { [const { Cell::new(SUCCESS_ONE as u16) }; MAX_CLASSES] };
}

/// State of one contended acquisition: created when the fast path fails, finished with
/// [`Wait::done`] once the latch is held.
///
/// `done` runs inside the critical section the caller just entered, so it must stay tiny:
/// thread-local counter stores only. The clock is read while waiting (at the start, after each
/// spin round and each wake-up), never between acquiring the latch and returning.
pub(crate) struct Wait {
    class: LatchClass,
    config: SpinConfig,
    /// Rounds this wait may spin before each park.
    limit: u32,
    /// Rounds spun since the last park.
    round: u32,
    spun: u64,
    parks: u64,
    start: u64,
    /// Ticks when this waiter last stopped waiting (spinning or sleeping) to try again.
    last: u64,
    /// Xorshift state for backoff jitter.
    rng: u64,
}

impl Wait {
    #[cold]
    pub(crate) fn new(class: LatchClass) -> Wait {
        anchor_ticks();
        let config = class.config();
        let start = ticks();
        let full = u32::from(config.spin_rounds);
        let limit = match config.policy {
            SpinPolicy::Pause => full,
            SpinPolicy::Yield => u32::MAX,
            SpinPolicy::Park => 0,
            SpinPolicy::Adaptive if start % ADAPTIVE_EXPLORE_EVERY == 0 => full,
            SpinPolicy::Adaptive => {
                let p = SPIN_SUCCESS.with(|s| u32::from(s[class.index()].get()));
                (full * p).div_ceil(SUCCESS_ONE)
            }
        };
        Wait { class, config, limit, round: 0, spun: 0, parks: 0, start, last: start, rng: start | 1 }
    }

    /// Whether the policy would spin another round now (without spinning).
    #[inline]
    pub(crate) fn would_spin(&self) -> bool {
        self.round < self.limit
    }

    /// Spins one round if the policy allows another before parking; returns false when the
    /// caller should park instead.
    #[inline]
    pub(crate) fn spin(&mut self) -> bool {
        if self.round >= self.limit {
            return false;
        }
        if self.config.policy == SpinPolicy::Yield {
            yield_now();
        } else {
            let base = round_pauses(self.config, self.round);
            // Jitter: a uniformly random length in [ceil(base/2), base], so waiters that collided
            // once do not keep colliding in lockstep.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let pauses = base - (self.rng % u64::from(base / 2 + 1)) as u32;
            for _ in 0..pauses {
                spin_loop();
            }
        }
        self.round += 1;
        self.spun += 1;
        self.last = ticks();
        true
    }

    /// Parks on `key` if `validate` still holds, counting the sleep; returns the unparker's
    /// token, or `None` if `validate` said no. After a wake-up the waiter may spin again.
    ///
    /// # Safety
    /// As [`park::park`]: `key` is owned by the calling latch; `validate` must not panic, park or
    /// unpark.
    pub(crate) unsafe fn park(&mut self, key: usize, validate: impl FnOnce() -> bool) -> Option<usize> {
        // SAFETY: forwarded from this function's contract.
        let token = unsafe { park::park(key, validate) };
        if token.is_some() {
            self.parks += 1;
            self.round = 0;
            self.last = ticks();
        }
        token
    }

    /// The latch is held: record counters and adaptive feedback (thread-local stores only).
    #[inline]
    pub(crate) fn done(self) {
        add_wait(self.class, self.spun, self.parks, self.last.saturating_sub(self.start));
        if self.config.policy == SpinPolicy::Adaptive && self.limit == u32::from(self.config.spin_rounds) {
            let target = if self.parks == 0 { SUCCESS_ONE } else { 0 };
            let _ = SPIN_SUCCESS.try_with(|s| {
                let p = &s[self.class.index()];
                let old = u32::from(p.get());
                // Exponentially weighted moving average, weight 1/8.
                p.set((old - old / 8 + target / 8) as u16);
            });
        }
    }
}
