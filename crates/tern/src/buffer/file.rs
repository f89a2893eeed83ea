//! The page file: every page owns two blocks (its slots 0 and 1, see `meta.rs`), read and
//! written whole with positional I/O through [`Fs`], each block checked against the crc32c
//! recorded when it was written.
//!
//! **Layout.** The file is a run of chunks of `2 × k` blocks (`k`: [`PageFile::chunk_pages`]).
//! Chunk `c` holds pages `c·k .. (c+1)·k`: their slot-0 blocks first, in page order, then their
//! slot-1 blocks. Page `p`'s slot `s` is block `(p / k)·2k + s·k + p mod k`, at offset
//! `block × page_size`. Pages with neighbouring ids written to the same slot (a bulk load's,
//! a checkpoint's in id order) are then neighbours on disk, and their writes merge into large
//! ones (with `k = 1`, every other block: the kernel wrote such a load at half the speed, with
//! twice the CPU time). New files use [`CHUNK_BYTES`]` / page_size` pages per chunk; the page
//! checkpoint records `k` (`checkpoint/map.rs`), and a file written with `k = 1` (before the
//! chunks) keeps it.
//!
//! Invariants:
//! * Blocks never overlap: `(p, s) ↦ block` is one-to-one for a given `k`, and a file is read
//!   and written with the one `k` it was created with.
//! * A block is read only for a page that was written (the pool evicts clean pages only), and
//!   its bytes are handed on only if their crc32c matches the one recorded at write time (in
//!   memory, or in the checkpoint's page map): a torn or damaged block is
//!   `Error::Corruption { file, offset, reason }` naming the page, never wrong data.
//! * I/O goes through the page cache (buffered `pread`/`pwrite`), chosen by measurement: see
//!   `docs/buffer.md#page-cache-or-o_direct`. Reads pass through a per-thread buffer, so the
//!   frame is written only with atomic stores (optimistic readers may be looking at it).

use super::page::Page;
use crate::fs::{Fs, RandomFile};
use crate::{Error, Result};
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;

/// The bytes of one slot's half of a chunk in a new page file (see the module doc).
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// The most pages per chunk a page file may have (what a page checkpoint may name).
pub(crate) const MAX_CHUNK_PAGES: u32 = 1 << 16;

pub(crate) struct PageFile {
    file: Box<dyn RandomFile>,
    path: PathBuf,
    page_size: usize,
    /// Pages per chunk (`k` in the module doc), at least 1.
    chunk: u32,
    /// Opened for reading only (`tern check`): nothing is ever written.
    pub(crate) read_only: bool,
    /// A sync of this file failed: the kernel may have dropped pages it could not write, so
    /// nothing more is written (no block the durable checkpoint may yet need is touched).
    pub(crate) stopped: std::sync::atomic::AtomicBool,
}

