#!/usr/bin/env bash
# The reference for the multicast benchmark: Cyclone DDS's ddsperf, one publisher process
# and one subscriber process, reliable, on loopback only, measured in the same run as ours.
#   bash scripts/ddsperf-reference.sh [--size BYTES] [--seconds S]
#                                     [--ping [--trigger listener|waitset] [--rate HZ]]
# Prints ddsperf's own lines to stderr and, as its last line, one JSON object:
#   {"reference":"ddsperf","size":N,"samples_per_s":N,"bytes_per_s":N,"seconds":S}
# or with --ping (a ping/pong round trip between two processes):
#   {"reference":"ddsperf-ping","size":N,"trigger":"listener","roundtrips":N,
#    "rtt_p50_us":X,"rtt_p90_us":X,"rtt_p99_us":X,"rtt_p9999_us":null,
#    "rtt_p9999_est_us":X,"rtt_p9999_est_min_cnt":N,"rtt_max_us":X,
#    "oneway_est_p50_us":X,"oneway_est_p90_us":X,"oneway_est_p99_us":X,"seconds":S}
# `ddsperf ping` prints HALF the round trip (its update_roundtrip is given
# (tnow - source timestamp) / 2): the rtt_* keys are twice its printed figures, the
# oneway_est_* keys are its printed figures as they are (a one-way estimate). ddsperf
# prints per-second 50%/90%/99%/max only: the rtt_p*_us keys are the median over the
# steady seconds (the first and last are dropped), rtt_max_us the largest of their maxima,
# and there is no p99.99 (null); rtt_p9999_est_us estimates it as the median of the
# seconds' maxima (a second's max over its cnt round trips sits near its p(1 - 1/cnt);
# rtt_p9999_est_min_cnt says the fewest round trips a second had).
# --rate HZ: pings at HZ a second (`ddsperf ping HZHz`) instead of one upon each pong: the
# round trip of a periodic topic, whose threads wait between samples ("rate_hz" in the
# JSON; 0 when not paced).
# Installs the Debian package cyclonedds-tools when ddsperf is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
size=1024
seconds=10
ping=0
trigger=listener
rate=0
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --ping) ping=1; shift ;;
    --trigger) trigger="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    *) echo "ddsperf-reference: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$size$seconds$rate" in *[!0-9]*) echo "ddsperf-reference: --size, --seconds and --rate take integers" >&2; exit 2 ;; esac
case "$trigger" in listener|waitset) ;; *) echo "ddsperf-reference: --trigger listener or waitset" >&2; exit 2 ;; esac
if ! command -v ddsperf >/dev/null 2>&1; then
  echo "ddsperf-reference: installing cyclonedds-tools" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends cyclonedds-tools >/dev/null
fi

# Loopback only, a work directory and a domain id of this run's own.
. scripts/cyclone-loopback.sh

if [ "$ping" = 1 ]; then
  rate_arg=""
  [ "$rate" -gt 0 ] && rate_arg="${rate}Hz"
  timeout $((seconds + 15)) ddsperf -i "$domain" -D $((seconds + 3)) pong "$trigger" >"$work/pong.out" 2>&1 &
  pids+=($!)
  sleep 1
  timeout $((seconds + 15)) ddsperf -i "$domain" -D "$seconds" ping $rate_arg size "$size" "$trigger" >"$work/ping.out" 2>&1 || true
  cat "$work/ping.out" >&2
  # ping lines: "... size 1024 mean 25.1us min 18.0us 50% 24.2us 90% 29.6us 99% 48.3us max 90.1us cnt 4711"
  # (each figure half a round trip).
  python3 - "$work/ping.out" "$size" "$seconds" "$trigger" "$rate" <<'PY'
import json, re, sys
lines = [l for l in open(sys.argv[1]) if " 50% " in l and " 99% " in l]
if len(lines) < 3:
    sys.exit("ddsperf-reference: too few ping lines from ddsperf")
steady = lines[1:-1]
def us(field, line):
    m = re.search(r" %s ([0-9.]+)us" % re.escape(field), line)
    return float(m.group(1)) if m else None
def median(field):
    return sorted(us(field, l) for l in steady)[len(steady) // 2]
def cnt(line):
    m = re.search(r" cnt (\d+)", line)
    return int(m.group(1)) if m else 0
half = {k: median(f) for k, f in (("p50", "50%"), ("p90", "90%"), ("p99", "99%"))}
half_max = max(us("max", l) for l in steady)
out = {"reference": "ddsperf-ping", "size": int(sys.argv[2]), "trigger": sys.argv[4],
       "roundtrips": sum(cnt(l) for l in steady)}
for k, v in half.items():
    out[f"rtt_{k}_us"] = round(2 * v, 3)
out["rtt_p9999_us"] = None
# ddsperf prints no p99.99. A second's max over its `cnt` round trips sits near that
# second's p(1 - 1/cnt): with cnt >= 10,000 the median over the steady seconds of each
# second's max is an estimate of the p99.99 (an upper one when cnt > 10,000), labelled so.
maxes = sorted(us("max", l) for l in steady)
out["rtt_p9999_est_us"] = round(2 * maxes[len(maxes) // 2], 3)
out["rtt_p9999_est_min_cnt"] = min(cnt(l) for l in steady)
out["rtt_max_us"] = round(2 * half_max, 3)
for k, v in half.items():
    out[f"oneway_est_{k}_us"] = v
out["seconds"] = int(sys.argv[3])
out["rate_hz"] = int(sys.argv[5])
print(json.dumps(out))
PY
  exit 0
fi

timeout $((seconds + 15)) ddsperf -i "$domain" -D $((seconds + 3)) sub >"$work/sub.out" 2>&1 &
sub=$!
pids+=($sub)
sleep 1
timeout $((seconds + 15)) ddsperf -i "$domain" -D "$seconds" pub size "$size" >"$work/pub.out" 2>&1 || true
wait "$sub" || true
cat "$work/sub.out" >&2
# sub lines: "[pid] T  size 1024 total N lost 0 delta N lost 0 rate 374.39 kS/s ..."
python3 - "$work/sub.out" "$size" "$seconds" <<'PY'
import json, re, sys
rates = []
for l in open(sys.argv[1]):
    m = re.search(r"size (\d+) total \d+ lost (\d+) delta \d+ lost \d+ rate ([0-9.]+) kS/s", l)
    if m:
        rates.append(float(m.group(3)) * 1e3)
# Skip the ramp-up second and the last two (the publisher stopping).
steady = rates[1:-2]
if len(steady) < 2:
    sys.exit(f"ddsperf-reference: too few steady-state lines from ddsperf ({len(rates)} rate lines)")
mean = sum(steady) / len(steady)
size = int(sys.argv[2])
print(json.dumps({"reference": "ddsperf", "size": size, "samples_per_s": round(mean),
                  "bytes_per_s": round(mean * size), "seconds": int(sys.argv[3])}))
PY
