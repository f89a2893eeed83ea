//! Asymmetric fences: a nearly free fence for a hot path, paid for by a heavy one on a rare path.
//!
//! Dekker-style protocols (announce, then check) need a full fence between one side's store and
//! its following load. When one side runs millions of times per second (a transaction's begin)
//! and the other rarely (a garbage collector's scan), the fence can be moved: the hot side
//! issues only a compiler barrier (`light`), and the rare side forces a full barrier on every
//! thread of the process (`heavy`, Linux `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, as
//! userspace RCU does). Then of a hot side's "store X; light(); load Y" and a rare side's
//! "load-or-store Y; heavy(); load X", either the rare side sees X, or the hot side's load of Y
//! comes after everything the rare side did before `heavy`.
//!
//! Where `membarrier` is unavailable (not Linux, an old kernel, seccomp), both sides fall back
//! to full fences: correct, and only as fast as a locked instruction.

use std::sync::atomic::{compiler_fence, fence, AtomicU8, Ordering::Relaxed, Ordering::SeqCst};

const UNKNOWN: u8 = 0;
const MEMBARRIER: u8 = 1;
const FENCES: u8 = 2;

/// Which implementation this process uses, decided on first use.
static MODE: super::aligned::Isolated<AtomicU8> = super::aligned::Isolated(AtomicU8::new(UNKNOWN));

/// The hot side's fence.
#[inline]
pub(crate) fn light() {
    match MODE.load(Relaxed) {
        MEMBARRIER => compiler_fence(SeqCst),
        FENCES => fence(SeqCst),
        _ => {
            settle();
            light();
        }
    }
}

/// The rare side's fence: every thread of the process has executed a full barrier when it
/// returns.
pub(crate) fn heavy() {
    match MODE.load(Relaxed) {
        MEMBARRIER => {
            // Registered, so only a transient failure (the kernel short of memory for its CPU
            // mask, an interrupted call) can refuse it; other threads rely on it, so retry.
            let mut backoff = std::time::Duration::from_micros(10);
            while !membarrier(PRIVATE_EXPEDITED) {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(std::time::Duration::from_millis(100));
            }
        }
        FENCES => fence(SeqCst),
        _ => {
            settle();
            heavy();
        }
    }
}

/// Whether the light fence is only a compiler barrier here.
pub fn uses_membarrier() -> bool {
    if MODE.load(Relaxed) == UNKNOWN {
        settle();
    }
    MODE.load(Relaxed) == MEMBARRIER
}

/// Decides the mode: `membarrier` if the kernel offers private expedited barriers and lets this
/// process register for them. Every thread settles on the same mode: the decision is made once
/// under a `Once`, and read with at least the `Once`'s ordering afterwards.
#[cold]
fn settle() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let usable =
            query().is_some_and(|cmds| cmds & PRIVATE_EXPEDITED != 0) && membarrier(REGISTER_PRIVATE_EXPEDITED);
        MODE.store(if usable { MEMBARRIER } else { FENCES }, SeqCst);
    });
}

/// `MEMBARRIER_CMD_PRIVATE_EXPEDITED` and its registration (linux/membarrier.h).
const PRIVATE_EXPEDITED: i64 = 1 << 3;
const REGISTER_PRIVATE_EXPEDITED: i64 = 1 << 4;

#[cfg(target_os = "linux")]
fn membarrier(cmd: i64) -> bool {
    // SAFETY: membarrier takes (cmd, flags, cpu_id) by value and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd as libc::c_long, 0 as libc::c_long, 0 as libc::c_long) == 0 }
}

#[cfg(target_os = "linux")]
fn query() -> Option<i64> {
    // SAFETY: as above; `MEMBARRIER_CMD_QUERY` (0) returns the supported commands.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long) };
    (r >= 0).then_some(r)
}

#[cfg(not(target_os = "linux"))]
fn membarrier(_cmd: i64) -> bool {
    false
}

#[cfg(not(target_os = "linux"))]
fn query() -> Option<i64> {
    None
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

    /// The Dekker pair through light and heavy fences: in every round, the hot side's flag is
    /// seen by the rare side, or the rare side's word is seen by the hot side.
    #[test]
    fn one_side_always_sees_the_other() {
        let (flag, word) = (AtomicBool::new(false), AtomicU64::new(0));
        let rounds = 20_000u64;
        let (go, done) = (AtomicU64::new(0), AtomicU64::new(0));
        let missed = std::thread::scope(|s| {
            s.spawn(|| {
                for r in 1..=rounds {
                    while go.load(SeqCst) < r {
                        std::hint::spin_loop();
                    }
                    flag.store(true, Relaxed);
                    light();
                    let seen = word.load(Relaxed);
                    done.store(r << 1 | u64::from(seen == r), SeqCst);
                }
            });
            let mut missed = 0;
            for r in 1..=rounds {
                flag.store(false, SeqCst);
                go.store(r, SeqCst);
                word.store(r, Relaxed);
                heavy();
                let saw_flag = flag.load(Relaxed);
                let hot = loop {
                    let d = done.load(SeqCst);
                    if d >> 1 == r {
                        break d & 1 == 1;
                    }
                    std::hint::spin_loop();
                };
                if !saw_flag && !hot {
                    missed += 1;
                }
            }
            missed
        });
        assert_eq!(missed, 0, "both sides missed each other (membarrier: {})", uses_membarrier());
    }
}
