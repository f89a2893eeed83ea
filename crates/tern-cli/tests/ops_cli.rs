//! The operations commands as a user runs them: `stat`, `dump`, `load`, `get`, `put`, `delete`,
//! `scan`, and migrations to and from LMDB's and Berkeley DB's tools (`mdb_load`/`mdb_dump`
//! from Debian's lmdb-utils, `db_load`/`db_dump` from db-util).
//!
//! The tests against those tools skip, with a note, where the tools are not installed, unless
//! `TERN_REQUIRE_TOOLS` is set (CI sets it after installing them), which makes their absence a
//! failure.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn tern() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tern"))
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd` with `input` on its standard input; also whether all of it was written (a
/// command that fails may stop reading).
fn output_with_input(cmd: &mut Command, input: &[u8]) -> (Output, std::io::Result<()>) {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    (out, writer.join().unwrap())
}

/// Runs `cmd` with `input` on its standard input, expecting success.
fn run_with_input(cmd: &mut Command, input: &[u8]) -> Output {
    let (out, written) = output_with_input(cmd, input);
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    written.unwrap();
    out
}

/// Runs `cmd` with `input` on its standard input, expecting it to fail with a message (exit
/// status 1, no panic); returns its standard error.
fn fails_with_input(cmd: &mut Command, input: &[u8]) -> String {
    let (out, _) = output_with_input(cmd, input);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{cmd:?} should fail: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Whether `tool` runs; without it, a note (or a failure under `TERN_REQUIRE_TOOLS`).
fn have(tool: &str) -> bool {
    let found = Command::new(tool).arg("-V").output().is_ok();
    if !found {
        assert!(
            std::env::var_os("TERN_REQUIRE_TOOLS").is_none(),
            "{tool} is not installed but TERN_REQUIRE_TOOLS is set"
        );
        eprintln!("note: {tool} not installed (Debian: lmdb-utils, db-util): skipping");
    }
    found
}

/// A dump of `n` entries whose keys together hold every byte value: key `i` is the 4 bytes of
/// `i` (big-endian, so the order is numeric) followed by byte `i % 256` and `"\\"`; its value
/// `i % 97 + 1` bytes counting down from `i % 256`.
fn make_dump(n: u32, database: Option<&str>, extra: &str) -> Vec<u8> {
    let mut d = String::from("VERSION=3\nformat=bytevalue\n");
    if let Some(name) = database {
        d += &format!("database={name}\n");
    }
    d += &format!("type=btree\n{extra}HEADER=END\n");
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    for i in 0..n {
        let mut key = i.to_be_bytes().to_vec();
        key.extend_from_slice(&[(i % 256) as u8, b'\\']);
        let value: Vec<u8> = (0..i % 97 + 1).map(|j| ((i % 256) as u8).wrapping_sub(j as u8)).collect();
        d += &format!(" {}\n {}\n", hex(&key), hex(&value));
    }
    d += "DATA=END\n";
    d.into_bytes()
}

/// Removes the header lines that depend on how the environment was made, not on its data.
fn data_lines(dump: &str) -> String {
    dump.lines()
        .filter(|l| !l.starts_with("mapsize=") && !l.starts_with("maxreaders=") && !l.starts_with("db_pagesize="))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn dump_and_load_round_trip_every_byte_and_every_table() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let mut dump = make_dump(3_000, None, "");
    dump.extend(make_dump(500, Some("second"), ""));
    let out = run_with_input(tern().arg("load").arg(&a), &dump);
    assert!(stdout(&out).contains("loaded 3500 entries"), "{}", stdout(&out));
    let first = stdout(&run(tern().arg("dump").arg(&a)));
    assert_eq!(first.as_bytes(), &dump[..], "tern dump writes back what was loaded, byte for byte");
    for format in ["bytevalue", "print"] {
        let text = run(tern().args(["dump", "--format", format]).arg(&a)).stdout;
        let target = dir.path().join(format!("b-{format}"));
        run_with_input(tern().arg("load").arg(&target), &text);
        assert_eq!(stdout(&run(tern().arg("dump").arg(&target))), first, "through format={format}");
    }
    // One table only, loaded under another name.
    let only = run(tern().args(["dump", "--table", "second"]).arg(&a)).stdout;
    run_with_input(tern().args(["load", "--table", "renamed"]).arg(&b), &only);
    let back = stdout(&run(tern().args(["dump", "--table", "renamed"]).arg(&b)));
    assert_eq!(back, String::from_utf8(only).unwrap().replace("database=second", "database=renamed"));
}

#[test]
fn load_reports_bad_input_by_line_and_keeps_or_skips_existing_keys() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let bad = b"VERSION=3\nformat=bytevalue\ntype=btree\nHEADER=END\n 6b31\n 7631\n 6b3\n 76\nDATA=END\n";
    let err = fails_with_input(tern().arg("load").arg(&db), bad);
    assert!(err.contains("line 7: an odd number of hex digits"), "{err}");
    let dup = b"VERSION=3\nformat=print\ntype=btree\nduplicates=1\nHEADER=END\nDATA=END\n";
    let err = fails_with_input(tern().arg("load").arg(&db), dup);
    assert!(err.contains("one value per key"), "{err}");

    run(tern().arg("put").arg(&db).args(["k1", "old", "k2", "two"]));
    let dump = b"VERSION=3\nformat=print\ntype=btree\nHEADER=END\n k1\n new\n k3\n three\nDATA=END\n";
    let out = run_with_input(tern().args(["load", "--no-overwrite", "--json"]).arg(&db), dump);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((report["entries"].as_u64(), report["skipped"].as_u64()), (Some(1), Some(1)), "{report}");
    assert_eq!(stdout(&run(tern().arg("get").arg(&db).args(["k1", "k3"]))), "old\nthree\n");
    run_with_input(tern().arg("load").arg(&db), dump);
    assert_eq!(stdout(&run(tern().arg("get").arg(&db).arg("k1"))), "new\n", "overwritten by default");
}

#[test]
fn get_put_delete_scan_and_stat() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    assert!(!tern().arg("get").arg(&db).arg("k").output().unwrap().status.success(), "no database there");
    run_with_input(tern().arg("load").arg(&db), &make_dump(10, None, ""));
    run(tern().arg("put").arg(&db).args(["apple", "red", "b\\00nana", "yellow\\ff"]));
    run(tern().args(["put", "--hex"]).arg(&db).args(["ff00", "00ff"]));
    assert_eq!(stdout(&run(tern().arg("get").arg(&db).args(["apple", "b\\00nana"]))), "red\nyellow\\ff\n");
    assert_eq!(stdout(&run(tern().args(["get", "--hex"]).arg(&db).arg("ff00"))), "00ff\n");
    let missing = tern().arg("get").arg(&db).args(["apple", "cherry"]).output().unwrap();
    assert!(!missing.status.success());
    assert_eq!(String::from_utf8_lossy(&missing.stdout), "red\n");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found: cherry"));

    let scan = stdout(&run(tern().arg("scan").arg(&db).args(["--from", "a", "--to", "c"])));
    assert_eq!(scan, "apple\tred\nb\\00nana\tyellow\\ff\n");
    let rev = stdout(&run(tern().args(["scan", "--reverse", "--limit", "2", "--hex"]).arg(&db)));
    assert_eq!(rev.lines().next(), Some("ff00\t00ff"));
    assert_eq!(rev.lines().count(), 2);
    let json = stdout(&run(tern().args(["scan", "--json", "--from", "apple", "--limit", "1"]).arg(&db)));
    assert_eq!(json.trim(), r#"{"key":"apple","value":"red"}"#);

    assert_eq!(
        stdout(&run(tern().arg("delete").arg(&db).args(["apple", "cherry"]))),
        "deleted 1 entries; not found: cherry\n"
    );
    assert!(!tern().arg("get").arg(&db).arg("apple").output().unwrap().status.success());

    let no_table = tern().arg("put").arg(&db).args(["--table", "t", "x", "y"]).output().unwrap();
    assert!(
        !no_table.status.success() && String::from_utf8_lossy(&no_table.stderr).contains("t"),
        "put needs the table"
    );
    let stat: serde_json::Value =
        serde_json::from_slice(&run(tern().args(["stat", "--json"]).arg(&db)).stdout).unwrap();
    let tables = stat["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 1, "put --table does not create tables: {stat}");
    assert_eq!(tables[0]["records"], 10 + 2, "{stat}");
    assert!(stat["pages_used"].as_u64().unwrap() > 0 && stat["files"].as_array().unwrap().len() > 1, "{stat}");
    let text = stdout(&run(tern().arg("stat").arg(&db)));
    assert!(text.contains("(default)") && text.contains("checkpoint") && text.contains("cache"), "{text}");
}

/// The round trip the issue names: an LMDB environment of 100,000 records made by `mdb_load`
/// -> `tern load` -> `tern dump` -> `mdb_load` -> `mdb_dump`, identical to the original's dump.
#[test]
fn lmdb_round_trip_through_tern_is_identical() {
    if !have("mdb_load") || !have("mdb_dump") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (orig, back, db) = (dir.path().join("orig"), dir.path().join("back"), dir.path().join("tern"));
    std::fs::create_dir(&orig).unwrap();
    std::fs::create_dir(&back).unwrap();
    let mapsize = "mapsize=268435456\n";
    run_with_input(Command::new("mdb_load").arg(&orig), &make_dump(100_000, None, mapsize));
    let original = run(Command::new("mdb_dump").arg(&orig)).stdout;
    run_with_input(tern().arg("load").arg(&db), &original);
    let ours = run(tern().args(["dump", "--mapsize", "268435456"]).arg(&db)).stdout;
    run_with_input(Command::new("mdb_load").arg(&back), &ours);
    let again = run(Command::new("mdb_dump").arg(&back)).stdout;
    assert!(again == original, "mdb_dump differs after the round trip through tern");
    assert_eq!(data_lines(&String::from_utf8(ours).unwrap()), data_lines(&String::from_utf8(original).unwrap()));

    // Named databases: mdb_dump -a, one section each. (Not -p: LMDB 0.9's mdb_dump -p writes a
    // backslash byte as a lone backslash, which is ambiguous before another one.)
    let named = dir.path().join("named");
    std::fs::create_dir(&named).unwrap();
    let mut two = make_dump(1_000, Some("left"), mapsize);
    two.extend(make_dump(10, Some("right"), mapsize));
    run_with_input(Command::new("mdb_load").arg(&named), &two);
    let all = run(Command::new("mdb_dump").arg("-a").arg(&named)).stdout;
    let db2 = dir.path().join("tern2");
    run_with_input(tern().arg("load").arg(&db2), &all);
    let stat: serde_json::Value =
        serde_json::from_slice(&run(tern().args(["stat", "--json"]).arg(&db2)).stdout).unwrap();
    let counts: Vec<(String, u64)> = stat["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_string(), t["records"].as_u64().unwrap()))
        .collect();
    assert_eq!(counts, [("".to_string(), 0), ("left".to_string(), 1_000), ("right".to_string(), 10)]);
}

/// The same with Berkeley DB: `db_load` -> `tern load` -> `tern dump` -> `db_load` -> `db_dump`.
#[test]
fn berkeley_db_round_trip_through_tern_is_identical() {
    if !have("db_load") || !have("db_dump") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (orig, back, db) = (dir.path().join("orig.db"), dir.path().join("back.db"), dir.path().join("tern"));
    let mut dump = make_dump(100_000, Some("main"), "");
    dump.extend(make_dump(100, Some("side"), ""));
    run_with_input(Command::new("db_load").arg(&orig), &dump);
    let original = run(Command::new("db_dump").arg(&orig)).stdout;
    run_with_input(tern().arg("load").arg(&db), &original);
    let ours = run(tern().arg("dump").arg(&db)).stdout;
    run_with_input(Command::new("db_load").arg(&back), &ours);
    let again = run(Command::new("db_dump").arg(&back)).stdout;
    assert!(again == original, "db_dump differs after the round trip through tern");
    assert_eq!(data_lines(&String::from_utf8(ours).unwrap()), data_lines(&String::from_utf8(original).unwrap()));
    // And db_dump -p (print format, with its escapes) reads the same.
    let printed = run(Command::new("db_dump").arg("-p").arg(&orig)).stdout;
    let db2 = dir.path().join("tern2");
    run_with_input(tern().arg("load").arg(&db2), &printed);
    assert_eq!(run(tern().arg("dump").arg(&db2)).stdout, run(tern().arg("dump").arg(&db)).stdout);
}

#[test]
fn load_refuses_a_directory_that_holds_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("pages"), "my data\n").unwrap();
    std::fs::write(other.join("readme.txt"), "notes\n").unwrap();
    let err = fails_with_input(tern().arg("load").arg(&other), &make_dump(3, None, ""));
    assert!(err.contains("is not a database directory") && err.contains("missing or empty"), "{err}");
    let mut names: Vec<String> =
        std::fs::read_dir(&other).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["pages", "readme.txt"], "nothing is written there");
    assert_eq!(std::fs::read_to_string(other.join("pages")).unwrap(), "my data\n");
    // A missing directory and an empty one become databases.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for db in [empty, dir.path().join("missing")] {
        let out = run_with_input(tern().arg("load").arg(&db), &make_dump(3, None, ""));
        assert!(stdout(&out).contains("loaded 3 entries"), "{}", stdout(&out));
    }
}

/// A dump cut in the middle of a value's line: the cut value is never loaded, in either format.
#[test]
fn load_refuses_a_line_cut_by_the_end_of_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let full: [&[u8]; 2] = [
        b"VERSION=3\nformat=bytevalue\ntype=btree\nHEADER=END\n 61\n 3131\n 62\n 6868686868686868\nDATA=END\n",
        b"VERSION=3\nformat=print\ntype=btree\nHEADER=END\n a\n 11\n b\n hhhhhhhh\nDATA=END\n",
    ];
    for (i, full) in full.into_iter().enumerate() {
        let db = dir.path().join(format!("db{i}"));
        let cut = &full[..full.len() - "hhhh\nDATA=END\n".len()];
        let err = fails_with_input(tern().args(["load", "--batch", "1"]).arg(&db), cut);
        assert!(err.contains("line 8: ") && err.contains("no newline"), "{err}");
        assert_eq!(stdout(&run(tern().arg("scan").arg(&db))), "a\t11\n", "b is not loaded");
        // The whole dump, without a final newline or with CRLF line endings, loads.
        let unterminated = &full[..full.len() - 1];
        let crlf = String::from_utf8(full.to_vec()).unwrap().replace('\n', "\r\n");
        for (j, input) in [unterminated, crlf.as_bytes()].into_iter().enumerate() {
            let db = dir.path().join(format!("whole{i}-{j}"));
            run_with_input(tern().arg("load").arg(&db), input);
            assert_eq!(stdout(&run(tern().arg("scan").arg(&db))), "a\t11\nb\thhhhhhhh\n");
        }
    }
}

/// Table names are text: a `database=` name that is not UTF-8 is refused by its line (two such
/// names were merged into one table, both read as "\u{fffd}").
#[test]
fn load_refuses_a_database_name_that_is_not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut dump = Vec::new();
    for (name, value) in [(0xffu8, "31"), (0xfe, "32")] {
        dump.extend_from_slice(b"VERSION=3\nformat=bytevalue\ndatabase=");
        dump.push(name);
        dump.extend_from_slice(format!("\ntype=btree\nHEADER=END\n 61\n {value}\nDATA=END\n").as_bytes());
    }
    let err = fails_with_input(tern().arg("load").arg(&db), &dump);
    assert!(err.contains("line 3: database=\\ff") && err.contains("not UTF-8"), "{err}");
    let stat: serde_json::Value =
        serde_json::from_slice(&run(tern().args(["stat", "--json"]).arg(&db)).stdout).unwrap();
    assert_eq!(stat["tables"].as_array().unwrap().len(), 1, "no table was created: {stat}");
}

/// What tern refuses in an entry (a key over the maximum, an empty key) is reported with the
/// line of the entry's key, with and without `--no-overwrite`.
#[test]
fn load_names_the_line_of_an_entry_tern_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let long = "61".repeat(3000);
    for (key, want) in [(long.as_str(), "key of 3000 bytes exceeds the maximum"), ("", "empty key")] {
        let dump = format!("VERSION=3\nformat=bytevalue\ntype=btree\nHEADER=END\n 6b\n 76\n {key}\n 76\nDATA=END\n");
        for args in [&["load"][..], &["load", "--no-overwrite"]] {
            let err = fails_with_input(tern().args(args).arg(dir.path().join("db")), dump.as_bytes());
            assert!(err.contains("line 7: an entry of table \"\": ") && err.contains(want), "{args:?}: {err}");
        }
    }
}

/// An unknown `type=` is named as such, with the types tern loads; record-number types keep
/// their own reason.
#[test]
fn load_names_an_unknown_dump_type() {
    let dir = tempfile::tempdir().unwrap();
    for (kind, want) in [
        ("heap", "line 3: type=heap: an unknown database type (tern loads type=btree and type=hash)"),
        ("queue", "line 3: type=queue: tern tables are keyed by bytes; record-number databases"),
    ] {
        let dump = format!("VERSION=3\nformat=bytevalue\ntype={kind}\nHEADER=END\nDATA=END\n");
        let err = fails_with_input(tern().arg("load").arg(dir.path().join("db")), dump.as_bytes());
        assert!(err.contains(want), "{err}");
    }
}
