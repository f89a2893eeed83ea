//! Log records: framing, checksums, payloads.
//!
//! A record on disk is `crc32c: u32 | len: u32 | payload: len bytes | zero padding to 8 bytes`,
//! little-endian. The checksum covers the length and the payload, so a flipped length is caught
//! like a flipped byte of data. Records start at 8-byte aligned log positions, which is what lets
//! recovery look past a bad record for valid ones (see `reader.rs`).
//!
//! Payloads:
//! * commit: `1 | ts: u64 | ops: u32 | op*`, an op being `table: u32 | put: u8 | klen: u32 | key`
//!   followed, for a put, by `vlen: u32 | value`;
//! * commit part: `3 | ts: u64 | ops: u32 | op*`: a commit too large for one record is written
//!   as parts of about `PART_BYTES` each, then a commit record with the same timestamp that
//!   carries the last ops. The parts and their commit are appended together (one hold of the
//!   append latch), so they are consecutive in one file; a reader applies them together, once
//!   it has the commit record, and treats parts without it at the log's end as a torn tail;
//! * table created: `2 | ts: u64 | id: u32 | nlen: u32 | name`.
//!
//! # Sizes
//! A payload is at most `MAX_PAYLOAD` (2 GiB) bytes, so its length fits the frame's `u32`.
//! Writers keep under it by construction: a commit part closes once it holds `PART_BYTES`
//! (64 MiB), and one op is at most a key (an eighth of a 64 KiB page) and a value
//! ([`MAX_VALUE`](crate::btree::MAX_VALUE), 1 GiB) with 13 bytes of lengths, so no part (and no
//! checkpoint block, which closes at 256 KiB) exceeds `64 MiB + 1 GiB + 8 KiB + 13`. A
//! transaction may write any number of bytes.

/// Bytes of a record's frame (checksum and length).
pub(crate) const FRAME: usize = 8;
/// Records start at multiples of this.
pub(crate) const ALIGN: usize = 8;
/// The longest payload a reader accepts (a longer length field is corruption); writers never
/// frame a longer one (see "Sizes").
pub(crate) const MAX_PAYLOAD: usize = 1 << 31;
/// A commit's payload is cut into parts once it holds this many bytes.
pub(crate) const PART_BYTES: usize = 64 << 20;

const COMMIT: u8 = 1;
const CREATE_TABLE: u8 = 2;
const PART: u8 = 3;
/// The capacity a payload keeps from one commit to the next.
const KEPT: usize = 1 << 20;
/// Kind, timestamp and op count.
const COMMIT_HEADER: usize = 13;

// The largest payload a writer makes fits the frame: a full part plus one maximal op.
const _: () = assert!(
    PART_BYTES + crate::btree::MAX_VALUE + 65536 / 8 + COMMIT_HEADER + 13 <= MAX_PAYLOAD
        && MAX_PAYLOAD <= u32::MAX as usize
);

/// One change of a committed transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op<'a> {
    /// The table's id.
    pub table: u32,
    /// The key.
    pub key: &'a [u8],
    /// The new value; `None`: the key was deleted.
    pub value: Option<&'a [u8]>,
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// A committed transaction's changes, applied together.
    Commit {
        /// Its commit timestamp.
        ts: u64,
        /// Its changes, in the order it made them.
        ops: Vec<Op<'a>>,
    },
    /// A prefix of the ops of the commit with the same timestamp, which follows it (a commit
    /// too large for one record). `reader::scan` hands out whole commits only.
    Part {
        /// The commit's timestamp.
        ts: u64,
        /// Its next changes.
        ops: Vec<Op<'a>>,
    },
    /// A table was created.
    CreateTable {
        /// The commit clock when it was created.
        ts: u64,
        /// Its id.
        id: u32,
        /// Its name.
        name: &'a str,
    },
}

impl Record<'_> {
    /// The record's timestamp.
    pub fn ts(&self) -> u64 {
        match self {
            Record::Commit { ts, .. } | Record::Part { ts, .. } | Record::CreateTable { ts, .. } => *ts,
        }
    }
}

