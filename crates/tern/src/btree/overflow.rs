//! Values too large to live in a leaf, stored in chains of overflow pages.
//!
//! A chain is written completely before its first page id is stored in a leaf, and never
//! changed afterwards; replacing or deleting the value frees the chain's pages. A reader that
//! found the reference in a leaf reads each page optimistically and validates it (a page freed
//! and reused meanwhile fails its validation, or the leaf's), faulting evicted pages in.
//! Each page starts with the next page's id (u32, `NO_PAGE` at the end) and the number of value
//! bytes it holds (u32); the bytes follow.

use super::tree::{Abort, BTree};
use crate::buffer::{Kind, Miss, Pool, NO_PAGE};
use crate::Result;

const NEXT: usize = 0;
const LEN: usize = 4;
const DATA: usize = 8;

/// The 8 bytes a leaf stores for a chain: its first page id and the value's length.
pub(crate) fn reference(first: u32, len: usize) -> Vec<u8> {
    let mut r = first.to_le_bytes().to_vec();
    r.extend_from_slice(&(len as u32).to_le_bytes());
    r
}

/// The first page id and the value's length from a [`reference`].
pub(crate) fn parse_reference(r: &[u8]) -> (u32, usize) {
    let word = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().expect("4 bytes"));
    (word(0), word(4) as usize)
}

/// Writes `value` into a new chain of `tree`'s; returns its first page id. `finished` is
/// told each page of the chain once the whole chain is written (and unlatched). On an error
/// the pages written so far are freed, and `finished` is told none.
pub(crate) fn write(tree: &BTree, value: &[u8], mut finished: impl FnMut(u32)) -> Result<u32> {
    let per_page = tree.pool.page_size() - DATA;
    let mut next = NO_PAGE;
    let mut written = 0;
    let mut pages = Vec::with_capacity(value.len().div_ceil(per_page));
    // Write back to front, so each page can name its successor.
    for chunk in value.chunks(per_page).rev() {
        let (pid, page) = match tree.alloc(Kind::Overflow) {
            Ok(page) => page,
            Err(e) => {
                if next != NO_PAGE {
                    free(tree, next, written);
                }
                return Err(e);
            }
        };
        page.page().set_u32(NEXT, next);
        page.page().set_u32(LEN, chunk.len() as u32);
        page.page().write(DATA, chunk);
        drop(page);
        pages.push(pid);
        next = pid;
        written += chunk.len();
    }
    pages.into_iter().for_each(&mut finished);
    Ok(next)
}

/// Appends the `len` bytes of the chain starting at `first` to `out`. A chain that ends early
/// or names a missing page (a reference read from a leaf that was changing) is a restart.
pub(crate) fn read(pool: &Pool, first: u32, len: usize, out: &mut Vec<u8>) -> std::result::Result<(), Abort> {
    let per_page = pool.page_size() - DATA;
    let mut pid = first;
    let mut left = len;
    // At most as many pages as the length needs: garbage cannot make this loop forever.
    for _ in 0..len.div_ceil(per_page) {
        let page = loop {
            match pool.optimistic(pid) {
                Ok(page) => break page,
                Err(Miss::Evicted) => pool.fault_in(pid)?,
                Err(Miss::Restart) => return Err(Abort::Restart),
            }
        };
        let start = out.len();
        let here = (page.page().u32_at(LEN) as usize).min(left);
        page.page().read_into(DATA, here, out);
        let next = page.page().u32_at(NEXT);
        if page.validate().is_err() {
            out.truncate(start);
            return Err(Abort::Restart);
        }
        left -= here;
        pid = next;
    }
    if left == 0 {
        Ok(())
    } else {
        Err(Abort::Restart)
    }
}

/// Frees the chain of `len` bytes starting at `first`. Best effort: a page that cannot be
/// read (an I/O error) ends the walk, leaving the rest of the chain allocated (counted in
/// `TreeStats::leaked_pages`).
pub(crate) fn free(tree: &BTree, first: u32, len: usize) {
    let per_page = tree.pool.page_size() - DATA;
    let mut pid = first;
    let pages = len.div_ceil(per_page).max(1);
    for done in 0..pages {
        match tree.pool.exclusive(pid) {
            Ok(Some(page)) => {
                let next = page.page().u32_at(NEXT);
                tree.free_page(&page);
                pid = next;
            }
            Ok(None) => return,
            Err(_) => {
                tree.note_leaked(pages - done);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::TreeConfig;

    #[test]
    fn chains_roundtrip_and_free() {
        let tree = BTree::new(TreeConfig { page_size: 4096, ..TreeConfig::DEFAULT }).unwrap();
        let base = tree.stats().pages;
        for len in [1usize, 4087, 4088, 4089, 100_000] {
            let value: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let first = write(&tree, &value, |_| {}).unwrap();
            assert_eq!(tree.stats().pages, base + len.div_ceil(4088));
            let mut out = Vec::new();
            read(&tree.pool, first, len, &mut out).unwrap();
            assert_eq!(out, value);
            out.clear();
            assert!(
                matches!(read(&tree.pool, first, len + 1, &mut out), Err(Abort::Restart)),
                "a short chain is detected"
            );
            free(&tree, first, len);
            assert_eq!(tree.stats().pages, base);
            assert!(tree.pool.optimistic(first).is_err(), "freed");
        }
    }
}
