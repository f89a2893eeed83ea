//! The text dump format that Berkeley DB's `db_dump`/`db_load` and LMDB's `mdb_dump`/`mdb_load`
//! share, read and written (used by `tern dump` and `tern load`).
//!
//! A dump is one or more sections, one per database (tern: per table):
//!
//! ```text
//! VERSION=3
//! format=bytevalue        (or print)
//! database=NAME           (absent for the default table / main database; written with a
//!                          backslash doubled and control bytes as \xx, read the same way)
//! type=btree
//! HEADER=END
//!  6b6579                 (a key: one space, then hex pairs; or printable text with \xx escapes)
//!  76616c7565             (its value)
//! DATA=END
//! ```
//!
//! Reading accepts what both tool families write: any other header keyword (`mapsize=`,
//! `db_pagesize=`, `maxreaders=`, ...) is ignored, `type=hash` is accepted (its keys are simply
//! stored in order), and in `print` format a backslash not followed by a second backslash or
//! two hex digits stands for itself (`mdb_dump -p` writes a lone backslash that way). What tern
//! cannot hold is an error naming the line: duplicate keys (`duplicates=1`, `dupsort=1`),
//! record-number databases (`type=recno`, `type=queue`), a `database=` name that is not UTF-8
//! (table names are text), a `VERSION` other than 3. A key or
//! value line the input ends in, without its newline, is an error too (a cut dump: the line
//! may be part of a longer one); a last `DATA=END` may lack its newline.

use std::io::{self, BufRead, Write};

/// How keys and values are written on their lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Hex pairs (`db_dump`'s and `mdb_dump`'s default).
    Bytevalue,
    /// Printable ASCII as itself, a backslash doubled, other bytes as `\xx` (`-p`).
    Print,
}

impl Format {
    fn keyword(self) -> &'static str {
        match self {
            Format::Bytevalue => "bytevalue",
            Format::Print => "print",
        }
    }
}

/// What a section's header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub format: Format,
    /// `database=NAME`: the table; `None` for the default table.
    pub database: Option<String>,
    /// The line the header began on (for messages).
    pub line: u64,
}

