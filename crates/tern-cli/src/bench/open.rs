//! `tern bench open`: what opening a database costs, after a clean close and after a crash,
//! and what one checkpoint writes after a few updates.
//!
//! For each `--records` size, in a fresh directory:
//! 1. **load**: inserts the records (16-byte keys of [`key_of`], `--value-bytes` values, 1000
//!    per transaction, `Durability::NoSync`, no automatic checkpoint) and closes the database,
//!    which checkpoints it.
//! 2. **open-clean**: reopens it `--rounds` times (closing without a checkpoint, so every round
//!    opens the same files) and times `Db::open`, split as tern's recovery counts it.
//! 3. **checkpoint**: updates `--updates` random records, one per transaction, and calls
//!    `Db::checkpoint()`: the bytes it wrote against the database's size on disk.
//! 4. **open-crash**: a child process (this program again) opens the database, commits about
//!    `--log-bytes` of updates (NoSync: each record reaches the operating system at commit) and
//!    is killed with SIGKILL; then the database is reopened `--rounds` times and each open is
//!    timed, with the log bytes it replayed, in each `--replay` mode (deferred: the log's last
//!    batch applied after the open; eager: before it), alternating round by round.
//!
//! After every open a sample of records is read back and checked against its last write (the
//! reads apply the deferred writes they need), then the benchmark waits until every deferred
//! write is applied and reports when, from the open's start.

use super::dist::mix64;
use super::harness;
use super::recovery::{check_log_args, check_record, evict, millis_rate, nosync_options, parse_bytes, value_of};
use super::report::{emit, Record};
use super::runner::round3;
use super::workload::key_of;
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use tern::Db;

const LONG_ABOUT: &str = "\
Measures what opening a tern database costs. For each --records size, in a fresh directory:
load the records (16-byte keys, --value-bytes values; NoSync, 1000 per transaction) and close
the database cleanly (a checkpoint); reopen it --rounds times and time Db::open (open-clean);
update --updates random records and time Db::checkpoint(), reporting the bytes it wrote against
the database's size on disk (checkpoint); then a child process commits about --log-bytes of
updates and is killed with SIGKILL, and the database is reopened --rounds times (open-crash:
the open replays that log; with --replay deferred,eager, opens that defer the log's last batch
(WalConfig::deferred_replay, the default) alternate with opens that apply it first, reported as
variants tern and tern-eager). Every open is split as tern's recovery counts it (checkpoint
load, log replay, other) and followed by a check of a sample of records against their last
write (the reads apply the deferred writes they need); then the benchmark waits until every
deferred write is applied and reports when that was, from the open's start.
--cold drops the database's files from the page cache before each open (posix_fadvise
DONTNEED). The directory is created under --dir (default: the system's temporary directory)
and removed afterwards.";

/// Options of `tern bench open`.
#[derive(clap::Args, Clone, Debug)]
#[command(about = "Open cost: after a clean close, after kill -9 with a log to replay; one checkpoint's bytes", long_about = LONG_ABOUT)]
pub struct OpenArgs {
    /// Database sizes in records, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000000", value_name = "N,..")]
    pub records: Vec<u64>,
    /// Value size in bytes (16..=1048576).
    #[arg(long, default_value_t = 100, value_name = "BYTES")]
    pub value_bytes: usize,
    /// Page size of the databases created (a power of two, 4KiB to 64KiB; tern's default is
    /// 16KiB). A checkpoint writes whole pages, so smaller pages write less per update.
    #[arg(long, default_value = "16KiB", value_parser = parse_bytes, value_name = "BYTES")]
    pub page_size: u64,
    /// The buffer pool's size (`Options::cache_bytes`; default: tern's, the smaller of 1 GiB
    /// and a quarter of RAM).
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub cache: Option<u64>,
    /// Random updates before the measured checkpoint.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub updates: u64,
    /// Log the crashed child leaves to replay: bytes, or with a unit (KiB, MiB, GiB, kB, MB, GB).
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes, value_name = "BYTES")]
    pub log_bytes: u64,
    /// Opens per phase; the median is reported.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub rounds: usize,
    /// Drop the database's files from the page cache before each open.
    #[arg(long)]
    pub cold: bool,
    /// How the opens after the kill replay the log, comma-separated, alternating round by
    /// round: `deferred` (`WalConfig::deferred_replay`, the default: the open returns once the
    /// log is read, its last batch applied afterwards) and `eager` (every write applied
    /// before the open returns), reported as variants `tern` and `tern-eager`.
    #[arg(long, value_delimiter = ',', default_value = "deferred", value_name = "MODE,..")]
    pub replay: Vec<ReplayMode>,
    /// Directory the database's directory is created in (removed afterwards) [default: the
    /// system's temporary directory].
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Print one JSON object per result on stdout (JSON Lines); the tables go to stderr.
    #[arg(long)]
    pub json: bool,
    /// Internal: run as the child that writes the log at this database and waits to be killed.
    #[arg(long, hide = true, value_name = "PATH")]
    pub crash_child: Option<PathBuf>,
}

