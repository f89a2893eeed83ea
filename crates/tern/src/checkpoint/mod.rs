//! Checkpoints: the database as of one snapshot, made current atomically.
//!
//! A database's checkpoints are **page checkpoints** (`pages.rs`, `map.rs`): the pages changed
//! since the previous one, written to the page file's spare slots, and a file
//! `checkpoint-<seq>.ckpt` (magic `TERNCKP3`, or `TERNCKP2` before the page file's chunks)
//! naming every page's block. The **logical**
//! format of this file (magic `TERNCKP1`: every entry of every table, in key order) is what
//! backups write, and what databases written before page checkpoints hold; opening one loads
//! it into a new page file, and the next checkpoint is a page checkpoint.
//!
//! Both read a snapshot `S` taken while the log's appends are held off for an instant (see
//! `crate::wal::Wal::fence`, which also gives the log position `L`): readers and writers go
//! on meanwhile. The file is written as `checkpoint-<seq>.tmp`, synced, renamed, the directory
//! synced; only then are older checkpoints and the log files wholly before `L` deleted.
//!
//! # Invariants
//! 1. The newest `.ckpt` file is complete and synced (a crash leaves at most a `.tmp`, which
//!    recovery deletes), and so are the page-file blocks it names. It holds exactly the
//!    commits with timestamps `<= S`; the log from `L` holds exactly those above `S` (log
//!    order is timestamp order), and is durable up to `L` before the checkpoint is renamed
//!    into place.
//! 2. Every block is checksummed; a checkpoint that fails a check is [`Error::Corruption`], never
//!    skipped: older checkpoints and the log they needed may be gone.
//!
//! # Logical format
//! A 32-byte header (`TERNCKP1`, `S`, `L`, checksum), then framed blocks as in the log
//! (`crc32c | len | payload | padding`): `3 | id: u32 | nlen: u32 | name` starts a table,
//! `4 | n: u32 | (klen: u32 | key | vlen: u32 | value)*` carries its next entries in key order,
//! `5 | tables: u32 | entries: u64` ends the file.

pub(crate) mod map;
pub(crate) mod pages;

use crate::btree::{BTree, TreeConfig};
use crate::buffer::Pool;
use crate::fs::{write_all, Fs, FsFile};
use crate::wal::record::{check_frame, file_header, frame, frame_len, parse_file_header, Bytes, FRAME};
use crate::{Error, Result};
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"TERNCKP1";
const HEADER: usize = 32;
const TABLE: u8 = 3;
const ENTRIES: u8 = 4;
const END: u8 = 5;
/// Entries are written in blocks of about this many bytes.
const BLOCK: usize = 256 << 10;

/// Checkpoint counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckpointStats {
    /// Checkpoints written.
    pub written: u64,
    /// Checkpoints that failed (the log keeps everything; the next one tries again).
    pub failed: u64,
    /// Bytes written, by all of them.
    pub bytes: u64,
    /// Bytes the last one wrote.
    pub last_bytes: u64,
    /// How long the last one took, in milliseconds.
    pub last_millis: u64,
    /// The last failure.
    pub last_error: Option<String>,
}

/// The name of checkpoint `seq`.
pub(crate) fn file_name(seq: u64) -> String {
    format!("checkpoint-{seq:010}.ckpt")
}

pub(crate) fn tmp_name(seq: u64) -> String {
    format!("checkpoint-{seq:010}.tmp")
}

/// Whether `name` is a complete checkpoint file's name.
pub(crate) fn is_checkpoint(name: &str) -> bool {
    parse_name(name).is_some_and(|(_, done)| done)
}

