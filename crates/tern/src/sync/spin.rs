//! How a latch waits: spin policies and the per-acquisition wait state machine.
//!
//! Every latch's slow path is the same loop: try to acquire; if that fails, ask [`Wait::spin`]
//! whether to spin one more round; when it says no, park until woken. The policy decides the
//! spinning:
//!
//! Budgets are nanoseconds ([`SpinConfig`]), converted to PAUSE instructions with the cost
//! measured on the running CPU (`calibrate.rs`): a PAUSE takes about 9 ns on some CPUs and 28 ns
//! on others, so a schedule counted in PAUSEs is wrong somewhere.
//!
//! * [`SpinPolicy::Pause`]: rounds of PAUSE instructions for up to `spin_ns`, the first round
//!   `first_round_ns` long and each next one twice as long up to `max_round_ns` (exponential
//!   backoff keeps spinners off the latch's cache line), each round's length drawn at random
//!   from its upper half (jitter breaks the lockstep two waiters fall into after one
//!   collision), then park. PAUSE tells the core a spin loop is running, so a hyper-thread
//!   sibling gets the pipeline and the exit from the loop is not a memory-order
//!   mis-speculation.
//! * [`SpinPolicy::Yield`]: call `sched_yield` in a loop and never park: the pattern that made
//!   NoisePage's transaction begin collapse under load. Kept for A/B measurement.
//! * [`SpinPolicy::Park`]: no spinning at all; park at once.
//! * [`SpinPolicy::Adaptive`] (default): two phases before parking, each at most `spin_ns`,
//!   sized by what this thread has learned about the class:
//!   1. **PAUSE rounds**, as `Pause`, for `spin_ns` × P(a full PAUSE phase wins), and at most
//!      4 × the time recent winning PAUSE phases took (about the hold times waiters meet): a
//!      wait far longer than that is probably behind a holder that is not running. No PAUSE
//!      phase when the process has one CPU.
//!   2. **`sched_yield` calls** for `spin_ns` × P(a full yield phase wins after the PAUSE
//!      phase did not). Yielding hands the CPU to a runnable thread, which is what helps when
//!      threads outnumber cores and the holder was preempted; parking instead would make the
//!      holder pay a wake-up (a futex call, often an inter-processor interrupt) on its
//!      release. Where yielding does not win (long critical sections, idle cores) the phase
//!      shrinks and waiters park sooner.
//!
//!   When this thread's yields keep running other threads (a yield that takes far longer than
//!   one with nothing else to run: the CPU is **crowded**, threads outnumber cores), there is
//!   no PAUSE phase and the yield phase may last 64 times as long: spinning would keep a
//!   runnable thread, perhaps the holder, off the CPU, while yielding wastes nothing. Whether
//!   the CPU is crowded is an exponential moving average per thread, fed by every yield (and
//!   by one probe yield at the start of each exploring wait).
//!
//!   The win probabilities are exponential moving averages per thread and class, updated by the
//!   one in 16 contended waits of a thread that is allowed its phases in full, so they keep
//!   being measured when the limits are low. A PAUSE phase counts as a win only if it took the
//!   latch within its budget (plus one round): a waiter that lost its CPU mid-phase and found
//!   the latch free on its return was away, not spinning.
//!
//! A PAUSE phase ends when its nominal round lengths or the time that actually passed reach its
//! budget, whichever first: a waiter preempted while spinning has waited enough. A yield phase
//! counts its yields (each as one first round): on a crowded CPU one yield may last a time
//! slice, which is the point of yielding.

use super::calibrate::{wait_costs, WaitCosts};
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
    /// The default: PAUSE rounds, then `sched_yield` calls, each phase sized by what this
    /// thread has learned of the class's waits (no PAUSE phase on a crowded CPU), then park.
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

