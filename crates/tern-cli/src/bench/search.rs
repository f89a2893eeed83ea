//! `tern bench search`: the node-search kernels of `tern::btree::search` alone, over plain
//! arrays from cache-resident to far beyond the caches, in each layout and prefetch depth.

use super::harness::{run_threads, Control, Sample, ThreadResult};
use super::report::{emit, Record};
use super::runner::{self, Case, RunFn};
use super::Common;
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use std::hint::black_box;
use tern::btree::search::{self, Layout, Probe, CACHE_LINE};

const LONG_ABOUT: &str = "\
Measures lower-bound search alone: ns per lookup of random keys in a sorted array of n keys,
stored in each layout of tern::btree::search and searched at each prefetch depth, reproducing the
shape of Khuong & Morin's figures (arXiv:1509.05053): for small n sorted binary search is as fast
as anything, far beyond the caches the Eytzinger layout with prefetching wins.

Layouts: sorted (branchy binary search, the baseline), branchfree (branch-free binary search),
eytzinger (BFS order, branch-free descent) and btree (blocks of one cache line, (B+1)-ary). Prefetch
depths: 0 (none), 1, 2; see the module doc of tern::btree::search for what each layout prefetches.

Keys are 1, 3, 5, ... (n of them, u32 or u64), so half the queries hit and half miss; queries are
drawn uniformly from 0..=2n (below the least key to above the greatest), generated before timing
(--queries of them, cycled through for --duration). Every lookup's answer is summed into an
accumulator the optimiser cannot drop. Each run first checks a sample of queries and the edges:
the layout's answer, mapped back to a sorted rank, must equal the sorted array's partition point,
or the run fails. Layouts are placed in memory as the module doc advises (Eytzinger one key before
a cache-line boundary, B-tree blocks on line boundaries).

All layout x depth variants of one point (key type, n, threads) run interleaved, once per round,
rotating the order each round; ops/s is the median round, 'vs base' the median of per-round ratios
to sorted at depth 0 (classic binary search), ns_per_op the time per lookup of one thread. With
several --threads, each thread searches the same arrays independently (throughput scaling over
shared memory bandwidth); the default is one thread. Transparent huge pages are not requested, so
large arrays also pay TLB misses, as a B+tree's pages would.";

/// Key types to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KeyType {
    /// 32-bit keys: 16 per cache line.
    U32,
    /// 64-bit keys: 8 per cache line.
    U64,
}

/// Options of `tern bench search`.
#[derive(Args, Clone, Debug)]
#[command(
    about = "Node-search kernels alone: sorted vs branch-free vs Eytzinger vs B-tree layouts, with prefetching",
    long_about = LONG_ABOUT,
    mut_arg("threads", |a| a.default_value("1")),
)]
pub struct SearchArgs {
    #[command(flatten)]
    pub common: Common,
    /// Key types to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "u32,u64", value_name = "TYPE,...")]
    pub key: Vec<KeyType>,
    /// Array sizes to measure, as powers of two (n = 2^EXP keys; 0..=30).
    #[arg(long, value_delimiter = ',', default_value = "4,8,12,16,20,24,26", value_name = "EXP,...")]
    pub log2: Vec<u32>,
    /// Layouts to measure: sorted, branchfree, eytzinger, btree.
    #[arg(long, value_delimiter = ',', default_value = "sorted,branchfree,eytzinger,btree", value_parser = parse_layout, value_name = "NAME,...")]
    pub layout: Vec<Layout>,
    /// Prefetch depths to measure (0..=2).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2", value_name = "D,...")]
    pub prefetch: Vec<u8>,
    /// Random queries generated per point, cycled through for --duration.
    #[arg(long, default_value_t = 1 << 20, value_name = "N")]
    pub queries: usize,
}

fn parse_layout(s: &str) -> Result<Layout, String> {
    s.parse().map_err(|e: tern::Error| e.to_string())
}

impl SearchArgs {
    fn validate(&self) -> Result<(), String> {
        self.common.validate()?;
        if self.log2.is_empty() || self.log2.iter().any(|&e| e > 30) {
            return Err(format!("--log2 must list exponents in 0..=30, got {:?}", self.log2));
        }
        if self.prefetch.is_empty() || self.prefetch.iter().any(|&d| d > 2) {
            return Err(format!("--prefetch must list depths in 0..=2, got {:?}", self.prefetch));
        }
        if self.key.is_empty() || self.layout.is_empty() {
            return Err("--key and --layout must name at least one value each".into());
        }
        if !(1..=1 << 28).contains(&self.queries) {
            return Err(format!("--queries must be in 1..=268435456, got {}", self.queries));
        }
        Ok(())
    }
}

/// The variant the others are compared with: classic binary search.
const BASELINE: &str = "sorted-p0";

