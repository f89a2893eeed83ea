//! The file system as the log and the checkpointer see it: a small trait, the real one, and a
//! faulty one for tests.
//!
//! Every byte tern writes to disk goes through [`Fs`], so tests can inject the faults real disks
//! produce: short writes, `EIO` on write or on `fdatasync`, a full disk ([`FaultFs`]). The
//! engine's rules for using it:
//!
//! 1. A write may be short: callers loop until every byte is written or an error comes back.
//! 2. An error from `sync` is final. The kernel may have dropped the dirty pages it could not
//!    write and will report success on the next `fsync` ("fsyncgate"), so tern never retries a
//!    failed sync: the log turns read-only until the database is reopened and recovered.
//! 3. A new file is durable only once its directory is synced: creating, renaming or removing
//!    a file is followed by [`Fs::sync_dir`] before anything relies on it.

use std::fmt::Debug;
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// A file open for appending.
pub trait FsFile: Send + Debug {
    /// Writes some prefix of `buf` at the end of the file; returns how many bytes (maybe fewer
    /// than asked).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// Makes the written data durable (`fdatasync`).
    fn sync(&mut self) -> io::Result<()>;
    /// Makes the file `len` bytes long with its blocks allocated (`fallocate`), the bytes past
    /// those written reading as zeros, so that writes within it, and the syncs after them,
    /// change no file size. Writes still go where the last one ended. Where the file system
    /// cannot, nothing happens (`Ok`).
    fn preallocate(&mut self, len: u64) -> io::Result<()>;
    /// Cuts the file to `len` bytes (made durable by the next [`sync`](FsFile::sync)).
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Maps the file's first `len` bytes for writing ([`Mapping`]), or `None` where this file
    /// system does not map files or cannot allocate their blocks (the caller then writes with
    /// [`write`](FsFile::write)). Once mapped, the file is written only through the mapping,
    /// which allocates blocks ahead of its stores ([`Mapping::allocate`]); [`sync`](FsFile::sync)
    /// makes those stores durable too. The default maps nothing; [`FaultFs`] maps only when
    /// told to ([`Faults::map_logs`]), and otherwise sees every byte written.
    fn map(&mut self, len: u64) -> io::Result<Option<Mapping>> {
        let _ = len;
        Ok(None)
    }
    /// Tells the kernel the file will not be read again soon, so that its clean pages leave
    /// the page cache (a hint, for a finished log file; the default does nothing).
    fn wont_need(&mut self) {}
}

/// A file's first bytes mapped into memory, shared with the file (`MAP_SHARED`): bytes stored
/// in [`bytes`](Mapping::bytes) are in the file, in the OS page cache, at once, with no system
/// call, so a crash of the process keeps them as it keeps a finished `write`; they reach the
/// disk with the file's next `fdatasync` (on Linux that writes back pages dirtied through a
/// mapping as well). The log writes its records this way (`wal` module doc). Unmapped on drop.
///
/// Only the allocated prefix is reachable ([`allocate`](Mapping::allocate) extends it with
/// `fallocate`): a store into a block the file system has not allocated could find the disk
/// full, which a mapping reports as `SIGBUS`, and a store past the file's end is one too.
///
/// Its pages can be faulted in ahead of the stores from another thread ([`Populate`]), so
/// that a store under a latch does not take the page fault (a few microseconds, at times
/// milliseconds) while others wait for the latch.
#[derive(Debug)]
pub struct Mapping {
    region: Arc<Region>,
    /// Bytes allocated from the start (the file is at least this long).
    allocated: usize,
    /// A second handle to the file, to allocate through.
    file: std::fs::File,
}

