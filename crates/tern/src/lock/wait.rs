//! Waiting for a queued request: parking, timeouts, and deadlock checks while waiting.
//!
//! A waiter parks on its locker's wait cell. Whoever decides the request (a grant, a barging
//! release sending it back to ask again, the deadlock detector, or the waiter's own timeout)
//! changes the cell under the partition latch the request is queued under, then unparks it
//! after releasing the latch; the waiter re-checks the cell before sleeping (under the parking
//! lot's queue lock), so no wakeup is lost.
//!
//! Before it first parks, a waiter spins with PAUSE as a latch of class `lock.wait` would
//! (`sync::spin`; with the default adaptive policy for as long as such spins have been
//! winning, and not at all when threads outnumber CPUs), but never yields: a holder keeps its
//! lock for a whole transaction, and a waiter yielding on a crowded CPU takes time slices from
//! threads that have work (YCSB F at 8 threads on 2 CPUs lost 29% that way). A grant that
//! comes during the spin is seen without a sleep and a wake-up: on a hot row (TPC-B's branch)
//! each hand-over otherwise costs a futex wake and the wake-up of the next holder. The spin
//! only reads the cell; what it sees is re-checked by the loop below, so the protocol is the
//! one above. `LatchClass::set_policy(SpinPolicy::Park)` on `lock.wait` parks at once.
//!
//! Up to `LockConfig::spinning_waiters` waiters (default: the CPUs minus one) spin longer
//! first, up to 50 µs, while their thread finds the CPU not crowded: a waiter spinning on a
//! core nobody else needs takes a hot lock the moment it is released. A parked waiter costs the
//! release a wake-up, and the lock stays free until the waiter runs, while the cores idle
//! (TPC-B's branch row at 8 threads on 2 CPUs: two thirds idle). The count bounds the
//! spinners so that they never take every core from the holder; on a crowded CPU nobody spins
//! this way. Same protocol: the spin only reads the cell.

use super::deadlock::Detection;
use super::locker::{LockerCounters, LockerShared, DEADLOCK, GRANTED, IDLE, RETRY, WAITING};
use super::manager::Inner;
use super::DeadlockPolicy;
use crate::sync::counters::add_wait;
use crate::sync::park::{park_until, unpark_all};
use crate::sync::primitive::ticks;
use crate::sync::spin::{crowded, Wait as Spin};
use crate::sync::SpinPolicy;
use crate::{Error, Result};
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one of the
/// [`LockConfig::spinning_waiters`](super::LockConfig::spinning_waiters) spins before it parks.
const WAITER_SPIN: Duration = Duration::from_micros(50);

/// How long a waiter whose deadlock search was inconclusive waits before searching again.
const DETECT_RETRY: Duration = Duration::from_millis(10);

impl Inner {
    /// Waits until the queued request is granted, sent back to ask again (a barging release),
    /// chosen as a deadlock victim, or times out. `again`: the locker was sent back before in
    /// this `lock` call (its wait is counted once).
    pub(crate) fn wait_for(
        &self,
        shared: &Arc<LockerShared>,
        pidx: usize,
        h: u64,
        addr: usize,
        deadline: Option<Instant>,
        again: bool,
    ) -> Result<Waited> {
        let start = Instant::now();
        if !again {
            LockerCounters::bump(&shared.counters.waits, 1);
        }
        let mut recheck = self.detect_on_conflict(shared);
        self.spin_for_decision(shared, deadline);
        // Whether the park timed out at the deadline (the clock says so too, except under
        // loom, whose parking model lets deadlines pass at once).
        let mut expired = false;
        let result = loop {
            match shared.wait.load(Acquire) {
                GRANTED => break Ok(Waited::Granted),
                RETRY => break Ok(Waited::AskAgain),
                DEADLOCK => break Err(Error::Deadlock),
                _ => {}
            }
            let now = Instant::now();
            if expired || deadline.is_some_and(|d| now >= d) {
                break self.time_out(shared, pidx, h, addr);
            }
            if recheck.is_some_and(|r| now >= r) {
                recheck = self.detect_on_conflict(shared);
            }
            let wake_at = match (deadline, recheck) {
                (Some(d), Some(r)) => Some(d.min(r)),
                (d, r) => d.or(r),
            };
            // SAFETY: the key is this locker's wait cell, which no other primitive parks on;
            // the validation is a single load.
            let timed_out = unsafe { park_until(shared.park_key(), || shared.wait.load(Acquire) == WAITING, wake_at) };
            expired = timed_out && wake_at == deadline;
        };
        *shared.waiting_on.lock() = None;
        shared.wait.store(IDLE, Relaxed);
        let c = &shared.counters;
        LockerCounters::bump(&c.wait_ns, start.elapsed().as_nanos() as u64);
        match result {
            Err(Error::Deadlock) => LockerCounters::bump(&c.deadlocks, 1),
            Err(Error::LockTimeout) => LockerCounters::bump(&c.timeouts, 1),
            _ => {}
        }
        result
    }

