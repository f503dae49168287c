#!/usr/bin/env bash
# Prints the "Profile quality" table of docs/correctness.md: per corpus program (probe build, recorded by
# the software LBR recorder), the weighted relative block-count delta against the
# recorder's ground truth for llvm-profgen-19 and for pgo-agent (symbolizer::quality), with
# llvm-profgen's default flags (CS) and --ignore-stack-samples (flat), and the verdict of
# `pgo-agent verify` on pgo-agent's CS profile.
# Usage: scripts/quality_table.sh [PROGRAM...]   (default: every corpus program)
# Needs clang-19 and llvm-19 (llvm-profgen-19 is the comparison, never used by pgo-agent).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in clang-19 llvm-profgen-19; do
  command -v "$tool" >/dev/null || { echo "quality_table.sh: $tool not found (apt-get install clang-19 llvm-19)" >&2; exit 1; }
done
# The recorded programs print to stdout too: keep the table's lines only.
cargo run --quiet --release -p e2e --bin quality_table -- "$@" | grep '^|'
