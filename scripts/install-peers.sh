#!/usr/bin/env bash
# Installs the C libraries of the engines `tern bench compare` measures against (Debian/Ubuntu
# packages): LMDB, WiredTiger, Berkeley DB 5.3, RocksDB, needed only to build tern with
# `--features peers`; and LMDB's and Berkeley DB's command-line tools (mdb_dump/mdb_load,
# db_dump/db_load), which the tests of `tern dump` and `tern load` migrate through. Run as root
# (or with sudo available).
set -euo pipefail
packages=(liblmdb-dev libwiredtiger-dev libdb-dev librocksdb-dev pkg-config lmdb-utils db-util)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "peer libraries and tools already installed: ${packages[*]}"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
echo "installed: ${missing[*]}"
