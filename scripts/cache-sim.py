#!/usr/bin/env python3
"""Disk reads per lookup of page caches under YCSB's scrambled zipfian keys (docs/buffer.md).

Simulates a stream of lookups over N records (theta 0.99, popular records spread over the key
space), maps each record to its leaf (records per leaf as the engines' sizes on disk give), and
counts the misses of: an LRU-like cache with the kernel's two lists (LMDB's page cache), a clock
pool (tern) with the page cache behind it holding the same pages (inclusive) or only what the
pool evicted (exclusive), an ideal static cache of the hottest leaves, and a cache of single
records in front of a smaller pool. Needs numpy.

    python3 scripts/cache-sim.py [--records 10000000] [--requests 3000000] [--window 90000]
"""
import argparse
import collections

import numpy as np

MIB = 1 << 20


def stream(records, requests, seed):
    ranks = np.arange(1, records + 1, dtype=np.float64)
    p = ranks ** -0.99
    p /= p.sum()
    rng = np.random.default_rng(seed)
    perm = rng.permutation(records)
    picks = np.minimum(np.searchsorted(np.cumsum(p), rng.random(requests)), records - 1)
    popularity = np.empty(records)
    popularity[perm] = p
    return perm[picks], popularity


def two_lists(trace, capacity):
    """The kernel's page cache, roughly: pages enter the inactive list, a second touch makes
    them active; the active list is at most half."""
    inactive, active, misses = collections.OrderedDict(), collections.OrderedDict(), 0
    for x in trace:
        if x in active:
            active.move_to_end(x)
            continue
        if x in inactive:
            del inactive[x]
            active[x] = 1
        else:
            misses += 1
            inactive[x] = 1
        while len(active) > capacity // 2:
            y, _ = active.popitem(last=False)
            inactive[y] = 1
            inactive.move_to_end(y, last=False)
        while len(inactive) + len(active) > capacity:
            inactive.popitem(last=False)
    return misses / len(trace)


def clock(trace, capacity):
    """Yields (page missed, page evicted) per lookup: (None, None) on a hit."""
    slots, ref, where, hand, used = [None] * capacity, [0] * capacity, {}, 0, 0
    for x in trace:
        i = where.get(x)
        if i is not None:
            ref[i] = 1
            yield None, None
            continue
        evicted = None
        if used < capacity:
            i, used = used, used + 1
        else:
            while ref[hand]:
                ref[hand] = 0
                hand = (hand + 1) % capacity
            i, evicted = hand, slots[hand]
            del where[evicted]
            hand = (hand + 1) % capacity
        slots[i], ref[i], where[x] = x, 0, i
        yield x, evicted


def pool_and_page_cache(trace, pool, page_cache, exclusive):
    cache, disk = collections.OrderedDict(), 0
    for missed, evicted in clock(trace, pool):
        if missed is None:
            continue
        if missed in cache:
            if exclusive:
                del cache[missed]
            else:
                cache.move_to_end(missed)
        else:
            disk += 1
            if not exclusive:
                cache[missed] = 1
        if exclusive and evicted is not None:
            cache[evicted] = 1
        while len(cache) > page_cache:
            cache.popitem(last=False)
    return disk / len(trace)


def record_cache(trace, capacity):
    """A clock cache of single records: yields the records it misses (they go on to the pages)."""
    for missed, _ in clock(trace, capacity):
        if missed is not None:
            yield missed


def records_then_pages(keys, per_leaf, records, pool, page_cache):
    """Disk reads per lookup of a record cache of `records` in front of the pool and page cache."""
    missed = [k // per_leaf for k in record_cache(keys, records)]
    return pool_and_page_cache(missed, pool, page_cache, False) * len(missed) / len(keys)


def ideal(popularity, per_leaf, capacity):
    leaves = len(popularity) // per_leaf
    mass = np.sort(popularity[: leaves * per_leaf].reshape(leaves, per_leaf).sum(1))[::-1]
    return 1 - mass[:capacity].sum()


def first_touches(leaves, window):
    """The share of the first `window` lookups that touch a leaf for the first time: a floor
    on the misses of any page cache that starts without the leaves the lookups will want."""
    return len(set(leaves[:window])) / window


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--requests", type=int, default=3_000_000)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--window", type=int, default=90_000, help="lookups right after a load (first touches)")
    a = ap.parse_args()
    keys, popularity = stream(a.records, a.requests, a.seed)
    page = 4096
    lmdb, tern = (keys // 21).tolist(), (keys // 30).tolist()
    rows = [
        ("LMDB: two-list page cache of 480 MiB, 21 records a leaf", two_lists(lmdb, 480 * MIB // page)),
        ("tern: 192 MiB clock pool + 300 MiB page cache, inclusive", pool_and_page_cache(tern, 192 * MIB // page, 300 * MIB // page, False)),
        ("tern: same, page cache exclusive (evicted pages only)", pool_and_page_cache(tern, 192 * MIB // page, 300 * MIB // page, True)),
        ("ideal: 480 MiB of the hottest leaves, 30 records a leaf", ideal(popularity, 30, 480 * MIB // page)),
        (
            "tern: 64 MiB of records (175 B each) + 128 MiB pool + page cache",
            records_then_pages(keys.tolist(), 30, 64 * MIB // 175, 128 * MIB // page, 300 * MIB // page),
        ),
    ]
    for name, misses in rows:
        print(f"{name:60s} {misses:.3f} disk reads per lookup")
    # Right after a load no cache holds what the lookups want, only a random part of the file:
    # a lookup whose leaf nobody touched yet misses unless that leaf happens to be cached.
    for name, leaves in (("LMDB, 21 records a leaf", lmdb), ("tern, 30 records a leaf", tern)):
        share = first_touches(leaves, a.window)
        floor = ", ".join(f"{c:.0%} cached: {share * (1 - c):.3f}" for c in (0.16, 0.26, 0.35))
        print(f"first {a.window} lookups, {name}: {share:.3f} first touches per lookup; floor with {floor}")


if __name__ == "__main__":
    main()
