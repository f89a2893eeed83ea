//! Interleaved A/B measurement: every variant of a case runs once per round, in an order that
//! rotates each round (A B C, B C A, C A B, ...), so drift on a shared, noisy machine hits all
//! variants alike. A case's result per variant is its median round ([`Record::median_round`]:
//! of an even count, the slower of the two middle rounds); its ratio to the baseline variant
//! is the median of the per-round ratios (each from two runs seconds apart).

use super::harness::{interrupted, Sample};
use super::report::{median, Record};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Map, Value};

/// Produces one sample of a variant; `None` if interrupted.
pub type RunFn<'a> = Box<dyn Fn() -> Option<Sample> + 'a>;

/// The variant name of "the same, with every latch class on the fixed PAUSE policy"
/// ([`with_pause_latches`]): `bench txn` and `bench lock` run it when asked by name.
pub const PAUSE_VARIANT: &str = "tern-pause";

/// Whether `name` is one of the variants a `--variants` list names (`None`: no list).
pub fn named(variants: Option<&[String]>, name: &str) -> bool {
    variants.is_some_and(|v| v.iter().any(|w| w == name))
}

/// Whether a variant runs: every variant without a `--variants` list, else those it names.
pub fn wanted(variants: Option<&[String]>, name: &str) -> bool {
    variants.is_none() || named(variants, name)
}

/// Runs `f` with every latch class registered in this process on the fixed `Pause` policy
/// (each class's other settings kept), then gives each class its configuration back. Policies
/// are process-wide; variants run one at a time, so only `f`'s measurement sees the switch.
/// The classes `f` uses must be registered before (they are, once their structures exist).
pub fn with_pause_latches<T>(f: impl FnOnce() -> T) -> T {
    let saved: Vec<_> = tern::sync::LatchClass::all().into_iter().map(|c| (c, c.config())).collect();
    tern::sync::set_all_policies(tern::sync::SpinPolicy::Pause).expect("a policy change keeps a valid configuration");
    let out = f();
    for (class, config) in saved {
        class.set_config(config).expect("the configuration it had");
    }
    out
}

/// One point of a benchmark: fixed parameters and thread count, several variants to compare.
pub struct Case<'a> {
    /// Parameters that identify the point besides the thread count (mode, sizes, ...), in the
    /// order the report shows them.
    pub params: Vec<(&'static str, Value)>,
    pub threads: usize,
    pub variants: Vec<(String, RunFn<'a>)>,
    /// The variant the others are compared with, if any.
    pub baseline: Option<String>,
}

/// Runs every case for `rounds` rounds and returns one record per (case, variant) that
/// completed at least one round. Stops early (keeping what was measured) on Ctrl-C.
pub fn run(bench: &'static str, cases: &[Case<'_>], rounds: usize) -> Vec<Record> {
    let total: usize = cases.iter().map(|c| c.variants.len() * rounds).sum();
    let progress = ProgressBar::new(total as u64);
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    let mut records = Vec::new();
    for case in cases {
        let mut samples: Vec<Vec<Sample>> = case.variants.iter().map(|_| Vec::new()).collect();
        'rounds: for round in 0..rounds {
            for k in 0..case.variants.len() {
                let v = (k + round) % case.variants.len();
                let (name, run) = &case.variants[v];
                progress.set_message(format!("{bench} {} threads={} {name}", describe(&case.params), case.threads));
                match run() {
                    Some(sample) => samples[v].push(sample),
                    None => break 'rounds,
                }
                progress.inc(1);
            }
        }
        records.extend(summarise(bench, case, samples));
        if interrupted() {
            break;
        }
    }
    progress.finish_and_clear();
    add_thread_scaling(&mut records);
    records
}

