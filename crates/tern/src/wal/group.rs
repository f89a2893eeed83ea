//! Group commit: who flushes, and how the others learn they are covered.
//!
//! Committers wait for a log position (an LSN) to be written, or written and synced. A waiter
//! that finds the position short and no flush under way becomes the **leader**: it runs the
//! flush (the caller's closure: take the buffer, write, maybe sync, publish the new positions)
//! with no lock held, then wakes everyone. Waiters that find a flush under way sleep on the
//! condition variable and look again when it ends: the flush may not cover them (they may have
//! appended after the leader took the buffer), in which case one of them leads the next.
//!
//! # Invariants
//! 1. At most one flush runs at a time (`leading`, under the mutex).
//! 2. No lost wake-up: a waiter checks `leading` under the mutex and sleeps in the same critical
//!    section; the leader clears `leading` under the mutex and then notifies everyone.
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
}

/// Leader election over flushes, and the positions flushes reached.
pub(crate) struct Group {
    state: Mutex<State>,
    flushed: Condvar,
    written: AtomicU64,
    durable: AtomicU64,
    /// Set (under the mutex) once `failed` is: the fast check of writers.
    stopped: AtomicBool,
}

impl Group {
    /// Positions start at `start` (written and durable).
    pub fn new(start: u64) -> Group {
        Group {
            state: Mutex::new(State { leading: false, want_sync: 0, failed: None }),
            flushed: Condvar::new(),
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
        self.flushed.notify_all();
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
        let mut state = self.lock();
        loop {
            if let Some(cause) = &state.failed {
                return Err(Error::CommitNotDurable { cause: cause.clone() });
            }
            if done.load(Acquire) >= lsn {
                return Ok(());
            }
            if sync {
                state.want_sync = state.want_sync.max(lsn);
            }
            if state.leading {
                // Checked and slept on in one critical section: the leader's notify comes
                // after it clears `leading` under the mutex, so it cannot be missed.
                state = self.flushed.wait(state).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            state.leading = true;
            let sync_to = state.want_sync;
            drop(state);
            let result = flush(sync_to);
            state = self.lock();
            state.leading = false;
            if let Err(e) = result {
                state.failed.get_or_insert_with(|| e.to_string());
                self.stopped.store(true, Release);
            }
            self.flushed.notify_all();
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicU64 as Tail;
    use loom::sync::Arc;
    use std::sync::atomic::Ordering::{AcqRel, Relaxed};

    /// Two committers append one record each and wait for it: both return covered, and no
    /// interleaving loses a wake-up (loom reports that as a deadlock).
    #[test]
    fn every_waiter_returns_covered() {
        loom::model(|| {
            let group = Arc::new(Group::new(0));
            let tail = Arc::new(Tail::new(0));
            let handles: Vec<_> = (0..2)
                .map(|i| {
                    let (group, tail) = (group.clone(), tail.clone());
                    loom::thread::spawn(move || {
                        let lsn = tail.fetch_add(1, AcqRel) + 1;
                        let sync = i == 0;
                        group
                            .wait(lsn, sync, |sync_to| {
                                let end = tail.load(Acquire);
                                group.set_written(end);
                                if sync_to > group.durable() {
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
