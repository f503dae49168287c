#!/usr/bin/env bash
# What a pgo-agent profile buys: zstd (the C sources the zstd-sys crate bundles, fetched from
# crates.io with cargo) built with pseudo probes, trained under `pgo-agent run`, rebuilt with
# the pulled profile (clang-19 -fprofile-sample-use), and timed on other inputs, interleaved,
# against plain -O2, the probe build itself, instrumentation PGO (-fprofile-generate /
# llvm-profdata-19 merge / -fprofile-use) and a small `pgo-agent record` + `convert` profile.
#
#   bench/pgo_speedup.sh                   # full run (bench/pgo_speedup.md: time and figures)
#   QUICK=1 bench/pgo_speedup.sh           # smoke run: small inputs, 10 s of training, 3 rounds
#   ROUNDS=21 TRAIN_SECS=180 bench/pgo_speedup.sh
#
# Needs root (the daemon opens system-wide perf events), clang-19, llvm-profdata-19, cargo
# with access to crates.io (or zstd-sys in its cache), curl, jq. The daemon picks its sampling
# mode as it does everywhere (intel_lbr where the CPU has LBR, amd_branch, else cpu_clock);
# the mode used is printed with the table.
#
# Steps (work files in target/bench/pgo_speedup/; builds and the recording are cached by a
# hash of everything they depend on, profiles from the daemon are made anew every run):
#  1. `cargo vendor` of zstd-sys =$ZSTD_SYS_VERSION in a throwaway project; builds
#     bench/programs/corpus_gen.c and generates deterministic inputs: text, log and records
#     (see corpus_gen.c), seed 1 for training and seed 2 for evaluation.
#  2. Builds lib/common, lib/compress, lib/decompress (with huf_decompress_amd64.S, as zstd
#     builds by default) and bench/programs/zstd_bench.c in each variant (flags below).
#  3. record: `pgo-agent record --period $RECORD_PERIOD` of the probe build compressing and
#     decompressing a 3 x $RECORD_SLICE-byte slice of the training inputs at levels
#     $RECORD_LEVELS, then `pgo-agent convert --perfdata` (in the background, beside step 4).
#  4. instrumentation PGO: the -fprofile-generate build runs the training set once.
#  5. run: `pgo-agent run` (default config but for the filter on the probe build's path, the
#     state directory and the listen address) while the probe build runs the training set
#     over and over for $TRAIN_SECS s; `pgo-agent pull --agent http://127.0.0.1:$PORT` fetches
#     the profile over HTTP and symbolizes it with the probe build (extbinary).
#  6. Evaluation: $ROUNDS rounds; in each, every (input, level) task runs once in every
#     variant, the variants in an order rotated per task, at nice $EVAL_NICE. A task's time is
#     zstd_bench's fastest compression of $EVAL_CITERS and fastest decompression of
#     $EVAL_DITERS, in process CPU time (CPU_TIME=0: wall time); a variant's time in a round
#     is the sum over the inputs. Ratios are variant / -O2 within a round; the table gives
#     their median and min-max over the rounds.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
    TRAIN_BYTES=${TRAIN_BYTES:-262144}
    EVAL_BYTES=${EVAL_BYTES:-262144}
    TRAIN_SECS=${TRAIN_SECS:-10}
    ROUNDS=${ROUNDS:-3}
    EVAL_CITERS=${EVAL_CITERS:-2}
    EVAL_DITERS=${EVAL_DITERS:-2}
    RECORD_SLICE=${RECORD_SLICE:-1024}
    RECORD_LEVELS=${RECORD_LEVELS:-3}
else
    TRAIN_BYTES=${TRAIN_BYTES:-4194304}
    EVAL_BYTES=${EVAL_BYTES:-4194304}
    TRAIN_SECS=${TRAIN_SECS:-90}
    ROUNDS=${ROUNDS:-15}
    EVAL_CITERS=${EVAL_CITERS:-3}
    EVAL_DITERS=${EVAL_DITERS:-5}
    RECORD_SLICE=${RECORD_SLICE:-4096}
    RECORD_LEVELS=${RECORD_LEVELS:-1,3}