/// The key size of the records (YCSB's default in `tern bench ycsb`).
const KEY_SIZE: usize = 16;
/// Puts per transaction while loading.
const LOAD_BATCH: u64 = 1000;
/// The open time this benchmark holds tern to after a clean close (issue 17).
const TARGET_MS: f64 = 50.0;
/// Passes: 0 is the load, 1 the random updates, 2.. the crashed child's passes.
const CHILD_PASS: u64 = 2;

impl OpenArgs {
    fn validate(&self) -> Result<(), String> {
        if self.records.is_empty() || self.records.iter().any(|&n| n == 0 || n > 1 << 36) {
            return Err(format!("--records must each be in 1..=2^36, got {:?}", self.records));
        }
        if self.updates == 0 || self.updates > 1 << 32 {
            return Err(format!("--updates must be in 1..=2^32, got {}", self.updates));
        }
        if self.replay.is_empty() {
            return Err("--replay needs at least one of deferred, eager".into());
        }
        check_log_args(self.log_bytes, self.value_bytes, self.rounds, self.dir.as_deref())
    }
}

/// How an open replays the log (`--replay`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayMode {
    /// `WalConfig::deferred_replay` on.
    Deferred,
    /// `WalConfig::deferred_replay` off.
    Eager,
}

impl ReplayMode {
    fn variant(self) -> &'static str {
        match self {
            ReplayMode::Deferred => "tern",
            ReplayMode::Eager => "tern-eager",
        }
    }
}

/// One timed open.
#[derive(Clone)]
struct Open {
    mode: ReplayMode,
    secs: f64,
    /// Writes left to apply after the open returned, and when (from the open's start) every
    /// one was applied; the time the checks' reads right after the open took.
    deferred_writes: u64,
    settled_secs: f64,
    reads_secs: f64,
    checkpoint_ms: u64,
    replay_ms: u64,
    recovery_ms: u64,
    bytes_replayed: u64,
    records_replayed: u64,
}

/// What the database holds: which pass last wrote each record.
struct Expect {
    records: u64,
    updated: HashSet<u64>,
    /// Commits of the crashed child (one record each, records `i % records` in turn).
    child_commits: u64,
}

impl Expect {
    fn pass(&self, r: u64) -> u64 {
        let c = self.child_commits;
        if c > 0 && (c >= self.records || r < c) {
            CHILD_PASS + (c - 1 - r) / self.records
        } else if self.updated.contains(&r) {
            1
        } else {
            0
        }
    }
}

/// Runs `tern bench open` (or, with `--crash-child`, the child that writes a log and waits for
/// its SIGKILL).
pub fn run(args: &OpenArgs) -> Result<(), String> {
    args.validate()?;
    if let Some(path) = &args.crash_child {
        return crash_child(args, path);
    }
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut records = Vec::new();
    let mut notes = Vec::new();
    for &n in &args.records {
        if harness::interrupted() {
            break;
        }
        let dir = tern_peers::scratch_dir(&parent, "tern-open-")
            .map_err(|e| format!("creating a database directory in {}: {e}", parent.display()))?;
        let path = dir.path().join("db");
        one_size(args, n, &path, &mut records, &mut notes)?;
    }
    notes.push(format!(
        "open: wall time of Db::open (median of {} round(s){}), split as DbStats::recovery counts it; target after a \
         clean close: < {TARGET_MS} ms. Databases under {}",
        args.rounds,
        if args.cold { ", files dropped from the page cache first" } else { ", files in the page cache" },
        parent.display()
    ));
    let title = format!(
        "open: cost of opening a database of {}-byte records in {} KiB pages ({} updates before the checkpoint, {} MiB \
         of log at the kill)",
        KEY_SIZE + args.value_bytes,
        args.page_size >> 10,
        args.updates,
        args.log_bytes >> 20
    );
    emit(&records, args.json, &title, &notes);
    Ok(())
}

