//! `tern bench ycsb`, `tpcb` and `compare` as a user runs them (tern only: the peers need a
//! `--features peers` build, tested in crates/tern-peers).

use serde_json::Value;
use std::process::Command;

fn tern(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

/// A small run: a fixed number of operations per point, not a duration (a 0.05 s point on a
/// loaded CI machine once measured no operation at all).
const SMALL: [&str; 6] = ["--records", "3000", "--operations", "2000", "--rounds", "1"];

#[test]
fn ycsb_reports_load_and_run_phases_with_per_operation_latencies() {
    let mut args = vec!["bench", "ycsb", "--workload", "a,e,f,d", "--threads", "1,2", "--json"];
    args.extend(SMALL);
    let (ok, stdout, stderr) = tern(&args);
    assert!(ok, "{stderr}");
    let lines = json_lines(&stdout);
    // One load record, then 4 workloads x 2 thread counts.
    assert_eq!(lines.len(), 1 + 4 * 2, "{lines:#?}");
    let load = &lines[0];
    assert_eq!((load["phase"].as_str(), load["ops"].as_u64()), (Some("load"), Some(3000)), "{load}");
    for l in &lines {
        for key in ["bench", "workload", "engine", "threads", "records", "ops", "secs", "ops_per_sec", "variant"] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
        assert_eq!(
            (l["bench"].as_str(), l["engine"].as_str(), l["records"].as_u64()),
            (Some("ycsb"), Some("tern"), Some(3000))
        );
        assert!(l["ops"].as_u64().unwrap() > 0, "{l}");
    }
    let ops_of = |w: &str| -> Vec<&str> {
        let l = lines.iter().find(|l| l["workload"] == w && l["phase"] == "run").unwrap();
        ["read", "update", "insert", "scan", "rmw"]
            .into_iter()
            .filter(|op| l.get(format!("{op}_ops")).is_some())
            .collect()
    };
    assert_eq!(ops_of("a"), ["read", "update"]);
    assert_eq!(ops_of("e"), ["insert", "scan"]);
    assert_eq!(ops_of("f"), ["read", "rmw"]);
    assert_eq!(ops_of("d"), ["read", "insert"]);
    let a = lines.iter().find(|l| l["workload"] == "a" && l["phase"] == "run").unwrap();
    for key in ["read_p50_ns", "read_p99_ns", "read_p999_ns", "update_p50_ns", "p50_ns", "p99_ns", "p999_ns", "retries"]
    {
        assert!(a.get(key).is_some(), "missing {key}: {a}");
    }
    assert_eq!(a["not_found"], 0, "every loaded record is found: {a}");
    assert!(stderr.contains("hardware counters:"), "{stderr}");
}

#[test]
fn tpcb_keeps_balances_consistent_and_counts_retries() {
    let (ok, stdout, stderr) =
        tern(&["bench", "tpcb", "--operations", "2000", "--threads", "2", "--rounds", "2", "--json"]);
    assert!(ok, "{stderr}");
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 2, "load + run: {lines:#?}");
    let run = &lines[1];
    assert_eq!(
        (run["bench"].as_str(), run["workload"].as_str(), run["ops"].as_u64()),
        (Some("tpcb"), Some("tpcb"), Some(2000))
    );
    assert!(run.get("retries").is_some() && run.get("txn_p99_ns").is_some(), "{run}");
    assert!(stderr.contains("tern: consistent: 4000 transactions"), "two rounds of 2000: {stderr}");
}

#[test]
fn compare_names_the_ratio_to_tern_and_writes_a_chart() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("c.svg");
    let mut args = vec!["bench", "compare", "--workload", "c", "--threads", "1", "--plot", svg.to_str().unwrap()];
    args.extend(SMALL);
    let (ok, stdout, stderr) = tern(&args);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("ycsb c: run phase") && stdout.contains("tern"), "{stdout}");
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg") && chart.contains("tern"), "{chart}");
}

#[test]
fn workload_files_are_read_and_unsupported_properties_reported() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("workloadx");
    std::fs::write(
        &file,
        "recordcount=2000\noperationcount=1000\nreadproportion=0.9\nupdateproportion=0.1\nfieldcount=2\n\
         fieldlength=50\nrequestdistribution=uniform\nhotspotdatafraction=0.2\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let (ok, stdout, stderr) =
        tern(&["bench", "ycsb", "--workload-file", path, "--threads", "1", "--rounds", "1", "--json"]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("property not supported, ignored: hotspotdatafraction=0.2"), "{stderr}");
    let lines = json_lines(&stdout);
    let run = lines.iter().find(|l| l["phase"] == "run").unwrap();
    assert_eq!(
        (run["ops"].as_u64(), run["records"].as_u64(), run["value_size"].as_u64()),
        (Some(1000), Some(2000), Some(100))
    );
    assert_eq!((run["workload"].as_str(), run["dist"].as_str()), (Some("workloadx"), Some("uniform")));
    let (ok, _, stderr) = tern(&["bench", "ycsb", "--workload-file", path, "--strict"]);
    assert!(!ok && stderr.contains("unsupported properties (--strict): hotspotdatafraction=0.2"), "{stderr}");
}

