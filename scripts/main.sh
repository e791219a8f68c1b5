#!/usr/bin/env bash
# The main job: the fabric benchmark on tcp, shm and libfabric (tcp;ofi_rxm, shm) at
# 64 B, 1 KiB, 64 KiB and 1 MiB, next to iperf3 loopback and memcpy references measured in
# the same run. Extra arguments go to scripts/bench-fabric.sh (e.g. --seconds 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bash scripts/bench-fabric.sh --backends "tcp shm libfabric-tcp libfabric-shm" "$@"
