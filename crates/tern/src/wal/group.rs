//! Group commit: who flushes, and how the others learn they are covered.
//!
//! Committers wait for a log position (an LSN) to be written, or written and synced. A waiter
//! that finds the position short and no flush under way becomes the **leader**: it runs the
//! flush (the caller's closure: take the buffer, write, maybe sync, publish the new positions)
//! with no lock held. Waiters that find a flush under way sleep until it ends.
//!
//! **Who is woken.** Flushes are numbered (rounds); each round has a condition variable of
//! two, used alternately. The leader says what its flush covers once it knows
//! ([`Group::flushing`]: the end it writes, and whether it syncs). A waiter whose position the
//! running flush covers sleeps on the round's variable; any other waiter (it appended after the
//! leader took the buffer, or wants a sync the flush will not make, or came before the leader
//! said) sleeps on the next round's. When a flush ends its leader wakes all of its round's
//! sleepers and **one** of the next round's, who leads the next flush (or, finding its position
//! covered after all, returns and passes the wake-up on). Before, every flush woke every waiter:
//! with 32 committers on 2 CPUs, the half not covered woke only to sleep again.
//!
//! # Invariants
//! 1. At most one flush runs at a time (`leading`, under the mutex).
//! 2. No lost wake-up: a waiter decides and sleeps in one critical section. When a flush ends
//!    (under the mutex, `leading` cleared) its round's sleepers are all woken, and if anyone
//!    sleeps on the next round's variable, one of them is; a waiter woken that way that does
//!    not lead passes it on while sleepers remain. So while no flush runs and someone sleeps,
//!    a wake-up is on its way to someone who will lead or pass it on.
//! 3. `written` and `durable` only grow, and a waiter returns `Ok` only once the position it
//!    waits for is covered; after a failed flush every waiter (and every later one) gets the
//!    error instead, and no flush runs again.
//!
//! Model-checked with loom (`loom_tests` below): the same code, with loom's mutex, condition
//! variable and atomics.

use crate::sync::primitive::AtomicBool;
use crate::{Error, Result};
use std::sync::atomic::Ordering::{Acquire, Release};

