"""Point reads through the Python package: the same database, keys and loop as
crates/tern-capi/examples/point_reads.rs (scripts/bindings-bench.sh runs them alternately).

Usage: python3 bench_point_reads.py DIR RECORDS READS. The database must exist (the Rust
example loads it). The random keys are made before the clock starts, so the figure is the cost
of txn.get (argument conversion, GIL release, engine read, bytes result)."""

import sys
import time

import tern


def main():
    path, records, reads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    x, mask, keys = 0x9E3779B97F4A7C15, (1 << 64) - 1, []
    for _ in range(reads):
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        keys.append((x % records).to_bytes(8, "big"))
    db = tern.open(path)
    with db.begin_read() as txn:
        get = txn.get
        start = time.perf_counter()
        found = sum(1 for k in keys if get(k) is not None)
        secs = time.perf_counter() - start
    db.close()
    assert found == reads, f"found {found} of {reads}: load the database first"
    print(f"python {reads} {secs:.4f} {secs * 1e9 / reads:.1f}")


main()
