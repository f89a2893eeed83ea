//! `--durability`, `--periodic-ms`, `--dir` of the engine driver, `tern bench recovery` and
//! `tern bench open`, as a user runs them.

use serde_json::Value;
use std::process::Command;

fn tern(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

const SMALL: [&str; 6] = ["--records", "2000", "--duration", "0.1", "--rounds", "1"];

#[test]
fn bad_durability_input_gets_clear_errors() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let not_a_dir = file.path().to_str().unwrap();
    for (args, needle) in [
        (&["bench", "ycsb", "--durability", "fast"][..], "invalid value 'fast' for '--durability <LEVEL>'"),
        (&["bench", "ycsb", "--durability", "fast"][..], "[possible values: none, sync, nosync, periodic]"),
        (&["bench", "ycsb", "--periodic-ms", "5"][..], "--periodic-ms applies to --durability periodic only"),
        (
            &["bench", "compare", "--durability", "sync", "--periodic-ms", "5"][..],
            "applies to --durability periodic only",
        ),
        (
            &["bench", "ycsb", "--durability", "periodic", "--periodic-ms", "0"][..],
            "--periodic-ms must be in 1..=60000",
        ),
        (&["bench", "ycsb", "--durability", "periodic", "--periodic-ms", "soon"][..], "invalid value 'soon'"),
        (&["bench", "ycsb", "--durability", "sync", "--dir", not_a_dir][..], "not a directory"),
        (&["bench", "recovery", "--log-bytes", "12parsec"][..], "unknown unit \"parsec\""),
        (&["bench", "recovery", "--log-bytes", "lots"][..], "is not a size"),
        (&["bench", "recovery", "--log-bytes", "100"][..], "--log-bytes must be in 4KiB..=1TiB"),
        (&["bench", "recovery", "--value-bytes", "8"][..], "--value-bytes must be in 16..=1048576"),
        (&["bench", "recovery", "--records", "0"][..], "--records must be in 1..=2^40"),
        (&["bench", "recovery", "--dir", not_a_dir][..], "not a directory"),
        (&["bench", "recovery", "--replay-batch", "auto,1KiB"][..], "a replay batch must be at least 1MiB"),
        (&["bench", "open", "--records", "1000,0"][..], "--records must each be in 1..=2^36"),
        (&["bench", "open", "--log-bytes", "1KiB"][..], "--log-bytes must be in 4KiB..=1TiB"),
        (&["bench", "open", "--rounds", "0"][..], "--rounds must be in 1..=1000"),
        (&["bench", "open", "--updates", "0"][..], "--updates must be in 1..=2^32"),
        (&["bench", "open", "--dir", not_a_dir][..], "not a directory"),
    ] {
        let (ok, _, stderr) = tern(args);
        assert!(!ok && stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn a_sync_run_reports_commits_and_group_commit_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["bench", "ycsb", "--workload", "a", "--durability", "sync", "--threads", "1,4", "--json"];
    args.extend(["--dir", dir.path().to_str().unwrap()]);
    args.extend(SMALL);
    let (ok, stdout, stderr) = tern(&args);
    assert!(ok, "{stderr}");
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 1 + 2, "load + 2 thread counts: {lines:#?}");
    assert!(lines.iter().all(|l| l["durability"] == "sync"), "{lines:#?}");
    for l in lines.iter().filter(|l| l["phase"] == "run") {
        for key in [
            "commits_per_sec",
            "wal_records",
            "wal_syncs",
            "wal_flushes",
            "commits_per_sync",
            "group_median",
            "group_max",
            "group_sizes",
            "update_ops",
        ] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
        let groups: Vec<u64> = l["group_sizes"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
        assert_eq!(groups.len(), 9, "{l}");
        let syncs = l["wal_syncs"].as_u64().unwrap();
        assert!(syncs > 0 && l["commits_per_sec"].as_f64().unwrap() > 0.0, "{l}");
        // Every commit is synced: at least one sync per flush of the run's groups.
        assert!(syncs >= l["wal_flushes"].as_u64().unwrap(), "{l}");
        assert!(l["group_median"].as_u64().unwrap() >= 1, "{l}");
        if l["threads"] == 1 {
            assert_eq!(
                (l["group_median"].as_u64(), groups[0] > 0),
                (Some(1), true),
                "one committer: groups of one: {l}"
            );
        }
    }
    assert!(stderr.contains("commits (durability sync)") && stderr.contains("group sizes"), "{stderr}");
    assert!(stderr.contains("durability sync: log Durability::Sync"), "the engine's config names its level: {stderr}");
    assert!(stderr.contains(&format!("data directories under {}", dir.path().display())), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the data directory is removed");
}

#[test]
fn nosync_periodic_and_none_name_their_level() {
    for (level, extra) in [("nosync", &[][..]), ("periodic", &["--periodic-ms", "5"][..]), ("none", &[][..])] {
        let mut args = vec!["bench", "ycsb", "--workload", "a", "--durability", level, "--threads", "2", "--json"];
        args.extend(extra);
        args.extend(SMALL);
        let (ok, stdout, stderr) = tern(&args);
        assert!(ok, "{level}: {stderr}");
        let lines = json_lines(&stdout);
        let run = lines.iter().find(|l| l["phase"] == "run").unwrap();
        assert_eq!(run["durability"], level, "{run}");
        assert!(run.get("commits_per_sec").is_some(), "{run}");
        match level {
            "none" => assert!(run.get("wal_syncs").is_none(), "tern in memory has no log: {run}"),
            _ => assert!(run.get("group_median").is_some() && run.get("wal_flushes").is_some(), "{run}"),
        }
        if level == "periodic" {
            assert_eq!(run["periodic_ms"], 5, "{run}");
        }
    }
}

#[test]
fn recovery_replays_the_log_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = tern(&[
        "bench",
        "recovery",
        "--log-bytes",
        "1MiB",
        "--records",
        "1000",
        "--rounds",
        "2",
        "--json",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 2, "write + replay: {lines:#?}");
    let (write, replay) = (&lines[0], &lines[1]);
    for l in &lines {
        for key in ["bench", "variant", "threads", "ops", "secs", "ops_per_sec", "mb_per_sec", "log_bytes"] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
        assert_eq!(l["bench"].as_str(), Some("recovery"), "{l}");
    }
    // One thread writes; replay reads on the opening thread and applies on tern-replay.
    assert_eq!((write["threads"].as_u64(), replay["threads"].as_u64()), (Some(1), Some(2)));
    assert_eq!((write["phase"].as_str(), replay["phase"].as_str()), (Some("write"), Some("replay")));
    assert!(write["log_bytes"].as_u64().unwrap() >= 1 << 20, "{write}");
    assert_eq!(replay["ops"], write["ops"], "every commit is replayed: {replay}");
    assert_eq!(replay["bytes_replayed"], write["log_bytes"], "{replay}");
    assert!(replay["ops"].as_u64().unwrap() > 1000, "more than one pass over the records: {replay}");
    assert_eq!(replay["rounds"], 2, "{replay}");
    // `secs` is the open's wall time; recovery's own clock (whole milliseconds) is `replay_ms`.
    assert!(replay["secs"].as_f64().unwrap() > 0.0 && replay["replay_ms"].as_u64().is_some(), "{replay}");
    assert!(replay["torn_tail"] == false, "{replay}");
    assert!(stderr.contains("round 2:") && stderr.contains("MB/s"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the database directory is removed");
}

#[test]
fn open_reports_each_phase_and_replays_what_the_killed_child_committed() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["bench", "open", "--records", "2000,3000", "--updates", "500", "--log-bytes", "256KiB"];
    let (ok, stdout, stderr) =
        tern(&[&args[..], &["--rounds", "2", "--json", "--dir", dir.path().to_str().unwrap()]].concat());
    assert!(ok, "{stderr}");
    let lines = json_lines(&stdout);
    let phases: Vec<(&str, u64)> =
        lines.iter().map(|l| (l["phase"].as_str().unwrap(), l["records"].as_u64().unwrap())).collect();
    let each = ["load", "open-clean", "checkpoint", "open-crash"];
    let expected: Vec<(&str, u64)> = [2000, 3000].iter().flat_map(|&n| each.map(|p| (p, n))).collect();
    assert_eq!(phases, expected, "{lines:#?}");
    for l in &lines {
        for key in ["bench", "variant", "threads", "ops", "secs", "ops_per_sec"] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
    }
    for l in lines.iter().filter(|l| l["phase"].as_str().unwrap().starts_with("open-")) {
        assert_eq!(l["rounds"], 2, "{l}");
        for key in ["open_ms", "checkpoint_ms", "replay_ms", "other_ms", "target_ms"] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
    }
    let crash = lines.iter().filter(|l| l["phase"] == "open-crash");
    for l in crash {
        // The child stopped at 256 KiB of log or just past it; the open replayed all of it.
        assert!(l["bytes_replayed"].as_u64().unwrap() >= 256 << 10, "{l}");
        assert!(l["records_replayed"].as_u64().unwrap() > 1000, "{l}");
    }
    let ckpt = lines.iter().find(|l| l["phase"] == "checkpoint").unwrap();
    assert!(ckpt["checkpoint_bytes"].as_u64().unwrap() > 0 && ckpt["db_bytes"].as_u64().unwrap() > 0, "{ckpt}");
    assert!(stderr.contains("open after kill -9") && stderr.contains("open after clean"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the database directories are removed");
}

#[test]
fn recovery_compares_replay_batch_sizes_on_one_log() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["bench", "recovery", "--log-bytes", "512KiB", "--records", "500", "--rounds", "2"];
    let extra = ["--replay-batch", "auto,1MiB", "--json", "--dir", dir.path().to_str().unwrap()];
    let (ok, stdout, stderr) = tern(&[&args[..], &extra[..]].concat());
    assert!(ok, "{stderr}");
    let lines = json_lines(&stdout);
    let variants: Vec<&str> = lines.iter().map(|l| l["variant"].as_str().unwrap()).collect();
    assert_eq!(variants, ["tern", "tern batch=auto", "tern batch=1MiB"], "{lines:#?}");
    for l in &lines[1..] {
        assert_eq!(
            (l["rounds"].as_u64(), &l["ops"]),
            (Some(2), &lines[0]["ops"]),
            "each size replays every commit: {l}"
        );
    }
}
