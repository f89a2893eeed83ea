//! `tern bench tree`: B+tree point lookups and inserts, per search layout and prefetch depth,
//! against `std::collections::BTreeMap`.

use super::dist::{mix64, Dist, Sampler, SplitMix64};
use super::harness::{run_threads, run_threads_to_completion, Control, LatencySampler, Sample, ThreadResult};
use super::report::{emit, Record};
use super::runner::{self, Case, RunFn};
use super::workload::key_of;
use super::Common;
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use tern::btree::{BTree, Layout, TreeConfig};

const LONG_ABOUT: &str = "\
Point lookups and inserts on tern's B+tree, in each node-search layout (sorted, branchfree,
eytzinger, btree) and software-prefetch depth (0, 1, 2), with std::collections::BTreeMap as the
reference.

Lookups: a tree of N keys (--keys) is bulk-loaded once per layout and page size, then every
thread looks up existing keys drawn uniformly or scrambled-zipfian (--dist) for --duration,
copying each value out. Keys are --key-size bytes whose first 8 bytes are a hash of the item
number (so they spread over the key space), values --value-size bytes; every value read is
checked. References: std-btreemap is BTreeMap<Box<[u8]>, Box<[u8]>> (byte-string keys, as a
generic key-value store holds them); std-btreemap-fixed is BTreeMap<[u8; 16], [u8; 100]> (keys
and values inline: BTreeMap's best case; only for 16-byte keys and 100-byte values).

Inserts (--op insert): each run inserts --insert-keys new keys in random order into an empty
tree, the threads splitting the work, at tern's default prefetch depth (--prefetch applies to
lookups only); std-btreemap only single-threaded.

The slot-array layouts (sorted, branchfree) run with and without the node hint array (--hints):
a variant named LAYOUT+hints keeps 16 samples of each node's slot heads and binary-searches only
the slots between two samples. Node memory is advised for transparent huge pages unless
--huge-pages off (variants named +nohuge). Variants of one point run interleaved, once per
round; vs base is against sorted at prefetch 0 without hints. ns_per_op is one thread's time
per operation.";

/// A switch measured on and off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// One tree configuration measured (besides page size and prefetch depth).
#[derive(Clone, Copy, Debug)]
struct Shape {
    layout: Layout,
    hints: bool,
    huge_pages: bool,
}

impl Shape {
    fn config(self, page_size: usize, prefetch: u8) -> TreeConfig {
        TreeConfig { page_size, layout: self.layout, prefetch, hints: self.hints, huge_pages: self.huge_pages }
    }

    /// The variant's name: the layout, `+hints` when nodes keep hints, `+nohuge` without
    /// transparent huge pages.
    fn name(self) -> String {
        let hints = if self.hints { "+hints" } else { "" };
        let huge = if self.huge_pages { "" } else { "+nohuge" };
        format!("{}{hints}{huge}", self.layout)
    }
}

/// Which operations to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Op {
    Get,
    Insert,
}

/// Options of `tern bench tree`.
#[derive(Args, Clone, Debug)]
#[command(about = "B+tree lookups and inserts per layout and prefetch depth, vs std BTreeMap", long_about = LONG_ABOUT)]
pub struct TreeArgs {
    #[command(flatten)]
    pub common: Common,
    /// Keys in the tree for lookups, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000", value_name = "N,...")]
    pub keys: Vec<u64>,
    /// Lookup key distributions.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "uniform,zipfian")]
    pub dist: Vec<Dist>,
    /// Node-search layouts.
    #[arg(long, value_delimiter = ',', default_value = "sorted,branchfree,eytzinger,btree", value_name = "LAYOUT,...")]
    pub layout: Vec<Layout>,
    /// Node hint arrays, for the slot-array layouts (sorted, branchfree).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on,off")]
    pub hints: Vec<Switch>,
    /// Node memory advised for transparent huge pages.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub huge_pages: Vec<Switch>,
    /// Software-prefetch depths of lookups (inserts run at tern's default depth,
    /// `TreeConfig::DEFAULT.prefetch`, named in their variant and `prefetch` field).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2", value_name = "D,...")]
    pub prefetch: Vec<u8>,
    /// Page sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "16384", value_name = "BYTES,...")]
    pub page_size: Vec<usize>,
    /// Operations to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "get,insert")]
    pub op: Vec<Op>,
    /// Keys per insert run.
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub insert_keys: u64,
    /// Key size in bytes (at least 8).
    #[arg(long, default_value_t = 16, value_name = "BYTES")]
    pub key_size: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100, value_name = "BYTES")]
    pub value_size: usize,
    /// Leave out the std::collections::BTreeMap references.
    #[arg(long)]
    pub no_reference: bool,
    /// Time one operation in this many (0: none).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub sample_every: u64,
    /// Seed for keys drawn and inserted.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

