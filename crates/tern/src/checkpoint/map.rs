//! The page checkpoint's file: which blocks of the page file hold the database at one snapshot.
//!
//! A page checkpoint is the page file's blocks it names plus this file, `checkpoint-<seq>.ckpt`
//! with magic `TERNCKP3` (`TERNCKP2` files, from before the page file's chunks, are read as
//! files with one page per chunk): written as `.tmp`, synced, renamed, the directory synced (as the
//! logical checkpoints of `mod.rs`, which stay readable: an old directory is loaded once and
//! its next checkpoint is a page checkpoint).
//!
//! # Format
//! A 32-byte header (`TERNCKP3`, snapshot `S`, log position `L`, checksum), then framed blocks
//! as in the log (`crc32c | len | payload | padding`):
//! * `6 | page_size: u32 | pages: u64 | tables: u32 | chains: u64 | chunk_pages: u32` first
//!   (`chunk_pages`: how the page file lays out its blocks, `buffer/file.rs`; absent in
//!   `TERNCKP2`, where it is 1);
//! * `7 | id: u32 | root: u32 | pages: u64 | nlen: u32 | name` per table, by id;
//! * `8 | n: u32 | (pid: u32 | kind: u8 | slot: u8 | crc: u32)*` the page map, by page id: page
//!   `pid` is in slot `slot` of the page file with checksum `crc` (kept apart from the block, so
//!   a torn or misdirected write is caught, not only a flipped bit);
//! * `9 | n: u32 | (pid: u32 | chain: u64 | present: u8 [| vlen: u32 | value])*`: what each
//!   chain id in leaf `pid`'s image resolves to at `S` (leaf slots hold chain ids; the versions
//!   live in memory);
//! * `5 | pages: u64 | chains: u64` last.
//!
//! # Invariants
//! 1. The file is complete and synced before it is renamed into place, and the blocks it names
//!    are synced before it is written: a crash leaves the previous checkpoint current.
//! 2. Every block is checked; a checkpoint that fails a check is [`Error::Corruption`] naming
//!    the file and offset, never skipped.

use super::{corruption, io};
use crate::buffer::MAX_CHUNK_PAGES;
use crate::fs::{write_all, Fs};
use crate::wal::record::{check_frame, file_header, frame, frame_len, framed_len, parse_file_header, Bytes, FRAME};
use crate::{Error, Result};
use std::path::Path;

pub(crate) const MAGIC: &[u8; 8] = b"TERNCKP3";
/// The format before the page file's chunks: no `chunk_pages` (it is 1).
const MAGIC_UNCHUNKED: &[u8; 8] = b"TERNCKP2";
const INFO: u8 = 6;
const TABLE: u8 = 7;
const MAP: u8 = 8;
const CHAINS: u8 = 9;
// The end block's tag and the block size are the logical format's (`mod.rs`).
use super::{BLOCK, END};

/// One table of a page checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableRoot {
    pub id: u32,
    pub name: String,
    pub root: u32,
    pub pages: u64,
}

/// One page's place: `(pid, kind, slot, crc)`.
pub(crate) type Placed = (u32, u8, u8, u32);

/// What a chain id in a leaf image stands for: `(leaf pid, chain id, value at S)`.
pub(crate) type ChainValue = (u32, u64, Option<Box<[u8]>>);

/// A page checkpoint's file, read.
#[derive(Debug, Default)]
pub(crate) struct PageMap {
    pub snapshot: u64,
    pub lsn: u64,
    pub page_size: u32,
    /// The page file's pages per chunk (`buffer/file.rs`).
    pub chunk_pages: u32,
    pub tables: Vec<TableRoot>,
    pub pages: Vec<Placed>,
    pub chains: Vec<ChainValue>,
}

/// Writes `map` as checkpoint file `name` in `dir` (through `tmp`, synced, renamed, the
/// directory synced); returns the bytes written.
#[cfg(test)]
pub(crate) fn write(fs: &dyn Fs, dir: &Path, tmp: &str, name: &str, map: &PageMap) -> Result<u64> {
    let bytes = write_tmp(fs, dir, tmp, map)?;
    fs.rename(&dir.join(tmp), &dir.join(name)).map_err(io(format!("renaming {tmp} to {name}")))?;
    fs.sync_dir(dir).map_err(io(format!("syncing directory {}", dir.display())))?;
    Ok(bytes)
}