/// The memory of a [`Mapping`], unmapped when the last of the mapping and its [`Populate`]
/// and [`WriteBack`] handles goes.
#[derive(Debug)]
struct Region {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: a `Region` is an address range; the bytes in it are reached only through
// `Mapping::bytes` (`&mut Mapping`, one owner at a time), and a `Populate` or a `WriteBack`
// only asks the kernel to fault pages in or drop them from the page tables, which changes no
// byte. It is unmapped once, by the last handle's drop.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` gives no access to the bytes.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range `map_file` mapped, once (the last handle); no
        // reference to its bytes outlives the `Mapping` (`bytes` borrows it), and a `Populate`
        // or a `WriteBack` holds no reference to them.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl Mapping {
    /// Bytes mapped: the most the file can hold through this mapping.
    pub fn len(&self) -> usize {
        self.region.len
    }

    /// Whether nothing is mapped (never: a mapping has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.region.len == 0
    }

    /// Bytes allocated from the start of the file, reachable through [`bytes`](Mapping::bytes).
    pub fn allocated(&self) -> usize {
        self.allocated
    }

    /// Allocates the file's first `n` bytes (at most [`len`](Mapping::len)), extending it with
    /// zeros, so that [`bytes`](Mapping::bytes) reaches them.
    pub fn allocate(&mut self, n: usize) -> io::Result<()> {
        let n = n.min(self.region.len);
        if n > self.allocated {
            if !allocate(&self.file, n as u64)? {
                return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
            }
            self.allocated = n;
        }
        Ok(())
    }

    /// A second handle to the mapped file, to start writing a range of it back to the disk
    /// without holding whatever guards the mapping ([`WriteBack::start`]). It keeps the memory
    /// mapped (not the bytes reachable) until it goes.
    pub fn write_back_handle(&self) -> io::Result<WriteBack> {
        Ok(WriteBack { file: self.file.try_clone()?, region: self.region.clone() })
    }

    /// A handle to fault in pages of the mapping's allocated part from another thread, without
    /// holding whatever guards the mapping ([`Populate::populate`]). It keeps the memory mapped
    /// (not the bytes reachable) until it goes.
    pub fn populate_handle(&self) -> Populate {
        Populate { region: self.region.clone() }
    }

    /// The allocated bytes, to read and write.
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `ptr..ptr+len` is a live read-write mapping this value shares only with
        // `Populate` and `WriteBack` handles, which never touch its bytes (from `map_file`, unmapped when the
        // last handle goes), and its first `allocated` bytes are allocated blocks within the
        // file; `&mut self` makes this the only reference to them. The file is one this
        // process created, which nobody else writes or shortens while it is mapped (the log
        // cuts it only after dropping the mapping).
        unsafe { std::slice::from_raw_parts_mut(self.region.ptr.as_ptr(), self.allocated) }
    }
}

/// A handle to a mapped file for starting its write-back ([`Mapping::write_back_handle`]).
#[derive(Debug)]
pub struct WriteBack {
    file: std::fs::File,
    /// The mapping, kept mapped while the handle lives (it reaches no byte of it).
    region: Arc<Region>,
}

impl WriteBack {
    /// Starts writing the dirty pages of `len` bytes at `offset` back to the disk and returns
    /// without waiting for them (`posix_fadvise(POSIX_FADV_DONTNEED)`), so that the file's next
    /// `fdatasync` waits only for what was dirtied since. The caller passes a range nobody
    /// stores into any more.
    ///
    /// First the range's whole pages are dropped from this process's page tables
    /// (`madvise(MADV_DONTNEED)`: for a shared file mapping the bytes stay in the page cache,
    /// dirty, and a later access maps them again). Writing back a page still mapped
    /// write-protects it in the page tables, and each such change flushes the TLB of every
    /// other CPU running the process: an inter-processor interrupt per 4 KiB page, which in a
    /// virtual machine costs an exit on both sides (at 2 threads of one-key commits, 12% of the
    /// CPU time went to sending them). Dropping the range first flushes once for all of it.
    ///
    /// A hint: a failure is ignored, and elsewhere than Linux nothing happens.
    pub fn start(&self, offset: u64, len: u64) {
        #[cfg(target_os = "linux")]
        {
            let page = os_page_size();
            let from =
                usize::try_from(offset).ok().and_then(|o| o.checked_next_multiple_of(page)).unwrap_or(usize::MAX);
            let end = usize::try_from(offset.saturating_add(len)).unwrap_or(usize::MAX);
            let to = (end / page * page).min(self.region.len / page * page);
            if from < to {
                // SAFETY: `from..to` lies within the region this handle keeps mapped (clamped
                // to its length, page-aligned as `madvise` wants, the region's start being
                // page-aligned). The caller stores into the range no more (the log passes what
                // lies behind its appends), so nothing races with the drop; and for a shared
                // file mapping dropping pages changes no byte: the page cache keeps them (dirty
                // ones stay dirty) and an access maps them again.
                unsafe {
                    libc::madvise(self.region.ptr.as_ptr().add(from).cast(), to - from, libc::MADV_DONTNEED);
                }
            }
            advise(&self.file, offset, len, libc::POSIX_FADV_DONTNEED);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (offset, len);
    }
}

/// The operating system's memory page size (`sysconf(_SC_PAGESIZE)`, 4 KiB where unknown):
/// `madvise` ranges start on it.
pub(crate) fn os_page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: `sysconf` reads a configuration value; no memory is passed.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n).ok().filter(|n| n.is_power_of_two()).unwrap_or(4096)
    })
}

