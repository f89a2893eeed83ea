//! `tern check`: recovery run read-only into a scratch pool, then every tree's shape checked.

use super::{recover, RecoveryStats};
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
}

/// Verifies the database in `dir` without changing it: every checksum of the newest
/// checkpoint and of the log, the log's continuity, that every record applies, and the shape
/// of every recovered tree. Fails with [`Error::Corruption`] naming the file and offset of the
/// first damage, and with [`Error::Locked`] while the database is open.
pub fn check(dir: &Path) -> Result<CheckReport> {
    if !dir.is_dir() {
        return Err(Error::InvalidArgument(format!("{} is not a database directory", dir.display())));
    }
    let _lock = super::lock_dir(dir)?;
    let fs = crate::fs::StdFs;
    let config = match crate::settings::read(&fs, dir)? {
        Some(settings) => settings.apply(TreeConfig::default()),
        None => TreeConfig::default(),
    };
    // Trees are rebuilt in a pool of the default cache size over a scratch page file outside
    // the database directory, which this check must not change.
    static CHECKS: AtomicU64 = AtomicU64::new(0);
    let n = CHECKS.fetch_add(1, Relaxed);
    let scratch = std::env::temp_dir().join(format!("tern-check-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .map_err(|source| Error::Io { what: format!("creating {}", scratch.display()), source })?;
    let pool_config = PoolConfig {
        page_size: config.page_size,
        cache_bytes: Some(crate::Options::default_cache_bytes()),
        huge_pages: config.huge_pages,
    };
    let result = Pool::with_file(pool_config, Arc::new(crate::fs::StdFs), scratch.join(PAGE_FILE))
        .and_then(|pool| check_with(dir, &fs, config, &pool));
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn check_with(dir: &Path, fs: &dyn Fs, config: TreeConfig, pool: &Arc<Pool>) -> Result<CheckReport> {
    let recovered = recover(fs, dir, config, pool, false)?;
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
    Ok(CheckReport { recovery: recovered.stats, tables, log_files })
}