/// Runs `tern bench search`.
pub fn run(args: &SearchArgs) -> Result<(), String> {
    args.validate()?;
    let mut records = Vec::new();
    'points: for &key in &args.key {
        for &log2 in &args.log2 {
            records.extend(match key {
                KeyType::U32 => measure_point::<u32>(args, log2),
                KeyType::U64 => measure_point::<u64>(args, log2),
            });
            if super::harness::interrupted() {
                break 'points;
            }
        }
    }
    let title = format!(
        "search: {} s per point, {} round(s), {} queries per point; {} CPUs",
        args.common.duration,
        args.common.rounds,
        args.queries,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut notes = ns_table(&records);
    notes.extend(key_ratios(&records));
    emit(&records, args.common.json, &title, &notes);
    Ok(())
}

/// A key type the benchmark measures.
trait BenchKey: Copy + Ord + Send + Sync + std::fmt::Debug + 'static {
    const NAME: &'static str;
    /// `v` as a key (`v` fits: keys and queries stay below 2^31 + 1).
    fn from_u64(v: u64) -> Self;
}

impl BenchKey for u32 {
    const NAME: &'static str = "u32";
    fn from_u64(v: u64) -> u32 {
        u32::try_from(v).expect("keys of 2^30 u32 values fit")
    }
}

impl BenchKey for u64 {
    const NAME: &'static str = "u64";
    fn from_u64(v: u64) -> u64 {
        v
    }
}

/// A copy of an array placed at a chosen byte offset within a cache line (see
/// `search::line_offset`): the heap gives no alignment beyond the element's own.
struct Placed<K> {
    buf: Vec<K>,
    start: usize,
    len: usize,
}

impl<K: Copy> Placed<K> {
    fn new(keys: &[K], line_offset: usize) -> Placed<K> {
        let size = size_of::<K>().max(1);
        let mut buf = Vec::with_capacity(keys.len() + CACHE_LINE / size);
        let misalignment = buf.as_ptr() as usize % CACHE_LINE;
        let start = match keys.first() {
            Some(&first) => {
                let start = (line_offset + CACHE_LINE - misalignment) % CACHE_LINE / size;
                buf.resize(start, first);
                start
            }
            None => 0,
        };
        buf.extend_from_slice(keys);
        let placed = Placed { buf, start, len: keys.len() };
        debug_assert!(keys.is_empty() || placed.keys().as_ptr() as usize % CACHE_LINE == line_offset);
        placed
    }

    fn keys(&self) -> &[K] {
        &self.buf[self.start..self.start + self.len]
    }
}

/// One layout's array and, unless it is in sorted order, its layout-index -> rank table.
struct Laid<K> {
    layout: Layout,
    keys: Placed<K>,
    ranks: Option<Vec<u32>>,
}

/// Everything one point (key type and n) measures: each layout's array, the sorted array to
/// check answers against, and the queries.
struct Point<K> {
    sorted: Placed<K>,
    laid: Vec<Laid<K>>,
    queries: Vec<K>,
}

impl<K: BenchKey> Point<K>
where
    [K]: Probe<Key = K>,
{
    /// Keys 1, 3, 5, ... (n of them) in every requested layout; queries uniform in 0..=2n.
    fn build(n: usize, layouts: &[Layout], queries: usize) -> Point<K> {
        let sorted_keys: Vec<K> = (0..n as u64).map(|i| K::from_u64(2 * i + 1)).collect();
        let sorted = Placed::new(&sorted_keys, 0);
        let mut laid = Vec::new();
        for &layout in layouts {
            let keys = match layout {
                Layout::Sorted | Layout::BranchFree => Placed::new(&sorted_keys, 0),
                _ => Placed::new(&search::layout_from_sorted(layout, &sorted_keys), search::line_offset::<K>(layout)),
            };
            let ranks =
                matches!(layout, Layout::Eytzinger | Layout::BTree).then(|| search::sorted_rank_table::<K>(layout, n));
            laid.push(Laid { layout, keys, ranks });
        }
        drop(sorted_keys);
        let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ n as u64;
        let queries = (0..queries)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                K::from_u64(rng % (2 * n as u64 + 1))
            })
            .collect();
        Point { sorted, laid, queries }
    }

    fn laid(&self, layout: Layout) -> &Laid<K> {
        self.laid.iter().find(|l| l.layout == layout).expect("every measured layout is built")
    }

    /// Checks `kernel` (searching `layout`) on a sample of the queries and on the edges: its
    /// answer, mapped to a sorted rank, must be the sorted array's partition point.
    fn verify(&self, layout: Layout, prefetch: u8, kernel: &impl Fn(&[K], K) -> usize) {
        let laid = self.laid(layout);
        let sorted = self.sorted.keys();
        let step = (self.queries.len() / 1024).max(1);
        let edges = [K::from_u64(0), K::from_u64(1), K::from_u64(2 * sorted.len() as u64)];
        for &q in self.queries.iter().step_by(step).chain(&edges) {
            let got = kernel(laid.keys.keys(), q);
            let rank = laid.ranks.as_ref().map_or(got, |t| t.get(got).map_or(usize::MAX, |&r| r as usize));
            let want = sorted.partition_point(|&k| k < q);
            assert_eq!(
                rank,
                want,
                "search: {layout} at prefetch depth {prefetch} answered index {got} (rank {rank}) for query {q:?} \
                 with n = {}; the sorted array says rank {want}",
                sorted.len()
            );
        }
    }
}

