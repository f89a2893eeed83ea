//! The visible readers table of [`RwLatch`](super::RwLatch)'s reader bias (BRAVO).
//!
//! One process-wide array of slots. A biased reader of latch `L` on a thread with token `t`
//! publishes itself by writing `L`'s address into slot `(hash(L) + t × STRIDE) mod SLOTS`:
//!
//! * `STRIDE` slots span 128 bytes, so two threads reading the same latch never write the same
//!   cache line, nor the same 128-byte pair of lines that x86's adjacent-line prefetcher moves
//!   together (with a 64-byte stride, half of all latch addresses put two threads' slots in one
//!   pair, and shared-mode throughput on two cores halved at random from one run to the next).
//! * Tokens are small integers handed to threads on their first biased read (unique among live
//!   threads) and recycled when a thread exits, so they stay close to the number of threads
//!   alive at once. A thread already tearing down its thread-locals gets none and reads through
//!   the slow path, so exiting threads cannot leak tokens. A writer revoking the bias
//!   of `L` need only look at the slots of tokens `1..=high_water`: tens of cache lines instead
//!   of the whole table, which is what makes revocation cheap enough for read-mostly latches
//!   with occasional writers.
//!
//! Why the writer's bounded scan cannot miss a reader: a thread publishes its token in the
//! high-water mark (SeqCst) before its first slot write, then writes the slot and loads the bias
//! (SeqCst). The writer stores the bias (SeqCst), then loads the high-water mark and the slots
//! (SeqCst). If the reader saw the bias still on, its high-water store and slot write precede
//! the writer's bias store in the single SeqCst order, so the writer's later loads see both.
//! Tokens beyond `SLOTS / STRIDE` wrap onto lower tokens' slots; the reader's compare-and-swap
//! then fails and it takes the slow path, so correctness never depends on uniqueness.

use super::primitive::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;

#[cfg(not(loom))]
const SLOTS: usize = 4096;
#[cfg(not(loom))]
const STRIDE: usize = 128 / std::mem::size_of::<usize>();
// Loom: a tiny table, one slot per token, so models stay small.
#[cfg(loom)]
const SLOTS: usize = 4;
#[cfg(loom)]
const STRIDE: usize = 1;

/// Distinct slot positions per latch; tokens above this share positions.
const POSITIONS: usize = SLOTS / STRIDE;

#[cfg(not(loom))]
fn table() -> &'static [AtomicUsize] {
    static TABLE: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
    &TABLE
}

#[cfg(loom)]
fn table() -> &'static [AtomicUsize] {
    loom::lazy_static! {
        static ref TABLE: Vec<AtomicUsize> = (0..SLOTS).map(|_| AtomicUsize::new(0)).collect();
    }
    &TABLE
}

/// Where latch `latch`'s readers start in the table.
#[inline]
fn base(latch: usize) -> usize {
    // Loom needs every execution to take the same path, and heap addresses differ between
    // executions: all latches share one base there. Elsewhere, `>> 3` keeps neighbouring
    // latches (24 bytes apart) on different bases.
    if cfg!(loom) {
        0
    } else {
        (latch >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize) >> (usize::BITS - SLOTS.trailing_zeros())
    }
}

#[inline]
fn slot(latch: usize, token: usize) -> &'static AtomicUsize {
    &table()[(base(latch) + token * STRIDE) % SLOTS]
}

/// This thread's slot for `latch`; `None` while the thread is exiting (it then reads through
/// the slow path).
#[inline]
pub(crate) fn my_slot(latch: usize) -> Option<&'static AtomicUsize> {
    tokens::mine().map(|token| slot(latch, token))
}

/// This thread's token (for tests).
#[cfg(all(test, not(loom)))]
pub(crate) fn my_token() -> Option<usize> {
    tokens::mine()
}

/// The largest token handed out so far (for leak tests).
#[cfg(all(test, not(loom)))]
pub(crate) fn token_high_water() -> usize {
    tokens::high_water()
}

/// Every slot a biased reader of `latch` may occupy right now.
pub(crate) fn slots_of(latch: usize) -> impl Iterator<Item = &'static AtomicUsize> {
    let tokens = tokens::high_water().min(POSITIONS);
    (1..=tokens).map(move |t| slot(latch, t))
}

#[cfg(not(loom))]
mod tokens {
    //! Small per-thread integers, recycled when threads exit.
    use super::SeqCst;
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    /// The largest token ever handed out.
    static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);
    /// Tokens of exited threads.
    static FREE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

    /// A thread whose thread-locals are being destroyed: it gets no token (and no fast reads),
    /// so a token returned by its exit hook is never taken again by the same thread.
    const EXITING: usize = usize::MAX;

    std::thread_local! {
        static TOKEN: Cell<usize> = const { Cell::new(0) };
        static RELEASE: Release = const { Release };
    }

    struct Release;

    impl Drop for Release {
        fn drop(&mut self) {
            if let Ok(token) = TOKEN.try_with(|t| t.replace(EXITING)) {
                if token != 0 && token != EXITING {
                    FREE.lock().unwrap_or_else(|p| p.into_inner()).push(token);
                }
            }
        }
    }

    #[inline]
    pub(super) fn mine() -> Option<usize> {
        TOKEN.with(|t| match t.get() {
            0 => take(t),
            EXITING => None,
            token => Some(token),
        })
    }

    #[cold]
    fn take(cell: &Cell<usize>) -> Option<usize> {
        // Register the exit hook first; if that is impossible the thread is exiting.
        if RELEASE.try_with(|_| ()).is_err() {
            cell.set(EXITING);
            return None;
        }
        let token = {
            // Every mutation is a single push or pop, so a poisoned list is still consistent.
            let mut free = FREE.lock().unwrap_or_else(|p| p.into_inner());
            // A new token is published in HIGH_WATER (SeqCst) before this thread's first slot
            // write (see the module doc), and under the lock, so no two threads get the same.
            free.pop().unwrap_or_else(|| HIGH_WATER.fetch_add(1, SeqCst) + 1)
        };
        cell.set(token);
        Some(token)
    }

    pub(super) fn high_water() -> usize {
        HIGH_WATER.load(SeqCst)
    }
}

#[cfg(loom)]
mod tokens {
    //! Under loom: tokens from a counter that restarts with each execution (loom needs
    //! determinism), kept in loom's thread-locals (its threads share one OS thread).
    use super::{AtomicUsize, SeqCst};

    loom::lazy_static! {
        static ref NEXT: AtomicUsize = AtomicUsize::new(1);
    }
    loom::thread_local! {
        static TOKEN: usize = NEXT.fetch_add(1, SeqCst);
    }

    pub(super) fn mine() -> Option<usize> {
        Some(TOKEN.with(|t| *t))
    }

    pub(super) fn high_water() -> usize {
        NEXT.load(SeqCst) - 1
    }
}
