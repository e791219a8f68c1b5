#!/usr/bin/env bash
# Multicast benchmark (issue 4): Derecho's bandwidth_test / latency_test workloads over tcp
# and shm, 2 and 3 nodes (separate processes), all / half / one senders, atomic and
# unordered, at 1 B, 128 B, 1 KiB and 10 KiB; each Spindle technique switched off in turn
# on the 2-node 1 KiB cases; and, in the same run, Cyclone DDS's ddsperf 1 pub -> 1 sub at
# 1 KiB on loopback as the reference. Prints one JSON line per run, then Markdown tables
# for docs/benchmarks.md.
#   bash scripts/bench-group.sh [--quick] [--backends "tcp shm"] [--sizes "1 128 1024 10240"]
# --quick: 2 nodes only, fewer messages (a smoke run, not for the docs).
set -euo pipefail
cd "$(dirname "$0")/.."
backends="tcp shm"
sizes="1 128 1024 10240"
nodes_list="2 3"
scale=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) nodes_list="2"; scale=10; shift ;;
    --backends) backends="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    *) echo "bench-group: unknown argument $1" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh >/dev/null
cargo build --release -q -p spindle-bench --example bandwidth_test --example latency_test
dir="${CARGO_TARGET_DIR:-target}/release/examples"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# Messages per sender: enough for about a second at the rates seen on a 2-core machine.
messages_for() {
  case "$1" in
    1|128) echo $((300000 / scale)) ;;
    1024) echo $((200000 / scale)) ;;
    *) echo $((40000 / scale)) ;;
  esac
}

run() { # label, binary, args...
  local label="$1" bin="$2"; shift 2
  if line=$(timeout 600 "$dir/$bin" "$@" --timeout-s 300 2>/dev/null | tail -n 1); then
    echo "$line" | python3 -c "import json,sys; r=json.load(sys.stdin); r['label']='$label'; print(json.dumps(r))" | tee -a "$out"
  else
    echo "{\"label\":\"$label\",\"failed\":\"$bin $*\"}" | tee -a "$out"
  fi
}

# The reference first, on a quiet machine.
bash scripts/ddsperf-reference.sh --size 1024 --seconds 10 | tail -n 1 | tee -a "$out"

for backend in $backends; do
  for nodes in $nodes_list; do
    for senders in all half one; do
      for mode in atomic unordered; do
        for size in $sizes; do
          run matrix bandwidth_test --backend "$backend" --nodes "$nodes" --senders "$senders" \
            --mode "$mode" --size "$size" --messages "$(messages_for "$size")"
        done
      done
    done
  done
  # Each technique off in turn: 2 nodes, 1 KiB, atomic, all senders (and one sender).
  for senders in all one; do
    m=$(messages_for 1024)
    run technique bandwidth_test --backend "$backend" --nodes 2 --senders "$senders" --size 1024 --messages "$m"
    run technique bandwidth_test --backend "$backend" --nodes 2 --senders "$senders" --size 1024 --messages $((m / 4)) --no-batching
    run technique bandwidth_test --backend "$backend" --nodes 2 --senders "$senders" --size 1024 --messages "$m" --no-nulls
    run technique bandwidth_test --backend "$backend" --nodes 2 --senders "$senders" --size 1024 --messages "$m" --no-early-lock-release
    run technique bandwidth_test --backend "$backend" --nodes 2 --senders "$senders" --size 1024 --messages "$m" --no-batched-upcall
  done
  # Latency: one message in flight per sender.
  for size in 1 1024; do
    run latency latency_test --backend "$backend" --nodes 2 --senders one --size "$size" --messages $((20000 / scale))
    run latency latency_test --backend "$backend" --nodes 3 --senders all --size "$size" --messages $((20000 / scale))
  done
done

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ref = next((r for r in rows if r.get("reference") == "ddsperf"), None)
ref_rate = ref["samples_per_s"] if ref else None
print()
if ref:
    print(f"Cyclone DDS ddsperf 1 pub -> 1 sub, {ref['size']} B, loopback: {ref_rate:,.0f} samples/s")
print()
def vs(r):
    # ddsperf was measured at one size: compare like with like only.
    if not ref_rate or r["size"] != ref["size"]:
        return "-"
    return f"{r['msgs_per_s']/ref_rate:.2f}x"
print("| backend | nodes | senders | mode | size (B) | msgs/s | MB/s | vs ddsperf | lat p50 (us) | lat p99 (us) |")
print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    if r.get("label") != "matrix":
        continue
    if "failed" in r:
        print(f"| failed: `{r['failed']}` |||||||||")
        continue
    print(f"| {r['backend']} | {r['nodes']} | {r['senders']} | {r['mode']} | {r['size']} | {r['msgs_per_s']:,.0f} | {r['bytes_per_s']/1e6:,.1f} | {vs(r)} | {r['lat_p50_us']} | {r['lat_p99_us']} |")
print()
print("Spindle techniques, each switched off (2 nodes, 1 KiB, atomic):")
print()
print("| backend | senders | configuration | msgs/s | writes | nulls | ratio all-on / this |")
print("|---|---|---|---:|---:|---:|---:|")
base = {}
for r in rows:
    if r.get("label") != "technique" or "failed" in r:
        continue
    off = [k for k in ("batching", "null_sends", "early_lock_release", "batched_upcall") if not r[k]]
    name = "all on" if not off else f"{off[0]} off"
    key = (r["backend"], r["senders"])
    if not off:
        base[key] = r["msgs_per_s"]
    ratio = f"{base[key]/r['msgs_per_s']:.2f}" if key in base and r["msgs_per_s"] else "-"
    print(f"| {r['backend']} | {r['senders']} | {name} | {r['msgs_per_s']:,.0f} | {r['writes']} | {r['nulls_sent']} | {ratio} |")
print()
print("Latency (latency_test: one message in flight per sender, commit to own delivery):")
print()
print("| backend | nodes | senders | size (B) | lat p50 (us) | lat p99 (us) | msgs/s |")
print("|---|---:|---|---:|---:|---:|---:|")
for r in rows:
    if r.get("label") != "latency" or "failed" in r:
        continue
    print(f"| {r['backend']} | {r['nodes']} | {r['senders']} | {r['size']} | {r['lat_p50_us']} | {r['lat_p99_us']} | {r['msgs_per_s']:,.0f} |")
PY
