#!/usr/bin/env bash
# Slowdown of a program under `pgo-agent heap-sample` (uprobe allocation sampling, issue 7).
# Target: < 5% at the default sampling rate (512 KiB mean interval).
#
#   bench/heap_uprobe_overhead.sh                  # WORKS="0 2000 20000", 3 runs each
#   ITER=100000 WORKS="20000" RUNS=5 bench/heap_uprobe_overhead.sh
#   INTERVAL=16384 bench/heap_uprobe_overhead.sh   # another sampling interval
#
# Needs root (uprobe PMU), clang-19 and a release build of pgo-agent (built if missing).
#
# Workload: tests/programs/memprof/alloc_contexts.c, ITER iterations of 1.15 allocation
# calls each (malloc 64 B; every 10th a 4000-B malloc; every 20th a calloc) with WORK rounds
# of integer mixing between them: WORK sets the allocation rate. The program prints its
# loop's wall time (ELAPSED_NS); the median over RUNS runs without and with sampling is
# compared (the agent's startup and its symbolization after the program exits are not
# part of the program's time). Every probe hit traps into the kernel whatever the
# sampling rate (the size is read in user space), so the slowdown grows with the
# allocation rate: the per-call cost printed is (sampled − plain) / calls.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ITER=${ITER:-200000}
WORKS=${WORKS:-"0 2000 20000"}
RUNS=${RUNS:-3}
INTERVAL=${INTERVAL:-524288}
WORK_DIR=${WORK_DIR:-$ROOT/target/bench/heap_uprobe_overhead}
mkdir -p "$WORK_DIR"

if [ "$(id -u)" != 0 ]; then
    echo "heap_uprobe_overhead: needs root (uprobe PMU)" >&2
    exit 2
fi
AGENT=$ROOT/target/release/pgo-agent
if [ ! -x "$AGENT" ]; then
    (cd "$ROOT" && cargo build --release -p daemon)
fi
PROG=$WORK_DIR/alloc_contexts
clang-19 -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
    -fno-optimize-sibling-calls -Wl,--build-id \
    "$ROOT/tests/programs/memprof/alloc_contexts.c" -o "$PROG"

elapsed() { grep '^ELAPSED_NS' | awk '{print $2}'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf '%-8s %-10s %-12s %-14s %-14s %-8s %s\n' work calls calls/s plain_ms sampled_ms ratio us/call
for WORK in $WORKS; do
    plain=$(for _ in $(seq "$RUNS"); do "$PROG" "$ITER" "$WORK" | elapsed; done | median)
    sampled=$(for _ in $(seq "$RUNS"); do
        "$AGENT" heap-sample --sample-interval-bytes "$INTERVAL" -o "$WORK_DIR/heap.pb.gz" \
            -- "$PROG" "$ITER" "$WORK" 2>/dev/null | elapsed
    done | median)
    calls=$(( ITER + ITER / 10 + ITER / 20 ))
    awk -v w="$WORK" -v c="$calls" -v p="$plain" -v s="$sampled" 'BEGIN {
        printf "%-8s %-10d %-12.0f %-14.1f %-14.1f %-8.3f %.2f\n",
            w, c, c / (p / 1e9), p / 1e6, s / 1e6, s / p, (s - p) / 1e3 / c }'
done
echo "ratio = sampled / plain wall time of the program's loop (median of $RUNS runs)," \
    "interval $INTERVAL bytes"
