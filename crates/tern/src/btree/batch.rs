//! Sorted batches of writes applied leaf by leaf: one descent per leaf the batch touches,
//! not one per write (log replay applies its batches this way).
//!
//! Invariant: the effect is exactly that of [`BTree::upsert`] or [`BTree::delete`] of each
//! write in turn. A run of puts into one leaf is applied under one exclusive latch of that
//! leaf, while each key is below the leaf's upper fence (the keys are sorted, so none is below
//! its lower one) and fits without a split; anything else (a delete, a value for overflow
//! pages, a key the tree refuses, a split) goes through the ordinary call.

use super::node::NodeRef;
use super::tree::{Abort, BTree, Room};
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
