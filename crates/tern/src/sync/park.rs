//! Parking: putting a waiting thread to sleep on an address, and waking it.
//!
//! Latches keep their whole state in one atomic word and park waiters in a global table keyed by
//! the latch's address (the design of WebKit's `ParkingLot` and Rust's `parking_lot`). In normal
//! builds this is `parking_lot_core`, a futex-backed hash table of FIFO queues; under loom it is a
//! small model with the same contract, so the latches' wait/wake protocols are model-checked.
//!
//! The contract every latch relies on to never lose a wakeup: `validate` runs with the queue for
//! `key` locked, and `unpark_*` locks the same queue. A waiter that sets its latch's "parked" bit
//! inside `validate` is therefore either seen by the next unparker or sees the release itself.

/// Token passed to an unparked thread: it must retry acquiring the latch.
pub(crate) const TOKEN_RETRY: usize = 0;
/// Token passed to an unparked thread: the latch was handed to it directly (fair unlock).
pub(crate) const TOKEN_HANDOFF: usize = 1;

/// How a [`park_timed`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parked {
    /// Woken by an unpark call, with its token.
    Token(usize),
    /// `validate` said not to sleep.
    Invalid,
    /// The deadline passed.
    TimedOut,
}

/// What an unpark call found; passed to its callback while the queue is still locked.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Unparked {
    /// A thread was taken off the queue.
    pub unparked: bool,
    /// Threads remain parked on the key.
    pub have_more: bool,
    /// About once every 0.5 ms per key: the caller should hand the latch over fairly.
    pub be_fair: bool,
}

#[cfg(not(loom))]
mod imp {
    use super::Unparked;
    use parking_lot_core::{ParkResult, UnparkToken, DEFAULT_PARK_TOKEN};

    /// # Safety
    /// `key` must be an address owned by the calling latch (so no unrelated primitive parks on
    /// it), and `validate` must not panic or park/unpark (it runs under the queue lock).
    pub(crate) unsafe fn park(key: usize, validate: impl FnOnce() -> bool) -> Option<usize> {
        // SAFETY: forwarded from this function's contract.
        let result = unsafe { parking_lot_core::park(key, validate, || {}, |_, _| {}, DEFAULT_PARK_TOKEN, None) };
        match result {
            ParkResult::Unparked(UnparkToken(token)) => Some(token),
            ParkResult::Invalid | ParkResult::TimedOut => None,
        }
    }

    /// [`park`] with a deadline, telling how it ended.
    ///
    /// # Safety
    /// As for [`park`].
    pub(crate) unsafe fn park_timed(
        key: usize,
        validate: impl FnOnce() -> bool,
        deadline: Option<std::time::Instant>,
    ) -> super::Parked {
        // SAFETY: forwarded from this function's contract.
        let result = unsafe { parking_lot_core::park(key, validate, || {}, |_, _| {}, DEFAULT_PARK_TOKEN, deadline) };
        match result {
            ParkResult::Unparked(UnparkToken(token)) => super::Parked::Token(token),
            ParkResult::Invalid => super::Parked::Invalid,
            ParkResult::TimedOut => super::Parked::TimedOut,
        }
    }

    /// # Safety
    /// As for [`park`]; `callback` must not panic or park/unpark.
    pub(crate) unsafe fn unpark_one(key: usize, callback: impl FnOnce(Unparked) -> usize) -> Unparked {
        let translate = |r: parking_lot_core::UnparkResult| Unparked {
            unparked: r.unparked_threads > 0,
            have_more: r.have_more_threads,
            be_fair: r.be_fair,
        };
        // SAFETY: forwarded from this function's contract.
        let result = unsafe { parking_lot_core::unpark_one(key, |r| UnparkToken(callback(translate(r)))) };
        translate(result)
    }

    /// # Safety
    /// `key` must be an address owned by the calling latch.
    pub(crate) unsafe fn unpark_all(key: usize) -> usize {
        // SAFETY: forwarded from this function's contract.
        unsafe { parking_lot_core::unpark_all(key, UnparkToken(super::TOKEN_RETRY)) }
    }
}

#[cfg(loom)]
mod imp {
    //! A FIFO queue per key under one loom mutex, woken through one loom condvar.
    use super::Unparked;
    use loom::sync::{Condvar, Mutex};

    struct Waiter {
        key: usize,
        id: usize,
        token: Option<usize>,
    }