#[test]
fn bad_driver_input_gets_clear_errors() {
    for (args, needle) in [
        (&["bench", "ycsb", "--engine", "sqlite"][..], "unknown engine \"sqlite\""),
        (&["bench", "ycsb", "--workload", "g"][..], "unknown YCSB workload \"g\""),
        (&["bench", "ycsb", "--workload", "tpcb"][..], "tpcb is not a YCSB workload"),
        (&["bench", "ycsb", "--key-size", "4"][..], "--key-size must be in 8..=512"),
        (&["bench", "ycsb", "--workload-file", "/nonexistent/w"][..], "reading /nonexistent/w"),
        (&["bench", "tpcb", "--scale", "0"][..], "--scale must be in 1..=10000"),
        (&["bench", "ycsb", "--dist", "hotspot"][..], "hotspot is not supported"),
    ] {
        let (ok, _, stderr) = tern(args);
        assert!(!ok && stderr.contains(needle), "{args:?}: {stderr}");
    }
    if cfg!(not(feature = "peers")) {
        let (ok, _, stderr) = tern(&["bench", "compare", "--engine", "tern,lmdb"]);
        assert!(!ok && stderr.contains("\"lmdb\" is not in this build: build with `--features peers`"), "{stderr}");
    }
}

#[test]
fn compare_runs_every_engine_of_the_build_at_sync_durability() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["bench", "compare", "--workload", "a", "--durability", "sync", "--threads", "1", "--json"];
    args.extend(["--dir", dir.path().to_str().unwrap()]);
    args.extend(["--records", "1000", "--operations", "200", "--rounds", "1"]);
    let (ok, stdout, stderr) = tern(&args);
    assert!(ok, "{stderr}");
    let runs: Vec<Value> = json_lines(&stdout).into_iter().filter(|l| l["phase"] == "run").collect();
    let engines: Vec<&str> = runs.iter().map(|l| l["engine"].as_str().unwrap()).collect();
    let expected = if cfg!(feature = "peers") { 5 } else { 1 };
    assert_eq!(engines.len(), expected, "{engines:?}");
    for l in &runs {
        assert_eq!(l["durability"], "sync", "{l}");
        assert!(l["commits_per_sec"].as_f64().unwrap() > 0.0, "{l}");
        assert_eq!(l.get("group_median").is_some(), l["engine"] == "tern", "only tern reports its log: {l}");
    }
    for engine in &engines {
        let stated = stderr.lines().any(|l| l.trim_start().starts_with(engine) && l.contains("durability sync:"));
        assert!(stated, "{engine}'s configuration states its level: {stderr}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "data directories are removed");
}

/// The fields every record of `compare` carries about memory and reads.
const MEMORY_FIELDS: [&str; 3] = ["cache_bytes", "memory_limit_bytes", "disk_bytes"];
const READ_FIELDS: [&str; 2] = ["read_bytes_per_op", "reads_per_op"];

#[test]
fn compare_gives_every_engine_the_cache_asked_for_and_reports_it() {
    let mut args = vec!["bench", "compare", "--engine", "tern", "--workload", "c", "--threads", "1", "--json"];
    args.extend(["--cache", "24MiB", "--durability", "none"]);
    args.extend(SMALL);
    let (ok, stdout, stderr) = tern(&args);
    assert!(ok, "{stderr}");
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 2, "load + run: {lines:#?}");
    for l in &lines {
        for key in
            ["bench", "variant", "engine", "threads", "ops", "secs", "ops_per_sec"].into_iter().chain(MEMORY_FIELDS)
        {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
        assert_eq!(l["cache_bytes"].as_u64(), Some(24 << 20), "{l}");
        assert!(l["memory_limit_bytes"].is_null(), "no limit asked for: {l}");
        assert!(l["disk_bytes"].is_null(), "tern at --durability none keeps no directory: {l}");
    }
    let run = &lines[1];
    for key in ["p50_ns", "p99_ns", "p999_ns"].into_iter().chain(READ_FIELDS) {
        assert!(run.get(key).is_some(), "missing {key}: {run}");
    }
    assert!(run["reads_per_op"].as_f64().is_some_and(|x| x >= 0.0), "{run}");
    assert!(
        stderr.contains("cache 24 MiB (Options::cache_bytes, --cache; row cache 50%)"),
        "the configuration line: {stderr}"
    );
    assert!(stderr.contains("read B/op") && stderr.contains("reads/op"), "the table of reads: {stderr}");
    let (ok, _, stderr) = tern(&["bench", "compare", "--cache", "lots"]);
    assert!(!ok && stderr.contains("\"lots\" is not a size"), "{stderr}");
    let (ok, _, stderr) = tern(&["bench", "compare", "--cache", "1KiB"]);
    assert!(!ok && stderr.contains("--cache must be in 1MiB..=16TiB"), "{stderr}");
    let (ok, _, stderr) = tern(&["bench", "compare", "--memory-limit", "1MiB"]);
    assert!(!ok && stderr.contains("--memory-limit must be in 16MiB..=16TiB"), "{stderr}");
}

/// Runs `args` with a 16 MiB cache under a 256 MiB memory limit, on disk (a log, so that each
/// engine has a data directory to measure) and small; its stdout and stderr, or `None` where no
/// memory cgroup can be made (the test is then skipped).
fn compare_under_a_limit(args: &[&str]) -> Option<(String, String)> {
    let mut args = args.to_vec();
    args.extend(["--cache", "16MiB", "--memory-limit", "256MiB", "--durability", "nosync"]);
    args.extend(SMALL);
    let (ok, stdout, stderr) = tern(&args);
    if !ok && stderr.contains("--memory-limit needs a memory cgroup") {
        eprintln!("SKIPPED: no memory cgroup can be made here: {stderr}");
        return None;
    }
    assert!(ok, "{stderr}");
    Some((stdout, stderr))
}

#[test]
fn tern_pause_runs_only_in_a_worker_process_with_its_latch_policy() {
    let (ok, _, stderr) = tern(&["bench", "compare", "--engine", "tern-pause", "--threads", "1"]);
    assert!(!ok && stderr.contains("add --memory-limit"), "in the driver's own process: {stderr}");
    let args = ["bench", "compare", "--engine", "tern,tern-pause", "--workload", "a", "--threads", "1"];
    let Some((stdout, _)) = compare_under_a_limit(&args) else { return };
    // The engines' configuration lines, one per engine, name the policy each ran with.
    let config = |engine: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{engine} ")) && l.contains("latch policy"))
            .map(str::to_owned)
    };
    assert!(config("tern").is_some_and(|l| l.ends_with("latch policy adaptive")), "{stdout}");
    assert!(config("tern-pause").is_some_and(|l| l.ends_with("latch policy pause")), "{stdout}");
}

