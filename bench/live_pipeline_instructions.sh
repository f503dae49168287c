#!/usr/bin/env bash
# Instructions per sample of the live pipeline bench's timed stages, counted by callgrind:
# the same figure for the same build and input whatever else the machine is doing, where the
# bench's samples/s vary by 10-35 % from one minute to the next on a shared VM. Use it to
# compare two builds; use `cargo bench -p e2e --bench live_pipeline` for the rate itself.
#
# Usage: bench/live_pipeline_instructions.sh [programs...]     (default: all four)
# Environment: SAMPLES (per program, default 300000), VARIANT (default hwlike-built),
#              OUT (callgrind output, default target/bench/live_pipeline/callgrind.out).
#
# Needs valgrind and what the bench needs (clang-19, strip). Only the stages the bench
# times are counted (the ring drain and parser, the router, the worker); making the records
# is not. The per-function breakdown: `callgrind_annotate "$OUT" | head -40`.
set -euo pipefail
cd "$(dirname "$0")/.."

samples=${SAMPLES:-300000}
variant=${VARIANT:-hwlike-built}
out=${OUT:-target/bench/live_pipeline/callgrind.out}
command -v valgrind > /dev/null || { echo "valgrind is not installed" >&2; exit 1; }

exe=$(cargo bench -p e2e --bench live_pipeline --no-run --message-format=json 2> /dev/null |
  sed -n 's/.*"executable":"\([^"]*live_pipeline[^"]*\)".*/\1/p' | tail -1)
[ -x "$exe" ] || { echo "could not build the live_pipeline bench" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
out=$(realpath "$out")

# The bench runs from tests/ (its paths are relative to that crate), as `cargo bench` does.
log=$(cd tests && PGO_BENCH_SAMPLES=$samples PGO_BENCH_VARIANTS=$variant \
  valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
  --toggle-collect='*RecordDecoder::drain_recycling*' --toggle-collect='*Router::route*' \
  --toggle-collect='*Worker::handle*' --toggle-collect='*Worker::feed_pending*' \
  "$exe" "$@" 2>&1)
total=$(grep -o 'Collected : [0-9]*' <<< "$log" | awk '{print $3}')
n=$(grep -E "^$variant +:" <<< "$log" | awk '{print $3}')
[ -n "$total" ] && [ -n "$n" ] || { echo "$log" >&2; echo "no count in the run above" >&2; exit 1; }
echo "$variant ${*:-all four programs}: $total instructions for $n samples: $((total / n)) per sample"
echo "callgrind output: $out"
