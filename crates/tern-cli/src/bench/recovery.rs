//! `tern bench recovery`: how fast tern replays its write-ahead log when it opens.
//!
//! Writes a log of about `--log-bytes` into a fresh database: one YCSB-style record (16-byte
//! key of [`key_of`], `--value-bytes` value) per transaction, `Durability::NoSync`, records
//! `0..--records` inserted and then updated in turn. Nothing is checkpointed
//! (`checkpoint_bytes: u64::MAX`, `checkpoint_on_close: false`), so closing leaves the whole log
//! to replay. Then reopens the database `--rounds` times and reports the replay: the records and
//! bytes tern replayed (`stats().recovery`) over the wall time of `Db::open`, timed here; and
//! recovery's own time (`replay_millis`), which counts whole milliseconds, so its rates only
//! from [`MIN_TIMED_MILLIS`]. After
//! each reopen a sample of records is read back and checked against the last write of each.
//! The opens apply every write before they return (`WalConfig::deferred_replay` off), so the
//! rate is that of the whole replay; `tern bench open` measures opens that defer the log's last
//! batch.
//!
//! The log is in the page cache after it was written (a warm replay: the CPU's work);
//! `--cold` drops its files from the page cache before each reopen (`posix_fadvise`
//! `DONTNEED`), so the replay reads them from the disk.

use super::harness;
use super::report::{emit, rate, si, Record};
use super::runner::round3;
use super::workload::{check_value, key_of, tag_value};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tern::{Db, Durability, Options, WalConfig};

const LONG_ABOUT: &str = "\
Measures crash recovery: writes a write-ahead log of about --log-bytes into a fresh tern
database (one 16-byte-key, --value-bytes record per transaction, durability NoSync; records
0..--records inserted, then updated in turn; no checkpoint), closes it without a checkpoint,
then reopens it --rounds times and reports each replay: records and bytes replayed, and the
wall time of the open, which reads and applies the whole log (seconds, MB/s of 10^6 bytes,
records/s); and recovery's own time for it, which counts whole milliseconds (its rates are given
only from 10 ms).
Every write is applied before the open returns (WalConfig::deferred_replay off): the figures
are those of the whole replay (tern bench open --replay deferred,eager times opens that defer
the log's last batch).
A sample of records is read back after each reopen and checked against its last write.
The log is in the page cache after writing; --cold evicts its files first (posix_fadvise
DONTNEED) so the replay reads the disk. The database lives in a fresh directory under --dir
(default: the system's temporary directory), removed afterwards.";

/// Options of `tern bench recovery`.
#[derive(clap::Args, Clone, Debug)]
#[command(about = "Log replay speed: write a log, reopen the database, time the recovery", long_about = LONG_ABOUT)]
pub struct RecoveryArgs {
    /// Log to write before reopening: bytes, or with a unit: KiB, MiB, GiB (K, M, G are the
    /// same), kB, MB, GB (powers of ten).
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes, value_name = "BYTES")]
    pub log_bytes: u64,
    /// Distinct records (keys): inserted in hashed key order, then updated in turn.
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub records: u64,
    /// Value size in bytes (16..=1048576).
    #[arg(long, default_value_t = 100, value_name = "BYTES")]
    pub value_bytes: usize,
    /// Directory the database's directory is created in (removed afterwards) [default: the
    /// system's temporary directory].
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Reopens (each replays the whole log); the median is reported.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub rounds: usize,
    /// Evict the log files from the page cache before each reopen.
    #[arg(long)]
    pub cold: bool,
    /// Replay batch sizes to compare (`WalConfig::replay_batch_bytes`), comma-separated:
    /// `auto` (an eighth of the cache, 32 MiB..=1 GiB) or a size of at least 1MiB. Each round
    /// reopens once per size, in alternating order.
    #[arg(long, value_delimiter = ',', default_value = "auto", value_parser = parse_batch, value_name = "auto|BYTES,..")]
    pub replay_batch: Vec<Batch>,
    /// Print one JSON object per result on stdout (JSON Lines); the tables go to stderr.
    #[arg(long)]
    pub json: bool,
}

/// A replay batch size: `None` is tern's own choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch(pub Option<u64>);

