//! [`Txn`]: one transaction's reads, writes, scans, commit and abort.

use super::chains::{short_id, Chains};
use super::context::{claim_slot, next_commit_ts, Slot, COMMITTING, IDLE};
use super::gc::Item;
use super::scan::{TxnCursor, TxnRange};
use super::version::{retire, Reader, Version, View, ABORTED, LATEST, UNCOMMITTED};
use super::{Counter, TxnOptions};
use crate::btree::stored::{Change, Current, LeafHint, Resolve};
use crate::btree::MAX_VALUE;
use crate::db::{DbInner, Table, TableInner};
use crate::lock::{key_id, LockMode, LockObject, Locker, Wait};
use crate::wal::record::Payload;
use crate::wal::Durability;
use crate::{Error, Result};
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Release, SeqCst};
use std::sync::Arc;

/// What a writing transaction holds: its locker and the keys it wrote. Pooled by the database
/// (the locker and the list's capacity are reused; a write transaction allocates neither).
pub(crate) struct Writer {
    pub locker: Locker,
    writes: Vec<Write>,
    /// Keys read by [`Txn::get_for_update`] (table id, key): their writes check no conflict.
    locked_reads: Vec<(u32, Box<[u8]>)>,
    /// The commit's log record, built before the log's latch is taken.
    payload: Payload,
}

impl Writer {
    pub fn new(locker: Locker) -> Writer {
        Writer { locker, writes: Vec::new(), locked_reads: Vec::new(), payload: Payload::default() }
    }

    /// Whether `key` of table `table` was read by [`Txn::get_for_update`].
    fn read_locked(&self, table: u32, key: &[u8]) -> bool {
        self.locked_reads.iter().any(|(t, k)| *t == table && **k == *key)
    }
}

/// A key the transaction wrote, and its version (to stamp at commit, unlink at abort).
struct Write {
    /// `None`: the default table.
    table: Option<Arc<TableInner>>,
    key: Box<[u8]>,
    version: *mut Version,
    /// The leaf the write changed, for the collector to start from.
    leaf: LeafHint,
}

// SAFETY: the version is `Send + Sync`; the pointer is only dereferenced by the transaction that
// made it (which stays on its thread), and a pooled write list is always empty.
unsafe impl Send for Write {}

/// A transaction, from [`Db::begin`](crate::Db::begin), [`Db::begin_read`](crate::Db::begin_read)
/// or [`Db::begin_with`](crate::Db::begin_with).
///
/// Reads see the snapshot of the moment it began, plus its own writes. [`commit`](Txn::commit)
/// and [`abort`](Txn::abort) consume it; dropping it uncommitted aborts it. A transaction stays
/// on the thread that began it (it is neither `Send` nor `Sync`).
pub struct Txn<'db> {
    // Kept small (64 bytes): a transaction is moved by value on every begin and commit; a large
    // move costs a library `memcpy` and a store-forwarding stall on the next read.
    db: &'db DbInner,
    slot: &'static Slot,
    snapshot: u64,
    /// The write sequence number in the slot (read-write transactions).
    seq: u64,
    /// How long a write waits for a lock: [`NO_WAIT`], [`FOREVER`], or nanoseconds.
    wait_ns: u64,
    /// Locks and writes, from the database's pool at the first write.
    writer: Option<Box<Writer>>,
    /// The context's index (picks the locker pool and the collection queue).
    shard: u32,
    /// The context's index when it is this thread's own (exclusive counter shard); `SHARED`
    /// otherwise.
    owner: u32,
    /// Why the transaction can only be aborted now: `OK`, `CONFLICTED`, `DEADLOCKED`.
    failed: u8,
    /// `Some(d)` overrides the database's durability: `DEFAULT`, `SYNC`, `NO_SYNC`, `PERIODIC`.
    durability: u8,
    read_only: bool,
    finished: bool,
    /// Holds a ticket of the database's admission gate (returned at the end).
    ticket: bool,
    _thread_bound: PhantomData<*const ()>,
}

