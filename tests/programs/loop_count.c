/* loop_count: the ground-truth program. count_loop runs its loop body exactly TRIP_COUNT
 * times (the trip count comes through a volatile, so the compiler cannot fold or specialise
 * it, and the pragma keeps the loop rolled and scalar). Built non-PIE.
 * Expected: every instruction of the loop body executes TRIP_COUNT times; the loop's
 * back-edge (the rotated loop's bottom conditional branch) is taken TRIP_COUNT - 1 times;
 * the rest of count_loop executes once. */
#include <stdio.h>

#define TRIP_COUNT 12345

volatile int trip_count = TRIP_COUNT;

__attribute__((noinline)) unsigned count_loop(int n) {
  unsigned acc = 0;
#pragma clang loop unroll(disable) vectorize(disable) interleave(disable)
  for (int i = 0; i < n; i++) {
    acc = acc * 31u + (unsigned)i;
  }
  return acc;
}

int main(void) {
  printf("%u\n", count_loop(trip_count));
  return 0;
}
