# Sourced by the Cyclone DDS reference scripts (ddsperf-reference.sh, cyclone-pingpong.sh):
# a work directory removed at exit with the background processes listed in `pids`, a
# Cyclone configuration on loopback only (no multicast, unicast discovery to 127.0.0.1)
# exported as CYCLONEDDS_URI, and `domain`, a domain id of this run's own.
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
cat >"$work/cyclonedds.xml" <<'XML'
<CycloneDDS><Domain id="any"><General><Interfaces><NetworkInterface name="lo"/></Interfaces>
<AllowMulticast>false</AllowMulticast></General><Discovery><Peers><Peer address="127.0.0.1"/></Peers>
<ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>20</MaxAutoParticipantIndex>
</Discovery></Domain></CycloneDDS>
XML
export CYCLONEDDS_URI="file://$work/cyclonedds.xml"
domain=$((50 + RANDOM % 150))
