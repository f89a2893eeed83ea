//! Transactions bound to the thread that began them, whichever thread uses or frees their
//! Python objects.
//!
//! tern's `Txn` is neither `Send` nor `Sync`: it is used and ended on the thread that began it.
//! A Python object, though, can be reached from any thread, and its last reference can go away
//! on any thread (a `del`, a list cleared, the cyclic garbage collector). So the engine
//! transaction lives in a [`Slot`] shared by its Python object and by its thread's list of
//! transactions (`MINE`), and:
//! * every use goes through [`Pinned::with`] or [`Pinned::take`], which check the calling thread
//!   first (another thread gets a `RuntimeError`, nothing is touched);
//! * finishing it (commit, abort, or its object dropped on its own thread) takes the
//!   transaction out of its slot and the slot out of its thread's list;
//! * its object dropped on another thread only marks the slot orphaned: the owning thread
//!   aborts its orphaned transactions at its next call into tern ([`reap`]);
//! * when a thread exits, its list's destructor aborts every transaction still in it.
//!
//! So a slot holds a transaction only while the slot is in its thread's list, and a transaction
//! is used and dropped only on its thread. What this cannot do: a thread that stays alive and
//! never calls tern again (blocked, or busy elsewhere) keeps its orphaned transactions, and
//! their locks, until it does or until it exits.

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;
use std::cell::{Cell, RefCell};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;

/// An engine transaction and the database handle it borrows.
pub(crate) struct Live {
    /// Declared first, so dropped first. Its lifetime is erased: it borrows the database that
    /// `db` keeps alive.
    txn: engine::Txn<'static>,
    db: engine::Db,
}

// SAFETY: a `Live` is reachable from other threads only inside its `Slot`, and is used and
// dropped only on the thread that began its transaction: `Pinned::with` and `Pinned::take` check
// the thread before they touch it, a `Pinned` dropped on another thread leaves it in the slot
// (which its thread's list still holds), and `reap` and `Mine`'s destructor, which drop it
// otherwise, run on that thread. Moving it (into a `Box`, an `Arc`) reads or writes nothing of
// the transaction's state.
unsafe impl Send for Live {}

impl Live {
    /// The transaction.
    pub(crate) fn txn(&mut self) -> &mut engine::Txn<'static> {
        &mut self.txn
    }

    /// Commits; the database handle is dropped after the transaction.
    pub(crate) fn commit(self) -> engine::Result<()> {
        let Live { txn, db } = self;
        let result = txn.commit();
        drop(db);
        result
    }
}

/// Where a transaction lives: shared by its Python object and its thread's list.
struct Slot {
    live: Mutex<Option<Live>>,
    /// Its Python object was dropped on another thread: the owning thread aborts it.
    orphaned: AtomicBool,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Option<Live>> {
        // A panic while it was held (a bug in tern) leaves nothing half-changed here.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The calling thread's live transactions.
struct Mine {
    slots: RefCell<Vec<Arc<Slot>>>,
    /// Set when the object of one of them was dropped on another thread.
    orphans: Arc<AtomicBool>,
}

impl Drop for Mine {
    /// The thread is exiting: its transactions can never be used again (they belong to it), so
    /// they are aborted here, on their thread, which releases their locks and database handles.
    fn drop(&mut self) {
        for slot in self.slots.get_mut().drain(..) {
            let live = slot.lock().take();
            // A panic must not leave a thread-local destructor (the process would abort).
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| drop(live)));
        }
    }
}

thread_local! {
    /// Whether `MINE` exists on this thread: checked by every call, without touching `MINE`.
    static BEGUN: Cell<bool> = const { Cell::new(false) };
    /// First touched after the engine began a transaction on this thread, so its destructor
    /// (registered at that first touch) runs before the engine's own thread-exit hooks, which
    /// were registered before it: destructors of thread-locals run in the reverse order.
    static MINE: Mine = Mine { slots: RefCell::new(Vec::new()), orphans: Arc::new(AtomicBool::new(false)) };
}

/// Aborts the calling thread's transactions whose Python objects were dropped on other threads.
/// Every call into tern runs it first.
pub(crate) fn reap() {
    if !BEGUN.get() {
        return;
    }
    let orphaned = MINE.try_with(|mine| {
        if !mine.orphans.swap(false, Acquire) {
            return Vec::new();
        }
        let mut slots = mine.slots.borrow_mut();
        let (orphaned, kept) = slots.drain(..).partition(|s: &Arc<Slot>| s.orphaned.load(Acquire));
        *slots = kept;
        orphaned
    });
    for slot in orphaned.unwrap_or_default() {
        drop(slot.lock().take());
    }
}

/// A transaction as its Python object holds it.
pub(crate) struct Pinned {
    slot: Arc<Slot>,
    thread: ThreadId,
    /// The owning thread's `Mine::orphans`.
    orphans: Arc<AtomicBool>,
}

impl Pinned {
    /// Begins a transaction of `db` on the calling thread.
    pub(crate) fn begin(db: engine::Db, options: engine::TxnOptions) -> engine::Result<Pinned> {
        // SAFETY: only the lifetime changes: the transaction borrows the database `db` points
        // to, and `db` (a clone of the handle, holding the database alive) is stored beside it
        // in a `Live`, which drops it after the transaction (field order, and `Live::commit`).
        let txn = unsafe { std::mem::transmute::<engine::Txn<'_>, engine::Txn<'static>>(db.begin_with(options)?) };
        let slot = Arc::new(Slot { live: Mutex::new(Some(Live { txn, db })), orphaned: AtomicBool::new(false) });
        let orphans = MINE.with(|mine| {
            mine.slots.borrow_mut().push(slot.clone());
            mine.orphans.clone()
        });
        BEGUN.set(true);
        Ok(Pinned { slot, thread: std::thread::current().id(), orphans })
    }

    /// `Ok` on the thread that began the transaction (after ending that thread's orphaned
    /// transactions); a `RuntimeError` on any other.
    pub(crate) fn check(&self) -> PyResult<()> {
        let here = std::thread::current().id();
        if here != self.thread {
            return Err(PyRuntimeError::new_err(format!(
                "a tern transaction is used only on the thread that began it ({:?}), not on {:?}",
                self.thread, here
            )));
        }
        reap();
        Ok(())
    }

    /// Runs `f` with the live transaction, `None` once it is finished; checked as [`check`].
    ///
    /// [`check`]: Pinned::check
    pub(crate) fn with<T>(&self, f: impl FnOnce(Option<&mut Live>) -> PyResult<T>) -> PyResult<T> {
        self.check()?;
        f(self.slot.lock().as_mut())
    }

    /// Takes the transaction out to finish it (`None` if it is finished); checked as [`check`].
    ///
    /// [`check`]: Pinned::check
    pub(crate) fn take(&self) -> PyResult<Option<Live>> {
        self.check()?;
        Ok(self.finish())
    }

    /// Takes the transaction out of its slot, and the slot out of its thread's list. Only on
    /// the owning thread.
    fn finish(&self) -> Option<Live> {
        let live = self.slot.lock().take();
        if live.is_some() {
            let _ = MINE.try_with(|mine| mine.slots.borrow_mut().retain(|s| !Arc::ptr_eq(s, &self.slot)));
        }
        live
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if std::thread::current().id() == self.thread {
            drop(self.finish()); // aborts it if it is still live
        } else {
            // Its thread's list still holds the slot (and so the transaction, if live): that
            // thread aborts it at its next call into tern, or when it exits.
            self.slot.orphaned.store(true, Release);
            self.orphans.store(true, Release);
        }
    }
}