/// A handle to fault in a mapping's pages ahead of its stores ([`Mapping::populate_handle`]).
#[derive(Debug)]
pub struct Populate {
    region: Arc<Region>,
}

impl Populate {
    /// Faults in, for writing, the pages of `len` bytes at `offset` of the mapping
    /// (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14 and later), so that the stores that come
    /// later find them mapped. The caller passes a range the file had allocated when it took
    /// the range; the bytes are left as they are. A hint: a failure (an older kernel, a range
    /// past a file cut since) is ignored, and elsewhere than Linux nothing happens; the result
    /// says whether the kernel faulted the whole range in.
    pub fn populate(&self, offset: usize, len: usize) -> bool {
        let page = os_page_size();
        let from = offset / page * page;
        let to = offset.saturating_add(len).min(self.region.len);
        if from >= to {
            return false;
        }
        #[cfg(target_os = "linux")]
        // SAFETY: `from..to` lies within the region this handle keeps mapped (`to` is clamped
        // to its length, `from` is page-aligned as `madvise` wants, the region's start being
        // page-aligned). Populating changes no byte, so it races with no store; a page past the
        // file's end gets `EFAULT`, not a signal.
        unsafe {
            libc::madvise(self.region.ptr.as_ptr().add(from).cast(), to - from, libc::MADV_POPULATE_WRITE) == 0
        }
        #[cfg(not(target_os = "linux"))]
        false
    }
}

/// Maps the first `len` bytes of `file` (open for reading and writing) shared, allocating the
/// first page; `None` (the caller writes instead) if `len` is 0, if the file system is not one
/// that overwrites allocated blocks in place ([`overwrites_in_place`]), or if it cannot
/// allocate or map the file.
#[cfg(target_os = "linux")]
fn map_file(file: &std::fs::File, len: u64) -> io::Result<Option<Mapping>> {
    use std::os::fd::AsRawFd;
    let size = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let first = size.min(4096);
    if size == 0 || !overwrites_in_place(file) || !allocate(file, first as u64)? {
        return Ok(None);
    }
    let handle = file.try_clone()?;
    // SAFETY: a new shared mapping of `size` bytes of a descriptor `file` owns, at an address
    // the kernel picks; no existing memory is touched. The result is checked below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        // A file system or file that cannot be mapped for writing: the caller writes instead.
        return match e.raw_os_error() {
            Some(libc::ENODEV | libc::EACCES | libc::EINVAL | libc::EPERM) => Ok(None),
            _ => Err(e),
        };
    }
    let ptr = std::ptr::NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
    Ok(Some(Mapping { region: Arc::new(Region { ptr, len: size }), allocated: first, file: handle }))
}

