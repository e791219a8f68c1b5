#!/usr/bin/env bash
# The whole test suite, from a fresh clone: set-up, formatting, lints, every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