fn one_size(
    args: &OpenArgs,
    n: u64,
    path: &Path,
    out: &mut Vec<Record>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let params = |phase: &str| -> Map<String, Value> {
        let mut p = Map::new();
        p.insert("phase".into(), json!(phase));
        p.insert("records".into(), json!(n));
        p.insert("page_size".into(), json!(args.page_size));
        p.insert("cache".into(), json!(if args.cold { "cold" } else { "warm" }));
        p
    };
    let mut expect = Expect { records: n, updated: HashSet::new(), child_commits: 0 };

    // 1. Load, and close cleanly (a checkpoint).
    let (load_secs, close_secs) = load(args, n, path)?;
    let db_bytes = dir_bytes(path)?;
    let mut extra = Map::new();
    extra.insert("close_secs".into(), round3(close_secs));
    extra.insert("db_bytes".into(), json!(db_bytes));
    extra.insert("fairness".into(), json!(1.0));
    out.push(Record::single("open", "tern".into(), 1, params("load"), n, load_secs, extra));
    notes.push(format!(
        "{n} records: loaded in {load_secs:.2} s, clean close {close_secs:.2} s; {:.1} MiB on disk",
        db_bytes as f64 / (1 << 20) as f64
    ));
    if harness::interrupted() {
        return Ok(());
    }

    // 2. Reopen after the clean close (nothing to replay: one mode).
    let opens = reopen_rounds(args, path, &expect, &args.replay[..1])?;
    out.push(open_record(args, params("open-clean"), &opens, 0, notes, n, "clean"));
    if harness::interrupted() {
        return Ok(());
    }

    // 3. Random updates, then one checkpoint.
    let (ckpt_secs, ckpt_bytes) = update_and_checkpoint(args, n, path, &mut expect)?;
    let db_bytes = dir_bytes(path)?;
    let percent = 100.0 * ckpt_bytes as f64 / db_bytes.max(1) as f64;
    let mut extra = Map::new();
    extra.insert("checkpoint_bytes".into(), json!(ckpt_bytes));
    extra.insert("db_bytes".into(), json!(db_bytes));
    extra.insert("percent_of_db".into(), round3(percent));
    extra.insert("fairness".into(), json!(1.0));
    out.push(Record::single("open", "tern".into(), 1, params("checkpoint"), args.updates, ckpt_secs, extra));
    notes.push(format!(
        "{n} records: after {} random updates a checkpoint wrote {:.1} MiB in {ckpt_secs:.2} s: {:.1}% of the {:.1} MiB \
         on disk",
        args.updates,
        ckpt_bytes as f64 / (1 << 20) as f64,
        percent,
        db_bytes as f64 / (1 << 20) as f64
    ));
    if harness::interrupted() {
        return Ok(());
    }

    // 4. A child writes a log and is killed; reopen.
    let (commits, log_bytes) = crash(args, n, path)?;
    expect.child_commits = commits;
    let opens = reopen_rounds(args, path, &expect, &args.replay)?;
    if let Some(o) = opens.iter().find(|o| o.records_replayed != commits) {
        return Err(format!(
            "after the kill, the open replayed {} records; the child committed {commits}",
            o.records_replayed
        ));
    }
    for &mode in &args.replay {
        let of_mode: Vec<Open> = opens.iter().filter(|o| o.mode == mode).cloned().collect();
        out.push(open_record(args, params("open-crash"), &of_mode, log_bytes, notes, n, "kill -9"));
    }
    Ok(())
}