fn describe(params: &[(&'static str, Value)]) -> String {
    params.iter().map(|(k, v)| format!("{k}={}", plain(v))).collect::<Vec<_>>().join(" ")
}

/// A JSON value as a person would write it (strings unquoted).
pub fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn summarise(bench: &'static str, case: &Case<'_>, samples: Vec<Vec<Sample>>) -> Vec<Record> {
    let baseline = case.baseline.as_ref().and_then(|b| case.variants.iter().position(|(n, _)| n == b));
    let mut out = Vec::new();
    for (v, runs) in samples.iter().enumerate() {
        let params = case.params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<Map<_, _>>();
        let rounds: Vec<(u64, f64)> = runs.iter().map(|r| (r.ops(), r.secs)).collect();
        let variant = case.variants[v].0.clone();
        let Some((mut record, mid)) = Record::median_round(bench, variant, case.threads, params, &rounds, Map::new())
        else {
            continue;
        };
        let mid = &runs[mid];
        let vs_baseline = baseline.filter(|&b| b != v).and_then(|b| {
            let paired = runs.iter().zip(&samples[b]).map(|(a, base)| a.ops_per_sec() / base.ops_per_sec());
            median(&paired.collect::<Vec<_>>())
        });
        let mut latency = None;
        for h in runs.iter().filter_map(|r| r.latency.as_ref()) {
            latency.get_or_insert_with(super::harness::new_histogram).add(h).expect("same bounds");
        }
        let mut extra = mid.extra.clone();
        let fairness: Vec<f64> = runs.iter().map(Sample::fairness).collect();
        extra.insert("fairness".into(), round3(median(&fairness).unwrap_or(0.0)));
        add_op_figures(&mut extra, runs, mid);
        record.extra = extra;
        record.p50_ns = latency.as_ref().map(|h| h.value_at_quantile(0.50));
        record.p99_ns = latency.as_ref().map(|h| h.value_at_quantile(0.99));
        record.p999_ns = latency.as_ref().map(|h| h.value_at_quantile(0.999));
        record.baseline = vs_baseline.and(case.baseline.clone());
        record.vs_baseline = vs_baseline.map(|r| (r * 1000.0).round() / 1000.0);
        out.push(record);
    }
    out
}

/// Per operation type: `<op>_ops` (median round) and `<op>_p50_ns`, `<op>_p99_ns`,
/// `<op>_p999_ns` (samples of every round); the median round's benchmark counts (and, with a
/// `scanned` count, `rows_per_sec`); and its
/// hardware counters per operation, when every thread could read them.
fn add_op_figures(extra: &mut Map<String, Value>, runs: &[Sample], mid: &Sample) {
    let mut by_op = Vec::new();
    for run in runs {
        super::harness::merge_op_stats(&mut by_op, &run.by_op);
    }
    for op in &by_op {
        let ops = mid.by_op.iter().find(|o| o.name == op.name).map_or(0, |o| o.ops);
        extra.insert(format!("{}_ops", op.name), json!(ops));
        if op.latency.is_empty() {
            continue;
        }
        for (suffix, q) in [("p50_ns", 0.5), ("p99_ns", 0.99), ("p999_ns", 0.999)] {
            extra.insert(format!("{}_{suffix}", op.name), json!(op.latency.value_at_quantile(q)));
        }
    }
    for (name, n) in &mid.counts {
        extra.insert((*name).to_string(), json!(n));
        if *name == "scanned" {
            // Entries scans returned per second (median round): a scan's rate in rows.
            extra.insert("rows_per_sec".into(), json!((*n as f64 / mid.secs.max(f64::MIN_POSITIVE)).round()));
        }
    }
    if let Some(c) = mid.counters.filter(|c| !c.is_empty()) {
        extra.extend(c.per_op(mid.ops()));
    }
}

/// Rounds a figure to three decimals for output.
pub fn round3(x: f64) -> Value {
    serde_json::json!((x * 1000.0).round() / 1000.0)
}

/// Each record's throughput over the same variant's at one thread (same parameters).
fn add_thread_scaling(records: &mut [Record]) {
    let singles: Vec<(Map<String, Value>, String, f64)> = records
        .iter()
        .filter(|r| r.threads == 1)
        .map(|r| (r.params.clone(), r.variant.clone(), r.ops_per_sec))
        .collect();
    for r in records.iter_mut() {
        if let Some((_, _, one)) = singles.iter().find(|(p, v, _)| *p == r.params && *v == r.variant) {
            r.vs_1_thread = Some((r.ops_per_sec / one * 1000.0).round() / 1000.0);
        }
    }
}

/// For benchmarks whose variants are named `<name>-p<depth>` (a layout at a prefetch depth):
/// makes `variant` the name alone and adds the depth as the `prefetch` parameter, so the JSON
/// `variant` field is exactly the layout. Other names are left as they are.
pub fn split_prefetch_variant(record: &mut Record) {
    if let Some((name, depth)) = record.variant.rsplit_once("-p") {
        if let Ok(depth) = depth.parse::<u8>() {
            record.variant = name.to_string();
            record.params.insert("prefetch".into(), serde_json::json!(depth));
        }
    }
}

/// Adds `ns_per_op`: one thread's nanoseconds per operation at the median rate.
pub fn add_ns_per_op(record: &mut Record) {
    let ns = 1e9 * record.threads as f64 / record.ops_per_sec.max(f64::MIN_POSITIVE);
    record.extra.insert("ns_per_op".into(), round3(ns));
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern::sync::{LatchClass, SpinConfig, SpinPolicy};

    fn sample(ops: u64, secs: f64) -> Sample {
        Sample {
            per_thread: vec![ops],
            secs,
            latency: None,
            extra: Map::new(),
            by_op: Vec::new(),
            counts: Default::default(),
            counters: None,
        }
    }

    #[test]
    fn a_record_is_one_round_ops_secs_and_rate_alike_with_an_even_count_of_rounds() {
        // Rates 500, 600, 100, 400 ops/s: the two middle rounds are 400 and 500; the record is
        // the slower one's, whole (a mean of the middle rates would belong to no round).
        let rounds = [(1000, 2.0), (300, 0.5), (100, 1.0), (800, 2.0)];
        let next = std::cell::Cell::new(0);
        let variant: RunFn<'_> = Box::new(|| {
            let (ops, secs) = rounds[next.replace(next.get() + 1)];
            Some(sample(ops, secs))
        });
        let case =
            Case { params: vec![("p", json!(1))], threads: 1, variants: vec![("a".into(), variant)], baseline: None };
        let records = super::run("test", &[case], rounds.len());
        let r = &records[0];
        assert_eq!((r.ops, r.secs, r.ops_per_sec, r.rounds), (800, 2.0, 400.0, 4));
        assert_eq!((r.min_ops_per_sec, r.max_ops_per_sec), (100.0, 600.0));
        assert_eq!(r.vs_1_thread, Some(1.0));
    }

    #[test]
    fn pause_latches_hold_only_for_the_call_and_keep_each_class_settings() {
        let class = LatchClass::register("runner.test").unwrap();
        let mine = SpinConfig { policy: SpinPolicy::Yield, ..SpinConfig::DEFAULT };
        class.set_config(mine).unwrap();
        let inside = with_pause_latches(|| class.config());
        assert_eq!(inside.policy, SpinPolicy::Pause);
        assert_eq!(SpinConfig { policy: SpinPolicy::Yield, ..inside }, mine, "only the policy changes");
        assert_eq!(class.config(), mine, "the class's configuration comes back");
    }
}
