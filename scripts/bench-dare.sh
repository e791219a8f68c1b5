#!/usr/bin/env bash
# DARE next to atomic through the engine (issue 20): spindle-group-perf --mode dare runs a
# dare subgroup of the engine, --mode atomic the round-robin one, on the same fabric in
# the same round, alternated. Writes JSON lines (one per run, with the round and the load
# average) to OUT and prints a markdown table of medians over the rounds.
#   bash scripts/bench-dare.sh [ROUNDS] [OUT.jsonl]
# Environment: BIN (default target/release/spindle-group-perf), BACKENDS ("tcp shm").
# Every run is bounded by `timeout`; a run that gives no figure is recorded as null.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-2}; out=${2:-bench-dare-engine.jsonl}
bin=${BIN:-$here/target/release/spindle-group-perf}
backends=${BACKENDS:-"tcp shm"}
# nodes senders size messages extra
# The issue's grid: 3 and 5 nodes, one sender and all, 64 B, 1 KiB, 10 KiB; and the
# latency run (one message in flight).
shapes=()
for n in 3 5; do
  for s in one all; do
    for size in 64 1024 10240; do
      m=100000; [ "$size" = 10240 ] && m=20000; [ "$n" = 5 ] && [ "$s" = all ] && m=20000
      shapes+=("$n $s $size $m -")
    done
  done
done
shapes+=("3 one 1024 5000 --latency")
for r in $(seq 1 "$rounds"); do
  modes="atomic dare"; [ $((r % 2)) -eq 0 ] && modes="dare atomic"
  for b in $backends; do
    for shape in "${shapes[@]}"; do
      read -r n s size m extra <<<"$shape"
      [ "$extra" = "-" ] && extra=""
      for mode in $modes; do
        j=$(timeout 200 "$bin" --backend "$b" --nodes "$n" --senders "$s" --size "$size" \
              --messages "$m" --mode "$mode" $extra 2>/dev/null | tail -1)
        case "$j" in "{"*"}") ;; *) j=null;; esac
        echo "{\"round\":$r,\"backend\":\"$b\",\"nodes\":$n,\"senders\":\"$s\",\"size\":$size,\"run\":\"${extra:-bandwidth}\",\"mode\":\"$mode\",\"result\":$j,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
      done
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = []
for r in rows:
    k = (r["backend"], r["nodes"], r["senders"], r["size"], r["run"])
    if k not in keys:
        keys.append(k)
def med(k, mode, f):
    v = [x["result"][f] for x in rows if (x["backend"], x["nodes"], x["senders"], x["size"], x["run"]) == k
         and x["mode"] == mode and x["result"]]
    return (statistics.median(v), len(v)) if v else (None, 0)
print("| fabric | nodes | senders | size (B) | run | atomic msgs/s | dare msgs/s | dare ÷ atomic | p50 µs atomic / dare | p99 µs atomic / dare |")
print("|---|---:|---|---:|---|---:|---:|---:|---:|---:|")
for k in keys:
    (a, na), (d, nd) = med(k, "atomic", "msgs_per_s"), med(k, "dare", "msgs_per_s")
    p50a, p50d = med(k, "atomic", "lat_p50_us")[0], med(k, "dare", "lat_p50_us")[0]
    p99a, p99d = med(k, "atomic", "lat_p99_us")[0], med(k, "dare", "lat_p99_us")[0]
    f = lambda v: "—" if v is None else f"{v:,.0f}"
    ratio = "—" if not a or d is None else f"{d / a:.2f}"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]:,} | {k[4]} | {f(a)} ({na}) | {f(d)} ({nd}) | {ratio} | {f(p50a)} / {f(p50d)} | {f(p99a)} / {f(p99d)} |")
PY
