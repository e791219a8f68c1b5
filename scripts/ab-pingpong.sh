#!/usr/bin/env bash
# A/B of the DCPS round trip (issue 17): dds_perf --pingpong at 1 KiB over shm and tcp,
# unordered and atomic, for each variant, then Cyclone's ddsperf ping/pong in the same
# round (scripts/ddsperf-reference.sh --ping: the round trip, twice its printed figure).
#   VARIANTS="old new new+spin50" BIN_ROOT=/tmp bash scripts/ab-pingpong.sh ROUNDS OUT.jsonl
# Variants as in scripts/ab-dcps.sh (a directory $BIN_ROOT/<name> with dds_perf;
# "<name>+spinN" sets SPINDLE_WAITSET_SPIN_US=N).
set -u
root=${BIN_ROOT:-/tmp}
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-2}; out=${2:-ab-pingpong.jsonl}
variants=${VARIANTS:-"old new new+spin20 new+spin100"}
for r in $(seq 1 "$rounds"); do
  for t in shm tcp; do
    for lvl in unordered atomic; do
      for v in $variants; do
        bin=$root/${v%%+*}
        envs="X=1"; case "$v" in *+spin*) envs="SPINDLE_WAITSET_SPIN_US=${v##*+spin}";; esac
        j=$(env $envs timeout 300 $bin/dds_perf --pingpong --transport $t --level $lvl --size 1024 --roundtrips 50000 --warmup 2000 2>/dev/null | tail -1)
        echo "{\"round\":$r,\"variant\":\"$v\",\"run\":$j,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
      done
    done
  done
  j=$(cd "$here" && timeout 120 bash scripts/ddsperf-reference.sh --ping --size 1024 --seconds 6 2>/dev/null | tail -1)
  echo "{\"round\":$r,\"variant\":\"ddsperf\",\"run\":$j,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
done
