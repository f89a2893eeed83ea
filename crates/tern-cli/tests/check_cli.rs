//! `tern check`, `tern backup` and `tern compact` as a user runs them: a good database, a
//! damaged one, an open one.

use std::process::Command;
use tern::{Db, Options};

fn tern_cmd(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn make_db(dir: &std::path::Path) {
    let db = Db::open(dir, Options::default()).unwrap();
    let users = db.create_table("users").unwrap();
    for i in 0..300u32 {
        let mut t = db.begin().unwrap();
        t.put(&i.to_be_bytes(), b"value").unwrap();
        if i % 3 == 0 {
            t.put_in(&users, &i.to_be_bytes(), b"user").unwrap();
        }
        t.commit().unwrap();
    }
    db.close().unwrap();
}

#[test]
fn check_reports_tables_and_names_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    make_db(dir.path());
    let (ok, stdout, stderr) = tern_cmd(&["check", path]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains(": ok"), "{stdout}");
    assert!(stdout.contains("users") && stdout.contains("300") && stdout.contains("100"), "{stdout}");
    let (ok, stdout, _) = tern_cmd(&["check", path, "--json"]);
    assert!(ok);
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["tables"][1]["entries"], 100, "{report}");

    // While the database is open, check refuses (it would race the writer).
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let (ok, _, stderr) = tern_cmd(&["check", path]);
    assert!(!ok && stderr.contains("locked"), "{stderr}");
    drop(db);

    // A flipped byte in the checkpoint: the error names the file and the offset.
    let ckpt = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "ckpt"))
        .unwrap();
    let mut bytes = std::fs::read(&ckpt).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&ckpt, &bytes).unwrap();
    let (ok, _, stderr) = tern_cmd(&["check", path]);
    assert!(!ok, "a damaged checkpoint fails the check");
    let name = ckpt.file_name().unwrap().to_str().unwrap();
    assert!(stderr.contains("corrupt") && stderr.contains(name) && stderr.contains("offset"), "{stderr}");

    let (ok, _, stderr) = tern_cmd(&["check", "/nonexistent/tern-db"]);
    assert!(!ok && stderr.contains("not a database directory"), "{stderr}");
}

#[test]
fn backup_copies_a_database_that_checks_clean_and_refuses_bad_destinations() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("db");
    make_db(&src);
    let dst = root.path().join("copy");
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    let listing = |dir: &std::path::Path| -> Vec<(String, u64)> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.file_name().into_string().unwrap(), e.metadata().unwrap().len()))
            .collect();
        files.sort();
        files
    };
    let before = listing(&src);
    let (ok, stdout, stderr) = tern_cmd(&["backup", s, d]);
    assert!(ok, "{stderr}");
    assert_eq!(listing(&src), before, "the source directory is not written");
    assert!(stdout.contains("2 tables") && stdout.contains("400 entries"), "{stdout}");
    let (ok, stdout, stderr) = tern_cmd(&["check", d, "--json"]);
    assert!(ok, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        (report["tables"][0]["entries"].as_u64(), report["tables"][1]["entries"].as_u64()),
        (Some(300), Some(100))
    );

    let (ok, _, stderr) = tern_cmd(&["backup", s, d]);
    assert!(!ok && stderr.contains("exists"), "a backup goes to a new directory: {stderr}");
    let (ok, _, stderr) = tern_cmd(&["backup", "/nonexistent/tern-db", root.path().join("x").to_str().unwrap()]);
    assert!(!ok && stderr.contains("not a database directory"), "{stderr}");
    let plain = root.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let (ok, _, stderr) = tern_cmd(&["backup", plain.to_str().unwrap(), root.path().join("x").to_str().unwrap()]);
    assert!(!ok && stderr.contains("not a database directory"), "{stderr}");
    assert_eq!(std::fs::read_dir(&plain).unwrap().count(), 0, "nothing is written to a directory that is no database");
    let (ok, _, stderr) = tern_cmd(&["backup", s, src.join("inside").to_str().unwrap()]);
    assert!(!ok && stderr.contains("inside the database"), "{stderr}");
    let db = Db::open(&src, Options::default()).unwrap();
    let (ok, _, stderr) = tern_cmd(&["backup", s, root.path().join("y").to_str().unwrap()]);
    assert!(!ok && stderr.contains("locked") && stderr.contains("Db::backup"), "{stderr}");
    drop(db);
    let (ok, stdout, _) = tern_cmd(&["backup", s, root.path().join("z").to_str().unwrap(), "--json"]);
    assert!(ok);
    let info: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(info["entries"], 400, "{info}");
}