/// A latch class's waiting configuration. Budgets are in nanoseconds, so one configuration
/// waits about as long on every CPU: the spin loops convert them to PAUSE instructions with the
/// cost measured on the running CPU ([`calibration`](super::calibration)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct SpinConfig {
    /// The policy.
    pub policy: SpinPolicy,
    /// How long a waiter spins before it parks, in nanoseconds: the PAUSE spinning of `Pause`;
    /// for `Adaptive` the ceiling of each of its two phases (PAUSE, then `sched_yield`). At most
    /// [`SpinConfig::MAX_SPIN_NS`]. Unused by `Yield` (never parks) and `Park` (never spins).
    pub spin_ns: u32,
    /// The first PAUSE round, in nanoseconds; each later round doubles it, up to
    /// `max_round_ns`. At least 1.
    pub first_round_ns: u16,
    /// The longest PAUSE round, in nanoseconds. At least `first_round_ns`.
    pub max_round_ns: u16,
}

impl SpinConfig {
    /// The largest accepted `spin_ns`: 10 ms, far past the cost of parking on any CPU.
    pub const MAX_SPIN_NS: u32 = 10_000_000;

    /// The default: `Adaptive` within 9 µs per phase, PAUSE rounds of 300 ns doubling to
    /// 2.3 µs, jittered. 9 µs is roughly what a park and a wake-up cost, the break-even point
    /// past which spinning loses to sleeping; the long first round lets a new owner run several
    /// critical sections before a waiter pulls its cache line away. These are the budgets the
    /// first schedule (6 rounds of 32 to 256 PAUSEs) spent on the Intel Xeon it was tuned on,
    /// now in time so they hold on every CPU. Chosen by measurement; see docs/sync.md.
    pub const DEFAULT: SpinConfig =
        SpinConfig { policy: SpinPolicy::Adaptive, spin_ns: 9_000, first_round_ns: 300, max_round_ns: 2_300 };

    /// Checks the limits documented on the fields.
    pub fn validate(&self) -> Result<()> {
        if self.spin_ns > Self::MAX_SPIN_NS {
            return Err(Error::InvalidArgument(format!("spin_ns {} exceeds {}", self.spin_ns, Self::MAX_SPIN_NS)));
        }
        if self.first_round_ns == 0 || self.max_round_ns < self.first_round_ns {
            return Err(Error::InvalidArgument(format!(
                "need 1 <= first_round_ns <= max_round_ns, got first_round_ns {} and max_round_ns {}",
                self.first_round_ns, self.max_round_ns
            )));
        }
        Ok(())
    }

    /// Packs into one word: policy in bits 0..4, `spin_ns` in 4..32 (it is at most
    /// `MAX_SPIN_NS` < 2^28), the round lengths in 32..48 and 48..64.
    pub(crate) const fn pack(self) -> u64 {
        self.policy as u64
            | ((self.spin_ns as u64) & 0x0FFF_FFFF) << 4
            | (self.first_round_ns as u64) << 32
            | (self.max_round_ns as u64) << 48
    }

    pub(crate) const fn unpack(v: u64) -> SpinConfig {
        SpinConfig {
            policy: SpinPolicy::from_u8((v & 0xF) as u8),
            spin_ns: ((v >> 4) & 0x0FFF_FFFF) as u32,
            first_round_ns: (v >> 32) as u16,
            max_round_ns: (v >> 48) as u16,
        }
    }

    /// The length of PAUSE round `round` before jitter, in nanoseconds: `first_round_ns`
    /// doubled per round, saturating at `max_round_ns` (also where doubling would overflow).
    pub fn round_ns(&self, round: u32) -> u32 {
        let first = u32::from(self.first_round_ns);
        let max = u32::from(self.max_round_ns).max(first);
        if round >= first.leading_zeros() {
            max
        } else {
            (first << round).min(max)
        }
    }
}

impl Default for SpinConfig {
    fn default() -> Self {
        SpinConfig::DEFAULT
    }
}

/// One in this many contended `Adaptive` waits of a thread (the first, the 17th, ...) runs both
/// phases to their ceiling, to keep measuring whether they pay.
const ADAPTIVE_EXPLORE_EVERY: u16 = 16;