/// Writes `map` to file `tmp` in `dir` and syncs it; returns the bytes written. Renaming it
/// into place is the caller's (the checkpoint's commit point).
pub(crate) fn write_tmp(fs: &dyn Fs, dir: &Path, tmp: &str, map: &PageMap) -> Result<u64> {
    let out = encode(map, MAGIC);
    let mut file = fs.create(&dir.join(tmp)).map_err(io(format!("creating checkpoint {tmp}")))?;
    write_all(&mut *file, &out).map_err(io(format!("writing checkpoint {tmp}")))?;
    file.sync().map_err(io(format!("syncing checkpoint {tmp}")))?;
    Ok(out.len() as u64)
}

/// `map` as a file with `magic` (`MAGIC`; `MAGIC_UNCHUNKED` leaves `chunk_pages` out, as
/// files before the chunks did).
fn encode(map: &PageMap, magic: &[u8; 8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(BLOCK * 2);
    out.extend_from_slice(&file_header(magic, map.snapshot, map.lsn));
    let mut p = vec![INFO];
    p.extend_from_slice(&map.page_size.to_le_bytes());
    p.extend_from_slice(&(map.pages.len() as u64).to_le_bytes());
    p.extend_from_slice(&(map.tables.len() as u32).to_le_bytes());
    p.extend_from_slice(&(map.chains.len() as u64).to_le_bytes());
    if magic == MAGIC {
        p.extend_from_slice(&map.chunk_pages.to_le_bytes());
    }
    frame(&p, &mut out);
    for t in &map.tables {
        let mut p = vec![TABLE];
        p.extend_from_slice(&t.id.to_le_bytes());
        p.extend_from_slice(&t.root.to_le_bytes());
        p.extend_from_slice(&t.pages.to_le_bytes());
        p.extend_from_slice(&(t.name.len() as u32).to_le_bytes());
        p.extend_from_slice(t.name.as_bytes());
        frame(&p, &mut out);
    }
    let mut block = Vec::with_capacity(BLOCK + 64);
    let mut n = 0u32;
    let end_block = |block: &mut Vec<u8>, n: &mut u32, out: &mut Vec<u8>| {
        if *n > 0 {
            block[1..5].copy_from_slice(&n.to_le_bytes());
            frame(block, out);
            *n = 0;
        }
    };
    for &(pid, kind, slot, crc) in &map.pages {
        if n == 0 {
            block.clear();
            block.extend_from_slice(&[MAP, 0, 0, 0, 0]);
        }
        block.extend_from_slice(&pid.to_le_bytes());
        block.extend_from_slice(&[kind, slot]);
        block.extend_from_slice(&crc.to_le_bytes());
        n += 1;
        if block.len() >= BLOCK {
            end_block(&mut block, &mut n, &mut out);
        }
    }
    end_block(&mut block, &mut n, &mut out);
    for (pid, chain, value) in &map.chains {
        if n == 0 {
            block.clear();
            block.extend_from_slice(&[CHAINS, 0, 0, 0, 0]);
        }
        block.extend_from_slice(&pid.to_le_bytes());
        block.extend_from_slice(&chain.to_le_bytes());
        match value {
            Some(v) => {
                block.push(1);
                block.extend_from_slice(&(v.len() as u32).to_le_bytes());
                block.extend_from_slice(v);
            }
            None => block.push(0),
        }
        n += 1;
        if block.len() >= BLOCK {
            end_block(&mut block, &mut n, &mut out);
        }
    }
    end_block(&mut block, &mut n, &mut out);
    let mut p = vec![END];
    p.extend_from_slice(&(map.pages.len() as u64).to_le_bytes());
    p.extend_from_slice(&(map.chains.len() as u64).to_le_bytes());
    frame(&p, &mut out);
    out
}

/// Whether `head` (a checkpoint file's first bytes) is a page checkpoint's.
pub(crate) fn is_page_checkpoint(head: &[u8]) -> bool {
    head.starts_with(MAGIC) || head.starts_with(MAGIC_UNCHUNKED)
}

/// Reads the page checkpoint in `bytes` (the whole file `name`).
pub(crate) fn parse(name: &str, bytes: &[u8]) -> Result<PageMap> {
    let head = bytes.get(..32).ok_or_else(|| corruption(name, 0, "the checkpoint is shorter than its header"))?;
    let chunked = !head.starts_with(MAGIC_UNCHUNKED);
    let (snapshot, lsn) = parse_file_header(if chunked { MAGIC } else { MAGIC_UNCHUNKED }, head)
        .ok_or_else(|| corruption(name, 0, "not a tern page checkpoint (bad header)"))?;
    let mut map = PageMap { snapshot, lsn, chunk_pages: 1, ..PageMap::default() };
    let mut at = 32usize;
    let mut expected: Option<(u64, u32, u64)> = None;
    loop {
        let bad = |reason: &str| corruption(name, at as u64, reason);
        let frame_head: &[u8; FRAME] = bytes
            .get(at..at + FRAME)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| bad("the checkpoint ends early (no end block)"))?;
        let len = frame_len(frame_head).map_err(|b| bad(b.describe()))?;
        let end = at + framed_len(len);
        let payload = bytes.get(at + FRAME..at + FRAME + len).filter(|_| end <= bytes.len());
        let payload = payload.ok_or_else(|| bad("a block runs past the end of the file"))?;
        check_frame(frame_head, payload).map_err(|b| bad(b.describe()))?;
        if bytes[at + FRAME + len..end].iter().any(|&x| x != 0) {
            return Err(bad("nonzero padding after a block"));
        }
        let mut b = Bytes(payload);
        let kind = b.u8();
        if kind != Some(INFO) && expected.is_none() {
            return Err(bad("the first block is not the checkpoint's description"));
        }
        match kind {
            Some(INFO) if expected.is_none() => {
                let parsed = (|| Some((b.u32()?, b.u64()?, b.u32()?, b.u64()?)))();
                let (page_size, pages, tables, chains) = parsed.ok_or_else(|| bad("malformed description block"))?;
                if chunked {
                    let chunk = b.u32().filter(|c| (1..=MAX_CHUNK_PAGES).contains(c));
                    map.chunk_pages = chunk.ok_or_else(|| bad("malformed description block"))?;
                }
                map.page_size = page_size;
                // Room for the map up front (bounded by what the file can hold: 10 bytes each).
                map.pages.reserve(usize::try_from(pages).unwrap_or(0).min(bytes.len() / 10));
                expected = Some((pages, tables, chains));
            }
            Some(TABLE) => {
                let parsed = (|| {
                    let (id, root, pages) = (b.u32()?, b.u32()?, b.u64()?);
                    Some((id, root, pages, String::from_utf8(b.blob()?.to_vec()).ok()?))
                })();
                let (id, root, pages, name) = parsed.ok_or_else(|| bad("malformed table block"))?;
                if id as usize != map.tables.len() {
                    return Err(bad(&format!("table {id} out of order")));
                }
                map.tables.push(TableRoot { id, name, root, pages });
            }
            Some(MAP) => {
                let n = b.u32().ok_or_else(|| bad("malformed page map block"))?;
                for _ in 0..n {
                    let e = (|| Some((b.u32()?, b.u8()?, b.u8()?, b.u32()?)))();
                    let e = e.filter(|e| e.2 <= 1).ok_or_else(|| bad("malformed page map block"))?;
                    if map.pages.last().is_some_and(|last| last.0 >= e.0) {
                        return Err(bad(&format!("page {} out of order in the page map", e.0)));
                    }
                    map.pages.push(e);
                }
            }
            Some(CHAINS) => {
                let n = b.u32().ok_or_else(|| bad("malformed chains block"))?;
                for _ in 0..n {
                    let e = (|| {
                        let (pid, chain) = (b.u32()?, b.u64()?);
                        let value = match b.u8()? {
                            0 => None,
                            1 => Some(b.blob()?.to_vec().into_boxed_slice()),
                            _ => return None,
                        };
                        Some((pid, chain, value))
                    })();
                    map.chains.push(e.ok_or_else(|| bad("malformed chains block"))?);
                }
            }
            Some(END) => {
                let (pages, chains) = (b.u64(), b.u64());
                let (want_pages, want_tables, want_chains) = expected.expect("checked");
                let counts = (map.pages.len() as u64, map.tables.len() as u32, map.chains.len() as u64);
                if pages != Some(counts.0)
                    || chains != Some(counts.2)
                    || counts != (want_pages, want_tables, want_chains)
                {
                    return Err(bad("the end block does not match the blocks before it"));
                }
                return Ok(map);
            }
            _ => return Err(bad("unexpected block")),
        }
        if !b.0.is_empty() {
            return Err(bad("a block is longer than its contents"));
        }
        at = end;
    }
}

