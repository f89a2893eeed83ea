//! The tree against a model (`BTreeMap`), and under concurrency.

use super::*;
use crate::Error;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;

/// Every node shape: each layout, the slot-array ones with and without hints.
const SHAPES: [(Layout, bool); 6] = [
    (Layout::Sorted, false),
    (Layout::Sorted, true),
    (Layout::BranchFree, false),
    (Layout::BranchFree, true),
    (Layout::Eytzinger, false),
    (Layout::BTree, false),
];

fn tree((layout, hints): (Layout, bool), page_size: usize) -> BTree {
    BTree::new(TreeConfig { page_size, layout, prefetch: 2, hints, ..TreeConfig::DEFAULT }).unwrap()
}

/// A tree in a buffer pool of the fewest frames over a page file: pages are evicted and read
/// back all the time. The directory must outlive the tree.
fn evicting_tree(shape: (Layout, bool), page_size: usize) -> (tempfile::TempDir, BTree) {
    evicting_tree_with_rows(shape, page_size, 0)
}

/// [`evicting_tree`] with a row cache of `rows` bytes beside the frames.
fn evicting_tree_with_rows((layout, hints): (Layout, bool), page_size: usize, rows: u64) -> (tempfile::TempDir, BTree) {
    let dir = tempfile::tempdir().unwrap();
    let config =
        crate::buffer::PoolConfig { page_size, cache_bytes: Some(rows), row_cache_bytes: rows, huge_pages: false };
    let pool = crate::buffer::Pool::with_file(config, Arc::new(crate::fs::StdFs), dir.path().join("pages")).unwrap();
    let tree =
        BTree::with_pool(TreeConfig { page_size, layout, prefetch: 2, hints, ..TreeConfig::DEFAULT }, pool).unwrap();
    (dir, tree)
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<u8>, Vec<u8>),
    Upsert(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Get(Vec<u8>),
    Range(Vec<u8>, Vec<u8>, bool),
}

/// Keys that share long prefixes (so heads tie and prefixes get truncated), short keys, and
/// keys of the maximum length for 4 KiB pages.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (0u32..400).prop_map(|i| format!("user/{:08}", i * 7).into_bytes()),
        2 => (0u32..200).prop_map(|i| format!("common-prefix-that-is-long/{i:04}").into_bytes()),
        2 => proptest::collection::vec(any::<u8>(), 1..12),
        1 => (0u8..8).prop_map(|b| vec![b'z'; 512 - usize::from(b)]),
        1 => (0u8..4).prop_map(|b| vec![b]),
    ]
}

/// Keys that nearly all share their first 12 bytes (a node short of a fence then keeps heads
/// past them, `node::shared_len`), with a few outside them, before and after, that shrink what
/// the nodes they land in share, and searches for keys outside them.
fn shared_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        12 => (0u32..3000).prop_map(|i| [&[0u8; 8][..], b"tnt/", &(i * 13).to_be_bytes()[..]].concat()),
        1 => (0u32..50).prop_map(|i| [&[0u8; 8][..], b"tn", &i.to_be_bytes()[..]].concat()),
        1 => (1u8..4).prop_map(|b| vec![0u8; usize::from(b)]),
        1 => (0u32..50).prop_map(|i| [&[0u8; 8][..], b"tnu", &i.to_be_bytes()[..]].concat()),
        1 => proptest::collection::vec(any::<u8>(), 1..14),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => (0usize..3000).prop_map(|n| vec![0xAB; n]),
        1 => (4000usize..20_000).prop_map(|n| (0..n).map(|i| (i % 253) as u8).collect()),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    op_with(key)
}

fn shared_key_op() -> impl Strategy<Value = Op> {
    op_with(shared_key)
}

/// Inserts, upserts, deletes, lookups and ranges of keys `key` draws.
fn op_with<S: Strategy<Value = Vec<u8>> + 'static>(key: fn() -> S) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (key(), value()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => (key(), value()).prop_map(|(k, v)| Op::Upsert(k, v)),
        3 => key().prop_map(Op::Delete),
        2 => key().prop_map(Op::Get),
        1 => (key(), key(), any::<bool>()).prop_map(|(a, b, rev)| Op::Range(a, b, rev)),
    ]
}

fn run_against_model(shape: (Layout, bool), page_size: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    run_on(&tree(shape, page_size), ops)
}

fn run_on(t: &BTree, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Insert(k, v) => {
                let fresh = !model.contains_key(k);
                prop_assert_eq!(t.insert(k, v).unwrap(), fresh);
                model.entry(k.clone()).or_insert_with(|| v.clone());
            }
            Op::Upsert(k, v) => {
                prop_assert_eq!(t.upsert(k, v).unwrap(), model.insert(k.clone(), v.clone()).is_some());
            }
            Op::Delete(k) => prop_assert_eq!(t.delete(k).unwrap(), model.remove(k).is_some()),
            Op::Get(k) => prop_assert_eq!(t.get(k).unwrap(), model.get(k).cloned()),
            Op::Range(a, b, rev) => {
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                let want: Vec<(Vec<u8>, Vec<u8>)> =
                    model.range(lo.clone()..hi.clone()).map(|(k, v)| (k.clone(), v.clone())).collect();
                let got: Vec<(Vec<u8>, Vec<u8>)> = if *rev {
                    let mut g: Vec<_> = t.range(&lo[..]..&hi[..]).rev().collect();
                    g.reverse();
                    g
                } else {
                    t.range(&lo[..]..&hi[..]).collect()
                };
                prop_assert_eq!(got, want);
            }
        }
    }
    let shape = t.check().map_err(TestCaseError::fail)?;
    prop_assert_eq!(shape.keys, model.len());
    let all: Vec<(Vec<u8>, Vec<u8>)> = t.range(..).collect();
    prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn matches_model_small_pages(shape in 0usize..SHAPES.len(), ops in proptest::collection::vec(op(), 1..600)) {
        run_against_model(SHAPES[shape], 4096, &ops)?;
    }

    #[test]
    fn matches_model_with_pages_evicted_all_the_time(
        shape in 0usize..SHAPES.len(),
        rows in prop_oneof![Just(0u64), Just(32u64 << 10)],
        ops in proptest::collection::vec(op(), 1..600),
    ) {
        let (_dir, t) = evicting_tree_with_rows(SHAPES[shape], 4096, rows);
        run_on(&t, &ops)?;
        let stats = t.pool().stats();
        prop_assert!(stats.capacity_pages as usize == crate::buffer::MIN_FRAMES);
        prop_assert!(stats.live_pages <= stats.capacity_pages || stats.evictions > 0, "{:?}", stats);
    }

    #[test]
    fn matches_model_with_keys_sharing_their_first_bytes(
        shape in 0usize..SHAPES.len(),
        ops in proptest::collection::vec(shared_key_op(), 1..900),
    ) {
        run_against_model(SHAPES[shape], 4096, &ops)?;
    }

    #[test]
    fn matches_model_large_pages(shape in 0usize..SHAPES.len(), ops in proptest::collection::vec(op(), 1..400)) {
        run_against_model(SHAPES[shape], 65536, &ops)?;
    }
}

