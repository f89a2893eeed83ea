//! Crash test: a child process commits transfers and random writes, reporting each commit as
//! it is acknowledged; the parent kills it with SIGKILL at a random moment, reopens the
//! database and checks it against a model of the acknowledged commits. Many rounds on one
//! database, so recovery also recovers from databases that were themselves recovered.
//!
//! The same binary is parent and child (`harness = false`): with `TERN_CRASH_CHILD` set it runs
//! the child's workload.
//!
//! First, children are killed during the very first open of fresh directories (kill times
//! spread over how long such an open takes on this machine): every directory left must open.
//! `TERN_CRASH_FIRST_OPENS` (40) and `TERN_CRASH_ROUNDS` (24) set how many of each.
//!
//! Each child thread owns a keyspace (`t/<thread>/...`) and numbers its transactions; the
//! changes of transaction `seq` of thread `t` are a function of `(t, seq)` and of the state
//! before it, so the parent can replay any prefix into a model. After a kill, for each thread,
//! the recovered `seq` must be at least the last acknowledged one (durable commits survive) and
//! at most one more (the one in flight), and the thread's keys must equal the model after
//! exactly that many transactions (no partial transaction, no lost or invented write).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern::{Db, Durability, Options, WalConfig};

const THREADS: u64 = 3;
const ACCOUNTS: u64 = 8;
const KEYS: u64 = 64;
const START_BALANCE: u64 = 100;

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn options(mode: &str) -> Options {
    let durability = match mode {
        "sync" => Durability::Sync,
        "nosync" => Durability::NoSync,
        _ => Durability::Periodic(Duration::from_millis(20)),
    };
    // 4 KiB pages and the smallest buffer pool (16 pages, 64 KiB; the rest of the 128 KiB cache
    // is row cache) under a database of more than 1 MiB (the ballast table): pages are evicted
    // and read back throughout.
    Options {
        wal: WalConfig { durability, file_bytes: 32 << 10, checkpoint_bytes: 256 << 10, ..WalConfig::default() },
        tree: tern::btree::TreeConfig { page_size: 4096, ..Default::default() },
        cache_bytes: 128 << 10,
        row_cache_percent: 50,
        ..Options::default()
    }
}

/// Entries of the ballast table, each `BALLAST_VALUE` bytes, written in one transaction.
const BALLAST: u32 = 1000;
const BALLAST_VALUE: usize = 1000;

/// The ballast table, created and filled (in one transaction) if this database has none yet.
fn ballast(db: &Db) -> tern::Table {
    let table = match db.table("ballast") {
        Ok(table) => table,
        Err(_) => db.create_table("ballast").expect("creates the ballast table"),
    };
    let empty = db.begin_read().unwrap().range_in(&table, ..).unwrap().next().is_none();
    if empty {
        let mut txn = db.begin().unwrap();
        for i in 0..BALLAST {
            txn.put_in(&table, &i.to_be_bytes(), &[i as u8; BALLAST_VALUE]).unwrap();
        }
        txn.commit().unwrap();
    }
    table
}

fn account(t: u64, i: u64) -> Vec<u8> {
    format!("t/{t}/acct/{i}").into_bytes()
}

fn seq_key(t: u64) -> Vec<u8> {
    format!("t/{t}/seq").into_bytes()
}

/// The changes of transaction `seq` of thread `t`, given a reader of the state before it.
fn changes(t: u64, seq: u64, read: impl Fn(&[u8]) -> Option<Vec<u8>>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    if seq == 1 {
        for i in 0..ACCOUNTS {
            out.push((account(t, i), Some(START_BALANCE.to_string().into_bytes())));
        }
    } else {
        let r = mix(t << 40 ^ seq);
        let (from, to) = (r % ACCOUNTS, (r >> 8) % ACCOUNTS);
        let amount = (r >> 16) % 40;
        let balance = |i| String::from_utf8(read(&account(t, i)).unwrap()).unwrap().parse::<u64>().unwrap();
        if from != to && balance(from) >= amount {
            out.push((account(t, from), Some((balance(from) - amount).to_string().into_bytes())));
            out.push((account(t, to), Some((balance(to) + amount).to_string().into_bytes())));
        }
        for j in 0..1 + (r >> 24) % 3 {
            let rr = mix(r ^ j);
            let key = format!("t/{t}/k/{}", rr % KEYS).into_bytes();
            let value = (rr >> 32 & 7 != 0).then(|| format!("{t}:{seq}:{}", "x".repeat((rr >> 40) as usize % 300)));
            out.push((key, value.map(String::into_bytes)));
        }
    }
    out.push((seq_key(t), Some(seq.to_string().into_bytes())));
    out
}

