//! Admission: at most a few write transactions run at once, the others wait before they begin.
//!
//! With more threads than CPUs, the operating system preempts threads wherever they are: inside
//! a page latch, holding a hot row's lock, in the log's append. Every other thread that needs
//! what the preempted one holds then spins or sleeps for a time slice, and a lock handed to a
//! sleeping thread stays unused until it is woken (TPC-B at 8 threads on 2 CPUs ran at 0.57x
//! one thread, one-key writes at 32 threads at 0.6x two). A [`Gate`] holds a few tickets (by
//! default as many as CPUs); a write transaction takes one before it begins and returns it when
//! it ends, so the others wait where they hold nothing, and the ones running rarely find a
//! holder preempted. InnoDB's `innodb_thread_concurrency` and WiredTiger's transaction tickets
//! do the same.
//!
//! ## Protocol
//! * `free` counts the tickets not taken (negative: more taken than the gate has, see below).
//!   Taking one is a compare-and-swap while it is positive; returning one an add.
//! * **Barging.** A returned ticket is not handed to a sleeping waiter: the thread that returns
//!   it usually begins its next transaction at once and takes it back, with no wake-up and no
//!   context switch. Waiters are served in turns instead: one of them, the *watcher*, sleeps
//!   with a timer ([`WINDOW`]); when it fires and no ticket is free, it marks the gate `DUE`,
//!   and the next return hands its ticket straight to the longest sleeper (FIFO), and newcomers
//!   queue instead of barging. A sleeper is therefore served within about its place in the
//!   queue times `WINDOW`, and a ticket left free (its holder went elsewhere) is found within
//!   `WINDOW`.
//! * **Stall.** If a due gate sees no return for [`STALL`] (the holders are in long
//!   transactions, or waiting on something outside tern), the gate opens: every waiter and
//!   every newcomer enters without a ticket (`free` goes negative) until the next return closes
//!   it. Admission therefore never deadlocks and never waits on a holder for long: it is a
//!   scheduling aid, not a limit that correctness depends on.
//! * **Nesting and lending.** A thread with a write transaction open already, with a ticket or
//!   not, enters at once (it would otherwise wait on itself: its open transaction may hold
//!   locks the ticket holders wait for). A holder about to block on a page read lends its
//!   ticket ([`lend_while`]) and takes it back afterwards without waiting (possibly going
//!   negative), so a slow device is kept busy by as many transactions as want it. (A commit
//!   returns its ticket before it waits for its log flush: it has ended.)
//!
//! ## Invariants
//! * Every `acquire` is matched by one `release`; `free` returns to the gate's size when no
//!   transaction holds a ticket, whatever entered by the stall or nesting paths.
//! * No wakeup is lost: a waiter parks only if, re-checked under the parking queue's lock, a
//!   watcher exists and no ticket is free or a hand-off is due; hand-offs happen under the
//!   same lock. A ticket freed
//!   while waiters sleep is found by the watcher's timer; a leaving watcher wakes a sleeper to
//!   watch in its place.

use super::park::{park_timed, unpark_all, unpark_one, Parked, TOKEN_HANDOFF, TOKEN_RETRY};
use super::primitive::{AtomicU64, AtomicUsize};
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the watcher sleeps before it asks for a hand-off.
pub const WINDOW: Duration = Duration::from_micros(500);
/// How long a due gate waits for a returned ticket before it opens.
pub const STALL: Duration = Duration::from_millis(10);

/// `flags`: a waiter sleeps with the timer.
const WATCHED: usize = 1;
/// `flags`: the next return hands its ticket to the longest sleeper; newcomers queue.
const DUE: usize = 2;
/// `flags`: stalled; everyone enters without a ticket until the next return.
const OPEN: usize = 4;

/// A set of tickets that bounds how many write transactions run at once (see the module doc).
#[derive(Debug)]
pub struct Gate {
    tickets: usize,
    /// Tickets not taken, as an `i64` in two's complement (negative while overdrawn).
    free: AtomicU64,
    flags: AtomicUsize,
    /// Tickets handed straight to a sleeper (also the watcher's stall check: a return while due
    /// either hands off or, with nobody asleep, clears `DUE`).
    handoffs: AtomicU64,
    /// Waits: entries that slept at least once.
    waits: AtomicU64,
    /// Entries without a ticket because the gate had stalled.
    stalls: AtomicU64,
}

#[cfg(not(loom))]
std::thread_local! {
    /// Tickets this thread holds, and the gate of the latest (for [`lend_while`]).
    static HELD: Cell<u32> = const { Cell::new(0) };
    /// Write transactions open on this thread, with a ticket or not ([`Gate::begin_write`]).
    static WRITING: Cell<u32> = const { Cell::new(0) };
    static GATE: RefCell<Option<Arc<Gate>>> = const { RefCell::new(None) };
}

