#!/usr/bin/env bash
# Point reads through the C interface and the Python package vs the Rust API, same database
# and loop, alternated:
#   scripts/bindings-bench.sh [RECORDS] [READS] [ROUNDS]
# Builds crates/tern-capi (release) and its examples point_reads.rs / point_reads.c, and, if
# maturin is installed, the Python package (release, into a virtual environment under target/);
# loads RECORDS keys once, then runs each ROUNDS times, alternating, and prints each run's ns
# per read, the medians, and each binding's throughput over Rust's (1 thread; the CPU first).
set -euo pipefail
cd "$(dirname "$0")/.."
records=${1:-1000000}; reads=${2:-5000000}; rounds=${3:-5}
cargo build --release -p tern-capi --lib --example point_reads 2>/dev/null
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cc -O2 -std=c11 -I crates/tern-capi/include crates/tern-capi/examples/point_reads.c \
  target/release/libtern_capi.a -lpthread -ldl -lm -o "$dir/point_reads_c"
python=""
if command -v maturin >/dev/null; then
  python3 -m venv target/bench-venv >/dev/null
  target/bench-venv/bin/pip install -q maturin >/dev/null 2>&1 || true
  (. target/bench-venv/bin/activate && maturin develop --release -q -m crates/tern-py/Cargo.toml >/dev/null 2>&1)
  python="target/bench-venv/bin/python3 crates/tern-py/bench_point_reads.py"
fi
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $records records, $reads reads per run, 1 thread"
target/release/examples/point_reads "$dir/db" "$records" 1000 >/dev/null   # load
for ((i = 0; i < rounds; i++)); do
  target/release/examples/point_reads "$dir/db" "$records" "$reads"
  "$dir/point_reads_c" "$dir/db" "$records" "$reads"
  [ -z "$python" ] || $python "$dir/db" "$records" "$reads"
done | tee "$dir/runs.txt"
python3 - "$dir/runs.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    api, _, _, ns = line.split()
    runs.setdefault(api, []).append(float(ns))
rust = statistics.median(runs["rust"])
for api, name in (("c", "C interface"), ("python", "Python package")):
    if api in runs:
        m = statistics.median(runs[api])
        print(f"median ns per read: Rust API {rust:.1f}, {name} {m:.1f}; {name} / Rust throughput {rust / m:.2f}x "
              f"(per-call overhead {m - rust:+.1f} ns)")
PY
