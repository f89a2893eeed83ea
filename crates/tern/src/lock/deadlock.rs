//! Deadlock detection on the waits-for graph.
//!
//! A waiting locker points at the entry its request is queued on ([`WaitTarget`]); its
//! out-edges go to the holders whose modes conflict with its request and to every request
//! queued ahead of it (strict FIFO: it cannot pass them). The graph is never materialized: the
//! detector walks it depth-first from one waiting locker, reading one partition at a time under
//! its read latch, looking for a path back to the start.
//!
//! Because the walk reads partitions one after another, the cycle it finds may already have
//! dissolved (a holder released, a waiter timed out). So before choosing a victim, the detector
//! write-latches every partition on the cycle, in ascending index order (the only place that
//! holds two partition latches, and it holds the detector mutex, so no two threads ever do),
//! and re-checks every edge. A cycle that holds with all its partitions latched is a deadlock:
//! every locker on it is blocked inside `lock`, and only the detector, a timeout or a grant can
//! change a queued request, all of which need one of those latches. Exactly one victim per
//! cycle is removed, its request fails with `Error::Deadlock`, and the requests behind it are
//! granted where they now can be.

use super::locker::{LockerShared, WaitTarget, DEADLOCK, WAITING};
use super::manager::Inner;
use super::wait::wake_all;
use super::VictimPolicy;
use std::collections::HashSet;
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::Arc;

/// Verification failures tolerated per call: each one means the graph changed under the walk
/// (a grant, a timeout, another victim), so retrying makes progress; past this many the caller
/// is told the result is inconclusive and tries again later.
const ATTEMPTS: usize = 16;

/// What one detection pass concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Detection {
    /// No cycle runs through the start locker (any found were broken).
    Clear,
    /// Cycles kept dissolving before they could be verified: look again later.
    Inconclusive,
}

impl Inner {
    /// Breaks every deadlock cycle through `start`. One locker can sit on several cycles at
    /// once (it waits for A and for B, each of which waits for it), and breaking one by
    /// aborting another locker leaves the rest, so this repeats until no cycle through `start`
    /// is left or `start` itself stopped waiting.
    pub(crate) fn detect(&self, start: &Arc<LockerShared>) -> Detection {
        let _serial = self.detector.lock();
        let mut failures = 0;
        loop {
            let Some(cycle) = self.find_cycle(start) else { return Detection::Clear };
            if self.break_cycle(&cycle) {
                if start.wait.load(Relaxed) != WAITING {
                    return Detection::Clear;
                }
            } else {
                failures += 1;
                if failures == ATTEMPTS {
                    return Detection::Inconclusive;
                }
            }
        }
    }

    /// The lockers `l` waits for, read under its partition's read latch.
    fn blockers_of(&self, l: &LockerShared) -> Option<Vec<u64>> {
        let target = (*l.waiting_on.lock())?;
        let g = self.partitions[target.partition].latch.read();
        let p = g.find_addr(target.hash, target.entry)?;
        g.get(p).1.blockers(l.id)
    }

    pub(crate) fn find_cycle(&self, start: &Arc<LockerShared>) -> Option<Vec<Arc<LockerShared>>> {
        let mut visited = HashSet::from([start.id]);
        let mut path: Vec<(Arc<LockerShared>, Vec<u64>)> = vec![(start.clone(), self.blockers_of(start)?)];
        while let Some((_, pending)) = path.last_mut() {
            match pending.pop() {
                None => {
                    path.pop();
                }
                Some(b) if b == start.id => return Some(path.into_iter().map(|(l, _)| l).collect()),
                Some(b) => {
                    if !visited.insert(b) {
                        continue;
                    }
                    let Some(next) = self.registry.lock().live.get(&b).cloned() else { continue };
                    if let Some(blockers) = self.blockers_of(&next) {
                        path.push((next, blockers));
                    }
                }
            }
        }
        None
    }

    /// Verifies `cycle` with all its partitions latched and, if it holds, aborts one victim.
    fn break_cycle(&self, cycle: &[Arc<LockerShared>]) -> bool {
        let Some(targets) = cycle.iter().map(|l| *l.waiting_on.lock()).collect::<Option<Vec<WaitTarget>>>() else {
            return false;
        };
        let mut pids: Vec<usize> = targets.iter().map(|t| t.partition).collect();
        pids.sort_unstable();
        pids.dedup();
        let mut guards: Vec<_> = pids.iter().map(|&p| (p, self.write(p))).collect();
        let k = cycle.len();
        for i in 0..k {
            let (l, next, t) = (&cycle[i], &cycle[(i + 1) % k], targets[i]);
            if l.wait.load(Relaxed) != WAITING {
                return false;
            }
            let g = &guards.iter().find(|(p, _)| *p == t.partition).expect("latched").1;
            let Some(p) = g.find_addr(t.hash, t.entry) else { return false };
            if !g.get(p).1.blockers(l.id).is_some_and(|b| b.contains(&next.id)) {
                return false;
            }
        }
        let victim = match self.config.victim {
            VictimPolicy::Youngest => (0..k).max_by_key(|&i| cycle[i].id),
            VictimPolicy::FewestLocks => (0..k).min_by_key(|&i| (cycle[i].held.load(Relaxed), u64::MAX - cycle[i].id)),
        }
        .expect("a cycle has lockers");
        let (v, t) = (&cycle[victim], targets[victim]);
        let g = &mut guards.iter_mut().find(|(p, _)| *p == t.partition).expect("latched").1;
        let p = g.find_addr(t.hash, t.entry).expect("verified above");
        let (_, slow) = g.get_mut(p);
        slow.dequeue(v.id);
        v.wait.store(DEADLOCK, Release);
        let mut wake = vec![v.clone()];
        slow.grant_waiters(&mut wake, self.config.barging);
        drop(guards);
        wake_all(&wake);
        true
    }
}
