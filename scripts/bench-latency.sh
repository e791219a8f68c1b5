#!/usr/bin/env bash
# Latency benchmark (issue 17): the ping/pong round trip between two processes,
# `dds_perf --pingpong` for each transport, level and size, next to Cyclone DDS's
# `ddsperf ping`/`pong` at the same size measured in the same run (its round trip: twice
# the figure it prints, see scripts/ddsperf-reference.sh), and Cyclone's C API in the same
# exchange with every round trip recorded (scripts/cyclone-pingpong.sh: the reference for
# p99.9, p99.99 and max, which ddsperf does not print). Then the loaded case: the 1 KiB
# round trip alone and with a 64 KiB bulk stream on another topic (another subgroup)
# between the same two processes.
#   bash scripts/bench-latency.sh [--sizes "16 1024 65536"] [--transports "tcp shm"]
#        [--levels "unordered atomic"] [--roundtrips 100000] [--trigger listener|waitset]
#        [--ddsperf-seconds 10] [--loaded-roundtrips 20000] [--no-loaded] [--out FILE]
#        [--histograms DIR]
# Prints one JSON line per run (and keeps them in --out), then Markdown tables; with
# --histograms, each unloaded run's histogram as DIR/<transport>-<level>-<size>.csv and a
# text plot of the round-trip distribution per run (share of round trips per octave).
# Size 65536 means a 64 KiB message: for ddsperf its `size` (which counts its 12-byte
# fixed part), for dds_perf the largest payload whose sample fills one 64 KiB slot
# (65,464 bytes + 8 bytes of CDR + the 64-byte sample header).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes="16 1024 65536"
transports="tcp shm"
levels="unordered atomic"
roundtrips=100000
trigger=listener
dseconds=10
loaded_roundtrips=20000
loaded=1
out=""
hdir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) sizes="$2"; shift 2 ;;
    --transports) transports="$2"; shift 2 ;;
    --levels) levels="$2"; shift 2 ;;
    --roundtrips) roundtrips="$2"; shift 2 ;;
    --trigger) trigger="$2"; shift 2 ;;
    --ddsperf-seconds) dseconds="$2"; shift 2 ;;
    --loaded-roundtrips) loaded_roundtrips="$2"; shift 2 ;;
    --no-loaded) loaded=0; shift ;;
    --out) out="$2"; shift 2 ;;
    --histograms) hdir="$2"; shift 2 ;;
    *) echo "bench-latency: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$trigger" in listener|waitset) ;; *) echo "bench-latency: --trigger listener or waitset" >&2; exit 2 ;; esac
