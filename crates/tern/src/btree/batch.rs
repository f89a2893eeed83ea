//! Sorted batches applied leaf by leaf: one descent per leaf the batch touches, not one per
//! key. Log replay applies its batches of writes this way ([`BTree::apply_sorted`]); the version
//! collector folds a commit's keys back this way ([`BTree::update_chains_sorted`]).
//!
//! Invariant: the effect is exactly that of the one-key call ([`BTree::upsert`] or
//! [`BTree::delete`]; [`BTree::update_chain`]) for each key in turn. A run of keys in one leaf
//! is handled under one exclusive latch of that leaf, while each key is below the leaf's upper
//! fence (the keys are sorted, so none is below its lower one) and needs no split; anything
//! else (a delete, a value for overflow pages, a key the tree refuses, a split) goes through
//! the one-key call.
//!
//! A collector's run may start without a descent, at the leaf its first key's write left it in
//! ([`LeafHint`]: page id, the version the page had after that write, and the key's slot,
//! which spares the leaf's search when it still holds the key). The hint is used only
//! if the page still has exactly that version and holds the key: every change, move, eviction
//! and free of a page bumps its version (`buffer::state`), so a page with the same version is
//! the same leaf with the same contents, and the exclusive latch taken from that read validates
//! it. A stale or wrong hint costs one optimistic read, then the descent.

use super::node::NodeRef;
use super::stored::{Applied, Change, Current, LeafHint};
use super::tree::{Abort, BTree, Room, Visit};
use crate::buffer::state;
use crate::Result;
use crossbeam_epoch::Guard;
use std::iter::Peekable;

impl BTree {
    /// Applies `writes`, sorted by key with each key at most once: `Some(value)` puts
    /// (replacing any value), `None` deletes.
    pub(crate) fn apply_sorted<'w>(
        &self,
        writes: &mut Peekable<impl Iterator<Item = (&'w [u8], Option<&'w [u8]>)>>,
    ) -> Result<()> {
        let guard = crossbeam_epoch::pin();
        while let Some(&(key, value)) = writes.peek() {
            let applied = match value {
                Some(value) if self.fast(key, value) => match self.put_run(writes, &guard) {
                    Ok(n) => n,
                    Err(Abort::Restart) => {
                        self.count_restart();
                        continue;
                    }
                    Err(Abort::Fail(e)) => return Err(e),
                },
                _ => 0,
            };
            if applied == 0 {
                // The first write needs the ordinary path (a split, say).
                match value {
                    Some(value) => self.upsert(key, value)?,
                    None => self.delete(key)?,
                };
                writes.next();
            }
        }
        Ok(())
    }

    /// Whether a put can go in a run: an inline value and a key the tree takes.
    fn fast(&self, key: &[u8], value: &[u8]) -> bool {
        key.len() + value.len() <= self.max_inline() && self.check_key(key).is_ok()
    }

    /// Puts the writes from the next one on into its leaf while they belong there and fit;
    /// returns how many it applied.
    fn put_run<'w>(
        &self,
        writes: &mut Peekable<impl Iterator<Item = (&'w [u8], Option<&'w [u8]>)>>,
        guard: &Guard,
    ) -> Result<usize, Abort> {
        let Some(&(first, _)) = writes.peek() else { return Ok(0) };
        let _gate = self.pool.enter_write();
        let (at, _parent) = self.descend_to_write(first, guard)?;
        let n = NodeRef::new(at.page());
        // Read optimistically; the exclusive latch validates it.
        let upper = n.upper_fence();
        let _x = at.version.into_exclusive()?;
        let (layout, pf) = (self.layout, self.prefetch_depth());
        let mut applied = 0;
        while let Some(&(key, Some(value))) = writes.peek() {
            if upper.as_deref().is_some_and(|upper| key >= upper) || !self.fast(key, value) {
                break;
            }
            let (slot, existed) = n.find(key, layout, pf);
            let overwrite = existed && value.len() <= n.value_ref(slot).len;
            if !overwrite && matches!(self.room(n, key.len(), value.len()), Room::Split) {
                break;
            }
            self.replace_slot(n, slot, existed, key, value, 0, guard);
            writes.next();
            applied += 1;
        }
        Ok(applied)
    }
}

impl BTree {
    /// The leaf `hint` names, read optimistically, and `key`'s slot in it, if its page still has
    /// the hint's version (so nothing changed, moved or freed it since the hint was taken), is
    /// a leaf whose fences take `key` and holds it; the caller's exclusive latch then validates
    /// the read, slot included. Hints are never trusted further: a page id reused since, by any
    /// tree, fails the version, fence or key check (the fences matter for hints that never
    /// named `key`'s leaf: the model test makes some up).
    pub(super) fn hinted_leaf(&self, hint: LeafHint, key: &[u8]) -> Option<(Visit<'_>, usize)> {
        let version = self.pool.optimistic(hint.pid).ok()?;
        if state::version(version.seen()) != hint.version {
            return None;
        }
        let n = NodeRef::new(version.page());
        // The search strips the leaf's key prefix, so it answers only for keys within the
        // leaf's fences: another leaf (a made-up or foreign hint) could otherwise "find" a key
        // whose suffix matches one of its own.
        if !n.is_leaf() || !n.within_fences(key) {
            return None;
        }
        let at = Visit { pid: hint.pid, version };
        // Unchanged since the write, the page holds the key where the write left it: checked,
        // not trusted (a made-up hint may match a version by chance).
        let slot = usize::from(hint.slot);
        if slot < n.count() && n.key_equals(slot, key) {
            return Some((at, slot));
        }
        let (slot, existed) = n.find(key, self.layout, self.prefetch_depth());
        existed.then_some((at, slot))
    }