const NO_WAIT: u64 = 0;
const FOREVER: u64 = u64::MAX;
const SHARED: u32 = u32::MAX;
const OK: u8 = 0;
const CONFLICTED: u8 = 1;
const DEADLOCKED: u8 = 2;
const DEFAULT: u8 = 0;
const SYNC: u8 = 1;
const NO_SYNC: u8 = 2;
const PERIODIC: u8 = 3;

/// What a write did to its key's chain.
enum Outcome {
    /// Nothing to delete.
    Nothing,
    /// A new version on top of the chain (`created`: versions allocated, the base of a former
    /// plain value included).
    Pushed { version: *mut Version, created: u64, existed: bool },
    /// The transaction's own version, rewritten.
    Rewrote { existed: bool },
    /// A newer committed version than the snapshot.
    Conflict,
}

impl<'db> Txn<'db> {
    // Always inlined: the transaction is then built where the caller keeps it, not built and
    // copied (a copy of a freshly written struct stalls on store forwarding).
    #[inline(always)]
    pub(crate) fn begin(db: &'db DbInner, options: TxnOptions) -> Txn<'db> {
        // Before the snapshot: a transaction that waits for a ticket holds nothing.
        let ticket = !options.read_only && admit(db);
        let claimed = claim_slot(db.id);
        let slot = claimed.slot;
        let snapshot = match &db.global {
            None => slot.announce(),
            Some(list) => {
                let snapshot = list.begin(slot);
                slot.announce_snapshot(snapshot);
                snapshot
            }
        };
        let seq = if options.read_only { 0 } else { slot.start_writing() };
        let index = claimed.context.index as u32;
        let owner = if claimed.own { index } else { SHARED };
        Txn {
            db,
            slot,
            snapshot,
            seq,
            wait_ns: match options.lock_wait {
                _ if options.read_only => FOREVER,
                Wait::No => NO_WAIT,
                Wait::Forever => FOREVER,
                Wait::Timeout(d) => u64::try_from(d.as_nanos()).unwrap_or(FOREVER - 1).clamp(1, FOREVER - 1),
            },
            writer: None,
            shard: index,
            owner,
            failed: OK,
            durability: match options.durability {
                None => DEFAULT,
                Some(Durability::Sync) => SYNC,
                Some(Durability::NoSync) => NO_SYNC,
                Some(Durability::Periodic(_)) => PERIODIC,
            },
            read_only: options.read_only,
            finished: false,
            ticket,
            _thread_bound: PhantomData,
        }
    }

    #[inline]
    fn count(&self, counter: Counter, n: u64) {
        self.db.counters.add((self.owner != SHARED).then_some(self.owner as usize), counter, n);
    }

    /// Who reads: the snapshot, and (read-write) the transaction's own writes.
    #[inline]
    fn reader(&self) -> Reader {
        Reader { snapshot: self.snapshot, me: (!self.read_only).then_some((self.slot, self.seq)) }
    }

    /// How this transaction's reads resolve version chains.
    #[inline]
    pub(crate) fn view(&self) -> View<'db> {
        View { reader: self.reader(), chains: &self.db.chains }
    }

    fn lock_wait(&self) -> Wait {
        match self.wait_ns {
            NO_WAIT => Wait::No,
            FOREVER => Wait::Forever,
            ns => Wait::Timeout(std::time::Duration::from_nanos(ns)),
        }
    }

