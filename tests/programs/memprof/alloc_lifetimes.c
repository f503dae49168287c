// Allocation lifetimes with known totals, for the uprobe free-matching test (issue 7).
//
//   alloc_lifetimes ITERATIONS
//
// Per iteration: ctx_freed mallocs 4000 bytes and frees them at once; every 2nd iteration
// ctx_kept mallocs 4000 bytes that stay allocated until the program exits (never freed).
// The truth is printed as "CONTEXT <name> <calls> <bytes> <bytes in use at exit>" lines.
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;

__attribute__((noinline)) static void ctx_freed(void) {
  char *p = malloc(4000);
  p[0] = 1;
  sink = p;
  free(p);
}

__attribute__((noinline)) static char *ctx_kept(void) {
  char *p = malloc(4000);
  p[0] = 2;
  sink = p;
  return p;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 40000;
  long kept_n = n / 2;
  char **kept = calloc(kept_n ? kept_n : 1, sizeof(char *));
  long freed = 0, k = 0;
  for (long i = 0; i < n; i++) {
    ctx_freed();
    freed++;
    if (i % 2 == 1 && k < kept_n)
      kept[k++] = ctx_kept();
  }
  printf("CONTEXT ctx_freed %ld %ld 0\n", freed, freed * 4000);
  printf("CONTEXT ctx_kept %ld %ld %ld\n", k, k * 4000, k * 4000);
  fflush(stdout);
  // The kept blocks are still allocated at exit (the kernel reclaims them).
  sink = kept;
  return 0;
}
