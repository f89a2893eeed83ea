//! The page file: page `p` is the block at offset `p × page_size`, read and written whole with
//! positional I/O through [`Fs`], each block checked against the crc32c recorded when it was
//! written.
//!
//! Invariants:
//! * A block is read only for a page that was written (the pool evicts clean pages only), and
//!   its bytes are handed on only if their crc32c matches the one recorded at write time: a
//!   torn or damaged block is `Error::Corruption { file, offset, reason }`, never wrong data.
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
        Ok(PageFile { file, path, page_size })
    }

    /// The file's name, for errors.
    pub(crate) fn name(&self) -> String {
        self.path.file_name().map_or_else(|| self.path.display().to_string(), |n| n.to_string_lossy().into_owned())
    }

    fn offset(&self, pid: u32) -> u64 {
        u64::from(pid) * self.page_size as u64
    }

    /// Reads page `pid` into `page`, checking it against `crc` (`written`: the block was ever
    /// written, so `crc` is meaningful).
    pub(crate) fn read_page(&self, pid: u32, written: bool, crc: u32, page: &Page) -> Result<()> {
        let offset = self.offset(pid);
        if !written {
            return Err(Error::Corruption {
                file: self.name(),
                offset,
                reason: format!("page {pid} is on disk only but was never written"),
            });
        }
        BUFFER.with_borrow_mut(|buf| {
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
                    reason: format!("page {pid}: checksum mismatch (block {actual:#010x}, written {crc:#010x})"),
                });
            }
            page.write(0, buf);
            Ok(())
        })
    }

    /// Writes `image` (one page) as page `pid`'s block; returns its crc32c.
    pub(crate) fn write_page(&self, pid: u32, image: &[u8]) -> Result<u32> {
        debug_assert_eq!(image.len(), self.page_size);
        let offset = self.offset(pid);
        self.file.write_at(image, offset).map_err(|source| Error::Io {
            what: format!("writing page {pid} of {} at offset {offset}", self.name()),
            source,
        })?;
        Ok(crc32c::crc32c(image))
    }

    /// Runs `f` with this thread's page buffer.
    pub(crate) fn with_buffer<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        BUFFER.with_borrow_mut(f)
    }

    /// Cuts the file to `pages` pages.
    pub(crate) fn set_pages(&self, pages: u32) -> Result<()> {
        let len = self.offset(pages);
        self.file
            .set_len(len)
            .map_err(|source| Error::Io { what: format!("cutting {} to {len} bytes", self.name()), source })
    }

    /// Starts reading page `pid`'s block ahead of need.
    pub(crate) fn will_need(&self, pid: u32) {
        self.file.will_need(self.offset(pid), self.page_size as u64);
    }
}