/// Fixed-point 1.0 for the adaptive success ratios.
const SUCCESS_ONE: u32 = 1024;

/// An `Adaptive` PAUSE phase lasts at most this many times the recent time a PAUSE phase took
/// to win: a wait that runs much longer than the recent hold times is probably behind a
/// holder that is not running.
const HOLD_MULTIPLE: u32 = 4;

/// On a crowded CPU ([`CROWDED`]) an `Adaptive` yield phase may last this many times
/// `spin_ns` (each yield counting as one first round).
const CROWDED_YIELD_FACTOR: u32 = 64;

/// What one thread has learned about one latch class (the `Adaptive` policy).
#[derive(Clone, Copy)]
struct Learned {
    /// Recent probability, in 1/1024ths, that a full PAUSE phase won the latch.
    pause_wins: u16,
    /// Recent probability, in 1/1024ths, that a full yield phase won the latch after the PAUSE
    /// phase had not.
    yield_wins: u16,
    /// Recent nanoseconds a winning PAUSE phase took (an estimate of the remaining hold time a
    /// waiter meets); 0 until measured.
    win_ns: u32,
    /// Contended waits so far, modulo 2^16: every [`ADAPTIVE_EXPLORE_EVERY`]th explores.
    waits: u16,
}

impl Learned {
    const FRESH: Learned =
        Learned { pause_wins: SUCCESS_ONE as u16, yield_wins: SUCCESS_ONE as u16, win_ns: 0, waits: 0 };
}

/// Exponentially weighted moving average with weight 1/8.
fn ema(old: u32, sample: u32) -> u32 {
    old - old / 8 + sample / 8
}

std::thread_local! {
    /// Recent probability, in 1/1024ths, that a `sched_yield` of this thread ran another thread
    /// (it took longer than a yield with nothing else to run): whether runnable threads
    /// outnumber this thread's CPU. Per thread, not per class: it is about the CPU.
    static CROWDED: Cell<u16> = const { Cell::new(0) };
    /// Per class, what this thread learned from its own waits. Thread-local so that learning
    /// writes no shared cache line, and each thread sees the contention it actually meets.
    static LEARNED: [Cell<Learned>; MAX_CLASSES] = const { [const { Cell::new(Learned::FRESH) }; MAX_CLASSES] };
}

/// A PAUSE phase's budget: `ns`, or none with one CPU (the holder cannot run while a waiter
/// spins on it, so PAUSE never pays).
fn pause_budget(costs: &WaitCosts, ns: u32) -> u64 {
    if costs.cpus <= 1 {
        0
    } else {
        u64::from(ns)
    }
}

/// The two ways of spinning a wait goes through before it parks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Rounds of PAUSE instructions.
    Pause,
    /// `sched_yield` calls: they hand the CPU to a runnable thread, perhaps a preempted holder.
    Yield,
}

