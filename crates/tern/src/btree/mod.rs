//! The B+tree: tern's ordered index. (Module documentation is written with the tree; see
//! docs/btree.md for the design in progress.)

pub mod search;