fn parse_name(name: &str) -> Option<(u64, bool)> {
    let rest = name.strip_prefix("checkpoint-")?;
    if let Some(seq) = rest.strip_suffix(".ckpt") {
        return Some((seq.parse().ok()?, true));
    }
    Some((rest.strip_suffix(".tmp")?.parse().ok()?, false))
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

fn corruption(file: &str, offset: u64, reason: impl Into<String>) -> Error {
    Error::Corruption { file: file.into(), offset, reason: reason.into() }
}

/// Checkpoint files in `dir`: the newest complete one's sequence number, and the names of the
/// others (older checkpoints, unfinished `.tmp` files).
pub(crate) fn list(fs: &dyn Fs, dir: &Path) -> Result<(Option<u64>, Vec<String>)> {
    let names = fs.list(dir).map_err(io(format!("listing {}", dir.display())))?;
    let newest = names.iter().filter_map(|n| parse_name(n)).filter(|&(_, done)| done).map(|(s, _)| s).max();
    let others =
        names.into_iter().filter(|n| parse_name(n).is_some_and(|(seq, done)| !done || Some(seq) != newest)).collect();
    Ok((newest, others))
}

/// A checkpoint being written.
pub(crate) struct Writer {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    seq: u64,
    file: Box<dyn FsFile>,
    out: Vec<u8>,
    block: Vec<u8>,
    in_block: u32,
    tables: u32,
    entries: u64,
    bytes: u64,
}

/// A finished checkpoint.
#[derive(Clone, Debug)]
pub(crate) struct Written {
    pub bytes: u64,
    pub entries: u64,
}

impl Writer {
    /// Starts checkpoint `seq` of snapshot `snapshot`, whose log replays from `lsn`.
    pub fn create(fs: Arc<dyn Fs>, dir: &Path, seq: u64, snapshot: u64, lsn: u64) -> Result<Writer> {
        let name = tmp_name(seq);
        let file = fs.create(&dir.join(&name)).map_err(io(format!("creating checkpoint {name}")))?;
        let head = file_header(MAGIC, snapshot, lsn);
        let mut w = Writer {
            fs,
            dir: dir.to_path_buf(),
            seq,
            file,
            out: Vec::with_capacity(BLOCK * 2),
            block: Vec::with_capacity(BLOCK + 1024),
            in_block: 0,
            tables: 0,
            entries: 0,
            bytes: 0,
        };
        w.out.extend_from_slice(&head);
        Ok(w)
    }

    /// Starts table `id` named `name`; its entries follow in key order.
    pub fn table(&mut self, id: u32, name: &str) -> Result<()> {
        self.end_block();
        let mut p = vec![TABLE];
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&(name.len() as u32).to_le_bytes());
        p.extend_from_slice(name.as_bytes());
        frame(&p, &mut self.out);
        self.tables += 1;
        self.spill()
    }

    /// One entry of the current table.
    pub fn entry(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.in_block == 0 {
            self.block.clear();
            self.block.push(ENTRIES);
            self.block.extend_from_slice(&[0; 4]);
        }
        self.block.extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.block.extend_from_slice(key);
        self.block.extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.block.extend_from_slice(value);
        self.in_block += 1;
        self.entries += 1;
        if self.block.len() >= BLOCK {
            self.end_block();
            self.spill()?;
        }
        Ok(())
    }

    fn end_block(&mut self) {
        if self.in_block > 0 {
            self.block[1..5].copy_from_slice(&self.in_block.to_le_bytes());
            frame(&self.block, &mut self.out);
            self.in_block = 0;
        }
    }

    fn spill(&mut self) -> Result<()> {
        if self.out.len() >= BLOCK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let name = tmp_name(self.seq);
        write_all(&mut *self.file, &self.out).map_err(io(format!("writing checkpoint {name}")))?;
        self.bytes += self.out.len() as u64;
        self.out.clear();
        Ok(())
    }

    /// Ends the file, syncs it and makes it current (rename, directory sync).
    pub fn finish(mut self) -> Result<Written> {
        self.end_block();
        let mut p = vec![END];
        p.extend_from_slice(&self.tables.to_le_bytes());
        p.extend_from_slice(&self.entries.to_le_bytes());
        frame(&p, &mut self.out);
        self.flush()?;
        let (tmp, name) = (tmp_name(self.seq), file_name(self.seq));
        self.file.sync().map_err(io(format!("syncing checkpoint {tmp}")))?;
        self.fs.rename(&self.dir.join(&tmp), &self.dir.join(&name)).map_err(io(format!("renaming {tmp} to {name}")))?;
        self.fs.sync_dir(&self.dir).map_err(io(format!("syncing directory {}", self.dir.display())))?;
        Ok(Written { bytes: self.bytes, entries: self.entries })
    }
}

