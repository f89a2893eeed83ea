//! The write-ahead log: commit records, group commit, log files.
//!
//! A committing transaction encodes its redo record (table, key, value or tombstone) on its own
//! thread, then takes the log's append latch just long enough to draw its commit timestamp and
//! copy the framed record into the log. It then waits, per its [`Durability`], until its record
//! is written (to the operating system) or synced.
//!
//! **Mapped log files** (the default, [`WalConfig::mapped`]): the current file is mapped shared
//! ([`Mapping`]) and the record is copied straight into the file's pages in the OS page cache,
//! under the latch, with no system call; it is then as written as a `write` would make it
//! (it survives a crash of the process), so a [`Durability::NoSync`] commit returns at once and
//! never waits for another thread. Blocks are allocated ahead of the copies (`fallocate`, one
//! call per `PREALLOCATE`), so a full disk is an error, not a fault; after each such call the
//! appender, once it has let go of the latch, starts writing the file's filled part back to the
//! disk (`WRITE_BACK_LAG` behind the appends, without waiting), so the sync that closes a full
//! file under the latch waits for its last few MiB, not all of it. Likewise the file's pages
//! are faulted in ahead of the copies (`POPULATE_AHEAD`, one `madvise` per range, by the
//! appender that finds less left, after the latch), so a copy under the latch does not take
//! the fault that brings a fresh page of the file in (a sync still write-protects the pages it
//! writes, and the next store into one takes a lighter fault). **Written log files**
//! (`mapped` off, or a file system that cannot map, such as the fault-injecting one): records
//! collect in a buffer and the leader below writes them with one `write`.
//!
//! Syncing is **group commit**: the first waiter that finds no flush under way becomes the
//! leader, takes everything appended so far (written files: writes it with one `write`), makes
//! it durable with one `fdatasync`, and wakes the group; the others sleep meanwhile and find
//! themselves covered. No latch a committer needs is held across a write or a sync: the append
//! latch is released before any, and the leader's I/O state is touched by the leader alone.
//! The exceptions are the start of a new mapped file: the appender that finds the current one
//! full closes it (a sync, and the cut of its unused end) and starts the next under the latch,
//! once per [`WalConfig::file_bytes`] of log, and a checkpoint of an idle log moves it to a new
//! file the same way (nothing is being appended then). A rotation that fails stops the log
//! under both latches: no append and no flush runs after it (each checks, under its latch).
//!
//! # Invariants
//! 1. Log order is timestamp order: commit timestamps are drawn under the append latch, in the
//!    order records enter the buffer. So a checkpoint at snapshot `S` that noted the log's end `L`
//!    while holding the latch (`Wal::fence`) has every commit above `S` at or after `L`.
//! 2. The log on disk is a prefix of the log in memory (written in order, never rewritten); a
//!    commit that read another's writes logs after it, so its durability implies theirs. A
//!    mapped file holds the same prefix: records are copied in order, under the latch, and a
//!    copy a crash cuts short fails its checksum (a torn tail, never acknowledged).
//! 3. `durable <= written <= end`, all log sequence numbers (LSNs: byte positions in the
//!    endless log, file headers not counted), and each only grows.
//! 4. A failed write or sync is final: the log stops (every later append and wait fails with
//!    the first error) and never reports a record durable that a failed flush carried. A failed
//!    `fdatasync` is not retried (the kernel may have dropped the pages and would report the
//!    next one clean).
//! 5. A log file is complete and synced before the next one is created, and the next file's
//!    header (with its start LSN) is synced with its directory entry before records go there.
//!    Records never span files.
//! 6. A file named `wal-<seq>.log` always starts with its header: it is written and synced
//!    under the name `wal-<seq>.tmp` and renamed into place, so a crash between creating the
//!    file and writing its header leaves a `.tmp` leftover (removed at open), never a log file
//!    without a header.
//! 7. The newest file is allocated up to `PREALLOCATE` ahead of its writes or copies (zeros),
//!    so that a sync changes no file size (and a mapped store always has a block); the zeros
//!    are cut, and the cut synced, before the next file is created and at a clean close. So
//!    only the newest file can end in zeros, and the reader takes zeros after its last record
//!    as the end of the log, not as damage.
//! 8. Mapped: `written` is published under the append latch as each record is copied, so
//!    `written == end` whenever the latch is free, and a `NoSync` waiter finds itself covered
//!    without taking the group's mutex (`group.rs`). A mapping is dropped before its file is
//!    cut (a populate or write-back handle may keep its memory mapped a moment longer, never
//!    its bytes reachable: it only faults pages in, or drops filled ones from the page tables
//!    before their write-back, and past the file's end it gets an error, not a signal), and
//!    nothing is appended after the log's shutdown (the log stops).
//!
//! # Files
//! `wal-<seq>.log`: a 32-byte header (`TERNWAL1`, sequence number, start LSN, checksum), then
//! records (see `record.rs`). A file is closed and a new one started once it exceeds the
//! configured size (mapped: once the next record would not fit in it; a record larger than a
//! file gets a file of its size); files wholly before the newest checkpoint's LSN are deleted (at the
//! checkpoint, and at open for any a crash left). A checkpoint taken while nothing is being
//! appended (a clean close, an idle database) first starts a new file at its LSN, so the file
//! it covers goes too: a clean close leaves one log file with no record. `reader.rs` reads the
//! files back for recovery, skipping unread those wholly before the checkpoint.

