//! `tern bench lock` as a user runs it: JSON fields, both variants, key ratios, bad input.

use serde_json::Value;
use std::process::Command;

fn tern() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tern"))
}

#[test]
fn lock_bench_reports_both_variants_per_mode_object_and_thread_count() {
    let out = tern()
        .args(["bench", "lock", "--duration", "0.05", "--rounds", "1", "--threads", "1,2", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // 2 modes x 2 object kinds x 2 thread counts x 2 variants.
    assert_eq!(lines.len(), 16, "{lines:#?}");
    for l in &lines {
        for key in ["bench", "mode", "object", "variant", "threads", "ops", "secs", "ops_per_sec", "ns_per_op"] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
        assert_eq!(l["bench"], "lock");
        assert!(["distinct", "shared"].contains(&l["mode"].as_str().unwrap()), "{l}");
        assert!(["tern", "global-mutex"].contains(&l["variant"].as_str().unwrap()), "{l}");
        assert!(l["ops"].as_u64().unwrap() > 0, "{l}");
        assert_eq!(l["waits_per_op"], 0.0, "lock_bench never conflicts: {l}");
        for p in ["p50_ns", "p99_ns", "p999_ns"] {
            assert!(l[p].as_u64().is_some(), "{l}");
        }
    }
    let shared_fast = lines.iter().filter(|l| l["mode"] == "shared" && l["variant"] == "tern" && l["threads"] == 2);
    for l in shared_fast {
        // How large the share is depends on when revocations happen (timing on a busy
        // machine); that readers take the fast path at all does not.
        assert!(l["fast_grants_per_op"].as_f64().unwrap() > 0.0, "two readers take the fast path: {l}");
    }
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(table.contains("key ratios") && table.contains("x global-mutex"), "{table}");
}

#[test]
fn lock_bench_rejects_bad_input_clearly() {
    for (args, needle) in [
        (&["bench", "lock", "--variants", "bdb"][..], "unknown variant"),
        (&["bench", "lock", "--mode", "sideways"][..], "sideways"),
        (&["bench", "lock", "--threads", "0"][..], "--threads"),
        // tern's limit, 65536 partitions, is checked before anything runs (was a panic).
        (&["bench", "lock", "--partitions", "65537"][..], "--partitions: invalid argument: 65537 lock partitions"),
        (&["bench", "lock", "--partitions", "100000000"][..], "at most 65536"),
    ] {
        let out = tern().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle) && !err.contains("panicked"), "{args:?}: {err}");
    }
}