    /// Spins (see the module doc) until the request is decided, the deadline passes, or the
    /// policy says park. Not under loom: its models cover the parking protocol, which this
    /// only precedes.
    fn spin_for_decision(&self, shared: &LockerShared, deadline: Option<Instant>) {
        if cfg!(loom) {
            return;
        }
        if self.spin_as_one_of_the_spinning_waiters(shared, deadline) {
            return;
        }
        let mut spin = Spin::new(self.wait_class);
        while shared.wait.load(Acquire) == WAITING {
            if deadline.is_some_and(|d| Instant::now() >= d) || !spin.spin_without_yielding() {
                spin.parks_elsewhere();
                break;
            }
        }
        spin.done();
    }

    /// If fewer than [`LockConfig::spinning_waiters`](super::LockConfig::spinning_waiters)
    /// waiters spin now, this thread finds its CPU not crowded and `lock.wait` is not told to
    /// park at once: spins until the request is
    /// decided, [`WAITER_SPIN`] has passed or the deadline, counted as a wait of `lock.wait`
    /// (a park if it ends undecided). Returns whether it was one of them.
    fn spin_as_one_of_the_spinning_waiters(&self, shared: &LockerShared, deadline: Option<Instant>) -> bool {
        if self.config.spinning_waiters == 0 || self.wait_class.config().policy == SpinPolicy::Park || crowded() {
            return false;
        }
        let mine = self.spinners.fetch_add(1, Relaxed) < self.config.spinning_waiters;
        if mine {
            let (start, until) = (ticks(), Instant::now() + WAITER_SPIN);
            let mut rounds = 0;
            while shared.wait.load(Acquire) == WAITING {
                let now = Instant::now();
                if now >= until || deadline.is_some_and(|d| now >= d) {
                    break;
                }
                for _ in 0..8 {
                    std::hint::spin_loop();
                }
                rounds += 1;
            }
            let parks = u64::from(shared.wait.load(Acquire) == WAITING);
            add_wait(self.wait_class, rounds, parks, ticks().wrapping_sub(start));
        }
        self.spinners.fetch_sub(1, Relaxed);
        mine
    }

    /// Under [`DeadlockPolicy::OnConflict`], looks for cycles through the waiter; returns when
    /// to look again if the search was inconclusive.
    fn detect_on_conflict(&self, shared: &Arc<LockerShared>) -> Option<Instant> {
        let inconclusive =
            self.config.deadlock == DeadlockPolicy::OnConflict && self.detect(shared) == Detection::Inconclusive;
        inconclusive.then(|| Instant::now() + DETECT_RETRY)
    }

    /// The waiter's deadline passed: leave the queue, unless a grant or the detector got there
    /// first (both act under the partition latch, like this).
    fn time_out(&self, shared: &LockerShared, pidx: usize, h: u64, addr: usize) -> Result<Waited> {
        let mut g = self.write(pidx);
        match shared.wait.load(Acquire) {
            GRANTED => return Ok(Waited::Granted),
            // Out of the queue already; asking again finds the deadline passed if it waits.
            RETRY => return Ok(Waited::AskAgain),
            DEADLOCK => return Err(Error::Deadlock),
            _ => {}
        }
        let p = g.find_addr(h, addr).expect("a queued request keeps its entry in the table");
        let (_, slow) = g.get_mut(p);
        slow.dequeue(shared.id);
        let mut wake = Vec::new();
        slow.grant_waiters(&mut wake, self.config.barging);
        g.settle(p);
        drop(g);
        wake_all(&wake);
        Err(Error::LockTimeout)
    }
}

/// How a wait ended, short of an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    /// The request was granted.
    Granted,
    /// A barging release sent the request back: out of the queue, the locker asks again.
    AskAgain,
}

/// Wakes lockers whose requests were granted, sent back or refused (after the latch is
/// released).
pub(crate) fn wake_all(lockers: &[Arc<LockerShared>]) {
    for l in lockers {
        // SAFETY: the key is the locker's wait cell (see `wait_for`).
        unsafe { unpark_all(l.park_key()) };
    }
}
