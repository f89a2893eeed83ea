//! Every engine this build has (tern always; the C peers with `--features peers`) passes the
//! same small put/get/scan/transaction checks through the common interface.

use tern_peers::{available, load, open, put, read_modify_write, transaction, Engine, OpenOptions};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes()
}

fn engine(name: &str) -> Box<dyn Engine> {
    open(name, OpenOptions { cache_bytes: Some(64 << 20), sessions: 4, ..OpenOptions::default() })
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn the_build_lists_its_engines() {
    let names = available();
    assert_eq!(names[0], "tern");
    assert_eq!(names.len(), if cfg!(feature = "peers") { 5 } else { 1 });
}

#[test]
fn put_get_scan_on_every_engine() {
    for name in available() {
        let e = engine(name);
        assert_eq!(e.name(), name);
        assert!(!e.config().is_empty());
        let mut s = e.session().unwrap();
        // Even keys only, loaded in batches.
        let items: Vec<(Vec<u8>, Vec<u8>)> = (0..2000).step_by(2).map(|i| (key(i), value(i))).collect();
        for chunk in items.chunks(128) {
            load(&mut *s, chunk).unwrap();
        }
        let mut out = Vec::new();
        for i in [0, 2, 998, 1998] {
            assert!(s.get(&key(i), &mut out).unwrap(), "{name}: key {i}");
            assert_eq!(out, value(i), "{name}: key {i}");
        }
        for i in [1, 999, 2001] {
            assert!(!s.get(&key(i), &mut out).unwrap(), "{name}: absent key {i}");
        }
        // A scan from an absent key starts at the next one, in order.
        let mut seen = Vec::new();
        let n = s.scan(&key(101), 5, &mut |k, v| seen.push((k.to_vec(), v.to_vec()))).unwrap();
        assert_eq!(n, 5, "{name}");
        let expected: Vec<_> = (102..112).step_by(2).map(|i| (key(i), value(i))).collect();
        assert_eq!(seen, expected, "{name}");
        // Near the end: fewer than asked.
        let n = s.scan(&key(1995), 10, &mut |_, _| {}).unwrap();
        assert_eq!(n, 2, "{name}: scan past the end");
        // Overwrite, read-modify-write, and an aborted transaction.
        put(&mut *s, &key(2), b"two").unwrap();
        let mut scratch = Vec::new();
        let (found, _) = read_modify_write(&mut *s, &key(2), b"TWO", &mut scratch).unwrap();
        assert!(found);
        assert_eq!(scratch, b"two", "{name}: read-modify-write reads the old value");
        s.begin().unwrap();
        s.txn_put(&key(4), b"rolled back").unwrap();
        s.abort();
        assert!(s.get(&key(2), &mut out).unwrap());
        assert_eq!(out, b"TWO", "{name}");
        assert!(s.get(&key(4), &mut out).unwrap());
        assert_eq!(out, value(4), "{name}: the aborted write is gone");
    }
}

#[test]
fn concurrent_increments_are_not_lost_on_any_engine() {
    const THREADS: u64 = 2;
    const EACH: u64 = 300;
    for name in available() {
        let e = engine(name);
        put(&mut *e.session().unwrap(), b"counter", &0u64.to_be_bytes()).unwrap();
        let retries: u64 = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let e = &e;
                    sc.spawn(move || {
                        let mut s = e.session().unwrap();
                        let mut buf = Vec::new();
                        let mut retries = 0;
                        for _ in 0..EACH {
                            retries += transaction(&mut *s, |s| {
                                assert!(s.txn_get(b"counter", &mut buf)?);
                                let n = u64::from_be_bytes(buf[..8].try_into().unwrap());
                                s.txn_put(b"counter", &(n + 1).to_be_bytes())
                            })
                            .unwrap_or_else(|err| panic!("{name}: {err}"));
                        }
                        retries
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let mut out = Vec::new();
        assert!(e.session().unwrap().get(b"counter", &mut out).unwrap());
        assert_eq!(u64::from_be_bytes(out[..8].try_into().unwrap()), THREADS * EACH, "{name} ({retries} retries)");
    }
}

#[test]
fn unknown_engines_are_named_in_the_error() {
    let err = open("leveldb", OpenOptions { cache_bytes: Some(1 << 20), sessions: 1, ..OpenOptions::default() })
        .err()
        .unwrap();
    assert!(err.to_string().contains("unknown engine"), "{err}");
    if !cfg!(feature = "peers") {
        let err = open("lmdb", OpenOptions { cache_bytes: Some(1 << 20), sessions: 1, ..OpenOptions::default() })
            .err()
            .unwrap();
        assert!(err.to_string().contains("--features peers"), "{err}");
    }
}

#[test]
fn every_engine_opens_at_every_durability_level_on_disk() {
    use std::time::Duration;
    use tern_peers::Durability;
    let parent = tempfile::tempdir().unwrap();
    for name in available() {
        for level in [Durability::Sync, Durability::NoSync, Durability::Periodic(Duration::from_millis(5))] {
            let options = OpenOptions {
                cache_bytes: Some(64 << 20),
                data_bytes: 0,
                sessions: 2,
                durability: level,
                dir: Some(parent.path().to_path_buf()),
                tern_page_size: None,
                tern_row_cache_percent: None,
            };
            let e = open(name, options).unwrap_or_else(|err| panic!("{name} at {level:?}: {err}"));
            let config = e.config();
            assert!(config.contains(&format!("durability {}:", level.name())), "{name}: {config}");
            // The data directory is made in the one asked for.
            let entries: Vec<_> = std::fs::read_dir(parent.path()).unwrap().collect();
            assert_eq!(entries.len(), 1, "{name}: one data directory under --dir");
            let mut s = e.session().unwrap();
            let items: Vec<(Vec<u8>, Vec<u8>)> = (0..200).map(|i| (key(i), value(i))).collect();
            load(&mut *s, &items).unwrap();
            for i in 0..50 {
                put(&mut *s, &key(i), b"updated").unwrap();
            }
            if let Durability::Periodic(_) = level {
                std::thread::sleep(Duration::from_millis(20)); // a few flushes of the adapter's thread
            }
            let mut out = Vec::new();
            assert!(s.get(&key(10), &mut out).unwrap() && out == b"updated", "{name} at {level:?}");
            assert!(s.get(&key(100), &mut out).unwrap() && out == value(100), "{name} at {level:?}");
            if name == "tern" {
                let wal = e.wal_stats().expect("tern on disk has a log");
                assert!(wal.records >= 51, "{wal:?}");
                if level == Durability::Sync {
                    assert!(wal.syncs >= 51, "each lone commit is synced: {wal:?}");
                }
            } else {
                assert!(e.wal_stats().is_none(), "{name}");
            }
            drop(s);
            drop(e);
            assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0, "{name}: the data directory is removed");
        }
    }
}

#[test]
fn durability_none_gives_tern_no_directory_and_no_log() {
    let e = engine("tern");
    assert!(e.wal_stats().is_none());
    assert!(e.config().contains("durability none: no directory"), "{}", e.config());
}

#[test]
fn every_engine_reports_the_cache_it_was_given() {
    const ASKED: u64 = 24 << 20;
    for name in available() {
        let e = open(name, OpenOptions { cache_bytes: Some(ASKED), sessions: 2, ..OpenOptions::default() })
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        let config = e.config();
        match (name, e.cache_bytes()) {
            // LMDB has no cache of its own: the OS page cache holds its pages.
            ("lmdb", got) => {
                assert_eq!(got, None, "{config}");
                assert!(config.contains("no cache of its own (--cache does not apply)"), "{config}");
            }
            // Berkeley DB enlarges small caches for its own overhead.
            ("bdb", Some(got)) => assert!((ASKED..=ASKED * 2).contains(&got), "{name}: {got}: {config}"),
            (_, Some(got)) => assert_eq!(got, ASKED, "{name}: {config}"),
            (_, None) => panic!("{name} reports no cache: {config}"),
        }
        if name != "lmdb" {
            assert!(config.contains("--cache"), "{name} names where its cache size came from: {config}");
        }
        // Without --cache, each engine keeps its default (tern's own; a peer's sized to the data).
        let d = open(name, OpenOptions { cache_bytes: None, data_bytes: 100 << 20, ..OpenOptions::default() })
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        match (name, d.cache_bytes()) {
            ("lmdb", got) => assert_eq!(got, None),
            ("tern", got) => assert_eq!(got, Some(tern::Options::default_cache_bytes())),
            (_, got) => assert!(got.is_some_and(|b| b >= 200 << 20), "{name}: {got:?}: {}", d.config()),
        }
    }
}

#[test]
fn tern_variants_open_under_their_names_with_their_switch() {
    // `tern-pause` changes the latch policy of its whole process: never in this one (the test
    // binary runs other engines beside it), only in a benchmark's worker process.
    let refused = tern_peers::open("tern-pause", tern_peers::OpenOptions::default()).err().map(|e| e.to_string());
    assert!(refused.as_deref().is_some_and(|e| e.contains("--memory-limit")), "{refused:?}");
    for name in tern_peers::TERN_VARIANTS.into_iter().filter(|n| *n != "tern-pause") {
        let e = engine(name);
        assert_eq!(e.name(), name);
        let config = e.config();
        let fifo = config.contains("lock hand-over strict FIFO");
        assert_eq!(fifo, name == "tern-fifo", "{name}: {config}");
        // The log's switches show where there is a log.
        let logged = OpenOptions { durability: tern_peers::Durability::NoSync, ..OpenOptions::default() };
        let config = open(name, logged).unwrap_or_else(|e| panic!("{name}: {e}")).config();
        let chained = config.contains("chaining up to 8 flushes");
        assert_eq!(chained, name == "tern-chain", "{name}: {config}");
    }
    assert!(engine("tern").config().contains("lock hand-over barging"));
}