/// A loaded checkpoint.
pub(crate) struct Loaded {
    pub name: String,
    /// Its snapshot: it holds every commit at or below this timestamp.
    pub snapshot: u64,
    /// The log replays from here.
    pub lsn: u64,
    pub tables: Vec<(u32, String, BTree)>,
    pub entries: u64,
}

/// Reads blocks of a checkpoint file, checking each.
struct Blocks {
    name: String,
    input: Box<dyn Read + Send>,
    offset: u64,
    /// The file's length: a block claiming to run past it is damage, found before any memory
    /// is allocated for it.
    len: u64,
    payload: Vec<u8>,
}

impl Blocks {
    /// The next block's payload (in `self.payload`), and the offset it started at.
    fn next(&mut self) -> Result<u64> {
        let at = self.offset;
        let mut head = [0u8; FRAME];
        self.read(&mut head, at)?;
        let len = frame_len(&head).map_err(|bad| corruption(&self.name, at, bad.describe()))?;
        let padded = crate::wal::record::framed_len(len) - FRAME;
        if self.offset + padded as u64 > self.len {
            return Err(corruption(&self.name, at, "a block runs past the end of the file"));
        }
        self.payload.resize(padded, 0);
        let mut payload = std::mem::take(&mut self.payload);
        let read = self.read(&mut payload, at);
        self.payload = payload;
        read?;
        self.payload.truncate(len);
        check_frame(&head, &self.payload).map_err(|bad| corruption(&self.name, at, bad.describe()))?;
        Ok(at)
    }

    fn read(&mut self, buf: &mut [u8], at: u64) -> Result<()> {
        match self.input.read_exact(buf) {
            Ok(()) => {
                self.offset += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Err(corruption(&self.name, at, "the checkpoint ends early (no end block)"))
            }
            Err(source) => Err(Error::Io { what: format!("reading checkpoint {}", self.name), source }),
        }
    }
}

/// Loads checkpoint `seq` from `dir`, building each table's tree with `config`.
pub(crate) fn load(fs: &dyn Fs, dir: &Path, seq: u64, config: TreeConfig, pool: &Arc<Pool>) -> Result<Loaded> {
    let name = file_name(seq);
    let mut input = fs.open_read(&dir.join(&name)).map_err(io(format!("opening checkpoint {name}")))?;
    let mut head = [0u8; HEADER];
    input.read_exact(&mut head).map_err(|_| corruption(&name, 0, "the checkpoint is shorter than its header"))?;
    let Some((snapshot, lsn)) = parse_file_header(MAGIC, &head) else {
        return Err(corruption(&name, 0, "not a tern checkpoint (bad header)"));
    };
    let len = fs.len(&dir.join(&name)).map_err(io(format!("reading the length of checkpoint {name}")))?;
    let mut blocks = Blocks { name: name.clone(), input, offset: HEADER as u64, len, payload: Vec::new() };
    let mut tables = Vec::new();
    let mut entries = 0u64;
    let mut at = blocks.next()?;
    loop {
        let mut b = Bytes(&blocks.payload);
        match b.u8() {
            Some(TABLE) => {
                let parsed = (|| Some((b.u32()?, String::from_utf8(b.blob()?.to_vec()).ok()?)))();
                let Some((id, table)) = parsed.filter(|_| b.0.is_empty()) else {
                    return Err(corruption(&name, at, "malformed table block"));
                };
                if id as usize != tables.len() {
                    return Err(corruption(&name, at, format!("table {id} out of order")));
                }
                let mut source = EntrySource { blocks: &mut blocks, pos: 0, count: 0, at, error: None, entries: 0 };
                let tree = BTree::bulk_load_in(config, pool.clone(), &mut source);
                let EntrySource { error, entries: n, at: next_at, .. } = source;
                if let Some(e) = error {
                    return Err(e);
                }
                let tree = tree.map_err(|e| corruption(&name, next_at, format!("table {table:?}: {e}")))?;
                entries += n;
                tables.push((id, table, tree));
                at = next_at;
            }
            Some(END) => {
                let (t, n) = (b.u32(), b.u64());
                if t != Some(tables.len() as u32) || n != Some(entries) || !b.0.is_empty() {
                    return Err(corruption(&name, at, "the end block does not match the blocks before it"));
                }
                return Ok(Loaded { name, snapshot, lsn, tables, entries });
            }
            _ => return Err(corruption(&name, at, "unexpected block")),
        }
    }
}

