#!/usr/bin/env bash
# Large-binary convert benchmark: `pgo-agent convert` against `llvm-profgen-19` on one
# recording of a generated program with >= 20 MB of .text, of which a run touches a small
# part (issue 21: peak RSS <= 0.1x and wall time <= 0.2x llvm-profgen 19's, same output).
#
# Usage: bench/convert_large_binary.sh           (from anywhere; writes under target/bench/)
# Environment:
#   RUNS (default 5)          runs of each tool per variant, interleaved
#   VARIANTS (default "cs flat")  cs: context-sensitive probe profile (`--format=extbinary
#                             --csspgo-preinliner=false --gen-cs-nested-profile=false`);
#                             flat: `--format=extbinary --ignore-stack-samples` (a flat
#                             probe profile); skip: `--skip-symbolization` (unsymbolized)
#   AGENT=PATH                the pgo-agent binary to measure (and record with); skips cargo
#   SKIP_BUILD=1              use target/release/pgo-agent as it is, without cargo build
#   FUNCS (7000) TUS (16) BLOCKS (40) ROOTS (100) DEPTH (2) SEED (1): the generator's
#                             arguments (bench/programs/gen_large.py)
#   ROUNDS (40) PERIOD (3)    the recorded run (`large ROUNDS`) and the sampling period
#   MIN_TEXT (20971520)       the .text size the binary must have (bytes; 20 MiB)
#   MIN_SAMPLES (30000)       the samples the recording must have
#
# Steps:
#  1. builds pgo-agent (release) unless AGENT or SKIP_BUILD says otherwise;
#  2. generates the C sources (bench/programs/gen_large.py: thousands of noinline functions of
#     64-bit arithmetic, branches, short loops, inlined helpers and guarded calls; main calls
#     ROOTS of them spread over the binary, each calling others down to DEPTH), compiles the
#     translation units in parallel with clang-19 and mix.c's pseudo-probe flags (a probe
#     binary with DWARF and symbols), and asserts .text >= MIN_TEXT;
#  3. records `large ROUNDS` with the software LBR recorder (`pgo-agent record --script`).
#     Sources, binary and recording are cached in target/bench/large-KEY/, KEY hashing the
#     generator, its arguments, the flags, the compiler, PERIOD and ROUNDS (building takes a
#     few minutes, recording a few more: one ptrace stop per instruction);
#  4. for each variant runs both tools RUNS times, interleaved, under `/usr/bin/time`, keeping
#     each one's best wall time (with that run's CPU time, user + sys) and its largest peak
#     RSS (the kernel's maximum resident set size: anonymous and file-backed pages);
#  5. checks the outputs are equivalent (`llvm-profdata-19 merge --sample --text` of both
#     identical; unsymbolized: byte-identical) and prints ours / llvm-profgen with PASS/FAIL
#     against the targets (RSS <= 0.1, wall <= 0.2);
#  6. runs pgo-agent once more per variant under bench/rss_peak.py, which prints its peak
#     RSS's anonymous and file-backed parts and the resident bytes of each mapped file.
# Exits non-zero if a tool fails or the outputs differ (after printing the table and the
# first differing lines). It does not fail on the ratios: it is a measurement, not a test.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${RUNS:-5}"
VARIANTS="${VARIANTS:-cs flat}"
FUNCS="${FUNCS:-7000}"
TUS="${TUS:-16}"
BLOCKS="${BLOCKS:-40}"
ROOTS="${ROOTS:-100}"
DEPTH="${DEPTH:-2}"
SEED="${SEED:-1}"
ROUNDS="${ROUNDS:-40}"
PERIOD="${PERIOD:-3}"
MIN_TEXT="${MIN_TEXT:-20971520}"
MIN_SAMPLES="${MIN_SAMPLES:-30000}"
RSS_TARGET=0.1
WALL_TARGET=0.2
OUT="$ROOT/target/bench"
GEN="$ROOT/bench/programs/gen_large.py"
CC=clang-19
PROFGEN=llvm-profgen-19
PROFDATA=llvm-profdata-19
SIZE=llvm-size-19

