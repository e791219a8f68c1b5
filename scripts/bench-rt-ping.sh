#!/bin/bash
# A ping beside a bulk stream, with the predicate threads time-shared (the default) and in
# SCHED_FIFO (`predicate_fifo_priority`), back to back and paced at 10 kHz; the unloaded
# ping of each configuration beside it (issue 17, docs/benchmarks.md "The predicate thread
# in the real-time class"). SCHED_FIFO needs CAP_SYS_NICE (root): without it those runs
# fail and say so.
#
#   bash scripts/bench-rt-ping.sh [ROUNDS] [OUT.jsonl]
#
# DDS_PERF: the dds_perf binary (default: target/release/dds_perf, built if missing).
# Each run is bounded: at most 300,000 round trips and 120 s. One line per run on stdout
# (round, variant, busy = compiler processes seen at its start, rtt p50/p99/p99.99 µs,
# bulk samples/s); the runs' JSON lines, prefixed by round and variant, go to OUT.
set -euo pipefail
ROUNDS=${1:-3}
OUT=${2:-/tmp/bench-rt-ping.jsonl}
cd "$(dirname "$0")/.."
B=${DDS_PERF:-target/release/dds_perf}
if [ ! -x "$B" ]; then
    cargo build --release -p spindle-examples --bin dds_perf
fi
COMMON="--pingpong --transport shm --level atomic --size 1024 --warmup 20000 --listener --suspect-floor-ms 2000"
LOAD="--bulk-size 65000 --busy-yield-us 50"
RT="--predicate-fifo-priority 10 --spin-before-park-us 0"
: > "$OUT"
for r in $(seq 1 "$ROUNDS"); do
    for v in "b2b plain unloaded|--roundtrips 300000" \
        "b2b plain loaded|--roundtrips 300000 $LOAD" \
        "b2b fifo unloaded|--roundtrips 300000 $RT" \
        "b2b fifo loaded|--roundtrips 300000 $LOAD $RT" \
        "10kHz plain unloaded|--roundtrips 50000 --rate 10000" \
        "10kHz plain loaded|--roundtrips 50000 --rate 10000 $LOAD" \
        "10kHz fifo unloaded|--roundtrips 50000 --rate 10000 $RT" \
        "10kHz fifo loaded|--roundtrips 50000 --rate 10000 $LOAD $RT" \
        "10kHz fifo+spin loaded|--roundtrips 50000 --rate 10000 $LOAD --predicate-fifo-priority 10"; do
        name=${v%%|*}
        args=${v#*|}
        busy=$(ps -eo comm | grep -c -E "^(rustc|cargo|cc1|ld)$" || true)
        # shellcheck disable=SC2086
        line=$(timeout 120 "$B" $COMMON $args 2>&1 | tail -n 1 || true)
        case "$line" in
            \{*) ;;
            *) line="\"$(echo "$line" | tr -d '"\\')\"" ;;
        esac
        echo "{\"round\":$r,\"variant\":\"$name\",\"busy\":$busy,\"run\":$line}" >> "$OUT"
        echo "$r|$name|busy=$busy|$(echo "$line" | python3 -c '
import json, sys
try:
    d = json.loads(sys.stdin.read())
    print(d["rtt_p50_us"], d["rtt_p99_us"], d["rtt_p9999_us"], d["bulk_written_per_s"], d["complete"])
except Exception as e:
    print("no result:", e)
')"
    done
done
