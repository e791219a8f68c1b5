#!/usr/bin/env bash
# A/B of many topics (issue 22): dds_perf at 1 KiB with a listener, one busy topic, 50 busy
# topics, and one busy beside 999 idle (default 16 topic subgroups), per variant.
#   VARIANTS="old new" BIN_ROOT=/tmp bash scripts/ab-topics.sh ROUNDS OUT.jsonl
# Variants as in scripts/ab-dcps.sh.
set -u
root=${BIN_ROOT:-/tmp}
rounds=${1:-2}; out=${2:-ab-topics.jsonl}
variants=${VARIANTS:-"old new"}
rate() { grep -o '"msgs_per_s":[0-9.]*' | tail -1 | cut -d: -f2; }
for r in $(seq 1 "$rounds"); do
  for t in shm tcp; do
    for v in $variants; do
      bin=$root/$v
      one=$(timeout 300 $bin/dds_perf --transport $t --level atomic --size 1024 --samples 400000 --listener 2>/dev/null | rate)
      fifty=$(timeout 300 $bin/dds_perf --transport $t --level atomic --size 1024 --samples 400000 --listener --busy-topics 50 2>/dev/null | rate)
      idle=$(timeout 300 $bin/dds_perf --transport $t --level atomic --size 1024 --samples 400000 --listener --idle-topics 999 2>/dev/null | rate)
      echo "{\"round\":$r,\"variant\":\"$v\",\"transport\":\"$t\",\"one\":${one:-0},\"fifty\":${fifty:-0},\"one_plus_999_idle\":${idle:-0},\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
    done
  done
done