/// Whether `file` is on a file system known to store a rewritten block of an allocated file
/// in place (ext4, XFS, tmpfs), so that a store through a mapping of allocated blocks never
/// needs new space. Copy-on-write file systems (btrfs, ZFS) allocate on every rewrite, and a
/// mapping reports a full disk then as `SIGBUS`: they, and any file system not known, get the
/// written log.
#[cfg(target_os = "linux")]
fn overwrites_in_place(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    const EXT4: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    const TMPFS: i64 = 0x0102_1994;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `fstatfs` fills the `statfs` it is given (valid, writable, its size) for a
    // descriptor `file` owns; it is read only if the call succeeded.
    if unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: filled by the successful call above.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // `f_type`'s type differs between targets
    let kind = st.f_type as i64;
    matches!(kind, EXT4 | XFS | TMPFS)
}

/// Allocates the first `len` bytes of `file` (`fallocate`, extending it, the new bytes reading
/// as zeros); `Ok(false)` where the file system cannot (`EOPNOTSUPP`, `ENOSYS`, or not Linux).
fn allocate(file: &std::fs::File, len: u64) -> io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let len = libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `fallocate` on a descriptor `file` owns; mode 0 allocates and extends; no
        // memory is passed.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } != 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EOPNOTSUPP | libc::ENOSYS) => Ok(false),
                _ => Err(e),
            };
        }
        Ok(true)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, len);
        Ok(false)
    }
}

#[cfg(not(target_os = "linux"))]
fn map_file(_file: &std::fs::File, _len: u64) -> io::Result<Option<Mapping>> {
    Ok(None)
}

/// A file read and written at positions (the buffer manager's page file), shared by threads.
pub trait RandomFile: Send + Sync + Debug {
    /// Reads `buf.len()` bytes at `offset`; bytes past the end of the file read as zeros.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Sets the file's length (made durable by the next [`sync`](RandomFile::sync)).
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes every write so far durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    /// Tells the kernel `len` bytes at `offset` will be read soon (read-ahead; a hint).
    fn will_need(&self, offset: u64, len: u64);
    /// Tells the kernel `len` bytes at `offset` will not be read again soon, so that their
    /// clean pages leave the page cache (a hint; dirty ones are written back first).
    fn wont_need(&self, offset: u64, len: u64);
}