mod group;
pub(crate) mod reader;
pub mod record;

use crate::fs::{write_all, Fs, FsFile, Mapping, Populate, WriteBack};
use crate::sync::{LatchClass, Mutex};
use crate::{Error, Result};
use group::Group;
use record::Payload;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex as StdMutex};
use std::time::Duration;

/// When a commit returns, relative to its log record reaching the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// After its record is written and `fdatasync`ed: survives a power loss (the default).
    Sync,
    /// After its record is written to the operating system, not synced: survives a crash of
    /// the process, not of the machine.
    NoSync,
    /// At once; a background thread writes and syncs the log every interval. A crash of any
    /// kind loses up to an interval of commits (never part of one). As a database's default
    /// ([`WalConfig::durability`]) the interval must be above zero
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument) at open otherwise).
    Periodic(Duration),
}

/// Log settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalConfig {
    /// Transactions' default durability (each may override it).
    pub durability: Durability,
    /// A log file is closed and a new one started beyond this size. At least 4096 bytes
    /// (less is [`Error::InvalidArgument`](crate::Error::InvalidArgument) at open).
    pub file_bytes: u64,
    /// A checkpoint starts on its own once this much log was written since the last.
    pub checkpoint_bytes: u64,
    /// A checkpoint also starts on its own once this long has passed since the last, if
    /// anything was logged meanwhile. Off (`None`) by default (`checkpoint_bytes` already
    /// bounds the log to replay); a checkpoint writes the pages changed since the last one,
    /// and a page is written whole however little of it changed, so a short interval under a
    /// trickle of scattered commits writes a page per commit. At least 1 ms.
    pub checkpoint_interval: Option<Duration>,
    /// Log replay at open sorts and applies the log in batches of this many bytes of keys and
    /// values (two in flight, memory besides the cache). `None`: an eighth of
    /// [`Options::cache_bytes`](crate::Options::cache_bytes), within 32 MiB..=1 GiB (larger
    /// batches sweep a table larger than the cache fewer times), or the whole log if its files
    /// hold more than that but at most half the cache. At least 1 MiB.
    pub replay_batch_bytes: Option<u64>,
    /// Open returns once the log is read: the writes of the replay's last batch (the whole
    /// log, when it is at most half the cache) are sorted and kept, then applied by a
    /// background thread while transactions run; a transaction that reads or writes a key
    /// first applies the chunk of 64 writes holding it (a scan, the chunks its range covers;
    /// a checkpoint or backup, all of them), so it sees every recovered commit. On by
    /// default: into a table larger than the cache, applying a log of scattered writes reads
    /// most of the table, which an open otherwise waits for. A checkpoint (the one at close
    /// too) applies what is left first, on its own thread, so a close right after a crash
    /// takes what the rest of the replay takes. Only the last batch waits: earlier batches,
    /// and everything before a table's creation or a commit larger than a batch, are applied
    /// before the open returns. Off: every write is applied before the open returns.
    pub deferred_replay: bool,
    /// Closing the database (its last handle) writes a checkpoint, so the next open replays
    /// nothing. Off: close only syncs the log (the recovery benchmark keeps its log this way).
    pub checkpoint_on_close: bool,
    /// Log files are written through a shared memory mapping (on by default): a commit copies
    /// its record into the file's pages in the OS page cache under the append latch, with no
    /// system call, so a [`Durability::NoSync`] commit never waits for a writer and a
    /// [`Durability::Sync`] flush is one `fdatasync`. Off: records collect in a buffer that a
    /// group-commit leader writes with one `write` per group. Either way a crash of the
    /// process keeps every acknowledged commit. Only ext4, XFS and tmpfs are mapped; other file
    /// systems (copy-on-write ones allocate on every rewrite, and a full disk under a mapping
    /// is `SIGBUS`), and those that cannot allocate or map (see
    /// [`FsFile::map`]), get the writes.
    pub mapped: bool,
    /// Group commit: a leader whose flush ended while other committers wait for the next one
    /// runs that one too, up to this many flushes after its own, instead of waking one of them
    /// to run it (the next `fdatasync` starts at once rather than after a thread's wake-up;
    /// the chaining leader returns that much later). 0 (the default): every flush hands on.
    /// On a 2-CPU machine with 32 committers, 8 measured no faster than 0 (docs/durability.md).
    pub chain_flushes: u32,
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig {
            durability: Durability::Sync,
            file_bytes: 64 << 20,
            checkpoint_bytes: 256 << 20,
            checkpoint_interval: None,
            replay_batch_bytes: None,
            deferred_replay: true,
            checkpoint_on_close: true,
            mapped: true,
            chain_flushes: 0,
        }
    }
}

