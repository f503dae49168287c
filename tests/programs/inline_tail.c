/* inline_tail: inlining across several levels (level1 -> level2 -> level3 -> level4, all
 * static and small, so clang inlines them into the caller) and tail calls (dispatch_tail
 * ends in calls that clang emits as `jmp`). */
#include <stdio.h>

volatile int rounds = 3000;

static inline int level4(int x) { return (x ^ (x >> 3)) * 7; }
static inline int level3(int x) { return level4(x + 1) + (x & 5); }
static inline int level2(int x) { return level3(x * 3) - level4(x); }
static inline int level1(int x) { return level2(x) + level3(x >> 1); }

__attribute__((noinline)) int leaf_a(int x) { return level1(x) + 1; }
__attribute__((noinline)) int leaf_b(int x) { return level2(x) - 1; }

/* Both calls are in tail position: clang -O2 turns them into jumps. */
__attribute__((noinline)) int dispatch_tail(int x) {
  if (x & 1) return leaf_a(x);
  return leaf_b(x);
}

__attribute__((noinline)) int chain_tail(int x, int depth) {
  if (depth == 0) return dispatch_tail(x);
  return chain_tail(x + depth, depth - 1);
}

int main(void) {
  long acc = 0;
  for (int i = 0; i < rounds; i++) acc += chain_tail(i, i & 3) + level1(i);
  printf("%ld\n", acc);
  return 0;
}
