#!/usr/bin/env bash
# Fabric benchmark: tcp and shm one-sided writes at 64 B, 1 KiB, 64 KiB and 1 MiB, with the
# same-run references iperf3 (single stream, loopback) and memcpy. Prints one JSON line per
# measurement and a Markdown table for docs/benchmarks.md.
#   bash scripts/bench-fabric.sh [--seconds S] [--backends "tcp shm libfabric-tcp libfabric-shm"] [--sizes "64 1024 ..."]
# libfabric-* backends build the bench with the libfabric feature (scripts/setup-rdma.sh
# installs what that needs). tcp-noise is tcp with a domain secret (Noise handshake, then
# ChaCha20-Poly1305 records); tcp-auth is the same handshake with frames in clear after it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=4
backends="tcp shm"
sizes="64 1024 65536 1048576"
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --backends) backends="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    *) echo "bench-fabric: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v iperf3 >/dev/null || bash scripts/setup.sh
features=()
case " $backends " in
  *" libfabric-"*) bash scripts/setup-rdma.sh >/dev/null; features=(--features libfabric) ;;
esac
cargo build --release -q -p spindle-transport-rdma --example fabric_bench "${features[@]}"
bench="${CARGO_TARGET_DIR:-target}/release/examples/fabric_bench"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# iperf3: one stream over loopback, server bound to 127.0.0.1 only, one test then exit.
port=$((20000 + RANDOM % 20000))
iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
server=$!
sleep 0.5
iperf_bps=$(iperf3 -c 127.0.0.1 -p "$port" -t "$seconds" -J |
  python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8))')
wait "$server" 2>/dev/null || true
echo "{\"reference\":\"iperf3\",\"bytes_per_s\":$iperf_bps}" | tee -a "$out"

for size in $sizes; do
  "$bench" --reference memcpy --size "$size" --seconds "$seconds" 2>/dev/null | tail -n 1 | tee -a "$out"
  for backend in $backends; do
    "$bench" --backend "$backend" --size "$size" --seconds "$seconds" 2>/dev/null | tail -n 1 | tee -a "$out"
  done
done

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
iperf = next(r["bytes_per_s"] for r in rows if r.get("reference") == "iperf3")
memcpy = {r["size"]: r["bytes_per_s"] for r in rows if r.get("reference") == "memcpy"}
print()
print(f"iperf3 single stream loopback: {iperf/1e6:.0f} MB/s")
print()
print("| backend | size (B) | writes/s | MB/s | vs memcpy | vs iperf3 | rtt p50 (us) | rtt p99 (us) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    if "backend" not in r:
        continue
    m = memcpy.get(r["size"])
    vs_m = f'{r["bytes_per_s"]/m:.3f}' if m else "-"
    print(f'| {r["backend"]} | {r["size"]} | {r["writes_per_s"]:.0f} | {r["bytes_per_s"]/1e6:.1f} | {vs_m} | {r["bytes_per_s"]/iperf:.3f} | {r["rtt_p50_us"]} | {r["rtt_p99_us"]} |')
print()
print("| memcpy size (B) | MB/s |")
print("|---:|---:|")
for s, b in sorted(memcpy.items()):
    print(f"| {s} | {b/1e6:.0f} |")
PY