/// State of one contended acquisition: created when the fast path fails, finished with
/// [`Wait::done`] once the latch is held.
///
/// `done` runs inside the critical section the caller just entered, so it must stay tiny:
/// thread-local stores only. The clock is read while waiting (at the start, after each
/// spin round and each wake-up), never between acquiring the latch and returning.
pub(crate) struct Wait {
    class: LatchClass,
    config: SpinConfig,
    costs: &'static WaitCosts,
    /// Nanoseconds this wait may spend in each phase before each park.
    pause_limit: u64,
    yield_limit: u64,
    /// An `Adaptive` wait allowed both phases in full, whose outcome updates [`LEARNED`].
    explore: bool,
    /// Set by [`Wait::holding`]: fixed budgets, nothing learned.
    held: bool,
    /// An exploring wait that has yet to make its first round a yield, to keep measuring
    /// whether this thread's CPU is crowded ([`CROWDED`]).
    probe: bool,
    phase: Phase,
    /// PAUSE rounds and nominal nanoseconds spent in the current phase since the last park.
    round: u32,
    phase_ns: u64,
    /// Ticks when the current phase began.
    phase_start: u64,
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
        let costs = wait_costs();
        let start = ticks();
        let full = config.spin_ns;
        let mut explore = false;
        let (pause_limit, yield_limit) = match config.policy {
            SpinPolicy::Pause => (full, 0),
            SpinPolicy::Yield => (0, u32::MAX),
            SpinPolicy::Park => (0, 0),
            SpinPolicy::Adaptive => LEARNED.with(|l| {
                let cell = &l[class.index()];
                let mut learned = cell.get();
                explore = learned.waits % ADAPTIVE_EXPLORE_EVERY == 0;
                learned.waits = learned.waits.wrapping_add(1);
                cell.set(learned);
                // When threads outnumber CPUs, a waiter spinning on a CPU keeps a runnable
                // thread (perhaps the holder) off it: no PAUSE phase, and a long yield phase,
                // since a yield then runs other threads instead of wasting the CPU, while a
                // park would make the holder pay a wake-up on its release.
                let crowded = crowded();
                let yield_full = if crowded { full.saturating_mul(CROWDED_YIELD_FACTOR) } else { full };
                if explore {
                    return (if crowded { 0 } else { full }, yield_full);
                }
                let by_wins =
                    |full: u32, p: u16| (u64::from(full) * u64::from(p)).div_ceil(u64::from(SUCCESS_ONE)) as u32;
                let by_hold = if learned.win_ns == 0 {
                    full
                } else {
                    learned.win_ns.saturating_mul(HOLD_MULTIPLE).max(u32::from(config.first_round_ns))
                };
                let pause = if crowded { 0 } else { by_wins(full, learned.pause_wins).min(by_hold) };
                (pause, by_wins(yield_full, learned.yield_wins))
            }),
        };
        let mut wait = Wait {
            class,
            config,
            costs,
            pause_limit: pause_budget(costs, pause_limit),
            // `Yield` never parks: no count of yields reaches this.
            yield_limit: if yield_limit == u32::MAX { u64::MAX } else { u64::from(yield_limit) },
            explore,
            held: false,
            probe: explore,
            phase: Phase::Pause,
            round: 0,
            phase_ns: 0,
            phase_start: start,
            spun: 0,
            parks: 0,
            start,
            last: start,
            rng: start | 1,
        };
        wait.phase = wait.first_phase();
        wait
    }

    /// The phase a wait starts in, and starts again in after a wake-up.
    fn first_phase(&self) -> Phase {
        if self.pause_limit == 0 && self.yield_limit > 0 {
            Phase::Yield
        } else {
            Phase::Pause
        }
    }

    /// Nanoseconds spent in the current phase: the nominal lengths of its rounds; for the
    /// PAUSE phase the time that passed if longer (a waiter that was preempted while spinning
    /// has spun enough). A yield phase counts its yields only: on a crowded CPU each yield
    /// lasts as long as other threads run, which is the point of yielding.
    fn phase_spent(&self) -> u64 {
        match self.phase {
            Phase::Pause => self.phase_ns.max(self.costs.ticks_to_ns(self.last.wrapping_sub(self.phase_start))),
            Phase::Yield => self.phase_ns,
        }
    }

    fn limit(&self, phase: Phase) -> u64 {
        match phase {
            Phase::Pause => self.pause_limit,
            Phase::Yield => self.yield_limit,
        }
    }

    /// Whether the policy would spin another round now (without spinning).
    #[inline]
    pub(crate) fn would_spin(&self) -> bool {
        self.probe
            || self.phase_spent() < self.limit(self.phase)
            || (self.phase == Phase::Pause && self.yield_limit > 0)
    }

    /// The waiter now holds something others wait for (a writer that owns the writer bit and
    /// waits for readers to drain). An `Adaptive` wait then spins PAUSE rounds for the full
    /// `spin_ns` and yields only for `spin_ns` before parking, whatever it learned (a crowded
    /// CPU's long yield phase would hand its CPU away for whole time slices while it blocks
    /// everyone else), and does not learn from what it meets.
    pub(crate) fn holding(&mut self) {
        if self.config.policy != SpinPolicy::Adaptive {
            return; // the fixed policies wait as they always do
        }
        self.held = true;
        self.explore = false;
        self.probe = false;
        self.pause_limit = pause_budget(self.costs, self.config.spin_ns);
        self.yield_limit = u64::from(self.config.spin_ns);
        self.round = 0;
        self.phase_ns = 0;
        self.phase_start = self.last;
        self.phase = self.first_phase();
    }

    /// Whether the next round would be a `sched_yield` (the yield phase, or a probe), which
    /// does not touch the latch's cache line.
    #[inline]
    pub(crate) fn yielding(&self) -> bool {
        self.probe
            || self.phase == Phase::Yield
            || (self.phase_spent() >= self.limit(Phase::Pause) && self.yield_limit > 0)
    }

    /// Spins one round (PAUSEs, or one `sched_yield`) if the policy allows another before
    /// parking; returns false when the caller should park instead.
    #[inline]
    pub(crate) fn spin(&mut self) -> bool {
        if self.probe {
            self.probe = false;
            timed_yield(self.costs);
            self.spun += 1;
            self.last = ticks();
            self.phase_start = self.last; // the probe is not part of the phase it precedes
            return true;
        }
        if self.phase == Phase::Pause && self.phase_spent() >= self.limit(Phase::Pause) {
            if self.yield_limit == 0 {
                return false;
            }
            self.phase = Phase::Yield;
            self.phase_ns = 0;
            self.phase_start = self.last;
        }
        match self.phase {
            Phase::Pause => {
                let base = self.config.round_ns(self.round);
                // Jitter: a uniformly random length in [ceil(base/2), base], so waiters that
                // collided once do not keep colliding in lockstep.
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                let ns = base - (self.rng % u64::from(base / 2 + 1)) as u32;
                for _ in 0..self.costs.pauses(u64::from(ns)) {
                    spin_loop();
                }
                self.phase_ns += u64::from(ns);
            }
            Phase::Yield => {
                if self.phase_spent() >= self.limit(Phase::Yield) {
                    return false;
                }
                if self.config.policy == SpinPolicy::Adaptive {
                    timed_yield(self.costs);
                } else {
                    yield_now();
                }
                // A yield counts at least as one first round, so the phase ends even where the
                // clock does not move (loom).
                self.phase_ns += u64::from(self.config.first_round_ns);
            }
        }
        self.round += 1;
        self.spun += 1;
        self.last = ticks();
        true
    }

    /// Parks on `key` if `validate` still holds, counting the sleep; returns the unparker's
    /// token, or `None` if `validate` said no. After a wake-up the waiter spins again from
    /// its first phase.
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
            self.phase_ns = 0;
            self.last = ticks();
            self.phase_start = self.last;
            self.phase = self.first_phase();
        }
        token
    }

    /// [`spin`](Self::spin) without the yield phase: false (park instead) where the policy
    /// would yield next, except for an exploring wait's one probe yield, which measures whether
    /// the CPU is crowded. For waits whose holders keep their locks for whole transactions: a
    /// waiter that yields on a crowded CPU takes time slices from threads that have work.
    pub(crate) fn spin_without_yielding(&mut self) -> bool {
        if !self.probe && self.yielding() {
            return false;
        }
        self.spin()
    }

    /// The waiter stopped spinning to sleep somewhere other than [`park`](Self::park) (a lock
    /// request parks on its locker's cell): counted as a park, so that [`done`](Self::done)
    /// learns that the spin did not win.
    pub(crate) fn parks_elsewhere(&mut self) {
        self.parks += 1;
    }

    /// The latch is held: record counters and adaptive feedback (thread-local stores only).
    #[inline]
    pub(crate) fn done(self) {
        add_wait(self.class, self.spun, self.parks, self.last.saturating_sub(self.start));
        if self.config.policy != SpinPolicy::Adaptive || self.held || self.parks > 0 && !self.explore {
            return;
        }
        let _ = LEARNED.try_with(|l| {
            let cell = &l[self.class.index()];
            let mut learned = cell.get();
            // A PAUSE phase wins only within its budget (its last round may overrun by one
            // round): a waiter that lost its CPU mid-phase for longer than that found the latch
            // free because it was away, which says nothing in favour of spinning.
            let spent = self.phase_spent();
            let in_budget = spent <= self.pause_limit.saturating_add(u64::from(self.config.max_round_ns));
            let won_pausing = self.parks == 0 && self.phase == Phase::Pause && in_budget;
            if won_pausing && self.spun > 0 {
                let spent = spent.min(u64::from(u32::MAX)) as u32;
                let spent = spent.max(1);
                learned.win_ns = if learned.win_ns == 0 { spent } else { ema(learned.win_ns, spent).max(1) };
            }
            if self.explore {
                let wins = |won: bool| if won { SUCCESS_ONE } else { 0 };
                // A crowded exploring wait skips the PAUSE phase: it says nothing about it.
                if self.pause_limit == u64::from(self.config.spin_ns) {
                    learned.pause_wins = ema(u32::from(learned.pause_wins), wins(won_pausing)) as u16;
                }
                if !won_pausing && (self.phase == Phase::Yield || self.parks > 0) {
                    let won_yielding = self.parks == 0;
                    learned.yield_wins = ema(u32::from(learned.yield_wins), wins(won_yielding)) as u16;
                }
            }
            cell.set(learned);
        });
    }
}

