#!/usr/bin/env bash
# A/B of many topics (issue 22): dds_perf at 1 KiB with a listener, one busy topic, 50 busy
# topics, and one busy beside 999 idle (default 16 topic subgroups), per variant.
#   VARIANTS="old new" BIN_ROOT=/tmp [SAMPLES=400000] bash scripts/ab-topics.sh ROUNDS OUT.jsonl
# Variants as in scripts/ab-dcps.sh ("<name>+cpuLIST": every process under `taskset -c
# LIST`; "<name>+split": the publishing process on CPU 0, the subscribing one on CPU 1).
set -u
# shellcheck source=scripts/ab-lib.sh
. "$(dirname "$0")/ab-lib.sh"
root=${BIN_ROOT:-/tmp}
rounds=${1:-2}; out=${2:-ab-topics.jsonl}
variants=${VARIANTS:-"old new"}
rate() { grep -o '"msgs_per_s":[0-9.]*' | tail -1 | cut -d: -f2; }
for r in $(seq 1 "$rounds"); do
  for t in shm tcp; do
    for v in $variants; do
      bin=$root/${v%%+*}
      pin=""; case "$v" in *+cpu*) pin="taskset -c ${v##*+cpu}";; esac
      split=""; case "$v" in *+split) split="one_core_each 2";; esac
      one=$($split timeout 300 $pin $bin/dds_perf --transport $t --level atomic --size 1024 --samples ${SAMPLES:-400000} --listener 2>/dev/null | rate)
      fifty=$($split timeout 300 $pin $bin/dds_perf --transport $t --level atomic --size 1024 --samples ${SAMPLES:-400000} --listener --busy-topics 50 2>/dev/null | rate)
      idle=$($split timeout 300 $pin $bin/dds_perf --transport $t --level atomic --size 1024 --samples ${SAMPLES:-400000} --listener --idle-topics 999 2>/dev/null | rate)
      echo "{\"round\":$r,\"variant\":\"$v\",\"transport\":\"$t\",\"one\":${one:-0},\"fifty\":${fifty:-0},\"one_plus_999_idle\":${idle:-0},\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
    done
  done
done
