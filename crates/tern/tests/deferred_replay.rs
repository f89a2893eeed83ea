//! Deferred replay (`WalConfig::deferred_replay`): the log's last batch is applied after the
//! open returns, by a background thread and by whichever transaction needs a key first. Every
//! read, write, scan, checkpoint and close must still see every recovered commit, exactly as
//! an open that applied everything first.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tern::btree::TreeConfig;
use tern::fs::FaultFs;
use tern::{Db, Options, WalConfig};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Small pages and the smallest cache, so the tail's writes land on pages that must be read.
fn options(deferred: bool) -> Options {
    Options {
        cache_bytes: 0,
        tree: TreeConfig { page_size: 4096, ..Default::default() },
        wal: WalConfig {
            checkpoint_bytes: u64::MAX,
            checkpoint_on_close: false,
            deferred_replay: deferred,
            ..WalConfig::default()
        },
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 1_000_000).into_bytes()
}

/// A checkpointed table of `base` keys, then a log tail of scattered puts and deletes in small
/// transactions, closed without a checkpoint (the log holds the tail); returns the model.
fn build(dir: &Path, base: u32, tail: u32, options: Options) -> Model {
    let mut model = Model::new();
    let db = Db::open(dir, options).unwrap();
    let mut txn = db.begin().unwrap();
    for i in 0..base {
        txn.put(&key(i), &[b'b'; 60]).unwrap();
        model.insert(key(i), vec![b'b'; 60]);
    }
    txn.commit().unwrap();
    db.checkpoint().unwrap();
    let mut state = 12345u64;
    for chunk in 0..tail / 10 {
        let mut txn = db.begin().unwrap();
        for j in 0..10 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let k = key((state >> 33) as u32 % (base + base / 4));
            if (state >> 20) % 9 == 0 {
                txn.delete(&k).unwrap();
                model.remove(&k);
            } else {
                // Long values: a log of a few MiB takes few commits.
                let v = format!("tail{chunk}-{j}-{:080}", 0).into_bytes();
                txn.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        txn.commit().unwrap();
    }
    db.close().unwrap();
    model
}

fn scan(db: &Db) -> Model {
    db.begin_read().unwrap().range(..).unwrap().collect()
}

#[test]
fn reads_writes_and_scans_after_a_deferred_open_see_every_recovered_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = build(dir.path(), 10_000, 6_000, options(true));
    // Readers and a writer start at once, beside the background thread, from the largest key
    // down: the thread applies in key order, so they meet the writes it reaches last first.
    let mut keys: Vec<Vec<u8>> = (0..12_500).map(key).collect();
    keys.sort_unstable_by(|a, b| b.cmp(a));
    keys.dedup();
    let db = Db::open(dir.path(), options(true)).unwrap();
    let written: Vec<(Vec<u8>, Vec<u8>)> = std::thread::scope(|s| {
        for t in 0..2 {
            let (db, keys, model) = (&db, &keys, &model);
            s.spawn(move || {
                // The writer's keys (every seventh) aside.
                let mine = keys.iter().enumerate().filter(|(i, _)| i % 7 != 0 && i % 2 == t);
                for (_, k) in mine {
                    assert_eq!(db.begin_read().unwrap().get(k).unwrap().as_ref(), model.get(k), "key {k:?}");
                }
            });
        }
        let (db, keys, model) = (&db, &keys, &model);
        let writer = s.spawn(move || {
            let mut written = Vec::new();
            for k in keys.iter().step_by(7) {
                let mut txn = db.begin().unwrap();
                let old = txn.get(k).unwrap();
                assert_eq!(old.as_ref(), model.get(k), "key {k:?} read by a writer");
                let new = [old.unwrap_or_default(), b"+".to_vec()].concat();
                txn.put(k, &new).unwrap();
                txn.commit().unwrap();
                written.push((k.clone(), new));
            }
            written
        });
        // A scan of a range in the middle, while the rest is being applied.
        let (from, to) = (key(1).min(key(2)), key(1).max(key(2)));
        let part: Model = db.begin_read().unwrap().range(&from[..]..&to[..]).unwrap().collect();
        let want: Model = model.range(from.clone()..to.clone()).map(|(k, v)| (k.clone(), v.clone())).collect();
        if part != want {
            // The writer may have changed keys of the range meanwhile: only its keys may differ.
            for (k, v) in &part {
                assert!(want.get(k) == Some(v) || v.ends_with(b"+"), "key {k:?}");
            }
        }
        writer.join().unwrap()
    });
    let recovery = db.stats().recovery.unwrap();
    assert!(recovery.deferred_writes > 500, "the tail was deferred: {recovery}");
    model.extend(written);
    assert_eq!(scan(&db), model, "a scan after the writers sees recovered and new commits");
    // The checkpoint holds the deferred writes (it applies what is left): the log can go.
    db.checkpoint().unwrap();
    let stats = db.stats().recovery.unwrap();
    assert!(stats.deferred_millis.is_some(), "all applied once the checkpoint ran: {stats}");
    drop(db);
    let db = Db::open(dir.path(), options(true)).unwrap();
    assert_eq!(db.stats().recovery.unwrap().deferred_writes, 0, "the checkpoint left no log");
    assert_eq!(scan(&db), model);
    db.close().unwrap();
    tern::recovery::check(dir.path()).unwrap();
}