/// A log file's header.
pub(crate) const HEADER: usize = 32;
/// The log buffers' initial capacity.
const BUFFER: usize = 1 << 16;
/// The capacity a log buffer keeps after a flush (a larger one is shrunk to this).
const BUFFER_KEPT: usize = 4 << 20;
const MAGIC: &[u8; 8] = b"TERNWAL1";

/// The header of log file `seq`, whose first record is at `start`.
pub(crate) fn header(seq: u64, start: u64) -> [u8; HEADER] {
    record::file_header(MAGIC, seq, start)
}

/// `(seq, start)` of a log file header, if it is one.
pub(crate) fn parse_header(h: &[u8]) -> Option<(u64, u64)> {
    record::parse_file_header(MAGIC, h)
}

/// The name of log file `seq`.
pub(crate) fn file_name(seq: u64) -> String {
    format!("wal-{seq:010}.log")
}

/// The sequence number in a log file's name.
pub(crate) fn parse_file_name(name: &str) -> Option<u64> {
    name.strip_prefix("wal-")?.strip_suffix(".log")?.parse().ok()
}

/// The name log file `seq` has until its header is on disk.
fn tmp_name(seq: u64) -> String {
    format!("wal-{seq:010}.tmp")
}

/// Whether `name` is a log file whose creation did not finish (see invariant 6).
pub(crate) fn is_unfinished(name: &str) -> bool {
    name.strip_prefix("wal-").and_then(|n| n.strip_suffix(".tmp")).is_some_and(|seq| seq.parse::<u64>().is_ok())
}

/// Group sizes are counted in buckets of powers of two: 1, 2, 3–4, 5–8, …, 129 and more.
pub const GROUP_BUCKETS: usize = 9;

/// Log counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WalStats {
    /// Bytes appended since the database opened (framing and padding included).
    pub bytes: u64,
    /// Records appended since the database opened.
    pub records: u64,
    /// Records written to the file.
    pub records_written: u64,
    /// Writes of the buffer to a file (one per group).
    pub flushes: u64,
    /// `fdatasync` calls.
    pub syncs: u64,
    /// Flushes by group size (records written together): bucket `i` counts groups of
    /// `2^(i-1)+1 ..= 2^i` records (bucket 0: one record; the last: 129 and more).
    pub group_sizes: [u64; GROUP_BUCKETS],
    /// The largest group.
    pub max_group: u64,
    /// Log files started.
    pub files_created: u64,
    /// Log files deleted after a checkpoint covered them.
    pub files_removed: u64,
    /// The log's end (an LSN: bytes of records ever written).
    pub end_lsn: u64,
    /// The first error that stopped the log, if any.
    pub failed: Option<String>,
}

impl WalStats {
    /// The median group size's bucket's upper bound, or 0 without flushes.
    pub fn group_median(&self) -> u64 {
        let total: u64 = self.group_sizes.iter().sum();
        let mut seen = 0;
        for (i, n) in self.group_sizes.iter().enumerate() {
            seen += n;
            if total > 0 && seen * 2 >= total {
                return 1 << i;
            }
        }
        0
    }
}

#[derive(Default)]
struct Counters {
    flushes: AtomicU64,
    syncs: AtomicU64,
    records: AtomicU64,
    groups: [AtomicU64; GROUP_BUCKETS],
    max_group: AtomicU64,
    files_created: AtomicU64,
    files_removed: AtomicU64,
}

/// Where records go, under the append latch.
struct Tail {
    /// The current file's mapping, if the log is mapped (`WalConfig::mapped`): records are
    /// copied into it and `buf` stays empty.
    map: Option<Mapped>,
    /// The records the next flush writes (unmapped log).
    buf: Vec<u8>,
    /// The LSN just past the buffer's last byte.
    end: u64,
    /// Records in the buffer (mapped: records since the last sync).
    records: u64,
    /// Records appended since the database opened.
    appended: u64,
}

/// The current log file's mapping, the offset its next record goes to, and the file's sequence
/// number (for errors).
struct Mapped {
    map: Mapping,
    at: usize,
    seq: u64,
    /// The file's bytes before this were handed to [`WriteBack::start`].
    written_back: usize,
    /// The file's bytes before this were handed to [`Populate::populate`].
    populated: usize,
}

