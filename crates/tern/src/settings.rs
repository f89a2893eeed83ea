//! The database's settings file: what its stored data depends on, fixed when it is created.
//!
//! Three tree options shape the pages a database stores, so it must be read back with the ones
//! it was created with, whatever the options of a later open say:
//!
//! * the **page size**, which also bounds the length of a key (an eighth of a page): a
//!   database written with 16 KiB pages holds keys that 4 KiB pages cannot;
//! * the **search layout** (`TreeConfig::layout`): the Eytzinger and B-tree layouts keep a
//!   search array of their own in every node, which the slot-array layouts neither write nor
//!   keep in order; a tree searched with another layout than it was built with misses keys
//!   and writes entries out of order;
//! * whether nodes keep **hint arrays** (`TreeConfig::hints`), which `tern check` verifies
//!   against the setting.
//!
//! `SETTINGS` records them; opening an existing database takes them from there
//! ([`crate::Db::options`] reports the ones in use), and the options only apply when a database
//! is created.
//!
//! # Invariants
//! 1. `SETTINGS` is written once, before the first log file, under a temporary name, synced and
//!    renamed into place (then the directory synced): it is either absent or complete. A
//!    leftover `SETTINGS.tmp` is removed at open. (It is rewritten the same way at most once
//!    more, to set bit 41: invariant 4.)
//! 2. A database without `SETTINGS` was created by tern before the file existed (or never got
//!    past its creation): it opens with the options given, and once it has been recovered with
//!    them, they are recorded.
//! 3. A format-1 file records the page size only (tern before 2026-11-28): such a database
//!    opens with the layout and hints of the options given, as every open did then, and the
//!    file is left as it is. (Completing it from the options of some later open would record
//!    a guess for good: `tern` commands open with the default options.)
//! 4. Format 2's bit 41 says nodes may keep their key heads past bytes all their keys share
//!    (tern since 2026-12-07, `btree/node.rs`), which an earlier tern would misread; it refuses
//!    unknown bits. Every format-2 file this tern writes sets it, and opening a format-2
//!    database without it sets it before anything else is written. A format-1 file is left as
//!    it is (invariant 3): an earlier tern can still open such a database after this one wrote
//!    to it, and may then miss keys.
//!
//! # Format
//! One 32-byte header as log and checkpoint files have (`TERNSET1`, format version, one
//! number, crc32c of the rest). Format 1: the number is the page size. Format 2: bits 0..32
//! the page size, bits 32..40 the layout (0 sorted, 1 branch-free, 2 Eytzinger, 3 B-tree), bit
//! 40 hints kept, bit 41 [`SHARED_HEADS`].

use crate::btree::{Layout, TreeConfig};
use crate::fs::{write_all, Fs};
use crate::wal::record::{file_header, parse_file_header};
use crate::{Error, Result};
use std::path::Path;

const MAGIC: &[u8; 8] = b"TERNSET1";
/// The version of the format of the files this tern writes.
const FORMAT: u64 = 2;
/// The format that records the page size only (invariant 3).
const FORMAT_PAGE_SIZE_ONLY: u64 = 1;
/// Format 2, bit 41: nodes may keep key heads past shared bytes (invariant 4).
const SHARED_HEADS: u64 = 1 << 41;
/// The file's name in the database directory.
pub(crate) const FILE: &str = "SETTINGS";
const TMP: &str = "SETTINGS.tmp";

/// What a database's stored data depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Page size in bytes.
    pub page_size: usize,
    /// The search layout and whether nodes keep hint arrays; `None` in a format-1 file, which
    /// did not record them (invariant 3).
    pub shape: Option<(Layout, bool)>,
    /// Whether the file says nodes may keep key heads past shared bytes (invariant 4).
    pub shared_heads: bool,
}

impl Settings {
    /// The settings a database created with `tree` gets.
    pub fn of(tree: &TreeConfig) -> Settings {
        Settings { page_size: tree.page_size, shape: Some((tree.layout, tree.hints)), shared_heads: true }
    }

    /// `tree` with these settings applied.
    pub fn apply(&self, tree: TreeConfig) -> TreeConfig {
        let (layout, hints) = self.shape.unwrap_or((tree.layout, tree.hints));
        TreeConfig { page_size: self.page_size, layout, hints, ..tree }
    }
}

/// The layout's number in the file.
fn layout_code(layout: Layout) -> u64 {
    match layout {
        Layout::Sorted => 0,
        Layout::BranchFree => 1,
        Layout::Eytzinger => 2,
        Layout::BTree => 3,
    }
}

fn layout_of(code: u64) -> Option<Layout> {
    Some(match code {
        0 => Layout::Sorted,
        1 => Layout::BranchFree,
        2 => Layout::Eytzinger,
        3 => Layout::BTree,
        _ => return None,
    })
}