/// The file operations tern needs.
pub trait Fs: Send + Sync + Debug {
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Creates `dir`, which must not exist (`AlreadyExists` if it does); its parent must.
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    /// The names of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates `path` (truncating it if it exists) for appending.
    fn create(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// Opens existing `path` for appending at its end.
    fn append(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// Opens `path` for reading from the start.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>>;
    /// The length of `path` in bytes.
    fn len(&self, path: &Path) -> io::Result<u64>;
    /// Cuts `path` to `len` bytes and makes the new length durable.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes file `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Removes the empty directory `dir`.
    fn remove_dir(&self, dir: &Path) -> io::Result<()>;
    /// Makes `dir`'s entries (files created, renamed, removed) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates `path` (truncating it if it exists) for positional reads and writes.
    fn create_random(&self, path: &Path) -> io::Result<Box<dyn RandomFile>>;
    /// Opens existing `path` for positional reads, and writes unless `read_only`.
    fn open_random(&self, path: &Path, read_only: bool) -> io::Result<Box<dyn RandomFile>>;

    /// Reads all of `path`.
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.open_read(path)?.read_to_end(&mut out)?;
        Ok(out)
    }
}

/// Writes all of `buf` to `file`, looping over short writes.
pub(crate) fn write_all(file: &mut dyn FsFile, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match file.write(buf) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the file accepted no bytes")),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The operating system's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdFs;

#[derive(Debug)]
struct StdFile(std::fs::File);

#[derive(Debug)]
struct StdRandomFile(std::fs::File);

impl RandomFile for StdRandomFile {
    fn read_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        while !buf.is_empty() {
            match self.0.read_at(buf, offset) {
                Ok(0) => {
                    buf.fill(0);
                    return Ok(());
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, buf, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn will_need(&self, offset: u64, len: u64) {
        #[cfg(target_os = "linux")]
        advise(&self.0, offset, len, libc::POSIX_FADV_WILLNEED);
        #[cfg(not(target_os = "linux"))]
        let _ = (offset, len);
    }

    fn wont_need(&self, offset: u64, len: u64) {
        #[cfg(target_os = "linux")]
        advise(&self.0, offset, len, libc::POSIX_FADV_DONTNEED);
        #[cfg(not(target_os = "linux"))]
        let _ = (offset, len);
    }
}

/// `posix_fadvise` on `len` bytes of `file` at `offset` (`len` 0: to the end); a hint, so a
/// failure is ignored.
#[cfg(target_os = "linux")]
fn advise(file: &std::fs::File, offset: u64, len: u64, advice: libc::c_int) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else { return };
    // SAFETY: advice about a range of a file this handle owns and keeps open for the call; no
    // memory is involved.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, advice) };
}

impl FsFile for StdFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::Write::write(&mut self.0, buf)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn preallocate(&mut self, len: u64) -> io::Result<()> {
        // A file system without `fallocate`: appends extend the file as before.
        allocate(&self.0, len).map(drop)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn map(&mut self, len: u64) -> io::Result<Option<Mapping>> {
        map_file(&self.0, len)
    }

    fn wont_need(&mut self) {
        #[cfg(target_os = "linux")]
        advise(&self.0, 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

impl Fs for StdFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        // Readable too: a shared writable mapping ([`FsFile::map`]) needs both.
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(StdFile(file)))
    }

    fn append(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        Ok(Box::new(StdFile(std::fs::OpenOptions::new().append(true).open(path)?)))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        Ok(Box::new(io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?)))
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }

    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        // One buffer of the file's size, read into directly (no buffered copy, no regrowth).
        std::fs::read(path)
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        file.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn create_random(&self, path: &Path) -> io::Result<Box<dyn RandomFile>> {
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(StdRandomFile(file)))
    }

    fn open_random(&self, path: &Path, read_only: bool) -> io::Result<Box<dyn RandomFile>> {
        let file = std::fs::OpenOptions::new().read(true).write(!read_only).open(path)?;
        Ok(Box::new(StdRandomFile(file)))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::remove_dir(dir)
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }
}

/// Faults a [`FaultFs`] injects; change them at any time (every field is atomic), from any
/// thread. The default injects none.
#[derive(Debug)]
pub struct Faults {
    /// Writes accept at most half of what they are given (at least one byte).
    pub short_writes: AtomicBool,
    /// Writes fail with `EIO`.
    pub fail_writes: AtomicBool,
    /// Syncs (file and directory) fail with `EIO`.
    pub fail_syncs: AtomicBool,
    /// Positional reads (page-file reads) fail with `EIO`.
    pub fail_reads: AtomicBool,
    /// Positional writes (page-file writes) fail with `EIO`; the log's writes go on.
    pub fail_page_writes: AtomicBool,
    /// Positional writes write only the first half of what they are given and report success:
    /// the block a crash during a page write leaves (half new, half old).
    pub torn_page_writes: AtomicBool,
    /// Bytes that may still be written before writes fail with `ENOSPC` (`u64::MAX`: no limit).
    pub space_left: AtomicU64,
    /// Bytes written through this file system.
    pub bytes_written: AtomicU64,
    /// Syncs that succeeded.
    pub syncs: AtomicU64,
    /// Log files are mapped ([`FsFile::map`]) as on the real file system, instead of written:
    /// the faults then reach the mapped log's syncs, cuts and new files (its copies into the
    /// mapping cannot fail, and are not counted).
    pub map_logs: AtomicBool,
    /// Operations (any call on the file system or one of its files) that may still run; every
    /// later one fails with `EIO` (`u64::MAX`: no limit). Stopping every operation from the
    /// `n`-th on leaves the files as a crash at that instant would (unsynced data aside), so
    /// tests walk `n` over every step of a procedure.
    pub ops_left: AtomicU64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            short_writes: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
            fail_syncs: AtomicBool::new(false),
            fail_reads: AtomicBool::new(false),
            fail_page_writes: AtomicBool::new(false),
            torn_page_writes: AtomicBool::new(false),
            map_logs: AtomicBool::new(false),
            space_left: AtomicU64::new(u64::MAX),
            bytes_written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            ops_left: AtomicU64::new(u64::MAX),
        }
    }
}