impl Mapped {
    /// The file's next range to fault in ahead of the appends ([`POPULATE_AHEAD`]), with a
    /// handle to do it by once the latch is let go, if less than one `POPULATE_AHEAD` is left.
    fn populate(&mut self) -> Option<(Populate, usize, usize)> {
        if self.at + POPULATE_AHEAD <= self.populated {
            return None;
        }
        let to = ((self.at + 2 * POPULATE_AHEAD) / POPULATE_AHEAD * POPULATE_AHEAD).min(self.map.allocated());
        if to <= self.populated {
            return None;
        }
        let from = std::mem::replace(&mut self.populated, to);
        Some((self.map.populate_handle(), from, to - from))
    }

    /// The file's next range to write back ([`WRITE_BACK_LAG`] behind the appends), with a
    /// handle to start it by, if there is one; `None` also if no handle could be had (the
    /// write-back is an optimization only).
    fn write_back(&mut self) -> Option<(WriteBack, u64, u64)> {
        let to = self.at.saturating_sub(WRITE_BACK_LAG) / WRITE_BACK_LAG * WRITE_BACK_LAG;
        if to <= self.written_back {
            return None;
        }
        let handle = self.map.write_back_handle().ok()?;
        let from = std::mem::replace(&mut self.written_back, to);
        Some((handle, from as u64, (to - from) as u64))
    }
}

/// The leader's: the open file and a spare buffer.
struct Io {
    file: Box<dyn FsFile>,
    seq: u64,
    /// Bytes in the current file (header included).
    file_bytes: u64,
    /// The current file's length with its preallocated zeros (`file_bytes` if none).
    allocated: u64,
    spare: Vec<u8>,
}

/// The most a log file is allocated ahead of its writes ([`FsFile::preallocate`]): a sync of
/// writes that land in allocated blocks changes no file size, which made each `fdatasync` of
/// a growing file write metadata too (~1.4x the time of one into allocated blocks here).
const PREALLOCATE: u64 = 4 << 20;

/// A mapped file's records are written back to the disk, without waiting, this far behind
/// the appends (in whole units of it), each time its blocks are allocated further: the sync
/// that closes a full file then waits for the last few MiB instead of the whole file (with
/// everything still dirty, 6–77 ms under the append latch at 64 MiB files), and the pages
/// being filled are left alone (write-back would make their next store fault again).
const WRITE_BACK_LAG: usize = 1 << 20;

/// A mapped file's pages are faulted in for writing this far ahead of the appends, a range at
/// a time, by the appender that finds less left, once it has let go of the latch: otherwise
/// the first store into each page takes its page fault under the append latch (about 2 µs
/// here, now and then milliseconds), while every other committer waits for the latch.
const POPULATE_AHEAD: usize = 256 << 10;

/// The periodic flusher thread and its stop signal.
type Flusher = (Arc<(StdMutex<bool>, Condvar)>, std::thread::JoinHandle<()>);

/// The log of one database (see the module doc).
pub(crate) struct Wal {
    dir: PathBuf,
    fs: Arc<dyn Fs>,
    config: WalConfig,
    /// The LSN where this process's log began.
    opened_at: u64,
    tail: Mutex<Tail>,
    /// Leader election, and how far the log is written and synced.
    group: Group,
    io: StdMutex<Io>,
    /// `(seq, start LSN)` of every log file on disk, oldest first.
    files: StdMutex<Vec<(u64, u64)>>,
    /// The LSN the newest checkpoint replays from.
    checkpoint_lsn: AtomicU64,
    /// A checkpoint was asked for and has not finished.
    checkpoint_asked: AtomicBool,
    counters: Counters,
    /// The periodic flusher, stopped on `shutdown`.
    flusher: StdMutex<Option<Flusher>>,
}

/// The error of an I/O call; its text is built only if there is an error (the flush calls this
/// once per commit at nosync).
fn io_err(what: impl FnOnce() -> String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what: what(), source }
}

impl Wal {
    /// Starts a new log file `seq` at LSN `start` in `dir`, after recovery found `files` there
    /// (`(seq, start)`, oldest first) and the newest checkpoint replays from `checkpoint_lsn`.
    pub fn create(
        fs: Arc<dyn Fs>,
        dir: &Path,
        config: WalConfig,
        mut files: Vec<(u64, u64)>,
        seq: u64,
        start: u64,
        checkpoint_lsn: u64,
    ) -> Result<Arc<Wal>> {
        let mut file = new_file(&*fs, dir, seq, start)?;
        let map = if config.mapped { map(&mut *file, seq, map_len(&config, 0))? } else { None };
        files.push((seq, start));
        let wal = Arc::new(Wal {
            dir: dir.to_path_buf(),
            fs,
            config,
            opened_at: start,
            tail: Mutex::with_class(
                Tail {
                    buf: if map.is_some() { Vec::new() } else { Vec::with_capacity(BUFFER) },
                    map,
                    end: start,
                    records: 0,
                    appended: 0,
                },
                *APPEND_CLASS,
            ),
            group: Group::new(start, config.chain_flushes),
            io: StdMutex::new(Io {
                file,
                seq,
                file_bytes: HEADER as u64,
                allocated: HEADER as u64,
                spare: Vec::with_capacity(BUFFER),
            }),
            files: StdMutex::new(files),
            checkpoint_lsn: AtomicU64::new(checkpoint_lsn),
            checkpoint_asked: AtomicBool::new(false),
            counters: Counters::default(),
            flusher: StdMutex::new(None),
        });
        wal.counters.files_created.fetch_add(1, Relaxed);
        // Files a checkpoint covered before the last close or crash go now, not at the next
        // checkpoint: the next open need not look at them. Best effort: they hold nothing the
        // database needs, and the next checkpoint tries again.
        let _ = wal.remove_covered(checkpoint_lsn);
        // The flusher also covers transactions that chose `Periodic` in a database whose
        // default is not.
        wal.start_flusher(match config.durability {
            Durability::Periodic(every) => every,
            _ => Duration::from_secs(1),
        });
        Ok(wal)
    }