/// The format-2 number of `settings` (which are complete).
fn packed(settings: &Settings) -> u64 {
    let (layout, hints) = settings.shape.expect("settings are written complete");
    let shared = if settings.shared_heads { SHARED_HEADS } else { 0 };
    settings.page_size as u64 | layout_code(layout) << 32 | u64::from(hints) << 40 | shared
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
    let Some((format, number)) = parse_file_header(MAGIC, &bytes) else {
        return Err(corruption("not a tern settings file (bad header or checksum)"));
    };
    let (page_size, shape) = match format {
        FORMAT_PAGE_SIZE_ONLY => (number, None),
        FORMAT => {
            if number >> 42 != 0 {
                return Err(corruption(format!("unknown settings bits {:#x}", number >> 42 << 42)));
            }
            let Some(layout) = layout_of(number >> 32 & 0xFF) else {
                return Err(corruption(format!("unknown search layout {}", number >> 32 & 0xFF)));
            };
            (number & 0xFFFF_FFFF, Some((layout, number >> 40 & 1 == 1)))
        }
        _ => return Err(corruption(format!("settings format {format}; this tern reads formats 1 and {FORMAT}"))),
    };
    let page_size = usize::try_from(page_size).unwrap_or(0);
    let tree = TreeConfig { page_size, ..TreeConfig::default() };
    if tree.validate().is_err() {
        return Err(corruption(format!("a page size of {page_size} bytes")));
    }
    let shared_heads = format == FORMAT && number & SHARED_HEADS != 0;
    Ok(Some(Settings { page_size, shape, shared_heads }))
}

/// Records `settings` in `dir` (invariant 1).
pub(crate) fn write(fs: &dyn Fs, dir: &Path, settings: &Settings) -> Result<()> {
    let mut file = fs.create(&dir.join(TMP)).map_err(io(format!("creating {TMP}")))?;
    write_all(&mut *file, &file_header(MAGIC, FORMAT, packed(settings))).map_err(io(format!("writing {TMP}")))?;
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
        for layout in Layout::ALL {
            for (hints, shared_heads) in [(false, false), (false, true), (true, false), (true, true)] {
                let settings = Settings { page_size: 8192, shape: Some((layout, hints)), shared_heads };
                write(&fs, dir.path(), &settings).unwrap();
                assert_eq!(read(&fs, dir.path()).unwrap(), Some(settings));
            }
        }
        assert!(!dir.path().join(TMP).exists());
        let mut bytes = std::fs::read(dir.path().join(FILE)).unwrap();
        bytes[17] ^= 1;
        std::fs::write(dir.path().join(FILE), &bytes).unwrap();
        assert!(matches!(read(&fs, dir.path()), Err(Error::Corruption { .. })));
        std::fs::write(dir.path().join(FILE), file_header(MAGIC, FORMAT, 1 << 32 | 1000)).unwrap();
        let err = read(&fs, dir.path()).unwrap_err();
        assert!(err.to_string().contains("page size of 1000"), "{err}");
        std::fs::write(dir.path().join(FILE), file_header(MAGIC, FORMAT, 7 << 32 | 4096)).unwrap();
        let err = read(&fs, dir.path()).unwrap_err();
        assert!(err.to_string().contains("unknown search layout 7"), "{err}");
        std::fs::write(dir.path().join(FILE), file_header(MAGIC, FORMAT, 1 << 45 | 4096)).unwrap();
        let err = read(&fs, dir.path()).unwrap_err();
        assert!(err.to_string().contains("unknown settings bits"), "{err}");
        std::fs::write(dir.path().join(FILE), file_header(MAGIC, FORMAT, 1 << 32 | 4096)).unwrap();
        assert!(!read(&fs, dir.path()).unwrap().unwrap().shared_heads, "a file written before bit 41");
        std::fs::write(dir.path().join(FILE), file_header(MAGIC, 3, 4096)).unwrap();
        assert!(read(&fs, dir.path()).unwrap_err().to_string().contains("settings format 3"));
    }

    /// A database whose file predates bit 41 gets it at its next open, so an earlier tern
    /// refuses it from then on; a new database has it from the start.
    #[test]
    fn opening_a_database_from_before_shared_heads_marks_it() {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::fs::StdFs;
        crate::Db::open(dir.path(), crate::Options::default()).unwrap().close().unwrap();
        let created = read(&fs, dir.path()).unwrap().unwrap();
        assert!(created.shared_heads);
        std::fs::write(dir.path().join(FILE), file_header(MAGIC, FORMAT, packed(&created) & !SHARED_HEADS)).unwrap();
        assert!(!read(&fs, dir.path()).unwrap().unwrap().shared_heads);
        crate::Db::open(dir.path(), crate::Options::default()).unwrap().close().unwrap();
        assert_eq!(read(&fs, dir.path()).unwrap().unwrap(), created);
    }

    #[test]
    fn a_format_1_file_gives_the_page_size_and_leaves_the_shape_to_the_options() {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::fs::StdFs;
        std::fs::write(dir.path().join(FILE), file_header(MAGIC, FORMAT_PAGE_SIZE_ONLY, 8192)).unwrap();
        let settings = read(&fs, dir.path()).unwrap().unwrap();
        assert_eq!(settings, Settings { page_size: 8192, shape: None, shared_heads: false });
        let given = TreeConfig { layout: Layout::Eytzinger, hints: false, ..TreeConfig::default() };
        let applied = settings.apply(given);
        assert_eq!((applied.page_size, applied.layout, applied.hints), (8192, Layout::Eytzinger, false));
    }
}