impl Faults {
    /// No faults.
    pub fn none() -> Arc<Faults> {
        Arc::new(Faults::default())
    }

    /// Counts one operation against [`Faults::ops_left`]; `EIO` once none is left.
    fn step(&self, what: &str) -> io::Result<()> {
        let took = self.ops_left.fetch_update(Relaxed, Relaxed, |left| match left {
            u64::MAX => Some(left),
            0 => None,
            n => Some(n - 1),
        });
        took.map(drop).map_err(|_| io::Error::other(format!("injected stop before {what}")))
    }
}

/// The real file system with injectable faults (see [`Faults`]), for tests.
#[derive(Clone, Debug)]
pub struct FaultFs {
    /// The faults to inject; shared with every file opened through this file system.
    pub faults: Arc<Faults>,
}

impl FaultFs {
    /// A faulty file system that injects nothing until told to.
    pub fn new() -> FaultFs {
        FaultFs { faults: Faults::none() }
    }
}

impl Default for FaultFs {
    fn default() -> Self {
        FaultFs::new()
    }
}

#[derive(Debug)]
struct FaultFile {
    inner: StdFile,
    faults: Arc<Faults>,
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("injected EIO on {what}"))
}

impl Faults {
    /// Takes `n` bytes of the space left: `ENOSPC` (nothing written) if there is not that much.
    fn take_space(&self, n: usize) -> io::Result<()> {
        let took = self.space_left.fetch_update(Relaxed, Relaxed, |left| match left {
            u64::MAX => Some(left),
            left => left.checked_sub(n as u64),
        });
        took.map(drop).map_err(|_| io::Error::from_raw_os_error(libc::ENOSPC))
    }
}

#[derive(Debug)]
struct FaultRandomFile {
    inner: StdRandomFile,
    faults: Arc<Faults>,
}

impl RandomFile for FaultRandomFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.faults.step("pread")?;
        if self.faults.fail_reads.load(Relaxed) {
            return Err(eio("pread"));
        }
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let f = &self.faults;
        f.step("pwrite")?;
        if f.fail_writes.load(Relaxed) || f.fail_page_writes.load(Relaxed) {
            return Err(eio("pwrite"));
        }
        f.take_space(buf.len())?;
        if f.torn_page_writes.load(Relaxed) {
            self.inner.write_at(&buf[..buf.len() / 2], offset)?;
            return Ok(());
        }
        self.inner.write_at(buf, offset)?;
        f.bytes_written.fetch_add(buf.len() as u64, Relaxed);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.faults.step("ftruncate")?;
        self.inner.set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        let f = &self.faults;
        f.step("page file fsync")?;
        if f.fail_syncs.load(Relaxed) {
            return Err(eio("page file fsync"));
        }
        self.inner.sync()?;
        f.syncs.fetch_add(1, Relaxed);
        Ok(())
    }

    fn will_need(&self, offset: u64, len: u64) {
        self.inner.will_need(offset, len);
    }

    fn wont_need(&self, offset: u64, len: u64) {
        self.inner.wont_need(offset, len);
    }
}

impl FsFile for FaultFile {
    fn wont_need(&mut self) {
        self.inner.wont_need();
    }