/// Reads checkpoint file `name` in `dir` whole.
pub(crate) fn read(fs: &dyn Fs, dir: &Path, name: &str) -> Result<Vec<u8>> {
    fs.read_all(&dir.join(name)).map_err(|source| Error::Io { what: format!("reading checkpoint {name}"), source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::StdFs;

    fn sample() -> PageMap {
        PageMap {
            snapshot: 42,
            lsn: 4096,
            page_size: 4096,
            chunk_pages: 256,
            tables: vec![
                TableRoot { id: 0, name: String::new(), root: 7, pages: 3 },
                TableRoot { id: 1, name: "users".into(), root: 2, pages: 1 },
            ],
            pages: (0..20_000u32)
                .map(|p| (p * 2, (p % 3) as u8, (p % 2) as u8, p.wrapping_mul(2_654_435_761)))
                .collect(),
            chains: vec![(7, 3, Some(b"value".to_vec().into_boxed_slice())), (7, 9, None)],
        }
    }

    #[test]
    fn a_page_map_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let map = sample();
        let bytes = write(&StdFs, dir.path(), "c.tmp", "c.ckpt", &map).unwrap();
        let raw = read(&StdFs, dir.path(), "c.ckpt").unwrap();
        assert_eq!(raw.len() as u64, bytes);
        assert!(is_page_checkpoint(&raw));
        let back = parse("c.ckpt", &raw).unwrap();
        assert_eq!((back.snapshot, back.lsn, back.page_size, back.chunk_pages), (42, 4096, 4096, 256));
        assert_eq!(back.tables, map.tables);
        assert_eq!(back.pages, map.pages);
        assert_eq!(back.chains, map.chains);
        assert!(!dir.path().join("c.tmp").exists());
    }

    #[test]
    fn a_page_map_from_before_the_chunks_reads_as_one_page_per_chunk() {
        let map = sample();
        let raw = encode(&map, MAGIC_UNCHUNKED);
        assert!(raw.starts_with(b"TERNCKP2") && is_page_checkpoint(&raw));
        let back = parse("c.ckpt", &raw).unwrap();
        assert_eq!((back.snapshot, back.page_size, back.chunk_pages), (42, 4096, 1));
        assert_eq!((back.tables, back.pages, back.chains), (map.tables, map.pages, map.chains));
    }

    #[test]
    fn a_page_map_naming_no_pages_per_chunk_or_too_many_is_corrupt() {
        for chunk in [0, MAX_CHUNK_PAGES + 1] {
            let raw = encode(&PageMap { chunk_pages: chunk, ..sample() }, MAGIC);
            match parse("c.ckpt", &raw) {
                Err(Error::Corruption { file, reason, .. }) => {
                    assert_eq!(file, "c.ckpt");
                    assert!(reason.contains("description"), "{reason}");
                }
                other => panic!("{chunk} pages per chunk: {other:?}"),
            }
        }
    }

    /// The name of the checkpoint file in `dir`.
    fn checkpoint_name(dir: &Path) -> String {
        let mut names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap());
        names.find(|n| n.starts_with("checkpoint-") && n.ends_with(".ckpt")).unwrap()
    }

    /// Rewrites the closed database in `dir` as tern wrote it before the page file's chunks:
    /// every block moved to `2p + slot`, the checkpoint in the `TERNCKP2` format.
    fn unchunk(dir: &Path) {
        let name = checkpoint_name(dir);
        let map = parse(&name, &std::fs::read(dir.join(&name)).unwrap()).unwrap();
        assert!(map.chunk_pages > 1);
        let page = map.page_size as u64;
        let old = std::fs::read(dir.join("pages")).unwrap();
        let mut new = Vec::new();
        for &(pid, _, slot, _) in &map.pages {
            let from = (crate::buffer::block_of(pid, slot, map.chunk_pages) * page) as usize;
            let to = (2 * u64::from(pid) + u64::from(slot)) * page;
            new.resize(new.len().max((to + page) as usize), 0);
            new[to as usize..(to + page) as usize].copy_from_slice(&old[from..from + page as usize]);
        }
        std::fs::write(dir.join("pages"), new).unwrap();
        std::fs::write(dir.join(&name), encode(&PageMap { chunk_pages: 1, ..map }, MAGIC_UNCHUNKED)).unwrap();
    }

    /// A database whose page file has one page per chunk (written before the chunks) opens,
    /// reads, and keeps that layout through later checkpoints.
    #[test]
    fn a_database_from_before_the_chunks_opens_and_keeps_its_layout() {
        use crate::{btree::TreeConfig, Db, Options};
        let dir = tempfile::tempdir().unwrap();
        let options = Options { tree: TreeConfig { page_size: 4096, ..TreeConfig::default() }, ..Options::default() };
        let db = Db::open(dir.path(), options).unwrap();
        let mut txn = db.begin().unwrap();
        for i in 0..3000u32 {
            txn.put(&i.to_be_bytes(), &[1; 100]).unwrap();
        }
        txn.commit().unwrap();
        db.close().unwrap();
        unchunk(dir.path());
        let db = Db::open(dir.path(), options).unwrap();
        let r = db.begin_read().unwrap();
        assert_eq!(r.range(..).unwrap().filter(|(_, v)| v[..] == [1; 100]).count(), 3000);
        drop(r);
        let mut txn = db.begin().unwrap();
        for i in (0..3000u32).step_by(3) {
            txn.put(&i.to_be_bytes(), &[2; 100]).unwrap();
        }
        txn.commit().unwrap();
        db.close().unwrap();
        let name = checkpoint_name(dir.path());
        let raw = std::fs::read(dir.path().join(&name)).unwrap();
        assert!(raw.starts_with(MAGIC), "a new checkpoint is written in the new format");
        assert_eq!(parse(&name, &raw).unwrap().chunk_pages, 1, "the page file keeps its layout");
        let db = Db::open(dir.path(), options).unwrap();
        let r = db.begin_read().unwrap();
        let values: Vec<u8> = r.range(..).unwrap().map(|(_, v)| v[0]).collect();
        assert_eq!(values, (0..3000).map(|i| if i % 3 == 0 { 2 } else { 1 }).collect::<Vec<u8>>());
    }

    #[test]
    fn every_damaged_byte_or_cut_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = sample();
        map.pages.truncate(50);
        write(&StdFs, dir.path(), "c.tmp", "c.ckpt", &map).unwrap();
        let raw = read(&StdFs, dir.path(), "c.ckpt").unwrap();
        for at in (0..raw.len()).step_by(7) {
            let mut bad = raw.clone();
            bad[at] ^= 0x5a;
            match parse("c.ckpt", &bad) {
                Err(Error::Corruption { file, .. }) => assert_eq!(file, "c.ckpt"),
                other => panic!("byte {at}: {other:?}"),
            }
        }
        for cut in (0..raw.len()).step_by(13) {
            assert!(matches!(parse("c.ckpt", &raw[..cut]), Err(Error::Corruption { .. })), "cut at {cut}");
        }
    }
}
