#!/usr/bin/env bash
# Fuzzes every parser of hostile input (issue #9) with cargo-fuzz (nightly only; CI does not
# run this). Seeds come from the corpus programs (target/corpus/, built by the e2e tests) and
# tests/fixtures/propeller_sample_1, and go into fuzz/corpus/<target>/ (committed, small) when
# that directory is empty; libFuzzer grows its working corpus in fuzz/work/<target>/ (not
# committed), reading the seeds too.
#
#   scripts/fuzz.sh <seconds> [target...]     run each target (default: all) for <seconds>
#   scripts/fuzz.sh seeds [target...]         only (re)build the seeds
#
# Prints, per target: executions, corpus size (files and bytes) and whether it crashed.
# Crash inputs land in fuzz/artifacts/<target>/. Runs under `nice -n 19`; set FUZZ_JOBS=2 to
# run two targets side by side.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
FUZZ="$ROOT/fuzz"
ALL_TARGETS=(perf_record perf_data perf_script perf_script_tally probe_section elf dwarf memprof unsymbolized llvm_text extbinary http)
CORPUS_BIN="$ROOT/target/corpus"
FIXTURE="$ROOT/tests/fixtures/propeller_sample_1"
OBJCOPY=${OBJCOPY:-llvm-objcopy-19}
CLANGXX=${CLANGXX:-clang++-19}