    fn fail_reason(&self) -> &'static str {
        match self.failed {
            CONFLICTED => "a write conflict",
            _ => "a deadlock",
        }
    }

    /// The snapshot timestamp: this transaction sees every commit at or below it.
    pub fn snapshot(&self) -> u64 {
        self.snapshot
    }

    /// Whether this transaction was begun read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Table `name` of the database ([`Error::NoSuchTable`] if there is none).
    pub fn table(&self, name: &str) -> Result<Table> {
        self.db.table(name)
    }

    // ---- reads ----

    /// The value of `key` in the default table.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_from(&self.db.default_table, key)
    }

    /// The value of `key` in `table`.
    pub fn get_in(&self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_table(table)?;
        self.get_from(&table.inner, key)
    }

    /// Copies the value of `key` in the default table into `out` (cleared first; its capacity
    /// is reused, so a loop of reads allocates nothing); false if there is none.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.read_into(&self.db.default_table, key, out)
    }

    /// [`Txn::get_into`] in `table`.
    pub fn get_into_in(&self, table: &Table, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.check_table(table)?;
        self.read_into(&table.inner, key, out)
    }

    fn get_from(&self, table: &TableInner, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.read_into(table, key, &mut out)?.then_some(out))
    }

    fn read_into(&self, table: &TableInner, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.check_usable()?;
        self.db.settle(table, key)?;
        table.tree.get_resolved(key, &self.view(), out)
    }

    /// The entries of the default table with keys in `range` (e.g. `&b"a"[..]..&b"m"[..]`, or
    /// `..`), in key order; `.rev()` for descending order.
    pub fn range<'k>(&self, range: impl RangeBounds<&'k [u8]>) -> Result<TxnRange<'_>> {
        self.check_usable()?;
        self.db.settle_range(&self.db.default_table, bounds(&range))?;
        Ok(TxnRange::new(self.db.default_table.tree.range_with(range, self.view())))
    }

    /// [`Txn::range`] over `table`.
    pub fn range_in<'t, 'k>(&'t self, table: &'t Table, range: impl RangeBounds<&'k [u8]>) -> Result<TxnRange<'t>> {
        self.check_usable()?;
        self.check_table(table)?;
        self.db.settle_range(&table.inner, bounds(&range))?;
        Ok(TxnRange::new(table.inner.tree.range_with(range, self.view())))
    }

    /// A cursor over the entries of the default table with keys in `range` (`..` for all), as
    /// this transaction sees them (its snapshot and its own writes), not yet positioned. Its
    /// key and value are borrowed from it until it moves: a scan through it copies each entry
    /// once into buffers it reuses, and allocates nothing per entry. [`TxnCursor`] shows how to
    /// move it.
    pub fn cursor<'k>(&self, range: impl RangeBounds<&'k [u8]>) -> Result<TxnCursor<'_>> {
        self.check_usable()?;
        self.db.settle_range(&self.db.default_table, bounds(&range))?;
        Ok(TxnCursor::new(self.db.default_table.tree.cursor_with(self.view()), range))
    }

    /// [`Txn::cursor`] over `table`.
    pub fn cursor_in<'t, 'k>(&'t self, table: &'t Table, range: impl RangeBounds<&'k [u8]>) -> Result<TxnCursor<'t>> {
        self.check_usable()?;
        self.check_table(table)?;
        self.db.settle_range(&table.inner, bounds(&range))?;
        Ok(TxnCursor::new(table.inner.tree.cursor_with(self.view()), range))
    }

    // ---- writes ----

    /// A locking read (as SQL's `SELECT ... FOR UPDATE`): locks `key` of the default table
    /// exclusively, as a write does (waiting as [`TxnOptions::lock_wait`] says), then returns
    /// its **newest committed value**, or this transaction's own write, rather than the
    /// snapshot's.
    ///
    /// What it guarantees: until this transaction ends nobody else writes the key, and a later
    /// [`put`](Txn::put) or [`delete`](Txn::delete) of it by this transaction never fails with
    /// [`Error::Conflict`], even if the key was committed after the snapshot: the write
    /// replaces the value this read returned. A read-modify-write of a hot row (TPC-B's branch
    /// balance, a counter) then waits for the row instead of failing after the wait and
    /// retrying. What it does not change: [`get`](Txn::get) and scans still read the snapshot
    /// (a plain read of the same key may return an older value, as InnoDB's consistent reads
    /// do beside its locking reads), and keys read without a lock keep first-updater-wins.
    ///
    /// Errors: as a write's lock ([`Error::WouldBlock`], [`Error::LockTimeout`],
    /// [`Error::Deadlock`], which fails the transaction), [`Error::ReadOnlyTxn`], and the
    /// key checks of [`put`](Txn::put).
    pub fn get_for_update(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (db, mut out) = (self.db, Vec::new());
        Ok(self.read_for_update(&db.default_table, key, &mut out)?.then_some(out))
    }

    /// [`Txn::get_for_update`] in `table`.
    pub fn get_for_update_in(&mut self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_table(table)?;
        let mut out = Vec::new();
        Ok(self.read_for_update(&table.inner, key, &mut out)?.then_some(out))
    }

    /// [`Txn::get_for_update`] into `out` (cleared first, its capacity reused, as
    /// [`Txn::get_into`]); false if there is no value.
    pub fn get_for_update_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let db = self.db;
        self.read_for_update(&db.default_table, key, out)
    }

    fn read_for_update(&mut self, table: &TableInner, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.check_usable()?;
        if self.read_only {
            return Err(Error::ReadOnlyTxn);
        }
        table.tree.check_key(key)?;
        self.db.settle(table, key)?;
        self.lock_key(table, key, None)?;
        let writer = self.writer.as_mut().expect("locked the key: the writer exists");
        if !writer.read_locked(table.id, key) {
            writer.locked_reads.push((table.id, key.into()));
        }
        // Locked: every other writer of the key has committed (stamped) or gone, so the
        // newest committed version is final until we end.
        let reader = Reader { snapshot: LATEST, me: Some((self.slot, self.seq)) };
        table.tree.get_resolved(key, &View { reader, chains: &self.db.chains }, out)
    }

    /// Sets `key` to `value` in the default table.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let db = self.db;
        self.write(&db.default_table, None, key, Some(value)).map(|_| ())
    }

    /// Sets `key` to `value` in `table`.
    pub fn put_in(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_table(table)?;
        self.write(&table.inner, Some(&table.inner), key, Some(value)).map(|_| ())
    }

    /// Deletes `key` from the default table; returns whether this transaction saw it.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let db = self.db;
        self.write(&db.default_table, None, key, None)
    }

    /// Deletes `key` from `table`; returns whether this transaction saw it.
    pub fn delete_in(&mut self, table: &Table, key: &[u8]) -> Result<bool> {
        self.check_table(table)?;
        self.write(&table.inner, Some(&table.inner), key, None)
    }

    fn write(
        &mut self,
        table: &TableInner,
        named: Option<&Arc<TableInner>>,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<bool> {
        self.check_usable()?;
        if self.read_only {
            return Err(Error::ReadOnlyTxn);
        }
        if let Some(d) = &self.db.durable {
            d.wal.check_writable()?;
        }
        table.tree.check_key(key)?;
        if let Some(v) = value.filter(|v| v.len() > MAX_VALUE) {
            return Err(Error::ValueTooLarge { len: v.len(), max: MAX_VALUE });
        }
        self.db.settle(table, key)?;
        self.lock_key(table, key, Some(self.snapshot))?;
        let writer = self.writer.as_ref().expect("locked the key: the writer exists");
        // A key read by `get_for_update` was locked before its newest commit was read: no
        // commit since can conflict, and the write replaces what that read returned.
        let snapshot = if writer.read_locked(table.id, key) { LATEST } else { self.snapshot };
        let me = (self.slot, self.seq);
        let reserve = value.map_or(0, <[u8]>::len);
        let (chains, shard) = (&self.db.chains, self.shard as usize);
        self.db.gc.refill_spare(shard);
        let (_, outcome, leaf) = table.tree.update_chain_hinted(key, reserve, |current| {
            write_version(current, me, snapshot, value, (chains, shard))
        })?;
        match outcome {
            Outcome::Nothing => Ok(false),
            Outcome::Rewrote { existed } => Ok(existed),
            Outcome::Pushed { version, created, existed } => {
                self.count(Counter::VersionsCreated, created);
                let writer = self.writer.as_mut().expect("locked the key: the writer exists");
                writer.writes.push(Write { table: named.cloned(), key: key.into(), version, leaf });
                Ok(existed)
            }
            Outcome::Conflict => {
                self.failed = CONFLICTED;
                self.count(Counter::Conflicts, 1);
                Err(Error::Conflict)
            }
        }
    }

    /// Locks `key` of `table` exclusively until the transaction ends.
    ///
    /// With `conflict_after = Some(snapshot)` (a write), a key held by another transaction is
    /// first checked: if its newest commit is after `snapshot`, the write would conflict
    /// whatever the holder does, so it fails now ([`Error::Conflict`]) instead of after the
    /// wait. (The check costs a probe of the lock without waiting, counted as `would_block`
    /// in the lock statistics, and a read of the key; an uncontended lock costs neither.)
    fn lock_key(&mut self, table: &TableInner, key: &[u8], conflict_after: Option<u64>) -> Result<()> {
        let (db, shard, wait) = (self.db, self.shard as usize, self.lock_wait());
        let writer = self.writer.get_or_insert_with(|| db.take_writer(shard));
        let object = LockObject::Id(key_id(table.id, key));
        let probe = match (wait, conflict_after) {
            (Wait::No, _) | (_, None) => wait,
            _ => Wait::No,
        };
        let mut locked = db.locks.lock(&writer.locker, object, LockMode::X, probe);
        if let (Err(Error::WouldBlock), Some(snapshot)) = (&locked, conflict_after) {
            if !matches!(wait, Wait::No) {
                if newest_commit(table, key, &db.chains)? > snapshot {
                    self.failed = CONFLICTED;
                    self.count(Counter::Conflicts, 1);
                    self.count(Counter::ConflictsBeforeWait, 1);
                    return Err(Error::Conflict);
                }
                let writer = self.writer.as_ref().expect("taken above");
                locked = db.locks.lock(&writer.locker, object, LockMode::X, wait);
            }
        }
        match locked {
            Err(Error::Deadlock) => {
                self.failed = DEADLOCKED;
                self.count(Counter::Deadlocks, 1);
                Err(Error::Deadlock)
            }
            other => other,
        }
    }

    // ---- end ----

    /// Commits: the writes become visible, atomically, to transactions that begin afterwards.
    /// A transaction that failed earlier is aborted instead ([`Error::TxnFailed`]).
    #[inline(always)]
    pub fn commit(mut self) -> Result<()> {
        if self.failed == OK && self.writer.is_none() {
            // Nothing written, nothing locked (read-only, or read-write that only read): leave.
            self.end_light();
            self.count(if self.read_only { Counter::ReadOnlyEnded } else { Counter::Committed }, 1);
            // Ended, and holding nothing to free: skip the drop glue of the hottest path.
            std::mem::forget(self);
            return Ok(());
        }
        self.commit_writes()
    }

    /// The commit of a transaction that wrote (or tried to).
    #[cold]
    fn commit_writes(mut self) -> Result<()> {
        if self.failed != OK {
            let reason = self.fail_reason();
            self.rollback();
            return Err(Error::TxnFailed { reason });
        }
        let db = self.db;
        let writer = self.writer.as_mut().expect("it wrote");
        let mut lsn = 0;
        // The commit's timestamp, drawn below whenever there are writes to queue.
        let mut commit_ts = 0;
        if !writer.writes.is_empty() {
            let log = db.durable.as_ref().map(|d| &*d.wal);
            if log.is_some() {
                writer.payload.start_commit();
                for w in &writer.writes {
                    // SAFETY: our own uncommitted version, linked while we hold its key's lock;
                    // nobody else reads its value.
                    let value = unsafe { (*w.version).value() };
                    writer.payload.push_op(w.table.as_ref().map_or(0, |t| t.id), &w.key, value);
                }
            }
            // Readers that meet our versions from here on wait for the stamp (see `context.rs`).
            self.slot.state.store(self.seq << 2 | COMMITTING, SeqCst);
            let ts = match log {
                None => next_commit_ts(),
                Some(wal) => match wal.append_commit(&mut writer.payload, next_commit_ts) {
                    Ok((ts, end)) => {
                        lsn = end;
                        ts
                    }
                    Err(e) => {
                        // No timestamp was drawn: nobody waits for one; undo as an abort.
                        self.slot.state.store(self.seq << 2 | IDLE, Release);
                        self.rollback();
                        return Err(e);
                    }
                },
            };
            let writes = &self.writer.as_ref().expect("it wrote").writes;
            for w in writes {
                // SAFETY: our version, linked in its chain until we unlock its key (below).
                unsafe { &*w.version }.ts.store(ts, Release);
            }
            commit_ts = ts;
            self.slot.state.store(self.seq << 2 | IDLE, Release);
        }
        // Queued for collection straight from the write set (no list of their own); a pass
        // this makes due runs once the transaction has ended, so its snapshot holds nothing back.
        let shard = self.shard as usize;
        let writes = &mut self.writer.as_mut().expect("it wrote").writes;
        let due = (!writes.is_empty())
            .then(|| {
                let items = writes
                    .drain(..)
                    .map(|w| Item::new(w.table.as_ref().map_or(0, |t| t.id), w.key, Some(w.leaf), commit_ts));
                self.db.gc.push(shard, items)
            })
            .flatten();
        self.end();
        self.count(Counter::Committed, 1);
        if let Some(due) = due {
            self.db.collect(shard, due);
        }
        match &db.durable {
            Some(d) if lsn > 0 => {
                // Visible already (its locks are released too: a transaction that reads or
                // overwrites it logs after it, see `wal`), acknowledged once durable.
                // Wait for the record synced (`Some(true)`), written (`Some(false)`), or not
                // at all (periodic).
                let sync = match (self.durability, db.options.wal.durability) {
                    (SYNC, _) | (DEFAULT, Durability::Sync) => Some(true),
                    (NO_SYNC, _) | (DEFAULT, Durability::NoSync) => Some(false),
                    _ => None,
                };
                let waited = sync.map_or(Ok(()), |sync| d.wal.wait(lsn, sync));
                if d.wal.checkpoint_due() {
                    db.ask_checkpoint();
                }
                waited
            }
            _ => Ok(()),
        }
    }

    /// Aborts: the writes are undone; nobody ever saw them.
    pub fn abort(mut self) {
        self.rollback();
    }

    /// Unlinks the transaction's versions, newest write first, and ends it.
    fn rollback(&mut self) {
        // A transaction that wrote nothing (every read-only one) has no version to unlink, and
        // ends without the pin's fence.
        let writes = self.writer.as_mut().filter(|w| !w.writes.is_empty()).map(|w| std::mem::take(&mut w.writes));
        let undone = writes.map(|writes| self.unlink(writes));
        self.end();
        // Ending a read-only transaction either way is the same thing: count it once.
        self.count(if self.read_only { Counter::ReadOnlyEnded } else { Counter::Aborted }, 1);
        if let Some((retired, refold)) = undone {
            self.count(Counter::VersionsAborted, retired);
            if !refold.is_empty() {
                self.db.queue_for_gc(self.shard as usize, refold);
            }
        }
    }

    /// Unlinks `writes`' versions, newest first; returns how many it retired and the keys
    /// whose remaining chains may fold back into plain values. Out of line: most rollbacks
    /// (every read-only transaction's end) have nothing to unlink.
    #[inline(never)]
    fn unlink(&self, writes: Vec<Write>) -> (u64, Vec<Item>) {
        let mut retired = 0;
        let mut refold = Vec::new();
        let guard = crossbeam_epoch::pin();
        let mut released = Vec::new();
        for w in writes.into_iter().rev() {
            let table = w.table.as_deref().unwrap_or(&*self.db.default_table);
            // SAFETY: our version, linked in its chain while we hold the key's lock.
            let v = unsafe { &*w.version };
            v.ts.store(ABORTED, Release);
            let chains = &self.db.chains;
            let unlinked = table.tree.update_chain(&w.key, 0, |current| match current {
                Current::Chain(id) if chains.head(id) == w.version => {
                    let next = v.next.load(Acquire);
                    if next.is_null() {
                        // Ours was the only version: the key goes, and so does its chain.
                        chains.mark_released(short_id(id));
                        released.push(short_id(id));
                        (Change::Remove, Some(false))
                    } else {
                        chains.set_head(id, next);
                        (Change::Keep, Some(true))
                    }
                }
                // Not our version on top (cannot happen: we hold the key's lock): leave it
                // linked, aborted (invisible, and pruned by the collector), never freed here.
                _ => (Change::Keep, None),
            });
            match unlinked {
                Ok((_, Some(older))) => {
                    // SAFETY: unlinked just now (the chain's head was our version).
                    unsafe { retire(w.version, &guard) };
                    retired += 1;
                    if older {
                        // What is left may fold back into a plain value.
                        refold.push(Item::new(table.id, w.key, None, 0));
                    }
                }
                Ok((_, None)) => debug_assert!(false, "our version was not the newest of its chain"),
                // An I/O error reaching the key's leaf (read back, or no frame could be freed:
                // the page file failed): left linked, aborted (invisible); pruned at the key's
                // next write, or gone at the next open (docs/txn.md).
                Err(_) => {}
            }
        }
        self.db.chains.release(self.shard as usize, released, &guard);
        (retired, refold)
    }

    /// Leaves the slot and releases the locks.
    fn end(&mut self) {
        self.end_light();
        if let Some(mut writer) = self.writer.take() {
            writer.locked_reads.clear();
            self.db.return_writer(self.shard as usize, writer);
        }
    }

    /// Leaves the slot (and the global list); the locks, if any, are `end`'s.
    #[inline]
    fn end_light(&mut self) {
        self.finished = true;
        if !self.read_only {
            self.slot.state.store(self.seq << 2 | IDLE, Release);
        }
        if let Some(list) = &self.db.global {
            list.end(self.slot);
        }
        self.slot.release();
        if !self.read_only {
            if let Some(gate) = &self.db.gate {
                gate.end_write(std::mem::take(&mut self.ticket));
            }
        }
    }

    fn check_usable(&self) -> Result<()> {
        match self.failed {
            OK => Ok(()),
            _ => Err(Error::TxnFailed { reason: self.fail_reason() }),
        }
    }

    fn check_table(&self, table: &Table) -> Result<()> {
        if table.inner.db != self.db.id {
            return Err(Error::InvalidArgument(format!("table {:?} belongs to another database", table.inner.name)));
        }
        Ok(())
    }
}

