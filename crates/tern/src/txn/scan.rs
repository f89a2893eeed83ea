//! Scans as a transaction sees them: [`TxnCursor`] (borrowed entries, no allocation per entry)
//! and [`TxnRange`] (an iterator of owned entries, for convenience).
//!
//! Both read through the tree's cursor (`btree/cursor.rs`) with the transaction's
//! [`View`] as resolver, so they see exactly what [`Txn::get`](super::Txn::get) sees: the
//! snapshot, plus the transaction's own writes, minus deletions.

use super::version::View;
use crate::btree::{Bounds, Cursor, Range};
use crate::{Error, Result};
use std::ops::RangeBounds;

/// A cursor over one table's entries in a key range, as a transaction sees them
/// ([`Txn::cursor`](super::Txn::cursor), [`Txn::cursor_in`](super::Txn::cursor_in)).
///
/// Every move returns the entry it lands on, borrowed from the cursor until its next move (the
/// cursor copies each entry it stops on into two buffers it reuses: a scan allocates nothing
/// per entry), or `None` when no entry of the range lies that way; the cursor is then
/// unpositioned and [`next`](Self::next) and [`prev`](Self::prev) return `None` until a
/// positioning move ([`first`](Self::first), [`last`](Self::last), [`seek`](Self::seek),
/// [`seek_for_prev`](Self::seek_for_prev)). On a cursor that was never positioned, `next`
/// starts at the first entry and `prev` at the last.
///
/// Moves never block writers (no latch is held between calls) and never see their
/// uncommitted writes. An error (`Error::Io` or `Error::Corruption`: a page of a database
/// larger than its cache that could not be read back) is returned by the move that met it, and
/// leaves the cursor unpositioned.
///
/// ```
/// use tern::{Db, Error, Options};
/// let db = Db::open_temporary(Options::default())?;
/// let mut t = db.begin()?;
/// for (k, v) in [(&b"apple"[..], &b"red"[..]), (b"banana", b"yellow"), (b"cherry", b"dark red")] {
///     t.put(k, v)?;
/// }
/// t.commit()?;
///
/// let t = db.begin_read()?;
/// let mut c = t.cursor(&b"b"[..]..)?;
/// let mut sizes = 0;
/// while let Some((key, value)) = c.next()? {
///     sizes += key.len() + value.len(); // borrowed: nothing was allocated for this entry
/// }
/// assert_eq!(sizes, 6 + 6 + 6 + 8);
/// assert_eq!(c.seek_for_prev(b"c")?, Some((&b"banana"[..], &b"yellow"[..])));
/// assert_eq!(c.prev()?, None); // "apple" lies below the cursor's range
/// # Ok::<(), Error>(())
/// ```
pub struct TxnCursor<'t> {
    inner: Cursor<'t, View<'t>>,
    bounds: Bounds,
    state: State,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Never positioned: `next` means `first`, `prev` means `last`.
    Fresh,
    On,
    Off,
}

/// An entry a cursor stands on: key and value, borrowed from the cursor until it moves.
pub type Entry<'c> = (&'c [u8], &'c [u8]);

impl<'t> TxnCursor<'t> {
    pub(super) fn new<'k>(inner: Cursor<'t, View<'t>>, range: impl RangeBounds<&'k [u8]>) -> TxnCursor<'t> {
        TxnCursor { inner, bounds: Bounds::of(range), state: State::Fresh }
    }

    /// Moves to the first entry of the range.
    pub fn first(&mut self) -> Result<Option<Entry<'_>>> {
        let moved = self.inner.seek_start(&self.bounds);
        self.land(moved, true)
    }

    /// Moves to the last entry of the range.
    pub fn last(&mut self) -> Result<Option<Entry<'_>>> {
        let moved = self.inner.seek_end(&self.bounds);
        self.land(moved, false)
    }

    /// Moves to the first entry of the range with a key `>= key`.
    pub fn seek(&mut self, key: &[u8]) -> Result<Option<Entry<'_>>> {
        if !self.bounds.admits_start(key) {
            return self.first();
        }
        let moved = self.inner.seek(key);
        self.land(moved, true)
    }

    /// Moves to the last entry of the range with a key `<= key`.
    pub fn seek_for_prev(&mut self, key: &[u8]) -> Result<Option<Entry<'_>>> {
        if !self.bounds.admits_end(key) {
            return self.last();
        }
        let moved = self.inner.seek_for_prev(key);
        self.land(moved, false)
    }

    /// Moves to the next entry (the first, on a cursor never positioned).
    #[allow(clippy::should_implement_trait)] // a lending move: the entry borrows the cursor
    pub fn next(&mut self) -> Result<Option<Entry<'_>>> {
        match self.state {
            State::Fresh => self.first(),
            State::Off => Ok(None),
            State::On => {
                let moved = self.inner.next_entry();
                self.land(moved, true)
            }
        }
    }

    /// Moves to the previous entry (the last, on a cursor never positioned).
    pub fn prev(&mut self) -> Result<Option<Entry<'_>>> {
        match self.state {
            State::Fresh => self.last(),
            State::Off => Ok(None),
            State::On => {
                let moved = self.inner.prev_entry();
                self.land(moved, false)
            }
        }
    }

    /// The entry the cursor stands on, if it is positioned.
    pub fn entry(&self) -> Option<Entry<'_>> {
        if self.state != State::On {
            return None;
        }
        self.inner.entry()
    }

    /// The current key, if positioned.
    pub fn key(&self) -> Option<&[u8]> {
        self.entry().map(|(k, _)| k)
    }

    /// The current value, if positioned.
    pub fn value(&self) -> Option<&[u8]> {
        self.entry().map(|(_, v)| v)
    }

    /// After a move of the tree's cursor: on its entry if the move found one inside the range
    /// (`forward`: the move went up, so only the end bound can have been passed).
    fn land(&mut self, moved: bool, forward: bool) -> Result<Option<Entry<'_>>> {
        self.state = State::Off;
        if !moved {
            return match self.inner.take_error() {
                Some(e) => Err(e),
                None => Ok(None),
            };
        }
        // A move that returned true stands on an entry.
        let Some((key, value)) = self.inner.entry() else { return Ok(None) };
        let inside = if forward { self.bounds.admits_end(key) } else { self.bounds.admits_start(key) };
        self.state = if inside { State::On } else { State::Off };
        Ok(inside.then_some((key, value)))
    }
}

/// The entries of a key range as a transaction sees them, from either end ([`Txn::range`]),
/// each as owned vectors (two allocations per entry; [`TxnCursor`] allocates none).
///
/// [`Txn::range`]: super::Txn::range
pub struct TxnRange<'t> {
    inner: Range<'t, View<'t>>,
}

impl<'t> TxnRange<'t> {
    pub(super) fn new(inner: Range<'t, View<'t>>) -> TxnRange<'t> {
        TxnRange { inner }
    }

    /// The error that ended this iteration early, if one did: a page that could not be read
    /// (`Error::Io`, `Error::Corruption`) stops the iteration as if the range had ended. Check
    /// it after iterating a database whose pages can be evicted.
    pub fn error(&self) -> Option<&Error> {
        self.inner.error()
    }

    /// Takes the error that ended this iteration early (see [`error`](Self::error)).
    pub fn take_error(&mut self) -> Option<Error> {
        self.inner.take_error()
    }
}

impl Iterator for TxnRange<'_> {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next()
    }
}

impl DoubleEndedIterator for TxnRange<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.inner.next_back()
    }
}