cargo build --release -q -p spindle-examples --bin dds_perf
bin="${CARGO_TARGET_DIR:-target}/release/dds_perf"
[ -n "$out" ] || out=$(mktemp)
: >"$out"
ours_size() { if [ "$1" -ge 65536 ]; then echo 65464; else echo "$1"; fi; }
trig_arg=""
[ "$trigger" = listener ] && trig_arg="--listener"
# Adds fields to the JSON line on stdin; a run that printed none becomes {"error": ...}.
tag() { python3 -c "
import json, sys
l = sys.stdin.readline().strip()
try:
    r = json.loads(l)
except ValueError:
    r = {'error': 'no result: ' + l[:200]}
r.update($1)
print(json.dumps(r))"; }
date -u +"bench-latency: start %Y-%m-%d %H:%M:%S UTC" >&2
for size in $sizes; do
  bash scripts/ddsperf-reference.sh --ping --trigger "$trigger" --size "$size" --seconds "$dseconds" 2>/dev/null \
    | tail -n 1 | tag "{'kind':'ddsperf','nominal_size':$size}" | tee -a "$out"
  bash scripts/cyclone-pingpong.sh --trigger "$trigger" --size "$(ours_size "$size")" --roundtrips "$roundtrips" \
    --seconds 300 2>/dev/null | tail -n 1 | tag "{'kind':'cyclone','nominal_size':$size}" | tee -a "$out"
  for transport in $transports; do
    for level in $levels; do
      hist=()
      [ -z "$hdir" ] || { mkdir -p "$hdir"; hist=(--histogram "$hdir/$transport-$level-$size.csv"); }
      timeout 900 "$bin" --pingpong --transport "$transport" --level "$level" --size "$(ours_size "$size")" \
        --roundtrips "$roundtrips" --seconds 300 $trig_arg "${hist[@]}" | tail -n 1 \
        | tag "{'kind':'spindle','nominal_size':$size}" | tee -a "$out"
    done
  done
done
if [ "$loaded" = 1 ]; then
  for transport in $transports; do
    for level in $levels; do
      for bulk in 0 65464; do
        timeout 900 "$bin" --pingpong --transport "$transport" --level "$level" --size 1024 \
          --roundtrips "$loaded_roundtrips" --seconds 120 --bulk-size "$bulk" $trig_arg | tail -n 1 \
          | tag "{'kind':'loaded','nominal_size':1024}" | tee -a "$out"
      done
    done
  done
fi
date -u +"bench-latency: end %Y-%m-%d %H:%M:%S UTC" >&2
python3 - "$out" "$hdir" <<'PY'
import json, sys, os, math
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
failed = [r for r in rows if "error" in r]
rows = [r for r in rows if "error" not in r]
def f(v):
    return "-" if v is None else f"{v:,.1f}"
def ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}"
print()
print("Round trip, µs (ddsperf: twice its printed figure; it prints no p99.99. Cyclone: its C API")
print("in the same exchange, every round trip recorded). Ratios: ours ÷ the reference's.")
print()
print("| transport | level | size (B) | round trips | p50 | p99 | p99.99 | max | ddsperf p50 | ddsperf p99 | Cyclone p50 | Cyclone p99 | Cyclone p99.99 | p50 ÷ ddsperf | p99 ÷ ddsperf | p50 ÷ Cyclone | p99.99 ÷ Cyclone |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    if r.get("kind") != "spindle":
        continue
    d = next((x for x in rows if x.get("kind") == "ddsperf" and x["nominal_size"] == r["nominal_size"]), {})
    c = next((x for x in rows if x.get("kind") == "cyclone" and x["nominal_size"] == r["nominal_size"]), {})
    print(f"| {r['transport']} | {r['level']} | {r['nominal_size']} | {r['roundtrips']:,} | {f(r['rtt_p50_us'])} | {f(r['rtt_p99_us'])} | {f(r['rtt_p9999_us'])} | {f(r['rtt_max_us'])} "
          f"| {f(d.get('rtt_p50_us'))} | {f(d.get('rtt_p99_us'))} | {f(c.get('rtt_p50_us'))} | {f(c.get('rtt_p99_us'))} | {f(c.get('rtt_p9999_us'))} "
          f"| {ratio(r['rtt_p50_us'], d.get('rtt_p50_us'))} | {ratio(r['rtt_p99_us'], d.get('rtt_p99_us'))} | {ratio(r['rtt_p50_us'], c.get('rtt_p50_us'))} | {ratio(r['rtt_p9999_us'], c.get('rtt_p9999_us'))} |")
loaded = [r for r in rows if r.get("kind") == "loaded"]
if loaded:
    print()
    print("1 KiB round trip (µs) alone and beside a 64 KiB bulk stream on another topic, same processes:")
    print()
    print("| transport | level | bulk | round trips | p50 | p99 | p99.99 | max | bulk samples/s taken | p99 ÷ unloaded p99 |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in loaded:
        base = next((x for x in loaded if x["transport"] == r["transport"] and x["level"] == r["level"] and x["bulk_size"] == 0), {})
        bulk = "none" if r["bulk_size"] == 0 else f"{r['bulk_size']} B"
        print(f"| {r['transport']} | {r['level']} | {bulk} | {r['roundtrips']:,}{'' if r['complete'] else ' (deadline)'} | {f(r['rtt_p50_us'])} | {f(r['rtt_p99_us'])} | {f(r['rtt_p9999_us'])} | {f(r['rtt_max_us'])} | {r.get('bulk_taken_per_s', 0):,} | {ratio(r['rtt_p99_us'], base.get('rtt_p99_us'))} |")
hdir = sys.argv[2]
if hdir and os.path.isdir(hdir):
    print()
    print("Round-trip distribution (share of round trips per octave of µs; `#` = 2%):")
    for name in sorted(os.listdir(hdir)):
        if not name.endswith(".csv"):
            continue
        octaves = {}
        total = 0
        for line in list(open(os.path.join(hdir, name)))[1:]:
            lo, hi, count, _ = line.strip().split(",")
            o = int(math.floor(math.log2(max(float(lo), 0.001))))
            octaves[o] = octaves.get(o, 0) + int(count)
            total += int(count)
        print()
        print(f"{name[:-4]}:")
        print("```")
        for o in range(min(octaves), max(octaves) + 1):
            share = octaves.get(o, 0) / total
            bar = "#" * round(share * 50)
            if share > 0 and not bar:
                bar = "."
            print(f"{2 ** o:>8g} – {2 ** (o + 1):<8g} µs {share * 100:6.2f}% {bar}")
        print("```")
for r in failed:
    print(f"failed: {json.dumps(r)}")
PY