impl TreeArgs {
    fn validate(&self) -> Result<(), String> {
        self.common.validate()?;
        if self.keys.is_empty() || self.keys.iter().any(|&n| n == 0 || n > 1 << 32) {
            return Err(format!("--keys must list counts in 1..=2^32, got {:?}", self.keys));
        }
        if self.prefetch.is_empty() || self.prefetch.iter().any(|&d| d > 2) {
            return Err(format!("--prefetch must list depths in 0..=2, got {:?}", self.prefetch));
        }
        if self.key_size < 8 || self.key_size > 512 {
            return Err(format!("--key-size must be in 8..=512, got {}", self.key_size));
        }
        if self.value_size > 1 << 20 {
            return Err(format!("--value-size must be at most 1 MiB, got {}", self.value_size));
        }
        if self.insert_keys == 0 {
            return Err("--insert-keys must be positive".into());
        }
        for &page_size in &self.page_size {
            let config = TreeConfig { page_size, ..TreeConfig::DEFAULT };
            BTree::new(config).map_err(|e| format!("--page-size {page_size}: {e}"))?;
            if self.key_size > page_size / 8 {
                return Err(format!("--key-size {} exceeds the largest key of {page_size}-byte pages", self.key_size));
            }
        }
        Ok(())
    }

    /// Each layout with each hint and huge-page setting measured (hints only for slot-array
    /// layouts).
    fn shapes(&self) -> Vec<Shape> {
        let mut v = Vec::new();
        for &layout in &self.layout {
            let mut hints: Vec<bool> =
                self.hints.iter().map(|&h| h == Switch::On).filter(|&h| layout.searches_slots() || !h).collect();
            if hints.is_empty() {
                hints.push(false);
            }
            for &hints in &hints {
                for &huge in &self.huge_pages {
                    v.push(Shape { layout, hints, huge_pages: huge == Switch::On });
                }
            }
        }
        v
    }

    fn fixed_reference(&self) -> bool {
        !self.no_reference && self.key_size == 16 && self.value_size == 100
    }
}

/// Item `i`'s value: `i` repeated (so a read can be checked).
fn value_of(i: u64, value_size: usize) -> Vec<u8> {
    i.to_le_bytes().iter().copied().cycle().take(value_size).collect()
}

/// Checks a value read for item `i` (its first 8 bytes).
#[inline]
fn check_value(i: u64, value: &[u8]) {
    let n = value.len().min(8);
    assert_eq!(value[..n], i.to_le_bytes()[..n], "wrong value for item {i}");
}

/// The reference for byte-string keys and values, as a generic key-value map holds them.
type BoxedMap = BTreeMap<Box<[u8]>, Box<[u8]>>;

/// The data structures measured at one key count.
struct Loaded {
    n: u64,
    trees: Vec<(usize, String, BTree)>,
    boxed: Option<BoxedMap>,
    fixed: Option<BTreeMap<[u8; 16], [u8; 100]>>,
}

fn load(args: &TreeArgs, n: u64) -> Loaded {
    let progress = ProgressBar::new_spinner();
    progress.set_message(format!("tree: sorting {n} keys"));
    let mut order: Vec<(u64, u64)> = (0..n).map(|i| (mix64(i), i)).collect();
    order.sort_unstable();
    let sorted = || {
        order.iter().map(|&(_, i)| {
            let mut buf = [0u8; 512];
            (key_of(i, args.key_size, &mut buf).to_vec(), value_of(i, args.value_size))
        })
    };
    let mut trees = Vec::new();
    for &page_size in &args.page_size {
        for shape in args.shapes() {
            let name = shape.name();
            progress.set_message(format!("tree: bulk-loading {n} keys, {name}, {page_size}-byte pages"));
            let tree = BTree::bulk_load(shape.config(page_size, 0), sorted()).expect("generated keys are valid");
            trees.push((page_size, name, tree));
        }
    }
    let boxed = (!args.no_reference).then(|| {
        progress.set_message(format!("tree: building std BTreeMap of {n} keys"));
        sorted().map(|(k, v)| (k.into_boxed_slice(), v.into_boxed_slice())).collect()
    });
    let fixed = args.fixed_reference().then(|| {
        progress.set_message(format!("tree: building std BTreeMap (fixed arrays) of {n} keys"));
        sorted().map(|(k, v)| (k.try_into().expect("16-byte keys"), v.try_into().expect("100-byte values"))).collect()
    });
    progress.finish_and_clear();
    Loaded { n, trees, boxed, fixed }
}