/// The entries of one table, pulled block by block for `bulk_load`; stops at the table's end
/// (the next non-entries block is left in `blocks.payload`) or at the first error (kept).
struct EntrySource<'a> {
    blocks: &'a mut Blocks,
    /// Position in the current entries block (0: no block read yet).
    pos: usize,
    /// Entries left in it.
    count: u32,
    /// Offset of the current block.
    at: u64,
    error: Option<Error>,
    entries: u64,
}

impl Iterator for EntrySource<'_> {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<Self::Item> {
        while self.count == 0 {
            if self.error.is_some() {
                return None;
            }
            match self.blocks.next() {
                Err(e) => {
                    self.error = Some(e);
                    return None;
                }
                Ok(at) => {
                    self.at = at;
                    let p = &self.blocks.payload;
                    if p.first() != Some(&ENTRIES) {
                        return None;
                    }
                    let Some(n) = p.get(1..5).map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes"))) else {
                        self.error = Some(corruption(&self.blocks.name, at, "malformed entries block"));
                        return None;
                    };
                    self.count = n;
                    self.pos = 5;
                }
            }
        }
        let mut b = Bytes(&self.blocks.payload[self.pos..]);
        let before = b.0.len();
        let Some((key, value)) = (|| Some((b.blob()?, b.blob()?)))() else {
            self.error = Some(corruption(&self.blocks.name, self.at, "malformed entries block"));
            self.count = 0;
            return None;
        };
        let item = (key.to_vec(), value.to_vec());
        self.pos += before - b.0.len();
        self.count -= 1;
        if self.count == 0 && self.pos != self.blocks.payload.len() {
            self.error = Some(corruption(&self.blocks.name, self.at, "entries block longer than its count"));
        }
        self.entries += 1;
        Some(item)
    }
}

/// Reads checkpoint `seq` of `dir` if it is a page checkpoint (`None`: a logical one, for
/// [`load`]); its page size must be `config`'s.
pub(crate) fn read_page_map(fs: &dyn Fs, dir: &Path, seq: u64, config: TreeConfig) -> Result<Option<map::PageMap>> {
    let name = file_name(seq);
    let mut head = [0u8; 8];
    let mut input = fs.open_read(&dir.join(&name)).map_err(io(format!("opening checkpoint {name}")))?;
    if input.read_exact(&mut head).is_err() {
        return Err(corruption(&name, 0, "the checkpoint is shorter than its header"));
    }
    if &head == MAGIC {
        return Ok(None);
    }
    if !map::is_page_checkpoint(&head) {
        // Never guessed: a logical checkpoint's open starts a new page file.
        return Err(corruption(&name, 0, "not a tern checkpoint (bad magic)"));
    }
    drop(input);
    let parsed = map::parse(&name, &map::read(fs, dir, &name)?)?;
    if parsed.page_size as usize != config.page_size {
        return Err(corruption(
            &name,
            0,
            format!("its pages are {} bytes, the database's settings say {}", parsed.page_size, config.page_size),
        ));
    }
    if parsed.tables.is_empty() {
        return Err(corruption(&name, 0, "the checkpoint has no default table"));
    }
    Ok(Some(parsed))
}
