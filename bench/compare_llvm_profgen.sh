#!/usr/bin/env bash
# Convert benchmark: `pgo-agent convert` against `llvm-profgen-19` on the same hybrid perf
# script (LBR + call stacks, >= 200,000 samples), in the same run, best of RUNS each.
#
# Usage: bench/compare_llvm_profgen.sh            (from anywhere; writes under target/bench/)
# Environment: RUNS (default 3), ROUNDS (program argument, default 350), PERIOD (default 2),
#              MIN_SAMPLES (default 200000).
#
# Steps:
#  1. builds pgo-agent (release) and bench/programs/mix.c with clang-19 (pseudo-probe flags);
#  2. records the program with the software LBR recorder (`pgo-agent record --script`); the
#     binary and its recording are cached in target/bench/mix-KEY/, KEY hashing the source,
#     flags, compiler, PERIOD and ROUNDS, so reruns skip this (it takes minutes: one ptrace
#     stop per instruction);
#  3. derives a second input with realistic LBR cycle counts: the recorder writes 0 cycles in
#     every entry, so its samples repeat far more than hardware samples do (hardware LBRs
#     give each entry the cycles since the previous branch, and samples with the same
#     branches then differ in their cycles). Every entry gets a cycle count drawn from the
#     distribution of the real Skylake recording in ../shared/corpus (119,424 entries: 70 %
#     are 1 cycle); cached next to the recording;
#  4. for two variants — the full profile (`--format=extbinary --csspgo-preinliner=false
#     --gen-cs-nested-profile=false`) and `--skip-symbolization` — runs both tools RUNS
#     times on each input, interleaved, and keeps each one's best wall time (and that run's
#     CPU time);
#  5. checks the outputs are equivalent (extbinary: `llvm-profdata-19 merge --sample --text`
#     of both is identical; unsymbolized: byte-identical) and prints ours / llvm-profgen.
# Exits non-zero if a tool fails or the outputs differ. It does not fail on the ratio: it is
# a measurement, not a test.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${RUNS:-3}"
ROUNDS="${ROUNDS:-350}"
PERIOD="${PERIOD:-2}"
MIN_SAMPLES="${MIN_SAMPLES:-200000}"
OUT="$ROOT/target/bench"
CC=clang-19
PROFGEN=llvm-profgen-19
PROFDATA=llvm-profdata-19

for tool in "$CC" "$PROFGEN" "$PROFDATA" cargo sha256sum awk; do
  command -v "$tool" >/dev/null || { echo "bench: $tool not found" >&2; exit 1; }
done
mkdir -p "$OUT"

echo "== building pgo-agent (release)" >&2
cargo build --release -p daemon --manifest-path "$ROOT/Cargo.toml" >&2
AGENT="$ROOT/target/release/pgo-agent"

# clang's output is not byte-reproducible (temporary object names), so the cache is keyed by
# what goes in (source, flags, compiler, recording settings) and keeps the binary with its
# recording: the recording is only valid for the exact binary that ran.
CFLAGS=(-O2 -g -fpseudo-probe-for-profiling -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
  -fdebug-info-for-profiling -fPIE -pie -Wl,--build-id)
KEY="$( { cat "$ROOT/bench/programs/mix.c"; echo "${CFLAGS[*]}"; "$CC" --version | head -1;
          echo "period=$PERIOD rounds=$ROUNDS"; } | sha256sum | cut -c1-16)"
CASE="$OUT/mix-$KEY"
PROG="$CASE/mix"
SCRIPT="$CASE/mix.perfscript"
if [ -s "$SCRIPT" ] && [ -x "$PROG" ]; then
  echo "== using cached binary and recording in $CASE" >&2
