/* sort_tiny: sorting with two tiny comparison functions, the shape whose cpu-clock samples
 * land in prologues and epilogues (a large share of a tiny function's instructions are its
 * frame set-up and tear-down). `sort_tiny SECONDS [N]` sorts rounds of N elements (3000 by
 * default) for that long, at least one round: a merge sort calling the qsort-style callback
 * cmp_int, then an insertion sort of N/4 calling less(). It prints a checksum and the CPU
 * seconds it used. The sorting loops are the program's own (not libc's qsort), so the
 * binary's samples and instructions weigh each comparator against the loop that calls it.
 * Built by tests/tests/e2e/host/live.rs with e2e::support::build_program (clang-19 -O2, frame
 * pointers, pseudo probes, PIE). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

__attribute__((noinline)) static int less(int a, int b) { return a < b; }

__attribute__((noinline)) static void insertion(int *v, int n) {
  for (int i = 1; i < n; i++) {
    int t = v[i], j = i - 1;
    while (j >= 0 && less(t, v[j])) {
      v[j + 1] = v[j];
      j--;
    }
    v[j + 1] = t;
  }
}

/* Sorts v[0..n) with cmp, through tmp (n elements). */
__attribute__((noinline)) static void merge_sort(int *v, int *tmp, int n,
                                                int (*cmp)(const void *, const void *)) {
  if (n < 2)
    return;
  int h = n / 2;
  merge_sort(v, tmp, h, cmp);
  merge_sort(v + h, tmp, n - h, cmp);
  int i = 0, j = h, k = 0;
  while (i < h && j < n)
    tmp[k++] = cmp(&v[i], &v[j]) <= 0 ? v[i++] : v[j++];
  while (i < h)
    tmp[k++] = v[i++];
  while (j < n)
    tmp[k++] = v[j++];
  for (k = 0; k < n; k++)
    v[k] = tmp[k];
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 1.0;
  int n = argc > 2 ? atoi(argv[2]) : 3000;
  int *v = malloc(sizeof(int) * n), *tmp = malloc(sizeof(int) * n);
  unsigned s = 1;
  long checksum = 0;
  double end = now() + secs;
  do {
    for (int i = 0; i < n; i++) {
      s = s * 1103515245 + 12345;
      v[i] = (int)(s >> 8);
    }
    merge_sort(v, tmp, n, cmp_int);
    for (int i = 0; i < n; i++) {
      s = s * 1103515245 + 12345;
      v[i] = (int)(s >> 8);
    }
    insertion(v, n / 4);
    checksum += v[0];
  } while (now() < end);
  printf("%ld %.3f\n", checksum, (double)clock() / CLOCKS_PER_SEC);
  return 0;
}
