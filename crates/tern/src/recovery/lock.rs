//! The database directory's lock: one open handle at a time (`recovery` invariant 1).

use crate::{Error, Result};
use std::path::Path;

/// The exclusive lock on a database directory, held while it is open.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: std::fs::File,
}

/// Locks `dir` against a second opener.
pub(crate) fn lock_dir(dir: &Path) -> Result<DirLock> {
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|source| Error::Io { what: format!("opening {}", path.display()), source })?;
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` on a file descriptor we own and keep open; it touches no memory.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked == 0 {
        return Ok(DirLock { _file: file });
    }
    let source = std::io::Error::last_os_error();
    match source.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Err(Error::Locked { path: dir.to_path_buf() }),
        _ => Err(Error::Io { what: format!("locking {}", path.display()), source }),
    }
}
