#!/usr/bin/env bash
# RDMC benchmark (issue 14): one root multicasting to receivers over tcp and shm, per
# schedule and message size, with the same-run references iperf3 (single stream,
# loopback) and memcpy of the same size. Prints one JSON line per measurement and a
# Markdown table for docs/benchmarks.md.
#   bash scripts/bench-rdmc.sh [--seconds S] [--nodes N] [--backends "tcp shm"]
#                              [--schedules "binomial_pipeline chain binomial_tree sequential"]
#                              [--sizes "1048576 ..."] [--blocks "1048576 ..."] [--windows "1 2"]
# Every (backend, schedule, size, block) combination is one run of spindle-rdmc-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=2
nodes=3
backends="tcp shm"
schedules="binomial_pipeline chain binomial_tree sequential"
sizes="1048576 4194304 16777216 67108864"
blocks="1048576"
windows="1"
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --nodes) nodes="$2"; shift 2 ;;
    --backends) backends="$2"; shift 2 ;;
    --schedules) schedules="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --blocks) blocks="$2"; shift 2 ;;
    --windows) windows="$2"; shift 2 ;;
    *) echo "bench-rdmc: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v iperf3 >/dev/null || bash scripts/setup.sh
cargo build --release -q -p spindle-bench --bin spindle-rdmc-bench
bench="${CARGO_TARGET_DIR:-target}/release/spindle-rdmc-bench"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

port=$((20000 + RANDOM % 20000))
iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
server=$!
sleep 0.5
iperf_bps=$(iperf3 -c 127.0.0.1 -p "$port" -t "$seconds" -J |
  python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8))')
wait "$server" 2>/dev/null || true
echo "{\"reference\":\"iperf3\",\"bytes_per_s\":$iperf_bps}" | tee -a "$out"

for size in $sizes; do
  "$bench" --reference memcpy --size "$size" --seconds 1 | tail -n 1 | tee -a "$out"
  for backend in $backends; do
    for schedule in $schedules; do
      for block in $blocks; do
        [ "$block" -gt "$size" ] && continue
        for window in $windows; do
          "$bench" --backend "$backend" --schedule "$schedule" --nodes "$nodes" --window "$window" \
            --size "$size" --block-bytes "$block" --seconds "$seconds" | tail -n 1 | tee -a "$out"
        done
      done
    done
  done
done

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
iperf = next(r["bytes_per_s"] for r in rows if r.get("reference") == "iperf3")
memcpy = {r["size"]: r["bytes_per_s"] for r in rows if r.get("reference") == "memcpy"}
print(f"\niperf3 single stream: {iperf/1e6:.0f} MB/s; memcpy: " +
      ", ".join(f"{s} B {b/1e6:.0f} MB/s" for s, b in sorted(memcpy.items())))
print("\n| backend | schedule | nodes | size (B) | block (B) | window | msgs/s | MB/s | ÷ memcpy | ÷ iperf3 | lat p50 (µs) | lat p99 (µs) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    if "reference" in r:
        continue
    b = r["bytes_per_s"]
    print(f"| {r['backend']} | {r['schedule']} | {r['nodes']} | {r['size']} | {r['block_bytes']} | {r.get('window', 1)} | "
          f"{r['msgs_per_s']} | {b/1e6:.1f} | {b/memcpy[r['size']]:.3f} | {b/iperf:.3f} | "
          f"{r['lat_p50_us']} | {r['lat_p99_us']} |")
PY