/// Measures every requested variant at n = 2^log2 keys of type `K`, for each thread count.
fn measure_point<K: BenchKey>(args: &SearchArgs, log2: u32) -> Vec<Record>
where
    [K]: Probe<Key = K>,
{
    let n = 1usize << log2;
    let point = Point::<K>::build(n, &args.layout, args.queries);
    let mut cases = Vec::new();
    for threads in args.common.threads() {
        let mut variants: Vec<(String, RunFn<'_>)> = Vec::new();
        for &layout in &args.layout {
            for &prefetch in &args.prefetch {
                let (point, common) = (&point, &args.common);
                let run: RunFn<'_> = Box::new(move || measure_variant(point, layout, prefetch, threads, common));
                variants.push((format!("{layout}-p{prefetch}"), run));
            }
        }
        let baseline = variants.iter().any(|(name, _)| name == BASELINE).then(|| BASELINE.to_string());
        let params = vec![("key", json!(K::NAME)), ("log2", json!(log2)), ("n", json!(n))];
        cases.push(Case { params, threads, variants, baseline });
    }
    let mut records = runner::run("search", &cases, args.common.rounds);
    for r in &mut records {
        runner::split_prefetch_variant(r);
        runner::add_ns_per_op(r);
    }
    records
}

/// One run of one variant: checks its answers, then measures it for `--duration`.
fn measure_variant<K: BenchKey>(
    point: &Point<K>,
    layout: Layout,
    prefetch: u8,
    threads: usize,
    common: &Common,
) -> Option<Sample>
where
    [K]: Probe<Key = K>,
{
    // One arm per kernel, so that each timed loop is compiled for its kernel alone.
    macro_rules! with_kernel {
        ($kernel:path) => {{
            point.verify(layout, prefetch, &$kernel);
            let keys = point.laid(layout).keys.keys();
            run_threads(threads, common.duration(), |t, ctl| {
                search_thread(keys, &point.queries, t * point.queries.len() / threads, ctl, $kernel)
            })
        }};
    }
    match (layout, prefetch) {
        (Layout::Sorted, 0) => with_kernel!(search::sorted_lower_bound::<[K], 0>),
        (Layout::Sorted, 1) => with_kernel!(search::sorted_lower_bound::<[K], 1>),
        (Layout::Sorted, _) => with_kernel!(search::sorted_lower_bound::<[K], 2>),
        (Layout::BranchFree, 0) => with_kernel!(search::branchfree_lower_bound::<[K], 0>),
        (Layout::BranchFree, 1) => with_kernel!(search::branchfree_lower_bound::<[K], 1>),
        (Layout::BranchFree, _) => with_kernel!(search::branchfree_lower_bound::<[K], 2>),
        (Layout::Eytzinger, 0) => with_kernel!(search::eytzinger_lower_bound::<[K], 0>),
        (Layout::Eytzinger, 1) => with_kernel!(search::eytzinger_lower_bound::<[K], 1>),
        (Layout::Eytzinger, _) => with_kernel!(search::eytzinger_lower_bound::<[K], 2>),
        (Layout::BTree, 0) => with_kernel!(search::btree_lower_bound::<[K], 0>),
        (Layout::BTree, 1) => with_kernel!(search::btree_lower_bound::<[K], 1>),
        (Layout::BTree, _) => with_kernel!(search::btree_lower_bound::<[K], 2>),
    }
}

/// Queries between two looks at the stop flag.
const CHUNK: usize = 256;

/// One thread's timed loop: look up the queries from `start` on, cyclically, summing the answers
/// into an accumulator that is kept alive, until told to stop.
fn search_thread<K: Copy>(
    keys: &[K],
    queries: &[K],
    start: usize,
    ctl: &Control,
    kernel: impl Fn(&[K], K) -> usize,
) -> ThreadResult {
    let mut sum = 0usize;
    let mut ops = 0u64;
    let mut at = start % queries.len();
    while ctl.running() {
        let end = (at + CHUNK).min(queries.len());
        for &q in &queries[at..end] {
            sum = sum.wrapping_add(kernel(keys, q));
        }
        ops += (end - at) as u64;
        at = if end == queries.len() { 0 } else { end };
    }
    black_box(sum);
    ThreadResult::new(ops, None)
}

/// The records of one thread count: one, if measured, else the least.
fn reported_threads(records: &[Record]) -> Option<usize> {
    records.iter().map(|r| r.threads).min()
}

fn param_str<'r>(r: &'r Record, key: &str) -> Option<&'r str> {
    r.params.get(key).and_then(Value::as_str)
}

