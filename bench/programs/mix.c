// Benchmark workload for `bench/compare_llvm_profgen.sh`: a little of everything a real
// program's profile has — several functions, calls that get inlined, a loop nest, recursion,
// and indirect calls through a table of function pointers — in a few million instructions,
// so that the software LBR recorder (one ptrace stop per instruction) finishes in minutes.
// Usage: mix ROUNDS   (the result is printed so nothing is optimized away)
#include <stdio.h>
#include <stdlib.h>

#define N 8

static unsigned long long state = 0x9e3779b97f4a7c15ull;

static inline unsigned rng(void) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return (unsigned)state;
}

static inline int clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// Loop nest: a small matrix product, the inner loop unrolled and vectorized by -O2.
__attribute__((noinline)) static long matmul(const int *a, const int *b, int *c) {
  long trace = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      int s = 0;
      for (int k = 0; k < N; k++) s += a[i * N + k] * b[k * N + j];
      c[i * N + j] = clamp(s, -100000, 100000);
      trace += c[i * N + j];
    }
  return trace;
}

// The interpreter's opcodes, called indirectly through `ops`.
typedef long (*op_fn)(long acc, long arg);
__attribute__((noinline)) static long op_add(long acc, long arg) { return acc + arg; }
__attribute__((noinline)) static long op_mul(long acc, long arg) { return acc * (arg | 1) % 1000003; }
__attribute__((noinline)) static long op_xor(long acc, long arg) { return acc ^ (arg << 3); }
__attribute__((noinline)) static long op_shift(long acc, long arg) {
  return arg & 1 ? acc >> 1 : acc << 1;
}
static const op_fn ops[] = {op_add, op_mul, op_xor, op_shift};

__attribute__((noinline)) static long interpret(const unsigned char *code, int len, long acc) {
  for (int pc = 0; pc < len; pc++) {
    unsigned char insn = code[pc];
    if (insn == 0xff) {  // a rare branch back, bounded by the caller's program
      acc += pc;
      continue;
    }
    acc = ops[insn & 3](acc, insn >> 2);
  }
  return acc;
}

// Recursion: calls of the same function in many contexts.
__attribute__((noinline)) static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

// Called from two sites, inlined into both.
static inline unsigned mix_hash(unsigned h, unsigned v) {
  h ^= v + 0x9e3779b9u + (h << 6) + (h >> 2);
  return h;
}

__attribute__((noinline)) static unsigned hash_block(const int *v, int n) {
  unsigned h = 0;
  for (int i = 0; i < n; i++) {
    if (v[i] & 1)
      h = mix_hash(h, (unsigned)v[i]);
    else
      h = mix_hash(h ^ 0x55u, (unsigned)v[i] >> 1);
  }
  return h;
}

// Insertion sort with an indirect comparator.
typedef int (*cmp_fn)(int, int);
__attribute__((noinline)) static int cmp_up(int x, int y) { return x - y; }
__attribute__((noinline)) static int cmp_down(int x, int y) { return y - x; }
__attribute__((noinline)) static void sort(int *v, int n, cmp_fn cmp) {
  for (int i = 1; i < n; i++) {
    int x = v[i], j = i - 1;
    while (j >= 0 && cmp(v[j], x) > 0) {
      v[j + 1] = v[j];
      j--;
    }
    v[j + 1] = x;
  }
}

__attribute__((noinline)) static long round_(int r) {
  int a[N * N], b[N * N], c[N * N];
  unsigned char code[48];
  for (int i = 0; i < N * N; i++) {
    a[i] = (int)(rng() % 64) - 32;
    b[i] = (int)(rng() % 64) - 32;
  }
  for (int i = 0; i < (int)sizeof code; i++) code[i] = (unsigned char)(rng() % 255);
  long out = matmul(a, b, c);
  out += interpret(code, (int)sizeof code, r);
  out += fib(8 + (r & 3));
  out += hash_block(c, N * N);
  sort(c, 24, (r & 1) ? cmp_up : cmp_down);
  return out + c[0];
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 10;
  long total = 0;
  for (int r = 0; r < rounds; r++) total += round_(r);
  printf("%ld\n", total);
  return 0;
}