    /// Stops the log: every later commit fails, the database turns read-only (a sync of the
    /// page file failed; see `checkpoint/pages.rs`).
    pub(crate) fn stop(&self, cause: String) {
        self.group.stop(cause);
    }

    /// The error that stopped the log, as [`Error::ReadOnly`], if one did.
    pub fn check_writable(&self) -> Result<()> {
        match self.group.failed() {
            None => Ok(()),
            Some(cause) => Err(Error::ReadOnly { cause }),
        }
    }

    /// Appends a commit record: draws its timestamp (under the latch, see invariant 1), copies
    /// it into the buffer. Returns the timestamp and the LSN just past the record.
    #[inline]
    pub fn append_commit(&self, payload: &mut Payload, next_ts: impl FnOnce() -> u64) -> Result<(u64, u64)> {
        let mut tail = self.tail.lock();
        // Checked under the latch: a rotation that failed stopped the log under it and left
        // its file unmapped, and nothing may be appended after what the file holds.
        self.check_writable()?;
        // A range of the file to start writing back once the latch is let go.
        let mut write_back = None;
        if let Some(m) = &tail.map {
            let need = payload.framed_len();
            if m.at + need > m.map.len() {
                drop(tail);
                tail = self.next_mapped_file(need)?;
            }
            if let Some(m) = &mut tail.map {
                if m.at + need > m.map.allocated() {
                    // Blocks ahead of the stores (see `Mapping`): a system call per PREALLOCATE.
                    if let Err(e) = m.map.allocate(m.at + need + self.preallocate() as usize) {
                        let seq = m.seq;
                        let e = io_err(|| format!("allocating log file {}", file_name(seq)))(e);
                        self.group.stop(e.to_string());
                        return Err(e);
                    }
                    write_back = m.write_back();
                }
            }
        }
        let ts = next_ts();
        payload.set_ts(ts);
        let t = &mut *tail;
        // A range of the file to fault in once the latch is let go.
        let mut populate = None;
        let n = match &mut t.map {
            Some(m) => {
                let n = payload.frame_to(&mut m.map.bytes()[m.at..]);
                m.at += n;
                populate = m.populate();
                n
            }
            None => payload.frame_into(&mut t.buf),
        };
        t.end += n as u64;
        t.records += 1;
        t.appended += 1;
        if t.map.is_some() {
            // In the file's pages already: as written as a `write` would have made it.
            self.group.set_written(t.end);
        }
        let end = t.end;
        drop(tail);
        if let Some((handle, from, len)) = write_back {
            handle.start(from, len);
        }
        if let Some((handle, from, len)) = populate {
            let _ = handle.populate(from, len); // a hint
        }
        Ok((ts, end))
    }

