/* inlined_calls: calls made from inside inlined callees (mid is inlined twice into outer,
 * outer into main; leaf and other are not inlined). The flat line-based profile raises a
 * body count to the sum of its call targets only at the top level: LLVM 19's
 * updateCallsiteSamples does not walk the inlinees, so an inlinee's call line keeps the
 * count its ranges give (1753 against 1856 calls to leaf, for example). */
#include <stdio.h>

volatile int rounds = 6000;

__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) int other(int x) { return x ^ 5; }

static inline int mid(int x) {
  int r = 0;
  if (x & 1)
    r += leaf(x);
  else
    r += other(x);
  return r + leaf(x >> 1);
}

static inline int outer(int x) { return mid(x) + mid(x + 1); }

int main(void) {
  long acc = 0;
  for (int i = 0; i < rounds; i++) acc += outer(i);
  printf("%ld\n", acc);
  return 0;
}
