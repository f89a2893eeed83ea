//! `tern get`, `put`, `delete` and `scan`: inspection and small fixes, each in one transaction.
//!
//! Keys and values on the command line are text, in which `\\` stands for a backslash and
//! `\xx` for the byte with hex value `xx` (the escapes of the dump's `print` format), or hex
//! with `--hex`. Output uses the same encoding.

use crate::opendb::{self, Create};
use crate::output::{self, Failure, Output};
use std::ops::Bound;
use std::path::PathBuf;

/// Options every one of these commands takes.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// The database directory. It must not be open in another process.
    pub path: PathBuf,
    /// The table ("" or absent: the default table).
    #[arg(long, default_value = "", value_name = "NAME")]
    pub table: String,
    /// Keys and values given and printed as hex instead of escaped text.
    #[arg(long)]
    pub hex: bool,
}

/// Options of `tern get`.
#[derive(clap::Args, Debug)]
pub struct GetCmd {
    #[command(flatten)]
    pub target: Target,
    /// The keys to read.
    #[arg(required = true, value_name = "KEY")]
    pub keys: Vec<String>,
}

/// Options of `tern put`.
#[derive(clap::Args, Debug)]
pub struct PutCmd {
    #[command(flatten)]
    pub target: Target,
    /// Keys and values, alternating: KEY VALUE [KEY VALUE ...], written in one transaction.
    #[arg(required = true, value_name = "KEY VALUE")]
    pub pairs: Vec<String>,
}

/// Options of `tern delete`.
#[derive(clap::Args, Debug)]
pub struct DeleteCmd {
    #[command(flatten)]
    pub target: Target,
    /// The keys to delete, in one transaction.
    #[arg(required = true, value_name = "KEY")]
    pub keys: Vec<String>,
}

/// Options of `tern scan`.
#[derive(clap::Args, Debug)]
pub struct ScanCmd {
    #[command(flatten)]
    pub target: Target,
    /// The first key (inclusive).
    #[arg(long, value_name = "KEY")]
    pub from: Option<String>,
    /// The key to stop before (exclusive).
    #[arg(long, value_name = "KEY")]
    pub to: Option<String>,
    /// Print at most this many entries.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Walk from the last key down.
    #[arg(long)]
    pub reverse: bool,
    /// One JSON object per entry ({"key": ..., "value": ...}, encoded as the other output).
    #[arg(long)]
    pub json: bool,
}

/// Decodes a command-line key or value.
pub fn decode(text: &str, hex: bool) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    if hex {
        if bytes.len() % 2 != 0 {
            return Err(format!("{text:?}: an odd number of hex digits"));
        }
        for pair in bytes.chunks_exact(2) {
            match (digit(pair[0]), digit(pair[1])) {
                (Some(h), Some(l)) => out.push(h << 4 | l),
                _ => return Err(format!("{text:?}: not hex")),
            }
        }
        return Ok(out);
    }
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1).copied(), bytes.get(i + 2).copied()) {
            (b'\\', Some(b'\\'), _) => {
                out.push(b'\\');
                i += 2;
            }
            (b'\\', Some(h), Some(l)) if digit(h).is_some() && digit(l).is_some() => {
                out.push(digit(h).unwrap_or(0) << 4 | digit(l).unwrap_or(0));
                i += 3;
            }
            (b'\\', _, _) => return Err(format!("{text:?}: a backslash starts \\\\ or \\xx (two hex digits)")),
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Encodes bytes for output.
pub fn encode(bytes: &[u8], hex: bool) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        if hex {
            s.push_str(&format!("{b:02x}"));
        } else if b == b'\\' {
            s.push_str("\\\\");
        } else if (0x20..0x7f).contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\{b:02x}"));
        }
    }
    s
}

/// `tern get`: prints each key's value, one per line; a missing key is an error (after the
/// others are printed).
pub fn get(cmd: GetCmd) -> Result<(), Failure> {
    let t = &cmd.target;
    let keys: Vec<Vec<u8>> = cmd.keys.iter().map(|k| decode(k, t.hex)).collect::<Result<_, _>>()?;
    opendb::with(&t.path, Create::No, |db| {
        let txn = db.begin_read().map_err(|e| e.to_string())?;
        let table = txn.table(&t.table).map_err(|e| e.to_string())?;
        let mut out = Output::new();
        let mut missing = Vec::new();
        for (key, shown) in keys.iter().zip(&cmd.keys) {
            match txn.get_in(&table, key).map_err(|e| e.to_string())? {
                Some(v) => out.line(encode(&v, t.hex))?,
                None => missing.push(shown.clone()),
            }
        }
        out.finish()?;
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("not found: {}", missing.join(" ")).into())
        }
    })
}