/// Where the children of database `dir` put their backups.
fn backups_dir(dir: &Path) -> PathBuf {
    dir.with_file_name(format!("{}-backups", dir.file_name().unwrap().to_string_lossy()))
}

fn child(dir: &Path, mode: &str) {
    let db = Db::open(dir, options(mode)).expect("the child opens the database");
    std::fs::create_dir_all(backups_dir(dir)).unwrap();
    ballast(&db);
    let out = Arc::new(Mutex::new(std::io::stdout()));
    {
        let mut out = out.lock().unwrap();
        writeln!(out, "open").unwrap();
        out.flush().unwrap();
    }
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (db, out) = (&db, out.clone());
            s.spawn(move || {
                let start = db.begin_read().unwrap().get(&seq_key(t)).unwrap();
                let mut seq = start.map_or(0, |v| String::from_utf8(v).unwrap().parse::<u64>().unwrap());
                loop {
                    seq += 1;
                    let mut txn = db.begin().unwrap();
                    for (key, value) in changes(t, seq, |k| txn.get(k).unwrap()) {
                        match value {
                            Some(v) => txn.put(&key, &v).unwrap(),
                            None => {
                                txn.delete(&key).unwrap();
                            }
                        }
                    }
                    txn.commit().unwrap();
                    let mut o = out.lock().unwrap();
                    writeln!(o, "{t} {seq}").unwrap();
                    o.flush().unwrap();
                    drop(o);
                    if t == 0 && seq % 400 == 0 {
                        db.checkpoint().unwrap();
                    }
                    if t == 1 && seq % 300 == 0 {
                        // A hot backup while the other threads commit: the parent checks it
                        // holds every commit acknowledged before this line.
                        let dst = backups_dir(dir).join(format!("{}-{seq}", std::process::id()));
                        let mut o = out.lock().unwrap();
                        writeln!(o, "backup {}", dst.display()).unwrap();
                        o.flush().unwrap();
                        drop(o);
                        db.backup(&dst).unwrap();
                        let mut o = out.lock().unwrap();
                        writeln!(o, "backed-up {}", dst.display()).unwrap();
                        o.flush().unwrap();
                    }
                }
            });
        }
    });
}

/// The model of thread `t` after `n` transactions.
fn model(t: u64, n: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for seq in 1..=n {
        for (k, v) in changes(t, seq, |k| m.get(k).cloned()) {
            match v {
                Some(v) => m.insert(k, v),
                None => m.remove(&k),
            };
        }
    }
    m
}

/// Opens `dir`, checks every thread's keys against the model; returns the recovered sequence
/// numbers.
fn verify(dir: &Path, acked: &[u64], mode: &str, round: usize) -> Vec<u64> {
    verify_with(dir, acked, mode, round, false)
}

