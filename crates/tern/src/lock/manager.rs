//! The lock manager: its API, and the request and release paths.

use super::locker::{Held, How, Locker, LockerCounters, LockerShared, Record, WaitTarget, WAITING};
use super::mode::LockMode;
use super::object::{hash, LockObject};
use super::table::{
    owned, owner_of, EntryPtr, Partition, PartitionState, Request, Slow, BIAS_AFTER, FREE, MAX_BIASED, SLOW,
};
use super::wait::Waited;
use super::{DeadlockPolicy, LockConfig, LockStats, LockerLookup, Wait};
use crate::sync::{LatchClass, Mutex, RwLatchWriteGuard};
use crate::{Error, Result};
use crossbeam_utils::CachePadded;
use std::collections::BTreeMap;
use std::sync::atomic::{
    AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// The most times one locker may hold one object at once (re-entrant locks, upgrades
/// included); one more `lock` of it is [`Error::InvalidArgument`].
pub const MAX_HOLDS: u32 = u32::MAX - 1;

/// State shared by the manager and its lockers. Every lock call reads it; aligned so that no
/// neighbouring allocation that some thread writes shares its cache lines.
#[repr(align(128))]
pub(crate) struct Inner {
    pub config: LockConfig,
    pub partitions: Box<[CachePadded<Partition>]>,
    mask: usize,
    /// Every live locker, and the counters of dropped ones. Taken to create or drop a locker,
    /// to revoke a bias, for statistics, and by the deadlock detector; never on the request
    /// path (except in the `GlobalMutex` variant, which exists to measure what that costs).
    pub registry: Mutex<Registry>,
    next_locker: AtomicU64,
    /// Serializes deadlock detection (one detector walks the graph at a time).
    pub detector: Mutex<()>,
    /// The latch class of lockers' `waiting_on`.
    waiting_class: LatchClass,
    /// How a request waits before it parks (`lock.wait`: the latches' spin policy and
    /// counters, applied to waiting for a grant).
    pub wait_class: LatchClass,
    /// Waiters spinning now under [`LockConfig::spinning_waiters`].
    pub spinners: AtomicUsize,
}

/// The lockers of a manager.
#[derive(Default)]
pub(crate) struct Registry {
    /// By id. Ordered, so that walks over it (revocation, detection) are deterministic.
    pub live: BTreeMap<u64, Arc<LockerShared>>,
    /// Counters of dropped lockers.
    retired: LockStats,
}

/// A lock manager. See the [module documentation](super).
pub struct LockManager {
    inner: Arc<Inner>,
    /// The periodic detector: dropping the sender stops it.
    detector: Option<(mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
}

#[cfg(all(test, not(loom)))]
impl LockManager {
    /// Waiters spinning now under `LockConfig::spinning_waiters` (tests).
    pub(crate) fn spinning(&self) -> usize {
        self.inner.spinners.load(Relaxed)
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl LockManager {
    /// Creates a lock manager. Fails with [`Error::InvalidArgument`] for a partition count
    /// above 65536 or a zero detector interval or timeout, and with
    /// [`Error::TooManyLatchClasses`] if the process's latch class table
    /// ([`MAX_CLASSES`](crate::sync::MAX_CLASSES)) is full before its `lock.*` classes are in it.
    pub fn new(config: LockConfig) -> Result<LockManager> {
        let mut config = config;
        if config.partitions == 0 {
            let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
            config.partitions = (cores * 16).next_power_of_two().clamp(64, 4096);
        }
        if config.partitions > 65536 {
            return Err(Error::InvalidArgument(format!("{} lock partitions: at most 65536", config.partitions)));
        }
        config.partitions = config.partitions.next_power_of_two();
        if let DeadlockPolicy::Periodic(d) | DeadlockPolicy::Timeout(d) = config.deadlock {
            if d.is_zero() {
                return Err(Error::InvalidArgument("deadlock interval or timeout must be above zero".into()));
            }
        }
        let class = LatchClass::register("lock.partition")?;
        let partitions = (0..config.partitions).map(|_| Partition::new(class, config.fast_shared)).collect();
        let inner = Arc::new(Inner {
            mask: config.partitions - 1,
            config,
            partitions,
            registry: Mutex::with_class(Registry::default(), LatchClass::register("lock.registry")?),
            next_locker: AtomicU64::new(1),
            detector: Mutex::with_class((), LatchClass::register("lock.detector")?),
            waiting_class: LatchClass::register("lock.waiting")?,
            wait_class: LatchClass::register("lock.wait")?,
            spinners: AtomicUsize::new(0),
        });
        let detector = match config.deadlock {
            DeadlockPolicy::Periodic(interval) => Some(spawn_detector(Arc::downgrade(&inner), interval)?),
            _ => None,
        };
        Ok(LockManager { inner, detector })
    }

    /// The configuration in effect (partitions resolved to the actual count).
    pub fn config(&self) -> LockConfig {
        self.inner.config
    }

    /// A new locker. Lockers are cheap; create one per transaction or per thread.
    pub fn locker(&self) -> Locker {
        let id = self.inner.next_locker.fetch_add(1, Relaxed);
        let shared = Arc::new(LockerShared::new(id, self.inner.waiting_class));
        self.inner.registry.lock().live.insert(id, shared.clone());
        Locker { manager: self.inner.clone(), shared, local: std::cell::RefCell::new(Held::default()) }
    }

    /// Locks `object` in `mode` for `locker`.
    ///
    /// Re-entrant: a locker may lock an object it holds again, in the same or another mode; it
    /// then holds the join of the modes (S then IX gives SIX, S then X gives X: an upgrade,
    /// which waits ahead of new requests) and must `unlock` once per successful `lock`. It may
    /// hold one object at most [`MAX_HOLDS`] times at once.
    ///
    /// Errors: [`Error::WouldBlock`] (with [`Wait::No`], the lock is not free),
    /// [`Error::LockTimeout`], [`Error::Deadlock`] (this request was chosen as the victim of a
    /// deadlock; the locker keeps every lock it already held, in the modes it held them), and
    /// [`Error::InvalidArgument`] for a locker of another manager or a lock past
    /// [`MAX_HOLDS`].
    pub fn lock<'a>(
        &self,
        locker: &Locker,
        object: impl Into<LockObject<'a>>,
        mode: LockMode,
        wait: Wait,
    ) -> Result<()> {
        let object = object.into();
        self.check(locker)?;
        let shared = &locker.shared;
        LockerCounters::bump(&shared.counters.requests, 1);
        let inner = &*self.inner;
        let h = hash(object);
        let mut local = locker.local.borrow_mut();
        if let Some(i) = local.find(h, object) {
            let r = local.get_mut(i);
            if r.count >= MAX_HOLDS {
                return Err(Error::InvalidArgument(format!("a locker holds one object at most {MAX_HOLDS} times")));
            }
            if r.mode.covers(mode) {
                r.count += 1;
                return Ok(());
            }
            return inner.upgrade(shared, &mut local, i, mode, wait);
        }
        if let Some(p) = local.cached(h, object) {
            if inner.take_cached(shared, &mut local, p, h, object, mode) {
                return Ok(());
            }
        }
        if mode.is_read() && inner.config.fast_shared && inner.try_fast(shared, &mut local, h, object, mode) {
            LockerCounters::bump(&shared.counters.fast_grants, 1);
            return Ok(());
        }
        inner.acquire(shared, &mut local, h, object, mode, wait)
    }

    /// Releases one `lock` of `object` by `locker`; the lock goes when every `lock` is matched.
    /// [`Error::LockNotHeld`] if the locker does not hold it.
    pub fn unlock<'a>(&self, locker: &Locker, object: impl Into<LockObject<'a>>) -> Result<()> {
        let object = object.into();
        self.check(locker)?;
        let mut local = locker.local.borrow_mut();
        let Some(i) = local.find(hash(object), object) else { return Err(Error::LockNotHeld) };
        let r = local.get_mut(i);
        if r.count > 1 {
            r.count -= 1;
            return Ok(());
        }
        let r = local.remove(i);
        locker.shared.held.store(local.len(), Relaxed);
        self.inner.release(&locker.shared, r);
        local.remember(&r);
        Ok(())
    }

    /// Releases every lock `locker` holds (commit or abort under two-phase locking).
    pub fn unlock_all(&self, locker: &Locker) -> Result<()> {
        self.check(locker)?;
        self.inner.unlock_all(locker);
        Ok(())
    }

    /// Counters summed over all lockers, live and dropped.
    pub fn stats(&self) -> LockStats {
        self.inner.stats()
    }

    #[inline(always)]
    fn check(&self, locker: &Locker) -> Result<()> {
        if Arc::ptr_eq(&locker.manager, &self.inner) && self.inner.config.locker_lookup == LockerLookup::Handle {
            return Ok(());
        }
        self.check_slow(locker)
    }

    #[cold]
    #[inline(never)]
    fn check_slow(&self, locker: &Locker) -> Result<()> {
        if !Arc::ptr_eq(&locker.manager, &self.inner) {
            return Err(Error::InvalidArgument("the locker belongs to a different lock manager".into()));
        }
        // The Berkeley DB baseline (`LockerLookup::GlobalMutex`): resolve the locker through one
        // global table under one global mutex on every call.
        let found = self.inner.registry.lock().live.get(&locker.shared.id).map(|l| l.id);
        debug_assert_eq!(found, Some(locker.shared.id));
        Ok(())
    }
}

impl Drop for LockManager {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.detector.take() {
            drop(stop);
            let _ = thread.join();
        }
    }
}

fn spawn_detector(
    inner: std::sync::Weak<Inner>,
    interval: Duration,
) -> Result<(mpsc::Sender<()>, std::thread::JoinHandle<()>)> {
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("tern-deadlock".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                let Some(inner) = inner.upgrade() else { break };
                let waiting: Vec<Arc<LockerShared>> =
                    inner.registry.lock().live.values().filter(|l| l.wait.load(Relaxed) == WAITING).cloned().collect();
                for l in &waiting {
                    inner.detect(l);
                }
            }
        })
        .map_err(|e| Error::InvalidArgument(format!("cannot start the deadlock detector thread: {e}")))?;
    Ok((stop, thread))
}

