#!/usr/bin/env bash
# A/B of DCPS next to the raw engine (issue 22): per round and transport, for each variant,
# bandwidth_test and dds_perf (WaitSet, listener, listener + loan) at 1 KiB, then both at
# 65,000 B; variants alternate, their order flipping each round; one JSON line per
# (round, variant, transport) with the msgs/s of each run and the load average.
#   VARIANTS="old new" BIN_ROOT=/tmp bash scripts/ab-dcps.sh ROUNDS OUT.jsonl
# A variant is a directory $BIN_ROOT/<name> holding release builds of dds_perf and
# examples' bandwidth_test from the commit it stands for; "<name>+spinN" runs <name>
# with SPINDLE_WAITSET_SPIN_US=N, and "<name>+cpuLIST" runs <name> with every process under
# `taskset -c LIST` ("+cpu0": the whole pipeline on CPU 0, where a run's rate is its CPU
# per sample and the host's placement of the vCPUs drops out), and "<name>+split" runs each
# of the two benchmark processes on a CPU of its own (the publisher on CPU 0, the subscriber
# on CPU 1: bandwidth_test's first node is the parent process, dds_perf's pub and sub are
# its two children; `taskset -a -p` as soon as the processes exist, before their set-up
# ends). Compare each DCPS figure with the raw engine of the
# same variant in the same round. TRANSPORTS (default "shm tcp") picks the transports;
# SAMPLES (default 1000000) the 1 KiB runs' length.
set -u
# shellcheck source=scripts/ab-lib.sh
. "$(dirname "$0")/ab-lib.sh"
root=${BIN_ROOT:-/tmp}
rounds=${1:-3}; out=${2:-ab-dcps.jsonl}
variants=${VARIANTS:-"old new"}
rate() { grep -o '"msgs_per_s":[0-9.]*' | tail -1 | cut -d: -f2; }
for r in $(seq 1 "$rounds"); do
  # alternate the order each round
  if [ $((r % 2)) -eq 0 ]; then vs=$(echo $variants | tr ' ' '\n' | tac | tr '\n' ' '); else vs=$variants; fi
  for t in ${TRANSPORTS:-shm tcp}; do
    n=${SAMPLES:-1000000}
    for v in $vs; do
      bin=$root/${v%%+*}
      envs=""; case "$v" in *+spin*) envs="SPINDLE_WAITSET_SPIN_US=${v##*+spin}";; esac
      pin=""; case "$v" in *+cpu*) pin="taskset -c ${v##*+cpu}";; esac
      # +split: bandwidth_test's parent is a node (one child), dds_perf's is not (two).
      raw_split=""; dds_split=""; case "$v" in *+split) raw_split="one_core_each 1"; dds_split="one_core_each 2";; esac
      raw=$($raw_split timeout 300 $pin $bin/bandwidth_test --backend $t --nodes 2 --senders one --mode atomic --size 1024 --messages $n --window 256 --timeout-s 200 2>/dev/null | tail -1 | rate)
      ws=$($dds_split env $envs timeout 300 $pin $bin/dds_perf --transport $t --level atomic --size 1024 --samples $n 2>/dev/null | rate)
      li=$($dds_split env $envs timeout 300 $pin $bin/dds_perf --transport $t --level atomic --size 1024 --samples $n --listener 2>/dev/null | rate)
      lo=$($dds_split env $envs timeout 300 $pin $bin/dds_perf --transport $t --level atomic --size 1024 --samples $n --listener --loan 2>/dev/null | rate)
      raw64=$($raw_split timeout 300 $pin $bin/bandwidth_test --backend $t --nodes 2 --senders one --mode atomic --size 65000 --messages 20000 --window 256 --timeout-s 200 2>/dev/null | tail -1 | rate)
      lo64=$($dds_split env $envs timeout 300 $pin $bin/dds_perf --transport $t --level atomic --size 65000 --samples 20000 --listener --loan 2>/dev/null | rate)
      echo "{\"round\":$r,\"variant\":\"$v\",\"transport\":\"$t\",\"raw\":${raw:-0},\"waitset\":${ws:-0},\"listener\":${li:-0},\"listener_loan\":${lo:-0},\"raw64\":${raw64:-0},\"listener_loan64\":${lo64:-0},\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"at\":\"$(date -u +%H:%M:%S)\"}" | tee -a "$out"
    done
  done
done