else
  rm -rf "$OUT"/mix-*
  TMP="$(mktemp -d "$OUT/.mix.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  echo "== building bench/programs/mix.c" >&2
  "$CC" "${CFLAGS[@]}" -o "$TMP/mix" "$ROOT/bench/programs/mix.c"
  echo "== recording (period $PERIOD, $ROUNDS rounds; takes a few minutes)" >&2
  "$AGENT" record --period "$PERIOD" --script "$TMP/mix.perfscript" -- "$TMP/mix" "$ROUNDS" >/dev/null
  mv "$TMP" "$CASE"
  trap - EXIT
fi

# The input with hardware-like cycle counts (see step 3), made once per recording.
CYCLES_SCRIPT="$CASE/mix-cycles.perfscript"
if [ ! -s "$CYCLES_SCRIPT" ]; then
  echo "== deriving the input with cycle counts" >&2
  awk 'BEGIN {
         srand(1);
         # value:count of the 24 most frequent cycle counts of the Skylake recording (98.7 %).
         n = split("1:83391 4:6375 3:3317 5:2502 7:2371 6:2171 9:1642 2:1641 8:1598 11:1546 12:1395 13:1376 15:1245 27:1192 10:1036 14:981 19:706 20:705 23:523 33:503 35:500 34:421 16:388 18:335", pairs, " ");
         total = 0;
         for (i = 1; i <= n; i++) { split(pairs[i], kv, ":"); value[i] = kv[1]; total += kv[2]; cum[i] = total }
       }
       function draw(   r, i) { r = rand() * total; for (i = 1; i < n; i++) if (r < cum[i]) break; return value[i] }
       /^ 0x/ {
         for (i = 1; i <= NF; i++) {
           k = split($i, f, "/");
           if (k >= 6) { f[6] = draw(); t = f[1]; for (j = 2; j <= k; j++) t = t "/" f[j]; $i = t }
         }
         $0 = " " $0;  # rebuilding the fields dropped the leading space branch-stack lines need
       }
       { print }' "$SCRIPT" > "$CYCLES_SCRIPT.tmp"
  mv "$CYCLES_SCRIPT.tmp" "$CYCLES_SCRIPT"
fi

# One sample = its call-stack lines, then one line of LBR entries (` 0xFROM/0xTO/...`).
SAMPLES="$(grep -c '^ *0x[0-9a-f]*/0x' "$SCRIPT" || true)"
BYTES="$(stat -c %s "$SCRIPT")"
echo "input: $SCRIPT" >&2
if [ "$SAMPLES" -lt "$MIN_SAMPLES" ]; then
  echo "bench: only $SAMPLES samples (< $MIN_SAMPLES): raise ROUNDS" >&2
  exit 1
fi

# run_timed NAME CMD...: runs CMD (output to target/bench/NAME.std{out,err}); keeps the
# fastest wall time in BEST[NAME] and that run's CPU time (user + sys) in CPU[NAME].
declare -A BEST CPU
run_timed() {
  local name="$1"; shift
  local t real user sys
  if ! t="$( { TIMEFORMAT='%R %U %S'; time "$@" >"$OUT/$name.stdout" 2>"$OUT/$name.stderr"; } 2>&1 )"; then
    echo "bench: failed: $*" >&2
    cat "$OUT/$name.stderr" >&2
    exit 1
  fi
  read -r real user sys <<<"$t"
  if [ -z "${BEST[$name]:-}" ] || awk -v a="$real" -v b="${BEST[$name]}" 'BEGIN { exit !(a < b) }'; then
    BEST[$name]="$real"
    CPU[$name]="$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.3f", u + s }')"
  fi
  echo "  $name: ${real}s wall, $(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.3f", u + s }')s cpu" >&2
}

