#!/usr/bin/env python3
"""Generate the C sources of a large program for `bench/convert_large_binary.sh`.

The program is big (thousands of functions, > 20 MB of x86-64 .text at -O2) but a run touches
only a small part of it, like a real profile of a real binary: `main` calls a few hundred "hot
root" functions, spread over the whole binary, through a table of function pointers; each
function calls a few others further on, down to a bounded depth, and only on some paths. The
rest of the code is never executed.

Every function is a chain of 64-bit arithmetic blocks (multiplications by odd constants,
rotations, xors: nothing the optimizer can fold or vectorize), if/else blocks whose arms are too
long to become conditional moves, short loops with data-dependent trip counts, calls of small
static helpers that get inlined (inline frames in the DWARF and the pseudo-probes), and guarded
calls of other functions. No switches (jump tables would make the code bigger to compile but
not more realistic).

Usage: gen_large.py OUTDIR [--tus N] [--funcs N] [--blocks N] [--roots N] [--depth N] [--seed N]
Writes OUTDIR/large.h, OUTDIR/tu_NN.c (N translation units) and OUTDIR/main.c. The output is a
function of the arguments only (own PRNG), so the benchmark can key its cache by this script and
its arguments.
"""
import argparse
import os

MASK = (1 << 64) - 1


class Rng:
    """splitmix64: deterministic whatever the Python version."""

    def __init__(self, seed):
        self.s = seed & MASK

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n

    def odd(self):
        return self.next() | 1


VARS = ["a", "b", "c", "d"]


def op(rng):
    """One statement of an arithmetic chain over the four state variables."""
    x = VARS[rng.below(4)]
    y = VARS[rng.below(4)]
    while y == x:
        y = VARS[rng.below(4)]
    k = rng.below(7)
    if k == 0:
        return f"{x} = {x} * 0x{rng.odd():x}ull + {y};"
    if k == 1:
        return f"{x} ^= ROTL({y}, {1 + rng.below(63)});"
    if k == 2:
        return f"{x} += {y} >> {1 + rng.below(40)};"
    if k == 3:
        return f"{x} -= {y} * 0x{rng.odd() & 0xFFFFFFFF:x}u;"
    if k == 4:
        return f"{x} ^= {y} + 0x{rng.next():x}ull;"
    if k == 5:
        return f"{x} = ROTL({x} + {y}, {1 + rng.below(63)});"
    return f"{x} |= {y} & 0x{rng.next():x}ull;"


def chain(rng, n, indent):
    return [indent + op(rng) for _ in range(n)]


def gen_function(rng, idx, nfuncs, blocks, helpers, tu):
    lines = [
        f"__attribute__((noinline)) u64 f{idx}(u64 x, u64 y, int depth) {{",
        f"  u64 a = x, b = y, c = x ^ 0x{rng.next():x}ull, d = y + 0x{rng.next():x}ull;",
    ]
    ncalls = 0
    for _ in range(blocks):
        k = rng.below(10)
        if k <= 3:  # straight-line arithmetic
            lines += chain(rng, 3 + rng.below(4), "  ")
        elif k <= 6:  # if/else with arms long enough to stay branches
            v = VARS[rng.below(4)]
            lines.append(f"  if (({v} >> {rng.below(60)}) & {1 + rng.below(3)}) {{")
            lines += chain(rng, 3 + rng.below(4), "    ")
            if rng.below(3):
                lines.append("  } else {")
                lines += chain(rng, 3 + rng.below(4), "    ")
            lines.append("  }")
        elif k == 7:  # a short loop, trip count from the data
            v = VARS[rng.below(4)]
            lines.append(f"  for (unsigned i = 0; i < (unsigned)({v} & 3) + 1; i++) {{")
            lines += chain(rng, 2 + rng.below(3), "    ")
            lines.append("  }")
        elif k == 8:  # an inlined helper
            x, y = VARS[rng.below(4)], VARS[rng.below(4)]
            lines.append(f"  {x} = h{tu}_{rng.below(helpers)}({x}, {y});")
        else:  # a guarded call of a function further on (the call graph is a DAG)
            if ncalls < 2 and idx + 1 < nfuncs:
                callee = idx + 1 + rng.below(min(nfuncs - idx - 1, 4000))
                v = VARS[rng.below(4)]
                lines.append(f"  if (depth > 0 && (({v} >> {rng.below(56)}) & 3) == 0)")
                lines.append(f"    {VARS[rng.below(4)]} += f{callee}(a, {v}, depth - 1);")
                ncalls += 1
            else:
                lines += chain(rng, 3, "  ")
    lines.append("  return a ^ b ^ c ^ d;")
    lines.append("}")
    return lines


def gen_helpers(rng, tu, n):
    out = []
    for h in range(n):
        out.append(f"static inline u64 h{tu}_{h}(u64 a, u64 b) {{")
        out.append("  u64 c = a ^ b, d = b + 1;")
        out += chain(rng, 4, "  ")
        out.append("  return (a + c) ^ d;")
        out.append("}")
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("outdir")
    p.add_argument("--tus", type=int, default=16)
    p.add_argument("--funcs", type=int, default=7000)
    p.add_argument("--blocks", type=int, default=40)
    p.add_argument("--roots", type=int, default=100)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    rng = Rng(args.seed)
    helpers = 8

    header = [
        "// Generated by bench/programs/gen_large.py: do not edit.",
        "typedef unsigned long long u64;",
        "#define ROTL(v, r) (((v) << (r)) | ((v) >> (64 - (r))))",
    ] + [f"u64 f{i}(u64 x, u64 y, int depth);" for i in range(args.funcs)]
    with open(os.path.join(args.outdir, "large.h"), "w") as f:
        f.write("\n".join(header) + "\n")

    per_tu = (args.funcs + args.tus - 1) // args.tus
    for tu in range(args.tus):
        lines = ['// Generated by bench/programs/gen_large.py: do not edit.', '#include "large.h"']
        lines += gen_helpers(rng, tu, helpers)
        for idx in range(tu * per_tu, min(args.funcs, (tu + 1) * per_tu)):
            lines += gen_function(rng, idx, args.funcs, args.blocks, helpers, tu)
        with open(os.path.join(args.outdir, f"tu_{tu:02d}.c"), "w") as f:
            f.write("\n".join(lines) + "\n")

    # Hot roots: evenly spread over the binary, so the touched code is scattered through it.
    step = args.funcs // args.roots
    roots = [i * step + rng.below(step) for i in range(args.roots)]
    main_c = [
        "// Generated by bench/programs/gen_large.py: do not edit.",
        "// Usage: large ROUNDS   (the result is printed so nothing is optimized away)",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        '#include "large.h"',
        "typedef u64 (*fn)(u64, u64, int);",
        "static fn const hot[] = {" + ", ".join(f"f{r}" for r in roots) + "};",
        "int main(int argc, char **argv) {",
        "  int rounds = argc > 1 ? atoi(argv[1]) : 1;",
        "  u64 acc = 0x9e3779b97f4a7c15ull;",
        "  for (int r = 0; r < rounds; r++)",
        "    for (unsigned i = 0; i < sizeof hot / sizeof hot[0]; i++)",
        f"      acc += hot[i](acc, (u64)r * 0x{rng.odd():x}ull + i, {args.depth});",
        '  printf("%llu\\n", acc);',
        "  return 0;",
        "}",
    ]
    with open(os.path.join(args.outdir, "main.c"), "w") as f:
        f.write("\n".join(main_c) + "\n")


if __name__ == "__main__":
    main()
