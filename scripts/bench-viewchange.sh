#!/usr/bin/env bash
# View-change benchmark (issue 5): time from SIGKILL of a member to the new view installed
# at every survivor (5 processes, 50 kills, each victim restarted as a joiner), and the
# throughput of a 4-member group around a fifth member's join, over tcp and shm on
# loopback. Prints one JSON line per measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
cargo build --release --locked -p spindle-bench --bin spindle-group-vs
VS=target/release/spindle-group-vs
for backend in tcp shm; do
  "$VS" kills --backend "$backend" --nodes 5 --kills 50 2>/dev/null | tail -n 1
  "$VS" join-dip --backend "$backend" --nodes 4 2>/dev/null | tail -n 1
done