/// Writes a dump.
pub struct Writer<W: Write> {
    out: W,
    format: Format,
    /// Extra header lines (`mapsize=...`), written after `type=btree`.
    extra: Vec<String>,
    line: Vec<u8>,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W, format: Format, extra: Vec<String>) -> Writer<W> {
        Writer { out, format, extra, line: Vec::new() }
    }

    /// Starts a section for table `database` (`None`: the default table).
    pub fn begin(&mut self, database: Option<&str>) -> io::Result<()> {
        writeln!(self.out, "VERSION=3")?;
        writeln!(self.out, "format={}", self.format.keyword())?;
        if let Some(name) = database {
            // Escaped as `print` lines are, but for printable UTF-8: a line break, a carriage
            // return or a backslash in a name would otherwise end or change it.
            let mut line = b"database=".to_vec();
            escape_print(name.as_bytes(), |b| b.is_ascii_control() || b == b'\\', &mut line);
            line.push(b'\n');
            self.out.write_all(&line)?;
        }
        writeln!(self.out, "type=btree")?;
        for line in &self.extra {
            writeln!(self.out, "{line}")?;
        }
        writeln!(self.out, "HEADER=END")
    }

    /// Writes one key and its value.
    pub fn entry(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.item(key)?;
        self.item(value)
    }

    fn item(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.line.clear();
        self.line.push(b' ');
        match self.format {
            Format::Bytevalue => {
                for &b in bytes {
                    self.line.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
                }
            }
            Format::Print => escape_print(bytes, |b| !(0x20..0x7f).contains(&b), &mut self.line),
        }
        self.line.push(b'\n');
        self.out.write_all(&self.line)
    }

    /// Ends the current section.
    pub fn end(&mut self) -> io::Result<()> {
        writeln!(self.out, "DATA=END")
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads a dump, section by section.
pub struct Reader<R: BufRead> {
    input: R,
    line: Vec<u8>,
    line_no: u64,
    /// The line of the last entry's key.
    entry_line: u64,
    /// Whether `line` ended with a newline (the last line of the input may not).
    line_ended: bool,
    format: Format,
    in_data: bool,
}

impl<R: BufRead> Reader<R> {
    pub fn new(input: R) -> Reader<R> {
        Reader {
            input,
            line: Vec::new(),
            line_no: 0,
            entry_line: 0,
            line_ended: false,
            format: Format::Bytevalue,
            in_data: false,
        }
    }

    /// Reads the next line into `self.line` without its line ending; false at the end.
    fn read_line(&mut self) -> Result<bool, String> {
        self.line.clear();
        let n = self.input.read_until(b'\n', &mut self.line).map_err(|e| format!("reading the dump: {e}"))?;
        if n == 0 {
            return Ok(false);
        }
        self.line_no += 1;
        self.line_ended = self.line.last() == Some(&b'\n');
        if self.line_ended {
            self.line.pop();
        }
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        Ok(true)
    }

    fn error(&self, what: impl std::fmt::Display) -> String {
        format!("line {}: {what}", self.line_no)
    }

    /// Reads the next section's header; `None` at the end of the input. The previous section's
    /// entries must have been read to its `DATA=END`.
    pub fn next_section(&mut self) -> Result<Option<Header>, String> {
        assert!(!self.in_data, "the previous section was not read to its end");
        // Blank lines between sections are tolerated.
        loop {
            if !self.read_line()? {
                return Ok(None);
            }
            if !self.line.iter().all(u8::is_ascii_whitespace) {
                break;
            }
        }
        let start = self.line_no;
        let mut format = None;
        let mut database = None;
        let mut first = true;
        loop {
            let text = String::from_utf8_lossy(&self.line).into_owned();
            let (keyword, value) = text
                .split_once('=')
                .ok_or_else(|| self.error(format!("expected KEYWORD=VALUE in the header, got {text:?}")))?;
            if first && keyword != "VERSION" {
                return Err(self.error(format!("a section starts with VERSION=3, got {text:?}")));
            }
            first = false;
            match keyword {
                "VERSION" if value != "3" => return Err(self.error(format!("unsupported dump VERSION={value} (tern reads VERSION=3)"))),
                "format" => {
                    format = Some(match value {
                        "bytevalue" => Format::Bytevalue,
                        "print" => Format::Print,
                        other => return Err(self.error(format!("unknown format={other} (bytevalue or print)"))),
                    })
                }
                "database" | "subdatabase" => {
                    let mut name = Vec::new();
                    unescape_print(&self.line[keyword.len() + 1..], &mut name);
                    match String::from_utf8(name) {
                        Ok(name) => database = Some(name),
                        Err(e) => {
                            let name = crate::kv::encode(e.as_bytes(), false);
                            return Err(self.error(format!(
                                "{keyword}={name}: the name is not UTF-8 (tern table names are text)"
                            )));
                        }
                    }
                }
                "type" if value == "btree" || value == "hash" => {}
                "type" if value == "recno" || value == "queue" => {
                    return Err(self.error(format!(
                        "type={value}: tern tables are keyed by bytes; record-number databases (recno, queue) cannot be loaded"
                    )))
                }
                "type" => {
                    return Err(self.error(format!(
                        "type={value}: an unknown database type (tern loads type=btree and type=hash)"
                    )))
                }
                "duplicates" | "dupsort" | "dupfixed" if value != "0" => {
                    return Err(self.error(format!("{keyword}={value}: tern tables hold one value per key; this dump has duplicates")))
                }
                "HEADER" if value == "END" => break,
                _ => {} // mapsize, db_pagesize, maxreaders, keys, ...: nothing tern needs
            }
            if !self.read_line()? {
                return Err(self.error("the input ends inside a header (no HEADER=END)"));
            }
        }
        let format = format.ok_or_else(|| format!("line {start}: the header has no format= line"))?;
        self.format = format;
        self.in_data = true;
        Ok(Some(Header { format, database, line: start }))
    }

    /// Reads the next key and value of the current section into `key` and `value`; false at
    /// `DATA=END`.
    pub fn next_entry(&mut self, key: &mut Vec<u8>, value: &mut Vec<u8>) -> Result<bool, String> {
        assert!(self.in_data, "next_entry outside a section");
        if !self.read_item(key)? {
            self.in_data = false;
            return Ok(false);
        }
        self.entry_line = self.line_no;
        if !self.read_item(value)? {
            return Err(self.error("a key without a value: DATA=END after an odd number of lines"));
        }
        Ok(true)
    }

    /// The line of the key of the entry [`Reader::next_entry`] read last (for messages about
    /// the entry).
    pub fn entry_line(&self) -> u64 {
        self.entry_line
    }

    /// Reads one data line into `out`; false at `DATA=END`.
    fn read_item(&mut self, out: &mut Vec<u8>) -> Result<bool, String> {
        if !self.read_line()? {
            return Err(self.error("the input ends inside a section (no DATA=END)"));
        }
        if self.line == b"DATA=END" {
            return Ok(false);
        }
        if !self.line_ended {
            // A dump cut short: the line may be part of a longer key or value.
            return Err(self.error("the input ends inside this data line (no newline after it): an incomplete entry"));
        }
        if self.line.first() != Some(&b' ') {
            return Err(self.error(format!(
                "a data line starts with one space, got {:?}",
                String::from_utf8_lossy(&self.line[..self.line.len().min(40)])
            )));
        }
        out.clear();
        let body = &self.line[1..];
        match self.format {
            Format::Bytevalue => {
                if body.len() % 2 != 0 {
                    return Err(self.error("an odd number of hex digits"));
                }
                for pair in body.chunks_exact(2) {
                    match (hex(pair[0]), hex(pair[1])) {
                        (Some(h), Some(l)) => out.push(h << 4 | l),
                        _ => {
                            return Err(self.error(format!("not a hex digit pair: {:?}", String::from_utf8_lossy(pair))))
                        }
                    }
                }
            }
            Format::Print => unescape_print(body, out),
        }
        Ok(true)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `bytes` to `out` as `print` text: a backslash doubled, each byte `escaped` says as
/// `\xx`, the others as themselves.
fn escape_print(bytes: &[u8], escaped: impl Fn(u8) -> bool, out: &mut Vec<u8>) {
    for &b in bytes {
        if b == b'\\' {
            out.extend_from_slice(b"\\\\");
        } else if escaped(b) {
            out.extend_from_slice(&[b'\\', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.push(b);
        }
    }
}

/// Appends the bytes `print` text stands for to `out`: `\\` a backslash, `\xx` a byte, and a
/// backslash followed by neither itself (as `mdb_dump -p` writes a lone one).
fn unescape_print(body: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
        } else if body.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else if let (Some(h), Some(l)) =
            (body.get(i + 1).copied().and_then(hex), body.get(i + 2).copied().and_then(hex))
        {
            out.push(h << 4 | l);
            i += 3;
        } else {
            out.push(b'\\');
            i += 1;
        }
    }
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    fn dump(format: Format, sections: &[(Option<&str>, Entries)]) -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), format, Vec::new());
        for (name, entries) in sections {
            w.begin(*name).unwrap();
            for (k, v) in entries {
                w.entry(k, v).unwrap();
            }
            w.end().unwrap();
        }
        w.finish().unwrap()
    }

    fn read_all(input: &[u8]) -> Result<Vec<(Option<String>, Entries)>, String> {
        let mut r = Reader::new(input);
        let mut out = Vec::new();
        while let Some(h) = r.next_section()? {
            let (mut k, mut v) = (Vec::new(), Vec::new());
            let mut entries = Vec::new();
            while r.next_entry(&mut k, &mut v)? {
                entries.push((k.clone(), v.clone()));
            }
            out.push((h.database, entries));
        }
        Ok(out)
    }

    #[test]
    fn every_byte_value_round_trips_in_both_formats() {
        let all: Vec<u8> = (0..=255).collect();
        let entries = vec![
            (all.clone(), all.iter().rev().copied().collect()),
            (b"\\".to_vec(), Vec::new()),
            (Vec::new(), b"x".to_vec()),
        ];
        for format in [Format::Bytevalue, Format::Print] {
            let text = dump(format, &[(None, entries.clone()), (Some("t"), vec![(b"k".to_vec(), b"v".to_vec())])]);
            let back = read_all(&text).unwrap();
            assert_eq!(back, vec![(None, entries.clone()), (Some("t".into()), vec![(b"k".to_vec(), b"v".to_vec())])]);
        }
    }

    #[test]
    fn writes_what_db_dump_writes() {
        let text = dump(Format::Print, &[(Some("t1"), vec![(b"k\\1".to_vec(), vec![0, 0xff, b'a'])])]);
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "VERSION=3\nformat=print\ndatabase=t1\ntype=btree\nHEADER=END\n k\\\\1\n \\00\\ffa\nDATA=END\n"
        );
    }

    /// Every name the API accepts comes back: line breaks, carriage returns, backslashes and
    /// control characters are escaped on the `database=` line (a name with a line break was
    /// read back cut, or as another header line), other UTF-8 is written as itself.
    #[test]
    fn every_table_name_survives_a_dump_and_a_load() {
        let names = ["evil\nmapsize=1", "cr\r", "back\\slash", "a\\ff", "tab\tbell\u{7}", "ünïcode", "\\"];
        for format in [Format::Bytevalue, Format::Print] {
            let sections: Vec<(Option<&str>, Entries)> =
                names.iter().map(|n| (Some(*n), vec![(b"k".to_vec(), b"v".to_vec())])).collect();
            let text = dump(format, &sections);
            let back = read_all(&text).unwrap();
            let got: Vec<Option<String>> = back.into_iter().map(|(name, _)| name).collect();
            assert_eq!(got, names.iter().map(|n| Some(n.to_string())).collect::<Vec<_>>());
            let text = String::from_utf8(text).unwrap();
            assert!(text.contains("database=evil\\0amapsize=1\n") && text.contains("database=ünïcode\n"), "{text}");
        }
    }

    #[test]
    fn reads_the_tools_extra_header_lines_and_mdb_dumps_lone_backslash() {
        let text = "VERSION=3\nformat=print\ntype=btree\nmapsize=1048576\nmaxreaders=126\ndb_pagesize=4096\nHEADER=END\n \\0a\\\n x\\\r\nDATA=END\n\n";
        assert_eq!(read_all(text.as_bytes()).unwrap(), vec![(None, vec![(b"\n\\".to_vec(), b"x\\".to_vec())])]);
    }

    #[test]
    fn a_last_line_without_its_newline_is_read_if_it_ends_the_section() {
        let text = "VERSION=3\nformat=print\ntype=btree\nHEADER=END\n k\r\n v\r\nDATA=END";
        assert_eq!(read_all(text.as_bytes()).unwrap(), vec![(None, vec![(b"k".to_vec(), b"v".to_vec())])]);
    }

    #[test]
    fn what_tern_cannot_hold_is_an_error_naming_the_line() {
        let cases = [
            ("VERSION=2\nformat=bytevalue\nHEADER=END\nDATA=END\n", "line 1: unsupported dump VERSION=2"),
            ("VERSION=3\nformat=bytevalue\nduplicates=1\nHEADER=END\nDATA=END\n", "line 3: duplicates=1"),
            ("VERSION=3\nformat=bytevalue\ntype=recno\nHEADER=END\nDATA=END\n", "line 3: type=recno: tern tables"),
            ("VERSION=3\nformat=bytevalue\ntype=heap\nHEADER=END\nDATA=END\n", "line 3: type=heap: an unknown"),
            ("VERSION=3\nformat=bytevalue\nHEADER=END\n 6b\nDATA=END\n", "line 5: a key without a value"),
            ("VERSION=3\nformat=bytevalue\nHEADER=END\n 6\n 6b\nDATA=END\n", "line 4: an odd number of hex digits"),
            ("VERSION=3\nformat=bytevalue\nHEADER=END\n zz\n 6b\nDATA=END\n", "line 4: not a hex digit pair"),
            ("VERSION=3\nformat=bytevalue\nHEADER=END\nkey\n", "line 4: a data line starts with one space"),
            ("VERSION=3\nformat=bytevalue\nHEADER=END\n 6b\n", "line 4: the input ends inside a section"),
            ("VERSION=3\nformat=bytevalue\nHEADER=END\n 6b\n 6b6b", "line 5: the input ends inside this data line"),
            ("VERSION=3\nformat=print\nHEADER=END\n kk", "line 4: the input ends inside this data line"),
            ("VERSION=3\nformat=bytevalue\n", "line 2: the input ends inside a header"),
            ("VERSION=3\ntype=btree\nHEADER=END\nDATA=END\n", "line 1: the header has no format= line"),
            ("format=print\n", "line 1: a section starts with VERSION=3"),
        ];
        for (text, want) in cases {
            let err = read_all(text.as_bytes()).unwrap_err();
            assert!(err.starts_with(want), "{text:?}: {err}");
        }
        let not_utf8 = b"VERSION=3\nformat=bytevalue\ndatabase=a\xff\nHEADER=END\nDATA=END\n";
        assert_eq!(
            read_all(not_utf8).unwrap_err(),
            "line 3: database=a\\ff: the name is not UTF-8 (tern table names are text)"
        );
    }
}
