//! Writing a page checkpoint: the pages changed since the durable checkpoint, as they were at
//! one instant, then the page map that makes them current.
//!
//! Steps (see `buffer/capture.rs` for the instant, `map.rs` for the file):
//! 1. The caller has fenced the log for snapshot `S` and position `L`, and holds a read
//!    transaction at `S` (its resolver), so no version `S` sees is folded or freed meanwhile.
//! 2. The capture starts at an instant `I` after `S` (the trees' roots are read then). Plain
//!    values in leaves are commits at or below `S` (a fold of a later commit waits for the
//!    transaction at `S`), and each chain id is resolved at `S` below; so the images plus the
//!    resolved chains are the database at exactly `S`.
//! 3. Changed pages are taken (copied, or kept where eviction already wrote them since) and
//!    written, in page order, to the slot the durable checkpoint does not use; then the page
//!    file is synced, the map written, synced and renamed into place, and the new slots become
//!    the durable ones. A failure before the rename leaves the previous checkpoint current,
//!    its blocks untouched. A failed sync of the page file, or of the directory after the
//!    rename, stops all writes to the page file (`PageFile::stop`) and the caller stops the
//!    log: the kernel may have dropped pages, or either checkpoint may be the one a crash
//!    leaves, so no block either may need is touched again until the database is reopened.
//!
//! An epoch guard is held throughout, so a chain id read from an image is not reused before it
//! is resolved (`txn::chains` invariant 2).

use super::io;
use super::map::{self, ChainValue, PageMap, Placed, TableRoot};
use crate::btree::{chains_in, BTree, Resolve};
use crate::buffer::{Kind, Member, Page, Pool, Taken};
use crate::fs::Fs;
use crate::{Error, Result};
use std::collections::HashMap;
use std::path::Path;

/// The chain ids in each leaf image of the durable checkpoint, by page id. A page the next
/// checkpoint keeps still holds them, but what they resolve to may have changed (a commit
/// stamps its versions without latching their leaf): each checkpoint resolves them afresh.
pub(crate) type Chains = HashMap<u32, Vec<u64>>;

/// Groups a checkpoint's chain records by page.
pub(crate) fn chains_by_page(chains: &[ChainValue]) -> Chains {
    let mut by_page = Chains::new();
    for &(pid, id, _) in chains {
        by_page.entry(pid).or_default().push(id);
    }
    by_page
}

/// A page checkpoint to write.
pub(crate) struct Request<'a> {
    pub fs: &'a dyn Fs,
    pub dir: &'a Path,
    pub seq: u64,
    pub snapshot: u64,
    pub lsn: u64,
    pub pool: &'a Pool,
    /// Every table: id, name, tree.
    pub tables: &'a [(u32, String, &'a BTree)],
    /// Resolves chain ids as snapshot `S` sees them.
    pub resolver: &'a dyn Resolve,
}

/// What a page checkpoint wrote.
#[derive(Clone, Debug)]
pub(crate) struct PagesWritten {
    pub name: String,
    /// Pages in it.
    pub pages: u64,
    /// Pages written by it (the rest were unchanged, or already on disk since eviction).
    pub written: u64,
    /// Bytes written: page images and the map file.
    pub bytes: u64,
}

/// Writes page checkpoint `req.seq`; `chains` is the durable checkpoint's chain records, and
/// becomes the new one's. `at_instant` runs once the capture's instant has passed (the caller
/// lets table creations go on then).
pub(crate) fn write(req: &Request<'_>, chains: &mut Chains, at_instant: impl FnOnce()) -> Result<PagesWritten> {
    let _epoch = crossbeam_epoch::pin();
    let captured = req.pool.begin_capture(|| {
        req.tables.iter().map(|(id, name, tree)| (*id, name.clone(), tree.root_and_pages())).collect::<Vec<_>>()
    });
    at_instant();
    let (capture, roots) = captured?;
    let members = capture.pages();
    let mut placed: Vec<Placed> = Vec::with_capacity(members.len());
    let mut next_chains = Chains::new();
    let (mut buf, mut resolved) = (Vec::new(), Vec::new());
    let page = Page::boxed(req.pool.page_size());
    let (mut written, mut bytes) = (0u64, 0u64);
    for (pid, member) in members {
        match member {
            Member::Kept { kind, slot, crc } => {
                placed.push((pid, kind, slot, crc));
                if let Some(ids) = chains.get(&pid) {
                    next_chains.insert(pid, ids.clone());
                }
            }
            Member::Changed => {
                let (kind, slot, crc) = match capture.take(pid, &mut buf)? {
                    Taken::Copied { kind, seen } => {
                        let (slot, crc) = capture.write(pid, &buf, seen)?;
                        written += 1;
                        bytes += buf.len() as u64;
                        (kind, slot, crc)
                    }
                    Taken::OnDisk { kind, slot, crc } => (kind, slot, crc),
                };
                // An empty `buf`: an evicted image known to hold no chain ids, not read.
                if kind == Kind::Leaf as u8 && !buf.is_empty() {
                    page.write(0, &buf);
                    let ids = chains_in(&page);
                    if !ids.is_empty() {
                        next_chains.insert(pid, ids);
                    }
                }
                placed.push((pid, kind, slot, crc));
            }
        }
    }
    capture.sync()?;
    let map = PageMap {
        snapshot: req.snapshot,
        lsn: req.lsn,
        page_size: req.pool.page_size() as u32,
        chunk_pages: req.pool.chunk_pages(),
        tables: roots
            .into_iter()
            .map(|(id, name, (root, pages))| TableRoot { id, name, root, pages: pages as u64 })
            .collect(),
        pages: placed,
        chains: next_chains
            .iter()
            .flat_map(|(&pid, ids)| ids.iter().map(move |&id| (pid, id)))
            .map(|(pid, id)| {
                resolved.clear();
                (pid, id, req.resolver.resolve(id, &mut resolved).then(|| resolved.as_slice().into()))
            })
            .collect(),
    };
    let (name, tmp) = (super::file_name(req.seq), super::tmp_name(req.seq));
    bytes += map::write_tmp(req.fs, req.dir, &tmp, &map)?;
    req.fs.rename(&req.dir.join(&tmp), &req.dir.join(&name)).map_err(io(format!("renaming {tmp} to {name}")))?;
    // Renamed: a crash may now open this checkpoint, so it is the durable one from here on,
    // whatever the directory sync says.
    let slots: HashMap<u32, u8> = map.pages.iter().map(|&(pid, _, slot, _)| (pid, slot)).collect();
    capture.commit(&slots);
    *chains = next_chains;
    if let Err(source) = req.fs.sync_dir(req.dir) {
        // Which of the two checkpoints a crash leaves is unknown: neither's blocks may be
        // written any more (the caller stops the log too).
        req.pool.stop_writes();
        return Err(Error::Io {
            what: format!("syncing directory {} after installing {name}", req.dir.display()),
            source,
        });
    }
    Ok(PagesWritten { name, pages: map.pages.len() as u64, written, bytes })
}
