//! What a leaf slot stores for the transaction layer: a plain value, or a version chain.
//!
//! A slot flagged `FLAG_CHAIN` holds the 8-byte id of a version chain that the transaction
//! layer owns (`txn::chains`: an id, not an address, so that a page can be written to disk as it
//! is). The tree never interprets it: readers hand it to a [`Resolve`] after validating the leaf
//! they read it from (so the id was in the tree while their epoch guard was pinned, and its
//! chain is still there); writers change a slot between plain value, chain and nothing with
//! `BTree::update_chain`, under the leaf's exclusive latch.

use super::cursor::spare;
use super::node::{Entry, NodeRef, ValueRef, FLAG_CHAIN, FLAG_OVERFLOW};
use super::overflow;
use super::tree::{Abort, BTree, Room};
use crate::Result;
use crossbeam_epoch::Guard;
use std::borrow::Cow;
use std::collections::HashMap;

/// Turns a version chain into the value a reader sees: how a [`Cursor`](super::Cursor) or
/// [`Range`](super::Range) over a transactional table reads it. Implemented by tern's
/// transaction layer; trees used through the plain `BTree` API never store chains and use
/// [`Plain`].
pub trait Resolve {
    /// Appends the value visible in chain `chain` to `out` (which may already hold bytes, a
    /// cursor's key); false if the reader sees nothing (no version visible to it, or a deletion).
    fn resolve(&self, chain: u64, out: &mut Vec<u8>) -> bool;
}

/// The resolver of trees used through the plain `BTree` API, which never store chains.
#[derive(Clone, Copy, Debug, Default)]
pub struct Plain;

impl Resolve for Plain {
    fn resolve(&self, _chain: u64, _out: &mut Vec<u8>) -> bool {
        debug_assert!(false, "a version chain in a tree used without transactions");
        false
    }
}

/// A slot's content as [`BTree::update_chain`] shows it to its closure.
#[derive(Debug)]
pub(crate) enum Current<'a> {
    /// No slot for the key.
    Absent,
    /// A plain value (visible to every reader).
    Plain(&'a [u8]),
    /// A version chain's id.
    Chain(u64),
}

/// What [`BTree::update_chain`] makes of the slot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change<'a> {
    /// Leave it as it is.
    Keep,
    /// Store this chain id (replacing any plain value or other id).
    Chain(u64),
    /// Store this plain value; applied only if it fits in the leaf (else the slot is kept:
    /// [`Applied::NoRoom`] or [`Applied::TooLarge`]), or, in a slot holding a chain, if it is
    /// larger than a leaf value can be: then it goes to overflow pages and the slot keeps
    /// their reference. Borrowed when the bytes outlive the call (a version's value being
    /// folded back), so no copy is made before the leaf's.
    Plain(Cow<'a, [u8]>),
    /// Remove the slot.
    Remove,
}

/// What a slot holds, as [`BTree::get_stored`] copied it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    /// A plain value.
    Plain,
    /// A chain id (8 bytes, little-endian).
    Chain,
}

/// Whether [`BTree::update_chain`] applied the closure's change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    Yes,
    /// A `Change::Plain` that does not fit in the leaf now (it may after a split or a merge):
    /// the slot is as it was.
    NoRoom,
    /// A `Change::Plain` larger than a leaf value can ever be, for a slot that holds no chain
    /// (or overflow pages could not be allocated for it: an I/O error): the slot is as it was.
    TooLarge,
}

/// Where [`BTree::update_chain_hinted`] left a key: its leaf's page, the version the page had
/// once the change was released, and the key's slot. A later call for the same key may start
/// from that leaf instead of descending ([`BTree::update_chains_sorted`]), if the page still
/// has that version (nothing changed it, moved it or freed it since) and holds the key; and at
/// that slot without searching the leaf, if the slot holds the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeafHint {
    pub pid: u32,
    pub version: u64,
    /// `u16::MAX`: none.
    pub slot: u16,
}

fn chain_bytes(chain: u64) -> [u8; 8] {
    chain.to_le_bytes()
}

