//! `tern bench ingest`: loading a table. Sorted input through `Db::load_table` (built bottom
//! up, made durable by one checkpoint) against the same records in shuffled order through
//! write transactions of `--txn-keys` puts (NoSync, then a checkpoint so both end durable).
//!
//! Each round of each size uses a fresh directory; the variants alternate within a round, and
//! medians over rounds are reported. After each load a sample of records is read back.

use super::dist::{mix64, SplitMix64};
use super::harness;
use super::open::dir_bytes;
use super::recovery::{nosync_options, parse_bytes};
use super::report::{emit, Record};
use serde_json::{json, Map};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tern::Db;

const LONG_ABOUT: &str = "\
Measures loading a table of --records records (16-byte keys, --value-bytes values) into a
fresh database on disk, two ways, alternating within each of --rounds rounds:
  load_table: the records in key order through Db::load_table (a new table built bottom up,
    made durable by one checkpoint; nothing logged);
  txn-N: the same records in shuffled order through write transactions of --txn-keys puts
    (Durability::NoSync), then Db::checkpoint(), so that both end on disk and durable.
Reports keys per second (the wall time includes the checkpoint) and the bytes on disk; a
sample of records is read back after each load. Databases live under --dir (default: the
system's temporary directory), removed afterwards.";

/// Options of `tern bench ingest`.
#[derive(clap::Args, Clone, Debug)]
#[command(about = "Loading a table: sorted bulk load (Db::load_table) vs shuffled transactions", long_about = LONG_ABOUT)]
pub struct IngestArgs {
    /// Table sizes in records, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000000", value_name = "N,..")]
    pub records: Vec<u64>,
    /// Value size in bytes (8..=65536).
    #[arg(long, default_value_t = 100, value_name = "BYTES")]
    pub value_bytes: usize,
    /// Puts per write transaction of the transactional variant.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub txn_keys: u64,
    /// The buffer pool's size (`Options::cache_bytes`; default: tern's).
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub cache: Option<u64>,
    /// Rounds; medians are reported.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub rounds: usize,
    /// Directory the databases are created in (removed afterwards) [default: the system's
    /// temporary directory].
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Print one JSON object per result on stdout (JSON Lines); the tables go to stderr.
    #[arg(long)]
    pub json: bool,
}

const KEY_SIZE: usize = 16;

/// Record `i`'s key: `i` big-endian after 8 zero bytes, so key order is `i` order.
fn key(i: u64) -> [u8; KEY_SIZE] {
    let mut k = [0u8; KEY_SIZE];
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

/// Record `i`'s value: `i` in its first 8 bytes, then a pattern.
fn value(i: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend((0..len).map(|j| (mix64(i) as usize + j) as u8));
    out[..8].copy_from_slice(&i.to_le_bytes());
}

/// One load: its seconds and the bytes on disk after it.
struct Loaded {
    secs: f64,
    /// The durable checkpoint's share of `secs`.
    checkpoint_secs: f64,
    /// The commits' share of `secs` (the transactional variant; 0 for `load_table`).
    commit_secs: f64,
    disk_bytes: u64,
}

/// Runs `tern bench ingest`.
pub fn run(args: &IngestArgs) -> Result<(), String> {
    if args.records.is_empty() || args.records.iter().any(|&n| n == 0 || n > 1 << 34) {
        return Err(format!("--records must each be in 1..=2^34, got {:?}", args.records));
    }
    if !(8..=65536).contains(&args.value_bytes) {
        return Err(format!("--value-bytes must be in 8..=65536, got {}", args.value_bytes));
    }
    if args.txn_keys == 0 || args.rounds == 0 {
        return Err("--txn-keys and --rounds must be at least 1".into());
    }
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let txn_variant = format!("txn-{}", args.txn_keys);
    let mut records = Vec::new();
    for &n in &args.records {
        let mut times: [Vec<Loaded>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..args.rounds {
            for (v, times) in times.iter_mut().enumerate() {
                if harness::interrupted() {
                    break;
                }
                let dir = tern_peers::scratch_dir(&parent, "tern-ingest-")
                    .map_err(|e| format!("creating a directory in {}: {e}", parent.display()))?;
                let path = dir.path().join("db");
                times.push(if v == 0 { sorted(args, n, &path)? } else { shuffled(args, n, &path)? });
            }
        }
        for (v, loads) in times.iter().enumerate() {
            let mut params = Map::new();
            params.insert("records".into(), json!(n));
            params.insert("value_bytes".into(), json!(args.value_bytes));
            params.insert("order".into(), json!(if v == 0 { "sorted" } else { "shuffled" }));
            let variant = if v == 0 { "load_table".to_string() } else { txn_variant.clone() };
            let rounds: Vec<(u64, f64)> = loads.iter().map(|l| (n, l.secs)).collect();
            let Some((mut record, mid)) = Record::median_round("ingest", variant, 1, params, &rounds, Map::new())
            else {
                continue;
            };
            let median = &loads[mid];
            let extra = &mut record.extra;
            extra.insert("disk_bytes".into(), json!(median.disk_bytes));
            extra.insert("checkpoint_secs".into(), json!((median.checkpoint_secs * 1e3).round() / 1e3));
            extra.insert("fairness".into(), json!(1.0));
            if v == 1 {
                extra.insert("txn_keys".into(), json!(args.txn_keys));
                extra.insert("commit_secs".into(), json!((median.commit_secs * 1e3).round() / 1e3));
            }
            records.push(record);
        }
    }
    let notes = vec![format!(
        "ingest: keys/s over the whole load, the checkpoint that makes it durable included (median of {} round(s), \
         variants alternating); databases under {}",
        args.rounds,
        parent.display()
    )];
    let title = format!("ingest: loading a table of {}-byte records", KEY_SIZE + args.value_bytes);
    emit(&records, args.json, &title, &notes);
    Ok(())
}

fn options(args: &IngestArgs) -> tern::Options {
    let mut options = nosync_options(false);
    if let Some(cache) = args.cache {
        options.cache_bytes = cache;
    }
    options
}

fn open(args: &IngestArgs, path: &Path) -> Result<Db, String> {
    Db::open(path, options(args)).map_err(|e| format!("opening {}: {e}", path.display()))
}

/// `Db::load_table` of records `0..n` in key order.
fn sorted(args: &IngestArgs, n: u64, path: &Path) -> Result<Loaded, String> {
    let db = open(args, path)?;
    let len = args.value_bytes;
    let start = Instant::now();
    let mut buf = Vec::with_capacity(len);
    db.load_table(
        "t",
        (0..n).map(|i| {
            value(i, len, &mut buf);
            (key(i), buf.clone())
        }),
    )
    .map_err(|e| format!("load_table: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    finish(args, db, n, path, secs)
}

/// The records in shuffled order through transactions of `--txn-keys` puts, then a checkpoint.
fn shuffled(args: &IngestArgs, n: u64, path: &Path) -> Result<Loaded, String> {
    let db = open(args, path)?;
    let mut order: Vec<u64> = (0..n).collect();
    let mut rng = SplitMix64::new(n);
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let start = Instant::now();
    let table = db.create_table("t").map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(args.value_bytes);
    let mut commit_secs = 0.0;
    for chunk in order.chunks(args.txn_keys as usize) {
        let mut txn = db.begin().map_err(|e| e.to_string())?;
        for &i in chunk {
            value(i, args.value_bytes, &mut buf);
            txn.put_in(&table, &key(i), &buf).map_err(|e| format!("put: {e}"))?;
        }
        let committing = Instant::now();
        txn.commit().map_err(|e| format!("commit: {e}"))?;
        commit_secs += committing.elapsed().as_secs_f64();
    }
    db.checkpoint().map_err(|e| format!("checkpoint: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    Ok(Loaded { commit_secs, ..finish(args, db, n, path, secs)? })
}

/// Checks a sample of records, closes the database and measures its files.
fn finish(args: &IngestArgs, db: Db, n: u64, path: &Path, secs: f64) -> Result<Loaded, String> {
    {
        let txn = db.begin_read().map_err(|e| e.to_string())?;
        let table = txn.table("t").map_err(|e| e.to_string())?;
        let mut want = Vec::new();
        for i in (0..n).step_by((n / 1000).max(1) as usize).chain([n - 1]) {
            value(i, args.value_bytes, &mut want);
            let found = txn.get_in(&table, &key(i)).map_err(|e| e.to_string())?;
            if found.as_deref() != Some(&want[..]) {
                return Err(format!("record {i} is missing or wrong after the load"));
            }
        }
    }
    let checkpoint_secs = db.stats().checkpoints.last_millis as f64 / 1e3;
    db.close().map_err(|e| format!("close: {e}"))?;
    Ok(Loaded { secs, checkpoint_secs, commit_secs: 0.0, disk_bytes: dir_bytes(path)? })
}