#[test]
fn deferred_and_eager_replays_recover_the_same_database_from_a_log_of_many_batches() {
    let dir = tempfile::tempdir().unwrap();
    // Batches of 1 MiB: the log's earlier batches are applied before the open returns, its
    // last one after; the same keys are written in several batches.
    let batches = |deferred| Options {
        wal: WalConfig { replay_batch_bytes: Some(1 << 20), ..options(deferred).wal },
        ..options(deferred)
    };
    let model = build(dir.path(), 10_000, 30_000, batches(true));
    for deferred in [true, false] {
        let copy = tempfile::tempdir().unwrap();
        for f in std::fs::read_dir(dir.path()).unwrap() {
            let f = f.unwrap();
            if f.file_name() != "LOCK" {
                std::fs::copy(f.path(), copy.path().join(f.file_name())).unwrap();
            }
        }
        let db = Db::open(copy.path(), batches(deferred)).unwrap();
        let recovery = db.stats().recovery.unwrap();
        assert_eq!(recovery.deferred_writes > 0, deferred, "{recovery}");
        assert!(recovery.bytes_replayed > 2 << 20, "several batches: {recovery}");
        for k in model.keys().step_by(101) {
            assert_eq!(db.begin_read().unwrap().get(k).unwrap().as_ref(), model.get(k));
        }
        assert_eq!(scan(&db), model, "deferred {deferred}");
    }
}

#[test]
fn closing_during_a_deferred_replay_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 10_000, 6_000, options(true));
    // Closed at once, without a checkpoint: the thread stops, the log stays.
    let db = Db::open(dir.path(), options(true)).unwrap();
    db.close().unwrap();
    // Closed at once with one: the checkpoint applies what is left first.
    let checkpointing = Options { wal: WalConfig { checkpoint_on_close: true, ..options(true).wal }, ..options(true) };
    let db = Db::open(dir.path(), checkpointing).unwrap();
    assert!(db.stats().recovery.unwrap().deferred_writes > 0);
    db.close().unwrap();
    let db = Db::open(dir.path(), options(true)).unwrap();
    assert_eq!(db.stats().recovery.unwrap().records_replayed, 0, "the close's checkpoint covered the log");
    assert_eq!(scan(&db), model);
}

/// A deferred write that cannot be applied (EIO reading its page) fails the operations that
/// need its key and the checkpoint, and is reported; once the fault is gone, the next one to
/// need it applies it again: it then reads as the log left it, and a checkpoint succeeds.
#[test]
fn a_deferred_write_that_cannot_be_applied_fails_until_it_can_be_and_is_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 10_000, 6_000, options(true));
    {
        let fs = FaultFs::new();
        fs.faults.fail_reads.store(true, Relaxed);
        let db = Db::open_with_fs(dir.path(), options(true), Arc::new(fs.clone())).unwrap();
        let recovery = db.stats().recovery.unwrap();
        assert!(recovery.deferred_writes > 0, "{recovery}");
        // Every page of the table is on disk and unreadable: no deferred write can apply.
        let (k, v) = model.iter().rev().find(|(_, v)| v.starts_with(b"tail")).unwrap();
        let got = db.begin_read().unwrap().get(k);
        assert!(got.is_err(), "key {k:?}: {got:?} (recovered value {v:?})");
        let err = db.checkpoint().unwrap_err();
        assert!(err.to_string().contains("injected EIO"), "{err}");
        let recovery = db.stats().recovery.unwrap();
        assert!(recovery.deferred_error.as_deref().is_some_and(|e| e.contains("injected EIO")), "{recovery:?}");
        fs.faults.fail_reads.store(false, Relaxed);
        // Applied again by the read that needs it: the log's value, not the checkpoint's.
        assert_eq!(db.begin_read().unwrap().get(k).unwrap().as_ref(), Some(v));
        db.checkpoint().unwrap();
        let recovery = db.stats().recovery.unwrap();
        assert!(recovery.deferred_error.is_none() && recovery.deferred_millis.is_some(), "{recovery:?}");
        assert_eq!(scan(&db), model);
    }
    let db = Db::open(dir.path(), options(true)).unwrap();
    assert_eq!(db.stats().recovery.unwrap().deferred_writes, 0, "the checkpoint covered the log");
    assert_eq!(scan(&db), model, "every recovered commit is in the checkpoint");
}