#[cfg(loom)]
use loom::sync::{atomic::AtomicU64, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{atomic::AtomicU64, Condvar, Mutex, MutexGuard};

struct State {
    leading: bool,
    /// The highest position a waiter wants synced.
    want_sync: u64,
    /// The error that stopped the log.
    failed: Option<String>,
    /// Flushes begun; the running one's waiters sleep on `flushed[round % 2]`.
    round: u64,
    /// What the running flush covers, once its leader said ([`Group::flushing`]): positions up
    /// to `covers`, written, and synced too if `covers_sync`.
    covers: u64,
    covers_sync: bool,
    /// Waiters asleep on each condition variable.
    asleep: [u32; 2],
}

/// Leader election over flushes, and the positions flushes reached.
pub(crate) struct Group {
    state: Mutex<State>,
    /// One per round parity (see the module doc).
    flushed: [Condvar; 2],
    written: AtomicU64,
    durable: AtomicU64,
    /// Set (under the mutex) once `failed` is: the fast check of writers.
    stopped: AtomicBool,
}

impl Group {
    /// Positions start at `start` (written and durable).
    pub fn new(start: u64) -> Group {
        Group {
            state: Mutex::new(State {
                leading: false,
                want_sync: 0,
                failed: None,
                round: 0,
                covers: 0,
                covers_sync: false,
                asleep: [0; 2],
            }),
            flushed: [Condvar::new(), Condvar::new()],
            written: AtomicU64::new(start),
            durable: AtomicU64::new(start),
            stopped: AtomicBool::new(false),
        }
    }

    /// How far the log is written.
    pub fn written(&self) -> u64 {
        self.written.load(Acquire)
    }

    /// How far the log is synced.
    pub fn durable(&self) -> u64 {
        self.durable.load(Acquire)
    }

    /// Called by the leader's flush: the log is written up to `end`.
    pub fn set_written(&self, end: u64) {
        self.written.fetch_max(end, Release);
    }

    /// Called by the leader's flush: the log is synced up to `end`.
    pub fn set_durable(&self, end: u64) {
        self.durable.fetch_max(end, Release);
    }

    /// The error that stopped the log, if any.
    pub fn stop(&self, cause: String) {
        let mut state = self.lock();
        state.failed.get_or_insert(cause);
        self.stopped.store(true, Release);
        self.flushed.iter().for_each(Condvar::notify_all);
    }

    /// Called by the leader's flush once it knows what it covers: it writes the log up to
    /// `end`, and syncs it there if `syncs`. Waiters it covers then sleep until it ends; the
    /// others until the next one (see the module doc). Optional: without it, every waiter
    /// sleeps until the next flush's leader is woken.
    pub fn flushing(&self, end: u64, syncs: bool) {
        let mut state = self.lock();
        state.covers = end;
        state.covers_sync = syncs;
    }

    /// The first error that stopped the log, if any.
    pub fn failed(&self) -> Option<String> {
        if !self.stopped.load(Acquire) {
            return None;
        }
        self.lock().failed.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns once the log is synced (`sync`) or written up to `lsn`. `flush` runs when this
    /// caller leads: given the highest position any waiter wants synced, it flushes and
    /// publishes the positions it reached ([`Group::set_written`], [`Group::set_durable`]).
    /// A failed flush stops the log: its error comes back as
    /// [`Error::CommitNotDurable`], to this and every waiter.
    pub fn wait(&self, lsn: u64, sync: bool, mut flush: impl FnMut(u64) -> Result<()>) -> Result<()> {
        let done = if sync { &self.durable } else { &self.written };
        // Covered already (a mapped log publishes `written` as it appends): no lock.
        if done.load(Acquire) >= lsn && !self.stopped.load(Acquire) {
            return Ok(());
        }
        let mut state = self.lock();
        // The variable this waiter was last woken from as one of the next round's sleepers
        // (it must lead, or pass the wake-up on: invariant 2).
        let mut baton: Option<usize> = None;
        loop {
            if let Some(cause) = &state.failed {
                return Err(Error::CommitNotDurable { cause: cause.clone() });
            }
            if done.load(Acquire) >= lsn {
                if let Some(cv) = baton {
                    if !state.leading && state.asleep[cv] > 0 {
                        self.flushed[cv].notify_one();
                    }
                }
                return Ok(());
            }
            if sync {
                state.want_sync = state.want_sync.max(lsn);
            }
            if state.leading {
                let covered = state.covers >= lsn && (!sync || state.covers_sync);
                let round = state.round + u64::from(!covered);
                let cv = (round % 2) as usize;
                state.asleep[cv] += 1;
                // Decided and slept on in one critical section: the leader wakes this round's
                // sleepers after it clears `leading` under the mutex, so it cannot be missed.
                state = self.flushed[cv].wait(state).unwrap_or_else(|p| p.into_inner());
                state.asleep[cv] -= 1;
                baton = (!covered).then_some(cv);
                continue;
            }
            state.leading = true;
            state.round += 1;
            (state.covers, state.covers_sync) = (0, false);
            let sync_to = state.want_sync;
            drop(state);
            let result = flush(sync_to);
            state = self.lock();
            state.leading = false;
            if let Err(e) = result {
                state.failed.get_or_insert_with(|| e.to_string());
                self.stopped.store(true, Release);
                self.flushed.iter().for_each(Condvar::notify_all);
            } else {
                let (this, next) = ((state.round % 2) as usize, ((state.round + 1) % 2) as usize);
                // Only where someone sleeps: a wake-up is a system call even when nobody waits,
                // and a lone committer leads every flush.
                if state.asleep[this] > 0 {
                    self.flushed[this].notify_all();
                }
                if state.asleep[next] > 0 {
                    self.flushed[next].notify_one();
                }
            }
            baton = None;
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicU64 as Tail;
    use loom::sync::Arc;
    use std::sync::atomic::Ordering::{AcqRel, Relaxed};

    /// `n` committers append one record each and wait for it (every one but the second wants
    /// it synced); the leader's flush says what it covers if `says` (as the log's does). Each
    /// returns covered, and no interleaving loses a wake-up (loom reports that as a deadlock).
    fn committers_return_covered(n: usize, says: bool) {
        loom::model(move || {
            let group = Arc::new(Group::new(0));
            let tail = Arc::new(Tail::new(0));
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let (group, tail) = (group.clone(), tail.clone());
                    loom::thread::spawn(move || {
                        let lsn = tail.fetch_add(1, AcqRel) + 1;
                        let sync = i != 1;
                        group
                            .wait(lsn, sync, |sync_to| {
                                let end = tail.load(Acquire);
                                if says {
                                    group.flushing(end, false);
                                }
                                group.set_written(end);
                                if sync_to > group.durable() {
                                    if says {
                                        group.flushing(end, true);
                                    }
                                    group.set_durable(end);
                                }
                                Ok(())
                            })
                            .unwrap();
                        let reached = if sync { group.durable() } else { group.written() };
                        assert!(reached >= lsn);
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        });
    }

    /// Without the leader saying what it covers, every waiter sleeps until the next flush's
    /// leader is woken: the wake-up must be handed on.
    #[test]
    fn every_waiter_returns_covered() {
        committers_return_covered(2, false);
    }

    /// Three committers, the leader saying what its flush covers: whichever variable each
    /// waiter slept on, it returns covered.
    #[test]
    fn every_waiter_returns_covered_when_the_leader_says_what_it_covers() {
        committers_return_covered(3, true);
    }

    /// A failed flush fails every waiter, and nobody flushes after it.
    #[test]
    fn a_failed_flush_fails_everyone_and_stops_flushing() {
        loom::model(|| {
            let group = Arc::new(Group::new(0));
            let flushes = Arc::new(Tail::new(0));
            let handles: Vec<_> = (1..=2u64)
                .map(|lsn| {
                    let (group, flushes) = (group.clone(), flushes.clone());
                    loom::thread::spawn(move || {
                        let r = group.wait(lsn, true, |_| {
                            flushes.fetch_add(1, Relaxed);
                            Err(Error::InvalidArgument("disk on fire".into()))
                        });
                        assert!(matches!(r, Err(Error::CommitNotDurable { .. })));
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(flushes.load(Relaxed), 1);
        });
    }
}
