#!/usr/bin/env bash
# A/B of large samples (issue 14): per round, iperf3 (single stream, loopback) and memcpy
# of SIZE bytes (spindle-rdmc-bench --reference memcpy), then per transport and variant
# the raw engine's atomic path at SIZE (bandwidth_test --mode atomic, two processes, one
# sender: RDMC inside the subgroup's order) with RDMC windows 1 and 2, and DCPS
# (dds_perf --level atomic --size SIZE); variants alternate, their order flipping each
# round; one JSON line per (round, variant, transport) with bytes/s and the load average.
#   VARIANTS="old new" BIN_ROOT=/tmp/p14 bash scripts/ab-large.sh ROUNDS OUT.jsonl [SIZE] [MESSAGES]
# A variant is a directory $BIN_ROOT/<name> holding release builds of dds_perf and
# examples' bandwidth_test; $BIN_ROOT/spindle-rdmc-bench gives memcpy. "<name>+cpuLIST"
# runs <name>'s builds with every process of the run under `taskset -c LIST` (the whole
# pipeline on those CPUs: "+cpu0" puts both processes and all their threads on CPU 0), and
# "<name>+split" runs each of the two processes on a CPU of its own (the sender on CPU 0, the
# receiver on CPU 1; see one_core_each in ab-lib.sh). Every run is
# bounded (MESSAGES messages, default 1024; 60–90 s; a failed or timed-out run prints 0).
# With AB_LARGE_CPU=1 each run is wrapped in `perf stat -e task-clock` (all processes and
# threads of the run) and the line also carries the CPU milliseconds of each run (the CPU
# per delivered byte moves far less with the host's load than the rate does; not with +split).
set -u
# shellcheck source=scripts/ab-lib.sh
. "$(dirname "$0")/ab-lib.sh"
root=${BIN_ROOT:-/tmp}
rounds=${1:-3}; out=${2:-ab-large.jsonl}; size=${3:-1048576}; n=${4:-1024}
variants=${VARIANTS:-"old new"}
bps() { grep -o '"bytes_per_s":[0-9.]*' | tail -1 | cut -d: -f2; }
stat=$(mktemp); trap 'rm -f "$stat"' EXIT
# run KIDS CMD...: runs it (under perf stat with AB_LARGE_CPU=1; with $split set, one process
# per CPU, CMD having KIDS children), prints its bytes/s and CPU milliseconds (0 without
# AB_LARGE_CPU).
run() {
  local kids=$1; shift
  cpu=0
  if [ -n "$split" ]; then
    b=$(one_core_each "$kids" timeout 90 "$@" | tail -1 | bps)
  elif [ "${AB_LARGE_CPU:-0}" = 1 ]; then
    b=$(timeout 90 perf stat -x, -e task-clock -o "$stat" "$@" 2>/dev/null | tail -1 | bps)
    cpu=$(grep task-clock "$stat" | cut -d, -f1 | cut -d. -f1)
  else
    b=$(timeout 90 "$@" 2>/dev/null | tail -1 | bps)
  fi
  echo "${b:-0} ${cpu:-0}"
}
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 0 ]; then vs=$(echo $variants | tr ' ' '\n' | tac | tr '\n' ' '); else vs=$variants; fi
  port=$((20000 + RANDOM % 20000))
  iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  server=$!
  sleep 0.5
  iperf=$(iperf3 -c 127.0.0.1 -p "$port" -t 2 -J |
    python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8))')
  wait "$server" 2>/dev/null
  memcpy=$("$root/spindle-rdmc-bench" --reference memcpy --size "$size" --seconds 1 | tail -1 | bps)
  echo "{\"round\":$r,\"reference\":true,\"iperf3\":${iperf:-0},\"memcpy\":${memcpy:-0},\"size\":$size,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
  for t in shm tcp; do
    for v in $vs; do
      bin=$root/${v%%+*}
      pin=""; case "$v" in *+cpu*) pin="taskset -c ${v##*+cpu}";; esac
      split=""; case "$v" in *+split) split=1;; esac
      # bandwidth_test's parent is the sending node (one child), dds_perf's is neither (two).
      e1=$(run 1 $pin $bin/bandwidth_test --backend $t --nodes 2 --senders one --mode atomic --size "$size" --messages "$n" --rdmc-window 1 --timeout-s 60); read -r e1 c1 <<<"$e1"
      e2=$(run 1 $pin $bin/bandwidth_test --backend $t --nodes 2 --senders one --mode atomic --size "$size" --messages "$n" --rdmc-window 2 --timeout-s 60); read -r e2 c2 <<<"$e2"
      d=$(run 2 $pin $bin/dds_perf --transport $t --level atomic --size "$size" --samples "$n"); read -r d cd <<<"$d"
      echo "{\"round\":$r,\"variant\":\"$v\",\"transport\":\"$t\",\"size\":$size,\"messages\":$n,\"engine_w1\":$e1,\"engine_w2\":$e2,\"dcps\":$d,\"cpu_ms_engine_w1\":${c1:-0},\"cpu_ms_engine_w2\":${c2:-0},\"cpu_ms_dcps\":${cd:-0},\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
    done
  done
done
