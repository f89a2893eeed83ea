//! `tern bench search` as a user runs it: JSON fields, help, bad input.

use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

fn tern() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tern"))
}

fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The distinct values of `field` over `lines`, as strings.
fn distinct(lines: &[Value], field: &str) -> BTreeSet<String> {
    lines.iter().map(|l| l[field].to_string().trim_matches('"').to_owned()).collect()
}

#[test]
fn search_bench_emits_one_json_object_per_variant_and_point() {
    let out = tern()
        .args(["bench", "search", "--log2", "4,10", "--duration", "0.05", "--rounds", "1", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out.stdout);
    // 2 key types x 2 sizes x 4 layouts x 3 prefetch depths, one thread.
    assert_eq!(lines.len(), 2 * 2 * 4 * 3, "{lines:#?}");
    for l in &lines {
        for key in ["bench", "variant", "prefetch", "n", "key", "threads", "ns_per_op", "ops_per_sec", "ops", "secs"] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
        assert_eq!(l["bench"], "search");
        assert_eq!(l["threads"], 1);
        assert!(l["ops"].as_u64().unwrap() > 0, "{l}");
        let (ops_per_sec, ns) = (l["ops_per_sec"].as_f64().unwrap(), l["ns_per_op"].as_f64().unwrap());
        assert!(ops_per_sec > 0.0 && ns > 0.0, "{l}");
        assert!((ns * ops_per_sec / 1e9 - 1.0).abs() < 0.01, "ns_per_op is one thread's time per lookup: {l}");
        let baseline = l["variant"] == "sorted" && l["prefetch"] == 0;
        assert_eq!(l["vs_baseline"].is_number(), !baseline, "{l}");
    }
    assert_eq!(distinct(&lines, "variant"), ["branchfree", "btree", "eytzinger", "sorted"].map(String::from).into());
    assert_eq!(distinct(&lines, "prefetch"), ["0", "1", "2"].map(String::from).into());
    assert_eq!(distinct(&lines, "key"), ["u32", "u64"].map(String::from).into());
    assert_eq!(distinct(&lines, "n"), ["1024", "16"].map(String::from).into());
    // The table and the per-size summary go to stderr.
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(table.contains("ns per lookup") && table.contains("x sorted-p0"), "{table}");
}

#[test]
fn search_bench_selects_layouts_depths_and_keys() {
    let out = tern()
        .args([
            "bench",
            "search",
            "--log2",
            "3",
            "--key",
            "u64",
            "--layout",
            "eytzinger,btree",
            "--prefetch",
            "2",
            "--duration",
            "0.02",
            "--rounds",
            "2",
            "--queries",
            "100",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert_eq!(distinct(&lines, "variant"), ["btree", "eytzinger"].map(String::from).into());
    assert!(lines.iter().all(|l| l["prefetch"] == 2 && l["key"] == "u64" && l["n"] == 8 && l["rounds"] == 2));
}

#[test]
fn search_bench_documents_itself() {
    let out = tern().args(["bench", "search", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["--log2", "--layout", "--prefetch", "--queries", "--key", "Eytzinger", "Khuong", "[default: 1]"] {
        assert!(help.contains(needle), "help lacks {needle}:\n{help}");
    }
}

#[test]
fn search_bench_rejects_bad_arguments() {
    for (args, needle) in [
        (&["bench", "search", "--prefetch", "3"][..], "--prefetch"),
        (&["bench", "search", "--log2", "31"][..], "--log2"),
        (&["bench", "search", "--layout", "heap"][..], "heap"),
        (&["bench", "search", "--key", "u16"][..], "u16"),
        (&["bench", "search", "--queries", "0"][..], "--queries"),
    ] {
        let out = tern().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: error lacks {needle}: {err}");
    }
}
