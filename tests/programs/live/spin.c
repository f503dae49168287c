/* spin: a long-running program for the live daemon tests. `spin SECONDS` runs for that
 * long; hot_loop runs 10x the iterations of cold_work (the same serial
 * multiply chain), so a sampling profiler must attribute
 * the most samples to hot_loop. Built by tests/tests/e2e/host/live.rs:
 *   clang-19 -O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
 *            -fpseudo-probe-for-profiling -fPIE -pie -Wl,--build-id -o spin spin.c */
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) unsigned long hot_loop(unsigned long n) {
  unsigned long s = 0;
  for (unsigned long i = 0; i < n; i++) s = s * 37 + (i ^ s);
  return s;
}

__attribute__((noinline)) unsigned long cold_work(unsigned long n) {
  unsigned long s = 1;
  for (unsigned long i = 0; i < n; i++) s = s * 37 + (i ^ s);
  return s;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 3.0;
  double end = now() + secs;
  /* The clock is read only every 20 rounds: in a VM without a PMU, cpu-clock samples
   * tend to land right before the exits that clock reads cause, which would bias them. */
  do {
    for (int round = 0; round < 20; round++) {
      sink += hot_loop(2000000);
      sink += cold_work(200000);
    }
  } while (now() < end);
  return 0;
}