impl BTree {
    /// Copies the value `key` has for a reader that sees chains through `resolver` into `out`
    /// (cleared first); false if the reader sees none.
    pub(crate) fn get_resolved(&self, key: &[u8], resolver: &impl Resolve, out: &mut Vec<u8>) -> Result<bool> {
        let guard = crossbeam_epoch::pin();
        match self.get_stored(key, out, &guard)? {
            Some(Stored::Chain) => {
                // The leaf validated, so the id was live under `guard`.
                let chain = u64::from_le_bytes(out[..8].try_into().expect("8 bytes"));
                out.clear();
                Ok(resolver.resolve(chain, out))
            }
            Some(Stored::Plain) => Ok(true),
            None => Ok(false),
        }
    }

    /// Calls `f` once, under the exclusive latch of `key`'s leaf, with the slot's content, and
    /// applies the change it returns. Also returns `f`'s second result.
    ///
    /// `f` runs only once the leaf has room for a chain record that keeps `reserve` bytes (the
    /// size of the value the chain will later fold back into; 0 if unknown), so a
    /// `Change::Chain` is always applied; a `Change::Plain` too large to fit is not
    /// (`Applied::NoRoom`). Changes reuse the slot's record in place where it is large enough,
    /// so a key going from value to chain and back does not fragment the leaf. `f` must not
    /// block: it runs under a latch.
    pub(crate) fn update_chain<'v, R>(
        &self,
        key: &[u8],
        reserve: usize,
        f: impl FnOnce(Current<'_>) -> (Change<'v>, R),
    ) -> Result<(Applied, R)> {
        self.update_chain_hinted(key, reserve, f).map(|(applied, r, _)| (applied, r))
    }

    /// [`BTree::update_chain`], also saying which leaf it changed ([`LeafHint`]).
    pub(crate) fn update_chain_hinted<'v, R>(
        &self,
        key: &[u8],
        reserve: usize,
        f: impl FnOnce(Current<'_>) -> (Change<'v>, R),
    ) -> Result<(Applied, R, LeafHint)> {
        self.check_key(key)?;
        let _gate = self.pool.enter_write();
        let reserve = self.chain_room(reserve);
        let guard = crossbeam_epoch::pin();
        let mut f = Some(f);
        loop {
            match self.try_update_chain(key, reserve, &mut f, &guard) {
                Ok((applied, r, underfull, hint)) => {
                    if underfull {
                        self.merge_upwards(key, &guard);
                    }
                    return Ok((applied, r, hint));
                }
                Err(Abort::Restart) => self.count_restart(),
                Err(Abort::Fail(e)) => return Err(e),
            }
        }
    }

    /// The record size of a chain that keeps room for a `reserve`-byte value: values too large
    /// to sit in a leaf stay in the chain, so no room is kept for them.
    pub(super) fn chain_room(&self, reserve: usize) -> usize {
        if reserve > self.max_inline() {
            8
        } else {
            reserve.max(8)
        }
    }

    fn try_update_chain<'v, R, F: FnOnce(Current<'_>) -> (Change<'v>, R)>(
        &self,
        key: &[u8],
        reserve: usize,
        f: &mut Option<F>,
        guard: &Guard,
    ) -> Result<(Applied, R, bool, LeafHint), Abort> {
        let (at, parent) = self.descend_to_write(key, guard)?;
        let n = NodeRef::new(at.page());
        let (slot, existed) = n.find(key, self.layout, self.prefetch_depth());
        if let Room::Split = self.room(n, key.len(), reserve) {
            self.make_room(parent, at, Room::Split, guard)?;
            return Err(Abort::Restart);
        }
        let pid = at.pid;
        let x = at.version.into_exclusive()?;
        let (applied, r) = self.change_slot(n, slot, existed, key, reserve, f, guard)?;
        let slot = u16::try_from(slot).unwrap_or(u16::MAX);
        Ok((applied, r, self.underfull(n), LeafHint { pid, version: x.version_after_release(), slot }))
    }

    /// Shows `f` the content of `slot` (`existed`: it holds `key`) of leaf `n`, which the
    /// caller holds exclusively with room for a chain record of `reserve` bytes, and applies the
    /// change `f` returns ([`BTree::update_chain`]). `f` is taken only once nothing can fail
    /// any more (a restart before that leaves it for the retry).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn change_slot<'v, R, F: FnOnce(Current<'_>) -> (Change<'v>, R)>(
        &self,
        n: NodeRef<'_>,
        slot: usize,
        existed: bool,
        key: &[u8],
        reserve: usize,
        f: &mut Option<F>,
        guard: &Guard,
    ) -> Result<(Applied, R), Abort> {
        let v = if existed { n.value_ref(slot) } else { ValueRef { off: 0, len: 0, flags: 0 } };
        // A plain value is shown from one of the thread's spare buffers (no allocation per
        // write), handed back whatever happens next.
        let mut plain = Spare(Vec::new());
        let current = if !existed {
            Current::Absent
        } else if v.flags & FLAG_CHAIN != 0 {
            Current::Chain(n.chain_id(slot))
        } else {
            plain.0 = spare::take();
            self.read_value(n, slot, &mut plain.0)?;
            Current::Plain(&plain.0)
        };
        let (change, r) = (f.take().expect("called once: restarts happen before"))(current);
        let applied = match change {
            Change::Keep => Applied::Yes,
            Change::Chain(chain) if existed && v.flags & FLAG_OVERFLOW == 0 && v.len >= 8 => {
                // A chain, or a plain value with room for the address: in place, keeping room.
                n.set_value_in_place(slot, &chain_bytes(chain), v.len, FLAG_CHAIN);
                Applied::Yes
            }
            Change::Chain(chain) => {
                let mut record = vec![0; reserve];
                record[..8].copy_from_slice(&chain_bytes(chain));
                self.replace_slot(n, slot, existed, key, &record, FLAG_CHAIN, guard);
                Applied::Yes
            }
            Change::Plain(value) if value.len() > self.max_inline() => {
                // Too large for a leaf. A chain folding back (its record keeps at least the 8
                // bytes of its id) moves the value to overflow pages and keeps their reference
                // in its place, as `put` stores a large value; anything else is refused.
                if existed && v.flags & FLAG_CHAIN != 0 && v.len >= 8 {
                    match overflow::write(self, &value, |_| {}) {
                        Ok(first) => {
                            n.set_value_in_place(slot, &overflow::reference(first, value.len()), 8, FLAG_OVERFLOW);
                            Applied::Yes
                        }
                        // No page for it (an I/O error): the value stays in its version.
                        Err(_) => Applied::TooLarge,
                    }
                } else {
                    Applied::TooLarge
                }
            }
            Change::Plain(value) if existed && v.flags & FLAG_CHAIN != 0 && value.len() <= v.len => {
                n.set_value_in_place(slot, &value, value.len(), 0);
                Applied::Yes
            }
            Change::Plain(value) => {
                if matches!(self.room(n, key.len(), value.len()), Room::Split) {
                    Applied::NoRoom
                } else {
                    self.replace_slot(n, slot, existed, key, &value, 0, guard);
                    Applied::Yes
                }
            }
            Change::Remove => {
                if existed {
                    self.free_value(n, slot, guard);
                    n.remove_at(slot, self.layout);
                }
                Applied::Yes
            }
        };
        Ok((applied, r))
    }

    /// Puts `key` → `value` (with `flags`) at `slot`, replacing the slot if `existed`. The
    /// caller holds the leaf exclusively and checked that the entry fits after a rebuild.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn replace_slot(
        &self,
        n: NodeRef<'_>,
        slot: usize,
        existed: bool,
        key: &[u8],
        value: &[u8],
        flags: u16,
        guard: &Guard,
    ) {
        if existed {
            self.free_value(n, slot, guard);
            // A value no longer than the one it replaces overwrites it where it is.
            if value.len() <= n.value_ref(slot).len {
                n.set_value_in_place(slot, value, value.len(), flags);
                return;
            }
        }
        if n.fits_in_place(key.len(), value.len(), self.layout) {
            if existed {
                n.remove_at(slot, self.layout);
            }
            n.insert_at(slot, key, value, value.len() as u32 | u32::from(flags) << 16, self.layout);
            return;
        }
        let mut entries = Entry::read_all(n);
        let entry = Entry { key: key.to_vec(), value: value.to_vec(), flags, child: 0 };
        if existed {
            entries[slot] = entry;
        } else {
            entries.insert(slot, entry);
        }
        self.rebuild(n, &entries);
    }
}