/// A commit's payload, built by the committing thread before it takes the log's latch; the
/// timestamp is filled in under the latch ([`Payload::set_ts`]). A large commit is cut into
/// parts (see the module doc).
#[derive(Debug)]
pub(crate) struct Payload {
    /// Finished parts (payloads of kind `PART`), oldest first.
    parts: Vec<Vec<u8>>,
    /// The payload being filled: the commit record (or the next part).
    bytes: Vec<u8>,
    ops: u32,
    /// Bytes at which the current payload is closed as a part.
    part_bytes: usize,
}

impl Default for Payload {
    fn default() -> Self {
        Payload::with_part_bytes(PART_BYTES)
    }
}

impl Payload {
    /// A payload cut into parts at `part_bytes` (tests use small parts).
    pub fn with_part_bytes(part_bytes: usize) -> Payload {
        Payload { parts: Vec::new(), bytes: Vec::new(), ops: 0, part_bytes }
    }

    /// Starts a commit payload (reusing `self`'s capacity, unless a large commit grew it).
    pub fn start_commit(&mut self) {
        self.parts.clear();
        self.bytes.shrink_to(KEPT);
        self.start_part();
    }

    fn start_part(&mut self) {
        self.bytes.clear();
        self.bytes.push(COMMIT);
        self.bytes.extend_from_slice(&[0; COMMIT_HEADER - 1]);
        self.ops = 0;
    }

    /// Adds one change.
    pub fn push_op(&mut self, table: u32, key: &[u8], value: Option<&[u8]>) {
        if self.ops > 0 && self.bytes.len() >= self.part_bytes {
            // Close what is there as a part; the commit record goes on in a new payload.
            self.bytes[0] = PART;
            let next = Vec::with_capacity(self.part_bytes.min(1 << 20));
            self.parts.push(std::mem::replace(&mut self.bytes, next));
            self.start_part();
        }
        let b = &mut self.bytes;
        b.extend_from_slice(&table.to_le_bytes());
        b.push(u8::from(value.is_some()));
        b.extend_from_slice(&(key.len() as u32).to_le_bytes());
        b.extend_from_slice(key);
        if let Some(v) = value {
            b.extend_from_slice(&(v.len() as u32).to_le_bytes());
            b.extend_from_slice(v);
        }
        self.ops += 1;
        b[9..13].copy_from_slice(&self.ops.to_le_bytes());
    }

    /// A table-creation payload.
    pub fn create_table(&mut self, id: u32, name: &str) {
        self.parts.clear();
        self.bytes.clear();
        self.bytes.push(CREATE_TABLE);
        self.bytes.extend_from_slice(&[0; 8]);
        self.bytes.extend_from_slice(&id.to_le_bytes());
        self.bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(name.as_bytes());
    }

    /// Fills in the timestamp (of every part).
    pub fn set_ts(&mut self, ts: u64) {
        for p in self.parts.iter_mut().chain([&mut self.bytes]) {
            p[1..9].copy_from_slice(&ts.to_le_bytes());
        }
    }

    /// The bytes the framed records (parts and commit) take in the log.
    pub fn framed_len(&self) -> usize {
        self.parts.iter().chain([&self.bytes]).map(|p| framed_len(p.len())).sum()
    }

    /// Appends the framed records (parts, then the commit) to `out`; returns the bytes appended.
    pub fn frame_into(&self, out: &mut Vec<u8>) -> usize {
        let start = out.len();
        out.resize(start + self.framed_len(), 0);
        self.frame_to(&mut out[start..])
    }

    /// Writes the framed records (parts, then the commit) at the start of `out`, which holds
    /// at least [`framed_len`](Payload::framed_len) bytes; returns the bytes written.
    pub fn frame_to(&self, out: &mut [u8]) -> usize {
        let mut at = 0;
        for p in self.parts.iter().chain([&self.bytes]) {
            at += frame_to(p, &mut out[at..]);
        }
        at
    }
}

/// Appends `payload`, framed (checksum, length, padding), to `out`; returns the bytes appended.
/// `payload` is at most [`MAX_PAYLOAD`] bytes (writers keep to it by construction, see "Sizes").
pub(crate) fn frame(payload: &[u8], out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.resize(start + framed_len(payload.len()), 0);
    frame_to(payload, &mut out[start..])
}

