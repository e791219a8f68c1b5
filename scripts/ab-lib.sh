#!/usr/bin/env bash
# Helpers shared by the A/B benchmark scripts (sourced, not run).
# one_core_each KIDS [env ...] timeout S CMD...: runs the benchmark CMD under `timeout`, and once CMD has
# KIDS child processes puts one process on each of CPUs 0 and 1 (KIDS=1: CMD on 0, its
# child on 1; KIDS=2: the children on 0 and 1, the waiting CMD on 0); prints the output.
one_core_each() {
  local kids=$1; shift
  local outf; outf=$(mktemp)
  "$@" > "$outf" 2>/dev/null &
  local p=$! i c root=""
  for _ in $(seq 1 4000); do
    sleep 0.005
    # `timeout` (this job, `env` having exec-ed it) runs CMD as its one child.
    [ -z "$root" ] && root=$(pgrep -P $p | head -1)
    [ -z "$root" ] && continue
    local ks; ks=$(pgrep -P "$root" | sort -n)
    if [ "$(echo $ks | wc -w)" -ge "$kids" ]; then
      taskset -a -p -c 0 "$root" >/dev/null
      i=$((2 - kids))
      for c in $ks; do taskset -a -p -c $i $c >/dev/null; i=$((i + 1)); done
      break
    fi
  done
  wait $p
  cat "$outf"; rm -f "$outf"
}
