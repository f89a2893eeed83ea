//! Loom models of the state word (`state.rs`): a fault-in, an optimistic reader and the
//! evictor racing on one page, and exclusive writers against readers. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p tern --lib --release -- buffer::`.

use super::state::{self, StateWord, EVICTED, UNLOCKED};
use crate::sync::{LatchClass, SpinConfig, SpinPolicy};
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// The bytes of the page as the file holds them; 0 stands for a frame's other contents.
const ON_DISK: u64 = 42;

/// A latch class of its own with a fixed spin policy: the default class's policy can be
/// changed by other tests in the process, and an adaptive one reads the clock, either of which
/// would make the model's schedules differ between its executions.
fn class() -> LatchClass {
    let class = LatchClass::register("loom.buffer.page").unwrap();
    class.set_config(SpinConfig { policy: SpinPolicy::Pause, spin_ns: 2, first_round_ns: 1, max_round_ns: 1 }).unwrap();
    class
}

fn word(w: &AtomicU64, class: LatchClass) -> StateWord<'_, AtomicU64> {
    StateWord { word: w, class }
}

#[test]
fn fault_in_reader_and_evictor_never_show_a_reader_the_wrong_bytes() {
    let class = class();
    loom::model(move || {
        // The page starts on disk; its frame slot holds something else.
        let page = Arc::new((AtomicU64::new((u64::from(EVICTED)) << 56), AtomicU64::new(0)));
        let loader = {
            let page = page.clone();
            loom::thread::spawn(move || {
                let w = word(&page.0, class);
                if w.try_begin_load() {
                    page.1.store(ON_DISK, Relaxed);
                    w.release(UNLOCKED, false);
                }
            })
        };
        let evictor = {
            let page = page.clone();
            loom::thread::spawn(move || {
                let w = word(&page.0, class);
                let seen = w.load();
                if w.try_mark(seen) && w.try_lock_for_eviction(w.load()) {
                    // The frame goes to another page, which overwrites it.
                    page.1.store(0, Relaxed);
                    w.release(EVICTED, false);
                }
            })
        };
        let w = word(&page.0, class);
        for _ in 0..2 {
            if let Ok(seen) = w.optimistic() {
                let bytes = page.1.load(Relaxed);
                if w.validate(seen) {
                    assert_eq!(bytes, ON_DISK, "a validated read saw another page's bytes");
                    break;
                }
            }
            loom::thread::yield_now();
        }
        loader.join().unwrap();
        evictor.join().unwrap();
        // However the race went, the page is resident with its bytes, or on disk.
        let end = page.0.load(Relaxed);
        assert!(state::state(end) == EVICTED || (state::readable(end) && page.1.load(Relaxed) == ON_DISK));
    });
}

#[test]
fn an_exclusive_writer_is_never_seen_half_done() {
    let class = class();
    loom::model(move || {
        let page = Arc::new((AtomicU64::new(u64::from(UNLOCKED) << 56), AtomicU64::new(1), AtomicU64::new(1)));
        let writer = {
            let page = page.clone();
            loom::thread::spawn(move || {
                let w = word(&page.0, class);
                w.lock_exclusive().unwrap();
                page.1.store(2, Relaxed);
                page.2.store(2, Relaxed);
                w.release(UNLOCKED, true);
            })
        };
        let w = word(&page.0, class);
        if let Ok(seen) = w.optimistic() {
            let (a, b) = (page.1.load(Relaxed), page.2.load(Relaxed));
            if w.validate(seen) {
                assert_eq!(a, b, "a validated read saw a half-done write");
            }
        }
        writer.join().unwrap();
        assert!(page.0.load(Relaxed) & state::DIRTY != 0);
    });
}

/// The write gate (`gate.rs`): a checkpoint's instant never overlaps a tree operation, and an
/// operation that starts after the instant sees what the instant did (the generation it
/// bumped), so it copies a page before changing it.
#[test]
fn no_operation_is_inside_the_gate_at_a_checkpoints_instant() {
    use super::gate::Gate;
    use loom::sync::atomic::AtomicBool;
    loom::model(|| {
        let shared = Arc::new((Gate::new(2), AtomicBool::new(false), AtomicU64::new(0)));
        let writer = {
            let shared = shared.clone();
            loom::thread::spawn(move || {
                let (gate, inside, gen) = &*shared;
                gate.enter(1);
                inside.store(true, Relaxed);
                // An operation reads the generation once and works under it throughout: it
                // must not also be seen inside by the instant that changes it.
                let seen = gen.load(Relaxed);
                inside.store(false, Relaxed);
                gate.leave(1);
                seen
            })
        };
        let (gate, inside, gen) = &*shared;
        gate.at_instant(|| {
            assert!(!inside.load(Relaxed), "an operation is inside at the instant");
            gen.store(1, Relaxed);
        });
        let seen = writer.join().unwrap();
        assert!(seen <= 1);
    });
}

/// The image generation of the row cache (`Pool::images`): a writer that takes a clean page
/// raises it under the latch, the page is written back and evicted. A reader that makes an
/// entry (an optimistic read of a clean page, validated) and a reader that looks one up (the
/// generation read between two equal loads of an EVICTED word) both get the generation of the
/// image they saw: the frame's bytes, or the file's.
#[test]
fn the_image_generation_always_names_the_image_read() {
    use crate::sync::primitive::fence;
    use std::sync::atomic::Ordering::Acquire;
    let class = class();
    loom::model(move || {
        // State word, generation, frame bytes, file bytes: resident, clean, generation 0.
        let page = Arc::new((
            AtomicU64::new(u64::from(UNLOCKED) << 56),
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(0),
        ));
        let writer = {
            let page = page.clone();
            loom::thread::spawn(move || {
                let (word_, gen, frame, file) = &*page;
                let w = word(word_, class);
                w.lock_exclusive().unwrap();
                if w.load() & state::DIRTY == 0 {
                    gen.store(gen.load(Relaxed) + 1, Relaxed);
                }
                frame.store(1, Relaxed);
                w.release(UNLOCKED, true);
                // Write-back, then eviction.
                let claimed = w.try_claim_write().expect("dirty and unlatched");
                file.store(frame.load(Relaxed), Relaxed);
                assert!(w.finish_write(claimed, true));
                let seen = w.load();
                if w.try_mark(seen) && w.try_lock_for_eviction(w.load()) {
                    w.release(EVICTED, false);
                }
            })
        };
        let (word_, gen, frame, file) = &*page;
        let w = word(word_, class);
        // Making an entry: only from a clean page, with the generation read inside the read.
        if let Ok(seen) = w.optimistic() {
            let bytes = frame.load(Relaxed);
            let g = gen.load(Relaxed);
            if w.validate(seen) && seen & state::DIRTY == 0 {
                assert_eq!(bytes, g, "an entry would name another image's generation");
            }
        }
        // Looking one up: the generation of the image in the file.
        let before = word_.load(Acquire);
        if state::state(before) == EVICTED {
            let g = gen.load(Relaxed);
            fence(Acquire);
            if word_.load(Relaxed) == before {
                assert_eq!(file.load(Relaxed), g, "an evicted page's generation is not its file image's");
            }
        }
        writer.join().unwrap();
    });
}
