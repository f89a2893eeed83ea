//! What every benchmark's output promises (docs/benchmarks.md#output), checked on tiny runs of
//! each: JSON Lines with `bench`, `variant`, `threads`, `ops`, `secs` and `ops_per_sec`, where
//! `ops_per_sec` is `ops / secs` of one round (also with an even number of rounds), `secs` above
//! zero, and the CPU named with every figure (`cpu` in JSON, the table's title line). Behaviour
//! only: no timing is asserted.

use serde_json::Value;
use std::process::Command;

/// Runs `tern bench <args> --json` and checks every record against the contract; returns them.
fn records(args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).args(["bench"]).args(args).arg("--json").output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{args:?}: {stderr}");
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!lines.is_empty(), "{args:?}: no record\n{stderr}");
    let cpu = lines[0]["cpu"].as_str().unwrap_or_else(|| panic!("no cpu: {}", lines[0]));
    assert!(!cpu.is_empty());
    for l in &lines {
        for key in ["bench", "variant", "threads", "ops", "secs", "ops_per_sec", "min_ops_per_sec", "max_ops_per_sec"] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
        assert_eq!(l["cpu"], cpu, "{l}");
        assert!(l["threads"].as_u64().unwrap() >= 1, "{l}");
        let (ops, secs, rate) =
            (l["ops"].as_u64().unwrap(), l["secs"].as_f64().unwrap(), l["ops_per_sec"].as_f64().unwrap());
        assert!(secs > 0.0, "{l}");
        assert!((rate - ops as f64 / secs).abs() <= 1e-9 * rate.max(1.0), "ops_per_sec is ops / secs: {l}");
        let (min, max) = (l["min_ops_per_sec"].as_f64().unwrap(), l["max_ops_per_sec"].as_f64().unwrap());
        assert!(min <= rate && rate <= max, "{l}");
        if let (Some(p50), Some(p99), Some(p999)) = (l["p50_ns"].as_u64(), l["p99_ns"].as_u64(), l["p999_ns"].as_u64())
        {
            assert!(p50 <= p99 && p99 <= p999, "{l}");
        }
    }
    // Every table's title line names the CPU too.
    let titles = stderr.lines().filter(|l| l.contains("; cpu: ")).count();
    assert!(titles >= 1 && stderr.contains(&format!("; cpu: {cpu}")), "{args:?}: no CPU in a title:\n{stderr}");
    lines
}

#[test]
fn lock_with_an_even_number_of_rounds_reports_one_round_per_record() {
    let lines = records(&["lock", "--threads", "1,2", "--duration", "0.02", "--rounds", "2", "--object", "id"]);
    assert_eq!(lines.len(), 2 * 2 * 2, "modes x thread counts x variants");
    assert!(lines.iter().all(|l| l["rounds"] == 2));
}

#[test]
fn latch_search_and_txn_records_keep_the_contract() {
    records(&["latch", "--mode", "exclusive", "--cs-ns", "0", "--threads", "1", "--duration", "0.01", "--rounds", "2"]);
    records(&["search", "--key", "u64", "--log2", "10", "--prefetch", "0", "--duration", "0.01", "--rounds", "2"]);
    records(&["txn", "--kind", "empty", "--threads", "1", "--keys", "1000", "--duration", "0.01", "--rounds", "2"]);
}

#[test]
fn fixed_work_runs_report_the_work_and_its_time() {
    // --operations and tree inserts: a fixed amount of work, timed by the threads themselves.
    let lines = records(&[
        "ycsb",
        "--workload",
        "c",
        "--records",
        "2000",
        "--operations",
        "100",
        "--threads",
        "1,2",
        "--rounds",
        "2",
    ]);
    let runs: Vec<&Value> = lines.iter().filter(|l| l["phase"] == "run").collect();
    assert_eq!(runs.len(), 2, "{lines:#?}");
    assert!(runs.iter().all(|l| l["ops"] == 100), "{runs:#?}");
    let lines = records(&[
        "tree",
        "--op",
        "insert",
        "--insert-keys",
        "2000",
        "--layout",
        "sorted",
        "--hints",
        "off",
        "--no-reference",
        "--threads",
        "1,2",
        "--rounds",
        "2",
    ]);
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l["ops"] == 2000 && l["op"] == "insert"), "{lines:#?}");
}

#[test]
fn recovery_times_the_replay_by_the_open_and_its_own_clock_only_when_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let lines = records(&[
        "recovery",
        "--log-bytes",
        "4KiB",
        "--records",
        "100",
        "--value-bytes",
        "16",
        "--rounds",
        "2",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let replay = lines.iter().find(|l| l["phase"] == "replay").unwrap();
    let write = lines.iter().find(|l| l["phase"] == "write").unwrap();
    assert_eq!(replay["ops"], write["ops"], "every commit is replayed: {replay}");
    assert_eq!(replay["rounds"], 2, "{replay}");
    // Recovery counts whole milliseconds: under 10 of them its rates are not given.
    let ms = replay["replay_ms"].as_u64().unwrap();
    assert_eq!(replay["replay_mb_per_sec"].is_null(), ms < 10, "{replay}");
    assert_eq!(replay["replay_records_per_sec"].is_null(), ms < 10, "{replay}");
    assert!(replay["mb_per_sec"].as_f64().unwrap() > 0.0, "{replay}");
}

#[test]
fn open_and_ingest_records_keep_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let lines =
        records(&["open", "--records", "1000", "--updates", "100", "--log-bytes", "4KiB", "--rounds", "2", "--dir", d]);
    let crash = lines.iter().find(|l| l["phase"] == "open-crash").unwrap();
    assert_eq!((crash["ops"].as_u64(), crash["rounds"].as_u64()), (Some(1), Some(2)), "{crash}");
    let ms = crash["replay_ms"].as_u64().unwrap();
    assert_eq!(crash["replay_mb_per_sec"].is_null(), ms < 10, "{crash}");
    records(&["ingest", "--records", "2000", "--txn-keys", "1000", "--rounds", "2", "--dir", d]);
}