#[test]
fn compare_runs_each_engine_in_a_memory_cgroup_under_a_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["bench", "compare", "--engine", "tern", "--workload", "c,a", "--threads", "1", "--json"];
    args.extend(["--dir", dir.path().to_str().unwrap()]);
    let Some((stdout, stderr)) = compare_under_a_limit(&args) else { return };
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 3, "load + two runs: {lines:#?}");
    for l in &lines {
        assert_eq!(l["engine"], "tern", "{l}");
        assert_eq!(l["cache_bytes"].as_u64(), Some(16 << 20), "{l}");
        assert_eq!(l["memory_limit_bytes"].as_u64(), Some(256 << 20), "{l}");
        assert!(l["disk_bytes"].as_u64().is_some_and(|b| b > 0), "the log takes room: {l}");
    }
    for run in lines.iter().filter(|l| l["phase"] == "run") {
        assert!(run["ops"].as_u64().unwrap() > 0 && run["ops_per_sec"].as_f64().unwrap() > 0.0, "{run}");
        for key in READ_FIELDS {
            assert!(run[key].as_f64().is_some_and(|x| x >= 0.0), "{key}: {run}");
        }
        assert!(run.get("p99_ns").is_some() && run.get("read_p99_ns").is_some(), "latencies cross over: {run}");
    }
    assert!(stderr.contains("memory limit: each engine in a worker process of its own"), "{stderr}");
    let group = stderr
        .lines()
        .find_map(|l| l.split("(cgroup v").nth(1))
        .and_then(|rest| rest.split_once(' '))
        .map(|(_, path)| path.trim_end_matches(')').to_string())
        .unwrap_or_else(|| panic!("the report names the cgroup: {stderr}"));
    assert!(!std::path::Path::new(&group).exists(), "the cgroup {group} is removed at the end");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "data directories are removed");
    // tern with its default cache (far above the limit) and more data than the limit: the
    // kernel ends the worker, and the run says so instead of reporting a rate.
    let parent = std::path::Path::new(&group).parent().unwrap();
    let bench_groups = || -> std::collections::BTreeSet<String> {
        std::fs::read_dir(parent)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("tern-bench-"))
            .collect()
    };
    // Other benchmarks on this machine may have groups of their own: only new ones count.
    let before = bench_groups();
    let (ok, _, stderr) = tern(&[
        "bench",
        "compare",
        "--engine",
        "tern",
        "--workload",
        "c",
        "--records",
        "150000",
        "--memory-limit",
        "16MiB",
        "--threads",
        "1",
        "--duration",
        "0.05",
        "--rounds",
        "1",
    ]);
    assert!(!ok && stderr.contains("OOM killer") && stderr.contains("--memory-limit 16 MiB"), "{stderr}");
    // A group is named `tern-bench-<driver pid>-<engine>`. Groups of drivers still running
    // (other tests of this binary run in parallel and make their own) are not left behind.
    let driver_alive = |name: &str| {
        let pid = name.trim_start_matches("tern-bench-").split('-').next().unwrap_or("");
        std::path::Path::new("/proc").join(pid).exists()
    };
    let left: Vec<_> = bench_groups().difference(&before).filter(|n| !driver_alive(n)).cloned().collect();
    assert!(left.is_empty(), "cgroups left behind after the failure: {left:?}");
}