impl std::fmt::Display for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => write!(f, "auto"),
            Some(b) if b % (1 << 20) == 0 => write!(f, "{}MiB", b >> 20),
            Some(b) => write!(f, "{b}B"),
        }
    }
}

fn parse_batch(text: &str) -> Result<Batch, String> {
    if text.trim() == "auto" {
        return Ok(Batch(None));
    }
    let bytes = parse_bytes(text)?;
    if bytes < 1 << 20 {
        return Err(format!("a replay batch must be at least 1MiB, got {text:?}"));
    }
    Ok(Batch(Some(bytes)))
}

/// The key size of the records (YCSB's default in `tern bench ycsb`).
const KEY_SIZE: usize = 16;
/// Commits between two looks at the log's size.
const CHECK_EVERY: u64 = 1024;

/// A byte count with an optional unit: `16MiB`, `1G`, `500MB`, `4096`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let not_a_size = || format!("{text:?} is not a size (a number, optionally with a unit: 16MiB, 1GiB)");
    if number.is_empty() {
        return Err(not_a_size());
    }
    let scale: u64 = match unit {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(format!("unknown unit {unit:?} in {text:?} (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (a number, optionally with a unit: 16MiB, 1GiB)"))?;
    let bytes = value * scale as f64;
    if !(bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64) {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(bytes as u64)
}

/// The checks `bench recovery` and `bench open` share: `--log-bytes`, `--value-bytes`,
/// `--rounds`, `--dir`.
pub(super) fn check_log_args(
    log_bytes: u64,
    value_bytes: usize,
    rounds: usize,
    dir: Option<&Path>,
) -> Result<(), String> {
    if !(4096..=1 << 40).contains(&log_bytes) {
        return Err(format!("--log-bytes must be in 4KiB..=1TiB, got {log_bytes}"));
    }
    if !(16..=1 << 20).contains(&value_bytes) {
        return Err(format!("--value-bytes must be in 16..=1048576, got {value_bytes}"));
    }
    if rounds == 0 || rounds > 1000 {
        return Err(format!("--rounds must be in 1..=1000, got {rounds}"));
    }
    match dir {
        Some(dir) => super::driver::check_dir(dir),
        None => Ok(()),
    }
}

impl RecoveryArgs {
    fn validate(&self) -> Result<(), String> {
        if self.records == 0 || self.records > 1 << 40 {
            return Err(format!("--records must be in 1..=2^40, got {}", self.records));
        }
        check_log_args(self.log_bytes, self.value_bytes, self.rounds, self.dir.as_deref())
    }
}

/// NoSync commits and no automatic checkpoint (so the log stays to be replayed); a checkpoint
/// at close only with `close_checkpoint`. `bench recovery` and `bench open` run with these.
pub(super) fn nosync_options(close_checkpoint: bool) -> Options {
    let wal = WalConfig {
        durability: Durability::NoSync,
        checkpoint_bytes: u64::MAX,
        checkpoint_on_close: close_checkpoint,
        ..WalConfig::default()
    };
    Options { wal, ..Options::default() }
}

/// What writing the log did.
struct Written {
    commits: u64,
    log_bytes: u64,
    log_files: u64,
    secs: f64,
}

/// One reopen.
#[derive(Clone)]
struct Replay {
    records: u64,
    bytes: u64,
    /// Wall time of `Db::open` (this process's clock): the replay's time as measured.
    secs: f64,
    /// Recovery's own time for reading and applying the log (`RecoveryStats::replay_millis`):
    /// whole milliseconds.
    replay_ms: u64,
    log_files: usize,
    torn_tail: bool,
}

/// Recovery's own clock counts whole milliseconds: rates from it are given only once it counted
/// at least this many (an error under 10%), else they are null.
pub(super) const MIN_TIMED_MILLIS: u64 = 10;

/// `amount` per second over `millis` of recovery's own clock, or `None` if that is too short to
/// time ([`MIN_TIMED_MILLIS`]).
pub(super) fn millis_rate(amount: f64, millis: u64) -> Option<f64> {
    (millis >= MIN_TIMED_MILLIS).then(|| amount / (millis as f64 / 1e3))
}

/// Runs `tern bench recovery`.
pub fn run(args: &RecoveryArgs) -> Result<(), String> {
    args.validate()?;
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tern_peers::scratch_dir(&parent, "tern-recovery-")
        .map_err(|e| format!("creating a database directory in {}: {e}", parent.display()))?;
    let path = dir.path().join("db");
    let written = write_log(args, &path)?;
    if harness::interrupted() {
        return Ok(());
    }
    let mut replays = Vec::new();
    for round in 0..args.rounds {
        let mut order: Vec<usize> = (0..args.replay_batch.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for v in order {
            if harness::interrupted() {
                break;
            }
            if args.cold {
                evict(&path, "wal-")?;
            }
            let replay = reopen(args, &path, written.commits, args.replay_batch[v])?;
            if replay.records != written.commits {
                return Err(format!(
                    "round {}: replayed {} records, but {} were committed",
                    round + 1,
                    replay.records,
                    written.commits
                ));
            }
            replays.push((v, replay));
        }
    }
    if replays.is_empty() {
        return Ok(());
    }
    let (records, notes) = report(args, &written, &replays, &parent);
    let title = format!(
        "recovery: replay of a {} MiB log ({} commits of one {}-byte record; {} replay(s){})",
        written.log_bytes >> 20,
        written.commits,
        KEY_SIZE + args.value_bytes,
        replays.len(),
        if args.cold { ", log evicted from the page cache first" } else { ", log in the page cache" }
    );
    emit(&records, args.json, &title, &notes);
    Ok(())
}

/// Record `r`'s value as written by pass `pass` over the records.
pub(super) fn value_of(r: u64, pass: u64, value: &mut [u8]) {
    for (j, b) in value.iter_mut().enumerate() {
        *b = (r as usize + j) as u8 | 1;
    }
    tag_value(r, value);
    let n = value.len();
    value[n - 8..].copy_from_slice(&pass.to_le_bytes());
}

/// Writes the log: commits until it holds `args.log_bytes`, then closes the database (no
/// checkpoint).
fn write_log(args: &RecoveryArgs, path: &Path) -> Result<Written, String> {
    let db = Db::open(path, nosync_options(false)).map_err(|e| format!("opening {}: {e}", path.display()))?;
    let progress = ProgressBar::new(args.log_bytes);
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    progress.set_message("recovery: writing the log (NoSync commits)");
    let (mut key, mut value) = ([0u8; KEY_SIZE], vec![0u8; args.value_bytes]);
    let start = Instant::now();
    let mut commits = 0u64;
    let log_bytes = |db: &Db| db.stats().wal.map_or(0, |w| w.bytes);
    loop {
        if commits % CHECK_EVERY == 0 {
            let bytes = log_bytes(&db);
            progress.set_position(bytes.min(args.log_bytes));
            if bytes >= args.log_bytes || harness::interrupted() {
                break;
            }
        }
        let (r, pass) = (commits % args.records, commits / args.records);
        value_of(r, pass, &mut value);
        let mut txn = db.begin().map_err(|e| e.to_string())?;
        txn.put(key_of(r, KEY_SIZE, &mut key), &value).map_err(|e| e.to_string())?;
        txn.commit().map_err(|e| format!("commit {commits}: {e}"))?;
        commits += 1;
    }
    progress.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let wal = db.stats().wal.unwrap_or_default();
    db.close().map_err(|e| format!("closing {}: {e}", path.display()))?;
    Ok(Written { commits, log_bytes: wal.bytes, log_files: wal.files_created, secs })
}

/// Drops the database's files whose names start with `prefix` from the page cache (they are
/// synced: the database was closed).
pub(super) fn evict(path: &Path, prefix: &str) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let entries = std::fs::read_dir(path).map_err(|e| format!("listing {}: {e}", path.display()))?;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(prefix) || !entry.path().is_file() {
            continue;
        }
        let file = std::fs::File::open(entry.path()).map_err(|e| format!("{}: {e}", entry.path().display()))?;
        // SAFETY: `file` is open for the duration of the call; posix_fadvise only reads its
        // arguments and touches no memory of ours.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(format!("posix_fadvise({}): error {rc}", entry.path().display()));
        }
    }
    Ok(())
}

