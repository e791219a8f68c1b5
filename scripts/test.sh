#!/usr/bin/env bash
# The whole test suite, from a fresh clone: set-up, formatting, lints, every test.
# Installs what it needs (Debian packages for the libfabric and verbs backends, a Python
# virtualenv with Cyclone DDS's binding for the CDR cross-check) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-rdma.sh
bash topics/tests/crosscheck/setup.sh
# The cross-check must run, not skip, once its set-up succeeded above.
export SPINDLE_CROSSCHECK_REQUIRED=1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --locked
cargo test --workspace --all-features --locked
