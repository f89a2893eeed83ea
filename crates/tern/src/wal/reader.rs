//! Reading the log back, for recovery and `tern check`.
//!
//! Files are read oldest first; each must carry a valid header whose start LSN continues the
//! previous file. A record that fails its checksum is one of two things:
//! * a **torn tail**: it is in the newest file and no valid record follows it (a crash cut the
//!   last write short, or the file system left zeros where unsynced data would have been).
//!   Nothing after it was ever acknowledged as durable, so it is cut (`repair`) and reported;
//! * **corruption**: anything else (a bad record in an older file, or one followed by valid
//!   records). Recovery stops with [`Error::Corruption`] naming the file and offset: dropping
//!   the records after it would silently lose committed transactions.

use super::record::{self, Bad, Record, ALIGN};
use super::{file_name, parse_file_name, parse_header, HEADER};
use crate::fs::Fs;
use crate::{Error, Result};
use serde::Serialize;
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
    for (i, &seq) in seqs.iter().enumerate() {
        let last = i + 1 == seqs.len();
        let name = file_name(seq);
        let path = dir.join(&name);
        let data =
            fs.read_all(&path).map_err(|source| Error::Io { what: format!("reading log file {name}"), source })?;
        let Some((head_seq, start)) = parse_header(&data) else {
            if last && prev_end.is_some() {
                // Created, but its header was never synced: nothing was logged there.
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
                return Err(corruption(&name, 16, format!("starts at LSN {start}, the previous file ends at {prev}")));
            }
        } else if start > from {
            return Err(corruption(
                &name,
                16,
                format!("the log starts at LSN {start}, but the checkpoint needs it from LSN {from}"),
            ));
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
        while pos < data.len() {
            match record::decode(&data[pos..]) {
                Ok((rec, used)) => {
                    scan.max_ts = scan.max_ts.max(rec.ts());
                    apply(rec).map_err(|why| corruption(&name, pos as u64, why))?;
                    scan.records += 1;
                    scan.bytes += used as u64;
                    pos += used;
                    lsn += used as u64;
                }
                Err(Bad::Malformed(why)) => return Err(corruption(&name, pos as u64, why)),
                Err(bad) => {
                    if !last {
                        return Err(corruption(&name, pos as u64, bad.describe()));
                    }
                    if let Some(next) = valid_record_after(&data, pos) {
                        return Err(corruption(
                            &name,
                            pos as u64,
                            format!("{} (a valid record follows at offset {next})", bad.describe()),
                        ));
                    }
                    if repair {
                        fs.truncate(&path, pos as u64)
                            .map_err(|source| Error::Io { what: format!("cutting the torn tail of {name}"), source })?;
                    }
                    scan.torn =
                        Some(TornTail { file: name.clone(), offset: pos as u64, bytes: (data.len() - pos) as u64 });
                    break;
                }
            }
        }
        scan.end = lsn;
        prev_end = Some(lsn);
    }
    Ok(scan)
}

/// The offset of the first valid record after the bad one at `pos`, if any.
fn valid_record_after(data: &[u8], pos: usize) -> Option<usize> {
    (pos + ALIGN..data.len()).step_by(ALIGN).find(|&at| record::decode(&data[at..]).is_ok())
}
