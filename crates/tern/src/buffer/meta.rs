//! Cold per-page facts, touched by I/O and checkpoints only: where a page's images are in the
//! page file, their checksums, and the generations a checkpoint's capture compares.
//!
//! Page `p` owns two blocks of the page file, **slots** 0 and 1 (where: `file.rs`). The
//! durable checkpoint's image of `p`, if it has one, is in slot `durable_slot`; every other write
//! of `p` (eviction write-back, the next checkpoint) goes to the other slot, so a block the
//! durable checkpoint uses is never overwritten.
//!
//! Invariants:
//! 1. `crc[s]` is the crc32c of the image last written to slot `s`; `latest` names the slot a
//!    fault-in reads, valid only while `WRITTEN` is set.
//! 2. `DURABLE` / `durable_slot` change only when a checkpoint is made current
//!    (`Capture::commit`) or a page is freed and its id reused; no write but
//!    a checkpoint's targets the durable slot.
//! 3. `changed` is the pool generation of the page's last exclusive latch, `born` the generation
//!    it was allocated in, `captured` the checkpoint generation whose image of it was taken.
//!    Generations only grow, so comparing them needs no reset between checkpoints.
//! 4. `CHAINED` describes the image in `latest`: clear only if it was probed when written and
//!    held no slot a checkpoint must resolve (`Pool::set_image_probe`); set when unknown.

use crate::sync::segmented::Zeroable;
use std::sync::atomic::{AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Release};

/// Bits of [`Meta::bits`]: the page's kind (0..8), then slot facts, then `captured` (32..64).
const KIND: u64 = 0xff;
const LATEST: u64 = 1 << 8;
const WRITTEN: u64 = 1 << 9;
const DURABLE_SLOT: u64 = 1 << 10;
const DURABLE: u64 = 1 << 11;
const CHAINED: u64 = 1 << 12;

/// One page's cold facts (see the module doc).
#[derive(Default)]
pub(crate) struct Meta {
    /// crc32c of slot 0 (low half) and slot 1 (high half).
    crcs: AtomicU64,
    /// `changed` (low half), `born` (high half).
    gens: AtomicU64,
    /// Kind, slot bits, `captured` (high half).
    bits: AtomicU64,
}

// SAFETY: three atomics, for which zero is valid (no image, generation 0).
unsafe impl Zeroable for Meta {}

/// A copy of one page's facts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    pub kind: u8,
    /// The slot a fault-in reads, if an image was written.
    pub latest: Option<u8>,
    /// The durable checkpoint's slot, if the page is in it.
    pub durable: Option<u8>,
    pub crcs: [u32; 2],
    /// The latest image may hold version-chain ids (a checkpoint that takes it from the disk
    /// must read it to resolve them); false only if probed and found without.
    pub chained: bool,
    pub changed: u32,
    pub born: u32,
    pub captured: u32,
}

impl Facts {
    /// The slot a write other than the checkpoint's uses: never the durable one.
    pub(crate) fn spare_slot(&self) -> u8 {
        self.durable.map_or(0, |d| 1 - d)
    }
}

impl Meta {
    pub(crate) fn facts(&self) -> Facts {
        let (crcs, gens, bits) = (self.crcs.load(Acquire), self.gens.load(Acquire), self.bits.load(Acquire));
        Facts {
            kind: (bits & KIND) as u8,
            latest: (bits & WRITTEN != 0).then_some(u8::from(bits & LATEST != 0)),
            durable: (bits & DURABLE != 0).then_some(u8::from(bits & DURABLE_SLOT != 0)),
            crcs: [crcs as u32, (crcs >> 32) as u32],
            chained: bits & CHAINED != 0,
            changed: gens as u32,
            born: (gens >> 32) as u32,
            captured: (bits >> 32) as u32,
        }
    }

    /// The generation of the page's last exclusive latch (one load: the exclusive-latch path
    /// needs only this).
    #[inline]
    pub(crate) fn changed(&self) -> u32 {
        self.gens.load(Acquire) as u32
    }

    fn update_bits(&self, f: impl Fn(u64) -> u64) {
        let _ = self.bits.fetch_update(AcqRel, Acquire, |b| Some(f(b)));
    }

    /// A page newly allocated in generation `gen`: kind set, no latest image (the durable
    /// facts stay, so the new page's writes still avoid a slot a checkpoint may use).
    pub(crate) fn allocate(&self, kind: u8, gen: u32) {
        self.gens.store(u64::from(gen) | u64::from(gen) << 32, Release);
        self.update_bits(|b| (b & (DURABLE | DURABLE_SLOT | !0 << 32)) | u64::from(kind));
    }

    /// A page read from a checkpoint: kind, durable and latest slot `slot` with checksum `crc`.
    pub(crate) fn restore(&self, kind: u8, slot: u8, crc: u32) {
        let shift = 32 * u32::from(slot);
        self.crcs.store(u64::from(crc) << shift, Release);
        self.gens.store(0, Release);
        let s = if slot == 1 { LATEST | DURABLE_SLOT } else { 0 };
        self.bits.store(u64::from(kind) | s | WRITTEN | DURABLE | CHAINED, Release);
    }

    /// Slot `slot` now holds an image with checksum `crc`; with `latest`, fault-ins read it,
    /// and `chained` says whether it may hold version-chain ids (invariant 4).
    pub(crate) fn note_written(&self, slot: u8, crc: u32, latest: bool, chained: bool) {
        let shift = 32 * u32::from(slot);
        let _ =
            self.crcs.fetch_update(AcqRel, Acquire, |c| Some((c & !(0xffff_ffff << shift)) | u64::from(crc) << shift));
        if latest {
            let flags = WRITTEN | if slot == 1 { LATEST } else { 0 } | if chained { CHAINED } else { 0 };
            self.update_bits(|b| (b & !(LATEST | CHAINED)) | flags);
        }
    }

    /// The page was freed: its latest image is gone (its durable one, and its kind, stay until
    /// a checkpoint no longer needs them).
    pub(crate) fn free(&self) {
        self.update_bits(|b| b & !WRITTEN);
    }

    /// Stamps the page changed in generation `gen` (returns the generation it had).
    pub(crate) fn set_changed(&self, gen: u32) -> u32 {
        let before = self.gens.fetch_update(AcqRel, Acquire, |g| Some((g & !0xffff_ffff) | u64::from(gen)));
        before.unwrap_or_default() as u32
    }

    /// The page's image for checkpoint `gen` is taken.
    pub(crate) fn set_captured(&self, gen: u32) {
        self.update_bits(|b| (b & 0xffff_ffff) | u64::from(gen) << 32);
    }

    /// A checkpoint holding the page's image in `slot` became current.
    pub(crate) fn set_durable(&self, slot: Option<u8>) {
        self.update_bits(|b| match slot {
            Some(s) => (b & !DURABLE_SLOT) | DURABLE | if s == 1 { DURABLE_SLOT } else { 0 },
            None => b & !(DURABLE | DURABLE_SLOT),
        });
    }
}