/// Inserts records `0..n` (pass 0) and closes the database (the only phase whose close
/// checkpoints: the reopens must find the same files every round); returns the load's and the
/// close's seconds.
fn load(args: &OpenArgs, n: u64, path: &Path) -> Result<(f64, f64), String> {
    let db = Db::open(path, options(args, true)).map_err(|e| format!("--page-size {}: {e}", args.page_size))?;
    let (mut key, mut value) = ([0u8; KEY_SIZE], vec![0u8; args.value_bytes]);
    let start = Instant::now();
    let mut r = 0;
    while r < n {
        if harness::interrupted() {
            break;
        }
        let mut txn = db.begin().map_err(|e| e.to_string())?;
        for r in r..(r + LOAD_BATCH).min(n) {
            value_of(r, 0, &mut value);
            txn.put(key_of(r, KEY_SIZE, &mut key), &value).map_err(|e| format!("loading record {r}: {e}"))?;
        }
        txn.commit().map_err(|e| format!("loading: {e}"))?;
        r += LOAD_BATCH;
    }
    let load_secs = start.elapsed().as_secs_f64();
    let start = Instant::now();
    db.close().map_err(|e| format!("closing {}: {e}", path.display()))?;
    Ok((load_secs, start.elapsed().as_secs_f64()))
}

/// Opens the database `args.rounds` times in each of `modes` (alternating), checking records
/// after each (the reads settle the deferred writes they need), waiting until every deferred
/// write is applied, and closing without a checkpoint.
fn reopen_rounds(args: &OpenArgs, path: &Path, expect: &Expect, modes: &[ReplayMode]) -> Result<Vec<Open>, String> {
    let mut opens = Vec::new();
    for _ in 0..args.rounds {
        for &mode in modes {
            if harness::interrupted() {
                break;
            }
            if args.cold {
                evict(path, "")?;
            }
            let mut options = options(args, false);
            options.wal.deferred_replay = mode == ReplayMode::Deferred;
            let start = Instant::now();
            let db = Db::open(path, options).map_err(|e| format!("reopening {}: {e}", path.display()))?;
            let secs = start.elapsed().as_secs_f64();
            let r = db.stats().recovery.ok_or("a database on disk reports its recovery")?;
            let reading = Instant::now();
            check_records(&db, args, expect)?;
            let reads_secs = reading.elapsed().as_secs_f64();
            if r.deferred_writes > 0 {
                wait_applied(&db, path)?;
            }
            let settled_secs = start.elapsed().as_secs_f64();
            db.close().map_err(|e| format!("closing {}: {e}", path.display()))?;
            opens.push(Open {
                mode,
                secs,
                deferred_writes: r.deferred_writes,
                settled_secs,
                reads_secs,
                checkpoint_ms: r.checkpoint_millis,
                replay_ms: r.replay_millis,
                recovery_ms: r.millis,
                bytes_replayed: r.bytes_replayed,
                records_replayed: r.records_replayed,
            });
        }
    }
    if opens.is_empty() {
        return Err("interrupted before the first open".into());
    }
    Ok(opens)
}

