//! `tern bench txn`: transaction begin+commit throughput, per-thread contexts against one global
//! latch.

use super::dist::mix64;
use super::harness::{run_threads, Control, LatencySampler, Sample, ThreadResult};
use super::report::{emit, Record};
use super::runner::{self, round3, with_pause_latches, Case, RunFn, PAUSE_VARIANT};
use super::Common;
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use tern::{Db, Options, TxnTracking};

const LONG_ABOUT: &str = "\
Transaction throughput: every thread loops begin -> (work) -> commit.

Kinds: empty (a read-only transaction, begun and committed: the bare begin/commit path), read1
(a read-only transaction reading one random key), write1 (a read-write transaction writing one
key of the thread's own range: no conflicts, so the commit path is what is measured, version
collection included). The table holds --keys keys of 16 bytes with 100-byte values.

Variants, interleaved in each round: tern (each transaction announces itself in a slot of its
thread's context) and global-latch (every begin and end takes one latch, spinning with
sched_yield, around one list of running transactions: NoisePage's design). vs base is tern over
global-latch; vs 1T the ratio to the same variant at one thread. Thread counts above the core
count are on purpose: the global latch's holder gets preempted there.";

/// Which transactions to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// Read-only begin+commit.
    Empty,
    /// Read-only, one read.
    Read1,
    /// Read-write, one write.
    Write1,
}

/// Options of `tern bench txn`.
#[derive(Args, Clone, Debug)]
#[command(
    about = "Transaction begin+commit throughput: per-thread contexts vs one global latch",
    long_about = LONG_ABOUT,
    mut_arg("threads", |a| a.default_value("1,2,4,8,16,32")),
)]
pub struct TxnArgs {
    #[command(flatten)]
    pub common: Common,
    /// Kinds of transaction.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "empty,read1,write1")]
    pub kind: Vec<Kind>,
    /// Keys in the table.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub keys: u64,
    /// Only these variants (tern, global-latch; and, only when named, tern-pause: tern with
    /// every latch class on the fixed PAUSE policy instead of the adaptive default).
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub variants: Option<Vec<String>>,
    /// Time one transaction in this many (0: none).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub sample_every: u64,
}

const TERN: &str = "tern";
const BASELINE: &str = "global-latch";

impl TxnArgs {
    fn validate(&self) -> Result<(), String> {
        self.common.validate()?;
        if self.kind.is_empty() {
            return Err("--kind must name at least one kind".into());
        }
        if self.keys == 0 || self.keys > 100_000_000 {
            return Err(format!("--keys must be in 1..=100000000, got {}", self.keys));
        }
        if let Some(bad) =
            self.variants.iter().flatten().find(|n| ![TERN, BASELINE, PAUSE_VARIANT].contains(&n.as_str()))
        {
            return Err(format!("unknown variant {bad:?} (tern, global-latch, tern-pause)"));
        }
        Ok(())
    }

    fn wanted(&self, variant: &str) -> bool {
        runner::wanted(self.variants.as_deref(), variant)
    }

    fn named(&self, variant: &str) -> bool {
        runner::named(self.variants.as_deref(), variant)
    }
}

/// Key `i`: a hash of `i` first (keys spread over the key space), then `i`.
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&mix64(i).to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

/// A database with `keys` keys, collected into plain values.
fn load(tracking: TxnTracking, keys: u64) -> Result<Db, String> {
    let db = Db::open_temporary(Options { tracking, ..Options::default() }).map_err(|e| e.to_string())?;
    let value = [7u8; 100];
    for chunk in (0..keys).collect::<Vec<_>>().chunks(10_000) {
        let mut t = db.begin().map_err(|e| e.to_string())?;
        for &i in chunk {
            t.put(&key(i), &value).map_err(|e| e.to_string())?;
        }
        t.commit().map_err(|e| e.to_string())?;
    }
    db.gc();
    Ok(db)
}

/// One thread's loop.
fn thread(db: &Db, kind: Kind, keys: u64, sample_every: u64, i: usize, threads: usize, ctl: &Control) -> ThreadResult {
    let mut sampler = LatencySampler::new(sample_every);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (i as u64) << 20 | 1;
    let value = [i as u8; 100];
    // write1: each thread writes its own keys (no conflicts): thread i owns keys i, i+T, i+2T...
    let own = (keys / threads as u64).max(1);
    let mut ops = 0u64;
    while ctl.running() {
        let start = sampler.begin();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        match kind {
            Kind::Empty => db.begin_read().expect("begin").commit().expect("commit"),
            Kind::Read1 => {
                let t = db.begin_read().expect("begin");
                let v = t.get(&key(rng % keys)).expect("get");
                assert!(v.is_some(), "every key was loaded");
                t.commit().expect("commit");
            }
            Kind::Write1 => {
                let mut t = db.begin().expect("begin");
                let k = (rng % own) * threads as u64 + i as u64;
                t.put(&key(k % keys), &value).expect("no conflicts: each thread has its own keys");
                t.commit().expect("commit");
            }
        }
        sampler.record_since(start);
        ops += 1;
    }
    sampler.finish(ops)
}

