#!/bin/bash
# Interleaved A/B of two tern binaries on `bench tree` lookups and inserts: OLD and NEW are
# paths to `tern` binaries (e.g. built from two commits in two worktrees). Each round runs
# both, alternating which goes first; prints JSON Lines tagged with "binary" and "round".
# Usage: OLD=... NEW=... [KEYS=1000000] [ROUNDS=7] scripts/ab-binaries.sh > out.jsonl
set -euo pipefail
: "${OLD:?path to the baseline tern binary}" "${NEW:?path to the tern binary under test}"
ARGS="bench tree --keys ${KEYS:-1000000} --layout branchfree --hints on --prefetch 1 --threads 1,2 --duration 1 --rounds 1 --no-reference --json"
for r in $(seq 1 "${ROUNDS:-7}"); do
  if (( r % 2 )); then order="old new"; else order="new old"; fi
  for v in $order; do
    bin=$OLD; [ "$v" = new ] && bin=$NEW
    # shellcheck disable=SC2086
    "$bin" $ARGS 2>/dev/null | sed "s/^{/{\"binary\":\"$v\",\"round\":$r,/"
  done
done
