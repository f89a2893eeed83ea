//! Values too large to live in a leaf, stored in chains of overflow pages.
//!
//! A chain is written completely before its first page id is stored in a leaf, and never
//! changed afterwards; replacing or deleting the value frees the chain through the epoch (see
//! `pages.rs`), so a reader that found the reference in a leaf can read the chain safely even if
//! the leaf changes meanwhile (its validation of the leaf then fails and it discards the bytes).
//! Each page starts with the next page's id (u32, `NO_PAGE` at the end) and the number of value
//! bytes it holds (u32); the bytes follow.

use super::pages::{PageTable, NO_PAGE};
use crate::sync::Restart;
use crossbeam_epoch::Guard;

const NEXT: usize = 0;
const LEN: usize = 4;
const DATA: usize = 8;

/// Writes `value` into a new chain; returns its first page id.
pub(crate) fn write(pages: &PageTable, value: &[u8], guard: &Guard) -> u32 {
    let per_page = pages.page_size() - DATA;
    let mut next = NO_PAGE;
    // Write back to front, so each page can name its successor.
    for chunk in value.chunks(per_page).rev() {
        let (pid, node) = pages.alloc(guard);
        node.page.set_u32(NEXT, next);
        node.page.set_u32(LEN, chunk.len() as u32);
        node.page.write(DATA, chunk);
        next = pid;
    }
    next
}

/// Appends the `len` bytes of the chain starting at `first` to `out`. A chain that ends early
/// or names a missing page (a reference read from a leaf that was changing) is a `Restart`.
pub(crate) fn read(pages: &PageTable, first: u32, len: usize, out: &mut Vec<u8>, guard: &Guard) -> Result<(), Restart> {
    let per_page = pages.page_size() - DATA;
    let mut pid = first;
    let mut left = len;
    // At most as many pages as the length needs: garbage cannot make this loop forever.
    for _ in 0..len.div_ceil(per_page) {
        let node = pages.get(pid, guard).ok_or(Restart)?;
        let here = (node.page.u32_at(LEN) as usize).min(left);
        node.page.read_into(DATA, here, out);
        left -= here;
        pid = node.page.u32_at(NEXT);
    }
    if left == 0 {
        Ok(())
    } else {
        Err(Restart)
    }
}

/// Frees the chain of `len` bytes starting at `first` (its pages are reclaimed after the epoch).
pub(crate) fn free(pages: &PageTable, first: u32, len: usize, guard: &Guard) {
    let per_page = pages.page_size() - DATA;
    let mut pid = first;
    for _ in 0..len.div_ceil(per_page) {
        let Some(node) = pages.get(pid, guard) else { return };
        let next = node.page.u32_at(NEXT);
        pages.free(pid, guard);
        pid = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_roundtrip_and_free() {
        let pages = PageTable::new(4096, false);
        let guard = crossbeam_epoch::pin();
        for len in [1, 4087, 4088, 4089, 100_000] {
            let value: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let first = write(&pages, &value, &guard);
            let mut out = Vec::new();
            read(&pages, first, len, &mut out, &guard).unwrap();
            assert_eq!(out, value);
            out.clear();
            assert_eq!(read(&pages, first, len + 1, &mut out, &guard), Err(Restart), "a short chain is detected");
            free(&pages, first, len, &guard);
            assert!(pages.get(first, &guard).is_none());
        }
    }
}