/// One thread of a lookup run: draw items, look them up, check the values.
fn lookup_thread(
    get: impl Fn(&[u8], &mut Vec<u8>) -> bool,
    sampler: &mut Sampler,
    args: &TreeArgs,
    ctl: &Control,
) -> ThreadResult {
    let mut latency = LatencySampler::new(args.sample_every);
    let (mut key_buf, mut value) = ([0u8; 512], Vec::with_capacity(args.value_size));
    let mut ops = 0u64;
    while ctl.running() {
        let i = sampler.next_index();
        let key = key_of(i, args.key_size, &mut key_buf);
        let start = latency.begin();
        let found = get(key, &mut value);
        latency.record_since(start);
        assert!(found, "item {i} missing");
        if ops % 64 == 0 {
            check_value(i, &value);
        }
        ops += 1;
    }
    latency.finish(ops)
}

fn measure_lookups(
    args: &TreeArgs,
    threads: usize,
    dist: Dist,
    n: u64,
    get: impl Fn(&[u8], &mut Vec<u8>) -> bool + Sync,
) -> Option<Sample> {
    let samplers: Vec<std::sync::Mutex<Sampler>> =
        (0..threads).map(|t| std::sync::Mutex::new(Sampler::new(dist, n, args.seed ^ (t as u64 + 1)))).collect();
    run_threads(threads, args.common.duration(), |t, ctl| {
        let mut sampler = samplers[t].lock().unwrap_or_else(|p| p.into_inner());
        lookup_thread(&get, &mut sampler, args, ctl)
    })
}

/// Every lookup variant of one point: each tree at each prefetch depth, then the references.
fn lookup_variants<'a>(
    args: &'a TreeArgs,
    data: &'a Loaded,
    page_size: usize,
    dist: Dist,
    threads: usize,
) -> Vec<(String, RunFn<'a>)> {
    let mut v: Vec<(String, RunFn<'a>)> = Vec::new();
    for (ps, name, tree) in &data.trees {
        if *ps != page_size {
            continue;
        }
        for &depth in &args.prefetch {
            let run: RunFn<'a> = Box::new(move || {
                tree.set_prefetch(depth).expect("validated depth");
                measure_lookups(args, threads, dist, data.n, |k, out| tree.get_into(k, out).expect("valid key"))
            });
            v.push((format!("{name}-p{depth}"), run));
        }
    }
    if let Some(map) = &data.boxed {
        let run: RunFn<'a> = Box::new(move || {
            measure_lookups(args, threads, dist, data.n, |k, out| match map.get(k) {
                Some(v) => {
                    out.clear();
                    out.extend_from_slice(v);
                    true
                }
                None => false,
            })
        });
        v.push(("std-btreemap".into(), run));
    }
    if let Some(map) = &data.fixed {
        let run: RunFn<'a> = Box::new(move || {
            measure_lookups(args, threads, dist, data.n, |k, out| {
                match k.try_into().ok().and_then(|k| map.get::<[u8; 16]>(&k)) {
                    Some(v) => {
                        out.clear();
                        out.extend_from_slice(v);
                        true
                    }
                    None => false,
                }
            })
        });
        v.push(("std-btreemap-fixed".into(), run));
    }
    v
}

/// Inserts `args.insert_keys` new keys (in hash order, i.e. random key order), threads taking
/// interleaved items, into whatever `insert` targets.
fn measure_inserts(args: &TreeArgs, threads: usize, insert: impl Fn(&[u8], &[u8]) + Sync) -> Option<Sample> {
    let value = vec![0x5Au8; args.value_size];
    let total = args.insert_keys;
    let base = SplitMix64::new(args.seed).next_u64() >> 1; // items disjoint from the lookup data
    run_threads_to_completion(threads, |t, ctl| {
        let mut buf = [0u8; 512];
        let mut ops = 0;
        let mut i = t as u64;
        while i < total && ctl.running() {
            insert(key_of(base + i, args.key_size, &mut buf), &value);
            ops += 1;
            i += threads as u64;
        }
        ThreadResult::new(ops, None)
    })
}

fn insert_variants<'a>(args: &'a TreeArgs, page_size: usize, threads: usize) -> Vec<(String, RunFn<'a>)> {
    let mut v: Vec<(String, RunFn<'a>)> = Vec::new();
    let depth = TreeConfig::DEFAULT.prefetch;
    for shape in args.shapes() {
        let run: RunFn<'a> = Box::new(move || {
            let tree = BTree::new(shape.config(page_size, depth)).expect("validated");
            measure_inserts(args, threads, |k, val| {
                tree.upsert(k, val).expect("valid key");
            })
        });
        v.push((format!("{}-p{depth}", shape.name()), run));
    }
    if !args.no_reference && threads == 1 {
        let run: RunFn<'a> = Box::new(move || {
            let map = std::sync::Mutex::new(BoxedMap::new());
            measure_inserts(args, 1, |k, val| {
                map.lock().unwrap_or_else(|p| p.into_inner()).insert(k.into(), val.into());
            })
        });
        v.push(("std-btreemap".into(), run));
    }
    v
}

