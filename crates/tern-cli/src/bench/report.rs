//! Benchmark results: one [`Record`] per (point, variant), printed as a table for people and,
//! with `--json`, as JSON Lines for tools (one object per line on stdout; the table then goes
//! to stderr so stdout stays machine-readable).

use super::runner::plain;
use serde::Serialize;
use serde_json::{Map, Value};
use std::io::Write;

/// One result line.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub bench: &'static str,
    pub variant: String,
    pub threads: usize,
    /// The CPU model ([`cpu_model`]): set by [`emit`], for every record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<&'static str>,
    /// Point parameters (mode, sizes, ...), flattened into the JSON object.
    #[serde(flatten)]
    pub params: Map<String, Value>,
    /// Operations in the median round ([`Record::median_round`]).
    pub ops: u64,
    /// Seconds of the median round.
    pub secs: f64,
    /// The median round's rate: `ops / secs`.
    pub ops_per_sec: f64,
    pub min_ops_per_sec: f64,
    pub max_ops_per_sec: f64,
    pub rounds: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p999_ns: Option<u64>,
    /// The variant `vs_baseline` compares with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Median of per-round throughput ratios to the baseline (interleaved runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_baseline: Option<f64>,
    /// Throughput over the same variant's at one thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_1_thread: Option<f64>,
    /// Benchmark-specific figures (fairness, counters).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Record {
    /// One round's measurement: `ops` in `secs`, no latencies, no comparisons (set the other
    /// fields with struct-update syntax where a benchmark has them).
    pub fn single(
        bench: &'static str,
        variant: String,
        threads: usize,
        params: Map<String, Value>,
        ops: u64,
        secs: f64,
        extra: Map<String, Value>,
    ) -> Record {
        let rate = rate(ops, secs);
        Record {
            bench,
            variant,
            threads,
            cpu: None,
            params,
            ops,
            secs,
            ops_per_sec: rate,
            min_ops_per_sec: rate,
            max_ops_per_sec: rate,
            rounds: 1,
            p50_ns: None,
            p99_ns: None,
            p999_ns: None,
            baseline: None,
            vs_baseline: None,
            vs_1_thread: None,
            extra,
        }
    }

    /// The record of several rounds, each `(ops, secs)`: `ops`, `secs` and `ops_per_sec` all
    /// of the median round by rate ([`median_index`]), so that `ops_per_sec == ops / secs`;
    /// `min_ops_per_sec` and `max_ops_per_sec` over every round. Returns the median round's
    /// index with it (its other figures belong in the record too). `None` without a round.
    pub fn median_round(
        bench: &'static str,
        variant: String,
        threads: usize,
        params: Map<String, Value>,
        rounds: &[(u64, f64)],
        extra: Map<String, Value>,
    ) -> Option<(Record, usize)> {
        let rates: Vec<f64> = rounds.iter().map(|&(ops, secs)| rate(ops, secs)).collect();
        let mid = median_index(&rates)?;
        let (ops, secs) = rounds[mid];
        let record = Record {
            min_ops_per_sec: rates.iter().copied().fold(f64::INFINITY, f64::min),
            max_ops_per_sec: rates.iter().copied().fold(0.0, f64::max),
            rounds: rounds.len(),
            ..Record::single(bench, variant, threads, params, ops, secs, extra)
        };
        Some((record, mid))
    }
}

/// Operations per second (a zero `secs` counts as a nanosecond: never infinite).
pub fn rate(ops: u64, secs: f64) -> f64 {
    ops as f64 / secs.max(1e-9)
}

/// Where the median of `xs` is: the middle value, and of an even count the lower of the two
/// middle ones. Always a value that was measured, never a mean of two, so a median round's
/// figures belong together. `None` if `xs` is empty.
pub fn median_index(xs: &[f64]) -> Option<usize> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    order.get(xs.len().saturating_sub(1) / 2).copied()
}

/// The median of `xs` ([`median_index`]).
pub fn median(xs: &[f64]) -> Option<f64> {
    median_index(xs).map(|i| xs[i])
}

/// The model of the CPU the benchmarks run on, as `/proc/cpuinfo` names it (`"unknown CPU"`
/// where it does not): read once, by tern's calibration of waiting costs.
pub fn cpu_model() -> &'static str {
    &tern::sync::calibration().cpu_model
}

/// Prints records as JSON Lines on stdout, the table on stderr; or only the table on stdout.
/// Every figure names the CPU it was measured on ([`cpu_model`]): the table's title line, and
/// each JSON record's `cpu`.
pub fn emit(records: &[Record], json: bool, title: &str, notes: &[String]) {
    let cpu = cpu_model();
    let table = render_table(records, &title_with_cpu(title, cpu), notes);
    if json {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        for r in records {
            // Writing to a closed pipe ends the output; nothing else to do.
            let _ = writeln!(out, "{}", json_line(r, cpu));
        }
        eprint!("{table}");
    } else {
        print!("{table}");
    }
}

/// `title` with the CPU named at the end of its first line.
fn title_with_cpu(title: &str, cpu: &str) -> String {
    match title.split_once('\n') {
        Some((first, rest)) => format!("{first}; cpu: {cpu}\n{rest}"),
        None => format!("{title}; cpu: {cpu}"),
    }
}

