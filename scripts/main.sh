#!/usr/bin/env bash
# The main job: for now the fabric benchmark on tcp and shm at 64 B, 1 KiB, 64 KiB, 1 MiB,
# next to iperf3 loopback and memcpy references measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bash scripts/bench-fabric.sh "$@"
