//! The page file: page `p` owns blocks `2p` and `2p + 1` (its slots 0 and 1, see `meta.rs`), at
//! offset `block × page_size`, read and written whole with positional I/O through [`Fs`], each
//! block checked against the crc32c recorded when it was written.
//!
//! Invariants:
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

pub(crate) struct PageFile {
    file: Box<dyn RandomFile>,
    path: PathBuf,
    page_size: usize,
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
    /// Creates (or empties) the page file at `path`.
    pub(crate) fn create(fs: Arc<dyn Fs>, path: PathBuf, page_size: usize) -> Result<PageFile> {
        let file = fs
            .create_random(&path)
            .map_err(|source| Error::Io { what: format!("creating page file {}", path.display()), source })?;
        Ok(PageFile { file, path, page_size, read_only: false, stopped: Default::default() })
    }

    /// Opens the existing page file at `path` (its blocks are a checkpoint's).
    pub(crate) fn open(fs: Arc<dyn Fs>, path: PathBuf, page_size: usize, read_only: bool) -> Result<PageFile> {
        let file = fs
            .open_random(&path, read_only)
            .map_err(|source| Error::Io { what: format!("opening page file {}", path.display()), source })?;
        Ok(PageFile { file, path, page_size, read_only, stopped: Default::default() })
    }

    /// The file's name, for errors.
    pub(crate) fn name(&self) -> String {
        self.path.file_name().map_or_else(|| self.path.display().to_string(), |n| n.to_string_lossy().into_owned())
    }

    /// The offset of page `pid`'s slot `slot`.
    pub(crate) fn offset(&self, pid: u32, slot: u8) -> u64 {
        (2 * u64::from(pid) + u64::from(slot)) * self.page_size as u64
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
        let len = self.offset(pages, 0);
        self.file
            .set_len(len)
            .map_err(|source| Error::Io { what: format!("cutting {} to {len} bytes", self.name()), source })
    }

    /// Has the kernel start writing the blocks of pages `first..first + pages` to the disk
    /// (both slots: the range is contiguous): pages a bulk load finished. `DONTNEED` starts the
    /// write-back of dirty blocks and drops only clean ones, so blocks just written stay cached
    /// until reclaimed (a hint; see `Fs`'s `RandomFile::wont_need`).
    pub(crate) fn start_writing(&self, first: u32, pages: u32) {
        let start = self.offset(first, 0);
        self.file.wont_need(start, self.offset(first + pages, 0) - start);
    }

    /// Starts reading page `pid`'s block ahead of need.
    pub(crate) fn will_need(&self, pid: u32, slot: u8) {
        self.file.will_need(self.offset(pid, slot), self.page_size as u64);
    }
}