/// Waits until every write the open deferred is applied (an error applying one ends it).
fn wait_applied(db: &Db, path: &Path) -> Result<(), String> {
    loop {
        let now = db.stats().recovery.ok_or("a database on disk reports its recovery")?;
        if let Some(e) = now.deferred_error {
            return Err(format!("applying the deferred writes of {}: {e}", path.display()));
        }
        if now.deferred_millis.is_some() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The record of one open phase (the median open by wall time) and its note.
fn open_record(
    args: &OpenArgs,
    params: Map<String, Value>,
    opens: &[Open],
    log_bytes: u64,
    notes: &mut Vec<String>,
    n: u64,
    after: &str,
) -> Record {
    // One operation per round: the open. Every open of `opens` is of the same mode.
    let rounds: Vec<(u64, f64)> = opens.iter().map(|o| (1, o.secs)).collect();
    let variant = opens[0].mode.variant();
    let (mut record, mid) =
        Record::median_round("open", variant.into(), 1, params, &rounds, Map::new()).expect("at least one open");
    let mid = &opens[mid];
    let median = |f: fn(&Open) -> f64| super::report::median(&opens.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0);
    let (settled, reads) = (median(|o| o.settled_secs), median(|o| o.reads_secs));
    let extra = &mut record.extra;
    extra.insert("open_ms".into(), round3(mid.secs * 1e3));
    extra.insert("deferred_writes".into(), json!(mid.deferred_writes));
    extra.insert("all_applied_ms".into(), round3(settled * 1e3));
    extra.insert("first_reads_ms".into(), round3(reads * 1e3));
    extra.insert("checkpoint_ms".into(), json!(mid.checkpoint_ms));
    extra.insert("replay_ms".into(), json!(mid.replay_ms));
    extra.insert("other_ms".into(), json!(mid.recovery_ms.saturating_sub(mid.checkpoint_ms + mid.replay_ms)));
    extra.insert("bytes_replayed".into(), json!(mid.bytes_replayed));
    extra.insert("records_replayed".into(), json!(mid.records_replayed));
    if log_bytes > 0 {
        extra.insert("log_bytes".into(), json!(log_bytes));
        let rate = millis_rate(mid.bytes_replayed as f64 / 1e6, mid.replay_ms);
        extra.insert("replay_mb_per_sec".into(), rate.map_or(Value::Null, round3));
    }
    extra.insert("target_ms".into(), json!(TARGET_MS));
    extra.insert("fairness".into(), json!(1.0));
    let deferred = match mid.deferred_writes {
        0 => String::new(),
        w => format!(", {w} writes deferred"),
    };
    notes.push(format!(
        "{n} records, {} open after {after}: {:.1} ms (checkpoint {} ms, replay {} ms of {:.1} MiB, other {} ms{deferred}); \
         {} reads after it {:.1} ms; everything applied {:.1} ms after the open began (medians){}",
        variant,
        mid.secs * 1e3,
        mid.checkpoint_ms,
        mid.replay_ms,
        mid.bytes_replayed as f64 / (1 << 20) as f64,
        mid.recovery_ms.saturating_sub(mid.checkpoint_ms + mid.replay_ms),
        READS,
        reads * 1e3,
        settled * 1e3,
        if args.rounds > 1 {
            format!("; rounds {}", opens.iter().map(|o| format!("{:.1}", o.secs * 1e3)).collect::<Vec<_>>().join(", "))
        } else {
            String::new()
        }
    ));
    record
}

/// Updates `args.updates` random records (pass 1, one per transaction), then checkpoints;
/// returns the checkpoint's seconds and bytes written.
fn update_and_checkpoint(args: &OpenArgs, n: u64, path: &Path, expect: &mut Expect) -> Result<(f64, u64), String> {
    let db = Db::open(path, options(args, false)).map_err(|e| format!("opening {}: {e}", path.display()))?;
    let (mut key, mut value) = ([0u8; KEY_SIZE], vec![0u8; args.value_bytes]);
    for i in 0..args.updates {
        let r = mix64(i ^ 0x5eed) % n;
        value_of(r, 1, &mut value);
        let mut txn = db.begin().map_err(|e| e.to_string())?;
        txn.put(key_of(r, KEY_SIZE, &mut key), &value).map_err(|e| format!("updating record {r}: {e}"))?;
        txn.commit().map_err(|e| format!("update {i}: {e}"))?;
        expect.updated.insert(r);
    }
    let start = Instant::now();
    let info = db.checkpoint().map_err(|e| format!("checkpoint: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    if info.is_none() {
        return Err("the checkpoint after the updates wrote nothing".into());
    }
    // What the database itself reports as the last checkpoint's bytes.
    let bytes = db.stats().checkpoints.last_bytes;
    db.close().map_err(|e| format!("closing {}: {e}", path.display()))?;
    Ok((secs, bytes))
}

/// Runs the child that writes about `args.log_bytes` of log and kills it; returns its commits
/// and the log bytes it reported.
fn crash(args: &OpenArgs, n: u64, path: &Path) -> Result<(u64, u64), String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this program to re-run it: {e}"))?;
    let mut child = Command::new(&exe)
        .args(["bench", "open", "--records", &n.to_string(), "--value-bytes", &args.value_bytes.to_string()])
        .args(["--log-bytes", &args.log_bytes.to_string()])
        .args(args.cache.map(|c| format!("--cache={c}")))
        .arg("--crash-child")
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting the crash child ({}): {e}", exe.display()))?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        return Err("the crash child has no stdout".into());
    };
    let mut line = String::new();
    let read = BufReader::new(stdout).read_line(&mut line);
    // SIGKILL: the child gets no chance to close, checkpoint or flush anything.
    let _ = child.kill();
    let status = child.wait().map_err(|e| format!("waiting for the crash child: {e}"))?;
    read.map_err(|e| format!("reading from the crash child: {e}"))?;
    let mut words = line.split_whitespace();
    match (words.next(), words.next().map(str::parse::<u64>), words.next().map(str::parse::<u64>)) {
        (Some("ready"), Some(Ok(commits)), Some(Ok(bytes))) => Ok((commits, bytes)),
        _ => Err(format!("the crash child ended ({status}) without writing its log: {line:?}")),
    }
}

/// The child: commits records `i % records` (pass `2 + i / records`) until the log holds
/// `log_bytes`, says `ready <commits> <log bytes>`, and waits for its SIGKILL.
fn crash_child(args: &OpenArgs, path: &Path) -> Result<(), String> {
    let n = args.records[0];
    let db = Db::open(path, options(args, false)).map_err(|e| format!("opening {}: {e}", path.display()))?;
    let (mut key, mut value) = ([0u8; KEY_SIZE], vec![0u8; args.value_bytes]);
    let log_bytes = |db: &Db| db.stats().wal.map_or(0, |w| w.bytes);
    let mut commits = 0u64;
    while commits % 1024 != 0 || log_bytes(&db) < args.log_bytes {
        let r = commits % n;
        value_of(r, CHILD_PASS + commits / n, &mut value);
        let mut txn = db.begin().map_err(|e| e.to_string())?;
        txn.put(key_of(r, KEY_SIZE, &mut key), &value).map_err(|e| e.to_string())?;
        txn.commit().map_err(|e| format!("commit {commits}: {e}"))?;
        commits += 1;
    }
    // NoSync: every commit's record is in the operating system's hands, so a SIGKILL loses none.
    println!("ready {commits} {}", log_bytes(&db));
    let mut sink = String::new();
    let _ = std::io::stdin().read_line(&mut sink);
    // Reached only if the parent went away without killing us: leave the log as a crash would.
    std::process::abort();
}

/// Records [`check_records`] reads at most.
const READS: usize = 2000;

/// Reads back up to 1000 records spread over the key space and every updated one (up to
/// 1000); each must hold its last write.
fn check_records(db: &Db, args: &OpenArgs, expect: &Expect) -> Result<(), String> {
    let n = expect.records;
    let step = (n / 1000).max(1);
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let updated = expect.updated.iter().copied().take(1000);
    for r in (0..n).step_by(step as usize).chain(updated) {
        check_record(&txn, r, expect.pass(r), args.value_bytes)?;
    }
    Ok(())
}

/// The options of every open: no sync, no automatic checkpoint, `--page-size` (used when the
/// database is created) and `--cache`.
fn options(args: &OpenArgs, close_checkpoint: bool) -> tern::Options {
    let mut options = nosync_options(close_checkpoint);
    options.tree.page_size = usize::try_from(args.page_size).unwrap_or(usize::MAX);
    if let Some(cache) = args.cache {
        options.cache_bytes = cache;
    }
    options
}

/// Bytes the database's files take on disk (allocated blocks: the page file is sparse, each
/// page's second slot taking space only once written).
pub(super) fn dir_bytes(path: &Path) -> Result<u64, String> {
    use std::os::unix::fs::MetadataExt;
    let entries = std::fs::read_dir(path).map_err(|e| format!("listing {}: {e}", path.display()))?;
    let mut total = 0;
    for entry in entries.flatten() {
        let meta = entry.metadata().map_err(|e| format!("{}: {e}", entry.path().display()))?;
        if meta.is_file() {
            total += meta.blocks() * 512;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::{Expect, CHILD_PASS};
    use std::collections::HashSet;

    #[test]
    fn the_expected_pass_follows_the_child_over_the_updates() {
        let updated: HashSet<u64> = [3, 7].into();
        let mut e = Expect { records: 10, updated, child_commits: 0 };
        assert_eq!((e.pass(0), e.pass(3)), (0, 1));
        e.child_commits = 5;
        assert_eq!((e.pass(4), e.pass(5), e.pass(7)), (CHILD_PASS, 0, 1));
        e.child_commits = 23;
        // Records 0..3 were written in the child's third pass, 3.. in its second.
        assert_eq!((e.pass(2), e.pass(3), e.pass(9)), (CHILD_PASS + 2, CHILD_PASS + 1, CHILD_PASS + 1));
    }
}
