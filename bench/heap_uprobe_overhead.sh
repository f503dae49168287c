#!/usr/bin/env bash
# Slowdown of a program under `pgo-agent heap-sample` (uprobe allocation sampling, issue 7).
# Target: < 5% at the default sampling rate (512 KiB mean interval).
#
#   bench/heap_uprobe_overhead.sh                      # WORKS="0 200 2000 5000 20000", 3 runs
#   ITER=100000 WORKS="20000" RUNS=5 bench/heap_uprobe_overhead.sh
#   INTERVAL=16384 bench/heap_uprobe_overhead.sh       # another sampling interval
#   MODES="kernel" bench/heap_uprobe_overhead.sh       # only the in-kernel eBPF filter
#   DROP=1 bench/heap_uprobe_overhead.sh               # cost of a hit the filter drops
#
# Needs root (uprobe PMU, BPF), clang-19 and a release build of pgo-agent (built if missing).
#
# Workload: tests/programs/memprof/alloc_contexts.c, ITER iterations of 1.15 allocation
# calls each (malloc 64 B; every 10th a 4000-B malloc; every 20th a calloc) with WORK rounds
# of integer mixing between them: WORK sets the allocation rate. The program prints its
# loop's wall time (ELAPSED_NS); the median over RUNS interleaved runs is compared without
# sampling (plain) and under each sampling mode (the agent's startup and its symbolization after
# the program exits are not part of the program's time):
#   kernel  the eBPF byte filter in the probes (default when it loads): an unsampled call
#           costs the uprobe trap and the filter, no record;
#   user    --user-space-sampling: every call writes a record, the agent samples.
# us/call = (sampled − plain) / calls. With DROP=1 the interval is 1 TiB (the filter drops
# every call) and WORK=0: us/call is then the bare cost of a probe hit the filter drops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ITER=${ITER:-200000}
WORKS=${WORKS:-"0 200 2000 5000 20000"}
RUNS=${RUNS:-3}
INTERVAL=${INTERVAL:-524288}
MODES=${MODES:-"kernel user"}
if [ "${DROP:-0}" = 1 ]; then
    INTERVAL=1099511627776
    WORKS=0
    MODES=kernel
fi
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

run_mode() { # MODE WORK -> the loop's ns
    local flag=""
    [ "$1" = user ] && flag=--user-space-sampling
    # shellcheck disable=SC2086
    "$AGENT" heap-sample --sample-interval-bytes "$INTERVAL" $flag \
        -o "$WORK_DIR/heap.pb.gz" -- "$PROG" "$ITER" "$2" 2>"$WORK_DIR/agent.err" | elapsed
    if [ "$1" = kernel ] && ! grep -q 'sampling: kernel' "$WORK_DIR/agent.err"; then
        echo "heap_uprobe_overhead: the kernel filter did not load:" >&2
        grep 'sampling' "$WORK_DIR/agent.err" >&2 || true
        exit 1
    fi
}

printf '%-6s %-8s %-10s %-12s %-12s %-12s %-8s %s\n' \
    mode work calls calls/s plain_ms sampled_ms ratio us/call
for WORK in $WORKS; do
    # Runs interleaved (plain, then each mode, RUNS times): the machine's load drifts
    # alike for all of them.
    rm -f "$WORK_DIR"/t.*
    for _ in $(seq "$RUNS"); do
        "$PROG" "$ITER" "$WORK" | elapsed >>"$WORK_DIR/t.plain"
        for MODE in $MODES; do
            run_mode "$MODE" "$WORK" >>"$WORK_DIR/t.$MODE"
        done
    done
    plain=$(median <"$WORK_DIR/t.plain")
    for MODE in $MODES; do
        sampled=$(median <"$WORK_DIR/t.$MODE")
        calls=$(( ITER + ITER / 10 + ITER / 20 ))
        awk -v m="$MODE" -v w="$WORK" -v c="$calls" -v p="$plain" -v s="$sampled" 'BEGIN {
            printf "%-6s %-8s %-10d %-12.0f %-12.1f %-12.1f %-8.3f %.3f\n",
                m, w, c, c / (p / 1e9), p / 1e6, s / 1e6, s / p, (s - p) / 1e3 / c }'
    done
done
echo "ratio = sampled / plain wall time of the program's loop (median of $RUNS runs)," \
    "interval $INTERVAL bytes; calls/s = the plain program's allocation rate"