fi
LEVELS=${LEVELS:-1,3,6}
RECORD_PERIOD=${RECORD_PERIOD:-101}
ZSTD_SYS_VERSION=${ZSTD_SYS_VERSION:-2.1.2}
PORT=${PORT:-$((20000 + $$ % 10000))}
FREQ=${FREQ:-999}
# Time measured: the process's CPU time (1, left untouched by waits for a CPU on a shared
# machine) or wall time (0).
CPU_TIME=${CPU_TIME:-1}
# Niceness of the timed runs (root may lower it), so that other work on the machine takes
# less of their CPU.
EVAL_NICE=${EVAL_NICE:--10}
CC=${CC:-clang-19}
PROFDATA=${PROFDATA:-llvm-profdata-19}
JOBS=${JOBS:-$(nproc)}
WORK=${WORK:-$ROOT/target/bench/pgo_speedup}
mkdir -p "$WORK"

say() { echo "pgo_speedup: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || { say "needs root (pgo-agent run opens system-wide perf events)"; exit 2; }
for tool in "$CC" "$PROFDATA" cargo curl jq sha256sum; do
    command -v "$tool" >/dev/null || { say "needs $tool"; exit 2; }
done

AGENT=${PGO_AGENT:-}
if [ -z "$AGENT" ]; then
    (cd "$ROOT" && cargo build --release -q -p daemon --bin pgo-agent) >&2 ||
        say "cargo build failed; using the existing binary"
    AGENT="$ROOT/target/release/pgo-agent"
fi
[ -x "$AGENT" ] || die "no $AGENT"

DAEMON_PID=""
RECORD_PID=""
cleanup() {
    [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null || true
    [ -n "$RECORD_PID" ] && kill "$RECORD_PID" 2>/dev/null || true
}
trap cleanup EXIT

# 1. Sources and inputs.
FETCH="$WORK/fetch-$ZSTD_SYS_VERSION"
if ! ls -d "$FETCH"/vendor/zstd-sys-*/zstd/lib >/dev/null 2>&1; then
    say "fetching zstd-sys =$ZSTD_SYS_VERSION from crates.io (cargo vendor)"
    rm -rf "$FETCH"
    mkdir -p "$FETCH/src"
    cat >"$FETCH/Cargo.toml" <<EOF
[package]
name = "pgo-speedup-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
zstd-sys = { version = "=$ZSTD_SYS_VERSION", default-features = false }

[workspace]
EOF
    : >"$FETCH/src/lib.rs"
    (cd "$FETCH" && cargo vendor --quiet --versioned-dirs vendor >/dev/null)
fi
ZSTD_CRATE=$(ls -d "$FETCH"/vendor/zstd-sys-* | head -1)
ZLIB="$ZSTD_CRATE/zstd/lib"
ZSTD_VERSION=$(awk '/define ZSTD_VERSION_(MAJOR|MINOR|RELEASE)/ { v = v (v ? "." : "") $3 } END { print v }' "$ZLIB/zstd.h")
ZSTD_SOURCES=$(ls "$ZLIB"/common/*.c "$ZLIB"/compress/*.c "$ZLIB"/decompress/*.c "$ZLIB"/decompress/*.S)

INPUTS="$WORK/inputs"
mkdir -p "$INPUTS"
"$CC" -O2 -o "$INPUTS/corpus_gen" "$ROOT/bench/programs/corpus_gen.c"
KINDS="text log records"
for kind in $KINDS; do
    [ -s "$INPUTS/train.$kind.$TRAIN_BYTES" ] ||
        "$INPUTS/corpus_gen" "$kind" 1 "$TRAIN_BYTES" >"$INPUTS/train.$kind.$TRAIN_BYTES"
    [ -s "$INPUTS/eval.$kind.$EVAL_BYTES" ] ||
        "$INPUTS/corpus_gen" "$kind" 2 "$EVAL_BYTES" >"$INPUTS/eval.$kind.$EVAL_BYTES"
done
RECORD_INPUT="$INPUTS/record.$RECORD_SLICE"
: >"$RECORD_INPUT"
for kind in $KINDS; do head -c "$RECORD_SLICE" "$INPUTS/train.$kind.$TRAIN_BYTES" >>"$RECORD_INPUT"; done

# 2. Builds. build NAME FLAGS... : zstd's objects in $WORK/build/NAME-KEY, KEY a hash of the
# flags, the compiler, zstd's version and any profile named in the flags; the driver is
# compiled again whenever its source changes; prints the linked program's path.
COMMON_FLAGS=(-Wno-unused-command-line-argument)
PROBE_FLAGS=(-O2 -g -fdebug-info-for-profiling -fpseudo-probe-for-profiling
    -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer)
DRIVER="$ROOT/bench/programs/zstd_bench.c"
build() {
    local name=$1
    shift
    local key
    key=$({
        printf '%s\n' "$@" "$("$CC" --version | head -1)" "$ZSTD_CRATE"
        for flag in "$@"; do
            case $flag in -fprofile-sample-use=* | -fprofile-use=*) cat "${flag#*=}" ;; esac
        done
    } | sha256sum | cut -c1-12)
    local dir="$WORK/build/$name-$key"
    if [ ! -e "$dir/obj.done" ]; then
        say "building $name: $*"
        rm -rf "$WORK/build/$name"-* # one build per variant is kept
        mkdir -p "$dir/obj"
        printf '%s\n' $ZSTD_SOURCES |
            CC="$CC" OBJ="$dir/obj" INC="$ZLIB" xargs -P "$JOBS" -I{} sh -c \
                '"$CC" "$@" -I"$INC" -c "{}" -o "$OBJ/$(basename "{}").o"' sh "${COMMON_FLAGS[@]}" "$@"
        touch "$dir/obj.done"
    fi
    local driver_sum
    driver_sum=$(sha256sum "$DRIVER" | cut -c1-12)
    if [ "$(cat "$dir/driver.sum" 2>/dev/null)" != "$driver_sum" ] || [ ! -x "$dir/zstd_bench" ]; then
        "$CC" "$@" "${COMMON_FLAGS[@]}" -I"$ZLIB" -c "$DRIVER" -o "$dir/zstd_bench.o"
        "$CC" "$@" "${COMMON_FLAGS[@]}" -Wl,--build-id -o "$dir/zstd_bench.tmp" \
            "$dir/zstd_bench.o" "$dir"/obj/*.o
        mv "$dir/zstd_bench.tmp" "$dir/zstd_bench"
        echo "$driver_sum" >"$dir/driver.sum"
    fi
    echo "$dir/zstd_bench"
}

PROBE=$(build probe "${PROBE_FLAGS[@]}")
PROBE_KEY=$(sha256sum "$PROBE" | cut -c1-12)

# 3. The record profile, in the background (one core of ptrace stops).
REC_DIR="$WORK/record-$PROBE_KEY-$RECORD_SLICE-$RECORD_PERIOD-${RECORD_LEVELS//,/_}"
if [ ! -s "$REC_DIR/record.data" ]; then
    say "recording the probe build on $((3 * RECORD_SLICE)) bytes at levels $RECORD_LEVELS (pgo-agent record, in the background)"
    rm -rf "$REC_DIR"
    mkdir -p "$REC_DIR"
    ("$AGENT" record --period "$RECORD_PERIOD" --output "$REC_DIR/record.data.tmp" -- \
        "$PROBE" "$RECORD_INPUT" "$RECORD_LEVELS" 1 1 >"$REC_DIR/record.out" 2>"$REC_DIR/record.log" &&
        mv "$REC_DIR/record.data.tmp" "$REC_DIR/record.data") &
    RECORD_PID=$!
fi

# 4. Instrumentation PGO.
train_once() { # BINARY: every training input at every level, once
    for kind in $KINDS; do
        "$1" "$INPUTS/train.$kind.$TRAIN_BYTES" "$LEVELS" 1 4 >/dev/null
    done
}
O2=$(build o2 -O2)
RAW="$WORK/instr-raw"
GEN=$(build instr-gen -O2 "-fprofile-generate=$RAW")
rm -rf "$RAW"
say "training the instrumented build"
train_once "$GEN"
"$PROFDATA" merge -o "$WORK/instr.profdata" "$RAW"/*.profraw
INSTR=$(build instr-use -O2 "-fprofile-use=$WORK/instr.profdata")

if [ -n "$RECORD_PID" ]; then
    say "waiting for pgo-agent record"
    wait "$RECORD_PID" || { cat "$REC_DIR/record.log" >&2; die "pgo-agent record failed"; }
    RECORD_PID=""
fi
RECORD_SUMMARY=$(tail -1 "$REC_DIR/record.log")
"$AGENT" convert --perfdata "$REC_DIR/record.data" --binary "$PROBE" \
    --output "$WORK/record.prof" 2>"$WORK/convert.log" ||
    { cat "$WORK/convert.log" >&2; die "pgo-agent convert failed"; }

# 5. The daemon's profile.
STATE="$WORK/state"
rm -rf "$STATE"
cat >"$WORK/pgo-agent.toml" <<EOF
[sampling]
cpu_clock_frequency_hz = $FREQ
[filters]
exe_path_globs = ["$PROBE"]
[output]
state_dir = "$STATE"
listen_address = "127.0.0.1:$PORT"
EOF
"$AGENT" run --config "$WORK/pgo-agent.toml" 2>"$WORK/daemon.log" &
DAEMON_PID=$!
for _ in $(seq 100); do
    grep -q "sampling mode" "$WORK/daemon.log" && curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
    kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$WORK/daemon.log" >&2; die "pgo-agent run exited"; }
    sleep 0.1
done
MODE=$(sed -n 's/^pgo-agent: sampling mode \([a-z_]*\).*/\1/p' "$WORK/daemon.log" | head -1)
[ -n "$MODE" ] || { cat "$WORK/daemon.log" >&2; die "pgo-agent run did not start sampling"; }
say "training under pgo-agent run ($MODE) for $TRAIN_SECS s"
start=$(date +%s)
passes=0
while :; do
    train_once "$PROBE"
    passes=$((passes + 1))
    [ $(($(date +%s) - start)) -ge "$TRAIN_SECS" ] && break
done
sleep 2 # the HTTP list is a snapshot at most 1 s old
BUILD_ID=$(curl -sf "http://127.0.0.1:$PORT/api/v1/profiles" |
    jq -r --arg p "$PROBE" '.profiles[] | select(.binary_paths | index($p)) | .build_id' | head -1)
[ -n "$BUILD_ID" ] || die "the daemon has no profile for $PROBE"
RUN_SAMPLES=$(curl -sf "http://127.0.0.1:$PORT/api/v1/profiles" |
    jq -r --arg b "$BUILD_ID" '.profiles[] | select(.build_id == $b) | .samples')
"$AGENT" pull --agent "http://127.0.0.1:$PORT" --build-id "$BUILD_ID" --binary "$PROBE" \
    --output "$WORK/run.prof" 2>"$WORK/pull.log" ||
    { cat "$WORK/pull.log" >&2; die "pgo-agent pull failed"; }
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || true
DAEMON_PID=""

RUN_USE=$(build csspgo-run "${PROBE_FLAGS[@]}" "-fprofile-sample-use=$WORK/run.prof")
REC_USE=$(build csspgo-record "${PROBE_FLAGS[@]}" "-fprofile-sample-use=$WORK/record.prof")

# 6. Evaluation.
VARIANTS=(o2 probe run record instr)
declare -A BIN=([o2]=$O2 [probe]=$PROBE [run]=$RUN_USE [record]=$REC_USE [instr]=$INSTR)
RESULTS="$WORK/results.tsv"
: >"$RESULTS"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
say "evaluating: $ROUNDS rounds x 3 inputs x levels $LEVELS x ${#VARIANTS[@]} variants"
IFS=, read -r -a LEVEL_LIST <<<"$LEVELS"
for round in $(seq "$ROUNDS"); do
    task=0
    for kind in $KINDS; do
        for level in "${LEVEL_LIST[@]}"; do
            task=$((task + 1))
            n=${#VARIANTS[@]}
            for i in $(seq 0 $((n - 1))); do
                v=${VARIANTS[$(((i + round + task) % n))]}
                nice -n "$EVAL_NICE" "${BIN[$v]}" "$INPUTS/eval.$kind.$EVAL_BYTES" "$level" \
                    "$EVAL_CITERS" "$EVAL_DITERS" |
                    awk -v r="$round" -v v="$v" -v l="$level" -v cpu="$CPU_TIME" '{
                        print r "\t" v "\t" l "\t" (cpu ? $13 : $9) "\t" (cpu ? $15 : $11)
                    }' >>"$RESULTS"
            done
        done
    done
    say "round $round of $ROUNDS done"
done

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# The table: per round and variant, compress time per level and decompress time summed over
# the inputs; ratio to -O2 in the same round; median and min-max over the rounds.
ratio_table() {
    awk -F'\t' -v levels="$LEVELS" '
    { c[$1, $2, $3] += $4; d[$1, $2] += $5; t[$1, $2] += $4 + $5; rounds[$1] = 1; }
    function stat(arr, n,    i, j, x, s) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (arr[j] < arr[i]) { x = arr[i]; arr[i] = arr[j]; arr[j] = x }
        s = (n % 2) ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
        return sprintf("%.3f (%.3f–%.3f)", s, arr[1], arr[n])
    }
    function secs(arr, n,    i, j, x) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (arr[j] < arr[i]) { x = arr[i]; arr[i] = arr[j]; arr[j] = x }
        return sprintf("%.3f", ((n % 2) ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2) / 1e9)
    }
    END {
        nl = split(levels, lv, ",")
        split("o2 probe run record instr", vs, " ")
        name["o2"] = "-O2"
        name["probe"] = "-O2, probe build (no profile)"
        name["run"] = "CSSPGO, `pgo-agent run` profile"
        name["record"] = "CSSPGO, `record` + `convert` profile"
        name["instr"] = "instrumentation PGO"
        head = "| build |"; rule = "| --- |"
        for (k = 1; k <= nl; k++) { head = head " compress -" lv[k] " |"; rule = rule " --- |" }
        print head " decompress | total |"
        print rule " --- | --- |"
        nr = 0; for (r in rounds) nr++
        line = "| -O2: median seconds per round |"
        for (k = 1; k <= nl; k++) { for (r = 1; r <= nr; r++) a[r] = c[r, "o2", lv[k]]; line = line " " secs(a, nr) " |" }
        for (r = 1; r <= nr; r++) a[r] = d[r, "o2"]; line = line " " secs(a, nr) " |"
        for (r = 1; r <= nr; r++) a[r] = t[r, "o2"]; line = line " " secs(a, nr) " |"
        print line
        for (i = 2; i <= 5; i++) {
            v = vs[i]; line = "| " name[v] " |"
            for (k = 1; k <= nl; k++) {
                for (r = 1; r <= nr; r++) a[r] = c[r, v, lv[k]] / c[r, "o2", lv[k]]
                line = line " " stat(a, nr) " |"
            }
            for (r = 1; r <= nr; r++) a[r] = d[r, v] / d[r, "o2"]; line = line " " stat(a, nr) " |"
            for (r = 1; r <= nr; r++) a[r] = t[r, v] / t[r, "o2"]; line = line " " stat(a, nr) " |"
            print line
        }
    }' "$RESULTS"
}

CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo
echo "pgo_speedup: zstd $ZSTD_VERSION ($(basename "$ZSTD_CRATE")), $("$CC" --version | head -1)"
echo "machine: $CPU, $(nproc) CPUs, $(uname -r), $(date -u +%Y-%m-%d)"
echo "training: $((3 * TRAIN_BYTES)) bytes (text, log, records; seed 1) at levels $LEVELS"
echo "  pgo-agent run: mode $MODE, $TRAIN_SECS s ($passes passes), $RUN_SAMPLES samples"
echo "  pgo-agent record: $((3 * RECORD_SLICE)) bytes at levels $RECORD_LEVELS, period $RECORD_PERIOD: ${RECORD_SUMMARY#pgo-agent record: }"
echo "  instrumentation: one pass"
TIME_KIND=$([ "$CPU_TIME" = 1 ] && echo "CPU time" || echo "wall time")
echo "evaluation: $((3 * EVAL_BYTES)) bytes (text, log, records; seed 2), $ROUNDS rounds, fastest of"
echo "  $EVAL_CITERS compressions and $EVAL_DITERS decompressions per task, nice $EVAL_NICE; load average $LOAD_BEFORE before, $LOAD_AFTER after;"
echo "  $TIME_KIND / -O2's $TIME_KIND in the same round, median (min–max) over the rounds:"
echo
ratio_table