    /// Starts the next mapped log file, for a record of `need` bytes that does not fit the
    /// current one; returns the append latch, held, with room for it (or the log unmapped).
    /// Takes the `io` latch first (the leader's order), so the latch was let go meanwhile:
    /// another appender may have started the file already.
    fn next_mapped_file(&self, need: usize) -> Result<crate::sync::MutexGuard<'_, Tail>> {
        let mut io = self.io.lock().unwrap_or_else(|p| p.into_inner());
        let mut tail = self.tail.lock();
        // The latch was let go: the log may have stopped meanwhile (as in `append_commit`).
        self.check_writable()?;
        let fits = tail.map.as_ref().is_none_or(|m| m.at + need <= m.map.len());
        if !fits {
            let start = tail.end;
            if let Err(e) = self.rotate_mapped(&mut io, &mut tail, start, need) {
                self.group.stop(e.to_string());
                return Err(e);
            }
        }
        Ok(tail)
    }

    /// Closes the mapped file (all of it synced, its unused end cut: invariants 5 and 7) and
    /// starts the next at `start`, mapped for a first record of `need` bytes (under both
    /// latches: everything before `start` is in the current file).
    fn rotate_mapped(&self, io: &mut Io, tail: &mut Tail, start: u64, need: usize) -> Result<()> {
        if let Some(m) = tail.map.take() {
            io.file_bytes = m.at as u64;
            io.allocated = m.map.allocated() as u64;
        }
        let cut = io.allocated > io.file_bytes;
        self.trim(io)?;
        if !cut {
            let seq = io.seq;
            io.file.sync().map_err(io_err(|| format!("syncing log file {}", file_name(seq))))?;
        }
        self.counters.syncs.fetch_add(1, Relaxed);
        self.group.set_durable(start);
        self.open_next(io, start)?;
        tail.map = map(&mut *io.file, io.seq, map_len(&self.config, need))?;
        Ok(())
    }

    /// Runs `f` with appends held off; returns its result and the log's end at that moment.
    /// A snapshot taken in `f` sees every record before the end and none after it.
    pub fn fence<T>(&self, f: impl FnOnce() -> T) -> (T, u64) {
        let tail = self.tail.lock();
        (f(), tail.end)
    }

    /// Returns once the log is durable (`sync`) or written (otherwise) up to `lsn`, leading
    /// a flush if none is under way (see `group.rs`).
    pub fn wait(&self, lsn: u64, sync: bool) -> Result<()> {
        self.group.wait(lsn, sync, |sync_to| self.lead(sync_to))
    }

    /// Writes and syncs everything appended so far (the periodic flusher, checkpoints, close).
    pub fn flush_all(&self, sync: bool) -> Result<()> {
        let end = self.tail.lock().end;
        self.wait(end, sync)
    }

    /// The leader's flush: takes the buffer, writes it, syncs it if a waiter up to `sync_to`
    /// wants that, and starts a new file if this one is full.
    fn lead(&self, sync_to: u64) -> Result<()> {
        let mut io = self.io.lock().unwrap_or_else(|p| p.into_inner());
        let io = &mut *io;
        // Stopped while this leader waited for `io` (every stop in this file runs under it): a
        // failed mapped rotation leaves `io.file` the old file, which must not be written.
        self.check_writable()?;
        let (end, records, mapped) = {
            let mut tail = self.tail.lock();
            let t = &mut *tail;
            if t.map.is_none() {
                std::mem::swap(&mut t.buf, &mut io.spare);
            }
            (t.end, std::mem::take(&mut t.records), t.map.is_some())
        };
        if mapped {
            return self.sync_mapped(io, end, records, sync_to);
        }
        // Waiters up to `end` that want it written sleep until this flush ends (`group.rs`).
        self.group.flushing(end, false);
        if !io.spare.is_empty() {
            let seq = io.seq;
            write_all(&mut *io.file, &io.spare).map_err(io_err(|| format!("writing log file {}", file_name(seq))))?;
            io.file_bytes += io.spare.len() as u64;
            io.spare.clear();
            // A giant commit grew the buffer: give the memory back rather than keep it for good
            // (the two buffers swap, so each shrinks on its turn).
            io.spare.shrink_to(BUFFER_KEPT);
            self.group.set_written(end);
            self.count_group(records);
        }
        let full = io.file_bytes >= self.config.file_bytes;
        if !full && io.allocated < io.file_bytes + self.preallocate() / 2 {
            // An optimization only: a file system that refuses leaves appends growing the file.
            let to = io.file_bytes + self.preallocate();
            let _ = io.file.preallocate(to);
            io.allocated = to;
        }
        let durable = self.group.durable();
        if (sync_to > durable || full) && durable < end {
            self.group.flushing(end, true);
            let seq = io.seq;
            io.file.sync().map_err(io_err(|| format!("syncing log file {}", file_name(seq))))?;
            self.counters.syncs.fetch_add(1, Relaxed);
            self.group.set_durable(end);
        }
        if full {
            self.trim(io)?;
            self.open_next(io, end)?;
        }
        Ok(())
    }

    /// The leader's flush of a mapped log: the records up to `end` are in the file's pages
    /// (appends copied them and published `written`); syncs them if a waiter wants that.
    fn sync_mapped(&self, io: &mut Io, end: u64, records: u64, sync_to: u64) -> Result<()> {
        let durable = self.group.durable();
        if sync_to > durable && durable < end {
            self.group.flushing(end, true);
            let seq = io.seq;
            io.file.sync().map_err(io_err(|| format!("syncing log file {}", file_name(seq))))?;
            self.counters.syncs.fetch_add(1, Relaxed);
            self.group.set_durable(end);
        }
        if records > 0 {
            self.count_group(records);
        }
        Ok(())
    }

    /// Starts the next log file at LSN `start` (under the `io` latch, the current file closed:
    /// everything before `start` in it, synced, its end cut).
    fn open_next(&self, io: &mut Io, start: u64) -> Result<()> {
        let seq = io.seq + 1;
        let next = new_file(&*self.fs, &self.dir, seq, start)?;
        // The finished file is read again only by a recovery or a backup: its pages need not
        // crowd the page cache (under a memory limit they would push out the page file's).
        std::mem::replace(&mut io.file, next).wont_need();
        io.seq = seq;
        io.file_bytes = HEADER as u64;
        io.allocated = HEADER as u64;
        self.files.lock().unwrap_or_else(|p| p.into_inner()).push((seq, start));
        self.counters.files_created.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Cuts the preallocated zeros off the current file and syncs it: every file but the newest
    /// ends with its last record (invariant 7).
    fn trim(&self, io: &mut Io) -> Result<()> {
        if io.allocated > io.file_bytes {
            let seq = io.seq;
            let what = || format!("cutting the preallocated end of log file {}", file_name(seq));
            io.file.set_len(io.file_bytes).map_err(io_err(what))?;
            io.file.sync().map_err(io_err(what))?;
            io.allocated = io.file_bytes;
        }
        Ok(())
    }

    /// How far ahead of its writes a log file is allocated: [`PREALLOCATE`], or the file size
    /// if smaller (in 64 KiB units).
    fn preallocate(&self) -> u64 {
        PREALLOCATE.min(self.config.file_bytes.next_multiple_of(64 << 10))
    }

    fn count_group(&self, records: u64) {
        let c = &self.counters;
        c.flushes.fetch_add(1, Relaxed);
        c.records.fetch_add(records, Relaxed);
        let bucket = (records.max(1).next_power_of_two().trailing_zeros() as usize).min(GROUP_BUCKETS - 1);
        c.groups[bucket].fetch_add(1, Relaxed);
        c.max_group.fetch_max(records, Relaxed);
    }

    /// The LSN past the last record appended.
    pub fn end(&self) -> u64 {
        self.tail.lock().end
    }

    /// The LSN the newest checkpoint replays from.
    pub fn checkpoint_lsn(&self) -> u64 {
        self.checkpoint_lsn.load(Relaxed)
    }

    /// Log bytes written since the newest checkpoint's LSN.
    pub fn since_checkpoint(&self) -> u64 {
        self.group.written().saturating_sub(self.checkpoint_lsn.load(Relaxed))
    }

    /// Whether enough log was written since the last checkpoint to start one; true once per
    /// checkpoint (until [`Wal::checkpoint_done`]).
    #[inline]
    pub fn checkpoint_due(&self) -> bool {
        self.since_checkpoint() >= self.config.checkpoint_bytes
            && !self.checkpoint_asked.load(Relaxed)
            && !self.checkpoint_asked.swap(true, Relaxed)
    }

    /// A checkpoint that replays from `lsn` is durable: deletes the log files wholly before it.
    /// If nothing was appended since (a clean close, an idle database), the log first moves to
    /// a new file starting at `lsn`, so that the file holding the covered records goes too.
    pub fn checkpoint_done(&self, lsn: Option<u64>) -> Result<()> {
        self.checkpoint_asked.store(false, Relaxed);
        let Some(lsn) = lsn else { return Ok(()) };
        self.checkpoint_lsn.fetch_max(lsn, Relaxed);
        self.rotate_if_idle(lsn)?;
        self.remove_covered(lsn)
    }

    /// Starts a new log file at `lsn` if the log ends there and all of it is written. Appends
    /// that arrive meanwhile wait in the buffer; the next leader (held off by the `io` latch)
    /// writes them to the new file, which starts where they do.
    fn rotate_if_idle(&self, lsn: u64) -> Result<()> {
        let mut io = self.io.lock().unwrap_or_else(|p| p.into_inner());
        let mut tail = self.tail.lock();
        let used = tail.map.as_ref().map_or(io.file_bytes, |m| m.at as u64);
        if used == HEADER as u64 || self.group.written() != lsn || tail.end != lsn {
            return Ok(());
        }
        if tail.map.is_some() {
            return self.rotate_mapped(&mut io, &mut tail, lsn, 0).inspect_err(|e| self.group.stop(e.to_string()));
        }
        drop(tail);
        // As a failed rotation of a full file does (`lead`), a failure stops the log: a failed
        // sync is never retried, and appends must not go on into a file half cut or closed.
        self.trim(&mut io).and_then(|()| self.open_next(&mut io, lsn)).inspect_err(|e| self.group.stop(e.to_string()))
    }

    /// Deletes the log files wholly before `lsn` (a durable checkpoint replays from there).
    fn remove_covered(&self, lsn: u64) -> Result<()> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let mut removed = 0;
        // File i is wholly before `lsn` if file i+1 starts at or before it.
        while files.len() > 1 && files[1].1 <= lsn {
            let name = file_name(files[0].0);
            self.fs.remove(&self.dir.join(&name)).map_err(io_err(|| format!("removing log file {name}")))?;
            files.remove(0);
            removed += 1;
        }
        if removed > 0 {
            self.counters.files_removed.fetch_add(removed, Relaxed);
            self.fs.sync_dir(&self.dir).map_err(io_err(|| format!("syncing directory {}", self.dir.display())))?;
        }
        Ok(())
    }

    /// The log's counters.
    pub fn stats(&self) -> WalStats {
        let c = &self.counters;
        let (end, appended, mapped) = {
            let tail = self.tail.lock();
            (tail.end, tail.appended, tail.map.is_some())
        };
        WalStats {
            bytes: end - self.opened_at,
            records: appended,
            // Mapped: every record is in the file once appended.
            records_written: if mapped { appended } else { c.records.load(Relaxed) },
            flushes: c.flushes.load(Relaxed),
            syncs: c.syncs.load(Relaxed),
            group_sizes: std::array::from_fn(|i| c.groups[i].load(Relaxed)),
            max_group: c.max_group.load(Relaxed),
            files_created: c.files_created.load(Relaxed),
            files_removed: c.files_removed.load(Relaxed),
            end_lsn: end,
            failed: self.group.failed(),
        }
    }

    fn start_flusher(self: &Arc<Self>, every: Duration) {
        let stop = Arc::new((StdMutex::new(false), Condvar::new()));
        let wal = Arc::downgrade(self);
        let signal = stop.clone();
        let spawned = std::thread::Builder::new().name("tern-wal-flush".into()).spawn(move || {
            let (lock, cond) = &*signal;
            let mut stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
            while !*stopped {
                stopped = cond.wait_timeout(stopped, every).unwrap_or_else(|p| p.into_inner()).0;
                let Some(wal) = wal.upgrade() else { break };
                // A failure stops the log; appends report it from then on.
                let _ = wal.flush_all(true);
            }
        });
        if let Ok(handle) = spawned {
            *self.flusher.lock().unwrap_or_else(|p| p.into_inner()) = Some((stop, handle));
        }
    }

    /// Stops the periodic flusher and makes everything appended durable.
    pub fn shutdown(&self) -> Result<()> {
        if let Some((stop, handle)) = self.flusher.lock().unwrap_or_else(|p| p.into_inner()).take() {
            *stop.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
            stop.1.notify_all();
            let _ = handle.join();
        }
        self.check_writable()?;
        self.flush_all(true)?;
        let mut io = self.io.lock().unwrap_or_else(|p| p.into_inner());
        let mut tail = self.tail.lock();
        // An append after this would find no mapping and write over the file's start: stopped
        // first, under the latch, so none can.
        self.group.stop("the log was closed".into());
        if let Some(m) = tail.map.take() {
            io.file_bytes = m.at as u64;
            io.allocated = m.map.allocated() as u64;
        }
        drop(tail);
        self.trim(&mut io)
    }
}