/// Checks the database in `dir` against the model. A `backup` holds a snapshot taken after
/// the commits of `acked` were acknowledged (in any mode) and possibly many more: `acked` is
/// then a lower bound only.
fn verify_with(dir: &Path, acked: &[u64], mode: &str, round: usize, backup: bool) -> Vec<u64> {
    let db = Db::open(dir, options(mode)).unwrap_or_else(|e| panic!("round {round}: reopening failed: {e}"));
    let txn = db.begin_read().unwrap();
    let mut recovered = Vec::new();
    for t in 0..THREADS {
        let seq = txn.get(&seq_key(t)).unwrap().map_or(0, |v| String::from_utf8(v).unwrap().parse::<u64>().unwrap());
        let lost = seq < acked[t as usize];
        assert!(
            (mode == "periodic" && !backup) || !lost,
            "round {round} ({mode}, backup {backup}): thread {t} acknowledged commit {} but only {seq} survived",
            acked[t as usize]
        );
        assert!(
            backup || seq <= acked[t as usize] + 1,
            "round {round}: thread {t} recovered {seq}, acknowledged {}",
            acked[t as usize]
        );
        let prefix = format!("t/{t}/").into_bytes();
        let got: BTreeMap<Vec<u8>, Vec<u8>> =
            txn.range(&prefix[..]..).unwrap().take_while(|(k, _)| k.starts_with(&prefix)).collect();
        let want = model(t, seq);
        assert!(got == want, "round {round} ({mode}): thread {t} at seq {seq}: state differs from the model");
        let total: u64 = (0..ACCOUNTS)
            .filter_map(|i| got.get(&account(t, i)))
            .map(|v| String::from_utf8(v.clone()).unwrap().parse::<u64>().unwrap())
            .sum();
        assert!(seq == 0 || total == ACCOUNTS * START_BALANCE, "round {round}: thread {t} balances sum to {total}");
        recovered.push(seq);
    }
    // The ballast is all there or (if the child died before its one commit) all absent.
    if let Ok(table) = db.table("ballast") {
        let mut range = txn.range_in(&table, ..).unwrap();
        let entries: Vec<_> = range.by_ref().collect();
        assert!(range.error().is_none(), "round {round}: reading the ballast: {:?}", range.error());
        assert!(
            entries.is_empty() || entries.len() == BALLAST as usize,
            "round {round}: a torn ballast ({} entries)",
            entries.len()
        );
        for (k, v) in &entries {
            let i = u32::from_be_bytes(k[..].try_into().unwrap());
            assert!(v.len() == BALLAST_VALUE && v.iter().all(|&b| b == i as u8), "round {round}: ballast {i}");
        }
        let buffer = db.stats().buffer;
        assert!(entries.is_empty() || buffer.evictions > 0, "round {round}: a database 16x its cache evicts");
    }
    let stats = db.stats().recovery.unwrap();
    drop(txn);
    // A clean close (a checkpoint): on even rounds the next child starts from it.
    db.close().unwrap();
    let what = if backup { "backup" } else { mode };
    eprintln!("round {round:2} ({what:8}): acked {acked:?} recovered {recovered:?}; {stats}");
    recovered
}

/// What the parent saw of one child: its acknowledged commits, and whether it got its database
/// open.
struct Seen {
    acked: Vec<u64>,
    opened: bool,
    /// Backups the child began: destination, commits acknowledged before it began, finished.
    backups: Vec<(PathBuf, Vec<u64>, bool)>,
}

/// Runs a child on `dir` in `mode`, kills it (SIGKILL) after `wait`, and returns what it
/// acknowledged (counting on from `acked`) and how long it took to open the database.
fn run_child(dir: &Path, mode: &str, acked: &[u64], wait: Duration) -> (Seen, Option<Duration>) {
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut child = Command::new(&exe)
        .env("TERN_CRASH_CHILD", dir)
        .env("TERN_CRASH_MODE", mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let seen = Arc::new(Mutex::new((Seen { acked: acked.to_vec(), opened: false, backups: Vec::new() }, None)));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut seen = seen.lock().unwrap();
                if line == "open" {
                    seen.0.opened = true;
                    seen.1 = Some(started.elapsed());
                    continue;
                }
                if let Some(dst) = line.strip_prefix("backup ") {
                    let acked = seen.0.acked.clone();
                    seen.0.backups.push((PathBuf::from(dst), acked, false));
                    continue;
                }
                if let Some(dst) = line.strip_prefix("backed-up ") {
                    let last = seen.0.backups.last_mut().expect("a backup began");
                    assert_eq!(last.0, Path::new(dst));
                    last.2 = true;
                    continue;
                }
                let mut parts = line.split(' ').map(|p| p.parse::<u64>().unwrap());
                let (t, seq) = (parts.next().unwrap(), parts.next().unwrap());
                assert_eq!(seq, seen.0.acked[t as usize] + 1, "the child skipped a number");
                seen.0.acked[t as usize] = seq;
            }
        })
    };
    std::thread::sleep(wait);
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child ended on its own: {status}");
    reader.join().unwrap();
    let (seen, opened_after) = std::mem::replace(
        &mut *seen.lock().unwrap(),
        (Seen { acked: Vec::new(), opened: false, backups: Vec::new() }, None),
    );
    (seen, opened_after)
}