for tool in "$CC" "$PROFGEN" "$PROFDATA" "$SIZE" python3 sha256sum awk xargs; do
  command -v "$tool" >/dev/null || { echo "bench: $tool not found" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time not found (Debian package time)" >&2; exit 1; }
for v in $VARIANTS; do
  case "$v" in cs | flat | skip) ;; *) echo "bench: unknown variant $v (cs, flat, skip)" >&2; exit 1 ;; esac
done
mkdir -p "$OUT"

if [ -n "${AGENT:-}" ]; then
  AGENT="$(realpath "$AGENT")"
  echo "== using $AGENT" >&2
elif [ "${SKIP_BUILD:-0}" = 1 ]; then
  AGENT="${CARGO_TARGET_DIR:-$ROOT/target}/release/pgo-agent"
  echo "== using $AGENT as built" >&2
else
  echo "== building pgo-agent (release)" >&2
  cargo build --release -p daemon --manifest-path "$ROOT/Cargo.toml" >&2
  AGENT="${CARGO_TARGET_DIR:-$ROOT/target}/release/pgo-agent"
fi
[ -x "$AGENT" ] || { echo "bench: $AGENT is not an executable" >&2; exit 1; }

# clang's output is not byte-reproducible, so the cache is keyed by what goes in and keeps the
# binary with its recording: the recording is only valid for the exact binary that ran.
CFLAGS=(-O2 -g -fpseudo-probe-for-profiling -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
  -fdebug-info-for-profiling -fPIE)
LDFLAGS=(-pie "-Wl,--build-id")
GEN_ARGS=(--tus "$TUS" --funcs "$FUNCS" --blocks "$BLOCKS" --roots "$ROOTS" --depth "$DEPTH" --seed "$SEED")
KEY="$( { cat "$GEN"; echo "${GEN_ARGS[*]}"; echo "${CFLAGS[*]} ${LDFLAGS[*]}"; "$CC" --version | head -1;
          echo "period=$PERIOD rounds=$ROUNDS"; } | sha256sum | cut -c1-16)"
CASE="$OUT/large-$KEY"
PROG="$CASE/large"
SCRIPT="$CASE/large.perfscript"
if [ -s "$SCRIPT" ] && [ -x "$PROG" ]; then
  echo "== using cached binary and recording in $CASE" >&2
else
  rm -rf "$OUT"/large-*
  TMP="$(mktemp -d "$OUT/.large.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  echo "== generating the sources (${GEN_ARGS[*]})" >&2
  python3 "$GEN" "$TMP/src" "${GEN_ARGS[@]}"
  echo "== compiling $TUS translation units on $(nproc) cores (takes a few minutes)" >&2
  # build.time, record.time: wall seconds, then CPU seconds (user + sys, children included).
  # shellcheck disable=SC2016  # expanded by the inner shell
  /usr/bin/time -f '%e %U %S' -o "$TMP/compile.time" sh -c 'd="$1"; shift
    find "$d/src" -name "*.c" -print0 | sort -z | xargs -0 -P "$(nproc)" -I{} "$@" -c {} -o {}.o' \
    sh "$TMP" "$CC" "${CFLAGS[@]}"
  /usr/bin/time -f '%e %U %S' -o "$TMP/link.time" \
    "$CC" "${CFLAGS[@]}" "${LDFLAGS[@]}" -o "$TMP/large" "$TMP"/src/*.c.o
  rm -f "$TMP"/src/*.c.o
  cat "$TMP/compile.time" "$TMP/link.time" |
    awk '{ w += $1; c += $2 + $3 } END { printf "%.0f %.0f\n", w, c }' >"$TMP/build.time"
  rm "$TMP/compile.time" "$TMP/link.time"
  echo "== recording (large $ROUNDS, period $PERIOD; takes a few minutes)" >&2
  /usr/bin/time -f '%e %U %S' -o "$TMP/record.time" \
    "$AGENT" record --period "$PERIOD" --script "$TMP/large.perfscript" -- "$TMP/large" "$ROUNDS" >/dev/null
  awk '{ printf "%.0f %.0f\n", $1, $2 + $3 }' "$TMP/record.time" >"$TMP/record.time.tmp"
  mv "$TMP/record.time.tmp" "$TMP/record.time"
  mv "$TMP" "$CASE"
  trap - EXIT
fi

# section_size NAME: the size of the binary's section NAME in bytes (0 if it has none).
section_size() { "$SIZE" -A "$PROG" | awk -v s="$1" '$1 == s { print $2; found = 1 } END { if (!found) print 0 }'; }
TEXT="$(section_size .text)"
if [ "$TEXT" -lt "$MIN_TEXT" ]; then
  echo "bench: .text is $TEXT bytes (< $MIN_TEXT): raise FUNCS or BLOCKS" >&2
  exit 1
fi
SAMPLES="$(grep -c '^ *0x[0-9a-f]*/0x' "$SCRIPT" || true)"
if [ "$SAMPLES" -lt "$MIN_SAMPLES" ]; then
  echo "bench: only $SAMPLES samples (< $MIN_SAMPLES): raise ROUNDS or lower PERIOD" >&2
  exit 1