/// Passes `db`'s admission gate, if it is on: takes a ticket if the process's transaction
/// threads outnumber its tickets (otherwise begin touches nothing shared); returns whether it
/// did.
#[inline(always)]
fn admit(db: &DbInner) -> bool {
    match &db.gate {
        Some(gate) => gate.begin_write(super::context::threads() > gate.tickets()),
        None => false,
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.rollback();
        }
    }
}

impl std::fmt::Debug for Txn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txn")
            .field("snapshot", &self.snapshot)
            .field("read_only", &self.read_only)
            .field("writes", &self.writer.as_ref().map_or(0, |w| w.writes.len()))
            .field("failed", &(self.failed != OK).then(|| self.fail_reason()))
            .finish()
    }
}

/// The bounds of `range`, borrowed.
fn bounds<'k>(range: &impl RangeBounds<&'k [u8]>) -> (Bound<&'k [u8]>, Bound<&'k [u8]>) {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

/// Decides a write under the key's leaf latch: first updater wins, then push a version (or
/// rewrite our own).
fn write_version(
    current: Current<'_>,
    me: (&'static Slot, u64),
    snapshot: u64,
    value: Option<&[u8]>,
    (chains, shard): (&Chains, usize),
) -> (Change<'static>, Outcome) {
    let (slot, seq) = me;
    let new = |next: *mut Version| Version::new_uncommitted(slot, seq, value, next);
    // A key without versions gets a chain; the slot stores its id.
    let start = |next: *mut Version, created: u64, existed: bool| {
        let version = new(next);
        (Change::Chain(chains.create(shard, version)), Outcome::Pushed { version, created, existed })
    };
    match current {
        Current::Absent if value.is_none() => (Change::Keep, Outcome::Nothing),
        Current::Absent => start(ptr::null_mut(), 1, false),
        Current::Plain(bytes) => start(Version::new_base(slot, bytes), 2, true),
        Current::Chain(id) => {
            let head = chains.head(id);
            // SAFETY: the chain is in the tree and we hold its leaf exclusively, so its head is
            // live (a slot's chain id is live while the slot holds it).
            let h = unsafe { &*head };
            if h.written_by(Some(me)) {
                // SAFETY: our own uncommitted version; nobody else reads its value.
                let existed = unsafe { h.value() }.is_some();
                // SAFETY: as above, and no reference to the old value is alive.
                unsafe { h.set_value(value) };
                return (Change::Keep, Outcome::Rewrote { existed });
            }
            // We hold the key's lock: every other writer's version is committed (stamped
            // before it unlocked) or gone (unlinked before it unlocked). An aborted version
            // left linked is seen by nobody: the check is against the newest committed one.
            // SAFETY: as above (the leaf is held exclusively). Under the key's lock no other
            // writer's version is unstamped, so passing over unstamped ones skips none.
            let ts = unsafe { newest_committed_ts(head) };
            if ts > snapshot {
                return (Change::Keep, Outcome::Conflict);
            }
            // SAFETY: the newest version, committed at `ts <= snapshot` (or aborted): we see it,
            // or it holds no value we could see.
            let existed = h.ts.load(Acquire) != ABORTED && unsafe { h.value() }.is_some();
            if value.is_none() && !existed {
                return (Change::Keep, Outcome::Nothing);
            }
            // A new newest version: the slot keeps the chain's id.
            let version = new(head);
            chains.set_head(id, version);
            (Change::Keep, Outcome::Pushed { version, created: 1, existed })
        }
    }
}

/// The commit timestamp of the newest committed version of `key` in `table` (`BASE` for a
/// plain value or none), read without its lock: a version being stamped right now may be
/// missed (the caller then waits and checks again under the lock), never a settled one.
fn newest_commit(table: &TableInner, key: &[u8], chains: &Chains) -> Result<u64> {
    let newest = NewestCommit { chains, ts: std::cell::Cell::new(0) };
    table.tree.get_resolved(key, &newest, &mut Vec::new())?;
    Ok(newest.ts.get())
}

/// A resolver that records the newest committed timestamp of the chain it is handed.
struct NewestCommit<'c> {
    chains: &'c Chains,
    ts: std::cell::Cell<u64>,
}

impl Resolve for NewestCommit<'_> {
    fn resolve(&self, chain: u64, _out: &mut Vec<u8>) -> bool {
        let _guard = crossbeam_epoch::pin();
        // SAFETY: the tree validated the chain id under its pin, and ours keeps every version
        // reachable from it allocated (retired versions are freed through the epoch).
        self.ts.set(unsafe { newest_committed_ts(self.chains.head(chain)) });
        false
    }
}

/// The commit timestamp of the newest committed version of the chain at `head` (`BASE` if none):
/// aborted versions and a version not stamped yet are passed over.
///
/// # Safety
/// Every version reachable from `head` is allocated: the caller holds the chain's leaf
/// exclusively, or is pinned and read `head` from a chain id the tree validated under a pin.
unsafe fn newest_committed_ts(head: *const Version) -> u64 {
    let mut at = head;
    while !at.is_null() {
        // SAFETY: allocated (contract).
        let v = unsafe { &*at };
        match v.ts.load(Acquire) {
            ts if ts >= UNCOMMITTED => at = v.next.load(Acquire),
            ts => return ts,
        }
    }
    super::version::BASE
}
