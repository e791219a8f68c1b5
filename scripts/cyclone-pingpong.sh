#!/usr/bin/env bash
# The exact round-trip reference for `dds_perf --pingpong` (issue 17): Cyclone DDS's own C
# API in a ping and a pong process (scripts/cyclone-pingpong/pingpong.c), every round trip
# recorded, on loopback only. ddsperf prints per-second 50%/90%/99%/max and no p99.99;
# this gives p50 … p99.99 and max over every round trip, by the same nearest-rank rule as
# dds_perf, for the same sample type (a sequence of SIZE octets: the same CDR bytes as
# `spindle_topics::Sequence`).
#   bash scripts/cyclone-pingpong.sh [--size BYTES] [--roundtrips N] [--warmup N]
#        [--trigger listener|waitset] [--seconds S]
# Its last line is one JSON object:
#   {"reference":"cyclone-pingpong","size":N,"trigger":"listener","warmup":N,
#    "roundtrips":N,"complete":true,"seconds":S,"rtt_p50_us":X,"rtt_p90_us":X,
#    "rtt_p99_us":X,"rtt_p999_us":X,"rtt_p9999_us":X,"rtt_max_us":X,"rtt_min_us":X}
# Installs the Debian packages cyclonedds-dev and cyclonedds-tools (idlc) and gcc when
# missing, and builds the program once into ${CARGO_TARGET_DIR:-target}/cyclone-pingpong.
set -euo pipefail
cd "$(dirname "$0")/.."
size=1024
roundtrips=100000
warmup=2000
trigger=listener
seconds=120
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size="$2"; shift 2 ;;
    --roundtrips) roundtrips="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --trigger) trigger="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    *) echo "cyclone-pingpong: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$size$roundtrips$warmup$seconds" in *[!0-9]*) echo "cyclone-pingpong: --size, --roundtrips, --warmup and --seconds take integers" >&2; exit 2 ;; esac
case "$trigger" in listener|waitset) ;; *) echo "cyclone-pingpong: --trigger listener or waitset" >&2; exit 2 ;; esac
if [ ! -e /usr/include/dds/dds.h ] || ! command -v idlc >/dev/null 2>&1 || ! command -v gcc >/dev/null 2>&1; then
  echo "cyclone-pingpong: installing cyclonedds-dev, cyclonedds-tools and gcc" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends cyclonedds-dev cyclonedds-tools gcc libc6-dev >/dev/null
fi
src=scripts/cyclone-pingpong
build="${CARGO_TARGET_DIR:-target}/cyclone-pingpong"
bin="$build/pingpong"
if [ ! -x "$bin" ] || [ "$src/pingpong.c" -nt "$bin" ] || [ "$src/Octets.idl" -nt "$bin" ]; then
  mkdir -p "$build"
  idlc -o "$build" "$src/Octets.idl" 2>"$build/idlc.log" || { cat "$build/idlc.log" >&2; exit 1; }
  gcc -O2 -Wall -Wextra -Werror -o "$bin" "$src/pingpong.c" "$build/Octets.c" -I"$build" -lddsc
fi

# Loopback only, a work directory and a domain id of this run's own.
. scripts/cyclone-loopback.sh
"$bin" pong "$domain" "$trigger" $((seconds + 10)) >"$work/pong.out" 2>&1 &
pids+=($!)
"$bin" ping "$domain" "$trigger" "$size" "$warmup" "$roundtrips" "$seconds"