/// Reopens the database, times the replay, checks a sample of records, closes it again
/// (without a checkpoint: the next reopen replays the same log).
fn reopen(args: &RecoveryArgs, path: &Path, commits: u64, batch: Batch) -> Result<Replay, String> {
    let mut options = nosync_options(false);
    options.wal.replay_batch_bytes = batch.0;
    // The rate of applying the whole log: no part of it left for after the open
    // (`bench open --replay` compares the open with deferred replay).
    options.wal.deferred_replay = false;
    let start = Instant::now();
    let db = Db::open(path, options).map_err(|e| format!("reopening {}: {e}", path.display()))?;
    let secs = start.elapsed().as_secs_f64();
    let stats = db.stats().recovery.ok_or("a database on disk reports its recovery")?;
    check_records(&db, args, commits)?;
    db.close().map_err(|e| format!("closing {}: {e}", path.display()))?;
    Ok(Replay {
        records: stats.records_replayed,
        bytes: stats.bytes_replayed,
        secs,
        replay_ms: stats.replay_millis,
        log_files: stats.log_files,
        torn_tail: stats.torn_tail.is_some(),
    })
}

/// Reads back up to 1000 records spread over the key space, and the last one written; each
/// must hold its last write.
fn check_records(db: &Db, args: &RecoveryArgs, commits: u64) -> Result<(), String> {
    if commits == 0 {
        return Ok(());
    }
    let n = args.records.min(commits);
    let step = (n / 1000).max(1);
    let last = (commits - 1) % args.records;
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    for r in (0..n).step_by(step as usize).chain([last]) {
        // Record r was last written by the final pass if it came before the last write in it.
        let passes = commits / args.records + u64::from(r < commits % args.records);
        check_record(&txn, r, passes - 1, args.value_bytes)?;
    }
    Ok(())
}

