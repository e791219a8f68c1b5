#!/usr/bin/env bash
# The whole test suite, from a fresh clone: set-up, formatting, lints, every test.
# Installs what it needs (Debian packages for the libfabric and verbs backends, a Python
# virtualenv with Cyclone DDS's binding for the CDR cross-check and the Cyclone DDS interop
# tests of interop-tests) when it is missing.
#   bash scripts/test.sh           what CI runs: set-up, fmt, clippy, rustdoc, the layering
#                                  rules, every test with every feature
#   bash scripts/test.sh --quick   the local loop while you work: no set-up, default
#                                  features only (no libfabric/verbs, no Cyclone
#                                  cross-check), fmt, clippy, the layering rules, the tests
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "test.sh: unknown argument $1 (use --quick or nothing)" >&2; exit 2 ;;
esac
if [ "$quick" -eq 1 ]; then
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets -- -D warnings
  python3 scripts/check-layering.py
  cargo test --workspace
  exit 0
fi
bash scripts/setup.sh
bash scripts/setup-rdma.sh
bash topics/tests/crosscheck/setup.sh
# The cross-check and the Cyclone interop tests must run, not skip, once the set-up
# succeeded above.
export SPINDLE_CROSSCHECK_REQUIRED=1
# ddsperf (cyclonedds-tools, installed by scripts/setup.sh) across the RTPS bridge too.
export SPINDLE_DDSPERF_REQUIRED=1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --locked
python3 scripts/check-layering.py
cargo test --workspace --all-features --locked
