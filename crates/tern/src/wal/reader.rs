//! Reading the log back, for recovery and `tern check`.
//!
//! Files are read oldest first; each must carry a valid header whose start LSN continues the
//! previous file. A record that fails its checksum is one of two things:
//! * a **torn tail**: it is in the newest file and no valid record follows it (a crash cut the
//!   last write short). Nothing after it was ever acknowledged as durable, so it is cut
//!   (`repair`) and reported;
//! * **corruption**: anything else (a bad record in an older file, or one followed by valid
//!   records). Recovery stops with [`Error::Corruption`] naming the file and offset: dropping
//!   the records after it would silently lose committed transactions.
//!
//! Each file is read whole; while one is decoded, the next is already being read on a thread of
//! its own (`tern-log-read`), so a replay from the disk overlaps reading and applying. At most
//! two files are in memory at once.
//!
//! Zeros from where a record would begin to the end of the newest file are the end of the log,
//! not damage: the file's preallocated end (`wal` invariant 7), or data a crash left unwritten
//! (never acknowledged as durable). They are cut too (`repair`), and not reported.

use super::record::{self, Bad, Record, ALIGN};
use super::{file_name, parse_file_name, parse_header, HEADER};
use crate::fs::Fs;
use crate::{Error, Result};
use serde::Serialize;
use std::io::Read;
use std::path::Path;

/// A torn final record cut from the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TornTail {
    /// The log file.
    pub file: String,
    /// Where the torn record began in it.
    pub offset: u64,
    /// The bytes cut.
    pub bytes: u64,
}

/// What a scan of the log found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// `(seq, start LSN)` of the files kept, oldest first.
    pub files: Vec<(u64, u64)>,
    /// The LSN past the last valid record.
    pub end: u64,
    /// Records handed to `apply` (at or after `from`).
    pub records: u64,
    /// Bytes of those records.
    pub bytes: u64,
    /// The largest timestamp of any record read.
    pub max_ts: u64,
    pub torn: Option<TornTail>,
}

fn corruption(file: &str, offset: u64, reason: impl Into<String>) -> Error {
    Error::Corruption { file: file.into(), offset, reason: reason.into() }
}

/// `(start, end)` LSNs of log file `seq` at `path` if its header is sound, it continues the
/// file before it (`prev_end`), and it ends at or before `from`: a file recovery can skip
/// without reading its records. `None` otherwise (the full read then reports any fault).
fn covered(fs: &dyn Fs, path: &Path, seq: u64, prev_end: Option<u64>, from: u64) -> Option<(u64, u64)> {
    let mut head = [0u8; HEADER];
    fs.open_read(path).ok()?.read_exact(&mut head).ok()?;
    let (head_seq, start) = parse_header(&head)?;
    let continues = prev_end.map_or(start <= from, |prev| start == prev);
    let len = fs.len(path).ok()?;
    let end = start + len.checked_sub(HEADER as u64)?;
    (head_seq == seq && continues && end <= from).then_some((start, end))
}

