//! Group commit: who flushes, and how the others learn they are covered.
//!
//! Committers wait for a log position (an LSN) to be written, or written and synced. A waiter
//! that finds the position short and no flush under way becomes the **leader**: it runs the
//! flush (the caller's closure: take the buffer, write, maybe sync, publish the new positions)
//! with no lock held. Waiters that find a flush under way sleep until it ends.
//!
//! **Who is woken.** Flushes are numbered (rounds); waiters sleep by round parity (two
//! parking keys, used alternately). The leader says what its flush covers once it knows
//! ([`Group::flushing`]: the end it writes, and whether it syncs). A waiter whose position the
//! running flush covers sleeps on the round's parity; any other waiter (it appended after the
//! leader took the buffer, or wants a sync the flush will not make, or came before the leader
//! said) on the next round's. When a flush ends its leader wakes all of its round's sleepers;
//! they return without taking the mutex (one flush can cover every committer, and each would
//! otherwise queue for it on waking). Before, every flush woke every waiter: with 32
//! committers on 2 CPUs, the half not covered woke only to sleep again.
//!
//! **Chained flushes.** If others sleep for the next round, the leader runs that flush too, up
//! to `chain` flushes after its own ([`WalConfig::chain_flushes`](super::WalConfig)), so the
//! next `fdatasync` starts at once instead of after a sleeper's wake-up. After its last flush
//! it wakes **one** of the next round's sleepers, who leads the next flush (or, finding its
//! position covered after all, returns and passes the wake-up on).
//!
//! # Invariants
//! 1. At most one flush runs at a time (`leading`, under the mutex).
//! 2. No lost wake-up: a waiter decides to sleep and counts itself in `asleep` under the
//!    mutex, and parks only if its parity's `woken` count is still what it read there. A
//!    flush's end bumps its round parity's count under the mutex and, once it has let the
//!    mutex go, unparks all of that parity's parked sleepers (a sleeper parked after the bump
//!    cannot exist: it would have seen it); then, unless it chains, it unparks one of the
//!    next round's; if none of those is parked yet, it bumps that parity too (under the
//!    mutex), so every one of them looks again. A waiter woken alone that does not lead
//!    passes it on while sleepers remain. So while no flush runs and someone sleeps, a
//!    wake-up is on its way to someone who will lead or pass it on. An unpark made outside
//!    the mutex can also wake a sleeper that parked for a later round on the same parity:
//!    it finds itself woken alone and looks again (it leads, or sleeps again, counted).
//! 3. `written` and `durable` only grow, and a waiter returns `Ok` only once the position it
//!    waits for is covered; after a failed flush every waiter (and every later one) gets the
//!    error instead, except a leader whose own flush covered it before a flush it chained for
//!    others failed; and no flush runs again.
//!
//! Model-checked with loom (`loom_tests` below): the same code, with loom's mutex and atomics
//! and the model of `sync::park`.

use crate::sync::park::{self, TOKEN_RETRY};
use crate::sync::primitive::{AtomicBool, AtomicU64};
use crate::sync::spin;
use crate::{Error, Result};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};

struct State {
    leading: bool,
    /// The highest position a waiter wants synced.
    want_sync: u64,
    /// The error that stopped the log.
    failed: Option<String>,
    /// Flushes begun; the running one's waiters sleep on parity `round % 2`.
    round: u64,
    /// What the running flush covers, once its leader said ([`Group::flushing`]): positions up
    /// to `covers`, written, and synced too if `covers_sync`.
    covers: u64,
    covers_sync: bool,
    /// Waiters asleep (or deciding to) for each round parity, not yet woken by a flush's end.
    asleep: [u32; 2],
}

/// How long a waiter on a crowded CPU yields before it parks (a few flushes of a fast disk;
/// a slower one's waiters park).
const YIELD_NS: u64 = 1_000_000;

/// Leader election over flushes, and the positions flushes reached.
pub(crate) struct Group {
    state: Mutex<State>,
    /// One per round parity (see the module doc): how many times a flush's end (or a stop)
    /// woke every sleeper of that parity. Bumped under the mutex; sleepers park on its address
    /// and tell by it whether they were woken with all the others.
    woken: [AtomicU64; 2],
    written: AtomicU64,
    durable: AtomicU64,
    /// Set (under the mutex) once `failed` is: the fast check of writers.
    stopped: AtomicBool,
    /// Flushes a leader may run after its first while others sleep for the next one.
    chain: u32,
}