fi

# Both tools read the binary and the script as a read from disk leaves them (see
# compare_llvm_profgen.sh: how a file sits in the page cache changes what mapping it costs).
echo "== putting the binary and the input in the page cache as a read from disk leaves them" >&2
for in in "$PROG" "$SCRIPT"; do
  sync "$in"
  dd if="$in" iflag=nocache count=0 status=none
  cat "$in" >/dev/null
done

# run_timed NAME CMD...: runs CMD under /usr/bin/time (output to target/bench/large.NAME.*);
# keeps the fastest wall time in WALL[NAME] with that run's CPU time (user + sys) in
# CPU[NAME], and the largest peak RSS (KiB) in RSS[NAME].
declare -A WALL CPU RSS
run_timed() {
  local name="$1"; shift
  local wall rss user sys
  if ! /usr/bin/time -f '%e %M %U %S' -o "$OUT/large.$name.time" "$@" \
      >"$OUT/large.$name.stdout" 2>"$OUT/large.$name.stderr"; then
    echo "bench: failed: $*" >&2
    tail -20 "$OUT/large.$name.stderr" >&2
    exit 1
  fi
  read -r wall rss user sys <"$OUT/large.$name.time"
  if [ -z "${WALL[$name]:-}" ] || awk -v a="$wall" -v b="${WALL[$name]}" 'BEGIN { exit !(a < b) }'; then
    WALL[$name]="$wall"
    CPU[$name]="$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')"
  fi
  if [ -z "${RSS[$name]:-}" ] || [ "$rss" -gt "${RSS[$name]}" ]; then
    RSS[$name]="$rss"
  fi
  echo "  $name: ${wall}s wall, $(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')s cpu, $((rss / 1024)) MiB peak RSS" >&2
}

flags() {
  case "$1" in
    cs) echo --format=extbinary --csspgo-preinliner=false --gen-cs-nested-profile=false ;;
    flat) echo --format=extbinary --ignore-stack-samples ;;
    skip) echo --skip-symbolization ;;
  esac
}

LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$RUNS"); do
  echo "== run $i/$RUNS" >&2
  for v in $VARIANTS; do
    read -ra F <<<"$(flags "$v")"
    run_timed "profgen_$v" "$PROFGEN" --perfscript "$SCRIPT" --binary "$PROG" --output "$OUT/large.theirs.$v" "${F[@]}"
    run_timed "ours_$v" "$AGENT" convert --perfscript "$SCRIPT" --binary "$PROG" --output "$OUT/large.ours.$v" "${F[@]}"
  done
done