#[test]
fn compare_opens_tern_with_the_page_size_asked_for() {
    let base = ["bench", "compare", "--engine", "tern", "--workload", "c", "--threads", "1"];
    let (ok, stdout, stderr) = tern(&[&base[..], &SMALL[..], &["--tern-page-size", "4KiB"]].concat());
    assert!(ok, "{stderr}");
    assert!(stdout.contains("tern 0.1.0: 4 KiB pages"), "{stdout}");
    let (ok, _, stderr) = tern(&[&base[..], &SMALL[..], &["--tern-page-size", "3000"]].concat());
    assert!(!ok && stderr.contains("page size must be a power of two from 4096 to 65536 bytes"), "{stderr}");
}

#[test]
fn the_load_phase_reports_its_batch_size_and_loads_every_record() {
    let load_of = |extra: &[&str]| {
        let mut args = vec!["bench", "compare", "--workload", "c", "--threads", "1", "--load-threads", "1", "--json"];
        args.extend(extra);
        args.extend(SMALL);
        let (ok, stdout, stderr) = tern(&args);
        assert!(ok, "{stderr}");
        let lines = json_lines(&stdout);
        let load = lines.iter().find(|l| l["phase"] == "load").cloned().unwrap();
        let run = lines.iter().find(|l| l["phase"] == "run").cloned().unwrap();
        (load, run, stderr)
    };
    let (load, _, stderr) = load_of(&[]);
    assert_eq!((load["load_batch"].as_u64(), load["ops"].as_u64()), (Some(1000), Some(3000)), "{load}");
    assert!(stderr.contains("(1 thread(s), 1000 items per transaction)"), "{stderr}");
    // One transaction for the whole load: every record is there afterwards.
    let (load, run, stderr) = load_of(&["--load-batch", "3000"]);
    assert_eq!((load["load_batch"].as_u64(), load["ops"].as_u64()), (Some(3000), Some(3000)), "{load}");
    assert_eq!(run["not_found"], 0, "every loaded record is found: {run}");
    assert!(stderr.contains("3000 items per transaction"), "{stderr}");
    for bad in ["0", "1000001"] {
        let (ok, _, stderr) = tern(&["bench", "compare", "--workload", "c", "--load-batch", bad]);
        assert!(!ok && stderr.contains("--load-batch must be in 1..=1000000"), "{bad}: {stderr}");
    }
    // Loaded in 7 turns of two threads each, the engines taking turns: every engine holds every
    // record once, and its load record counts them all.
    let mut args = vec!["bench", "compare", "--workload", "c", "--threads", "1", "--load-threads", "2", "--json"];
    args.extend(["--load-parts", "7"]);
    args.extend(SMALL);
    let (ok, stdout, stderr) = tern(&args);
    assert!(ok, "{stderr}");
    let lines = json_lines(&stdout);
    let engines = if cfg!(feature = "peers") { 5 } else { 1 };
    let loads: Vec<&Value> = lines.iter().filter(|l| l["phase"] == "load").collect();
    assert_eq!(loads.len(), engines, "{stdout}");
    for l in loads {
        assert_eq!((l["load_parts"].as_u64(), l["ops"].as_u64()), (Some(7), Some(3000)), "{l}");
    }
    for run in lines.iter().filter(|l| l["phase"] == "run") {
        assert_eq!(run["not_found"], 0, "every loaded record is found: {run}");
    }
    let (ok, _, stderr) = tern(&["bench", "compare", "--workload", "c", "--load-parts", "0"]);
    assert!(!ok && stderr.contains("--load-parts must be in 1..=1000"), "{stderr}");
}