impl Group {
    /// Positions start at `start` (written and durable); a leader runs up to `chain` flushes
    /// after its first while others wait for the next one.
    pub fn new(start: u64, chain: u32) -> Group {
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
            woken: [AtomicU64::new(0), AtomicU64::new(0)],
            written: AtomicU64::new(start),
            durable: AtomicU64::new(start),
            stopped: AtomicBool::new(false),
            chain,
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
        (0..2).for_each(|cv| self.wake_all(&mut state, cv));
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
                if let Some(cv) = baton.filter(|&cv| !state.leading && state.asleep[cv] > 0) {
                    drop(state);
                    self.hand_on(cv);
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
                let gen = self.woken[cv].load(Relaxed);
                drop(state);
                // Decided before the mutex was let go, and `validate` runs under the parking
                // queue's lock: a flush's end that wakes this parity bumps `woken[cv]` first,
                // so it either finds this waiter parked or makes it not park (invariant 2).
                // On a crowded CPU (more committers than cores) it yields while the flush runs
                // instead of parking: its CPU goes to threads with work, it notices the flush's
                // end at its next turn, and the leader need not wake it (with 32 committers on
                // 2 CPUs the wake-ups were a quarter of each flush cycle).
                spin::yield_while(|| self.woken[cv].load(Acquire) == gen, YIELD_NS);
                // SAFETY: the key is this group's own atomic; `validate` only loads it.
                unsafe { park::park(self.key(cv), || self.woken[cv].load(Relaxed) == gen) };
                // Woken with every sleeper of its parity and covered: done, no mutex taken (a
                // flush's end wakes up to all its committers at once).
                let all = self.woken[cv].load(Acquire) != gen;
                if all && done.load(Acquire) >= lsn && !self.stopped.load(Acquire) {
                    return Ok(());
                }
                state = self.lock();
                // Woken with all (that flush's end took this waiter off the count and dealt
                // with the next round's sleepers itself), or alone, to lead the next flush.
                let all = self.woken[cv].load(Relaxed) != gen;
                if !all {
                    state.asleep[cv] = state.asleep[cv].checked_sub(1).expect("a sleeper woken alone is still counted");
                }
                baton = (!covered && !all).then_some(cv);
                continue;
            }
            let own_flush_ok = self.lead(state, &mut flush);
            // Its own flush succeeded and reached this leader's position: a later flush it
            // chained for others may have failed, but that is theirs to report.
            if own_flush_ok && done.load(Acquire) >= lsn {
                return Ok(());
            }
            state = self.lock();
            baton = None;
        }
    }

    /// Runs flushes as the leader, from the locked `state` with no flush under way, and
    /// returns with the mutex released and no flush under way, telling whether the first
    /// flush (the leader's own) succeeded. After each flush it wakes the sleepers the flush
    /// covered; if others sleep for the next one, it runs that one too, up to [`Group::chain`]
    /// flushes after its own, so the next flush starts at once instead of after a sleeper's
    /// wake-up; after the last one it wakes one of them to lead.
    ///
    /// The wake-ups are system calls made after the mutex is released: a woken thread often
    /// runs at once on the waker's CPU, and with the mutex still held it (or any committer
    /// arriving) would block on it behind the preempted leader. Under the mutex the leader
    /// only marks the covered parity woken (`woken[cv]` bumped, its sleepers uncounted), so a
    /// sleeper that has not parked yet sees the mark in `validate` and does not park, and
    /// every one parked before it is in the queue the unpark then empties.
    fn lead<'a>(&'a self, mut state: MutexGuard<'a, State>, flush: &mut impl FnMut(u64) -> Result<()>) -> bool {
        state.leading = true;
        let mut runs = 0u32;
        loop {
            state.round += 1;
            (state.covers, state.covers_sync) = (0, false);
            let sync_to = state.want_sync;
            drop(state);
            let result = flush(sync_to);
            state = self.lock();
            runs += 1;
            if let Err(e) = result {
                state.leading = false;
                state.failed.get_or_insert_with(|| e.to_string());
                self.stopped.store(true, Release);
                (0..2).for_each(|cv| self.wake_all(&mut state, cv));
                return runs > 1;
            }
            let (this, next) = ((state.round % 2) as usize, ((state.round + 1) % 2) as usize);
            let covered_sleep = self.mark_woken(&mut state, this);
            let last = state.asleep[next] == 0 || runs > self.chain || state.failed.is_some();
            let hand_on = last && state.asleep[next] > 0;
            if last {
                state.leading = false;
            }
            drop(state);
            if covered_sleep {
                // SAFETY: the key is this group's own atomic.
                unsafe { park::unpark_all(self.key(this)) };
            }
            if last {
                if hand_on {
                    self.hand_on(next);
                }
                return true;
            }
            state = self.lock();
        }
    }

    /// The parking key of round parity `cv`.
    fn key(&self, cv: usize) -> usize {
        &self.woken[cv] as *const AtomicU64 as usize
    }

    /// Marks every sleeper of round parity `cv` woken (under the mutex: `state` is its
    /// guard): they are uncounted and `woken[cv]` bumped, so none parks from here on. Returns
    /// whether any slept: the caller then unparks them ([`park::unpark_all`] on its key).
    fn mark_woken(&self, state: &mut State, cv: usize) -> bool {
        // Only where someone sleeps: a wake-up is a system call even when nobody waits, and a
        // lone committer leads every flush.
        if state.asleep[cv] == 0 {
            return false;
        }
        state.asleep[cv] = 0;
        self.woken[cv].fetch_add(1, Release);
        true
    }

    /// Wakes every sleeper of round parity `cv` (under the mutex: `state` is its guard).
    fn wake_all(&self, state: &mut State, cv: usize) {
        if self.mark_woken(state, cv) {
            // SAFETY: the key is this group's own atomic.
            unsafe { park::unpark_all(self.key(cv)) };
        }
    }

    /// Wakes one sleeper of round parity `cv` to lead the next flush (a leader whose last flush
    /// ended, or a waiter woken alone that found itself covered), from outside the mutex. If
    /// none is parked yet (one decided to sleep but has not parked), every sleeper
    /// of `cv` still counted is told to look again instead, so the wake-up cannot be lost.
    fn hand_on(&self, cv: usize) {
        // SAFETY: the key is this group's own atomic; the callback touches nothing.
        let woke = unsafe { park::unpark_one(self.key(cv), |_| TOKEN_RETRY) };
        if !woke.unparked {
            self.wake_all(&mut self.lock(), cv);
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
    fn committers_return_covered(n: usize, says: bool, chain: u32) {
        loom::model(move || {
            let group = Arc::new(Group::new(0, chain));
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
        committers_return_covered(2, false, 0);
    }

    /// Three committers, the leader saying what its flush covers: whichever variable each
    /// waiter slept on, it returns covered.
    #[test]
    fn every_waiter_returns_covered_when_the_leader_says_what_it_covers() {
        committers_return_covered(3, true, 0);
    }

    /// The same with chained flushes: a leader that runs the next round's flush itself wakes
    /// that round's sleepers at its end, and after its last one hands the next on.
    #[test]
    fn every_waiter_returns_covered_when_leaders_chain_flushes() {
        committers_return_covered(3, true, 1);
    }

    /// Chained flushes, the second of which fails: the leader, whose position its first flush
    /// made durable, returns `Ok`; every committer returns `Ok` only if durable, else the
    /// error (a waiter covered by the first flush but woken after the failure may get the
    /// error too: its commit may or may not survive, as the error says).
    #[test]
    fn a_leader_whose_chained_flush_fails_returns_its_own_durable_commit() {
        loom::model(|| {
            let group = Arc::new(Group::new(0, 1));
            let tail = Arc::new(Tail::new(0));
            let flushes = Arc::new(Tail::new(0));
            let first = Arc::new(Tail::new(0));
            let handles: Vec<_> = (1..=3u64)
                .map(|me| {
                    let (group, tail, flushes, first) = (group.clone(), tail.clone(), flushes.clone(), first.clone());
                    loom::thread::spawn(move || {
                        let lsn = tail.fetch_add(1, AcqRel) + 1;
                        let r = group.wait(lsn, true, |_| {
                            if flushes.fetch_add(1, Relaxed) > 0 {
                                return Err(Error::InvalidArgument("disk on fire".into()));
                            }
                            first.store(me, Relaxed);
                            let end = tail.load(Acquire);
                            group.flushing(end, true);
                            group.set_written(end);
                            group.set_durable(end);
                            Ok(())
                        });
                        if first.load(Relaxed) == me {
                            assert!(r.is_ok(), "the leader's own flush made it durable: {r:?}");
                        }
                        match r {
                            Ok(()) => assert!(group.durable() >= lsn),
                            Err(e) => assert!(matches!(e, Error::CommitNotDurable { .. })),
                        }
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
            let group = Arc::new(Group::new(0, 0));
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
