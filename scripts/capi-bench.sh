#!/usr/bin/env bash
# Point reads through the C interface vs the Rust API, same database and loop, alternated:
#   scripts/capi-bench.sh [RECORDS] [READS] [ROUNDS]
# Builds crates/tern-capi (release) and its examples point_reads.rs / point_reads.c, loads
# RECORDS keys once, then runs the two ROUNDS times each, alternating, and prints each run's
# ns per read, the medians, and C / Rust throughput (1 thread; the CPU model first).
set -euo pipefail
cd "$(dirname "$0")/.."
records=${1:-1000000}; reads=${2:-5000000}; rounds=${3:-5}
cargo build --release -p tern-capi --lib --example point_reads 2>/dev/null
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cc -O2 -std=c11 -I crates/tern-capi/include crates/tern-capi/examples/point_reads.c \
  target/release/libtern_capi.a -lpthread -ldl -lm -o "$dir/point_reads_c"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $records records, $reads reads per run, 1 thread"
target/release/examples/point_reads "$dir/db" "$records" 1000 >/dev/null   # load
for ((i = 0; i < rounds; i++)); do
  target/release/examples/point_reads "$dir/db" "$records" "$reads"
  "$dir/point_reads_c" "$dir/db" "$records" "$reads"
done | tee "$dir/runs.txt"
python3 - "$dir/runs.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    api, _, _, ns = line.split()
    runs.setdefault(api, []).append(float(ns))
rust, c = statistics.median(runs["rust"]), statistics.median(runs["c"])
print(f"median ns per read: Rust API {rust:.1f}, C interface {c:.1f}; C / Rust throughput {rust / c:.2f}x "
      f"(per-call overhead {c - rust:+.1f} ns)")
PY