#[cfg(loom)]
loom::thread_local! {
    /// Tickets this thread holds, and the gate of the latest (for [`lend_while`]).
    static HELD: Cell<u32> = Cell::new(0);
    static WRITING: Cell<u32> = Cell::new(0);
    static GATE: RefCell<Option<Arc<Gate>>> = RefCell::new(None);
}

/// How often a gate made writers wait, for `DbStats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GateStats {
    /// The gate's size.
    pub tickets: usize,
    /// Entries that slept for a ticket.
    pub waits: u64,
    /// Tickets handed from a returning transaction straight to a sleeper.
    pub handoffs: u64,
    /// Entries let in without a ticket because no ticket came back for [`STALL`].
    pub stalls: u64,
}

impl Gate {
    /// A gate of `tickets` tickets (at least 1).
    pub fn new(tickets: usize) -> Arc<Gate> {
        let tickets = tickets.max(1);
        Arc::new(Gate {
            tickets,
            free: AtomicU64::new(tickets as u64),
            flags: AtomicUsize::new(0),
            handoffs: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
        })
    }

    /// The gate's size.
    pub fn tickets(&self) -> usize {
        self.tickets
    }

    /// Its counters.
    pub fn stats(&self) -> GateStats {
        GateStats {
            tickets: self.tickets,
            waits: self.waits.load(Relaxed),
            handoffs: self.handoffs.load(Relaxed),
            stalls: self.stalls.load(Relaxed),
        }
    }

    /// Tickets not taken now (negative while overdrawn). For tests and stats.
    pub fn free(&self) -> i64 {
        self.free.load(Relaxed) as i64
    }

    /// A write transaction begins on this thread: takes a ticket if `crowded` (the process's
    /// transaction threads outnumber the tickets) and returns whether it did; pair with one
    /// [`end_write`](Self::end_write). A thread with a write transaction open already, with a
    /// ticket or not, never waits (it would wait on itself: its open transaction may hold
    /// locks the ticket holders wait for).
    #[inline]
    pub fn begin_write(self: &Arc<Gate>, crowded: bool) -> bool {
        let open = WRITING.with(|o| {
            let open = o.get();
            o.set(open + 1);
            open
        });
        if crowded {
            self.take(open > 0);
        }
        crowded
    }

    /// The write transaction begun by [`begin_write`](Self::begin_write) ends; `ticket`: what
    /// that returned.
    #[inline]
    pub fn end_write(&self, ticket: bool) {
        WRITING.with(|o| o.set(o.get().saturating_sub(1)));
        if ticket {
            self.release();
        }
    }

    /// Takes a ticket, waiting as the module doc says; pair with one [`release`](Self::release).
    pub fn acquire(self: &Arc<Gate>) {
        self.take(false);
    }

    /// Takes a ticket; `nested`: the thread must not wait (see `begin_write`).
    fn take(self: &Arc<Gate>, nested: bool) {
        let held = HELD.with(Cell::get);
        let nested = nested || held > 0;
        if nested {
            self.overdraw();
        } else if !self.try_enter() {
            self.wait();
        }
        HELD.with(|h| h.set(held + 1));
        GATE.with(|g| {
            let mut g = g.borrow_mut();
            if !g.as_ref().is_some_and(|mine| Arc::ptr_eq(mine, self)) {
                *g = Some(self.clone());
            }
        });
    }

    /// Returns a ticket taken by [`acquire`](Self::acquire) on this thread.
    pub fn release(&self) {
        HELD.with(|h| h.set(h.get().saturating_sub(1)));
        self.give_back();
    }

    /// The fast path: a free ticket when nobody is due, or the stall's open door.
    #[inline]
    fn try_enter(&self) -> bool {
        let flags = self.flags.load(Acquire);
        if flags & OPEN != 0 {
            self.overdraw();
            return true;
        }
        flags & DUE == 0 && self.try_take()
    }

    fn try_take(&self) -> bool {
        let mut free = self.free.load(SeqCst);
        while (free as i64) > 0 {
            match self.free.compare_exchange_weak(free, free - 1, SeqCst, Relaxed) {
                Ok(_) => return true,
                Err(now) => free = now,
            }
        }
        false
    }

    fn overdraw(&self) {
        self.free.fetch_sub(1, SeqCst);
    }

    fn give_back(&self) {
        let flags = self.flags.load(SeqCst);
        if flags & DUE != 0 {
            self.hand_off();
            return;
        }
        self.free.fetch_add(1, SeqCst);
        if flags & OPEN != 0 {
            // A holder came back: the gate was not stalled for good.
            self.flags.fetch_and(!OPEN, SeqCst);
        }
    }

    #[cold]
    fn hand_off(&self) {
        // SAFETY: the key is this gate's address, which only this gate parks on; the callback
        // only touches atomics.
        unsafe {
            unpark_one(self.key(), |u| {
                self.flags.fetch_and(!(DUE | OPEN), SeqCst);
                if u.unparked {
                    self.handoffs.fetch_add(1, Relaxed);
                    TOKEN_HANDOFF
                } else {
                    // Nobody asleep (the watcher is between naps): the ticket goes back.
                    self.free.fetch_add(1, SeqCst);
                    TOKEN_RETRY
                }
            })
        };
    }