/// Runs `tern bench tree`.
pub fn run(args: &TreeArgs) -> Result<(), String> {
    args.validate()?;
    let mut records = Vec::new();
    if args.op.contains(&Op::Get) {
        for &n in &args.keys {
            let data = load(args, n);
            let mut cases = Vec::new();
            for &page_size in &args.page_size {
                for &dist in &args.dist {
                    for threads in args.common.threads() {
                        let params = vec![
                            ("op", json!("get")),
                            ("n", json!(n)),
                            ("dist", json!(dist.name())),
                            ("page_size", json!(page_size)),
                        ];
                        let variants = lookup_variants(args, &data, page_size, dist, threads);
                        cases.push(Case { params, threads, variants, baseline: Some("sorted-p0".into()) });
                    }
                }
            }
            records.extend(runner::run("tree", &cases, args.common.rounds));
            if super::harness::interrupted() {
                break;
            }
        }
    }
    if args.op.contains(&Op::Insert) && !super::harness::interrupted() {
        let mut cases = Vec::new();
        for &page_size in &args.page_size {
            for threads in args.common.threads() {
                let params =
                    vec![("op", json!("insert")), ("n", json!(args.insert_keys)), ("page_size", json!(page_size))];
                let baseline = format!("sorted-p{}", TreeConfig::DEFAULT.prefetch);
                cases.push(Case {
                    params,
                    threads,
                    variants: insert_variants(args, page_size, threads),
                    baseline: Some(baseline),
                });
            }
        }
        records.extend(runner::run("tree", &cases, args.common.rounds));
    }
    for r in &mut records {
        runner::split_prefetch_variant(r);
        runner::add_ns_per_op(r);
    }
    // Lookups run for a time; inserts are fixed work (every key of a run, once).
    let mut work = Vec::new();
    if args.op.contains(&Op::Get) {
        work.push(format!("lookups {} s per point", args.common.duration));
    }
    if args.op.contains(&Op::Insert) {
        work.push(format!("inserts {} keys per point", args.insert_keys));
    }
    let title = format!(
        "tree: {}, {} round(s); keys {} B, values {} B; {} CPUs",
        work.join(", "),
        args.common.rounds,
        args.key_size,
        args.value_size,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    emit(&records, args.common.json, &title, &key_ratios(&records));
    Ok(())
}

/// The ratios the issue judges the tree by, read off the records measured.
fn key_ratios(records: &[Record]) -> Vec<String> {
    let get = |r: &&Record| r.params.get("op") == Some(&json!("get"));
    let largest = records.iter().filter(get).filter_map(|r| r.params.get("n").and_then(Value::as_u64)).max();
    let Some(n) = largest else { return Vec::new() };
    let pick = |threads: usize, variant: &str, prefetch: Option<u64>| {
        records.iter().filter(get).find(|r| {
            r.params.get("n") == Some(&json!(n))
                && r.params.get("dist") == Some(&json!("uniform"))
                && r.threads == threads
                && r.variant == variant
                && prefetch.is_none_or(|p| r.params.get("prefetch") == Some(&json!(p)))
        })
    };
    let tern_at = |threads: usize| {
        records
            .iter()
            .filter(get)
            .filter(|r| {
                r.params.get("n") == Some(&json!(n))
                    && r.params.get("dist") == Some(&json!("uniform"))
                    && r.threads == threads
                    && !r.variant.starts_with("std")
            })
            .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
    };
    let mut notes = vec![format!("\nkey ratios ({n} keys, uniform lookups):")];
    let label =
        |r: &Record| format!("{} p{}", r.variant, r.params.get("prefetch").and_then(Value::as_u64).unwrap_or(0));
    if let (Some(best), Some(base)) = (tern_at(1), pick(1, "sorted", Some(0))) {
        notes.push(format!(
            "  best ({}) / sorted p0, 1 thread: {:.2}x",
            label(best),
            best.ops_per_sec / base.ops_per_sec
        ));
    }
    if let (Some(one), Some(two)) = (tern_at(1), tern_at(2)) {
        notes.push(format!("  best, 2 threads / 1 thread: {:.2}x", two.ops_per_sec / one.ops_per_sec));
    }
    for reference in ["std-btreemap", "std-btreemap-fixed"] {
        if let (Some(best), Some(r)) = (tern_at(1), pick(1, reference, None)) {
            notes.push(format!("  best / {reference}, 1 thread: {:.2}x", best.ops_per_sec / r.ops_per_sec));
        }
    }
    notes
}
