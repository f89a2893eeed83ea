//! The buffer manager: pages in frames while in use, in a page file otherwise, so a database
//! can be larger than memory and keep in-memory speed when it is not.
//!
//! The design follows vmcache (Leis et al., SIGMOD 2023) with a page table instead of a
//! virtual-memory reservation: page ids index a dense table of 16-byte entries (a state word
//! and a frame address), each page owns two blocks of the page file (its two slots: the
//! durable checkpoint's image and the next one; neighbouring pages' blocks of one slot lie
//! together, `file.rs`), and eviction is a clock over the frames. Components:
//!
//! * `state.rs`: the state word, latch + version + residency in one `u64`.
//! * `page.rs`: a page's bytes as atomic words (optimistic readers race writers safely).
//! * `frames.rs`: frame memory (arena of huge-page-advised mappings, never unmapped).
//! * `pool.rs`: the page table, allocation and freeing, the fix API, faulting in.
//! * `guard.rs`: the optimistic, shared and exclusive guards the B+tree holds.
//! * `evict.rs`: the clock, batched write-back, the background evictor, and the write-behind
//!   of pages a bulk load finished.
//! * `file.rs`: the page file (positional I/O through `Fs`, crc32c per block).
//! * `meta.rs`: cold per-page facts (slots, checksums, generations).
//! * `capture.rs`: a checkpoint's images of every page at one instant (write gate, copy
//!   before write).
//! * `rows.rs`: the row cache, single keys' values from evicted leaves (a share of the cache).
//! * `sketch.rs`: the row cache's admission filter, a frequency sketch of the keys asked for.
//! * `stats.rs`: counters, [`BufferStats`].
//!
//! Invariants (each file states its own in detail):
//! 1. A page is in exactly one of: FREE, resident (UNLOCKED / MARKED / shared / LOCKED),
//!    LOADING, EVICTED. Its frame address is meaningful only while resident, and changes only
//!    while the page is LOCKED or LOADING, before the version bump that ends that state.
//! 2. A fix on the optimistic path reads the state word and the frame address and writes
//!    nothing (unless it finds the clock's mark, which it clears, or leaves for a point read
//!    that moves its key to the row cache instead of keeping the leaf: `rows.rs`). Validation compares
//!    versions, so an eviction, a load, a free or a write in between is always detected.
//! 3. Frames are never unmapped while the pool lives, so a stale frame address is memory-safe
//!    to read; what is read from it is discarded by the failed validation.
//! 4. Only clean pages are evicted, and a page stays resident while a write-back of it is in
//!    flight; a block is read back only with the checksum recorded when it was written. So
//!    an evicted page comes back exactly as it was, or the read fails with an error.
//! 5. A thread never waits for eviction while holding the latch eviction would need: a thread
//!    short of frames evicts a small batch itself, skipping latched pages, and goes over the
//!    bound (counted in `over_capacity`) rather than wait for latches it may hold. While a
//!    checkpoint captures, it first keeps trying for a bounded time (up to 10 ms, in rounds
//!    with 100 µs pauses): the pages the checkpoint must write become evictable as it writes them, so the
//!    pool follows the checkpoint instead of growing past its bound.
//! 6. Memory-only pools (no file) never evict; their pages live until freed.
//! 7. No write but a checkpoint's targets a block the durable checkpoint uses, and a capture's
//!    pages are written by the checkpoint alone (`capture.rs`), so the durable checkpoint's
//!    blocks stay intact until the next one is durable.
//! 8. The capacity starts at all of the cache in frames, with the row cache closed; the first
//!    eviction lowers it to the frames' share for the pool's life. Frames past it are retired
//!    (never handed out again) as their pages leave; once all are, the frame count drops to
//!    the capacity, their memory goes back to the system, and the row cache opens. Frames
//!    and row cache together stay within the cache, apart from the shrink itself (threads
//!    short of frames may go over the capacity as in 5) and frames taken over the capacity
//!    (retired too when their page leaves). If the shrink cannot finish (no background
//!    evictor thread, page writes refused or failing), the row cache stays closed.
//! 9. The pool never reads a node: whether a leaf image holds version-chain ids (which a
//!    checkpoint taking it from the disk must read back to resolve) is asked of the probe the
//!    tree installs (`Pool::set_image_probe`), and unknown counts as yes.
//!
//! The page file of a database is the database: the newest page checkpoint names a block of
//! it for every page, and opening reads pages from it on demand (`Pool::open_file`). A
//! temporary database's pool pages to an unlinked scratch file.

mod capture;
mod evict;
mod file;
mod frames;
mod gate;
mod guard;
#[cfg(all(test, loom))]
mod loom_tests;
mod meta;
pub(crate) mod page;
mod pool;
mod rows;
mod sketch;
pub(crate) mod state;
mod stats;
#[cfg(all(test, not(loom)))]
mod tests;

pub(crate) use capture::{Member, Taken};
#[cfg(test)]
pub(crate) use file::block_of;
pub(crate) use file::MAX_CHUNK_PAGES;
pub(crate) use frames::advise_huge_pages;
pub(crate) use frames::frame_bytes;
pub(crate) use guard::{ExclusivePage, PageRef, SharedPage};
pub(crate) use page::Page;
pub(crate) use pool::check_page_size;
pub(crate) use pool::{Kind, Miss, NO_PAGE};
pub use pool::{Pool, PoolConfig, MIN_FRAMES};

/// The page file's name in a database directory.
pub const PAGE_FILE: &str = "pages";
pub use stats::BufferStats;
