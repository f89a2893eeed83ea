//! Between the loads and the first measurement: every engine's files are made durable, so that
//! write-back one engine's load left in the OS page cache is not paid by whichever engine runs
//! next (`docs/driver.md`, *Jobs*).
//!
//! Only files are synced (`fsync` through a read-only handle, safe on Linux); nothing is
//! dropped from the page cache, and an engine's own dirty memory (tern's buffer pool) is left
//! to the engine. A file that cannot be synced (removed meanwhile by its engine, unreadable) is
//! a note, never a failure of the run.

use std::path::{Path, PathBuf};
use std::time::Instant;

/// What syncing the engines' directories did.
#[derive(Debug, Default)]
pub struct Settled {
    /// Files synced.
    pub files: usize,
    /// Seconds the syncs took.
    pub secs: f64,
    /// The machine's dirty plus write-back bytes (`/proc/meminfo`) before and after.
    pub pending_before: Option<u64>,
    pub pending_after: Option<u64>,
    /// Files that could not be synced, with why.
    pub failures: Vec<String>,
}

/// Syncs every file under each of `dirs` (recursively).
pub fn sync_dirs(dirs: &[PathBuf]) -> Settled {
    let mut settled = Settled { pending_before: pending_bytes(), ..Settled::default() };
    let start = Instant::now();
    for dir in dirs {
        sync_tree(dir, &mut settled);
    }
    settled.secs = start.elapsed().as_secs_f64();
    settled.pending_after = pending_bytes();
    settled
}

fn sync_tree(dir: &Path, settled: &mut Settled) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return settled.failures.push(format!("{}: {e}", dir.display())),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => sync_tree(&path, settled),
            Ok(t) if t.is_file() => match std::fs::File::open(&path).and_then(|f| f.sync_all()) {
                Ok(()) => settled.files += 1,
                Err(e) => settled.failures.push(format!("{}: {e}", path.display())),
            },
            _ => {}
        }
    }
}

/// Dirty plus write-back bytes of the whole machine, from `/proc/meminfo`.
fn pending_bytes() -> Option<u64> {
    parse_pending(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_pending(meminfo: &str) -> Option<u64> {
    let kib = |name: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.split(':').next() == Some(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some((kib("Dirty")? + kib("Writeback")?) * 1024)
}

impl Settled {
    /// The report's line.
    pub fn line(&self) -> String {
        let mib = |b: Option<u64>| b.map_or_else(|| "?".to_string(), |b| format!("{:.1}", b as f64 / (1 << 20) as f64));
        let mut line = format!(
            "\nafter the loads: {} file(s) of the engines' data directories synced in {:.2} s (dirty + write-back \
             on the machine: {} MiB before, {} MiB after)",
            self.files,
            self.secs,
            mib(self.pending_before),
            mib(self.pending_after)
        );
        if let Some(first) = self.failures.first() {
            line.push_str(&format!("; {} could not be synced, first: {first}", self.failures.len()));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_below_the_directories_is_synced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"1").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub").join("b"), b"2").unwrap();
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("c"), b"3").unwrap();
        let missing = dir.path().join("missing");
        let settled = sync_dirs(&[dir.path().to_path_buf(), other.path().to_path_buf(), missing]);
        assert_eq!(settled.files, 3);
        assert_eq!(settled.failures.len(), 1, "{:?}", settled.failures);
        assert!(settled.line().contains("3 file(s)"), "{}", settled.line());
    }

    #[test]
    fn pending_bytes_add_dirty_and_write_back() {
        let meminfo = "MemTotal:       24000000 kB\nDirty:              1024 kB\nWriteback:           512 kB\n\
                       WritebackTmp:          7 kB\n";
        assert_eq!(parse_pending(meminfo), Some(1536 * 1024));
        assert_eq!(parse_pending("MemTotal: 1 kB\n"), None);
    }
}
