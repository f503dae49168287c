#!/usr/bin/env bash
# Overhead of `pgo-agent run` (issue 4): daemon CPU% and peak RSS while it samples every CPU
# at 1 kHz for 60 s under a busy workload. Targets: < 1% of one core, RSS < 128 MB.
#
#   bench/daemon_overhead.sh                 # 60 s, 1 kHz, modes as in the default config
#   DURATION=20 FREQ=1000 bench/daemon_overhead.sh
#   MODES='"cpu_clock"' bench/daemon_overhead.sh
#
# Needs root (system-wide perf events) and clang-19 (builds the workload). No network.
#
# Workload: one copy of tests/programs/live/spin.c per online CPU (a frame-pointer, pseudo-
# probe build with a GNU build id, so the daemon does its full work on every sample: process
# table, binary load, aggregation, flushes). The daemon runs with `--duration-secs`; its CPU
# time (utime+stime from /proc/PID/stat) and RSS (VmHWM, VmRSS from /proc/PID/status) are
# read once a second while it runs, and its total CPU time and peak RSS from wait4 (GNU
# time) when it exits. Reported:
#   * steady CPU%: CPU time between the first reading after the events are enabled and the
#     last reading before shutdown, over that wall time (one core = 100%);
#   * total CPU%: the whole life (startup, /proc scan, binary loads, final flush) over the
#     whole life;
#   * peak RSS (VmHWM).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-60}
FREQ=${FREQ:-1000}
MODES=${MODES:-'"intel_lbr", "amd_branch", "cpu_clock"'}
FLUSH=${FLUSH:-60}
# Profile only the workload (the default), or every process (ALL=1): the machine may be
# running other work (builds) whose huge binaries the daemon would load and aggregate too.
ALL=${ALL:-0}
CPUS=$(nproc)
WORK=${WORK:-$ROOT/target/bench/daemon_overhead}
mkdir -p "$WORK"
STATE="$WORK/state"
rm -rf "$STATE"

if [ "$(id -u)" != 0 ]; then
    echo "daemon_overhead: needs root (system-wide perf events)" >&2
    exit 2
fi

AGENT=${PGO_AGENT:-}
if [ -z "$AGENT" ]; then
    (cd "$ROOT" && cargo build --release -q -p daemon --bin pgo-agent) >&2 ||
        echo "daemon_overhead: cargo build failed; using the existing binary" >&2
    AGENT="$ROOT/target/release/pgo-agent"
fi
[ -x "$AGENT" ] || { echo "daemon_overhead: no $AGENT" >&2; exit 2; }

SPIN="$WORK/spin"
clang-19 -O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
    -fpseudo-probe-for-profiling -fPIE -pie -Wl,--build-id \
    -o "$SPIN" "$ROOT/tests/programs/live/spin.c"

GLOBS='"'"$SPIN"'"'
[ "$ALL" = 1 ] && GLOBS=""
CONFIG="$WORK/pgo-agent.toml"
cat >"$CONFIG" <<EOF
[sampling]
modes = [$MODES]
cpu_clock_frequency_hz = $FREQ
[filters]
exe_path_globs = [$GLOBS]
[output]
state_dir = "$STATE"
flush_interval_secs = $FLUSH
EOF

# The busy workload: every CPU, a little longer than the daemon runs.
WORKLOAD=()
for _ in $(seq "$CPUS"); do
    "$SPIN" $((DURATION + 5)) &
    WORKLOAD+=($!)
done
cleanup() { kill "${WORKLOAD[@]}" 2>/dev/null || true; }
trap cleanup EXIT
sleep 0.5

TIMEFILE="$WORK/time.txt"
LOG="$WORK/daemon.log"
/usr/bin/time -f "%e %U %S %M" -o "$TIMEFILE" \
    "$AGENT" run --config "$CONFIG" --duration-secs "$DURATION" 2>"$LOG" &
TIME_PID=$!
# The daemon is time's child.
PID=""
for _ in $(seq 100); do
    PID=$(pgrep -P "$TIME_PID" | head -1 || true)
    [ -n "$PID" ] && break
    sleep 0.05
done
[ -n "$PID" ] || { echo "daemon_overhead: pgo-agent did not start" >&2; cat "$LOG" >&2; exit 1; }

TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$PID/stat" 2>/dev/null; }
first_t=""; first_c=""; last_t=""; last_c=""; hwm=0; rss=0
while kill -0 "$PID" 2>/dev/null; do
    sleep 1
    c=$(cpu_ticks) || break
    [ -n "$c" ] || break
    t=$(date +%s.%N)
    h=$(awk '/^VmHWM:/ { print $2 }' "/proc/$PID/status" 2>/dev/null || echo 0)
    r=$(awk '/^VmRSS:/ { print $2 }' "/proc/$PID/status" 2>/dev/null || echo 0)
    [ -n "$h" ] && hwm=$h
    [ -n "$r" ] && rss=$r
    # Steady state: from 2 s in (events enabled, binaries loaded) to the last reading.
    if [ -z "$first_t" ] && grep -q "sampling .* CPUs" "$LOG"; then
        first_t=$t; first_c=$c
    fi
    last_t=$t; last_c=$c
done
wait "$TIME_PID" || { echo "daemon_overhead: pgo-agent failed" >&2; cat "$LOG" >&2; exit 1; }

read -r wall user sys maxrss <"$TIMEFILE"
mode=$(sed -n 's/^pgo-agent: sampling mode \([a-z_]*\).*/\1/p' "$LOG" | head -1)
samples=$(sed -n 's/^pgo-agent: stopped; \([0-9]*\) samples read.*/\1/p' "$LOG")
echo "daemon_overhead: mode ${mode:-?}, $CPUS CPUs at $FREQ Hz, ${DURATION} s, workload: $CPUS x spin, profiling: $([ "$ALL" = 1 ] && echo 'every process' || echo 'the workload only')"
tail -1 "$LOG"
awk -v ft="$first_t" -v fc="$first_c" -v lt="$last_t" -v lc="$last_c" -v tck="$TCK" \
    -v wall="$wall" -v user="$user" -v sys="$sys" -v maxrss="$maxrss" -v hwm="$hwm" \
    -v rss="$rss" -v samples="${samples:-0}" 'BEGIN {
    steady = (lt > ft) ? 100 * (lc - fc) / tck / (lt - ft) : -1;
    total = (wall > 0) ? 100 * (user + sys) / wall : -1;
    printf "steady CPU: %.3f%% of one core (%.2f s CPU over %.1f s)\n", steady, (lc - fc) / tck, lt - ft;
    printf "total CPU:  %.3f%% of one core (user %.2f s + sys %.2f s over %.1f s)\n", total, user, sys, wall;
    per = (samples > 0) ? 1e6 * (user + sys) / samples : 0;
    printf "CPU per sample: %.1f us (%d samples)\n", per, samples;
    printf "peak RSS:   %.1f MB (VmHWM %.1f MB, last VmRSS %.1f MB)\n", maxrss / 1024, hwm / 1024, rss / 1024;
    cpu_ok = (steady >= 0 && steady < 1.0) ? "met" : "NOT met";
    rss_ok = (maxrss / 1024 < 128) ? "met" : "NOT met";
    printf "targets: CPU < 1%% of one core: %s; RSS < 128 MB: %s\n", cpu_ok, rss_ok;
}'