/// Record `r` must hold the value [`value_of`] gives it in pass `pass`.
pub(super) fn check_record(txn: &tern::Txn<'_>, r: u64, pass: u64, value_bytes: usize) -> Result<(), String> {
    let (mut key, mut got) = ([0u8; KEY_SIZE], Vec::new());
    if !txn.get_into(key_of(r, KEY_SIZE, &mut key), &mut got).map_err(|e| e.to_string())? {
        return Err(format!("after the open, record {r} is missing"));
    }
    let stamp = got.get(got.len().saturating_sub(8)..).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    if !check_value(r, &got, value_bytes) || stamp != Some(pass) {
        return Err(format!("after the open, record {r} does not hold its last write (pass {pass})"));
    }
    Ok(())
}

/// The write record, the replay record, and the notes.
fn report(args: &RecoveryArgs, w: &Written, all: &[(usize, Replay)], parent: &Path) -> (Vec<Record>, Vec<String>) {
    let cache = if args.cold { "cold" } else { "warm" };
    let params = |phase: &str| -> Map<String, Value> {
        let mut p = Map::new();
        p.insert("phase".into(), json!(phase));
        p.insert("cache".into(), json!(cache));
        p.insert("keys".into(), json!(args.records));
        p.insert("value_bytes".into(), json!(args.value_bytes));
        p
    };
    let mb = |bytes: u64, secs: f64| bytes as f64 / 1e6 / secs.max(1e-9);
    let mut write_extra = Map::new();
    write_extra.insert("log_bytes".into(), json!(w.log_bytes));
    write_extra.insert("log_files".into(), json!(w.log_files));
    write_extra.insert("mb_per_sec".into(), round3(mb(w.log_bytes, w.secs)));
    write_extra.insert("durability".into(), json!("nosync"));
    write_extra.insert("fairness".into(), json!(1.0));
    let write = Record::single("recovery", "tern".into(), 1, params("write"), w.commits, w.secs, write_extra);
    let mut notes = vec![
        format!(
            "\nwrite: {} commits, {} MiB of log in {} file(s), {:.2} s: {} commits/s, {:.1} MB/s (NoSync, one thread)",
            w.commits,
            w.log_bytes >> 20,
            w.log_files,
            w.secs,
            si(write.ops_per_sec),
            mb(w.log_bytes, w.secs)
        ),
        format!(
            "replay: the wall time of Db::open, which reads and applies the whole log (MB = 10^6 bytes; two threads: \
             the opening one reads, tern-replay applies sorted batches); in brackets recovery's own clock \
             (RecoveryStats::replay_millis, whole milliseconds; its rates only from {MIN_TIMED_MILLIS} ms):"
        ),
    ];
    let mut records = vec![write];
    for (v, batch) in args.replay_batch.iter().enumerate() {
        let replays: Vec<Replay> = all.iter().filter(|(i, _)| *i == v).map(|(_, r)| r.clone()).collect();
        if replays.is_empty() {
            continue;
        }
        let variant = match args.replay_batch.as_slice() {
            [Batch(None)] => "tern".to_string(),
            _ => format!("tern batch={batch}"),
        };
        let (record, lines) = replay_record(w, &replays, variant, &params);
        records.push(record);
        notes.extend(lines);
    }
    notes.push(format!("database under {}", parent.display()));
    (records, notes)
}

