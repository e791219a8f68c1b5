#!/usr/bin/env bash
# A/B of the DCPS round trip (issue 17): dds_perf --pingpong over shm and tcp, unordered
# and atomic, for each variant, then Cyclone's ddsperf ping/pong in the same round
# (scripts/ddsperf-reference.sh --ping: the round trip, twice its printed figure) and
# Cyclone's C API in the same exchange (scripts/cyclone-pingpong.sh: every round trip).
#   VARIANTS="old new new+spin50" BIN_ROOT=/tmp bash scripts/ab-pingpong.sh ROUNDS OUT.jsonl
# Variants as in scripts/ab-dcps.sh (a directory $BIN_ROOT/<name> with dds_perf;
# "<name>+spinN" sets SPINDLE_WAITSET_SPIN_US=N). The set measured, by environment:
# SIZES (default "1024"), TRIGGERS ("waitset" and/or "listener": the pong and the ping
# take in on_data_available, as ddsperf's default does; default "waitset"), TRANSPORTS
# ("shm tcp"), LEVELS ("unordered atomic"), ROUNDTRIPS (50000).
set -u
root=${BIN_ROOT:-/tmp}
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-2}; out=${2:-ab-pingpong.jsonl}
variants=${VARIANTS:-"old new new+spin20 new+spin100"}
sizes=${SIZES:-1024}
triggers=${TRIGGERS:-waitset}
transports=${TRANSPORTS:-"shm tcp"}
levels=${LEVELS:-"unordered atomic"}
roundtrips=${ROUNDTRIPS:-50000}
for r in $(seq 1 "$rounds"); do
  # alternate the variants' order each round
  if [ $((r % 2)) -eq 0 ]; then vs=$(echo $variants | tr ' ' '\n' | tac | tr '\n' ' '); else vs=$variants; fi
  for size in $sizes; do
    for t in $transports; do
      for lvl in $levels; do
        for trig in $triggers; do
          flag=""; [ "$trig" = listener ] && flag="--listener"
          for v in $vs; do
            bin=$root/${v%%+*}
            envs="X=1"; case "$v" in *+spin*) envs="SPINDLE_WAITSET_SPIN_US=${v##*+spin}";; esac
            j=$(env $envs timeout 300 $bin/dds_perf --pingpong $flag --transport $t --level $lvl --size $size --roundtrips $roundtrips --warmup 2000 2>/dev/null | tail -1)
            echo "{\"round\":$r,\"variant\":\"$v\",\"run\":${j:-null},\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
          done
        done
      done
    done
    j=$(cd "$here" && timeout 120 bash scripts/ddsperf-reference.sh --ping --size $size --seconds 6 2>/dev/null | tail -1)
    echo "{\"round\":$r,\"variant\":\"ddsperf\",\"run\":${j:-null},\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
    j=$(cd "$here" && timeout 300 bash scripts/cyclone-pingpong.sh --size $size --roundtrips $roundtrips 2>/dev/null | tail -1)
    echo "{\"round\":$r,\"variant\":\"cyclone\",\"run\":${j:-null},\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
  done
done
