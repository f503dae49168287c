#!/usr/bin/env bash
# The test command: every unit, integration and end-to-end test of the workspace, including
# the recorder's ground-truth checks and the llvm-profgen conformance suite (which need
# clang-19, llvm-19 and linux-perf: `.ci/run` installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --workspace --release --locked --no-fail-fast "$@"