thread_local! {
    /// A page-sized buffer for reads and write-backs.
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl PageFile {
    /// Creates (or empties) the page file at `path`, laid out in chunks of [`CHUNK_BYTES`] of
    /// blocks per slot.
    pub(crate) fn create(fs: Arc<dyn Fs>, path: PathBuf, page_size: usize) -> Result<PageFile> {
        let chunk = (CHUNK_BYTES / page_size).clamp(1, MAX_CHUNK_PAGES as usize) as u32;
        let file = fs
            .create_random(&path)
            .map_err(|source| Error::Io { what: format!("creating page file {}", path.display()), source })?;
        Ok(PageFile { file, path, page_size, chunk, read_only: false, stopped: Default::default() })
    }

    /// Opens the existing page file at `path` (its blocks are a checkpoint's, laid out in
    /// chunks of `chunk` pages: in `1..=MAX_CHUNK_PAGES`, as the page map's parser checks).
    pub(crate) fn open(
        fs: Arc<dyn Fs>,
        path: PathBuf,
        page_size: usize,
        chunk: u32,
        read_only: bool,
    ) -> Result<PageFile> {
        debug_assert!((1..=MAX_CHUNK_PAGES).contains(&chunk), "{chunk} pages per chunk");
        let file = fs
            .open_random(&path, read_only)
            .map_err(|source| Error::Io { what: format!("opening page file {}", path.display()), source })?;
        Ok(PageFile { file, path, page_size, chunk, read_only, stopped: Default::default() })
    }

    /// Pages per chunk (the module doc's `k`).
    pub(crate) fn chunk_pages(&self) -> u32 {
        self.chunk
    }

    /// The file's name, for errors.
    pub(crate) fn name(&self) -> String {
        self.path.file_name().map_or_else(|| self.path.display().to_string(), |n| n.to_string_lossy().into_owned())
    }

    /// The offset of page `pid`'s slot `slot`.
    pub(crate) fn offset(&self, pid: u32, slot: u8) -> u64 {
        block_of(pid, slot, self.chunk) * self.page_size as u64
    }

    /// The end of the last block any of pages `0..pages` may use.
    fn end_of(&self, pages: u32) -> u64 {
        match pages.checked_sub(1) {
            Some(last) => self.offset(last, 1) + self.page_size as u64,
            None => 0,
        }
    }

    /// Reads page `pid`'s slot `slot` (`None`: never written) into `page`, checking it against
    /// `crc`.
    pub(crate) fn read_page(&self, pid: u32, slot: Option<u8>, crc: u32, page: &Page) -> Result<()> {
        BUFFER.with_borrow_mut(|buf| {
            self.read_block(pid, slot, crc, buf)?;
            page.write(0, buf);
            Ok(())
        })
    }

    /// Reads page `pid`'s slot `slot` (`None`: never written) into `buf`, checking it against
    /// `crc`.
    pub(crate) fn read_block(&self, pid: u32, slot: Option<u8>, crc: u32, buf: &mut Vec<u8>) -> Result<()> {
        let Some(slot) = slot else {
            return Err(Error::Corruption {
                file: self.name(),
                offset: self.offset(pid, 0),
                reason: format!("page {pid} is on disk only but was never written"),
            });
        };
        let offset = self.offset(pid, slot);
        buf.resize(self.page_size, 0);
        self.file.read_at(buf, offset).map_err(|source| Error::Io {
            what: format!("reading page {pid} of {} at offset {offset}", self.name()),
            source,
        })?;
        let actual = crc32c::crc32c(buf);
        if actual != crc {
            return Err(Error::Corruption {
                file: self.name(),
                offset,
                reason: format!("page {pid}: checksum mismatch (block {actual:#010x}, expected {crc:#010x})"),
            });
        }
        Ok(())
    }

    /// Writes `image` (one page) to page `pid`'s slot `slot`; returns its crc32c.
    pub(crate) fn write_page(&self, pid: u32, slot: u8, image: &[u8]) -> Result<u32> {
        debug_assert_eq!(image.len(), self.page_size);
        let offset = self.offset(pid, slot);
        if self.refuses_writes() {
            return Err(Error::Io {
                what: format!("writing page {pid} of {} at offset {offset}", self.name()),
                source: std::io::Error::other("the page file takes no more writes after a failed sync"),
            });
        }
        self.file.write_at(image, offset).map_err(|source| Error::Io {
            what: format!("writing page {pid} of {} at offset {offset}", self.name()),
            source,
        })?;
        // The other slot now holds an older image, which a fault-in never reads (a backup or a
        // recovery may): its block need not stay in the page cache beside the current one.
        self.file.wont_need(self.offset(pid, 1 - slot), self.page_size as u64);
        Ok(crc32c::crc32c(image))
    }

    /// Makes every write so far durable. A failure is final: the file takes no more writes.
    pub(crate) fn sync(&self) -> Result<()> {
        self.file.sync().map_err(|source| {
            self.stop();
            Error::Io { what: format!("syncing {}", self.name()), source }
        })
    }

    /// Takes no more writes (see [`stopped`](Self::stopped)).
    pub(crate) fn stop(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether writes are refused (read-only, or stopped).
    pub(crate) fn refuses_writes(&self) -> bool {
        self.read_only || self.stopped.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs `f` with this thread's page buffer.
    pub(crate) fn with_buffer<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        BUFFER.with_borrow_mut(f)
    }

    /// Cuts the file to the slots of `pages` pages.
    pub(crate) fn set_pages(&self, pages: u32) -> Result<()> {
        let len = self.end_of(pages);
        self.file
            .set_len(len)
            .map_err(|source| Error::Io { what: format!("cutting {} to {len} bytes", self.name()), source })
    }

    /// Has the kernel start writing the blocks of pages `first..first + pages` to the disk
    /// (both slots: the range from the first page's slot 0 to the last page's slot 1 holds
    /// them all): pages a bulk load finished. `DONTNEED` starts the write-back of dirty blocks
    /// and drops only clean ones, so blocks just written stay cached until reclaimed (a hint;
    /// see `Fs`'s `RandomFile::wont_need`).
    pub(crate) fn start_writing(&self, first: u32, pages: u32) {
        if pages == 0 {
            return;
        }
        let start = self.offset(first, 0);
        self.file.wont_need(start, self.end_of(first + pages) - start);
    }

    /// Starts reading page `pid`'s block ahead of need.
    pub(crate) fn will_need(&self, pid: u32, slot: u8) {
        self.file.will_need(self.offset(pid, slot), self.page_size as u64);
    }
}

/// Page `pid`'s slot `slot` as a block number, with `chunk` pages per chunk (the module doc).
pub(crate) fn block_of(pid: u32, slot: u8, chunk: u32) -> u64 {
    let (pid, chunk) = (u64::from(pid), u64::from(chunk));
    pid / chunk * 2 * chunk + u64::from(slot) * chunk + pid % chunk
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_of_every_page_has_a_block_of_its_own() {
        for chunk in [1, 2, 3, 64, 256] {
            let mut seen = std::collections::HashSet::new();
            for pid in 0..1000u32 {
                for slot in 0..2u8 {
                    assert!(seen.insert(block_of(pid, slot, chunk)), "page {pid} slot {slot}, {chunk} per chunk");
                }
            }
            // The blocks of pages 0..n fill the first chunks exactly.
            let n = 4 * chunk;
            assert_eq!((0..n).flat_map(|p| [0, 1].map(|s| block_of(p, s, chunk))).max(), Some(u64::from(2 * n - 1)));
        }
    }

    #[test]
    fn one_page_per_chunk_is_the_interleaved_layout() {
        for pid in [0u32, 1, 7, 1000, u32::MAX] {
            for slot in 0..2u8 {
                assert_eq!(block_of(pid, slot, 1), 2 * u64::from(pid) + u64::from(slot));
            }
        }
    }

    #[test]
    fn a_chunk_keeps_one_slot_of_neighbouring_pages_together() {
        assert_eq!((0..64).map(|p| block_of(p, 0, 64)).collect::<Vec<_>>(), (0..64).collect::<Vec<u64>>());
        assert_eq!((0..64).map(|p| block_of(p, 1, 64)).collect::<Vec<_>>(), (64..128).collect::<Vec<u64>>());
        assert_eq!(block_of(64, 0, 64), 128);
        assert_eq!(block_of(u32::MAX, 1, 64), u64::from(u32::MAX) / 64 * 128 + 64 + 63);
    }
}
