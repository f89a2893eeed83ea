//! Builds the C tests (`tests/c/tern_test.c`) and the README's example against the static
//! library and the committed header, and runs them; checks that the header is what cbindgen
//! makes of the sources today.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The static library cargo built for this test run: beside the test executable
/// (`target/<profile>/deps/`; `cargo build` copies it one level up, `cargo test` does not, so
/// the copy there may be stale).
fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent().expect("target/<profile>/deps/<test>").join("libtern_capi.a")
}

/// Compiles `source` against the static library into `out`.
fn build_c(source: &Path, out: &Path) {
    let lib = static_lib();
    assert!(lib.exists(), "{} is missing (cargo builds it with the crate's tests)", lib.display());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(crate_dir().join("include"))
        .arg(source)
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(out)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(status.success(), "compiling {}", source.display());
}

/// Runs `command` to its end, or kills it after two minutes (a hang fails the test instead of
/// stalling the run). Its output goes through files in `dir` (a pipe could fill up and stop it).
fn run_bounded(command: &mut Command, dir: &Path) -> Output {
    let (out_path, err_path) = (dir.join("stdout.txt"), dir.join("stderr.txt"));
    let mut child = command
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("starting a C program");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the C program") {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("the C program hung (killed after 120 s); stderr:\n{}", std::fs::read_to_string(&err_path).unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: std::fs::read(&out_path).unwrap(), stderr: std::fs::read(&err_path).unwrap() }
}

#[test]
fn c_tests_pass() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("tern_test");
    build_c(&crate_dir().join("tests/c/tern_test.c"), &exe);
    let out = run_bounded(Command::new(&exe).arg(dir.path().join("db")), dir.path());
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("all C checks passed"), "{text}");
}

#[test]
fn the_readme_example_works_as_written() {
    let readme = std::fs::read_to_string(crate_dir().join("../../README.md")).unwrap();
    let start = readme.find("```c\n").expect("README has a C example") + 5;
    let end = start + readme[start..].find("```").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("example.c");
    std::fs::write(&source, &readme[start..end]).unwrap();
    let exe = dir.path().join("example");
    build_c(&source, &exe);
    let out = run_bounded(Command::new(&exe).current_dir(dir.path()), dir.path());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello = world\n");
}

#[test]
fn header_is_current() {
    let dir = crate_dir();
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut made = Vec::new();
    cbindgen::Builder::new().with_crate(&dir).with_config(config).generate().expect("cbindgen").write(&mut made);
    let path = dir.join("include/tern.h");
    if std::env::var_os("TERN_BLESS").is_some() {
        std::fs::write(&path, &made).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == made,
        "include/tern.h is not what cbindgen makes of the sources: run `TERN_BLESS=1 cargo test -p tern-capi --test c_api header_is_current`"
    );
}