#[test]
fn compact_folds_the_log_into_a_checkpoint_and_keeps_every_entry() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("db");
    let no_close_checkpoint =
        Options { wal: tern::WalConfig { checkpoint_on_close: false, ..Default::default() }, ..Options::default() };
    let db = Db::open(&src, no_close_checkpoint).unwrap();
    for round in 0..5u32 {
        for i in 0..400u32 {
            let mut t = db.begin().unwrap();
            t.put(&i.to_be_bytes(), &[round as u8; 64]).unwrap();
            t.commit().unwrap();
        }
    }
    db.close().unwrap();
    let s = src.to_str().unwrap();
    let (ok, stdout, stderr) = tern_cmd(&["compact", s, "--json"]);
    assert!(ok, "{stderr}");
    let done: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(done["records_replayed"], 2000, "{done}");
    assert!(done["checkpoint"].is_string() && done["entries"] == 400, "{done}");
    assert!(done["bytes_after"].as_u64() < done["bytes_before"].as_u64(), "{done}");
    let db = Db::open(&src, Options::default()).unwrap();
    assert_eq!(db.stats().recovery.unwrap().records_replayed, 0, "nothing is left to replay");
    let t = db.begin_read().unwrap();
    assert_eq!(t.range(..).unwrap().count(), 400);
    assert_eq!(t.get(&399u32.to_be_bytes()).unwrap(), Some(vec![4u8; 64]));
    drop(t);
    let (ok, _, stderr) = tern_cmd(&["compact", s]);
    assert!(!ok && stderr.contains("locked") && stderr.contains("offline"), "{stderr}");
    db.close().unwrap();
    let (ok, stdout, stderr) = tern_cmd(&["compact", s]);
    assert!(ok && stdout.contains("nothing was logged"), "{stdout}{stderr}");
    let (ok, _, stderr) = tern_cmd(&["check", s]);
    assert!(ok, "{stderr}");
    let plain = root.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    for p in [plain.to_str().unwrap(), "/nonexistent/tern-db"] {
        let (ok, _, stderr) = tern_cmd(&["compact", p]);
        assert!(!ok && stderr.contains("not a database directory"), "{stderr}");
    }
    assert_eq!(std::fs::read_dir(&plain).unwrap().count(), 0, "nothing is written to a directory that is no database");
}

/// The compacted database holds a page checkpoint, which opens without loading any entry (the
/// copy's logical checkpoint was left in place before, and every open loaded it); a symbolic
/// link or `db/.` compacts the directory itself.
#[test]
fn compact_leaves_a_page_checkpoint_and_resolves_its_path() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("db");
    make_db(&src);
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&src, &link).unwrap();
    let dotted = format!("{}/.", src.display());
    for path in [src.to_str().unwrap(), link.to_str().unwrap(), dotted.as_str()] {
        let (ok, stdout, stderr) = tern_cmd(&["compact", path, "--json"]);
        assert!(ok, "{path}: {stderr}");
        let done: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(done["path"], src.to_str().unwrap(), "{done}");
        let db = Db::open(&src, Options::default()).unwrap();
        let recovery = db.stats().recovery.unwrap();
        assert_eq!(recovery.checkpoint_entries, 0, "{path}: a logical checkpoint was left: {recovery}");
        assert!(recovery.checkpoint_pages > 0, "{recovery}");
        assert_eq!(done["entries"], 400, "{done}");
        assert_eq!(db.begin_read().unwrap().range(..).unwrap().count(), 300);
        db.close().unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link is kept");
    }
    let leftovers: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