/// One JSON line: the record with its `cpu`.
fn json_line(record: &Record, cpu: &'static str) -> String {
    let record = Record { cpu: Some(cpu), ..record.clone() };
    serde_json::to_string(&record).expect("records serialize")
}

/// A rate with an SI suffix: 12.3M, 870k.
pub fn si(x: f64) -> String {
    match x {
        x if x >= 1e9 => format!("{:.2}G", x / 1e9),
        x if x >= 1e6 => format!("{:.2}M", x / 1e6),
        x if x >= 1e3 => format!("{:.1}k", x / 1e3),
        x => format!("{x:.0}"),
    }
}

/// Nanoseconds, human-sized.
pub fn ns(x: u64) -> String {
    match x {
        x if x >= 1_000_000 => format!("{:.1}ms", x as f64 / 1e6),
        x if x >= 10_000 => format!("{:.0}us", x as f64 / 1e3),
        x if x >= 1_000 => format!("{:.1}us", x as f64 / 1e3),
        x => format!("{x}ns"),
    }
}

fn render_table(records: &[Record], title: &str, notes: &[String]) -> String {
    let mut param_keys: Vec<String> = Vec::new();
    for r in records {
        for k in r.params.keys() {
            if !param_keys.contains(k) {
                param_keys.push(k.clone());
            }
        }
    }
    let has_latency = records.iter().any(|r| r.p50_ns.is_some());
    let mut header: Vec<String> = param_keys.clone();
    header.extend(["threads", "variant", "ops/s", "min..max", "fairness"].map(String::from));
    if has_latency {
        header.extend(["p50", "p99", "p99.9"].map(String::from));
    }
    header.extend(["vs base", "vs 1T"].map(String::from));
    let mut rows = vec![header];
    let mut previous_params: Option<&Map<String, Value>> = None;
    for r in records {
        // Parameters are printed once per group of rows that share them.
        let same_group = previous_params == Some(&r.params);
        let mut row: Vec<String> = param_keys
            .iter()
            .map(|k| match r.params.get(k) {
                _ if same_group => String::new(),
                Some(v) => plain(v),
                None => "-".into(),
            })
            .collect();
        previous_params = Some(&r.params);
        let fairness = r.extra.get("fairness").and_then(Value::as_f64).unwrap_or(0.0);
        row.extend([
            r.threads.to_string(),
            r.variant.clone(),
            si(r.ops_per_sec),
            format!("{}..{}", si(r.min_ops_per_sec), si(r.max_ops_per_sec)),
            format!("{fairness:.2}"),
        ]);
        if has_latency {
            for p in [r.p50_ns, r.p99_ns, r.p999_ns] {
                row.push(p.map(ns).unwrap_or_else(|| "-".into()));
            }
        }
        let base = match (&r.baseline, r.vs_baseline) {
            (Some(b), Some(x)) => format!("{x:.2}x {b}"),
            _ => String::new(),
        };
        row.push(base);
        row.push(r.vs_1_thread.map(|x| format!("{x:.2}x")).unwrap_or_default());
        rows.push(row);
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = format!("\n{title}\n");
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            out.push_str(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
            out.push('\n');
        }
    }
    for note in notes {
        out.push_str(note);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_median_is_a_measured_value_the_lower_middle_of_an_even_count() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.0));
        assert_eq!(median_index(&[4.0, 1.0]), Some(1));
    }

    #[test]
    fn every_figure_names_its_cpu() {
        let r = Record::single("t", "v".into(), 1, Map::new(), 10, 2.0, Map::new());
        let line: Value = serde_json::from_str(&json_line(&r, "Test CPU 9000")).unwrap();
        assert_eq!((line["cpu"].as_str(), line["ops_per_sec"].as_f64()), (Some("Test CPU 9000"), Some(5.0)));
        assert_eq!(title_with_cpu("t: 1 s", "X"), "t: 1 s; cpu: X");
        assert_eq!(title_with_cpu("t: 1 s\ncalibration", "X"), "t: 1 s; cpu: X\ncalibration");
        let table = render_table(&[r], &title_with_cpu("t", "X"), &[]);
        assert!(table.starts_with("\nt; cpu: X\n"), "{table}");
        assert!(!cpu_model().is_empty());
    }

    #[test]
    fn the_median_round_gives_ops_secs_and_rate_of_one_round() {
        let rounds = [(1000, 2.0), (300, 0.5), (100, 1.0), (800, 2.0)];
        let (r, mid) = Record::median_round("t", "v".into(), 2, Map::new(), &rounds, Map::new()).unwrap();
        assert_eq!(mid, 3);
        assert_eq!((r.ops, r.secs, r.ops_per_sec), (800, 2.0, 400.0));
        assert_eq!((r.min_ops_per_sec, r.max_ops_per_sec, r.rounds, r.threads), (100.0, 600.0, 4, 2));
        assert!(Record::median_round("t", "v".into(), 1, Map::new(), &[], Map::new()).is_none());
    }
}