    #[derive(Default)]
    struct Queue {
        next_id: usize,
        waiters: Vec<Waiter>,
    }

    struct Lot {
        queue: Mutex<Queue>,
        woken: Condvar,
    }

    std::thread_local! {
        /// How the model answers `be_fair` (real parking_lot says yes about every 0.5 ms):
        /// 0 never, 1 always, 2 on every other `unpark_one` that wakes someone. Set by a test
        /// around `loom::model` (loom runs its threads on the test's OS thread).
        pub(crate) static FAIR_MODE: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
        static FAIR_COUNT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }

    /// Restarts the alternation of `FAIR_MODE` 2; call at the start of each execution.
    #[cfg(test)]
    pub(crate) fn reset_fairness() {
        FAIR_COUNT.with(|c| c.set(0));
    }

    fn be_fair() -> bool {
        match FAIR_MODE.with(|m| m.get()) {
            0 => false,
            1 => true,
            _ => FAIR_COUNT.with(|c| {
                let n = c.get();
                c.set(n + 1);
                n % 2 == 1
            }),
        }
    }

    loom::lazy_static! {
        static ref LOT: Lot = Lot { queue: Mutex::new(Queue::default()), woken: Condvar::new() };
    }

    fn waiting(q: &Queue, key: usize) -> impl Iterator<Item = usize> + '_ {
        q.waiters.iter().enumerate().filter(move |(_, w)| w.key == key && w.token.is_none()).map(|(i, _)| i)
    }

    pub(crate) unsafe fn park(key: usize, validate: impl FnOnce() -> bool) -> Option<usize> {
        let mut q = LOT.queue.lock().unwrap();
        if !validate() {
            return None;
        }
        let id = q.next_id;
        q.next_id += 1;
        q.waiters.push(Waiter { key, id, token: None });
        loop {
            q = LOT.woken.wait(q).unwrap();
            if let Some(pos) = q.waiters.iter().position(|w| w.id == id && w.token.is_some()) {
                return q.waiters.remove(pos).token;
            }
        }
    }

    /// The model has no clock: a deadline passes at once, right after `validate` (the earliest a
    /// real timeout can fire, and the moment that races hardest with a wakeup).
    pub(crate) unsafe fn park_timed(
        key: usize,
        validate: impl FnOnce() -> bool,
        deadline: Option<std::time::Instant>,
    ) -> super::Parked {
        if deadline.is_none() {
            // SAFETY: forwarded from this function's contract.
            return match unsafe { park(key, validate) } {
                Some(token) => super::Parked::Token(token),
                None => super::Parked::Invalid,
            };
        }
        let _q = LOT.queue.lock().unwrap();
        if validate() {
            super::Parked::TimedOut
        } else {
            super::Parked::Invalid
        }
    }

    pub(crate) unsafe fn unpark_one(key: usize, callback: impl FnOnce(Unparked) -> usize) -> Unparked {
        let mut q = LOT.queue.lock().unwrap();
        let (first, have_more) = {
            let mut found = waiting(&q, key);
            (found.next(), found.next().is_some())
        };
        let result = Unparked { unparked: first.is_some(), have_more, be_fair: first.is_some() && be_fair() };
        let token = callback(result);
        if let Some(i) = first {
            q.waiters[i].token = Some(token);
            LOT.woken.notify_all();
        }
        result
    }

    pub(crate) unsafe fn unpark_all(key: usize) -> usize {
        let mut q = LOT.queue.lock().unwrap();
        let all: Vec<usize> = waiting(&q, key).collect();
        for &i in &all {
            q.waiters[i].token = Some(super::TOKEN_RETRY);
        }
        if !all.is_empty() {
            LOT.woken.notify_all();
        }
        all.len()
    }
}

pub(crate) use imp::{park, park_timed, unpark_all, unpark_one};

/// [`park`] with a deadline; returns whether it woke because the deadline passed.
///
/// # Safety
/// As for [`park`].
pub(crate) unsafe fn park_until(
    key: usize,
    validate: impl FnOnce() -> bool,
    deadline: Option<std::time::Instant>,
) -> bool {
    // SAFETY: forwarded from this function's contract.
    unsafe { park_timed(key, validate, deadline) == Parked::TimedOut }
}
#[cfg(all(test, loom))]
pub(crate) use imp::{reset_fairness, FAIR_MODE};