/// Kills children during the very first open of fresh directories (creating the directory,
/// its lock, settings and first log file): each directory left must open with every
/// acknowledged commit. The kill times are spread over how long a first open takes here
/// (measured first), so the kills land inside it on any machine.
fn first_opens(root: &Path, rounds: usize) {
    // A loaded machine opens more slowly: wait longer each time until a child has opened.
    let window = [300, 1000, 3000, 10_000, 30_000]
        .iter()
        .enumerate()
        .find_map(|(i, &ms)| {
            let dir = root.join(format!("measure{i}"));
            run_child(&dir, "sync", &[0; THREADS as usize], Duration::from_millis(ms)).1
        })
        .expect("a child opens a fresh database within 30 s")
        .max(Duration::from_millis(1));
    let mut during_open = 0;
    for round in 0..rounds {
        let dir = root.join(format!("fresh{round}")).join("db");
        let r = mix(round as u64 ^ 0xf1e5);
        let wait = window.mul_f64((r % 1000) as f64 / 800.0);
        let (seen, _) = run_child(&dir, "sync", &[0; THREADS as usize], wait);
        during_open += usize::from(!seen.opened);
        if dir.exists() {
            verify(&dir, &seen.acked, "sync", round);
        }
    }
    eprintln!(
        "first opens: {rounds} kills within {:.1} ms of start, {during_open} before the open returned: every directory opened",
        window.as_secs_f64() * 1e3 * 1.25
    );
}

fn main() {
    if let Ok(dir) = std::env::var("TERN_CRASH_CHILD") {
        child(Path::new(&dir), &std::env::var("TERN_CRASH_MODE").unwrap());
        return;
    }
    let rounds: usize = std::env::var("TERN_CRASH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(24);
    let fresh: usize = std::env::var("TERN_CRASH_FIRST_OPENS").ok().and_then(|r| r.parse().ok()).unwrap_or(40);
    let root = tempfile::tempdir().unwrap();
    let started = Instant::now();
    first_opens(root.path(), fresh);
    let dir = root.path().join("db");
    let mut recovered = vec![0u64; THREADS as usize];
    let (mut backups_checked, mut backups_cut) = (0, 0);
    for round in 0..rounds {
        let mode = ["sync", "nosync", "periodic"][round % 3];
        // Some kills land during the child's own recovery, most in the middle of its commits.
        let r = mix(round as u64 ^ 0x5eed);
        let wait = if r % 5 == 0 { r % 30 } else { 50 + r % 400 };
        let (seen, _) = run_child(&dir, mode, &recovered, Duration::from_millis(wait));
        for (dst, acked_before, finished) in &seen.backups {
            // A finished backup opens with every commit acknowledged before it began; one the
            // kill cut short left no destination, or a complete one (renamed, not yet reported).
            if *finished || dst.exists() {
                verify_with(dst, acked_before, mode, round, true);
                backups_checked += 1;
            }
            backups_cut += usize::from(!finished);
        }
        let acked = seen.acked;
        // Verify on the directory itself with a clean close (even rounds) or on a copy that
        // is then dropped (odd rounds: the original goes on unrecovered into the next round).
        if round % 2 == 0 {
            recovered = verify(&dir, &acked, mode, round);
        } else {
            let copy = root.path().join(format!("copy{round}"));
            std::fs::create_dir(&copy).unwrap();
            for f in std::fs::read_dir(&dir).unwrap() {
                let f = f.unwrap();
                if f.file_name() != "LOCK" {
                    std::fs::copy(f.path(), copy.join(f.file_name())).unwrap();
                }
            }
            recovered = verify(&copy, &acked, mode, round);
            let report = tern::recovery::check(&dir).unwrap();
            assert!((1..=2).contains(&report.tables.len()), "the default table and maybe the ballast");
        }
    }
    eprintln!(
        "crash test: {fresh} first opens and {rounds} rounds in {:.1} s: ok; {backups_checked} hot backups opened and \
         checked, {backups_cut} cut short by the kill",
        started.elapsed().as_secs_f64()
    );
}