usage() { echo "usage: $0 <seconds>|seeds [target...]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
MODE=$1; shift
TARGETS=("$@"); [[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=("${ALL_TARGETS[@]}")

need_corpus() {
    if [[ ! -x "$CORPUS_BIN/probe/loop_count" ]]; then
        echo "building the corpus programs (cargo test -p e2e --test e2e offline::generate::)" >&2
        (cd "$ROOT" && cargo test -p e2e --release --test e2e offline::generate:: -- --list >/dev/null)
        (cd "$ROOT" && cargo test -p e2e --release --lib corpus >/dev/null) || true
    fi
    [[ -x "$CORPUS_BIN/probe/loop_count" ]] || { echo "no corpus in $CORPUS_BIN: run the e2e tests once" >&2; exit 1; }
}

# A recording (perf script / perf.data) of the corpus, any process directory.
recording() { ls -S "$CORPUS_BIN"/recordings/*/"$1" 2>/dev/null | tail -1; }

seed_perf_record() {
    python3 - "$1" <<'PY'
import struct, sys, os
out = sys.argv[1]
IP, TID, TIME, ADDR, READ, CALLCHAIN, ID, CPU, PERIOD, STREAM_ID, RAW, BRANCH = (
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
REGS_USER, STACK_USER, WEIGHT, IDENTIFIER = 1 << 12, 1 << 13, 1 << 14, 1 << 16
HW_INDEX = 1 << 17
def head(sel, misc, st, bst=0, rf=0, sid_all=1, ru=0, ri=0):
    return struct.pack("<BHQQQBQQ", sel, misc, st, bst, rf, sid_all, ru, ri)
def u64(*v): return b"".join(struct.pack("<Q", x) for x in v)
def u32(*v): return b"".join(struct.pack("<I", x) for x in v)
lbr = u64(0x401000, 0x401100, 0, 0x401120, 0x401000, 0)
seeds = {
  # SAMPLE: the live daemon's layout (ip, tid, time, callchain, branch stack + hw_idx).
  "sample_lbr": head(0, 2, IP|TID|TIME|CALLCHAIN|BRANCH, HW_INDEX)
      + u64(0x401000) + u32(7, 7) + u64(1000) + u64(3, 0xfffffffffffffe00, 0x401000, 0x401050)
      + u64(2, 0) + lbr,
  # SAMPLE: cpu-clock mode (no branch stack), perf record's default extras.
  "sample_cpu_clock": head(0, 2, IDENTIFIER|IP|TID|TIME|ID|CPU|PERIOD|CALLCHAIN)
      + u64(5, 0x401000) + u32(7, 7) + u64(1000, 5) + u32(1, 0) + u64(100) + u64(1, 0x401000),
  # SAMPLE: read values, raw data, user regs and stack, weight.
  "sample_misc": head(0, 2, IP|READ|RAW|REGS_USER|STACK_USER|WEIGHT, 0, 1 | 4, 1, 0b101)
      + u64(0x401000) + u64(10, 11, 12) + u32(4) + b"abcd" + u64(1, 0x10, 0x20) + u64(16) + b"s" * 16 + u64(16) + u64(9),
  "mmap2": head(2, 2, IP|TID|TIME, 0, 0, 1) + u32(7, 7) + u64(0x400000, 0x1000, 0) + u32(8, 1) + u64(12, 0) + u32(5, 2)
      + b"/bin/prog\0\0\0\0\0\0\0" + u32(7, 7) + u64(1000),
  "mmap2_build_id": head(2, 2 | (1 << 14), IP|TID, 0, 0, 1) + u32(7, 7) + u64(0x400000, 0x1000, 0)
      + bytes([20, 0, 0, 0]) + bytes(range(20)) + u32(5, 2) + b"/bin/prog\0\0\0\0\0\0\0" + u32(7, 7),
  "mmap": head(1, 2, IP|TID, 0, 0, 1) + u32(7, 7) + u64(0x400000, 0x1000, 0) + b"/bin/prog\0\0\0\0\0\0\0" + u32(7, 7),
  "comm": head(3, 1 << 13, IP|TID|TIME, 0, 0, 1) + u32(7, 7) + b"prog\0\0\0\0" + u32(7, 7) + u64(1000),
  "fork": head(4, 0, IP|TID) + u32(8, 7, 8, 7) + u64(1000),
  "exit": head(5, 0, IP|TID) + u32(8, 7, 8, 7) + u64(1000),
  "lost": head(6, 0, IP) + u64(1, 42),
  "lost_samples": head(7, 0, IP) + u64(42),
}
for name, data in seeds.items():
    open(os.path.join(out, name), "wb").write(data)
PY
}

seed_perf_data() {
    local out=$1 prog="$CORPUS_BIN/probe/loop_count"
    # A small real perf.data (cpu-clock, call chains) written by perf itself.
    if command -v perf >/dev/null; then
        perf record -q -e cpu-clock -c 4000000 -g -o "$out/cpu_clock_callchain.data" -- "$prog" >/dev/null 2>&1 || true
        perf record -q -e cpu-clock -c 8000000 -o "$out/cpu_clock.data" -- "$prog" >/dev/null 2>&1 || true
        rm -f "$out"/*.old
    fi
}

seed_perf_script() {
    local out=$1 f
    # The first samples of a hybrid (stack + LBR) and an LBR-only script, cut at a sample end.
    for f in loop_count-probe.perfscript recursion-lines.perfscript; do
        local src; src=$(recording "$f")
        [[ -n $src ]] || continue
        head -c 6000 "$src" | awk 'BEGIN{RS="\n\n"; ORS="\n\n"} {buf[NR]=$0} END{for(i=1;i<NR;i++) print buf[i]}' > "$out/$f"
        grep -v '^\s*[0-9a-f]*$' "$src" | grep '/' | head -n 4 > "$out/lbr-only-$f" || true
    done
}

# The parallel reader is checked against the sequential one on the same seeds.
seed_perf_script_tally() {
    seed_perf_script "$1"
}

seed_probe_section() {
    local out=$1 p
    for p in loop_count recursion inline_tail; do
        local tmp; tmp=$(mktemp)
        "$OBJCOPY" --dump-section .pseudo_probe="$tmp" "$CORPUS_BIN/probe/$p" /dev/null 2>/dev/null \
            && { printf '\x01' | cat - "$tmp" > "$out/probe-$p"; }
        "$OBJCOPY" --dump-section .pseudo_probe_desc="$tmp" "$CORPUS_BIN/probe/$p" /dev/null 2>/dev/null \
            && { printf '\x00' | cat - "$tmp" > "$out/desc-$p"; }
        rm -f "$tmp"
    done
}

seed_elf() {
    local out=$1
    cp "$CORPUS_BIN/probe/loop_count" "$out/loop_count-probe"
    cp "$CORPUS_BIN/lines/recursion" "$out/recursion-lines"
    cp "$FIXTURE/propeller_sample_1.bin.gen" "$out/propeller_sample_1"
}

seed_dwarf() {
    local out=$1 p v
    for p in inline_tail recursion; do
        for v in lines probe; do
            python3 - "$CORPUS_BIN/$v/$p" "$out/$p-$v" "$OBJCOPY" <<'PY'
import subprocess, sys, tempfile, os, struct
binary, out, objcopy = sys.argv[1:4]
# Section index order of fuzz/fuzz_targets/dwarf.rs.
names = [".debug_info", ".debug_abbrev", ".debug_line", ".debug_str", ".debug_line_str",
         ".debug_ranges", ".debug_rnglists", ".debug_addr", ".debug_str_offsets", ".debug_aranges"]
blob = b""
for i, n in enumerate(names):
    with tempfile.NamedTemporaryFile(delete=False) as t:
        path = t.name
    r = subprocess.run([objcopy, "--dump-section", f"{n}={path}", binary, "/dev/null"],
                       capture_output=True)
    if r.returncode == 0:
        data = open(path, "rb").read()
        blob += struct.pack("<BI", i, len(data)) + data
    os.unlink(path)
open(out, "wb").write(blob)
PY
        done
    done
}

seed_memprof() {
    local out=$1 tmp
    command -v "$CLANGXX" >/dev/null || { echo "no $CLANGXX: no memprof seeds" >&2; return; }
    tmp=$(mktemp -d)
    "$CLANGXX" -O1 -fmemory-profile -gmlt -fno-omit-frame-pointer -Wl,--build-id \
        "$ROOT/tests/programs/memprof/heap_contexts.cc" -o "$tmp/heap_contexts"
    (cd "$tmp" && MEMPROF_OPTIONS="log_path=$tmp/run" ./heap_contexts 3 1 1 >/dev/null)
    local raw; raw=$(ls "$tmp"/run.* | head -1)
    cp "$raw" "$out/heap_contexts.memprofraw"
    rm -rf "$tmp"
}

seed_unsymbolized() {
    local out=$1 f
    for f in loop_count-probe.cs.raw recursion-lines.cs.raw inline_tail-probe.flat.raw; do
        local src; src=$(recording "$f")
        [[ -n $src ]] && cp "$src" "$out/$f"
    done
    return 0
}

seed_llvm_text() {
    local out=$1 bin="$ROOT/target/release/pgo-agent" f
    [[ -x $bin ]] || bin="$ROOT/target/debug/pgo-agent"
    [[ -x $bin ]] || { echo "no pgo-agent binary: no llvm_text seeds" >&2; return; }
    for f in recursion-probe inline_tail-lines; do
        local prog=${f%-*} variant=${f#*-}
        "$bin" convert --perfscript "$(recording "$f.perfscript")" --binary "$CORPUS_BIN/$variant/$prog" \
            --format text -o "$out/$f.txt" >/dev/null 2>&1 || true
        # Keep seeds small.
        [[ -f "$out/$f.txt" ]] && head -c 8000 "$out/$f.txt" > "$out/$f.tmp" && mv "$out/$f.tmp" "$out/$f.txt"
    done
    return 0
}

seed_extbinary() {
    local out=$1 bin="$ROOT/target/release/pgo-agent" f
    [[ -x $bin ]] || bin="$ROOT/target/debug/pgo-agent"
    [[ -x $bin ]] || { echo "no pgo-agent binary: no extbinary seeds" >&2; return; }
    # A CS probe profile (pre-inlined, nested by default) and a line-based one.
    for f in recursion-probe inline_tail-lines loop_count-probe; do
        local prog=${f%-*} variant=${f#*-}
        "$bin" convert --perfscript "$(recording "$f.perfscript")" --binary "$CORPUS_BIN/$variant/$prog" \
            -o "$out/$f.extbinary" >/dev/null 2>&1 || true
    done
    return 0
}

seed_http() {
    local out=$1
    printf '/api/v1/profiles' > "$out/list"
    printf '/api/v1/profiles/0123456789abcdef?format=text&window=all' > "$out/text"
    printf '/api/v1/profiles/0123456789abcdef?format=pprof\nIf-None-Match: "x", *' > "$out/pprof"
    printf '/api/v1/profiles/0123456789abcdef/flamegraph.svg\nAccept-Encoding: gzip' > "$out/flamegraph"
    printf '/metrics' > "$out/metrics"
    printf '/healthz' > "$out/healthz"
    printf '/api/v1/profiles/ZZ?format=extbinary&window=1h' > "$out/bad"
}

seed() {
    local t=$1 dir="$FUZZ/corpus/$1"
    mkdir -p "$dir"
    if [[ $MODE == seeds ]]; then find "$dir" -type f -delete; fi
    if [[ -z $(ls -A "$dir") ]]; then
        need_corpus
        "seed_$t" "$dir"
    fi
}

run() {
    local t=$1 secs=$2 log="$FUZZ/logs/$1.log" status=ok
    mkdir -p "$FUZZ/logs" "$FUZZ/artifacts/$t" "$FUZZ/work/$t"
    (cd "$FUZZ" && nice -n 19 cargo +nightly fuzz run -O "$t" "work/$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="artifacts/$t/" > "$log" 2>&1) || status=CRASH
    local execs corp cov
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
    # libFuzzer's last status line: "corp: <inputs>/<size>" and "cov: <edges>".
    corp=$(grep -o 'corp: [0-9]*/[0-9]*[bKM]*' "$log" | tail -1 | cut -d' ' -f2)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    printf '%-14s %6ss  execs %-10s corpus %-12s cov %-6s %s\n' \
        "$t" "$secs" "${execs:-?}" "${corp:-?}" "${cov:-?}" "$status"
}

for t in "${TARGETS[@]}"; do seed "$t"; done
[[ $MODE == seeds ]] && { du -sb "$FUZZ"/corpus/* ; exit 0; }
[[ $MODE =~ ^[0-9]+$ ]] || usage
(cd "$FUZZ" && cargo +nightly fuzz build -O >/dev/null)
jobs_max=${FUZZ_JOBS:-1}
for t in "${TARGETS[@]}"; do
    while [[ $(jobs -rp | wc -l) -ge $jobs_max ]]; do wait -n || true; done
    run "$t" "$MODE" &
done
wait