/// Writes `payload`, framed, at the start of `out` (at least [`framed_len`] of it); returns
/// the bytes written, padding included. The same limit as [`frame`].
pub(crate) fn frame_to(payload: &[u8], out: &mut [u8]) -> usize {
    assert!(payload.len() <= MAX_PAYLOAD, "a record payload of {} bytes exceeds the log's maximum", payload.len());
    let len = (payload.len() as u32).to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len), payload);
    let n = framed_len(payload.len());
    let out = &mut out[..n];
    out[0..4].copy_from_slice(&crc.to_le_bytes());
    out[4..FRAME].copy_from_slice(&len);
    out[FRAME..FRAME + payload.len()].copy_from_slice(payload);
    out[FRAME + payload.len()..].fill(0);
    n
}

/// Checks a frame header and its payload's checksum: `head` is the 8 frame bytes.
pub(crate) fn check_frame(head: &[u8; FRAME], payload: &[u8]) -> Result<(), Bad> {
    let crc = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes"));
    if crc32c::crc32c_append(crc32c::crc32c(&head[4..8]), payload) != crc {
        return Err(Bad::Checksum);
    }
    Ok(())
}

/// The payload length in a frame header, if plausible.
pub(crate) fn frame_len(head: &[u8; FRAME]) -> Result<usize, Bad> {
    let len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
    if len == 0 || len > MAX_PAYLOAD {
        return Err(Bad::Checksum);
    }
    Ok(len)
}

