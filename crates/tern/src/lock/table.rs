//! The object table: partitions of lock entries, and the granting rules of one entry.
//!
//! An [`Entry`] has two parts:
//!
//! * its **owner word** ([`Entry::owner`]), an atomic that names a *sole owner* (one locker, one
//!   mode, nobody waiting), [`FREE`], or [`SLOW`]. A sole owner is installed under the
//!   partition's write latch but releases with one compare-and-swap and no latch: the common
//!   uncontended lock costs one latch round trip, its unlock one atomic instruction.
//! * its **slow state** ([`Slow`]): holders, FIFO queue, shared-mode bias, barging state. Used
//!   while the word is `SLOW`, read and written only under the partition's latch (read for the
//!   fast shared path, write for everything else). A request that finds a sole owner
//!   *inflates* the entry: it swaps the word to `SLOW` and records the owner as an ordinary
//!   holder; the owner's own release then fails its compare-and-swap and takes the latch.
//!
//! Entries live behind stable pointers ([`EntryPtr`]) so that lockers, fast slots and wait
//! targets can name them by address. An entry leaves its partition's table only when it is
//! idle (word `FREE`: no holder, no waiter, no bias), and only by a sweep that runs when the
//! table has doubled since the last one, so objects locked again and again keep their entry.
//!
//! Entries are **type-stable**: a swept entry is *retired* (word [`RETIRED`]) onto the
//! partition's free list and reused for the next new object, never freed while the manager
//! lives. That lets a locker keep the address of an entry it released and later re-take it with
//! one compare-and-swap from `FREE`, with no latch and no lookup (see `Held`'s cache): the
//! memory is always an entry, a retired entry never matches `FREE`, and the locker checks the
//! entry's name once the swap made it the owner (nothing renames an owned entry). Memory thus
//! follows the peak number of entries in use at once (plus sweep slack), not the number of
//! objects ever locked.

use super::locker::{LockerShared, GRANTED, RETRY};
use super::mode::LockMode;
use super::object::{Key, LockObject};
use crate::sync::aligned::LineAligned;
use crate::sync::primitive::AtomicU64;
use crate::sync::RwLatch;
use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Owner word: no lock-free owner, and the slow state is idle.
pub(crate) const FREE: u64 = 0;
/// Owner word: the slow state (holders, queue, bias) describes the entry.
pub(crate) const SLOW: u64 = 1;
/// Owner word tag of a sole owner: `locker id << 8 | mode << 4 | OWNED`.
const OWNED: u64 = 2;
/// Owner word: the entry is on its partition's free list, in no table.
pub(crate) const RETIRED: u64 = 4;

/// The owner word naming `locker` as sole owner in `mode`.
#[inline]
pub(crate) fn owned(locker: u64, mode: LockMode) -> u64 {
    locker << 8 | (mode as u64) << 4 | OWNED
}

/// The sole owner a word names, if any.
#[inline]
pub(crate) fn owner_of(word: u64) -> Option<(u64, LockMode)> {
    (word & OWNED != 0).then(|| (word >> 8, LockMode::ALL[(word >> 4 & 7) as usize]))
}

/// A lock held by one locker on one entry. How many times the locker locked it is the locker's
/// own business (its record counts); the entry only needs who holds what.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub locker: u64,
    pub mode: LockMode,
}

/// A waiting request.
pub(crate) struct Request {
    pub locker: Arc<LockerShared>,
    /// The mode the locker will hold once granted (for an upgrade, the join with what it holds).
    pub mode: LockMode,
    /// The locker already holds the object (a conversion): queued ahead of new requests.
    pub upgrade: bool,
}

/// The part of an entry used while its owner word is `SLOW`.
#[derive(Default)]
pub(crate) struct Slow {
    pub holders: Vec<Grant>,
    pub queue: VecDeque<Request>,
    /// Lockers may take `IS`/`S` by publishing in their own fast slots instead of appearing in
    /// `holders`. While set, the entry stays in the table (slots point at it) and any other
    /// mode revokes it first.
    pub bias: bool,
    /// Consecutive read-mode grants with no writer around; enables the bias at `BIAS_AFTER`.
    pub streak: u32,
    /// The lock was released to competition (barging, [`Slow::grant_waiters`]): the next
    /// request compatible with the holders takes it although requests are queued.
    pub open: bool,
    /// Waiters sent back to ask again (cell `RETRY`) that have not asked yet. While one is
    /// out, a release wakes nobody else, and the entry is not idle.
    pub woken: u32,
    /// When the next release hands the lock to its first waiter instead of opening it.
    pub fair_at: Option<Instant>,
}

