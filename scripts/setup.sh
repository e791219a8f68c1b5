#!/usr/bin/env bash
# Installs what Spindle DDS needs on a fresh Debian machine, only when it is missing.
# Safe to run many times. Used by scripts/test.sh and scripts/bench.sh.
set -euo pipefail

need_apt=()
want() { # want <command-or-file> <debian-package>
  case "$1" in
    /*) [ -e "$1" ] || need_apt+=("$2") ;;
    *) command -v "$1" >/dev/null 2>&1 || need_apt+=("$2") ;;
  esac
}

want cc gcc
want pkg-config pkg-config
want python3 python3
want iperf3 iperf3
want ip iproute2 # network namespaces of the partition test (bench/tests/vs_partition.rs)
want ddsperf cyclonedds-tools # Cyclone DDS's ddsperf across the RTPS bridge (interop-tests)

if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install the Rust toolchain (https://rustup.rs) first" >&2
  exit 1
fi
