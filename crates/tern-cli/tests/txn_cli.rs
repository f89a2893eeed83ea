//! `tern bench txn` as a user runs it: JSON fields, both variants, every kind, bad input.

use serde_json::Value;
use std::process::Command;

fn tern() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tern"))
}

#[test]
fn txn_bench_reports_every_kind_and_variant() {
    let out = tern()
        .args(["bench", "txn", "--duration", "0.05", "--rounds", "1", "--threads", "1,2", "--keys", "2000", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // 3 kinds x 2 thread counts x 2 variants.
    assert_eq!(lines.len(), 12, "{lines:#?}");
    for l in &lines {
        for key in ["bench", "kind", "variant", "threads", "ops", "secs", "ops_per_sec", "ns_per_op", "p50_ns"] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
        assert_eq!(l["bench"], "txn");
        assert!(["empty", "read1", "write1"].contains(&l["kind"].as_str().unwrap()), "{l}");
        assert!(["tern", "global-latch"].contains(&l["variant"].as_str().unwrap()), "{l}");
        assert!(l["ops"].as_u64().unwrap() > 0, "{l}");
        assert_eq!(l["lock_waits_per_op"], 0.0, "write1 threads write disjoint keys: {l}");
    }
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(table.contains("key ratios") && table.contains("x global-latch"), "{table}");
}

#[test]
fn txn_bench_rejects_bad_input_clearly() {
    for (args, needle) in [
        (&["bench", "txn", "--variants", "postgres"][..], "unknown variant"),
        (&["bench", "txn", "--keys", "0"][..], "--keys"),
        (&["bench", "txn", "--kind", "write9"][..], "write9"),
    ] {
        let out = tern().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle) && !err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn txn_and_lock_benches_run_tern_pause_when_named() {
    for bench in [&["txn", "--kind", "empty"][..], &["lock", "--mode", "distinct", "--object", "id"][..]] {
        let out = tern()
            .arg("bench")
            .args(bench)
            .args(["--variants", "tern,tern-pause", "--duration", "0.05", "--rounds", "1", "--threads", "1", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let variants: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["variant"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(variants, ["tern", "tern-pause"], "{bench:?}");
    }
}