/// How often, at most, a released lock opens to competition rather than going to its first
/// waiter: bounds how long bargers can keep a waiter out.
pub(crate) const FAIR_EVERY: Duration = Duration::from_millis(1);

/// Read grants in a row that turn on an entry's bias.
pub(crate) const BIAS_AFTER: u32 = 4;

impl Slow {
    #[inline]
    pub fn holder(&self, locker: u64) -> Option<usize> {
        self.holders.iter().position(|g| g.locker == locker)
    }

    /// Whether `mode` is compatible with every holder other than `locker`.
    #[inline]
    pub fn compatible_with_others(&self, locker: u64, mode: LockMode) -> bool {
        self.holders.iter().all(|g| g.locker == locker || g.mode.compatible(mode))
    }

    /// Nothing but the owner word could reference the entry.
    pub fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty() && !self.bias && self.woken == 0
    }

    /// Whether a request for `mode` that is not queued can be granted now: compatible with
    /// the holders, and no queued request ahead of it unless the lock is open (barging).
    #[inline]
    pub fn can_grant_new(&self, locker: u64, mode: LockMode) -> bool {
        (self.queue.is_empty() || self.open) && self.compatible_with_others(locker, mode)
    }

    /// Grants a request that was not queued (see [`Slow::can_grant_new`]); closes an open lock.
    pub fn grant_new(&mut self, locker: u64, mode: LockMode) {
        self.open = false;
        self.grant(locker, mode);
    }

    /// Records that `locker` holds `mode` (already joined with anything it held).
    pub fn grant(&mut self, locker: u64, mode: LockMode) {
        match self.holder(locker) {
            Some(i) => self.holders[i].mode = mode,
            None => self.holders.push(Grant { locker, mode }),
        }
        if !mode.is_read() {
            self.streak = 0;
        }
    }

    /// Removes `locker`'s grant; returns whether it had one.
    pub fn ungrant(&mut self, locker: u64) -> bool {
        match self.holder(locker) {
            Some(i) => {
                self.holders.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Where a new request goes: upgrades after the upgrades already waiting, others last.
    pub fn enqueue(&mut self, request: Request) {
        let front = request.upgrade;
        self.place(request, front);
    }

    /// A returning waiter (sent back by a barging release) queues again where it was: at the
    /// front, behind the upgrades.
    pub fn requeue(&mut self, request: Request) {
        self.place(request, true);
    }

    /// Queues `request` behind the upgrades (`front`) or last; a writer ends a read streak.
    fn place(&mut self, request: Request, front: bool) {
        if !request.mode.is_read() {
            self.streak = 0;
        }
        if front {
            let at = self.queue.iter().take_while(|r| r.upgrade).count();
            self.queue.insert(at, request);
        } else {
            self.queue.push_back(request);
        }
    }

    /// After a release (or a queued request leaving), grants what can be granted and pushes
    /// the lockers to wake.
    ///
    /// Without `barging`, and with it when the first request is an upgrade or not `X`, or a
    /// [`FAIR_EVERY`] has passed since this entry last handed over: queued requests are
    /// granted in FIFO order for as long as the first one is compatible (a compatible request
    /// never passes an incompatible one ahead of it).
    ///
    /// With `barging`, an `X` request first in line is instead sent back (cell `RETRY`, out
    /// of the queue) and the lock left *open*: the first compatible request takes it, which is
    /// usually a running thread asking again right away rather than the parked waiter, whose
    /// wake-up would otherwise hold up every hand-over (a convoy once threads outnumber CPUs).
    /// The waiter asks again and, if it loses, queues at the front again. While a sent-back
    /// waiter is out, further releases only open the lock.
    pub fn grant_waiters(&mut self, wake: &mut Vec<Arc<LockerShared>>, barging: bool) {
        if barging && self.open_to_competition() {
            if self.woken == 0 {
                let r = self.queue.pop_front().expect("checked by open_to_competition");
                r.locker.wait.store(RETRY, Release);
                self.woken += 1;
                wake.push(r.locker);
            }
            return;
        }
        while let Some(r) = self.queue.front() {
            if !self.compatible_with_others(r.locker.id, r.mode) {
                break;
            }
            let r = self.queue.pop_front().expect("front exists");
            self.grant(r.locker.id, r.mode);
            r.locker.wait.store(GRANTED, Release);
            wake.push(r.locker);
        }
    }

    /// Whether a release opens the lock (see [`Slow::grant_waiters`]) and so sets it open;
    /// otherwise a hand-over is due (or the first request cannot be granted).
    fn open_to_competition(&mut self) -> bool {
        let Some(r) = self.queue.front() else { return false };
        if r.upgrade || r.mode != LockMode::X || !self.compatible_with_others(r.locker.id, r.mode) {
            return false;
        }
        let now = Instant::now();
        if self.fair_at.is_some_and(|due| now >= due) {
            self.fair_at = Some(now + FAIR_EVERY);
            self.open = false;
            return false;
        }
        self.fair_at.get_or_insert(now + FAIR_EVERY);
        self.open = true;
        true
    }

    /// Removes `locker`'s queued request, if any; returns whether there was one.
    pub fn dequeue(&mut self, locker: u64) -> bool {
        match self.queue.iter().position(|r| r.locker.id == locker) {
            Some(i) => {
                self.queue.remove(i);
                true
            }
            None => false,
        }
    }

    /// The lockers `locker`'s queued request waits for: holders whose mode conflicts with it,
    /// and every request queued ahead of it (strict FIFO). `None` if it has no request here.
    pub fn blockers(&self, locker: u64) -> Option<Vec<u64>> {
        let at = self.queue.iter().position(|r| r.locker.id == locker)?;
        let mode = self.queue[at].mode;
        let mut out: Vec<u64> =
            self.holders.iter().filter(|g| g.locker != locker && !g.mode.compatible(mode)).map(|g| g.locker).collect();
        out.extend(self.queue.iter().take(at).map(|r| r.locker.id));
        Some(out)
    }
}

/// One locked (or recently locked) object. Aligned to 128 bytes so that no other allocation
/// shares its cache lines (or their adjacent-line prefetch pair): many threads read a hot entry
/// at once, and a neighbour written by one of them would make every read a miss.
#[repr(align(128))]
pub(crate) struct Entry {
    /// `FREE`, `SLOW`, `RETIRED` or a sole owner ([`owned`]). Any locker may swap `FREE` to
    /// itself as sole owner (the latch path or a cached entry); a sole owner swaps its own word
    /// back to `FREE`; every other change happens under the partition's write latch.
    pub owner: AtomicU64,
    /// The object's hash. Written only while the entry is retired, under the write latch; read
    /// by anyone (a locker checks it before trying a cached entry, so a recycled entry is
    /// almost never swapped by mistake).
    hash: std::sync::atomic::AtomicU64,
    /// The object's name. Written only while the entry is retired, under the write latch; read
    /// under the latch or by a locker that holds a lock on the entry.
    key: UnsafeCell<Key>,
    /// Accessed only through [`PartitionState::get`] / [`PartitionState::get_mut`], that is
    /// under the partition's latch.
    slow: UnsafeCell<Slow>,
}

// SAFETY: `owner` and `hash` are atomic; `key` and `slow` are reached only under the rules
// above, which the partition latch and the owner word order.
unsafe impl Sync for Entry {}

impl Entry {
    /// The object's key.
    ///
    /// # Safety
    /// The caller holds the partition's latch, or a lock on this entry (taken with an acquire
    /// of the owner word or under the latch), so no renaming can run concurrently.
    #[inline]
    pub unsafe fn key(&self) -> &Key {
        // SAFETY: renaming needs the entry retired, which the caller's hold excludes.
        unsafe { &*self.key.get() }
    }

    /// The object's hash (current only under the latch or a lock on the entry; a hint
    /// otherwise).
    #[inline]
    pub fn hash(&self) -> u64 {
        self.hash.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A stable pointer to an [`Entry`] owned by a partition.
///
/// It may be dereferenced (see [`EntryPtr::get`]) while the entry is in its partition's table:
/// by a holder of the partition's latch, or by a locker that holds a lock on the entry (a sole
/// owner, a holder, a fast holder), which keeps the entry in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryPtr(NonNull<Entry>);

// SAFETY: an `EntryPtr` is an address; dereferencing it is governed by `get`'s contract, and
// the fields it exposes without the latch are an atomic and immutable data.
unsafe impl Send for EntryPtr {}
// SAFETY: as for `Send`.
unsafe impl Sync for EntryPtr {}

impl EntryPtr {
    #[inline]
    pub fn addr(self) -> usize {
        self.0.as_ptr() as usize
    }

    /// The entry.
    ///
    /// # Safety
    /// The entry's lock manager must be alive (entries are freed only when it is dropped).
    #[inline]
    pub unsafe fn get<'a>(self) -> &'a Entry {
        // SAFETY: entries are type-stable: allocated by a partition and freed only by its
        // `Drop`, which the caller's contract excludes.
        unsafe { self.0.as_ref() }
    }
}

/// A partition's table is swept of idle entries when it reaches this many entries, or twice
/// as many as the last sweep left.
const SWEEP_MIN: usize = 32;
/// Most entries with the bias on per partition (they cannot leave the table until revoked).
pub(crate) const MAX_BIASED: usize = 64;

/// One partition's state, under its latch. Owns its entries.
pub(crate) struct PartitionState {
    /// In isolated blocks: every request reads it, and a neighbour some thread writes would make
    /// each read a miss.
    table: HashTable<EntryPtr, LineAligned>,
    free: Vec<EntryPtr>,
    sweep_at: usize,
}

// SAFETY: the partition owns its entries; all access to their slow state goes through
// `&PartitionState` / `&mut PartitionState`, which the latch hands out.
unsafe impl Send for PartitionState {}
// SAFETY: as for `Send`: shared access gives only shared access to the slow states.
unsafe impl Sync for PartitionState {}

impl Default for PartitionState {
    fn default() -> Self {
        PartitionState { table: HashTable::new_in(LineAligned), free: Vec::new(), sweep_at: SWEEP_MIN }
    }
}

impl PartitionState {
    /// Entries in the table (held, waited on, biased, or idle and not yet swept).
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Entries held, waited on or biased.
    pub fn in_use(&self) -> usize {
        // SAFETY: entries of a live manager (we hold its partition).
        self.table.iter().filter(|p| unsafe { p.get() }.owner.load(Acquire) != FREE).count()
    }

    /// Every entry in use: holders, queue, bias (for diagnosing a stuck test).
    #[cfg(all(test, not(loom)))]
    pub fn describe(&self, partition: usize) -> String {
        let mut out = String::new();
        for &p in self.table.iter() {
            let (e, slow) = self.get(p);
            let word = e.owner.load(Acquire);
            if word == FREE {
                continue;
            }
            let q: Vec<_> = slow.queue.iter().map(|r| (r.locker.id, r.mode, r.upgrade)).collect();
            out += &format!(
                "p{partition} {:?} owner={:?} bias={} holders={:?} queue={q:?}\n",
                // SAFETY: under the latch.
                unsafe { e.key() },
                owner_of(word),
                slow.bias,
                slow.holders
            );
        }
        out
    }

    #[inline]
    pub fn find(&self, hash: u64, object: LockObject<'_>) -> Option<EntryPtr> {
        self.table.find(hash, |&p| self.names(p, hash, object)).copied()
    }

    /// Whether the entry `p` of this table is the one for `object`.
    #[inline]
    fn names(&self, p: EntryPtr, hash: u64, object: LockObject<'_>) -> bool {
        // SAFETY: `p` is in the table, and `&self` means the latch is held.
        let e = unsafe { p.get() };
        // SAFETY: under the latch.
        e.hash() == hash && unsafe { e.key() }.matches(object)
    }

    /// The entry at `addr` (a locker's record, slot or wait target names it so).
    #[inline]
    pub fn find_addr(&self, hash: u64, addr: usize) -> Option<EntryPtr> {
        self.table.find(hash, |p| p.addr() == addr).copied()
    }

    /// The entry for `object`, created (or recycled) if the table has none.
    pub fn find_or_insert(&mut self, hash: u64, object: LockObject<'_>) -> EntryPtr {
        if let Some(p) = self.find(hash, object) {
            return p;
        }
        if self.table.len() >= self.sweep_at {
            self.sweep();
        }
        let p = match self.free.pop() {
            Some(p) => {
                // SAFETY: a retired entry is in no table and its word is not FREE, so nobody
                // holds it or reads its key; the write latch (`&mut self`) excludes other renames.
                let (e, key) = unsafe { (p.get(), &mut *p.get().key.get()) };
                key.set(object);
                e.hash.store(hash, std::sync::atomic::Ordering::Relaxed);
                // Publishes the name to lockers that swap the word from FREE.
                e.owner.store(FREE, Release);
                p
            }
            None => EntryPtr(NonNull::from(Box::leak(Box::new(Entry {
                owner: AtomicU64::new(FREE),
                hash: std::sync::atomic::AtomicU64::new(hash),
                key: UnsafeCell::new(Key::new(object)),
                slow: UnsafeCell::new(Slow::default()),
            })))),
        };
        // SAFETY: the entries being rehashed are in the table, under the write latch.
        self.table.insert_unique(hash, p, |p| unsafe { p.get() }.hash());
        p
    }

    /// The entry and its slow state, for reading under the read (or write) latch.
    #[inline]
    pub fn get(&self, p: EntryPtr) -> (&Entry, &Slow) {
        debug_assert!(self.find_addr(self.hash_of(p), p.addr()).is_some(), "entry of another partition");
        // SAFETY: `p` is in this partition's table (the caller got it from this partition under
        // the latch it still holds), and `&self` excludes writers of any slow state in it.
        unsafe { (p.get(), &*p.get().slow.get()) }
    }

    /// The entry and its slow state, for changing under the write latch.
    #[inline]
    pub fn get_mut(&mut self, p: EntryPtr) -> (&Entry, &mut Slow) {
        debug_assert!(self.find_addr(self.hash_of(p), p.addr()).is_some(), "entry of another partition");
        // SAFETY: as in `get`; `&mut self` makes this the only access to any slow state of the
        // partition for the reference's lifetime.
        unsafe { (p.get(), &mut *p.get().slow.get()) }
    }

    fn hash_of(&self, p: EntryPtr) -> u64 {
        // SAFETY: only used by the debug checks above, on entries of this manager.
        unsafe { p.get() }.hash()
    }

    /// If the entry's slow state became idle, hands the entry back to the lock-free path.
    pub fn settle(&mut self, p: EntryPtr) {
        let (e, slow) = self.get_mut(p);
        if slow.is_idle() {
            slow.open = false;
            e.owner.store(FREE, Release);
        }
    }

    /// Retires idle entries: out of the table, onto the free list.
    fn sweep(&mut self) {
        let free = &mut self.free;
        self.table.retain(|&mut p| {
            // SAFETY: entries of a live manager (we hold its partition).
            let e = unsafe { p.get() };
            // `FREE` means idle (a latch holder moves SLOW to FREE only when the slow state is
            // idle); a locker swapping FREE to itself right now wins or loses this swap.
            if e.owner.compare_exchange(FREE, RETIRED, Acquire, Acquire).is_err() {
                return true;
            }
            free.push(p);
            false
        });
        self.sweep_at = (self.table.len() * 2).max(SWEEP_MIN);
    }
}

impl Drop for PartitionState {
    fn drop(&mut self) {
        for p in self.table.drain().chain(self.free.drain(..)) {
            // SAFETY: the manager is being dropped, so no locker exists (each holds the
            // manager) and nothing else references entries; each was made by `Box::leak`.
            drop(unsafe { Box::from_raw(p.0.as_ptr()) });
        }
    }
}

/// A partition of the object table: its latch and counters, on their own cache lines.
pub(crate) struct Partition {
    pub latch: RwLatch<PartitionState>,
    /// Entries with the shared-mode bias on. Changed under the write latch; read without it as
    /// a hint (zero: no read request here can take the fast shared path, skip trying).
    pub biased: std::sync::atomic::AtomicUsize,
    /// Biases revoked. Changed under the write latch.
    pub revocations: std::sync::atomic::AtomicU64,
    /// Write-latch acquisitions that found the latch taken.
    pub contended: std::sync::atomic::AtomicU64,
}

impl Partition {
    pub fn new(class: crate::sync::LatchClass, reader_bias: bool) -> CachePadded<Partition> {
        CachePadded::new(Partition {
            latch: RwLatch::with_options(PartitionState::default(), class, reader_bias),
            biased: Default::default(),
            revocations: Default::default(),
            contended: Default::default(),
        })
    }
}