/// Yields the CPU while `busy()` holds, for as long as each yield runs another thread (the
/// CPU is crowded: threads outnumber cores) and at most `budget_ns`; returns whether `busy()`
/// stopped holding. The first yield that comes straight back (nothing else wanted this CPU)
/// ends it: waiting on would spin an idle CPU, and the caller should park instead.
///
/// For waits that a sleeper would end with a wake-up the waker pays for (a system call, often
/// an inter-processor interrupt): on a crowded CPU a yielding waiter costs nothing that a
/// runnable thread wanted, and the thread it would wait for never has to wake it. Each yield
/// feeds this thread's crowding estimate ([`crowded`]) as the `Adaptive` policy's do.
pub(crate) fn yield_while(mut busy: impl FnMut() -> bool, budget_ns: u64) -> bool {
    let costs = wait_costs();
    let start = ticks();
    let budget = costs.ticks_for_ns(budget_ns);
    loop {
        if !busy() {
            return true;
        }
        if ticks().wrapping_sub(start) >= budget {
            return false;
        }
        if !timed_yield(costs) {
            return !busy();
        }
    }
}

/// One `sched_yield`, timed: returns whether it ran another thread (the CPU is crowded), and
/// feeds this thread's crowding estimate ([`crowded`]) with the answer.
fn timed_yield(costs: &WaitCosts) -> bool {
    let before = ticks();
    yield_now();
    let crowded = ticks().wrapping_sub(before) > costs.crowded_yield_ticks;
    let _ = CROWDED.try_with(|c| c.set(ema(u32::from(c.get()), if crowded { SUCCESS_ONE } else { 0 }) as u16));
    crowded
}

/// Whether this thread currently finds its CPU crowded (its `Adaptive` waits then skip the
/// PAUSE phase).
pub(crate) fn crowded() -> bool {
    CROWDED.with(Cell::get) > (SUCCESS_ONE / 2) as u16
}

/// What this thread has learned about `class`: (P(PAUSE phase wins), P(yield phase wins), both
/// in 1/1024ths; recent winning PAUSE-phase nanoseconds). For tests.
#[cfg(all(test, not(loom)))]
pub(crate) fn learned(class: LatchClass) -> (u16, u16, u32) {
    let l = LEARNED.with(|l| l[class.index()].get());
    (l.pause_wins, l.yield_wins, l.win_ns)
}