/// Reads the log in `dir` and hands every record at or after LSN `from` to `apply`, in log
/// order. With `repair`, a torn tail is cut from the file (and an unfinished newest file, whose
/// header never made it to disk, removed); without, the files are left as they are.
pub(crate) fn scan(
    fs: &dyn Fs,
    dir: &Path,
    from: u64,
    repair: bool,
    mut apply: impl FnMut(Record<'_>) -> std::result::Result<(), String>,
) -> Result<Scan> {
    let listed = fs.list(dir).map_err(|source| Error::Io { what: format!("listing {}", dir.display()), source })?;
    let mut seqs: Vec<u64> = listed.iter().filter_map(|n| parse_file_name(n)).collect();
    seqs.sort_unstable();
    let mut scan = Scan { end: from, ..Scan::default() };
    let mut prev_end: Option<u64> = None;
    std::thread::scope(|threads| {
        // The next file, being read on a thread of its own while this one's records are applied:
        // a replay from the disk would otherwise wait for each file's read in turn.
        let mut ahead: Option<(u64, std::thread::ScopedJoinHandle<'_, std::io::Result<Vec<u8>>>)> = None;
        for (i, &seq) in seqs.iter().enumerate() {
            let last = i + 1 == seqs.len();
            let name = file_name(seq);
            let path = dir.join(&name);
            if !last {
                if let Some((start, end)) = covered(fs, &path, seq, prev_end, from) {
                    // Wholly before `from`: none of its records is needed, so none is read.
                    scan.files.push((seq, start));
                    prev_end = Some(end);
                    continue;
                }
            }
            let data = match ahead.take() {
                Some((at, read)) if at == seq => read.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                _ => fs.read_all(&path),
            }
            .map_err(|source| Error::Io { what: format!("reading log file {name}"), source })?;
            if let Some(&next) = seqs.get(i + 1) {
                let path = dir.join(file_name(next));
                // A thread that cannot be started only means no read-ahead.
                ahead = std::thread::Builder::new()
                    .name("tern-log-read".into())
                    .spawn_scoped(threads, move || fs.read_all(&path))
                    .ok()
                    .map(|read| (next, read));
            }
            let Some((head_seq, start)) = parse_header(&data) else {
                if last && (data.len() < HEADER || data.iter().all(|&b| b == 0)) {
                    // Created, but its header never reached the disk (tern before log files were
                    // renamed into place, `wal` invariant 6): no record can be in it.
                    if repair {
                        fs.remove(&path).map_err(|source| Error::Io { what: format!("removing {name}"), source })?;
                    }
                    scan.torn = Some(TornTail { file: name, offset: 0, bytes: data.len() as u64 });
                    break;
                }
                return Err(corruption(&name, 0, "not a tern log file (bad header)"));
            };
            if head_seq != seq {
                return Err(corruption(&name, 8, format!("the header says file {head_seq}")));
            }
            if let Some(prev) = prev_end {
                if start != prev {
                    return Err(corruption(
                        &name,
                        16,
                        format!("starts at LSN {start}, the previous file ends at {prev}"),
                    ));
                }
            } else if start > from {
                let reason = if from == 0 {
                    format!(
                        "the log starts at LSN {start}, but no checkpoint holds what came before it \
                         (is a checkpoint-*.ckpt file missing?)"
                    )
                } else {
                    format!("the log starts at LSN {start}, but the checkpoint needs it from LSN {from}")
                };
                return Err(corruption(&name, 16, reason));
            }
            scan.files.push((seq, start));
            let file_end = start + (data.len() - HEADER) as u64;
            if !last && file_end <= from {
                prev_end = Some(file_end);
                continue;
            }
            if from > file_end {
                return Err(corruption(
                    &name,
                    data.len() as u64,
                    format!("the log ends before LSN {from}, where the checkpoint needs it"),
                ));
            }
            let mut pos = HEADER + from.saturating_sub(start) as usize;
            let mut lsn = start.max(from);
            // The parts read so far of a commit written as several records (see `record.rs`).
            let mut pending: Option<Pending<'_>> = None;
            // Where the bad or unfinished bytes at the end begin, if they do.
            let mut torn_at = None;
            // Where the newest file's zeros begin, if it ends in zeros.
            let mut zeros_at = None;
            while pos < data.len() {
                match record::decode(&data[pos..]) {
                    Ok((Record::Part { ts, ops }, used)) => {
                        match &mut pending {
                            None => pending = Some(Pending { pos, ts, ops, bytes: used }),
                            Some(p) if p.ts == ts => {
                                p.ops.extend(ops);
                                p.bytes += used;
                            }
                            Some(p) => {
                                return Err(corruption(
                                    &name,
                                    pos as u64,
                                    format!("a part of commit {ts} inside commit {}", p.ts),
                                ))
                            }
                        }
                        pos += used;
                    }
                    Ok((rec, used)) => {
                        let (rec, bytes) = match (pending.take(), rec) {
                            (None, rec) => (rec, used),
                            (Some(p), Record::Commit { ts, ops }) if p.ts == ts => {
                                let mut all = p.ops;
                                all.extend(ops);
                                (Record::Commit { ts, ops: all }, p.bytes + used)
                            }
                            (Some(p), _) => {
                                return Err(corruption(
                                    &name,
                                    p.pos as u64,
                                    "a commit's parts are not followed by its commit",
                                ))
                            }
                        };
                        scan.max_ts = scan.max_ts.max(rec.ts());
                        apply(rec).map_err(|why| corruption(&name, pos as u64, why))?;
                        scan.records += 1;
                        scan.bytes += bytes as u64;
                        pos += used;
                        lsn += bytes as u64;
                    }
                    Err(Bad::Malformed(why)) => return Err(corruption(&name, pos as u64, why)),
                    Err(bad) => {
                        if !last {
                            return Err(corruption(&name, pos as u64, bad.describe()));
                        }
                        if data[pos..].iter().all(|&b| b == 0) {
                            // The newest file's preallocated end (`wal` invariant 7), or a tail a
                            // crash left unwritten: no record began here. Not damage.
                            zeros_at = Some(pos);
                            break;
                        }
                        if let Some(next) = valid_record_after(&data, pos) {
                            return Err(corruption(
                                &name,
                                pos as u64,
                                format!("{} (a valid record follows at offset {next})", bad.describe()),
                            ));
                        }
                        torn_at = Some(pos);
                        break;
                    }
                }
            }
            if let Some(p) = pending {
                // The commit record of these parts never made it to the file: the whole commit
                // is unfinished (it was never acknowledged). In an older file that is damage.
                if !last {
                    return Err(corruption(&name, p.pos as u64, "a commit's parts end with the file"));
                }
                torn_at = Some(p.pos);
            }
            if let (Some(at), None, true) = (zeros_at, torn_at, repair) {
                fs.truncate(&path, at as u64)
                    .map_err(|source| Error::Io { what: format!("cutting the preallocated end of {name}"), source })?;
            }
            if let Some(at) = torn_at {
                if repair {
                    fs.truncate(&path, at as u64)
                        .map_err(|source| Error::Io { what: format!("cutting the torn tail of {name}"), source })?;
                }
                scan.torn = Some(TornTail { file: name.clone(), offset: at as u64, bytes: (data.len() - at) as u64 });
            }
            scan.end = lsn;
            prev_end = Some(lsn);
        }
        Ok(())
    })?;
    Ok(scan)
}

/// The parts of a commit read so far: where the first began, their timestamp, ops and bytes.
struct Pending<'a> {
    pos: usize,
    ts: u64,
    ops: Vec<super::record::Op<'a>>,
    bytes: usize,
}

/// The offset of the first valid record after the bad one at `pos`, if any.
fn valid_record_after(data: &[u8], pos: usize) -> Option<usize> {
    (pos + ALIGN..data.len()).step_by(ALIGN).find(|&at| record::decode(&data[at..]).is_ok())
}

#[cfg(test)]
mod tests {
    use super::super::record::{Op, Payload};
    use super::super::{file_name, header};
    use super::*;
    use crate::fs::StdFs;

    /// The framed records of a commit at `ts` of `n` ops, cut into parts of about 64 bytes.
    fn commit(ts: u64, n: u8) -> Vec<u8> {
        let mut p = Payload::with_part_bytes(64);
        p.start_commit();
        for i in 0..n {
            p.push_op(0, &[i], Some(&[i; 20]));
        }
        p.set_ts(ts);
        let mut out = Vec::new();
        p.frame_into(&mut out);
        out
    }

    fn table(ts: u64) -> Vec<u8> {
        let mut p = Payload::default();
        p.create_table(1, "t");
        p.set_ts(ts);
        let mut out = Vec::new();
        p.frame_into(&mut out);
        out
    }

    /// Writes log file `seq` starting at `start` with `records`.
    fn log_file(dir: &Path, seq: u64, start: u64, records: &[u8]) {
        let mut bytes = header(seq, start).to_vec();
        bytes.extend_from_slice(records);
        std::fs::write(dir.join(file_name(seq)), bytes).unwrap();
    }

    /// The commits a scan hands out, as (ts, number of ops), and the scan.
    fn read(dir: &Path, repair: bool) -> Result<(Vec<(u64, usize)>, Scan)> {
        let mut got = Vec::new();
        let scan = scan(&StdFs, dir, 0, repair, |rec| {
            if let Record::Commit { ts, ops } = rec {
                assert!(ops
                    .iter()
                    .enumerate()
                    .all(|(i, op)| *op == Op { table: 0, key: &[i as u8], value: Some(&[i as u8; 20]) }));
                got.push((ts, ops.len()));
            }
            Ok(())
        })?;
        Ok((got, scan))
    }

    #[test]
    fn a_commit_in_parts_is_handed_out_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (big, small) = (commit(5, 12), commit(6, 1));
        let mut records = big.clone();
        records.extend_from_slice(&small);
        log_file(dir.path(), 1, 0, &records);
        let (got, scan) = read(dir.path(), false).unwrap();
        assert_eq!(got, [(5, 12), (6, 1)]);
        assert_eq!((scan.records, scan.bytes, scan.end), (2, records.len() as u64, records.len() as u64));
        assert_eq!(scan.torn, None);
    }

    #[test]
    fn parts_without_their_commit_are_a_torn_tail_in_the_newest_file_and_damage_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = commit(5, 2);
        let big = commit(6, 12);
        // Everything but the commit record that ends the parts: cut just before it.
        let (_, used) = crate::wal::record::decode(&big).unwrap();
        let mut parts_end = 0;
        while let Ok((Record::Part { .. }, used)) = crate::wal::record::decode(&big[parts_end..]) {
            parts_end += used;
        }
        assert!(parts_end >= 2 * used, "the commit was cut into parts");
        for cut in [parts_end, parts_end - 5, used + 3] {
            let mut records = first.clone();
            records.extend_from_slice(&big[..cut]);
            log_file(dir.path(), 1, 0, &records);
            let (got, scan) = read(dir.path(), true).unwrap();
            assert_eq!(got, [(5, 2)], "cut at {cut}");
            let torn = scan.torn.expect("the unfinished commit is a torn tail");
            assert_eq!((torn.offset, torn.bytes), ((HEADER + first.len()) as u64, cut as u64), "cut at {cut}");
            assert_eq!(scan.end, first.len() as u64);
            let len = std::fs::metadata(dir.path().join(file_name(1))).unwrap().len();
            assert_eq!(len, (HEADER + first.len()) as u64, "repair cuts the parts off");
        }
        // The same parts at the end of a file that is not the newest: damage, not a tail.
        let mut records = first.clone();
        records.extend_from_slice(&big[..parts_end]);
        log_file(dir.path(), 1, 0, &records);
        log_file(dir.path(), 2, records.len() as u64, &commit(9, 1));
        let err = read(dir.path(), false).unwrap_err();
        assert!(err.to_string().contains("parts end with the file"), "{err}");
    }

    #[test]
    fn parts_followed_by_another_record_are_damage() {
        let dir = tempfile::tempdir().unwrap();
        let big = commit(6, 12);
        let mut parts_end = 0;
        while let Ok((Record::Part { .. }, used)) = crate::wal::record::decode(&big[parts_end..]) {
            parts_end += used;
        }
        for next in [commit(7, 1), table(6), commit(8, 12)] {
            let mut records = big[..parts_end].to_vec();
            records.extend_from_slice(&next);
            log_file(dir.path(), 1, 0, &records);
            let err = read(dir.path(), false).unwrap_err();
            assert!(matches!(err, Error::Corruption { .. }), "{err}");
        }
    }
}