# How an input sits in the page cache changes what mapping it costs, and so the wall time
# (not the work): a file written with small writes (awk's here, perf script's stdio) is
# held in 4 KiB pages, one read from disk (or written in large writes, as `pgo-agent
# record` writes) in large folios on kernels with large-folio page caches (ext4 from
# Linux 6.16, xfs, ...), which a mapping maps 2 MiB at a time and touches and unmaps
# faster (bench/README.md, "Page cache"). So each input is dropped from the page cache
# and read once, sequentially, before the runs: both tools read it as a read from disk
# leaves it, whatever wrote it. (bench/README.md also gives the ratio for a file held in
# 4 KiB pages.)
echo "== putting the inputs in the page cache as a read from disk leaves them" >&2
for in in "$SCRIPT" "$CYCLES_SCRIPT"; do
  sync "$in"
  dd if="$in" iflag=nocache count=0 status=none
  cat "$in" >/dev/null
done

LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
FULL=(--format=extbinary --csspgo-preinliner=false --gen-cs-nested-profile=false)
SKIP=(--skip-symbolization)

for i in $(seq 1 "$RUNS"); do
  echo "== run $i/$RUNS" >&2
  for input in recorder cycles; do
    in="$SCRIPT"; [ "$input" = cycles ] && in="$CYCLES_SCRIPT"
    run_timed "profgen_full_$input" "$PROFGEN" --perfscript "$in" --binary "$PROG" --output "$OUT/theirs.$input.extbinary" "${FULL[@]}"
    run_timed "ours_full_$input" "$AGENT" convert --perfscript "$in" --binary "$PROG" --output "$OUT/ours.$input.extbinary" "${FULL[@]}"
    run_timed "profgen_skip_$input" "$PROFGEN" --perfscript "$in" --binary "$PROG" --output "$OUT/theirs.$input.unsymbolized" "${SKIP[@]}"
    run_timed "ours_skip_$input" "$AGENT" convert --perfscript "$in" --binary "$PROG" --output "$OUT/ours.$input.unsymbolized" "${SKIP[@]}"
  done
done

echo "== checking outputs" >&2
for input in recorder cycles; do
  "$PROFDATA" merge --sample --text "$OUT/theirs.$input.extbinary" -o "$OUT/theirs.$input.canonical.txt"
  "$PROFDATA" merge --sample --text "$OUT/ours.$input.extbinary" -o "$OUT/ours.$input.canonical.txt"
  if ! cmp -s "$OUT/theirs.$input.canonical.txt" "$OUT/ours.$input.canonical.txt"; then
    echo "bench: profiles differ: diff $OUT/theirs.$input.canonical.txt $OUT/ours.$input.canonical.txt" >&2
    exit 1
  fi
  if ! cmp -s "$OUT/theirs.$input.unsymbolized" "$OUT/ours.$input.unsymbolized"; then
    echo "bench: unsymbolized outputs differ: diff $OUT/theirs.$input.unsymbolized $OUT/ours.$input.unsymbolized" >&2
    exit 1
  fi
done
echo "outputs equivalent (extbinary: same canonical text; unsymbolized: byte-identical)" >&2

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
echo
printf 'input: %d samples, %.1f MB perf script (mix %s, period %s), %s cores, best of %s\n' \
  "$SAMPLES" "$(awk -v b="$BYTES" 'BEGIN { print b / 1e6 }')" "$ROUNDS" "$PERIOD" "$(nproc)" "$RUNS"
echo "load average at start: $LOAD (wall times on a busy machine are noisy; cpu = user + sys)"
printf '%-34s %16s %16s %11s %10s\n' variant "llvm-profgen-19" "pgo-agent" "wall ratio" "cpu ratio"
row() {
  printf '%-34s %7ss (%5ss) %7ss (%5ss) %11s %10s\n' "$1" "${BEST[profgen_$2]}" "${CPU[profgen_$2]}" \
    "${BEST[ours_$2]}" "${CPU[ours_$2]}" "$(ratio "${BEST[ours_$2]}" "${BEST[profgen_$2]}")" \
    "$(ratio "${CPU[ours_$2]}" "${CPU[profgen_$2]}")"
}
row "extbinary profile, recorder text" full_recorder
row "--skip-symbolization, recorder" skip_recorder
row "extbinary profile, with cycles" full_cycles
row "--skip-symbolization, with cycles" skip_cycles