/// One batch size's replays: the median record and a line per round.
fn replay_record(
    w: &Written,
    replays: &[Replay],
    variant: String,
    params: &dyn Fn(&str) -> Map<String, Value>,
) -> (Record, Vec<String>) {
    let mb = |bytes: u64, secs: f64| bytes as f64 / 1e6 / secs.max(1e-9);
    let rounds: Vec<(u64, f64)> = replays.iter().map(|r| (r.records, r.secs)).collect();
    // The opening thread reads the log while tern's replay thread applies it.
    let (mut replay, mid) = Record::median_round("recovery", variant.clone(), 2, params("replay"), &rounds, Map::new())
        .expect("at least one replay");
    let mid = &replays[mid];
    let extra = &mut replay.extra;
    extra.insert("log_bytes".into(), json!(w.log_bytes));
    extra.insert("bytes_replayed".into(), json!(mid.bytes));
    extra.insert("mb_per_sec".into(), round3(mb(mid.bytes, mid.secs)));
    extra.insert("replay_ms".into(), json!(mid.replay_ms));
    let recovery_clock = |amount: f64| millis_rate(amount, mid.replay_ms).map_or(Value::Null, round3);
    extra.insert("replay_mb_per_sec".into(), recovery_clock(mid.bytes as f64 / 1e6));
    extra.insert("replay_records_per_sec".into(), recovery_clock(mid.records as f64));
    extra.insert("log_files".into(), json!(mid.log_files));
    extra.insert("torn_tail".into(), json!(mid.torn_tail));
    extra.insert("fairness".into(), json!(1.0));
    let mut notes = Vec::new();
    for (i, r) in replays.iter().enumerate() {
        let own = match millis_rate(r.bytes as f64 / 1e6, r.replay_ms) {
            Some(rate) => format!("{} ms, {rate:.1} MB/s", r.replay_ms),
            None => format!("{} ms: too short for its clock", r.replay_ms),
        };
        notes.push(format!(
            "  {variant} round {}: {} records, {:.1} MiB in {} file(s): Db::open {:.4} s, {:.1} MB/s, {} records/s \
             (recovery's clock {own}){}",
            i + 1,
            r.records,
            r.bytes as f64 / (1 << 20) as f64,
            r.log_files,
            r.secs,
            mb(r.bytes, r.secs),
            si(rate(r.records, r.secs)),
            if r.torn_tail { "; a torn tail was cut" } else { "" }
        ));
    }
    notes.push(format!(
        "  {variant} median round: {:.1} MB/s, {} records/s",
        mb(mid.bytes, mid.secs),
        si(replay.ops_per_sec)
    ));
    (replay, notes)
}

#[cfg(test)]
mod tests {
    use super::{millis_rate, parse_bytes};

    #[test]
    fn recovery_clock_rates_only_from_ten_milliseconds() {
        // 0 ms (a 4 KiB log) gave about 10^12 records/s; too short for whole milliseconds.
        assert_eq!(millis_rate(1000.0, 0), None);
        assert_eq!(millis_rate(1000.0, 9), None);
        assert_eq!(millis_rate(1000.0, 10), Some(100_000.0));
        assert_eq!(millis_rate(3.0, 1500), Some(2.0));
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("16MiB"), Ok(16 << 20));
        assert_eq!(parse_bytes("16M"), Ok(16 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("500MB"), Ok(500_000_000));
        assert!(parse_bytes("12 parsecs").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("MiB").unwrap_err().contains("not a size"));
    }
}