    fn map(&mut self, len: u64) -> io::Result<Option<Mapping>> {
        if !self.faults.map_logs.load(Relaxed) {
            return Ok(None);
        }
        self.faults.step("mmap")?;
        self.inner.map(len)
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let f = &self.faults;
        f.step("write")?;
        if f.fail_writes.load(Relaxed) {
            return Err(eio("write"));
        }
        let mut n = buf.len();
        if f.short_writes.load(Relaxed) {
            n = (n / 2).max(1);
        }
        let left = f.space_left.load(Relaxed);
        if left == 0 {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        n = n.min(usize::try_from(left).unwrap_or(usize::MAX));
        let written = self.inner.write(&buf[..n])?;
        if left != u64::MAX {
            f.space_left.fetch_sub(written as u64, Relaxed);
        }
        f.bytes_written.fetch_add(written as u64, Relaxed);
        Ok(written)
    }

    fn preallocate(&mut self, len: u64) -> io::Result<()> {
        let f = &self.faults;
        f.step("fallocate")?;
        if f.fail_writes.load(Relaxed) {
            return Err(eio("fallocate"));
        }
        if f.space_left.load(Relaxed) == 0 {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.inner.preallocate(len)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.faults.step("ftruncate")?;
        if self.faults.fail_writes.load(Relaxed) {
            return Err(eio("ftruncate"));
        }
        self.inner.set_len(len)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.faults.step("fdatasync")?;
        if self.faults.fail_syncs.load(Relaxed) {
            return Err(eio("fdatasync"));
        }
        self.inner.sync()?;
        self.faults.syncs.fetch_add(1, Relaxed);
        Ok(())
    }
}

impl Fs for FaultFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.faults.step("mkdir")?;
        StdFs.create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.faults.step("listing")?;
        StdFs.list(dir)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.faults.step("create")?;
        // Readable too, as `StdFs::create`: a shared writable mapping (`Faults::map_logs`) needs
        // both, and without it every map fails and the log is written instead.
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(FaultFile { inner: StdFile(file), faults: self.faults.clone() }))
    }

    fn append(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.faults.step("open")?;
        let file = std::fs::OpenOptions::new().append(true).open(path)?;
        Ok(Box::new(FaultFile { inner: StdFile(file), faults: self.faults.clone() }))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        self.faults.step("open")?;
        StdFs.open_read(path)
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        self.faults.step("stat")?;
        StdFs.len(path)
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.faults.step("truncate")?;
        if self.faults.fail_syncs.load(Relaxed) {
            return Err(eio("truncate"));
        }
        StdFs.truncate(path, len)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.faults.step("rename")?;
        StdFs.rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.faults.step("remove")?;
        StdFs.remove(path)
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.faults.step("remove_dir")?;
        StdFs.remove_dir(dir)
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        self.faults.step("create_dir")?;
        StdFs.create_dir(dir)
    }

    fn create_random(&self, path: &Path) -> io::Result<Box<dyn RandomFile>> {
        self.faults.step("create")?;
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(FaultRandomFile { inner: StdRandomFile(file), faults: self.faults.clone() }))
    }

    fn open_random(&self, path: &Path, read_only: bool) -> io::Result<Box<dyn RandomFile>> {
        self.faults.step("open")?;
        let file = std::fs::OpenOptions::new().read(true).write(!read_only).open(path)?;
        Ok(Box::new(FaultRandomFile { inner: StdRandomFile(file), faults: self.faults.clone() }))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.faults.step("directory fsync")?;
        if self.faults.fail_syncs.load(Relaxed) {
            return Err(eio("directory fsync"));
        }
        StdFs.sync_dir(dir)
    }
}

#[cfg(all(test, target_os = "linux", not(loom)))]
mod tests {
    use super::*;

