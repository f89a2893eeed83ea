//! The C interface of tern: `include/tern.h`, a shared library (`libtern_capi.so`) and a static
//! one (`libtern_capi.a`).
//!
//! Handles are opaque pointers: `tern_db` (a database), `tern_txn` (a transaction), `tern_table`
//! (a table), `tern_cursor` (a cursor in a transaction). Every function returns an error code
//! ([`TERN_OK`], [`TERN_NOTFOUND`], or a negative `TERN_E...`); [`tern_strerror`] names it and
//! [`tern_last_error`] gives the message of the calling thread's last failure.
//!
//! Invariants, which the functions check and report instead of trusting:
//! * A null handle or buffer where one is required is `TERN_EINVAL`, never a crash.
//! * A database is freed only when no transaction of it is live (`tern_close` answers
//!   `TERN_EBUSY` otherwise and frees nothing); a transaction is finished only when none of its
//!   cursors is open (same answer). So no handle ever outlives what it borrows.
//! * A transaction and its cursors are used only on the thread that began it
//!   (`TERN_EWRONG_THREAD` otherwise): tern's transactions are bound to their thread.
//! * A panic inside tern is caught at the boundary and returned as `TERN_EPANIC`.
//! * Values returned by pointer (`tern_get`, cursor moves) stay valid until the next call on
//!   the same transaction or cursor; `tern_get_copy` copies into the caller's buffer instead.

#![allow(non_camel_case_types)]

mod cursor;
mod db;
mod error;
mod txn;

pub use cursor::*;
pub use db::*;
pub use error::*;
pub use txn::*;
