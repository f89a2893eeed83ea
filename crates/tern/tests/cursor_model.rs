//! `TxnCursor` against a model (`BTreeMap`): cursors of a reader and of a writer (which sees
//! its own puts and deletes) move both ways through a bounded range while other transactions
//! commit writes between the moves; 4 KiB pages and values of up to 300 bytes make those writes
//! split and merge the leaves under the cursors. Every move's entry is checked against what the
//! transaction's snapshot plus its own writes hold.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::Bound;
use tern::lock::Wait;
use tern::{Db, Error, Options, Txn, TxnOptions};

const KEYS: u16 = 600;

#[derive(Clone, Debug)]
enum Move {
    First,
    Last,
    Seek(u16),
    SeekForPrev(u16),
    Next,
    Prev,
    /// Another transaction commits these writes (`None`: delete) while the cursor is open.
    Commit(Vec<(u16, Option<u8>)>),
}

#[derive(Clone, Debug)]
enum Op {
    /// The writer puts (`Some(len)`: a value of that length) or deletes a key.
    Write(u16, Option<u16>),
    /// Another transaction commits writes.
    Commit(Vec<(u16, Option<u8>)>),
    /// A cursor over `[lo, hi)` (or unbounded) of the writer (`own`) or the reader moves.
    Cursor { own: bool, lo: Option<u16>, hi: Option<u16>, moves: Vec<Move> },
    /// The writer commits and a new writer and reader begin.
    Renew,
}

fn writes() -> impl Strategy<Value = Vec<(u16, Option<u8>)>> {
    proptest::collection::vec((0..KEYS, proptest::option::weighted(0.7, any::<u8>())), 1..40)
}

fn a_move() -> impl Strategy<Value = Move> {
    prop_oneof![
        1 => Just(Move::First),
        1 => Just(Move::Last),
        2 => (0..KEYS).prop_map(Move::Seek),
        2 => (0..KEYS).prop_map(Move::SeekForPrev),
        8 => Just(Move::Next),
        6 => Just(Move::Prev),
        1 => writes().prop_map(Move::Commit),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..KEYS, proptest::option::weighted(0.7, 0..300u16)).prop_map(|(k, v)| Op::Write(k, v)),
        2 => writes().prop_map(Op::Commit),
        4 => (any::<bool>(), proptest::option::of(0..KEYS), proptest::option::of(0..KEYS),
              proptest::collection::vec(a_move(), 1..60))
            .prop_map(|(own, lo, hi, moves)| Op::Cursor { own, lo, hi, moves }),
        1 => Just(Op::Renew),
    ]
}

fn key(k: u16) -> [u8; 2] {
    k.to_be_bytes()
}

/// The value of `len` bytes stored for key `k` under tag `tag`.
fn value(k: u16, tag: u8, len: usize) -> Vec<u8> {
    let mut v = vec![tag; len];
    if len >= 2 {
        v[..2].copy_from_slice(&key(k));
    }
    v
}

/// Commits `writes` in a transaction of its own (keys the writer holds are skipped: their
/// locks would block). Returns what it committed.
fn commit_other(db: &Db, writes: &[(u16, Option<u8>)]) -> Vec<(u16, Option<Vec<u8>>)> {
    let mut t = db.begin_with(TxnOptions { lock_wait: Wait::No, ..TxnOptions::default() }).unwrap();
    let mut done = BTreeMap::new();
    for &(k, v) in writes {
        let r = match v {
            Some(tag) => {
                t.put(&key(k), &value(k, tag, usize::from(tag))).map(|_| Some(value(k, tag, usize::from(tag))))
            }
            None => t.delete(&key(k)).map(|_| None),
        };
        match r {
            Ok(v) => {
                done.insert(k, v);
            }
            Err(Error::WouldBlock) => return Vec::new(), // the writer holds it: nothing commits
            Err(e) => panic!("{e}"),
        }
    }
    t.commit().unwrap();
    done.into_iter().collect()
}

/// Commits `writes` in another transaction and applies what committed to the model, noting the
/// keys in `since`.
fn commit_to_model(
    db: &Db,
    writes: &[(u16, Option<u8>)],
    committed: &mut BTreeMap<u16, Vec<u8>>,
    since: &mut std::collections::HashSet<u16>,
) {
    for (k, v) in commit_other(db, writes) {
        since.insert(k);
        match v {
            Some(v) => committed.insert(k, v),
            None => committed.remove(&k),
        };
    }
}

/// The model cursor's answer: the first key of `view` in the range `(after, ..)` going forward
/// or `(.., before)` going backward, inside the cursor's bounds.
fn expect(view: &BTreeMap<u16, Vec<u8>>, from: Bound<u16>, to: Bound<u16>, forward: bool) -> Option<(u16, Vec<u8>)> {
    if let (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) = (from, to) {
        if a > b || (a == b && !(matches!(from, Bound::Included(_)) && matches!(to, Bound::Included(_)))) {
            return None;
        }
    }
    let mut r = view.range((from, to));
    let e = if forward { r.next() } else { r.next_back() };
    e.map(|(k, v)| (*k, v.clone()))
}

/// A writer (not waiting for locks) and a reader.
fn begin(db: &Db) -> (Txn<'_>, Txn<'_>) {
    let w = db.begin_with(TxnOptions { lock_wait: Wait::No, ..TxnOptions::default() }).unwrap();
    (w, db.begin_read().unwrap())
}

