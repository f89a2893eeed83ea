//! `tern check`: recovery run read-only into a scratch pool, then every tree's shape checked.

use super::{recover, Recovered, RecoveryStats};
use crate::btree::TreeConfig;
use crate::buffer::{Pool, PoolConfig, PAGE_FILE};
use crate::fs::Fs;
use crate::{Error, Result};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// One table as `tern check` found it.
#[derive(Clone, Debug, Serialize)]
pub struct TableCheck {
    /// Its name (`""`: the default table).
    pub name: String,
    /// Entries after recovery.
    pub entries: u64,
    /// Levels of its tree.
    pub height: usize,
    /// Leaf pages.
    pub leaves: usize,
}

/// What [`check`] found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// What recovery would do (the torn tail it would cut, the records it would replay).
    pub recovery: RecoveryStats,
    /// Every table, by id.
    pub tables: Vec<TableCheck>,
    /// Log files present, oldest first.
    pub log_files: Vec<String>,
    /// Blocks of the page checkpoint read and checked against their checksums (every page
    /// in its map).
    pub pages_checked: u64,
    /// Pages allocated after recovery, and of those, pages the tables hold (equal: no page is
    /// lost to no table, none is counted twice).
    pub pages_live: u64,
    /// Of `pages_live`, the pages the tables hold (see `pages_live`).
    pub pages_in_tables: u64,
}

/// Verifies the database in `dir` without changing it: every checksum of the newest
/// checkpoint (of a page checkpoint: its map and every block it names) and of the log, the
/// log's continuity, that every record applies, the shape of every recovered tree, and that
/// every allocated page belongs to a table (block accounting: a page's two slots are its
/// own, so no block can be used twice). Fails with [`Error::Corruption`] naming the file and offset of the
/// first damage, and with [`Error::Locked`] while the database is open.
pub fn check(dir: &Path) -> Result<CheckReport> {
    recover_read_only(dir, |recovered, _| {
        let mut tables = Vec::new();
        for (_, name, tree) in &recovered.tables {
            let shape = tree.check().map_err(|why| Error::Corruption {
                file: "(recovered tree)".into(),
                offset: 0,
                reason: format!("table {name:?}: {why}"),
            })?;
            tables.push(TableCheck {
                name: name.clone(),
                entries: shape.keys as u64,
                height: shape.height,
                leaves: shape.leaves,
            });
        }
        let log_files = recovered.log_files.iter().map(|&(seq, _)| crate::wal::file_name(seq)).collect();
        let pages_checked = recovered.pool.verify_durable()?;
        let pages_live = recovered.pool.live_pages() as u64;
        let pages_in_tables: u64 = recovered.tables.iter().map(|(_, _, t)| t.root_and_pages().1 as u64).sum();
        if pages_live != pages_in_tables {
            return Err(Error::Corruption {
                file: recovered.stats.checkpoint.clone().unwrap_or_default(),
                offset: 0,
                reason: format!("{pages_live} pages are allocated but the tables hold {pages_in_tables}"),
            });
        }
        Ok(CheckReport {
            recovery: recovered.stats.clone(),
            tables,
            log_files,
            pages_checked,
            pages_live,
            pages_in_tables,
        })
    })
}

/// Whether `dir` holds a tern database: its settings, a checkpoint or a log file.
pub fn is_database(dir: &Path) -> Result<bool> {
    let names = crate::fs::StdFs
        .list(dir)
        .map_err(|source| Error::Io { what: format!("listing {}", dir.display()), source })?;
    Ok(names.iter().any(|n| {
        n == crate::settings::FILE || crate::checkpoint::is_checkpoint(n) || crate::wal::parse_file_name(n).is_some()
    }))
}

/// Recovers the database in `dir` without changing it and hands the result (and the trees'
/// configuration) to `f`: the directory is locked, nothing in it is written (no torn tail cut,
/// no leftover removed). A page checkpoint's pages are read from the page file opened
/// read-only (pages the log changes stay in memory); a logical checkpoint is rebuilt in a pool
/// of the default cache size over a scratch page file in the system's temporary directory,
/// removed afterwards.
pub(crate) fn recover_read_only<T>(dir: &Path, f: impl FnOnce(&Recovered, TreeConfig) -> Result<T>) -> Result<T> {
    if !dir.is_dir() || !is_database(dir)? {
        return Err(Error::InvalidArgument(format!("{} is not a database directory", dir.display())));
    }
    let _lock = super::lock_dir(dir)?;
    let fs = crate::fs::StdFs;
    let config = match crate::settings::read(&fs, dir)? {
        Some(settings) => settings.apply(TreeConfig::default()),
        None => TreeConfig::default(),
    };
    static SCRATCH: AtomicU64 = AtomicU64::new(0);
    let n = SCRATCH.fetch_add(1, Relaxed);
    let scratch = std::env::temp_dir().join(format!("tern-scratch-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .map_err(|source| Error::Io { what: format!("creating {}", scratch.display()), source })?;
    let pool_config = PoolConfig {
        page_size: config.page_size,
        cache_bytes: Some(crate::Options::default_cache_bytes()),
        row_cache_bytes: 0,
        huge_pages: config.huge_pages,
    };
    let open_pool = |map: Option<&crate::checkpoint::map::PageMap>| match map {
        // The checkpoint's pages are read from the database's page file, which is never
        // written: pages the log replay changes stay in memory.
        Some(map) => {
            let path = dir.join(PAGE_FILE);
            Pool::open_file(pool_config.clone(), Arc::new(crate::fs::StdFs), path, true, map.chunk_pages, &map.pages)
        }
        None => Pool::with_file(pool_config.clone(), Arc::new(crate::fs::StdFs), scratch.join(PAGE_FILE)),
    };
    let result = recover(&fs, dir, config, &open_pool, false, None, false).and_then(|recovered| f(&recovered, config));
    let _ = std::fs::remove_dir_all(&scratch);
    result
}
