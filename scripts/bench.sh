#!/usr/bin/env bash
# The benchmarks: the DCPS benchmark, the ping/pong latency benchmark (beside ddsperf
# ping/pong), the multicast benchmark (Derecho's bandwidth_test / latency_test over tcp
# and shm, next to Cyclone DDS's ddsperf measured in the same run), then the
# view-change benchmark (SIGKILL to new view, throughput around a join), then the fabric
# benchmark on tcp, shm and libfabric (tcp;ofi_rxm, shm) next to iperf3 and memcpy.
# Both install what they need (scripts/setup.sh, scripts/setup-rdma.sh, cyclonedds-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/bench-dcps.sh
bash scripts/bench-latency.sh
bash scripts/bench-group.sh
bash scripts/bench-viewchange.sh
exec bash scripts/bench-fabric.sh --backends "tcp shm libfabric-tcp libfabric-shm"
