# Sourced by the Cyclone DDS reference scripts (ddsperf-reference.sh, cyclone-pingpong.sh):
# a work directory removed at exit with the background processes listed in `pids`, a
# Cyclone configuration on loopback only (scripts/cyclone-loopback.xml: no multicast,
# unicast discovery to 127.0.0.1) exported as CYCLONEDDS_URI (run from the repository
# root, as every script here cds there), and `domain`, a domain id of this run's own.
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
export CYCLONEDDS_URI="file://$PWD/scripts/cyclone-loopback.xml"
domain=$((50 + RANDOM % 150))
