// Driver for `bench/pgo_speedup.sh`: times zstd's one-shot API (the library is built from the
// C sources the zstd-sys crate bundles) on one input file at one compression level.
//
// Usage: zstd_bench FILE LEVELS CITERS DITERS
//   for each level of the comma-separated LEVELS (e.g. 1,3,6): compresses FILE CITERS times at
//   that level (one ZSTD_CCtx, reused), then decompresses the result DITERS times (one
//   ZSTD_DCtx, reused), checks that the last round trip gives FILE back, and prints one line:
//     FILE level L bytes N compressed C compress_ns T1 decompress_ns T2 compress_cpu_ns P1
//     decompress_cpu_ns P2
//   T1 and T2 are the CLOCK_MONOTONIC time of the fastest compression and the fastest
//   decompression (one call each: reading the file, the allocations and the check are outside),
//   P1 and P2 the same by CLOCK_PROCESS_CPUTIME_ID (time spent waiting for a CPU left out).
//   The fastest of several calls leaves out the first call's page faults and most of the
//   interference of other work on the machine. Exit status 1 on any error.
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zstd.h"

static uint64_t clock_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// The fastest iteration seen, by wall time and by the process's CPU time (each the minimum
// on its own clock).
struct lap {
  uint64_t wall_ns, cpu_ns;
};

static struct lap lap_start(void) {
  struct lap l = {clock_ns(CLOCK_MONOTONIC), clock_ns(CLOCK_PROCESS_CPUTIME_ID)};
  return l;
}

static void lap_end(struct lap *best, struct lap start) {
  uint64_t wall = clock_ns(CLOCK_MONOTONIC) - start.wall_ns;
  uint64_t cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - start.cpu_ns;
  if (wall < best->wall_ns) best->wall_ns = wall;
  if (cpu < best->cpu_ns) best->cpu_ns = cpu;
}

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return NULL;
  }
  size_t cap = 1 << 20, len = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (len == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
    }
    if (!buf) {
      fprintf(stderr, "%s: out of memory\n", path);
      fclose(f);
      return NULL;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    if (n == 0) break;
    len += n;
  }
  if (ferror(f)) {
    perror(path);
    fclose(f);
    free(buf);
    return NULL;
  }
  fclose(f);
  *size = len;
  return buf;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: zstd_bench FILE LEVELS CITERS DITERS\n");
    return 2;
  }
  const char *path = argv[1];
  long citers = atol(argv[3]), diters = atol(argv[4]);
  if (citers < 1 || diters < 1) {
    fprintf(stderr, "zstd_bench: CITERS and DITERS must be at least 1\n");
    return 2;
  }
  size_t size = 0;
  char *src = read_file(path, &size);
  if (!src) return 1;

  size_t bound = ZSTD_compressBound(size);
  char *dst = malloc(bound);
  char *back = malloc(size ? size : 1);
  ZSTD_CCtx *cctx = ZSTD_createCCtx();
  ZSTD_DCtx *dctx = ZSTD_createDCtx();
  if (!dst || !back || !cctx || !dctx) {
    fprintf(stderr, "zstd_bench: out of memory\n");
    return 1;
  }

  for (const char *lv = argv[2]; *lv;) {
    char *end;
    int level = (int)strtol(lv, &end, 10);
    if (end == lv || (*end != ',' && *end != 0)) {
      fprintf(stderr, "zstd_bench: bad LEVELS %s\n", argv[2]);
      return 2;
    }
    lv = *end ? end + 1 : end;
    size_t csize = 0, dsize = 0;
    struct lap c = {UINT64_MAX, UINT64_MAX}, d = {UINT64_MAX, UINT64_MAX};
    for (long i = 0; i < citers; i++) {
      struct lap start = lap_start();
      csize = ZSTD_compressCCtx(cctx, dst, bound, src, size, level);
      lap_end(&c, start);
      if (ZSTD_isError(csize)) {
        fprintf(stderr, "%s: compress: %s\n", path, ZSTD_getErrorName(csize));
        return 1;
      }
    }
    for (long i = 0; i < diters; i++) {
      struct lap start = lap_start();
      dsize = ZSTD_decompressDCtx(dctx, back, size, dst, csize);
      lap_end(&d, start);
      if (ZSTD_isError(dsize)) {
        fprintf(stderr, "%s: decompress: %s\n", path, ZSTD_getErrorName(dsize));
        return 1;
      }
    }
    if (dsize != size || memcmp(src, back, size) != 0) {
      fprintf(stderr, "%s: level %d: the round trip differs from the input\n", path, level);
      return 1;
    }
    printf(
        "%s level %d bytes %zu compressed %zu compress_ns %llu decompress_ns %llu "
        "compress_cpu_ns %llu decompress_cpu_ns %llu\n",
        path, level, size, csize, (unsigned long long)c.wall_ns, (unsigned long long)d.wall_ns,
        (unsigned long long)c.cpu_ns, (unsigned long long)d.cpu_ns);
  }
  ZSTD_freeCCtx(cctx);
  ZSTD_freeDCtx(dctx);
  free(src);
  free(dst);
  free(back);
  return 0;
}