echo "== checking outputs" >&2
declare -A SAME
DIFFER=0
for v in $VARIANTS; do
  if [ "$v" = skip ]; then
    theirs="$OUT/large.theirs.$v"; ours="$OUT/large.ours.$v"
  else
    theirs="$OUT/large.theirs.$v.canonical.txt"; ours="$OUT/large.ours.$v.canonical.txt"
    "$PROFDATA" merge --sample --text "$OUT/large.theirs.$v" -o "$theirs"
    "$PROFDATA" merge --sample --text "$OUT/large.ours.$v" -o "$ours"
  fi
  if cmp -s "$theirs" "$ours"; then
    SAME[$v]=same
  else
    SAME[$v]=DIFFER
    DIFFER=1
    echo "bench: $v outputs differ: diff $theirs $ours (first lines):" >&2
    diff "$theirs" "$ours" | head -20 >&2 || true
  fi
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN { print (r <= t ? "PASS" : "FAIL") }'; }
mib() { awk -v k="$1" 'BEGIN { printf "%.0f", k / 1024 }'; }
echo
printf 'binary: %s\n' "$PROG"
printf '  .text %.1f MB, .debug_info %.1f MB, .pseudo_probe %.1f MB, file %.1f MB\n' \
  "$(awk -v b="$TEXT" 'BEGIN { print b / 1e6 }')" \
  "$(awk -v b="$(section_size .debug_info)" 'BEGIN { print b / 1e6 }')" \
  "$(awk -v b="$(section_size .pseudo_probe)" 'BEGIN { print b / 1e6 }')" \
  "$(awk -v b="$(stat -c %s "$PROG")" 'BEGIN { print b / 1e6 }')"
# took FILE: "W s wall (C s cpu)" from a .time file of the cached case.
took() { [ -s "$1" ] && awk '{ printf "%s s wall (%s s cpu)", $1, $2 }' "$1" || echo '? s'; }
printf 'input: %d samples, %.1f MB perf script (large %s, period %s)\n' \
  "$SAMPLES" "$(awk -v b="$(stat -c %s "$SCRIPT")" 'BEGIN { print b / 1e6 }')" "$ROUNDS" "$PERIOD"
echo "built in $(took "$CASE/build.time"), recorded in $(took "$CASE/record.time")"
echo "pgo-agent: $AGENT; $(nproc) cores, best wall and largest RSS of $RUNS runs; load average at start: $LOAD"
printf '%-7s %30s %30s %12s %12s %9s %7s\n' variant "llvm-profgen-19: wall (cpu), RSS" \
  "pgo-agent: wall (cpu), RSS" "RSS ratio" "wall ratio" "cpu ratio" output
for v in $VARIANTS; do
  rr="$(ratio "${RSS[ours_$v]}" "${RSS[profgen_$v]}")"
  wr="$(ratio "${WALL[ours_$v]}" "${WALL[profgen_$v]}")"
  printf '%-7s %7ss (%6ss) %7s MiB %7ss (%6ss) %7s MiB %6s %5s %6s %5s %9s %7s\n' "$v" \
    "${WALL[profgen_$v]}" "${CPU[profgen_$v]}" "$(mib "${RSS[profgen_$v]}")" \
    "${WALL[ours_$v]}" "${CPU[ours_$v]}" "$(mib "${RSS[ours_$v]}")" \
    "$rr" "$(verdict "$rr" "$RSS_TARGET")" "$wr" "$(verdict "$wr" "$WALL_TARGET")" \
    "$(ratio "${CPU[ours_$v]}" "${CPU[profgen_$v]}")" "${SAME[$v]}"
done
echo "targets: RSS ratio <= $RSS_TARGET, wall ratio <= $WALL_TARGET, same output"

# Where pgo-agent's peak RSS goes (one more run per variant, polled; not timed).
for v in $VARIANTS; do
  read -ra F <<<"$(flags "$v")"
  echo "pgo-agent $v, $(python3 "$ROOT/bench/rss_peak.py" "$AGENT" convert --perfscript "$SCRIPT" \
    --binary "$PROG" --output "$OUT/large.ours.$v.breakdown" "${F[@]}")"
done
exit "$DIFFER"
