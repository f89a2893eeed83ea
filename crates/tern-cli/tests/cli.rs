//! The `tern` command as a user runs it: output format, help, bad input, Ctrl-C.

use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

fn tern() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tern"))
}

fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn latch_bench_runs_the_counted_variant_only_when_named() {
    let out = tern()
        .args(["bench", "latch", "--mode", "exclusive", "--cs-ns", "0", "--threads", "1", "--duration", "0.05"])
        .args(["--rounds", "1", "--variants", "parking_lot,tern-adaptive,tern-counted", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let variants: Vec<String> =
        json_lines(&out.stdout).iter().map(|l| l["variant"].as_str().unwrap().to_owned()).collect();
    assert_eq!(variants.len(), 3, "{variants:?}");
    assert!(variants.iter().any(|v| v == "tern-counted"), "{variants:?}");
    // Shared mode has no such variant: naming only it finds nothing to run.
    let out = tern()
        .args(["bench", "latch", "--mode", "shared", "--variants", "tern-counted", "--duration", "0.01"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no variant"));
}

#[test]
fn latch_bench_emits_one_json_object_per_result() {
    let out = tern()
        .args(["bench", "latch", "--duration", "0.05", "--rounds", "1", "--threads", "1,2", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out.stdout);
    // 2 thread counts x (2 critical sections x 6 exclusive + 2 x 2 writer mixes x 4 shared).
    assert_eq!(lines.len(), 2 * (2 * 6 + 2 * 2 * 4), "{lines:#?}");
    for l in &lines {
        for key in ["bench", "variant", "threads", "ops", "secs", "ops_per_sec", "mode", "cs_ns", "fairness"] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
        assert_eq!(l["bench"], "latch");
        assert!(l["ops"].as_u64().unwrap() > 0, "{l}");
        assert!(l["ops_per_sec"].as_f64().unwrap() > 0.0);
        for p in ["p50_ns", "p99_ns", "p999_ns"] {
            assert!(l[p].as_u64().is_some(), "latency is sampled by default: {l}");
        }
        let fairness = l["fairness"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&fairness));
        if l["mode"] == "shared" {
            assert!(l["write_pct"].is_number(), "{l}");
        }
    }
    let variants = |mode: &str| {
        let mut v: Vec<String> =
            lines.iter().filter(|l| l["mode"] == mode).map(|l| l["variant"].as_str().unwrap().to_owned()).collect();
        v.sort();
        v.dedup();
        v
    };
    assert_eq!(variants("exclusive"), ["parking_lot", "std", "tern-adaptive", "tern-park", "tern-pause", "tern-yield"]);
    assert_eq!(variants("shared"), ["parking_lot", "std", "tern", "tern-nobias"]);
    // The table still goes to stderr, with the comparisons.
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(table.contains("vs base") && table.contains("x parking_lot"), "{table}");
}

#[test]
fn each_benchmark_documents_itself() {
    let out = tern().args(["bench", "latch", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["--cs-ns", "--threads", "--duration", "--json", "Fairness", "tern-pause", "parking_lot"] {
        assert!(help.contains(needle), "help lacks {needle}:\n{help}");
    }
}

#[test]
fn help_shows_each_benchmark_its_own_thread_default_once() {
    for (bench, default) in [
        ("latch", "1,2,4,8,16"),
        ("lock", "1,2,4,8,16"),
        ("tree", "1,2,4,8,16"),
        ("txn", "1,2,4,8,16,32"),
        ("search", "1"),
    ] {
        let out = tern().args(["bench", bench, "--help"]).output().unwrap();
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        // The option's entry: from its line to the next option's.
        let entry = help.split("\n      --").find(|e| e.starts_with("threads ")).expect("--threads is documented");
        assert_eq!(entry.matches("default").count(), 1, "{bench}: one default:\n{entry}");
        assert!(entry.contains(&format!("[default: {default}]")), "{bench}:\n{entry}");
    }
}

#[test]
fn bad_arguments_fail_with_a_clear_message() {
    for (args, needle) in [
        (&["bench", "latch", "--threads", "0"][..], "--threads"),
        (&["bench", "latch", "--duration=-1"][..], "--duration"),
        (&["bench", "latch", "--duration", "0"][..], "--duration"),
        (&["bench", "latch", "--write-pct", "150"][..], "--write-pct"),
        (&["bench", "latch", "--variants", "nonesuch", "--duration", "0.01"][..], "no variant"),
        (&["bench", "latch", "--first-round-ns", "0"][..], "first_round_ns"),
    ] {
        let out = tern().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}

#[test]
fn ctrl_c_stops_cleanly_and_prints_what_was_measured() {
    let child = tern()
        .args(["bench", "latch", "--mode", "exclusive", "--cs-ns", "0,100,1000", "--duration", "0.2", "--threads", "1"])
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let at least one point finish (6 variants x 0.2 s x 3 rounds = 3.6 s per point).
    std::thread::sleep(Duration::from_secs(5));
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "interrupted runs exit 1: {err}");
    assert!(err.contains("interrupted"), "{err}");
    let lines = json_lines(&out.stdout);
    assert!(!lines.is_empty(), "the finished point is printed: {err}");
    // A full run prints 3 points x 6 variants; the stop came during the second point.
    assert!(lines.len() < 18, "the run stopped early: {} lines", lines.len());
}
