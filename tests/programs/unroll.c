/* unroll: loops the compiler unrolls. The fixed 8-iteration loop in mix8 is fully
 * unrolled and the runtime-count loop in scale is vectorized/interleaved, so the line
 * table carries duplication factors in its discriminators (see README). */
#include <stdio.h>

volatile int rounds = 1500;

__attribute__((noinline)) unsigned mix8(const unsigned *v) {
  unsigned h = 2166136261u;
  for (int i = 0; i < 8; i++) h = (h ^ v[i]) * 16777619u;
  return h;
}

__attribute__((noinline)) void scale(int *dst, const int *src, int n, int k) {
  for (int i = 0; i < n; i++) dst[i] = src[i] * k + (i & 3);
}

int main(void) {
  unsigned v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int src[64], dst[64];
  for (int i = 0; i < 64; i++) src[i] = i * 7;
  unsigned h = 0;
  for (int r = 0; r < rounds; r++) {
    v[r & 7] += h;
    h ^= mix8(v);
    scale(dst, src, 40 + (r & 15), r);
    h += (unsigned)dst[r & 31];
  }
  printf("%u\n", h);
  return 0;
}