impl Inner {
    #[inline]
    pub fn partition_index(&self, h: u64) -> usize {
        // Bits 32.. choose the partition; hashbrown uses the low bits and the top 7 inside it.
        (h >> 32) as usize & self.mask
    }

    /// The partition's write latch, counting contention.
    #[inline]
    pub fn write(&self, pidx: usize) -> RwLatchWriteGuard<'_, PartitionState> {
        let p = &self.partitions[pidx];
        match p.latch.try_write() {
            Some(g) => g,
            None => {
                p.contended.fetch_add(1, Relaxed);
                p.latch.write()
            }
        }
    }

    /// Records a lock the locker now holds.
    #[inline]
    fn hold(shared: &LockerShared, local: &mut Held, record: Record) {
        local.push(record);
        shared.held.store(local.len(), Relaxed);
    }

    /// Re-takes an entry the locker released lately, if it is still `object`'s and free: one
    /// compare-and-swap, no latch.
    #[inline]
    fn take_cached(
        &self,
        shared: &LockerShared,
        local: &mut Held,
        p: EntryPtr,
        h: u64,
        object: LockObject<'_>,
        mode: LockMode,
    ) -> bool {
        // SAFETY: the locker keeps its manager, and so every entry, alive.
        let e = unsafe { p.get() };
        if e.hash() != h
            || e.owner.load(Relaxed) != FREE
            || e.owner.compare_exchange(FREE, owned(shared.id, mode), Acquire, Relaxed).is_err()
        {
            return false;
        }
        // The swap made this locker the entry's sole owner: nothing renames it now, and the
        // swap's acquire ordered its last renaming (published by a release of FREE) before.
        let entry_hash = e.hash();
        // SAFETY: as just said, this locker holds a lock on the entry.
        if entry_hash == h && unsafe { e.key() }.matches(object) {
            Self::hold(shared, local, Record::new(h, p, object, mode, How::Owned));
            return true;
        }
        // Retired and reused for another object since: give it back (under that object's hash,
        // which picks the partition if an inflation needs the latch).
        self.release(shared, Record::new(entry_hash, p, object, mode, How::Owned));
        false
    }

    /// A lock on an object the locker does not hold yet.
    fn acquire(
        &self,
        shared: &Arc<LockerShared>,
        local: &mut Held,
        h: u64,
        object: LockObject<'_>,
        mode: LockMode,
        wait: Wait,
    ) -> Result<()> {
        let me = shared.id;
        let pidx = self.partition_index(h);
        let part = &self.partitions[pidx];
        let mut g = self.write(pidx);
        let p = g.find_or_insert(h, object);
        let (e, slow) = g.get_mut(p);
        let mut word = e.owner.load(Acquire);
        // Settle who owns the word: us if it is free, or the slow state. Lockers re-taking a
        // cached entry may swap FREE to themselves at any moment, and a sole owner may release
        // to FREE; nothing else changes the word without the latch.
        while word != SLOW {
            let (new, inflated) = match owner_of(word) {
                Some(owner) => (SLOW, Some(owner)),
                None => (owned(me, mode), None),
            };
            match e.owner.compare_exchange(word, new, Acquire, Acquire) {
                Ok(_) => match inflated {
                    Some((owner, held)) => {
                        slow.grant(owner, held);
                        word = SLOW;
                    }
                    None => {
                        drop(g);
                        Self::hold(shared, local, Record::new(h, p, object, mode, How::Owned));
                        return Ok(());
                    }
                },
                Err(now) => word = now,
            }
        }
        if !mode.is_read() {
            self.revoke(slow, part, p.addr());
        }
        if slow.can_grant_new(me, mode) {
            slow.grant_new(me, mode);
            if self.config.fast_shared && mode.is_read() {
                Self::count_read_grant(slow, part);
            }
            drop(g);
            Self::hold(shared, local, Record::new(h, p, object, mode, How::Slow));
            return Ok(());
        }
        let deadline = self.deadline(wait, shared)?;
        Self::enqueue(shared, slow, Request { locker: shared.clone(), mode, upgrade: false }, pidx, h, p);
        drop(g);
        let mut waited = self.wait_for(shared, pidx, h, p.addr(), deadline, false)?;
        while waited == Waited::AskAgain {
            waited = self.ask_again(shared, pidx, h, object, mode, deadline)?;
        }
        Self::hold(shared, local, Record::new(h, p, object, mode, How::Slow));
        Ok(())
    }

    /// A request sent back by a barging release asks again: granted if the lock is still
    /// open (or free), queued again at the front otherwise. The entry is the one it was queued
    /// on: a sent-back waiter keeps it from going idle (`Slow::woken`).
    fn ask_again(
        &self,
        shared: &Arc<LockerShared>,
        pidx: usize,
        h: u64,
        object: LockObject<'_>,
        mode: LockMode,
        deadline: Option<Instant>,
    ) -> Result<Waited> {
        let me = shared.id;
        let mut g = self.write(pidx);
        let p = g.find(h, object).expect("a sent-back waiter keeps its entry in the table");
        let (_, slow) = g.get_mut(p);
        slow.woken -= 1;
        if !mode.is_read() {
            // Readers may have biased the entry while this request was out of the queue.
            self.revoke(slow, &self.partitions[pidx], p.addr());
        }
        if slow.can_grant_new(me, mode) {
            slow.grant_new(me, mode);
            return Ok(Waited::Granted);
        }
        slow.requeue(Request { locker: shared.clone(), mode, upgrade: false });
        Self::mark_waiting(shared, pidx, h, p);
        drop(g);
        self.wait_for(shared, pidx, h, p.addr(), deadline, true)
    }

    /// A read grant in slow mode with no writer around: enough of them in a row turn on the
    /// entry's bias (the scalable shared mode).
    fn count_read_grant(slow: &mut Slow, part: &Partition) {
        // A read that barged past queued or sent-back requests has writers around: fast
        // holders release without the latch and would never wake them.
        if slow.bias || !slow.queue.is_empty() || slow.woken > 0 || !slow.holders.iter().all(|g| g.mode.is_read()) {
            return;
        }
        slow.streak += 1;
        let biased = part.biased.load(Relaxed);
        if slow.streak >= BIAS_AFTER && biased < MAX_BIASED {
            slow.bias = true;
            part.biased.store(biased + 1, Relaxed);
        }
    }

    /// A stronger mode on an object the locker holds (record `i`).
    fn upgrade(
        &self,
        shared: &Arc<LockerShared>,
        local: &mut Held,
        i: usize,
        mode: LockMode,
        wait: Wait,
    ) -> Result<()> {
        let me = shared.id;
        let r = *local.get_mut(i);
        let target = r.mode.join(mode);
        let pidx = self.partition_index(r.hash);
        let part = &self.partitions[pidx];
        let mut g = self.write(pidx);
        let (e, slow) = g.get_mut(r.entry);
        match r.how {
            How::Owned if e.owner.load(Relaxed) == owned(me, r.mode) => {
                // Still the sole owner, so nobody waits: the upgrade is immediate.
                e.owner.store(owned(me, target), Relaxed);
                drop(g);
                Self::upgraded(local, i, target);
                return Ok(());
            }
            // Inflated since: the lock is among the holders.
            How::Owned => local.make_slow(i),
            How::Fast(n) => {
                if !target.is_read() {
                    self.revoke(slow, part, r.entry.addr());
                }
                Self::absorb_fast(shared, slow, r.entry, r.mode, n);
                local.make_slow(i);
            }
            How::Slow => {}
        }
        if !target.is_read() {
            self.revoke(slow, part, r.entry.addr());
        }
        if slow.compatible_with_others(me, target) {
            slow.grant(me, target);
            drop(g);
            Self::upgraded(local, i, target);
            return Ok(());
        }
        let deadline = self.deadline(wait, shared)?;
        Self::enqueue(
            shared,
            slow,
            Request { locker: shared.clone(), mode: target, upgrade: true },
            pidx,
            r.hash,
            r.entry,
        );
        drop(g);
        // Upgrades are never sent back (`Slow::grant_waiters`).
        self.wait_for(shared, pidx, r.hash, r.entry.addr(), deadline, false)?;
        Self::upgraded(local, i, target);
        Ok(())
    }

    /// Record `i`'s lock was upgraded to `mode`: one more `lock` to match.
    fn upgraded(local: &mut Held, i: usize, mode: LockMode) {
        let r = local.get_mut(i);
        r.mode = mode;
        r.count += 1;
    }

    /// Queues `request` and marks its locker waiting on the entry. Caller holds the latch.
    fn enqueue(shared: &LockerShared, slow: &mut Slow, request: Request, pidx: usize, h: u64, p: EntryPtr) {
        slow.enqueue(request);
        Self::mark_waiting(shared, pidx, h, p);
    }

    /// Marks the locker waiting on the entry its request was just queued on. Caller holds the
    /// latch.
    fn mark_waiting(shared: &LockerShared, pidx: usize, h: u64, p: EntryPtr) {
        shared.wait.store(WAITING, Relaxed);
        *shared.waiting_on.lock() = Some(WaitTarget { partition: pidx, hash: h, entry: p.addr() });
    }

    /// When a request that cannot be granted now gives up: `Err` for [`Wait::No`].
    fn deadline(&self, wait: Wait, shared: &LockerShared) -> Result<Option<Instant>> {
        match (wait, self.config.deadlock) {
            (Wait::No, _) => {
                LockerCounters::bump(&shared.counters.would_block, 1);
                Err(Error::WouldBlock)
            }
            // A deadline past what the clock can represent is no deadline.
            (Wait::Timeout(t), _) | (Wait::Forever, DeadlockPolicy::Timeout(t)) => Ok(Instant::now().checked_add(t)),
            (Wait::Forever, _) => Ok(None),
        }
    }

    /// Releases a lock the locker no longer counts (its record is already gone).
    #[inline]
    fn release(&self, shared: &LockerShared, r: Record) {
        match r.how {
            How::Owned => {
                // SAFETY: the record shows the locker holds the entry, which keeps it in the
                // table until this release completes.
                let e = unsafe { r.entry.get() };
                if e.owner.compare_exchange(owned(shared.id, r.mode), FREE, Release, Relaxed).is_ok() {
                    return;
                }
            }
            How::Fast(n) => {
                let slot = &shared.fast[usize::from(n)];
                if slot.compare_exchange(super::locker::slot_value(r.entry, r.mode), 0, Release, Relaxed).is_ok() {
                    return;
                }
                // A revoker converted the slot into a grant: release that.
                slot.store(0, Release);
            }
            How::Slow => {}
        }
        self.release_grant(shared.id, r.hash, r.entry);
    }

    /// Removes `locker`'s grant from the entry's holders and grants what can now be granted.
    fn release_grant(&self, locker: u64, h: u64, p: EntryPtr) {
        let mut g = self.write(self.partition_index(h));
        let (_, slow) = g.get_mut(p);
        slow.ungrant(locker);
        let mut wake = Vec::new();
        slow.grant_waiters(&mut wake, self.config.barging);
        g.settle(p);
        drop(g);
        super::wait::wake_all(&wake);
    }

    pub fn unlock_all(&self, locker: &Locker) {
        let mut local = locker.local.borrow_mut();
        let records = local.take_all();
        locker.shared.held.store(0, Relaxed);
        for r in &records {
            self.release(&locker.shared, *r);
            local.remember(r);
        }
        local.reuse(records);
    }

    /// Called when a locker is dropped.
    pub fn release_locker(&self, locker: &Locker) {
        self.unlock_all(locker);
        let mut registry = self.registry.lock();
        registry.live.remove(&locker.shared.id);
        registry.retired.add_locker(&locker.shared);
    }

    fn stats(&self) -> LockStats {
        let mut s = {
            // Under one lock: a locker dropped meanwhile is counted exactly once.
            let registry = self.registry.lock();
            let mut s = registry.retired.clone();
            s.lockers = registry.live.len();
            for l in registry.live.values() {
                s.add_locker(l);
            }
            s
        };
        s.objects = 0;
        s.entries = 0;
        s.revocations = 0;
        s.partition_contention = Vec::with_capacity(self.partitions.len());
        for p in self.partitions.iter() {
            let g = p.latch.read();
            s.entries += g.len();
            s.objects += g.in_use();
            drop(g);
            s.revocations += p.revocations.load(Relaxed);
            s.partition_contention.push(p.contended.load(Relaxed));
        }
        s
    }
}

impl LockStats {
    fn add_locker(&mut self, l: &LockerShared) {
        let c = &l.counters;
        self.requests += c.requests.load(Relaxed);
        self.fast_grants += c.fast_grants.load(Relaxed);
        self.waits += c.waits.load(Relaxed);
        self.wait_ns += c.wait_ns.load(Relaxed);
        self.deadlocks += c.deadlocks.load(Relaxed);
        self.timeouts += c.timeouts.load(Relaxed);
        self.would_block += c.would_block.load(Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
impl LockManager {
    /// Every entry in use, and every locker's wait state (for diagnosing a stuck test).
    pub(crate) fn dump(&self) -> String {
        let mut out = String::new();
        for (i, p) in self.inner.partitions.iter().enumerate() {
            out += &p.latch.read().describe(i);
        }
        let lockers: Vec<_> = self.inner.registry.lock().live.values().cloned().collect();
        for l in &lockers {
            let on = *l.waiting_on.lock();
            out += &format!("locker {} wait={} on={on:?}\n", l.id, l.wait.load(Relaxed));
        }
        out
    }
}