    /// [`BTree::update_chain`] (with no room reserved) of every item of `items`, sorted by
    /// `key` with each key at most once: `f` sees each item's slot under its leaf's exclusive
    /// latch and says what to make of it; then `done` gets the item and the outcome, once the
    /// latch is released (so `done` may take other latches). A run of items in one leaf shares
    /// one descent and one latch. The epoch is pinned per run, not across the whole call; `done`
    /// runs unpinned after a run of several items (it pins as it needs, and a pin of its own
    /// per item lets the epoch advance as the pass goes), still pinned after a
    /// run of one (one pin per item, as the one-key call), and unpinned after an item that went
    /// through the one-key call. `done` must pin for itself whatever it needs pinned.
    pub(crate) fn update_chains_sorted<'v, T, R>(
        &self,
        items: impl IntoIterator<Item = T>,
        key: impl Fn(&T) -> &[u8],
        hint: impl Fn(&T) -> Option<LeafHint>,
        mut f: impl FnMut(&T, Current<'_>) -> (Change<'v>, R),
        mut done: impl FnMut(T, Result<(Applied, R)>),
    ) {
        let mut items = items.into_iter().peekable();
        let mut outcomes = Vec::new();
        while let Some(first) = items.peek() {
            let guard = crossbeam_epoch::pin();
            let ran = if self.check_key(key(first)).is_ok() {
                let hint = hint(first);
                self.chain_run(&mut items, &key, hint, &mut f, &mut outcomes, &guard)
            } else {
                Ok(0)
            };
            // Unpinned after a run of several, so that `done`'s own pins count towards the
            // epoch's collection: one pin per run instead of per item would let garbage pile up.
            let pinned = (outcomes.len() <= 1).then_some(guard);
            for (item, outcome) in outcomes.drain(..) {
                done(item, Ok(outcome));
            }
            drop(pinned);
            match ran {
                Ok(0) | Err(Abort::Fail(_)) => {
                    // The first item needs the one-key path (a split, say; or an error it
                    // reports).
                    let item = items.next().expect("peeked");
                    let outcome = self.update_chain(key(&item), 0, |current| f(&item, current));
                    done(item, outcome);
                }
                Ok(_) => {}
                Err(Abort::Restart) => self.count_restart(),
            }
        }
    }

    /// Applies `f` to the items from the next one on while they fall in its leaf and need no
    /// split, pushing each with its outcome to `outcomes`; returns how many. The first item's
    /// leaf is the one `hint` names if that still holds the key as its hint left it, else the
    /// one a descent finds.
    fn chain_run<'v, T, R>(
        &self,
        items: &mut Peekable<impl Iterator<Item = T>>,
        key: &impl Fn(&T) -> &[u8],
        hint: Option<LeafHint>,
        f: &mut impl FnMut(&T, Current<'_>) -> (Change<'v>, R),
        outcomes: &mut Vec<(T, (Applied, R))>,
        guard: &Guard,
    ) -> Result<usize, Abort> {
        let Some(first) = items.peek() else { return Ok(0) };
        let _gate = self.pool.enter_write();
        let (at, mut found) = match hint.and_then(|hint| self.hinted_leaf(hint, key(first))) {
            Some((at, slot)) => (at, Some((slot, true))),
            None => (self.descend_to_write(key(first), guard)?.0, None),
        };
        let n = NodeRef::new(at.page());
        let _x = at.version.into_exclusive()?;
        let reserve = self.chain_room(0);
        let (layout, pf) = (self.layout, self.prefetch_depth());
        let start = outcomes.len();
        while let Some(item) = items.peek() {
            let k = key(item);
            // The first item is in the leaf it led to (and the caller checked its key).
            let later = outcomes.len() > start;
            // Sorted input is what keeps a later key above the leaf's lower fence.
            debug_assert!(
                !later || outcomes.last().is_some_and(|(prev, _)| key(prev) < k),
                "items sorted by key, once each"
            );
            if later && (!n.below_upper_fence(k) || self.check_key(k).is_err()) {
                break;
            }
            if matches!(self.room(n, k.len(), reserve), Room::Split) {
                break;
            }
            // The hinted leaf's search found the first item's slot already.
            let (slot, existed) = found.take().unwrap_or_else(|| n.find(k, layout, pf));
            let mut call = Some(|current: Current<'_>| f(item, current));
            let outcome = match self.change_slot(n, slot, existed, k, reserve, &mut call, guard) {
                Ok(outcome) => outcome,
                // Nothing was changed for this item (its closure was not called): the items
                // before it are done, it goes through the one-key path.
                Err(_) if later => break,
                Err(abort) => return Err(abort),
            };
            outcomes.push((items.next().expect("peeked"), outcome));
        }
        let applied = outcomes.len() - start;
        let underfull = applied > 0 && self.underfull(n);
        drop(_x);
        if underfull {
            let (last, _) = outcomes.last().expect("applied");
            self.merge_upwards(key(last), guard);
        }
        Ok(applied)
    }
}
