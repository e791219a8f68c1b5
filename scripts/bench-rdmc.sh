#!/usr/bin/env bash
# RDMC benchmark (issue 14): one root multicasting to receivers over tcp and shm, per
# schedule and message size, with the same-run references iperf3 (single stream,
# loopback) and memcpy of the same size. Prints one JSON line per measurement and a
# Markdown table for docs/benchmarks.md.
#   bash scripts/bench-rdmc.sh [--seconds S] [--nodes N] [--backends "tcp shm"]
#                              [--schedules "binomial_pipeline chain binomial_tree sequential"]
#                              [--sizes "1048576 ..."] [--blocks "1048576 ..."] [--windows "1 2"]
#                              [--dcps]
# Every (backend, schedule, size, block) combination is one run of spindle-rdmc-bench.
# --dcps adds, per (backend, size), DCPS between two processes (dds_perf --size, atomic:
# samples above the 64 KiB slot go by RDMC in the topic subgroup's order), in the same
# run, the raw engine's atomic path at the same size (bandwidth_test --mode atomic, two
# processes, one sender: the message goes by RDMC inside the subgroup's total order, with
# the RDMC window of the DCPS topic subgroups), and a table of DCPS ÷ raw engine and
# DCPS ÷ raw RDMC (binomial pipeline, same backend and size; run with --nodes 2 for the
# same number of processes).
# Environment: BENCH_RDMC_DDS_PERF / BENCH_RDMC_BANDWIDTH_TEST use those binaries instead
# of building them (A/B runs of two builds).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=2
nodes=3
backends="tcp shm"
schedules="binomial_pipeline chain binomial_tree sequential"
sizes="1048576 4194304 16777216 67108864"
blocks="1048576"
windows="1"
dcps=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --nodes) nodes="$2"; shift 2 ;;
    --backends) backends="$2"; shift 2 ;;
    --schedules) schedules="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --blocks) blocks="$2"; shift 2 ;;
    --windows) windows="$2"; shift 2 ;;
    --dcps) dcps=1; shift ;;
    *) echo "bench-rdmc: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v iperf3 >/dev/null || bash scripts/setup.sh
cargo build --release -q -p spindle-bench --bin spindle-rdmc-bench
bench="${CARGO_TARGET_DIR:-target}/release/spindle-rdmc-bench"
if [ "$dcps" -eq 1 ] && [ -z "${BENCH_RDMC_DDS_PERF:-}" ]; then
  cargo build --release -q -p spindle-examples --bin dds_perf
  cargo build --release -q -p spindle-bench --example bandwidth_test
fi
dds_perf="${BENCH_RDMC_DDS_PERF:-${CARGO_TARGET_DIR:-target}/release/dds_perf}"
bandwidth_test="${BENCH_RDMC_BANDWIDTH_TEST:-${CARGO_TARGET_DIR:-target}/release/examples/bandwidth_test}"
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
    if [ "$dcps" -eq 1 ]; then
      # Bounded: about 256 MiB per run, at least 20 samples.
      samples=$(( 268435456 / size )); [ "$samples" -lt 20 ] && samples=20
      "$bandwidth_test" --backend "$backend" --nodes 2 --senders one --mode atomic \
        --size "$size" --messages "$samples" |
        tail -n 1 | python3 -c 'import json,sys; r=json.load(sys.stdin); r["reference"]="engine"; print(json.dumps(r))' |
        tee -a "$out"
      "$dds_perf" --transport "$backend" --level atomic --size "$size" --samples "$samples" |
        tail -n 1 | python3 -c 'import json,sys; r=json.load(sys.stdin); r["reference"]="dds_perf"; print(json.dumps(r))' |
        tee -a "$out"
    fi
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
    if "reference" in r or "schedule" not in r:
        continue
    b = r["bytes_per_s"]
    print(f"| {r['backend']} | {r['schedule']} | {r['nodes']} | {r['size']} | {r['block_bytes']} | {r.get('window', 1)} | "
          f"{r['msgs_per_s']} | {b/1e6:.1f} | {b/memcpy[r['size']]:.3f} | {b/iperf:.3f} | "
          f"{r['lat_p50_us']} | {r['lat_p99_us']} |")
dcps = [r for r in rows if r.get("reference") == "dds_perf"]
if dcps:
    print("\n| backend | size (B) | engine atomic MB/s | engine ÷ memcpy | engine ÷ iperf3 | DCPS MB/s | DCPS ÷ engine | "
          "raw RDMC MB/s (binomial pipeline) | DCPS ÷ raw RDMC | DCPS ÷ memcpy | DCPS ÷ iperf3 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in dcps:
        raw = [r["bytes_per_s"] for r in rows if "reference" not in r and r["backend"] == d["transport"]
               and r["size"] == d["size"] and r["schedule"] == "binomial_pipeline"]
        eng = [r["bytes_per_s"] for r in rows if r.get("reference") == "engine"
               and r["backend"] == d["transport"] and r["size"] == d["size"]]
        b = d["bytes_per_s"]
        rr = f"{raw[0]/1e6:.1f} | {b/raw[0]:.2f}" if raw else "- | -"
        e = (f"{eng[0]/1e6:.1f} | {eng[0]/memcpy[d['size']]:.3f} | {eng[0]/iperf:.3f}"
             if eng else "- | - | -")
        de = f"{b/eng[0]:.2f}" if eng else "-"
        print(f"| {d['transport']} | {d['size']} | {e} | {b/1e6:.1f} | {de} | {rr} | "
              f"{b/memcpy[d['size']]:.3f} | {b/iperf:.3f} |")
PY