fn param_u64(r: &Record, key: &str) -> Option<u64> {
    r.params.get(key).and_then(Value::as_u64)
}

/// A compact view in the shape of Khuong & Morin's figures: ns per lookup, one row per key type
/// and size, one column per variant.
fn ns_table(records: &[Record]) -> Vec<String> {
    let Some(threads) = reported_threads(records) else { return Vec::new() };
    let rows: Vec<&Record> = records.iter().filter(|r| r.threads == threads).collect();
    let mut columns: Vec<String> = Vec::new();
    let mut points: Vec<(String, u64)> = Vec::new();
    for r in &rows {
        let column = format!("{}-p{}", r.variant, param_u64(r, "prefetch").unwrap_or(0));
        if !columns.contains(&column) {
            columns.push(column);
        }
        let point = (param_str(r, "key").unwrap_or("?").to_string(), param_u64(r, "log2").unwrap_or(0));
        if !points.contains(&point) {
            points.push(point);
        }
    }
    let width = columns.iter().map(String::len).max().unwrap_or(0).max(7);
    let mut notes = vec![format!("\nns per lookup ({threads} thread(s), median round):")];
    let header: Vec<String> = columns.iter().map(|c| format!("{c:>width$}")).collect();
    notes.push(format!("  key  log2  {}", header.join(" ")));
    for (key, log2) in points {
        let cells: Vec<String> = columns
            .iter()
            .map(|c| {
                let ns = rows
                    .iter()
                    .find(|r| {
                        param_str(r, "key") == Some(&key)
                            && param_u64(r, "log2") == Some(log2)
                            && format!("{}-p{}", r.variant, param_u64(r, "prefetch").unwrap_or(0)) == *c
                    })
                    .and_then(|r| r.extra.get("ns_per_op").and_then(Value::as_f64));
                ns.map_or_else(|| format!("{:>width$}", "-"), |ns| format!("{ns:>width$.1}"))
            })
            .collect();
        notes.push(format!("  {key:<4} {log2:>4}  {}", cells.join(" ")));
    }
    notes
}

/// The ratios the layouts are judged by, read off the records that were measured: each against
/// sorted at depth 0 (paired per-round ratios from the interleaved runs).
fn key_ratios(records: &[Record]) -> Vec<String> {
    let Some(threads) = reported_threads(records) else { return Vec::new() };
    let find = |key: &str, log2: u64, variant: &str, prefetch: u64| {
        records.iter().find(|r| {
            r.threads == threads
                && param_str(r, "key") == Some(key)
                && param_u64(r, "log2") == Some(log2)
                && r.variant == variant
                && param_u64(r, "prefetch") == Some(prefetch)
        })
    };
    let mut notes = Vec::new();
    let mut line = |label: String, value: Option<f64>| {
        if let Some(v) = value {
            notes.push(format!("  {label:<58} {v:.2}x"));
        }
    };
    line(
        "eytzinger p2 / sorted p0, 2^24 u64 (target: at least 2x)".into(),
        find("u64", 24, "eytzinger", 2).and_then(|r| r.vs_baseline),
    );
    for key in ["u32", "u64"] {
        let sizes: Vec<u64> =
            records.iter().filter(|r| param_str(r, "key") == Some(key)).filter_map(|r| param_u64(r, "log2")).collect();
        let (Some(&small), Some(&large)) = (sizes.iter().min(), sizes.iter().max()) else { continue };
        for log2 in if small == large { vec![large] } else { vec![small, large] } {
            for (variant, prefetch) in [("branchfree", 0), ("eytzinger", 2), ("btree", 0), ("sorted", 2)] {
                if (key, log2, variant, prefetch) == ("u64", 24, "eytzinger", 2) {
                    continue; // the target line above
                }
                line(
                    format!("{variant} p{prefetch} / sorted p0, 2^{log2} {key}"),
                    find(key, log2, variant, prefetch).and_then(|r| r.vs_baseline),
                );
            }
        }
    }
    if !notes.is_empty() {
        notes.insert(0, format!("\nkey ratios ({threads} thread(s), paired rounds vs sorted p0):"));
    }
    notes
}