fn measure(db: &Db, args: &TxnArgs, kind: Kind, threads: usize) -> Option<Sample> {
    let before = db.stats();
    let mut sample = run_threads(threads, args.common.duration(), |i, ctl| {
        thread(db, kind, args.keys, args.sample_every, i, threads, ctl)
    })?;
    let after = db.stats();
    let ops = sample.ops().max(1) as f64;
    sample.extra.insert("gc_passes".into(), json!(after.gc.passes - before.gc.passes));
    sample.extra.insert("versions_live".into(), json!(after.gc.versions_live));
    sample.extra.insert("lock_waits_per_op".into(), round3((after.locks.waits - before.locks.waits) as f64 / ops));
    Some(sample)
}

/// Runs `tern bench txn`.
pub fn run(args: &TxnArgs) -> Result<(), String> {
    args.validate()?;
    let threads = args.common.threads();
    let mut dbs = Vec::new();
    for (name, tracking) in [(TERN, TxnTracking::PerThread), (BASELINE, TxnTracking::GlobalLatch)] {
        // tern's database also serves tern-pause.
        if args.wanted(name) || (name == TERN && args.named(PAUSE_VARIANT)) {
            dbs.push((name, load(tracking, args.keys)?));
        }
    }
    let mut cases = Vec::new();
    for &kind in &args.kind {
        for &t in &threads {
            let mut variants: Vec<(String, RunFn<'_>)> = dbs
                .iter()
                .filter(|(name, _)| args.wanted(name))
                .map(|(name, db)| (name.to_string(), Box::new(move || measure(db, args, kind, t)) as RunFn<'_>))
                .collect();
            if let Some((_, db)) = dbs.iter().find(|(name, _)| *name == TERN).filter(|_| args.named(PAUSE_VARIANT)) {
                let pause: RunFn<'_> = Box::new(move || with_pause_latches(|| measure(db, args, kind, t)));
                variants.push((PAUSE_VARIANT.into(), pause));
            }
            cases.push(Case {
                params: vec![("kind", json!(kind_name(kind)))],
                threads: t,
                variants,
                baseline: Some(BASELINE.into()),
            });
        }
    }
    let mut records = runner::run("txn", &cases, args.common.rounds);
    records.iter_mut().for_each(runner::add_ns_per_op);
    let title = format!(
        "txn: begin+commit, {} keys, {} s per point, {} round(s); {} CPUs",
        args.keys,
        args.common.duration,
        args.common.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    emit(&records, args.common.json, &title, &key_ratios(&records));
    Ok(())
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Empty => "empty",
        Kind::Read1 => "read1",
        Kind::Write1 => "write1",
    }
}

/// The figures issue #5 judges transactions by.
fn key_ratios(records: &[Record]) -> Vec<String> {
    let find = |kind: &str, variant: &str, threads: usize| {
        records
            .iter()
            .find(|r| r.params.get("kind") == Some(&json!(kind)) && r.variant == variant && r.threads == threads)
    };
    let mut notes = Vec::new();
    let mut line = |label: String, value: Option<String>| {
        if let Some(v) = value {
            notes.push(format!("  {label:<64} {v}"));
        }
    };
    for kind in ["empty", "read1", "write1"] {
        let ns = find(kind, TERN, 1).and_then(|r| r.extra.get("ns_per_op").and_then(Value::as_f64));
        line(format!("{kind}: tern, 1 thread, one begin+commit"), ns.map(|ns| format!("{ns:.1} ns")));
        let ratio = |a: Option<&Record>, b: Option<&Record>| {
            a.zip(b).map(|(a, b)| format!("{:.2}x", a.ops_per_sec / b.ops_per_sec))
        };
        line(format!("{kind}: tern, 2 threads / 1 thread"), ratio(find(kind, TERN, 2), find(kind, TERN, 1)));
        line(format!("{kind}: tern, 32 threads / 2 threads"), ratio(find(kind, TERN, 32), find(kind, TERN, 2)));
        line(
            format!("{kind}: tern / global-latch, 32 threads (medians)"),
            ratio(find(kind, TERN, 32), find(kind, BASELINE, 32)),
        );
    }
    if !notes.is_empty() {
        notes.insert(0, "\nkey ratios:".into());
    }
    notes
}
