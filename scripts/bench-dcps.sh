#!/usr/bin/env bash
# DCPS benchmark (issue 7): DataWriter -> DataReader throughput and latency at 1 KiB and
# 10 KiB for each delivery level over tcp and shm (examples/src/perf/mod.rs, two
# processes), next to the raw engine's bandwidth_test / latency_test in the same run
# (2 nodes, 1 sender, the same window), so the DCPS layer's cost reads as a ratio.
# Prints one JSON line per run, then a Markdown table for docs/benchmarks.md.
#   bash scripts/bench-dcps.sh [--backends "tcp shm"] [--sizes "1024 10240"]
set -euo pipefail
cd "$(dirname "$0")/.."
backends="tcp shm"
sizes="1024 10240"
while [ $# -gt 0 ]; do
  case "$1" in
    --backends) backends="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    *) echo "bench-dcps: unknown argument $1" >&2; exit 2 ;;
  esac
done
cargo build --release -q -p spindle-examples --bin dds_perf
cargo build --release -q -p spindle-bench --example bandwidth_test --example latency_test
bin="${CARGO_TARGET_DIR:-target}/release"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
samples_for() { case "$1" in 1024) echo 100000 ;; *) echo 20000 ;; esac; }
tag() { python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); r.update($1); print(json.dumps(r))"; }
for backend in $backends; do
  for size in $sizes; do
    n=$(samples_for "$size")
    for mode in atomic unordered; do
      timeout 600 "$bin/examples/bandwidth_test" --backend "$backend" --nodes 2 --senders one --mode "$mode" \
        --size "$size" --messages "$n" --window 256 --timeout-s 300 2>/dev/null | tail -n 1 \
        | tag "{'kind':'raw','what':'throughput'}" | tee -a "$out"
    done
    timeout 600 "$bin/examples/latency_test" --backend "$backend" --nodes 2 --senders one --mode atomic \
      --size "$size" --messages 10000 --window 256 --timeout-s 300 2>/dev/null | tail -n 1 \
      | tag "{'kind':'raw','what':'latency'}" | tee -a "$out"
    for level in unordered atomic volatilestore; do
      timeout 600 "$bin/dds_perf" --transport "$backend" --level "$level" --size "$size" --samples "$n" \
        | tag "{'kind':'dcps','what':'throughput'}" | tee -a "$out"
      timeout 600 "$bin/dds_perf" --transport "$backend" --level "$level" --size "$size" --samples 10000 --latency \
        | tag "{'kind':'dcps','what':'latency'}" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def raw(backend, size, mode, what):
    for r in rows:
        if r.get('kind') == 'raw' and r['backend'] == backend and r['size'] == size and r['what'] == what and (what == 'latency' or r['mode'] == mode):
            return r
print()
print('| transport | size | level | DCPS msgs/s | raw engine msgs/s | ratio | DCPS p50 / p99 µs | raw p50 / p99 µs |')
print('|---|---|---|---|---|---|---|---|')
for r in rows:
    if r.get('kind') != 'dcps' or r['what'] != 'throughput':
        continue
    mode = 'unordered' if r['level'] == 'unordered' else 'atomic'
    rt = raw(r['transport'], r['size'], mode, 'throughput') or {}
    rl = raw(r['transport'], r['size'], mode, 'latency') or {}
    dl = next((x for x in rows if x.get('kind') == 'dcps' and x['what'] == 'latency' and x['transport'] == r['transport'] and x['size'] == r['size'] and x['level'] == r['level']), {})
    ratio = r['msgs_per_s'] / rt['msgs_per_s'] if rt.get('msgs_per_s') else float('nan')
    print(f"| {r['transport']} | {r['size']} | {r['level']} | {r['msgs_per_s']:,.0f} | {rt.get('msgs_per_s', 0):,.0f} ({mode}) | {ratio:.2f} | {dl.get('lat_p50_us', '-')} / {dl.get('lat_p99_us', '-')} | {rl.get('lat_p50_us', '-')} / {rl.get('lat_p99_us', '-')} |")
PY