/// A file's 32-byte header: `magic`, two numbers, a checksum of the rest.
pub(crate) fn file_header(magic: &[u8; 8], a: u64, b: u64) -> [u8; 32] {
    let mut h = [0u8; 32];
    h[0..8].copy_from_slice(magic);
    h[8..16].copy_from_slice(&a.to_le_bytes());
    h[16..24].copy_from_slice(&b.to_le_bytes());
    let crc = crc32c::crc32c(&h[..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The two numbers of a [`file_header`] with `magic`, if `h` starts with a valid one.
pub(crate) fn parse_file_header(magic: &[u8; 8], h: &[u8]) -> Option<(u64, u64)> {
    let h = h.get(..32)?;
    if &h[0..8] != magic || crc32c::crc32c(&h[..28]).to_le_bytes() != h[28..32] {
        return None;
    }
    Some((u64::from_le_bytes(h[8..16].try_into().ok()?), u64::from_le_bytes(h[16..24].try_into().ok()?)))
}

/// The bytes a record with a payload of `len` bytes takes in the log.
pub(crate) fn framed_len(len: usize) -> usize {
    (FRAME + len).div_ceil(ALIGN) * ALIGN
}

/// Why bytes are not a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    /// The buffer ends before the record does.
    Truncated,
    /// The checksum does not match.
    Checksum,
    /// The checksum matches but the payload does not parse (a bug or a forged record).
    Malformed(&'static str),
}

impl Bad {
    pub fn describe(self) -> &'static str {
        match self {
            Bad::Truncated => "record truncated",
            Bad::Checksum => "checksum mismatch",
            Bad::Malformed(why) => why,
        }
    }
}

/// Decodes the record at the start of `buf`; returns it and the bytes it takes (padding
/// included).
pub(crate) fn decode(buf: &[u8]) -> Result<(Record<'_>, usize), Bad> {
    let Some(head) = buf.first_chunk::<FRAME>() else { return Err(Bad::Truncated) };
    let len = frame_len(head)?;
    let Some(payload) = buf.get(FRAME..FRAME + len) else { return Err(Bad::Truncated) };
    check_frame(head, payload)?;
    let record = parse(payload).ok_or(Bad::Malformed("record payload does not parse"))?;
    Ok((record, framed_len(len).min(buf.len())))
}

/// A cursor over a payload.
pub(crate) struct Bytes<'a>(pub &'a [u8]);

impl<'a> Bytes<'a> {
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    pub fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    pub fn blob(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

fn parse(payload: &[u8]) -> Option<Record<'_>> {
    let mut b = Bytes(payload);
    let record = match b.u8()? {
        kind @ (COMMIT | PART) => {
            let ts = b.u64()?;
            let n = b.u32()? as usize;
            // Each op takes at least 9 bytes: a count beyond that is corrupt, not an allocation.
            let mut ops = Vec::with_capacity(n.min(payload.len() / 9));
            for _ in 0..n {
                let table = b.u32()?;
                let put = b.u8()?;
                let key = b.blob()?;
                let value = match put {
                    0 => None,
                    1 => Some(b.blob()?),
                    _ => return None,
                };
                ops.push(Op { table, key, value });
            }
            if kind == PART {
                Record::Part { ts, ops }
            } else {
                Record::Commit { ts, ops }
            }
        }
        CREATE_TABLE => {
            let ts = b.u64()?;
            let id = b.u32()?;
            let name = std::str::from_utf8(b.blob()?).ok()?;
            Record::CreateTable { ts, id, name }
        }
        _ => return None,
    };
    b.0.is_empty().then_some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestOp<'a> = (u32, &'a [u8], Option<&'a [u8]>);

    fn commit(ts: u64, ops: &[TestOp<'_>]) -> Vec<u8> {
        let mut p = Payload::default();
        p.start_commit();
        for &(t, k, v) in ops {
            p.push_op(t, k, v);
        }
        p.set_ts(ts);
        let mut out = Vec::new();
        let n = p.frame_into(&mut out);
        assert_eq!(n, out.len());
        assert_eq!(n % ALIGN, 0);
        out
    }

    #[test]
    fn records_round_trip() {
        let buf = commit(7, &[(0, b"k1", Some(b"v1")), (3, b"k2", None), (0, b"k3", Some(b""))]);
        let (rec, used) = decode(&buf).unwrap();
        assert_eq!(used, buf.len());
        assert_eq!(
            rec,
            Record::Commit {
                ts: 7,
                ops: vec![
                    Op { table: 0, key: b"k1", value: Some(b"v1") },
                    Op { table: 3, key: b"k2", value: None },
                    Op { table: 0, key: b"k3", value: Some(b"") },
                ]
            }
        );
        let mut p = Payload::default();
        p.create_table(5, "users");
        p.set_ts(9);
        let mut out = Vec::new();
        p.frame_into(&mut out);
        assert_eq!(decode(&out).unwrap().0, Record::CreateTable { ts: 9, id: 5, name: "users" });
    }

    #[test]
    fn a_large_commit_is_cut_into_parts_that_each_fit_a_record() {
        let mut p = Payload::with_part_bytes(100);
        p.start_commit();
        let values: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 30 + 7 * i as usize]).collect();
        for (i, v) in values.iter().enumerate() {
            p.push_op(1, &[i as u8], Some(v));
        }
        p.set_ts(77);
        let mut out = Vec::new();
        let n = p.frame_into(&mut out);
        assert_eq!(n, out.len());
        let mut pos = 0;
        let mut ops = Vec::new();
        let mut kinds = Vec::new();
        while pos < out.len() {
            let (rec, used) = decode(&out[pos..]).unwrap();
            assert_eq!(rec.ts(), 77, "every part carries the timestamp");
            match rec {
                Record::Part { ops: o, .. } => {
                    kinds.push('p');
                    ops.extend(o);
                }
                Record::Commit { ops: o, .. } => {
                    kinds.push('c');
                    ops.extend(o);
                }
                other => panic!("{other:?}"),
            }
            pos += used;
        }
        assert!(kinds.len() > 2 && kinds.last() == Some(&'c'), "{kinds:?}");
        assert!(kinds[..kinds.len() - 1].iter().all(|&k| k == 'p'), "{kinds:?}");
        let got: Vec<&[u8]> = ops.iter().map(|o| o.value.unwrap()).collect();
        assert_eq!(got, values.iter().map(Vec::as_slice).collect::<Vec<_>>(), "the ops in order, none lost");
        // A commit that fits one part is one record, as before parts existed.
        let mut p = Payload::default();
        p.start_commit();
        p.push_op(0, b"k", Some(b"v"));
        let mut out = Vec::new();
        p.frame_into(&mut out);
        assert!(matches!(decode(&out).unwrap(), (Record::Commit { .. }, n) if n == out.len()));
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_detected() {
        let buf = commit(42, &[(1, b"key", Some(b"value"))]);
        let payload_end = FRAME + u32::from_le_bytes(buf[4..8].try_into().unwrap()) as usize;
        for bit in 0..payload_end * 8 {
            let mut b = buf.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&b).is_err(), "flipping bit {bit} went unnoticed");
        }
        for cut in 0..payload_end {
            assert_eq!(decode(&buf[..cut]).unwrap_err(), Bad::Truncated, "cut at {cut}");
        }
        assert!(decode(&[0u8; 64]).is_err(), "zeros are not a record");
    }
}