/// `tern put`: writes every pair in one transaction; the count is printed once the database is
/// closed.
pub fn put(cmd: PutCmd) -> Result<(), Failure> {
    let t = &cmd.target;
    if cmd.pairs.len() % 2 != 0 {
        return Err(format!("put takes KEY VALUE pairs; {} arguments were given", cmd.pairs.len()).into());
    }
    let pairs: Vec<Vec<u8>> = cmd.pairs.iter().map(|k| decode(k, t.hex)).collect::<Result<_, _>>()?;
    opendb::with(&t.path, Create::No, |db| -> Result<(), String> {
        let mut txn = db.begin().map_err(|e| e.to_string())?;
        let table = txn.table(&t.table).map_err(|e| e.to_string())?;
        for pair in pairs.chunks_exact(2) {
            txn.put_in(&table, &pair[0], &pair[1]).map_err(|e| e.to_string())?;
        }
        txn.commit().map_err(|e| format!("committing: {e}"))
    })?;
    output::line(format_args!("put {} entries", pairs.len() / 2))
}

/// `tern delete`: deletes every key in one transaction; keys that were not there are named
/// (printed once the database is closed).
pub fn delete(cmd: DeleteCmd) -> Result<(), Failure> {
    let t = &cmd.target;
    let keys: Vec<Vec<u8>> = cmd.keys.iter().map(|k| decode(k, t.hex)).collect::<Result<_, _>>()?;
    let missing = opendb::with(&t.path, Create::No, |db| -> Result<Vec<&str>, String> {
        let mut txn = db.begin().map_err(|e| e.to_string())?;
        let table = txn.table(&t.table).map_err(|e| e.to_string())?;
        let mut missing = Vec::new();
        for (key, shown) in keys.iter().zip(&cmd.keys) {
            if !txn.delete_in(&table, key).map_err(|e| e.to_string())? {
                missing.push(shown.as_str());
            }
        }
        txn.commit().map_err(|e| format!("committing: {e}"))?;
        Ok(missing)
    })?;
    let deleted = keys.len() - missing.len();
    if missing.is_empty() {
        output::line(format_args!("deleted {deleted} entries"))
    } else {
        output::line(format_args!("deleted {deleted} entries; not found: {}", missing.join(" ")))
    }
}

/// `tern scan`: prints entries in key order (or reverse), `KEY VALUE` per line separated by a
/// tab, or JSON lines.
pub fn scan(cmd: ScanCmd) -> Result<(), Failure> {
    let t = &cmd.target;
    let from = cmd.from.as_deref().map(|k| decode(k, t.hex)).transpose()?;
    let to = cmd.to.as_deref().map(|k| decode(k, t.hex)).transpose()?;
    opendb::with(&t.path, Create::No, |db| {
        let txn = db.begin_read().map_err(|e| e.to_string())?;
        let table = txn.table(&t.table).map_err(|e| e.to_string())?;
        let start = from.as_deref().map_or(Bound::Unbounded, Bound::Included);
        let end = to.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut cursor = txn.cursor_in(&table, (start, end)).map_err(|e| e.to_string())?;
        let mut entry = if cmd.reverse { cursor.last() } else { cursor.first() }.map_err(|e| e.to_string())?;
        let mut shown = 0u64;
        let mut out = Output::new();
        while let Some((k, v)) = entry {
            if cmd.limit.is_some_and(|l| shown >= l) {
                break;
            }
            let (k, v) = (encode(k, t.hex), encode(v, t.hex));
            let line =
                if cmd.json { serde_json::json!({ "key": k, "value": v }).to_string() } else { format!("{k}\t{v}") };
            out.line(line)?;
            shown += 1;
            entry = if cmd.reverse { cursor.prev() } else { cursor.next() }.map_err(|e| e.to_string())?;
        }
        out.finish()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_hex_round_trip_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        for hex in [false, true] {
            assert_eq!(decode(&encode(&all, hex), hex).unwrap(), all);
        }
        assert_eq!(decode("a\\\\b\\00\\FF", false).unwrap(), b"a\\b\x00\xff");
        assert!(decode("a\\q", false).is_err());
        assert!(decode("abc", true).is_err());
        assert!(decode("zz", true).is_err());
    }
}