/// Writes: a value to put, or `None` to delete.
type WriteBatch = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// A tree holding `before`, then the batches of `batches` applied with `apply_sorted` (each
/// sorted and deduplicated, the last write of a key kept), against a map given the same writes.
fn apply_sorted_against_model(
    t: &BTree,
    before: &[(Vec<u8>, Vec<u8>)],
    batches: &[WriteBatch],
) -> Result<(), TestCaseError> {
    let mut model = BTreeMap::new();
    for (k, v) in before {
        t.upsert(k, v).unwrap();
        model.insert(k.clone(), v.clone());
    }
    for batch in batches {
        let mut last: BTreeMap<&[u8], Option<&[u8]>> = BTreeMap::new();
        for (k, v) in batch {
            last.insert(k, v.as_deref());
            match v {
                Some(v) => model.insert(k.clone(), v.clone()),
                None => model.remove(k),
            };
        }
        t.apply_sorted(&mut last.into_iter().peekable()).unwrap();
        t.check().map_err(TestCaseError::fail)?;
    }
    let got: BTreeMap<Vec<u8>, Vec<u8>> = t.range(..).collect();
    prop_assert_eq!(got, model);
    Ok(())
}

fn write_batches() -> impl Strategy<Value = Vec<WriteBatch>> {
    let write = (key(), proptest::option::weighted(0.8, value()));
    proptest::collection::vec(proptest::collection::vec(write, 0..300), 1..4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Sorted batches applied leaf by leaf leave what the same writes made one by one leave.
    #[test]
    fn sorted_batches_match_model(
        shape in 0usize..SHAPES.len(),
        before in proptest::collection::vec((key(), value()), 0..300),
        batches in write_batches(),
    ) {
        apply_sorted_against_model(&tree(SHAPES[shape], 4096), &before, &batches)?;
    }

    #[test]
    fn sorted_batches_match_model_with_pages_evicted_all_the_time(
        before in proptest::collection::vec((key(), value()), 0..200),
        batches in write_batches(),
    ) {
        let (_dir, t) = evicting_tree(SHAPES[3], 4096);
        apply_sorted_against_model(&t, &before, &batches)?;
    }
}

/// A slot's content in the model of [`update_chains_sorted_against_model`].
#[derive(Clone, Debug, PartialEq)]
enum Held {
    Plain(Vec<u8>),
    Chain(u64),
}

/// The change a test makes of a slot: decided by a hash of the key, the round and what the
/// slot holds, so that every kind of change meets every kind of slot.
fn test_change(key: &[u8], round: u64, current: &Option<Held>) -> stored::Change<'static> {
    use stored::Change;
    let h = key
        .iter()
        .fold(round.wrapping_mul(0x9E37_79B9_7F4A_7C15), |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3));
    let value = |h: u64| vec![(h >> 8) as u8; (h % 7 * (h >> 16) % 1500) as usize];
    match (current, h % 4) {
        (None, 0) => Change::Keep,
        (None, 1 | 2) => Change::Chain(h >> 4),
        (None, _) => Change::Plain(value(h).into()),
        (Some(Held::Plain(_)), 0) => Change::Remove,
        (Some(Held::Plain(_)), 1) => Change::Keep,
        (Some(Held::Plain(_)), _) => Change::Chain(h >> 4),
        (Some(Held::Chain(_)), 0) => Change::Remove,
        (Some(Held::Chain(id)), 1) => Change::Chain(id + 1),
        (Some(Held::Chain(_)), _) => Change::Plain(value(h).into()),
    }
}

