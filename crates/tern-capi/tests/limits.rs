//! The C interface refuses a too long key itself, before it forms a slice of it (so that a wild
//! length is an error, not undefined behaviour). Its limit must be the engine's: checked here
//! against the engine's own refusal, for the default page size and for a database created with
//! another one (whose recorded page size a later `tern_open` uses).

use std::ffi::{c_int, CStr, CString};
use tern_capi::*;

/// The longest key the engine accepts in the database at `path` (from its `KeyTooLarge`).
fn engine_max_key(path: &std::path::Path, page_size: usize) -> usize {
    let mut options = tern::Options::default();
    options.tree.page_size = page_size;
    let db = tern::Db::open(path, options).unwrap();
    let mut txn = db.begin().unwrap();
    let max = match txn.put(&vec![7; 1 << 20], b"v") {
        Err(tern::Error::KeyTooLarge { max, .. }) => max,
        other => panic!("a 1 MiB key: {other:?}"),
    };
    txn.abort();
    db.close().unwrap();
    max
}

fn last_error() -> String {
    // SAFETY: `tern_last_error` returns a NUL-terminated string valid until the next failure.
    unsafe { CStr::from_ptr(tern_last_error()) }.to_string_lossy().into_owned()
}

/// What `tern_put` answers for a key of `len` bytes in the database at `path`.
fn c_put(path: &std::path::Path, len: usize) -> (c_int, String) {
    let path = CString::new(path.to_str().unwrap()).unwrap();
    let (mut db, mut txn) = (std::ptr::null_mut(), std::ptr::null_mut());
    assert_eq!(tern_open(path.as_ptr(), &mut db), TERN_OK, "{}", last_error());
    // SAFETY: `db` was just opened; `txn` and the key are live for the calls.
    unsafe {
        assert_eq!(tern_begin(db, 0, &mut txn), TERN_OK);
        let key = vec![7u8; len];
        let code = tern_put(txn, std::ptr::null(), key.as_ptr(), len, b"v".as_ptr(), 1);
        let message = last_error();
        assert_eq!(tern_abort(txn), TERN_OK);
        assert_eq!(tern_close(db), TERN_OK);
        (code, message)
    }
}

#[test]
fn the_key_limit_is_the_engines() {
    for page_size in [16 * 1024, 4096, 65536] {
        let dir = tempfile::tempdir().unwrap();
        let max = engine_max_key(dir.path(), page_size);
        assert_eq!(c_put(dir.path(), max).0, TERN_OK, "page size {page_size}: the longest key");
        let (code, message) = c_put(dir.path(), max + 1);
        assert_eq!(code, TERN_EINVAL, "page size {page_size}: one byte longer");
        assert!(message.contains(&format!("maximum of {max} bytes")), "{message}");
    }
}
