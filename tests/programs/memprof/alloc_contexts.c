// Allocation contexts with known totals, for the uprobe heap sampling test (issue 7) and
// bench/heap_uprobe_overhead.sh.
//
//   alloc_contexts ITERATIONS [WORK]
//
// Per iteration: ctx_small mallocs 64 bytes; every 10th iteration ctx_medium mallocs 4000
// bytes; every 20th ctx_calloc callocs 8 x 1000 bytes. Each block is touched, published
// through a volatile pointer (so the compiler cannot drop the pair) and freed. WORK adds
// that many rounds of integer mixing per iteration (the compute between allocations of a
// realistic program; the benchmark's knob). The truth is printed as
// "CONTEXT <name> <calls> <bytes>" lines on stdout, then "ELAPSED_NS <ns>": the loop's
// wall time (what the overhead benchmark compares with and without sampling).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *volatile sink;
volatile unsigned long mixed;

__attribute__((noinline)) static void ctx_small(void) {
  char *p = malloc(64);
  p[0] = 1;
  sink = p;
  free(p);
}

__attribute__((noinline)) static void ctx_medium(void) {
  char *p = malloc(4000);
  p[0] = 2;
  sink = p;
  free(p);
}

__attribute__((noinline)) static void ctx_calloc(void) {
  char *p = calloc(8, 1000);
  p[1] = 3;
  sink = p;
  free(p);
}

__attribute__((noinline)) static void work(long rounds) {
  unsigned long x = mixed;
  for (long r = 0; r < rounds; r++)
    x = x * 6364136223846793005UL + 1442695040888963407UL;
  mixed = x;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 400000;
  long w = argc > 2 ? atol(argv[2]) : 0;
  long small = 0, medium = 0, cal = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) {
    ctx_small();
    small++;
    if (i % 10 == 9) {
      ctx_medium();
      medium++;
    }
    if (i % 20 == 19) {
      ctx_calloc();
      cal++;
    }
    if (w)
      work(w);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("CONTEXT ctx_small %ld %ld\n", small, small * 64);
  printf("CONTEXT ctx_medium %ld %ld\n", medium, medium * 4000);
  printf("CONTEXT ctx_calloc %ld %ld\n", cal, cal * 8000);
  printf("ELAPSED_NS %lld\n",
         (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
  return 0;
}