#[test]
fn a_warm_up_runs_before_the_points_and_is_not_counted_in_them() {
    // In the driver's process and in a worker process under a memory limit: every run record
    // says how long the warm-up was, the points still count exactly --operations, and the
    // report names the warm-up's rate per engine.
    let check = |stdout: &str, stderr: &str| {
        for run in json_lines(stdout).iter().filter(|l| l["phase"] == "run") {
            assert_eq!(run["warmup_secs"].as_f64(), Some(1.0), "{run}");
            assert_eq!(run["ops"].as_u64(), Some(2000), "the warm-up's operations are not the point's: {run}");
        }
        assert!(stderr.contains("2000 operations per point after a 1 s warm-up"), "{stderr}");
        assert!(
            stderr.contains("warm-up before the points: each engine ran the workload for 1 s at 2 thread(s)"),
            "{stderr}"
        );
        // The warm-up ran for its time, not for --operations: more than 2000 operations in a
        // second (a rate any build of any engine here exceeds many times over).
        let warm_ops: Vec<u64> = stderr
            .lines()
            .filter(|l| l.contains("warm-up before the points"))
            .map(|l| {
                let ops = l.split("operations/s (").nth(1).and_then(|r| r.split(' ').next());
                ops.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("a warm-up's operations: {l}"))
            })
            .collect();
        assert_eq!(warm_ops.len(), 2, "one warm-up per workload: {stderr}");
        assert!(warm_ops.iter().all(|&n| n > 2000), "{warm_ops:?}");
    };
    let mut args = vec!["bench", "compare", "--engine", "tern", "--workload", "c,a", "--threads", "1,2"];
    args.extend(["--warmup", "1", "--json"]);
    let mut local = args.clone();
    local.extend(SMALL);
    let (ok, stdout, stderr) = tern(&local);
    assert!(ok, "{stderr}");
    check(&stdout, &stderr);
    if let Some((stdout, stderr)) = compare_under_a_limit(&args) {
        check(&stdout, &stderr);
    }
    // Without --warmup: none, and the records say 0.
    let mut none = vec!["bench", "compare", "--engine", "tern", "--workload", "c", "--threads", "1", "--json"];
    none.extend(SMALL);
    let (ok, stdout, stderr) = tern(&none);
    assert!(ok && !stderr.contains("warm-up"), "{stderr}");
    assert!(json_lines(&stdout).iter().filter(|l| l["phase"] == "run").all(|r| r["warmup_secs"].as_f64() == Some(0.0)));
    for bad in ["--warmup=-1", "--warmup=3601", "--warmup=NaN"] {
        let (ok, _, stderr) = tern(&["bench", "compare", "--workload", "c", bad]);
        assert!(!ok && stderr.contains("--warmup must be in [0, 3600] seconds"), "{bad}: {stderr}");
    }
}

#[test]
fn ingest_reports_both_loads_with_their_phases() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = tern(&[
        "bench",
        "ingest",
        "--records",
        "3000",
        "--txn-keys",
        "1000",
        "--rounds",
        "1",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let by = |v: &str| lines.iter().find(|l| l["variant"] == v).unwrap_or_else(|| panic!("no {v}: {lines:#?}"));
    let (sorted, shuffled) = (by("load_table"), by("txn-1000"));
    for l in [sorted, shuffled] {
        assert_eq!((l["bench"].as_str(), l["ops"].as_u64()), (Some("ingest"), Some(3000)), "{l}");
        assert!(l["disk_bytes"].as_u64().unwrap() > 0 && l["checkpoint_secs"].as_f64().is_some(), "{l}");
    }
    assert_eq!(shuffled["txn_keys"], 1000);
    let (commit, total) = (shuffled["commit_secs"].as_f64().unwrap(), shuffled["secs"].as_f64().unwrap());
    assert!(commit > 0.0 && commit < total, "the commits are a share of the load: {shuffled}");
    assert!(sorted.get("commit_secs").is_none(), "{sorted}");
    // The databases lived under --dir and are gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