/// Rounds of `update_chains_sorted` over sorted sets of keys, against a map that applies each
/// change the tree reports applied; `f` must see what the map holds, and the tree must hold
/// what the map holds afterwards.
fn update_chains_sorted_against_model(
    t: &BTree,
    before: &[(Vec<u8>, Vec<u8>)],
    rounds: &[Vec<Vec<u8>>],
) -> Result<(), TestCaseError> {
    use stored::{Applied, Change, Current};
    let mut model: BTreeMap<Vec<u8>, Held> = BTreeMap::new();
    for (k, v) in before {
        t.upsert(k, v).unwrap();
        model.insert(k.clone(), Held::Plain(v.clone()));
    }
    // Hints for the passes: fresh ones (a no-op change just made), stale ones (from an earlier
    // round, their leaves changed since), made-up ones (any page, any version, any slot) and
    // fresh ones naming a neighbouring slot: the passes must come out the same whichever they
    // get.
    let mut stale: BTreeMap<Vec<u8>, stored::LeafHint> = BTreeMap::new();
    for (round, keys) in rounds.iter().enumerate() {
        let keys: std::collections::BTreeSet<&Vec<u8>> = keys.iter().collect();
        let mut hints: BTreeMap<Vec<u8>, stored::LeafHint> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            let fresh = || t.update_chain_hinted(k, 0, |_| (Change::Keep, ())).ok().map(|(_, _, hint)| hint);
            let hint = match i % 4 {
                0 => fresh(),
                1 => stale.get(*k).copied(),
                2 => Some(stored::LeafHint { pid: (i * 7 % 64) as u32, version: (i % 8) as u64, slot: (i % 5) as u16 }),
                // The leaf as the write left it, another slot: only the slot's key check stops it.
                _ => fresh().map(|h| stored::LeafHint { slot: h.slot ^ 1, ..h }),
            };
            if let Some(hint) = hint {
                hints.insert(k.to_vec(), hint);
                stale.entry(k.to_vec()).or_insert(hint);
            }
        }
        let mut outcomes = Vec::new();
        let mut mismatch = None;
        t.update_chains_sorted(
            keys.iter().copied(),
            |k| k,
            |k| hints.get(*k).copied(),
            |k, current| {
                let seen = match current {
                    Current::Absent => None,
                    Current::Plain(v) => Some(Held::Plain(v.to_vec())),
                    Current::Chain(id) => Some(Held::Chain(id)),
                };
                if seen != model.get(*k).cloned() && mismatch.is_none() {
                    mismatch = Some(format!("{k:?}: f saw {seen:?}, the model holds {:?}", model.get(*k)));
                }
                (test_change(k, round as u64, &seen), seen)
            },
            |k, outcome| outcomes.push((k.clone(), outcome)),
        );
        prop_assert!(mismatch.is_none(), "{}", mismatch.unwrap());
        prop_assert_eq!(outcomes.len(), keys.len(), "every item is done once");
        let done: Vec<&Vec<u8>> = outcomes.iter().map(|(k, _)| k).collect();
        prop_assert_eq!(done, keys.iter().copied().collect::<Vec<_>>(), "in key order");
        for (k, outcome) in outcomes {
            let (applied, seen) = outcome.map_err(|e| TestCaseError::fail(e.to_string()))?;
            if applied != Applied::Yes {
                prop_assert!(matches!(test_change(&k, round as u64, &seen), Change::Plain(_)), "{applied:?}");
                continue;
            }
            match test_change(&k, round as u64, &seen) {
                Change::Keep => {}
                Change::Chain(id) => drop(model.insert(k, Held::Chain(id))),
                Change::Plain(v) => drop(model.insert(k, Held::Plain(v.into_owned()))),
                Change::Remove => drop(model.remove(&k)),
            }
        }
        let checked = t.check().map_err(TestCaseError::fail)?;
        prop_assert_eq!(checked.keys, model.len());
    }
    let guard = crossbeam_epoch::pin();
    let mut out = Vec::new();
    for (k, held) in &model {
        let got = match t.get_stored(k, &mut out, &guard).unwrap() {
            Some(stored::Stored::Plain) => Some(Held::Plain(out.clone())),
            Some(stored::Stored::Chain) => Some(Held::Chain(u64::from_le_bytes(out[..8].try_into().unwrap()))),
            None => None,
        };
        prop_assert_eq!(got.as_ref(), Some(held), "{:?}", k);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Chains updated leaf by leaf (the version collector's passes) change what the one-key
    /// call would, and the tree stays sound.
    #[test]
    fn chains_updated_in_sorted_runs_match_model(
        shape in 0usize..SHAPES.len(),
        before in proptest::collection::vec((key(), value()), 0..300),
        rounds in proptest::collection::vec(proptest::collection::vec(key(), 0..300), 1..5),
    ) {
        update_chains_sorted_against_model(&tree(SHAPES[shape], 4096), &before, &rounds)?;
    }

    #[test]
    fn chains_updated_in_sorted_runs_match_model_with_pages_evicted_all_the_time(
        before in proptest::collection::vec((key(), value()), 0..200),
        rounds in proptest::collection::vec(proptest::collection::vec(key(), 0..200), 1..4),
    ) {
        let (_dir, t) = evicting_tree(SHAPES[3], 4096);
        update_chains_sorted_against_model(&t, &before, &rounds)?;
    }
}

#[test]
fn grows_and_shrinks_through_splits_and_merges_in_every_layout() {
    for layout in SHAPES {
        let t = tree(layout, 4096);
        let key = |i: u32| format!("k{:07}", i.wrapping_mul(2_654_435_761_u32) % 1_000_000).into_bytes();
        let mut model = BTreeMap::new();
        for i in 0..20_000 {
            t.upsert(&key(i), &i.to_le_bytes()).unwrap();
            model.insert(key(i), i.to_le_bytes().to_vec());
        }
        let grown = t.check().unwrap();
        assert!(grown.height >= 3, "{layout:?}: {grown:?}");
        assert_eq!(grown.keys, model.len());
        for i in (0..20_000).filter(|i| i % 10 != 0) {
            assert!(t.delete(&key(i)).unwrap());
            model.remove(&key(i));
        }
        let shrunk = t.check().unwrap();
        assert_eq!(shrunk.keys, model.len());
        assert!(shrunk.leaves * 3 < grown.leaves, "{layout:?}: merges reclaim leaves: {grown:?} -> {shrunk:?}");
        assert!(t.stats().merges > 0 && t.stats().splits > 0);
        for (k, v) in &model {
            assert_eq!(t.get(k).unwrap().as_ref(), Some(v));
        }
        for k in model.keys() {
            assert!(t.delete(k).unwrap());
        }
        let empty = t.check().unwrap();
        assert_eq!((empty.keys, empty.height), (0, 1), "{layout:?}: {empty:?}");
    }
}

#[test]
fn cursors_walk_both_ways_across_leaves() {
    let t = tree((Layout::Eytzinger, false), 4096);
    let keys: Vec<Vec<u8>> = (0..3000u32).map(|i| format!("{:06}", i * 2).into_bytes()).collect();
    for k in &keys {
        t.insert(k, b"v").unwrap();
    }
    let mut c = t.cursor();
    assert!(c.seek(b"000101"));
    assert_eq!(c.key(), Some(&b"000102"[..]));
    let mut seen = vec![c.key().unwrap().to_vec()];
    while c.next_entry() {
        seen.push(c.key().unwrap().to_vec());
    }
    assert_eq!(seen, keys[51..]);
    assert!(c.seek_for_prev(b"000101"));
    assert_eq!(c.key(), Some(&b"000100"[..]));
    let mut back = vec![c.key().unwrap().to_vec()];
    while c.prev_entry() {
        back.push(c.key().unwrap().to_vec());
    }
    back.reverse();
    assert_eq!(back, keys[..51]);
    assert!(c.seek_last() && c.key() == Some(keys.last().unwrap().as_slice()));
    assert!(c.seek_first() && c.key() == Some(keys[0].as_slice()));
    assert!(!t.cursor().seek(b"999999"));
    let mid: Vec<_> = t.range(&b"001000"[..]..=&b"001010"[..]).rev().map(|(k, _)| k).collect();
    assert_eq!(mid, [b"001010", b"001008", b"001006", b"001004", b"001002", b"001000"].map(|k| k.to_vec()));
}

#[test]
fn cursors_turn_around_anywhere_in_a_partly_copied_leaf() {
    // 16 KiB leaves of ~400 small entries: forward moves copy windows of a leaf, so turning
    // back must find the entries before the window, and forward again the ones after it.
    let t = tree((Layout::BranchFree, true), 16384);
    let keys: Vec<Vec<u8>> = (0..5000u32).map(|i| format!("{:06}", i * 2).into_bytes()).collect();
    for k in &keys {
        t.insert(k, b"v").unwrap();
    }
    for start in [0usize, 7, 300, 2222, 4990] {
        let mut c = t.cursor();
        assert!(c.seek(&keys[start]));
        let mut at = start;
        for (steps, forward) in [(130usize, true), (200, false), (75, true), (3, false)] {
            for _ in 0..steps {
                let moved = if forward { c.next_entry() } else { c.prev_entry() };
                let expect = if forward { at + 1 < keys.len() } else { at > 0 };
                assert_eq!(moved, expect, "start {start}, at {at}, forward {forward}");
                if !moved {
                    // Past an end the cursor is unpositioned: reseek where it was.
                    assert!(c.seek(&keys[at]));
                    continue;
                }
                at = if forward { at + 1 } else { at - 1 };
                assert_eq!(c.key(), Some(keys[at].as_slice()), "start {start}");
            }
        }
    }
}

#[test]
fn bad_keys_and_values_get_clear_errors() {
    let t = tree((Layout::Sorted, true), 4096);
    assert!(matches!(t.insert(b"", b"v"), Err(Error::KeyEmpty)));
    assert!(matches!(t.get(b""), Err(Error::KeyEmpty)));
    let long = vec![1u8; t.max_key_len() + 1];
    assert!(matches!(t.upsert(&long, b"v"), Err(Error::KeyTooLarge { len: 513, max: 512 })));
    assert!(matches!(t.delete(&long), Err(Error::KeyTooLarge { .. })));
    assert!(t.insert(&long[..512], b"max key is fine").unwrap());
    assert!(BTree::new(TreeConfig { page_size: 3000, ..TreeConfig::DEFAULT }).is_err());
    assert!(BTree::new(TreeConfig { page_size: 1 << 17, ..TreeConfig::DEFAULT }).is_err());
    assert!(BTree::new(TreeConfig { prefetch: 3, ..TreeConfig::DEFAULT }).is_err());
    assert!(t.set_prefetch(9).is_err());
    let message = t.insert(b"", b"").unwrap_err().to_string();
    assert!(message.contains("empty key"), "{message}");
}

#[test]
fn large_values_live_in_overflow_pages_and_are_freed() {
    let t = tree((Layout::BTree, false), 4096);
    let big: Vec<u8> = (0..50_000u32).map(|i| (i % 241) as u8).collect();
    assert!(t.insert(b"big", &big).unwrap());
    assert_eq!(t.get(b"big").unwrap(), Some(big.clone()));
    let pages_with_big = t.stats().pages;
    assert!(pages_with_big > 10);
    assert!(t.upsert(b"big", b"small now").unwrap());
    assert!(!t.insert(b"big", &big).unwrap(), "insert does not replace");
    assert!(t.delete(b"big").unwrap());
    assert_eq!(t.stats().pages, 1, "overflow pages are freed at once (only the root leaf is left)");
    assert!(pages_with_big > t.stats().pages);
    assert_eq!(t.pool().live_pages(), 1);
}

/// Writers on disjoint and overlapping key ranges, readers checking that every value they see
/// is one some writer wrote for that key, and scanners checking order; then a full check.
#[test]
fn concurrent_writers_readers_and_scanners_keep_the_tree_valid() {
    for shape in [(Layout::Sorted, false), (Layout::BranchFree, true), (Layout::Eytzinger, false)] {
        concurrent_writers_readers_and_scanners(tree(shape, 4096));
    }
}

#[test]
fn concurrent_writers_readers_scanners_and_the_evictor_keep_the_tree_valid() {
    for shape in [(Layout::BranchFree, true), (Layout::Eytzinger, false)] {
        let (_dir, t) = evicting_tree(shape, 4096);
        let pool = t.pool().clone();
        concurrent_writers_readers_and_scanners(t);
        let stats = pool.stats();
        assert!(stats.evictions > 100 && stats.reads > 100 && stats.write_backs > 100, "{stats:?}");
    }
}

fn concurrent_writers_readers_and_scanners(t: BTree) {
    const WRITERS: u32 = 3;
    const OPS: u32 = 6_000;
    {
        let t = Arc::new(t);
        let stop = Arc::new(AtomicBool::new(false));
        let value_for = |key: &[u8], w: u32, i: u32| {
            let mut v = key.to_vec();
            v.extend_from_slice(format!("/{w}/{i}").as_bytes());
            v
        };
        let key_for = |w: u32, i: u32| {
            // Writer w owns keys ≡ w (mod WRITERS) in its first half; all share the second.
            let k = if i % 2 == 0 { (i * WRITERS + w) % 5000 } else { i % 3000 };
            format!("key{k:06}").into_bytes()
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let t = Arc::clone(&t);
                thread::spawn(move || {
                    for i in 0..OPS {
                        let k = key_for(w, i);
                        match i % 5 {
                            0..=2 => {
                                t.upsert(&k, &value_for(&k, w, i)).unwrap();
                            }
                            3 => {
                                t.delete(&k).unwrap();
                            }
                            _ => {
                                t.insert(&k, &value_for(&k, w, i)).unwrap();
                            }
                        }
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (t, stop) = (Arc::clone(&t), Arc::clone(&stop));
                thread::spawn(move || {
                    let mut checked = 0u64;
                    let mut i: u32 = r;
                    while !stop.load(Relaxed) {
                        i = i.wrapping_mul(1_103_515_245).wrapping_add(12345);
                        let k = format!("key{:06}", i % 5000).into_bytes();
                        if let Some(v) = t.get(&k).unwrap() {
                            assert!(v.starts_with(&k) && v[k.len()] == b'/', "value {v:?} for {k:?}");
                            checked += 1;
                        }
                        if i % 64 == 0 {
                            let scan: Vec<_> = t.range(&b"key001000"[..]..&b"key001500"[..]).map(|(k, _)| k).collect();
                            assert!(scan.windows(2).all(|w| w[0] < w[1]), "scan out of order");
                            let back: Vec<_> = t.range(&b"key002000"[..]..).rev().take(50).map(|(k, _)| k).collect();
                            assert!(back.windows(2).all(|w| w[0] > w[1]), "reverse scan out of order");
                        }
                    }
                    checked
                })
            })
            .collect();
        writers.into_iter().for_each(|h| h.join().unwrap());
        stop.store(true, Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        let shape = t.check().unwrap();
        let counted = t.range(..).count();
        assert_eq!(shape.keys, counted);
    }
}

/// The row cache answers point reads of keys whose leaves were evicted, and never with a value
/// the leaf no longer holds: every read below is checked against the model, after updates,
/// deletes and splits of the leaves its entries came from.
#[test]
fn the_row_cache_answers_reads_of_evicted_leaves_and_never_a_stale_value() {
    let (_dir, t) = evicting_tree_with_rows(SHAPES[3], 4096, 256 << 10);
    let key = |i: u32| format!("row/{i:06}").into_bytes();
    let mut model = BTreeMap::new();
    for i in 0..20_000u32 {
        let v = format!("value {i} first").into_bytes();
        t.upsert(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    let hot: Vec<u32> = (0..20_000).step_by(97).collect();
    let check = |t: &BTree, model: &BTreeMap<Vec<u8>, Vec<u8>>, rounds: usize| {
        for _ in 0..rounds {
            for &i in &hot {
                assert_eq!(t.get(&key(i)).unwrap().as_ref(), model.get(&key(i)), "key {i}");
            }
        }
    };
    check(&t, &model, 3);
    let s = t.pool().stats();
    assert!(s.row_hits > 0 && s.row_inserts > 0 && s.row_entries > 0, "{s:?}");
    // Change every third hot key, delete every fifth, and grow the leaves of others until they
    // split: reads must see exactly the model, whether the leaf is resident, evicted again, or
    // its entries were made from an older image.
    for (n, &i) in hot.iter().enumerate() {
        if n % 5 == 0 {
            t.delete(&key(i)).unwrap();
            model.remove(&key(i));
        } else if n % 3 == 0 {
            let v = format!("value {i} second").into_bytes();
            t.upsert(&key(i), &v).unwrap();
            model.insert(key(i), v);
        } else if n % 7 == 1 {
            for j in 0..40u32 {
                let k = format!("row/{i:06}/{j:03}").into_bytes();
                t.upsert(&k, b"split filler").unwrap();
                model.insert(k, b"split filler".to_vec());
            }
        }
    }
    check(&t, &model, 3);
    let after = t.pool().stats();
    assert!(after.row_stale > s.row_stale, "entries of changed leaves were found stale: {after:?}");
    assert!(after.row_hits > s.row_hits, "{after:?}");
    assert!(after.row_bytes <= after.row_cache_bytes, "{after:?}");
    t.check().unwrap();
}

/// A point read of a resident leaf the clock has marked leaves its key in the row cache
/// instead of giving the leaf its second chance (when the leaf is clean and the row cache
/// takes the key): the clock's next visit evicts the leaf, and the key is then read without
/// I/O. A changed (dirty) leaf, or a key the row cache turns down, gets the second chance.
#[test]
#[cfg(not(loom))]
fn a_read_of_a_marked_leaf_moves_its_key_to_the_row_cache_and_lets_the_leaf_go() {
    let (_dir, t) = evicting_tree_with_rows(SHAPES[3], 4096, 256 << 10);
    let pool = t.pool().clone();
    let key = |i: u32| format!("mark/{i:06}").into_bytes();
    let value = |i: u32| format!("value of {i}, long enough to fill leaves").into_bytes();
    for i in 0..20_000u32 {
        t.upsert(&key(i), &value(i)).unwrap();
    }
    // The background evictor gives the row cache its share (bounded wait), then stops: this
    // thread alone changes the pool from here on (it evicts for itself).
    wait_for_the_row_cache(&t);
    pool.stop_evictor();
    pool.flush().unwrap();
    let leaf_of = |k: &[u8]| {
        let guard = crossbeam_epoch::pin();
        match t.descend(k, 0, false, &guard) {
            Ok(path) => path.at.pid,
            Err(_) => panic!("no one else changes the tree"),
        }
    };
    for i in (0..20_000u32).step_by(1999) {
        // Bring the leaf in and mark it, as the clock's first pass would.
        assert_eq!(t.get(&key(i)).unwrap(), Some(value(i)));
        let pid = leaf_of(&key(i));
        assert!(pool.mark(pid), "key {i}");
        let before = pool.stats();
        assert_eq!(t.get(&key(i)).unwrap(), Some(value(i)));
        let after = pool.stats();
        assert_eq!(after.reads, before.reads, "key {i}: the leaf was resident");
        assert_eq!(after.row_promotions, before.row_promotions + 1, "key {i}: {after:?}");
        assert!(pool.is_marked(pid), "key {i}: the read left the leaf its mark");
        assert!(pool.evict_if_marked(pid), "key {i}: the clock's next visit evicts the leaf");
        assert_eq!(t.get(&key(i)).unwrap(), Some(value(i)));
        let s = pool.stats();
        assert_eq!(s.reads, after.reads, "key {i} was read from the row cache, not the file");
        assert_eq!(s.row_hits, after.row_hits + 1, "{s:?}");
    }
    // A changed (dirty) leaf gets its second chance, and none of its keys is promoted.
    for i in (7..20_000u32).step_by(1777) {
        let k = key(i);
        t.upsert(&k, b"changed").unwrap();
        let pid = leaf_of(&k);
        assert!(pool.is_dirty(pid) && pool.mark(pid), "key {i}");
        let before = pool.stats();
        assert_eq!(t.get(&k).unwrap().as_deref(), Some(&b"changed"[..]));
        assert_eq!(pool.stats().row_promotions, before.row_promotions, "key {i}");
        assert!(!pool.is_marked(pid), "key {i}: a read of a dirty marked leaf unmarks it");
    }
    t.check().unwrap();
}

/// Waits until the pool has given the row cache its share (the background evictor empties
/// the frames past the new capacity), for at most 20 s.
#[cfg(not(loom))]
fn wait_for_the_row_cache(t: &BTree) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while t.pool().stats().row_cache_bytes == 0 {
        assert!(std::time::Instant::now() < deadline, "the row cache did not open: {:?}", t.pool().stats());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A tree over a pool of `frames` frames' worth of cache, `rows` of them the row cache's share.
#[cfg(not(loom))]
fn tree_sharing_its_cache(frames: u64, rows: u64) -> (tempfile::TempDir, BTree) {
    const PAGE: usize = 4096;
    let frame = crate::buffer::frame_bytes(PAGE) as u64;
    let dir = tempfile::tempdir().unwrap();
    let config = crate::buffer::PoolConfig {
        page_size: PAGE,
        cache_bytes: Some(frames * frame),
        row_cache_bytes: rows * frame,
        huge_pages: false,
    };
    let pool = crate::buffer::Pool::with_file(config, Arc::new(crate::fs::StdFs), dir.path().join("pages")).unwrap();
    (dir, BTree::with_pool(TreeConfig { page_size: PAGE, ..TreeConfig::DEFAULT }, pool).unwrap())
}

/// A row share smaller than the free frames the background evictor keeps: the pool is not
/// past its smaller capacity when it first evicts, and the row cache opens at once.
#[test]
#[cfg(not(loom))]
fn a_small_row_share_opens_as_soon_as_the_pool_evicts() {
    let (_dir, t) = tree_sharing_its_cache(512, 4);
    let mut n = 0u32;
    while t.pool().stats().live_pages < 2048 {
        t.upsert(format!("small/{n:010}").as_bytes(), &[7; 60]).unwrap();
        n += 1;
    }
    wait_for_the_row_cache(&t);
    let s = t.pool().stats();
    assert_eq!(s.capacity_pages, 508, "{s:?}");
    t.check().unwrap();
}

/// The frames use the whole cache while the data fits; once the pool must evict, it gives the
/// row cache its share: the frames past the smaller capacity are emptied and retired (their
/// memory given back), and only then does the row cache take entries. Reads stay exact.
#[test]
#[cfg(not(loom))]
fn the_pool_gives_the_row_cache_its_share_only_once_the_data_outgrows_the_cache() {
    let (_dir, t) = tree_sharing_its_cache(512, 256);
    let rows = 256 * crate::buffer::frame_bytes(4096) as u64;
    // Distinct keys (multiplying by an odd number permutes the u32s) in scattered order.
    let key = |i: u32| format!("share/{:010}", i.wrapping_mul(2_654_435_761)).into_bytes();
    let value = |i: u32| format!("value {i:08} and some bytes to fill the leaves with").into_bytes();
    // Data for about 400 pages: more than the frames past the row cache's share, less than
    // the cache.
    let mut n = 0u32;
    while t.pool().stats().live_pages < 400 {
        t.upsert(&key(n), &value(n)).unwrap();
        n += 1;
    }
    let s = t.pool().stats();
    assert_eq!((s.capacity_pages, s.evictions, s.row_cache_bytes), (512, 0, 0), "{s:?}");
    assert!(s.resident_pages >= 400, "the data fits in the whole cache: {s:?}");
    // Outgrow the cache four times.
    while t.pool().stats().live_pages < 2048 {
        t.upsert(&key(n), &value(n)).unwrap();
        n += 1;
    }
    wait_for_the_row_cache(&t);
    let s = t.pool().stats();
    assert_eq!(s.capacity_pages, 256, "{s:?}");
    assert!(s.row_cache_bytes > 0 && s.row_cache_bytes <= rows, "the row cache is open: {s:?}");
    for round in 0..3 {
        for i in (0..n).step_by(7) {
            assert_eq!(t.get(&key(i)).unwrap(), Some(value(i)), "round {round}, key {i}");
        }
    }
    let s = t.pool().stats();
    assert!(s.resident_pages <= 256 + s.over_capacity, "{s:?}");
    assert!(s.row_entries > 0 && s.row_hits > 0, "{s:?}");
    t.check().unwrap();
}

/// Readers of a few hot keys, in a pool of the fewest frames with a row cache, while writers
/// raise each key's counter: no reader ever sees a key's counter go back (a stale row would).
#[test]
fn concurrent_readers_never_see_a_row_older_than_one_they_saw() {
    const KEYS: u32 = 64;
    let (_dir, t) = evicting_tree_with_rows(SHAPES[3], 4096, 64 << 10);
    let t = Arc::new(t);
    let key = |i: u32| format!("hot/{:05}", i * 31).into_bytes();
    let value = |round: u64| {
        let mut v = round.to_be_bytes().to_vec();
        v.extend_from_slice(&[0x5A; 60]);
        v
    };
    // Cold keys around the hot ones: many leaves, so the hot ones keep being evicted.
    for i in 0..20_000u32 {
        t.upsert(format!("hot/{i:05}/cold").as_bytes(), &[1; 80]).unwrap();
    }
    for i in 0..KEYS {
        t.upsert(&key(i), &value(0)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u32)
        .map(|w| {
            let t = t.clone();
            thread::spawn(move || {
                for round in 1..=300u64 {
                    for i in (w..KEYS).step_by(2) {
                        t.upsert(&key(i), &value(round)).unwrap();
                    }
                    // Cold reads in between evict the hot leaves.
                    for c in 0..20u32 {
                        t.get(format!("hot/{:05}/cold", (round as u32 * 131 + c * 977) % 20_000).as_bytes()).unwrap();
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (t, stop) = (t.clone(), stop.clone());
            thread::spawn(move || {
                let mut seen = vec![0u64; KEYS as usize];
                let mut reads = 0u64;
                while !stop.load(Relaxed) || reads < 10_000 {
                    for i in 0..KEYS {
                        let v = t.get(&key(i)).unwrap().expect("hot keys are never deleted");
                        let round = u64::from_be_bytes(v[..8].try_into().unwrap());
                        assert!(round >= seen[i as usize], "key {i}: round {round} after {}", seen[i as usize]);
                        assert_eq!(v[8..], [0x5A; 60]);
                        seen[i as usize] = round;
                        reads += 1;
                    }
                }
            })
        })
        .collect();
    writers.into_iter().for_each(|h| h.join().unwrap());
    stop.store(true, Relaxed);
    readers.into_iter().for_each(|h| h.join().unwrap());
    for i in 0..KEYS {
        assert_eq!(t.get(&key(i)).unwrap(), Some(value(300)));
    }
    let s = t.pool().stats();
    assert!(s.row_hits > 0 && s.evictions > 0, "the row cache and eviction took part: {s:?}");
    t.check().unwrap();
}

#[test]
fn bulk_load_builds_a_valid_tree_in_every_layout() {
    for (layout, hints) in SHAPES {
        for (page_size, n) in [(4096, 0), (4096, 1), (4096, 30_000), (65536, 30_000)] {
            let keys: Vec<Vec<u8>> = (0..n).map(|i: u32| format!("bulk/{:09}", i * 3).into_bytes()).collect();
            let value = |k: &[u8]| if k.ends_with(b"00") { vec![7u8; 9000] } else { k.to_vec() };
            let config = TreeConfig { page_size, layout, prefetch: 1, hints, ..TreeConfig::DEFAULT };
            let t = BTree::bulk_load(config, keys.iter().map(|k| (k.clone(), value(k)))).unwrap();
            let shape = t.check().unwrap();
            assert_eq!(shape.keys, keys.len(), "{layout:?} {page_size} {n}");
            for k in keys.iter().step_by(97) {
                assert_eq!(t.get(k).unwrap(), Some(value(k)));
            }
            assert_eq!(t.range(..).count(), keys.len());
            // The loaded tree takes further writes.
            t.upsert(b"bulk/000000001", b"new").unwrap();
            t.delete(b"bulk/000000003").unwrap();
            t.check().unwrap();
        }
    }
}

#[test]
fn bulk_load_rejects_unsorted_and_bad_input() {
    let config = TreeConfig { page_size: 4096, ..TreeConfig::DEFAULT };
    let unsorted = [(&b"b"[..], &b"1"[..]), (&b"a"[..], &b"2"[..])];
    assert!(matches!(BTree::bulk_load(config, unsorted), Err(Error::InvalidArgument(_))));
    let duplicate = [(&b"a"[..], &b"1"[..]), (&b"a"[..], &b"2"[..])];
    assert!(matches!(BTree::bulk_load(config, duplicate), Err(Error::InvalidArgument(_))));
    let empty_key = [(&b""[..], &b"1"[..])];
    assert!(matches!(BTree::bulk_load(config, empty_key), Err(Error::KeyEmpty)));
}

#[test]
fn free_all_gives_every_page_of_a_tree_back_to_a_shared_pool() {
    let (_dir, keep) = evicting_tree((Layout::BranchFree, true), 4096);
    let pool = keep.pool().clone();
    let config = TreeConfig { page_size: 4096, ..TreeConfig::DEFAULT };
    let t = BTree::with_pool(config, pool.clone()).unwrap();
    let big = vec![7u8; 20_000];
    for i in 0..3000u32 {
        t.insert(&i.to_be_bytes(), if i % 100 == 0 { &big } else { b"small value" }).unwrap();
    }
    let before = pool.live_pages();
    assert!(t.stats().pages > 50 && pool.stats().evictions > 0, "{:?}", pool.stats());
    assert_eq!(before, keep.stats().pages + t.stats().pages);
    t.free_all();
    assert_eq!(pool.live_pages(), keep.stats().pages, "nodes and overflow pages, resident or evicted, are freed");
    keep.check().unwrap();
}

#[test]
fn cursors_walk_a_tree_whose_pages_are_evicted_all_the_time() {
    let (_dir, t) = evicting_tree(SHAPES[3], 16384);
    for i in 0..1000u32 {
        t.upsert(&i.to_be_bytes(), &[i as u8; 1000]).unwrap();
    }
    let mut range = t.range(..);
    let got: Vec<_> = range.by_ref().collect();
    assert!(range.error().is_none(), "{:?}", range.error());
    assert_eq!(got.len(), 1000);
    for (i, (k, v)) in got.iter().enumerate() {
        assert_eq!(k[..], (i as u32).to_be_bytes());
        assert!(v.len() == 1000 && v.iter().all(|&b| b == i as u8));
    }
    let back: Vec<_> = t.range(..).rev().map(|(k, _)| k).collect();
    assert_eq!(back.len(), 1000);
}

/// Scans while a writer splits and merges the leaves around them (and, in a pool of the fewest
/// frames, while pages are evicted): every key no writer touches is met exactly once, in order,
/// going either way, and a cursor that turns around lands on its neighbour.
#[test]
fn cursors_skip_and_repeat_nothing_while_leaves_split_merge_and_are_evicted() {
    const STABLE: u32 = 3000;
    // Long keys: few children per inner node, so scans also cross from parent to parent.
    let key = |i: u32| format!("{i:07}{}", "-".repeat(120)).into_bytes();
    for evicting in [false, true] {
        let (_dir, t) = if evicting {
            evicting_tree(SHAPES[3], 4096)
        } else {
            (tempfile::tempdir().unwrap(), tree(SHAPES[3], 4096))
        };
        // Even numbers stay; the writer inserts and deletes odd ones with values of every size.
        for i in 0..STABLE {
            t.upsert(&key(2 * i), &[b's'; 600]).unwrap();
        }
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            s.spawn(|| {
                let mut x = 0x9E37_79B9_7F4A_7C15u64;
                while !stop.load(Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = key(2 * (x % u64::from(STABLE)) as u32 + 1);
                    if x % 3 == 0 {
                        t.delete(&k).unwrap();
                    } else {
                        t.upsert(&k, &vec![b'w'; (x >> 40) as usize % 900]).unwrap();
                    }
                }
            });
            let stable = |k: &[u8]| std::str::from_utf8(&k[..7]).unwrap().parse::<u32>().unwrap() % 2 == 0;
            let want: Vec<Vec<u8>> = (0..STABLE).map(|i| key(2 * i)).collect();
            for round in 0..4 {
                let forward: Vec<Vec<u8>> = t.range(..).map(|(k, _)| k).filter(|k| stable(k)).collect();
                assert!(forward == want, "evicting {evicting}, round {round}: forward scan");
                let mut backward: Vec<Vec<u8>> = t.range(..).rev().map(|(k, _)| k).filter(|k| stable(k)).collect();
                backward.reverse();
                assert!(backward == want, "evicting {evicting}, round {round}: backward scan");
                // Zigzag: 40 steps on, 39 back, from several places; each step's key is the
                // neighbour of the last (odd keys may come and go in between).
                let mut c = t.cursor();
                for start in [0, 777, 2999] {
                    assert!(c.seek(&want[start]));
                    let mut at = want[start].clone();
                    for (steps, forward) in [(40, true), (39, false)] {
                        for _ in 0..steps {
                            if !(if forward { c.next_entry() } else { c.prev_entry() }) {
                                break;
                            }
                            let k = c.key().unwrap().to_vec();
                            assert!(if forward { k > at } else { k < at }, "evicting {evicting}: moved the wrong way");
                            at = k;
                        }
                    }
                }
                assert!(c.error().is_none());
            }
            stop.store(true, Relaxed);
        });
    }
}

/// A leaf hint is used while its page is unchanged and holds the key, and gives the key's slot
/// whatever slot it names (the named slot's key is checked, the leaf searched otherwise); once
/// the leaf changes it is not used at all.
#[test]
fn a_hint_finds_its_keys_slot_only_while_its_leaf_is_unchanged() {
    let t = tree((Layout::BranchFree, false), 4096);
    let key = |i: u32| format!("key{i:05}").into_bytes();
    for i in 0..2000 {
        t.upsert(&key(i), b"value").unwrap();
    }
    let k = key(1000);
    let (_, _, hint) = t.update_chain_hinted(&k, 0, |_| (stored::Change::Keep, ())).unwrap();
    let slot = |h: stored::LeafHint| t.hinted_leaf(h, &k).map(|(_, slot)| slot);
    let want = slot(hint).expect("a fresh hint is used");
    assert_eq!(usize::from(hint.slot), want, "the hint names the key's slot");
    for named in [hint.slot ^ 1, hint.slot.wrapping_add(2), u16::MAX, 4000] {
        assert_eq!(slot(stored::LeafHint { slot: named, ..hint }), Some(want), "slot {named}");
    }
    // Another key's hint for the same leaf: that key sits at its slot, ours is searched for.
    let (_, _, neighbour) = t.update_chain_hinted(&key(1001), 0, |_| (stored::Change::Keep, ())).unwrap();
    assert_eq!(neighbour.pid, hint.pid, "neighbours share the leaf");
    assert_eq!(slot(neighbour), Some(want));
    // The leaf changed since either hint: neither is used.
    t.upsert(&key(1002), b"other").unwrap();
    assert_eq!((slot(hint), slot(neighbour)), (None, None));
}

/// Keys that all share their first 12 bytes fill a tree of three levels, so the root and the
/// first and last nodes of every level keep their heads past those bytes; then keys outside
/// them (before, after, shorter, a prefix of them) go in one by one and most keys are deleted,
/// and lookups and ranges around each outlier match a map after every step.
#[test]
fn shared_bytes_at_every_level_shrink_as_outliers_arrive() {
    for shape in SHAPES {
        let t = tree(shape, 4096);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let key =
            |i: u32| [&[0u8; 8][..], b"tnt/", &(i.wrapping_mul(2_654_435_761) % 1_000_000).to_be_bytes()[..]].concat();
        for i in 0..20_000u32 {
            let (k, v) = (key(i), vec![(i % 251) as u8; (i % 7) as usize]);
            t.upsert(&k, &v).unwrap();
            model.insert(k, v);
        }
        let loaded = t.check().unwrap();
        assert!(loaded.height >= 3, "{shape:?}: {loaded:?}");
        assert!(
            loaded.shared_nodes >= 2 * (loaded.height - 1),
            "{shape:?}: the edges of every level share: {loaded:?}"
        );
        let probes: Vec<Vec<u8>> = vec![
            vec![0],
            vec![0; 8],
            [&[0u8; 8][..], b"tnt/"].concat(),
            [&[0u8; 8][..], b"tnt"].concat(),
            [&[0u8; 8][..], b"tnt/\0"].concat(),
            [&[0u8; 8][..], b"tnt0"].concat(),
            [&[0u8; 8][..], b"tnu"].concat(),
            [&[0u8; 8][..], b"tns\xff\xff"].concat(),
            [&[0u8; 8][..], b"tnt/\xff\xff\xff\xff\xff"].concat(),
            vec![0xff; 20],
            vec![1],
        ];
        let verify = |t: &BTree, model: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str| {
            for p in &probes {
                assert_eq!(t.get(p).unwrap(), model.get(p).cloned(), "{what}: get {p:?}");
                let want: Vec<_> = model.range(p.clone()..).take(3).map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_eq!(t.range(&p[..]..).take(3).collect::<Vec<_>>(), want, "{what}: range from {p:?}");
                let want: Vec<_> =
                    model.range(..p.clone()).rev().take(3).map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_eq!(t.range(..&p[..]).rev().take(3).collect::<Vec<_>>(), want, "{what}: range before {p:?}");
            }
            t.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        };
        verify(&t, &model, "loaded");
        for (j, p) in probes.iter().enumerate() {
            t.upsert(p, b"outlier").unwrap();
            model.insert(p.clone(), b"outlier".to_vec());
            verify(&t, &model, &format!("{shape:?} after outlier {j}"));
        }
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        for (i, k) in keys.iter().enumerate() {
            if i % 10 != 3 {
                assert!(t.delete(k).unwrap());
                model.remove(k);
            }
        }
        verify(&t, &model, &format!("{shape:?} after deletes"));
        assert_eq!(t.range(..).collect::<Vec<_>>(), model.into_iter().collect::<Vec<_>>());
    }
}
