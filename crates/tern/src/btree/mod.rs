//! The B+tree: tern's ordered index of byte-string keys and values.
//!
//! ```
//! use tern::btree::{BTree, TreeConfig};
//! let tree = BTree::new(TreeConfig::default()).unwrap();
//! tree.insert(b"apple", b"red").unwrap();
//! tree.upsert(b"banana", b"yellow").unwrap();
//! assert_eq!(tree.get(b"apple").unwrap().as_deref(), Some(&b"red"[..]));
//! let fruits: Vec<_> = tree.range(&b"a"[..]..&b"c"[..]).map(|(k, _)| k).collect();
//! assert_eq!(fruits, [b"apple".to_vec(), b"banana".to_vec()]);
//! ```
//!
//! # Structure
//! * Nodes are fixed-size slotted pages (`node.rs`), referred to by 32-bit page id; pages live
//!   in a buffer pool (`crate::buffer`), which may evict them to its page file. The tree fixes
//!   pages through the pool's guards: optimistic reads, shared and exclusive latches; an
//!   evicted page is faulted in once the parent it was found in validates.
//! * Each slot carries the key's first 8 bytes (after the node prefix) as an integer, the **key
//!   head**, so node search compares integers and touches key bytes only on ties.
//! * Node search runs in one of four layouts chosen per tree (`search.rs`): the sorted slot
//!   array (branchy or branch-free binary search), or a per-node search array in Eytzinger or
//!   B-tree order, with a software-prefetch pipeline of depth 0, 1 or 2, changeable at run time.
//! * Large values live in overflow pages (`overflow.rs`).
//! * Sorted batches are applied leaf by leaf (`batch.rs`): writes in log replay, chain updates
//!   in the version collector's passes.
//!
//! # Invariants
//! 1. **Key order.** Within a node, slots are strictly increasing by key; a node's keys lie in
//!    its fence range `[lower, upper)`; the root's fences are infinite.
//! 2. **Separators.** An inner node with separators `s_0 < … < s_{n-1}` sends keys in
//!    `[s_{i-1}, s_i)` to child `i` and keys `>= s_{n-1}` to its upper child; each child's fences
//!    are exactly the separators around it (so a leaf's upper fence is its right neighbour's
//!    lower fence, which is how cursors move without sibling pointers).
//! 3. **Balance.** All leaves are at level 0; an inner node's children are one level below it.
//! 4. **Prefix.** When both fences exist, their common prefix is shared by every key in the
//!    node; it is stored once and stripped from the keys.
//!
//! `BTree::check` verifies 1–4.
//!
//! # Concurrency (`tree.rs`)
//! Optimistic lock coupling over `sync::HybridLatch`: readers write no shared memory and
//! validate each node's version after reading its child's; writers upgrade only the nodes they
//! change (parent before child, left before right). Inner nodes without room for one more
//! maximal separator are split on the way down, so a leaf split always fits in its parent.
//!
//! **Why optimistic reads are sound**: every byte of a page is read through relaxed atomic
//! loads (`page.rs`), so reading a node that a writer is changing is not a data race; every
//! offset and length read from a page is treated as untrusted (reads past the page end return
//! zeros, loops are bounded by the page size), so garbage cannot fault or hang; and nothing read
//! optimistically is acted upon before the version is validated. Frames are never unmapped
//! while the pool lives and every free, eviction and load bumps the page's version, so a reader
//! holding a stale page id or frame reads valid (if meaningless) memory and fails validation.

mod batch;
mod bulk;
mod cursor;
mod node;
mod overflow;
pub mod search;
pub mod stored;
mod tree;

#[cfg(test)]
mod tests;

pub(crate) use cursor::Bounds;
pub use cursor::{Cursor, Range};
pub use search::Layout;
pub(crate) use stored::chains_in;
pub use stored::{Plain, Resolve};
pub use tree::{BTree, TreeConfig, TreeShape, TreeStats, MAX_VALUE};