fn run(initial: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let options =
        Options { tree: tern::btree::TreeConfig { page_size: 4096, ..Default::default() }, ..Options::default() };
    let db = Db::open_temporary(options).unwrap();
    let mut committed: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
    let seed: Vec<(u16, Option<u8>)> = (0..initial as u16).map(|i| ((i * 7) % KEYS, Some((i % 250) as u8))).collect();
    for chunk in seed.chunks(50) {
        for (k, v) in commit_other(&db, chunk) {
            committed.insert(k, v.unwrap());
        }
    }
    // What the writer and the reader see: the snapshot at their begin (+ the writer's writes).
    let (mut writer, mut reader) = begin(&db);
    let mut own: BTreeMap<u16, Vec<u8>> = committed.clone();
    let mut own_writes: BTreeMap<u16, Option<Vec<u8>>> = BTreeMap::new();
    let mut snap = committed.clone();
    // Keys other transactions committed since the writer began (its writes to them conflict).
    let mut since = std::collections::HashSet::new();
    for op in ops {
        match op {
            Op::Write(k, v) => {
                let r = match v {
                    Some(len) => writer.put(&key(k), &value(k, 0xEE, usize::from(len))),
                    None => writer.delete(&key(k)).map(|_| ()),
                };
                match r {
                    Ok(()) => {
                        let v = v.map(|len| value(k, 0xEE, usize::from(len)));
                        match &v {
                            Some(v) => own.insert(k, v.clone()),
                            None => own.remove(&k),
                        };
                        own_writes.insert(k, v);
                    }
                    // Another transaction committed the key after the writer's snapshot.
                    Err(Error::Conflict) => {
                        prop_assert!(since.contains(&k), "a conflict on {} that nobody committed", k);
                        since.clear();
                        writer.abort();
                        (writer, reader) = begin(&db);
                        own = committed.clone();
                        own_writes.clear();
                        snap = committed.clone();
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("write: {e}"))),
                }
            }
            Op::Commit(writes) => commit_to_model(&db, &writes, &mut committed, &mut since),
            Op::Renew => {
                writer.commit().unwrap();
                for (k, v) in std::mem::take(&mut own_writes) {
                    match v {
                        Some(v) => committed.insert(k, v),
                        None => committed.remove(&k),
                    };
                }
                (writer, reader) = begin(&db);
                own = committed.clone();
                snap = committed.clone();
                since.clear();
            }
            Op::Cursor { own: mine, lo, hi, moves } => {
                let (txn, view) = if mine { (&writer, &own) } else { (&reader, &snap) };
                let (lo_k, hi_k) = (lo.map(key), hi.map(key));
                let lower = lo_k.as_ref().map_or(Bound::Unbounded, |k| Bound::Included(&k[..]));
                let upper = hi_k.as_ref().map_or(Bound::Unbounded, |k| Bound::Excluded(&k[..]));
                let mut c = txn.cursor((lower, upper)).unwrap();
                let (start, end) =
                    (lo.map_or(Bound::Unbounded, Bound::Included), hi.map_or(Bound::Unbounded, Bound::Excluded));
                // The model cursor: never positioned, on a key, or off the range.
                let mut at: Option<Option<u16>> = None;
                for (step, m) in moves.into_iter().enumerate() {
                    let clamp_lo = |k: u16| match start {
                        Bound::Included(s) if k < s => Bound::Included(s),
                        _ => Bound::Included(k),
                    };
                    let clamp_hi = |k: u16| match end {
                        Bound::Excluded(e) if k >= e => Bound::Excluded(e),
                        _ => Bound::Included(k),
                    };
                    let (got, want) = match m {
                        Move::Commit(writes) => {
                            commit_to_model(&db, &writes, &mut committed, &mut since);
                            continue;
                        }
                        Move::First => (c.first(), expect(view, start, end, true)),
                        Move::Last => (c.last(), expect(view, start, end, false)),
                        Move::Seek(k) => (c.seek(&key(k)), expect(view, clamp_lo(k), end, true)),
                        Move::SeekForPrev(k) => (c.seek_for_prev(&key(k)), expect(view, start, clamp_hi(k), false)),
                        Move::Next => {
                            let want = match at {
                                None => expect(view, start, end, true),
                                Some(None) => None,
                                Some(Some(k)) => expect(view, Bound::Excluded(k), end, true),
                            };
                            (c.next(), want)
                        }
                        Move::Prev => {
                            let want = match at {
                                None => expect(view, start, end, false),
                                Some(None) => None,
                                Some(Some(k)) => expect(view, start, Bound::Excluded(k), false),
                            };
                            (c.prev(), want)
                        }
                    };
                    let got = got.map_err(|e| TestCaseError::fail(format!("move {step}: {e}")))?;
                    let got = got.map(|(k, v)| (u16::from_be_bytes([k[0], k[1]]), v.to_vec()));
                    prop_assert_eq!(
                        &got,
                        &want,
                        "move {} ({}, {:?}..{:?})",
                        step,
                        if mine { "writer" } else { "reader" },
                        lo,
                        hi
                    );
                    prop_assert_eq!(c.entry().map(|(k, _)| k.to_vec()), got.as_ref().map(|(k, _)| key(*k).to_vec()));
                    at = Some(got.map(|(k, _)| k));
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn cursors_match_the_model(initial in 0usize..600, ops in proptest::collection::vec(op(), 1..40)) {
        run(initial, ops)?;
    }
}
