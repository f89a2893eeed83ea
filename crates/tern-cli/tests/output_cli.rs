//! Every command whose standard output cannot be written: a full device gives a clear error
//! (exit status 1) and keeps what the command committed; a pipe whose reader has gone ends the
//! command quietly (exit status 0). Neither panics.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn tern() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tern"))
}

/// A database of two tables, each with a few entries.
fn make_db(root: &Path) -> PathBuf {
    let db = root.join("db");
    let dump = "VERSION=3\nformat=print\ntype=btree\nHEADER=END\n a\n 1\n b\n 2\nDATA=END\n\
                VERSION=3\nformat=print\ndatabase=t\ntype=btree\nHEADER=END\n c\n 3\nDATA=END\n";
    let input = root.join("dump.txt");
    std::fs::write(&input, dump).unwrap();
    let out = tern().arg("load").arg(&db).arg("-f").arg(&input).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    db
}

/// Every command that writes to standard output, with its arguments (`root` holds a database
/// `db` and a dump `dump.txt`; `n` makes the paths a command creates distinct).
fn commands(root: &Path, n: usize) -> Vec<(&'static str, Vec<PathBuf>)> {
    let db = root.join("db");
    let p = |s: &str| PathBuf::from(s);
    vec![
        ("get", vec![db.clone(), p("a"), p("b")]),
        ("put", vec![db.clone(), p(&format!("k{n}")), p("v")]),
        ("delete", vec![db.clone(), p("b")]),
        ("scan", vec![db.clone()]),
        ("stat", vec![db.clone()]),
        ("stat", vec![p("--json"), db.clone()]),
        ("dump", vec![db.clone()]),
        ("load", vec![root.join(format!("loaded-{n}")), p("-f"), root.join("dump.txt")]),
        ("check", vec![db.clone()]),
        ("check", vec![p("--json"), db.clone()]),
        ("backup", vec![db.clone(), root.join(format!("copy-{n}"))]),
        ("backup", vec![p("--json"), db.clone(), root.join(format!("copy-json-{n}"))]),
        ("compact", vec![db.clone()]),
        ("compact", vec![p("--json"), db.clone()]),
    ]
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_full_device_is_a_clear_error_and_what_was_committed_stays() {
    let root = tempfile::tempdir().unwrap();
    let db = make_db(root.path());
    for (name, args) in commands(root.path(), 0) {
        let full = File::options().write(true).open("/dev/full").unwrap();
        let out = tern().arg(name).args(&args).stdout(Stdio::from(full)).output().unwrap();
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{name} {args:?}: {err}");
        assert_eq!(out.status.code(), Some(1), "{name} {args:?}: {err}");
        let what = if name == "dump" { "the dump" } else { "the output" };
        assert!(err.starts_with(&format!("tern: writing {what}: ")) && err.contains("No space left"), "{name}: {err}");
    }
    // The writes were done before their report failed.
    let out = tern().arg("scan").arg(&db).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\t1\nk0\tv\n", "put k0 and delete b were committed");
    for made in ["loaded-0", "copy-0", "copy-json-0"] {
        let out = tern().arg("check").arg(root.path().join(made)).output().unwrap();
        assert!(out.status.success(), "{made}: {}", stderr(&out));
    }
}

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let root = tempfile::tempdir().unwrap();
    let db = make_db(root.path());
    for (name, args) in commands(root.path(), 1) {
        let mut child = tern().arg(name).args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take()); // the reader goes away before the command writes
        let out = child.wait_with_output().unwrap();
        assert_eq!(stderr(&out), "", "{name} {args:?}: nothing on standard error");
        assert_eq!(out.status.code(), Some(0), "{name} {args:?}");
    }
    let out = tern().arg("get").arg(&db).arg("k1").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v\n", "put k1 was committed");
}
