//! `tern::btree::search`: every layout × prefetch depth answers the same sorted rank as
//! `partition_point`, for plain and atomic keys, with and without duplicates.

use proptest::prelude::*;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU32, AtomicU64};
use tern::btree::search::{
    btree_block_len, layout_from_sorted, layout_len, lower_bound, sorted_rank_table, Layout, Probe,
};

const DEPTHS: [u8; 3] = [0, 1, 2];

/// Checks every layout and prefetch depth on `sorted` (sorted, duplicates allowed) against
/// `partition_point` for each query, searching the layout as `to_probe` presents it.
fn check<K, S>(sorted: &[K], queries: &[K], to_probe: impl Fn(Vec<K>) -> Box<S>)
where
    K: Copy + Ord + Debug,
    S: Probe<Key = K> + ?Sized,
{
    for layout in Layout::ALL {
        let plain = layout_from_sorted(layout, sorted);
        assert_eq!(plain.len(), layout_len::<K>(layout, sorted.len()), "{layout} length");
        let table = sorted_rank_table::<K>(layout, sorted.len());
        assert_eq!(table.len(), plain.len() + 1);
        // The table is consistent with the layout: each index holds the key of its rank.
        for (i, k) in plain.iter().enumerate() {
            assert_eq!(*k, sorted[table[i] as usize], "{layout}: index {i} of n = {}", sorted.len());
        }
        let keys = to_probe(plain);
        for &x in queries {
            let want = sorted.partition_point(|&k| k < x);
            for depth in DEPTHS {
                let got = lower_bound(layout, &*keys, x, depth);
                assert!(got <= keys.len(), "{layout} p{depth}: index {got} out of range");
                assert_eq!(
                    table[got] as usize,
                    want,
                    "{layout} p{depth}, n = {}, x = {x:?}: index {got} (keys {sorted:?})",
                    sorted.len()
                );
            }
        }
    }
}

fn boxed<K>(v: Vec<K>) -> Box<[K]> {
    v.into_boxed_slice()
}

fn atomic64(v: Vec<u64>) -> Box<[AtomicU64]> {
    v.into_iter().map(AtomicU64::new).collect()
}

fn atomic32(v: Vec<u32>) -> Box<[AtomicU32]> {
    v.into_iter().map(AtomicU32::new).collect()
}

/// Sorted keys 1, 3, 5, ... (distinct) or with each value repeated up to 3 times.
fn keys(n: usize, duplicates: bool) -> Vec<u64> {
    (0..n as u64).map(|i| if duplicates { i / 3 * 2 + 1 } else { 2 * i + 1 }).collect()
}

/// Every value from 0 to one past the largest key: misses below, between and above, and hits.
fn all_queries(sorted: &[u64]) -> Vec<u64> {
    (0..=sorted.last().map_or(1, |&m| m + 1)).collect()
}

#[test]
fn every_size_up_to_300_u64_and_atomic_u64() {
    for n in 0..=300 {
        for duplicates in [false, true] {
            let sorted = keys(n, duplicates);
            let queries = all_queries(&sorted);
            check(&sorted, &queries, boxed);
            check(&sorted, &queries, atomic64);
        }
    }
}

#[test]
fn every_size_up_to_300_u32_and_atomic_u32() {
    for n in 0..=300 {
        for duplicates in [false, true] {
            let sorted: Vec<u32> = keys(n, duplicates).into_iter().map(|k| k as u32).collect();
            let queries: Vec<u32> = all_queries(&keys(n, duplicates)).into_iter().map(|k| k as u32).collect();
            check(&sorted, &queries, boxed);
            check(&sorted, &queries, atomic32);
        }
    }
}

/// xorshift64*: a deterministic stream of test values.
fn random(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed | 1;
    move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        s.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[test]
fn large_random_arrays() {
    for (n, seed) in [(4097, 1), (65_537, 2), (1 << 20, 3), (1_000_003, 4)] {
        let mut rng = random(seed);
        let mut sorted: Vec<u64> = (0..n).map(|_| rng() % (4 * n as u64)).collect();
        sorted.sort_unstable();
        let mut queries: Vec<u64> = (0..2000).map(|_| rng() % (4 * n as u64 + 2)).collect();
        queries.extend(sorted.iter().step_by(n / 500));
        queries.extend([0, u64::MAX, sorted[0], sorted[n - 1], sorted[n - 1] + 1]);
        check(&sorted, &queries, boxed);
        check(&sorted, &queries, atomic64);
        let sorted32: Vec<u32> = sorted.iter().map(|&k| k as u32).collect();
        let queries32: Vec<u32> = queries.iter().map(|&k| k as u32).collect();
        check(&sorted32, &queries32, boxed);
    }
}

#[test]
fn extreme_key_values() {
    // Keys equal to the type's maximum, in and next to the padded last B-tree block.
    for n in [1, 7, 8, 9, 16, 17, 100] {
        let mut sorted: Vec<u64> = (0..n as u64).collect();
        sorted.iter_mut().rev().take(3).for_each(|k| *k = u64::MAX);
        sorted.sort_unstable();
        check(&sorted, &[0, 1, 5, u64::MAX - 1, u64::MAX], boxed);
        let sorted32: Vec<u32> = sorted.iter().map(|&k| if k == u64::MAX { u32::MAX } else { k as u32 }).collect();
        check(&sorted32, &[0, 1, 5, u32::MAX - 1, u32::MAX], boxed);
    }
}

#[test]
fn btree_blocks_fill_a_cache_line() {
    assert_eq!(btree_block_len::<u64>(), 8);
    assert_eq!(btree_block_len::<u32>(), 16);
    assert_eq!(layout_len::<u32>(Layout::BTree, 17), 32);
}

/// A sorted vector with duplicates (narrow value range) or without (wide range), plus queries
/// drawn from: element values, their neighbours, values below the minimum and above the
/// maximum, and anything at all.
fn arrays_and_queries() -> impl Strategy<Value = (Vec<u64>, Vec<u64>)> {
    let narrow = prop::collection::vec(0u64..64, 0..700);
    let wide = prop::collection::vec(any::<u64>(), 0..700);
    (prop_oneof![narrow, wide], prop::collection::vec((0u8..5, any::<u64>()), 1..40)).prop_map(|(mut v, picks)| {
        v.sort_unstable();
        let queries = picks
            .into_iter()
            .map(|(kind, r)| {
                let element = if v.is_empty() { r } else { v[(r % v.len() as u64) as usize] };
                match kind {
                    0 => element,
                    1 => element.wrapping_sub(1),
                    2 => element.wrapping_add(1),
                    3 => v.first().map_or(0, |&m| m.saturating_sub(1 + r % 3)),
                    _ => v.last().map_or(r, |&m| m.saturating_add(1 + r % 3)),
                }
            })
            .collect();
        (v, queries)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_layout_agrees_with_partition_point((sorted, queries) in arrays_and_queries()) {
        check(&sorted, &queries, boxed);
        check(&sorted, &queries, atomic64);
        // The same keys' low halves as u32 (re-sorted), B = 16 per block.
        let mut sorted32: Vec<u32> = sorted.iter().map(|&k| k as u32).collect();
        sorted32.sort_unstable();
        let queries32: Vec<u32> = queries.iter().map(|&k| k as u32).collect();
        check(&sorted32, &queries32, boxed);
        check(&sorted32, &queries32, atomic32);
    }
}