    /// Faulting a mapping's pages in changes none of its bytes, past the allocated part or the
    /// file's end is harmless (an error the hint ignores, no signal), and a handle that
    /// outlives its `Mapping` keeps the memory mapped until it goes.
    #[test]
    fn populating_a_mapping_changes_no_byte_and_outlives_it_safely() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = StdFs.create(&dir.path().join("f")).unwrap();
        let Some(mut map) = file.map(8 << 20).unwrap() else {
            return; // a file system that does not map: nothing to check
        };
        map.allocate(8 << 20).unwrap();
        let handle = map.populate_handle();
        let page = os_page_size();
        let resident = |offset: usize| {
            let mut v = 0u8;
            // SAFETY: one page of the region `handle` keeps mapped (offset below its length,
            // page-aligned); `mincore` writes one status byte for it into `v`.
            let rc = unsafe { libc::mincore(handle.region.ptr.as_ptr().add(offset).cast(), page, &mut v) };
            rc == 0 && v & 1 == 1
        };
        // Checked before any store (a store's fault may read the file ahead into memory).
        let ahead = 6 << 20;
        assert!(!resident(ahead), "an untouched page is not in memory before");
        if handle.populate(ahead, 64 << 10) {
            assert!(resident(ahead) && resident(ahead + (64 << 10) - page), "the range is in memory after");
        }
        for (i, b) in map.bytes()[..256 << 10].iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let _ = handle.populate(100, 64 << 10); // an unaligned start, over bytes just stored
        assert!(!handle.populate(16 << 20, 4096), "wholly past the mapping: nothing");
        assert!(map.bytes()[..256 << 10].iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        assert!(map.bytes()[256 << 10..].iter().all(|&b| b == 0), "populated pages read as zeros");
        drop(map);
        file.set_len(4096).unwrap(); // the file cut under the handle's pages
        assert!(!handle.populate(0, 8 << 20), "past the file's end: an error, no signal");
        drop(handle);
        let bytes = StdFs.read_all(&dir.path().join("f")).unwrap();
        assert_eq!(bytes.len(), 4096);
        assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }

    /// Kilobytes of the mapping at `start` that this process's page tables map (`Rss` in
    /// `/proc/self/smaps`), if the kernel says.
    #[cfg(target_os = "linux")]
    fn mapped_kib(start: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut lines = smaps
            .lines()
            .skip_while(|l| l.split('-').next().and_then(|a| usize::from_str_radix(a, 16).ok()) != Some(start));
        lines.next()?;
        let rss = lines.find(|l| l.starts_with("Rss:"))?;
        rss.split_whitespace().nth(1)?.parse().ok()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn starting_write_back_unmaps_the_range_and_keeps_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut file = StdFs.create(&path).unwrap();
        let Some(mut map) = file.map(4 << 20).unwrap() else {
            eprintln!("the temporary directory's file system is not mapped: nothing to check");
            return;
        };
        map.allocate(4 << 20).unwrap();
        let pattern = |i: usize| (i % 253) as u8;
        for (i, b) in map.bytes()[..2 << 20].iter_mut().enumerate() {
            *b = pattern(i);
        }
        let start = map.region.ptr.as_ptr().addr();
        let before = mapped_kib(start);
        // An unaligned range: only its whole pages (4 KiB up to 1 MiB) leave the page tables.
        map.write_back_handle().unwrap().start(100, (1 << 20) - 100);
        let page_kib = (os_page_size() / 1024) as u64;
        // The whole pages of 100..1 MiB: from the second page up to 1 MiB rounded down.
        let dropped = (1024 / page_kib - 1) * page_kib;
        if let (Some(before), Some(after)) = (before, mapped_kib(start)) {
            assert!(before >= 2048, "the stored pages are mapped ({before} KiB)");
            let left = before.saturating_sub(after);
            assert!(
                (dropped..=1024).contains(&left),
                "the range's whole pages left, no others ({before} -> {after} KiB)"
            );
        } else {
            eprintln!("no /proc/self/smaps: the pages' mapping is not checked");
        }
        // Every byte is still there, through the mapping (mapped again on access) and in the file.
        assert!(map.bytes()[..2 << 20].iter().enumerate().all(|(i, &b)| b == pattern(i)));
        map.bytes()[8192] = 7; // a store into a dropped page maps it again, writable
        drop(map);
        let bytes = StdFs.read_all(&path).unwrap();
        assert_eq!(bytes[8192], 7);
        assert!(bytes[..2 << 20].iter().enumerate().all(|(i, &b)| i == 8192 || b == pattern(i)));
        assert!(bytes[2 << 20..].iter().all(|&b| b == 0));
    }
}
