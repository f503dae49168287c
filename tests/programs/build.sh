#!/usr/bin/env bash
# Builds the corpus into OUTDIR/probe/ (pseudo probes) and OUTDIR/lines/ (line tables only).
# Usage: tests/programs/build.sh OUTDIR
# Idempotent: every run rebuilds into a temporary directory and renames it into place, so an
# interrupted build never leaves a half-built variant. Fails loudly on any error.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$1"
CC=clang-19
CXX=clang++-19
for tool in "$CC" "$CXX"; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool not found (apt-get install clang-19)" >&2; exit 1; }
done

COMMON=(-O2 -g -fdebug-info-for-profiling -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer)
PROBE=(-fpseudo-probe-for-profiling)
# Link only what is used (the C++ program needs nothing from libstdc++).
LDFLAGS=(-Wl,--as-needed -Wl,--build-id)

mkdir -p "$OUT"
for variant in probe lines; do
  flags=("${COMMON[@]}")
  if [ "$variant" = probe ]; then flags+=("${PROBE[@]}"); fi
  tmp="$(mktemp -d "$OUT/.$variant.XXXXXX")"
  chmod 755 "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  set -x
  "$CC" "${flags[@]}" -fPIC -shared "${LDFLAGS[@]}" -o "$tmp/libpgoshared.so" "$SRC/shlib.c"
  "$CC" "${flags[@]}" -fPIE -pie "${LDFLAGS[@]}" -o "$tmp/shlib_user" "$SRC/shlib_user.c" \
    -L"$tmp" -lpgoshared -Wl,-rpath,'$ORIGIN'
  "$CC" "${flags[@]}" -fno-pie -no-pie "${LDFLAGS[@]}" -o "$tmp/loop_count" "$SRC/loop_count.c"
  for prog in recursion inline_tail inlined_calls interp unroll; do
    "$CC" "${flags[@]}" -fPIE -pie "${LDFLAGS[@]}" -o "$tmp/$prog" "$SRC/$prog.c"
  done
  "$CXX" "${flags[@]}" -fPIE -pie -fno-exceptions -fno-rtti "${LDFLAGS[@]}" \
    -o "$tmp/virtual_calls" "$SRC/virtual_calls.cpp"
  { set +x; } 2>/dev/null
  rm -rf "$OUT/$variant"
  mv "$tmp" "$OUT/$variant"
  trap - EXIT
done
echo "corpus built in $OUT/{probe,lines}" >&2