    fn key(&self) -> usize {
        self as *const Gate as usize
    }

    #[cold]
    fn wait(&self) {
        self.waits.fetch_add(1, Relaxed);
        // When this waiter, as the watcher, marked the gate due, and the hand-offs count then.
        let mut due_since: Option<(Instant, u64)> = None;
        let mut watcher = false;
        loop {
            watcher = watcher || self.flags.fetch_or(WATCHED, SeqCst) & WATCHED == 0;
            let deadline = watcher.then(|| Instant::now() + WINDOW);
            // SAFETY: the key is this gate's address; the validation reads two atomics.
            let parked = unsafe {
                park_timed(
                    self.key(),
                    || {
                        // Sleep only while someone watches with a timer (a watcher leaving
                        // clears the bit, then wakes a sleeper under this queue's lock).
                        let flags = self.flags.load(SeqCst);
                        flags & WATCHED != 0
                            && flags & OPEN == 0
                            && (flags & DUE != 0 || self.free.load(SeqCst) as i64 <= 0)
                    },
                    deadline,
                )
            };
            match parked {
                Parked::Token(TOKEN_HANDOFF) => {
                    self.leave(watcher);
                    return;
                }
                Parked::TimedOut => {
                    if self.try_take() {
                        self.leave(true);
                        return;
                    }
                    loom_yield();
                    let handoffs = self.handoffs.load(SeqCst);
                    match due_since {
                        Some((since, seen)) if seen == handoffs && self.flags.load(SeqCst) & DUE != 0 => {
                            if stalled(since) {
                                self.open();
                                self.leave(true);
                                return;
                            }
                        }
                        _ => {
                            self.flags.fetch_or(DUE, SeqCst);
                            due_since = Some((Instant::now(), handoffs));
                            // A return that read the flags before DUE added to `free`.
                            if self.try_take() {
                                self.leave(true);
                                return;
                            }
                        }
                    }
                    // Still the watcher: keep the bit, nap again.
                    continue;
                }
                Parked::Token(_) | Parked::Invalid => {
                    if watcher {
                        // Woken early: hand the timer to a sleeper (one may have parked
                        // trusting it) and compete as a newcomer.
                        self.leave(true);
                        watcher = false;
                    }
                    if self.try_enter() {
                        // Woken to watch (or by the stall), but entered: if nobody watches
                        // now, the next sleeper must.
                        if self.flags.load(SeqCst) & WATCHED == 0 {
                            self.wake_one();
                        }
                        return;
                    }
                    loom_yield();
                }
            }
        }
    }

    /// The stall: let every waiter and newcomer in until a ticket comes back.
    fn open(&self) {
        self.flags.fetch_or(OPEN, SeqCst);
        self.flags.fetch_and(!DUE, SeqCst);
        self.stalls.fetch_add(1, Relaxed);
        self.overdraw();
        // SAFETY: the key is this gate's address.
        unsafe { unpark_all(self.key()) };
    }

    /// Entered with a ticket; a leaving watcher withdraws its request for a hand-off and wakes
    /// a sleeper to watch in its place.
    fn leave(&self, watcher: bool) {
        if !watcher {
            return;
        }
        self.flags.fetch_and(!(WATCHED | DUE), SeqCst);
        self.wake_one();
    }

    /// Wakes the longest sleeper to compete again (and watch if nobody does).
    fn wake_one(&self) {
        // SAFETY: the key is this gate's address; the callback returns a token only.
        unsafe { unpark_one(self.key(), |_| TOKEN_RETRY) };
    }
}

/// Lets loom's other threads run in a loop that waits for them.
fn loom_yield() {
    #[cfg(loom)]
    loom::thread::yield_now();
}

#[cfg(not(loom))]
fn stalled(since: Instant) -> bool {
    since.elapsed() >= STALL
}

/// Loom has no clock: the second nap of a due gate without a return counts as a stall.
#[cfg(loom)]
fn stalled(_since: Instant) -> bool {
    true
}

/// Runs `f` (a page read, or a wait for another thread's read of the page) with this thread's
/// ticket lent back to its gate, if it holds one; takes it back afterwards without waiting.
pub fn lend_while<R>(f: impl FnOnce() -> R) -> R {
    if HELD.with(Cell::get) == 0 {
        return f();
    }
    let Some(gate) = GATE.with(|g| g.borrow().clone()) else { return f() };
    gate.give_back();
    let _back = TakeBack(&gate);
    f()
}

/// Takes a lent ticket back (also when the lending call unwinds).
struct TakeBack<'a>(&'a Gate);

impl Drop for TakeBack<'_> {
    fn drop(&mut self) {
        self.0.overdraw();
    }
}