/// The latch class of the append latch.
static APPEND_CLASS: std::sync::LazyLock<LatchClass> =
    std::sync::LazyLock::new(|| LatchClass::register("wal.append").unwrap_or(LatchClass::DEFAULT));

/// How much of a log file to map for a first record of `need` bytes: the configured file size,
/// or more for a record larger than that (records never span files).
fn map_len(config: &WalConfig, need: usize) -> u64 {
    config.file_bytes.max((HEADER + need) as u64)
}

/// Maps log file `seq` (its header written) for `len` bytes, or `None` if its file system
/// cannot (the log then writes).
fn map(file: &mut dyn FsFile, seq: u64, len: u64) -> Result<Option<Mapped>> {
    let map = file.map(len).map_err(io_err(|| format!("mapping log file {}", file_name(seq))))?;
    Ok(map.map(|map| Mapped { map, at: HEADER, seq, written_back: 0, populated: 0 }))
}

/// Creates log file `seq` starting at `start`: header written and synced under a temporary
/// name, renamed into place, directory synced (invariant 6). Appends go to the renamed file.
fn new_file(fs: &dyn Fs, dir: &Path, seq: u64, start: u64) -> Result<Box<dyn FsFile>> {
    let (name, tmp) = (file_name(seq), tmp_name(seq));
    let mut file = fs.create(&dir.join(&tmp)).map_err(io_err(|| format!("creating log file {tmp}")))?;
    write_all(&mut *file, &header(seq, start)).map_err(io_err(|| format!("writing log file {tmp}")))?;
    file.sync().map_err(io_err(|| format!("syncing log file {tmp}")))?;
    fs.rename(&dir.join(&tmp), &dir.join(&name)).map_err(io_err(|| format!("renaming {tmp} to {name}")))?;
    fs.sync_dir(dir).map_err(io_err(|| format!("syncing directory {}", dir.display())))?;
    Ok(file)
}