impl BTree {
    /// Folds chains restored from a page checkpoint that leaf `pid` holds back into the leaf,
    /// as the collector folds a chain down to one version: `chains` maps a chain id to the
    /// value every snapshot sees (`None`: the key is deleted). For the open, before the log is
    /// replayed (nothing has moved a chain since the checkpoint wrote the leaf) and before any
    /// reader. `None` if `pid` is not a leaf of this tree (the path to its first such key, in
    /// inner nodes only, does not lead to it); else the ids folded. A chain whose value no
    /// longer fits, and every chain after an I/O error, is left to be restored as a version.
    /// The leaf is marked changed, so the next checkpoint writes it.
    pub(crate) fn fold_restored(&self, pid: u32, chains: &HashMap<u64, Option<&[u8]>>) -> Option<Vec<u64>> {
        let held = |n: NodeRef<'_>, i: usize| chains.contains_key(&n.chain_id(i));
        let keys: Vec<(usize, Vec<u8>)> = {
            let page = self.pool.shared(pid).ok()??;
            let n = NodeRef::new(page.page());
            chain_slots(n).filter(|&i| held(n, i)).map(|i| (i, n.key(i))).collect()
        };
        let (_, first) = keys.first()?;
        if self.leaf_of(first).ok()? != pid {
            return None;
        }
        let _gate = self.pool.enter_write();
        let guard = crossbeam_epoch::pin();
        let mut folded = Vec::new();
        let Ok(Some(page)) = self.pool.exclusive(pid) else { return Some(folded) };
        let n = NodeRef::new(page.page());
        // From the last slot down: neither a removed slot nor a rebuilt leaf moves the slots
        // still to do.
        for (slot, key) in keys.iter().rev() {
            let slot = *slot;
            let still = slot < n.count() && n.value_ref(slot).flags & FLAG_CHAIN != 0 && held(n, slot);
            if !still || n.key(slot) != *key {
                continue;
            }
            let id = n.chain_id(slot);
            let change = match chains[&id] {
                Some(value) => Change::Plain(Cow::Borrowed(value)),
                None => Change::Remove,
            };
            let mut f = Some(|_: Current<'_>| (change, ()));
            match self.change_slot(n, slot, true, key, 0, &mut f, &guard) {
                Ok((Applied::Yes, ())) => folded.push(id),
                Ok(_) | Err(Abort::Restart) => {}
                Err(Abort::Fail(_)) => break,
            }
        }
        // A leaf that deletions folded in left underfull is not merged here: the pages stay
        // those of the checkpoint's map (`tern check` recovers read-only and checks every page
        // the map lists); the next write to it merges it, as any underfull leaf.
        Some(folded)
    }

    /// The page id of the leaf whose range holds `key`, found in the inner nodes (the leaf
    /// itself is not read).
    fn leaf_of(&self, key: &[u8]) -> Result<u32> {
        let guard = crossbeam_epoch::pin();
        loop {
            let found = self.root(&guard).and_then(|root| {
                let n = NodeRef::new(root.page());
                if n.is_leaf() {
                    root.version.validate()?;
                    return Ok(root.pid);
                }
                let path = self.descend(key, 1, false, &guard)?;
                let n = NodeRef::new(path.at.page());
                let child = n.child(n.search(key, true, self.layout, 0));
                path.at.version.validate()?;
                Ok(child)
            });
            match found {
                Ok(pid) => return Ok(pid),
                Err(Abort::Restart) => self.count_restart(),
                Err(Abort::Fail(e)) => return Err(e),
            }
        }
    }
}

/// The chain ids held by the slots of the node in `page` (none unless it is a leaf): a
/// checkpoint writes leaf images as they are, and what each of these ids resolves to beside
/// them.
pub(crate) fn chains_in(page: &crate::buffer::Page) -> Vec<u64> {
    let n = NodeRef::new(page);
    chain_slots(n).map(|i| n.chain_id(i)).collect()
}

/// Whether the node in `page` is a leaf holding a version-chain id (the pool's image probe,
/// `Pool::set_image_probe`). `page` may be changing under a write-back: garbage gives a
/// garbage answer, never a panic, and the caller's validation then discards it.
pub(crate) fn holds_chains(page: &crate::buffer::Page) -> bool {
    chain_slots(NodeRef::new(page)).next().is_some()
}

/// The slots of `n` that hold a chain id (none unless it is a leaf).
fn chain_slots(n: NodeRef<'_>) -> impl Iterator<Item = usize> + '_ {
    let count = if n.is_leaf() { n.count() } else { 0 };
    (0..count).filter(move |&i| n.value_ref(i).flags & FLAG_CHAIN != 0)
}

/// A buffer from the thread's spare ones, handed back when dropped.
struct Spare(Vec<u8>);

impl Drop for Spare {
    fn drop(&mut self) {
        spare::give(std::mem::take(&mut self.0));
    }
}
