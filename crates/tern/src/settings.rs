//! The database's settings file: what its stored data depends on, fixed when it is created.
//!
//! The page size bounds the length of a key (an eighth of a page), so a database written with
//! 16 KiB pages holds keys that 4 KiB pages cannot: it must be read back with the page size it
//! was created with, whatever the options of a later open say. `SETTINGS` records it; opening
//! an existing database takes it from there ([`crate::Db::options`] reports the page size in
//! use), and the option only applies when a database is created.
//!
//! # Invariants
//! 1. `SETTINGS` is written once, before the first log file, under a temporary name, synced and
//!    renamed into place (then the directory synced): it is either absent or complete. A
//!    leftover `SETTINGS.tmp` is removed at open.
//! 2. A database without `SETTINGS` was created by tern before the file existed (or never got
//!    past its creation): it opens with the options given, and once it has been recovered with
//!    them, they are recorded.
//!
//! # Format
//! One 32-byte header as log and checkpoint files have (`TERNSET1`, format version, page
//! size, crc32c of the rest).

use crate::btree::TreeConfig;
use crate::fs::{write_all, Fs};
use crate::wal::record::{file_header, parse_file_header};
use crate::{Error, Result};
use std::path::Path;

const MAGIC: &[u8; 8] = b"TERNSET1";
/// The version of the format of the files this tern writes.
const FORMAT: u64 = 1;
/// The file's name in the database directory.
pub(crate) const FILE: &str = "SETTINGS";
const TMP: &str = "SETTINGS.tmp";

/// What a database's stored data depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Page size in bytes.
    pub page_size: usize,
}

impl Settings {
    /// The settings a database created with `tree` gets.
    pub fn of(tree: &TreeConfig) -> Settings {
        Settings { page_size: tree.page_size }
    }

    /// `tree` with these settings applied.
    pub fn apply(&self, tree: TreeConfig) -> TreeConfig {
        TreeConfig { page_size: self.page_size, ..tree }
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

fn corruption(reason: impl Into<String>) -> Error {
    Error::Corruption { file: FILE.into(), offset: 0, reason: reason.into() }
}

/// The settings of the database in `dir`, or `None` if it has no settings file.
pub(crate) fn read(fs: &dyn Fs, dir: &Path) -> Result<Option<Settings>> {
    let names = fs.list(dir).map_err(io(format!("listing {}", dir.display())))?;
    if !names.iter().any(|n| n == FILE) {
        return Ok(None);
    }
    let bytes = fs.read_all(&dir.join(FILE)).map_err(io(format!("reading {FILE}")))?;
    let Some((format, page_size)) = parse_file_header(MAGIC, &bytes) else {
        return Err(corruption("not a tern settings file (bad header or checksum)"));
    };
    if format != FORMAT {
        return Err(corruption(format!("settings format {format}; this tern reads format {FORMAT}")));
    }
    let page_size = usize::try_from(page_size).unwrap_or(0);
    let tree = TreeConfig { page_size, ..TreeConfig::default() };
    if tree.validate().is_err() {
        return Err(corruption(format!("a page size of {page_size} bytes")));
    }
    Ok(Some(Settings { page_size }))
}

/// Records `settings` in `dir` (invariant 1).
pub(crate) fn write(fs: &dyn Fs, dir: &Path, settings: &Settings) -> Result<()> {
    let mut file = fs.create(&dir.join(TMP)).map_err(io(format!("creating {TMP}")))?;
    write_all(&mut *file, &file_header(MAGIC, FORMAT, settings.page_size as u64))
        .map_err(io(format!("writing {TMP}")))?;
    file.sync().map_err(io(format!("syncing {TMP}")))?;
    fs.rename(&dir.join(TMP), &dir.join(FILE)).map_err(io(format!("renaming {TMP} to {FILE}")))?;
    fs.sync_dir(dir).map_err(io(format!("syncing directory {}", dir.display())))
}

/// Whether `name` is a settings file whose writing did not finish.
pub(crate) fn is_unfinished(name: &str) -> bool {
    name == TMP
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_damage_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::fs::StdFs;
        assert_eq!(read(&fs, dir.path()).unwrap(), None);
        write(&fs, dir.path(), &Settings { page_size: 8192 }).unwrap();
        assert_eq!(read(&fs, dir.path()).unwrap(), Some(Settings { page_size: 8192 }));
        assert!(!dir.path().join(TMP).exists());
        let mut bytes = std::fs::read(dir.path().join(FILE)).unwrap();
        bytes[17] ^= 1;
        std::fs::write(dir.path().join(FILE), &bytes).unwrap();
        assert!(matches!(read(&fs, dir.path()), Err(Error::Corruption { .. })));
        std::fs::write(dir.path().join(FILE), file_header(MAGIC, FORMAT, 1000)).unwrap();
        let err = read(&fs, dir.path()).unwrap_err();
        assert!(err.to_string().contains("page size of 1000"), "{err}");
    }
}
