// Deterministic synthetic inputs for `bench/pgo_speedup.sh`: the same KIND, SEED and BYTES
// give the same bytes on every machine (own PRNG, integer arithmetic only).
//
// Usage: corpus_gen KIND SEED BYTES > FILE
//   text     prose: sentences of words drawn Zipf-like from a vocabulary of 4,096 pseudo-words
//            built from syllables (the vocabulary depends on SEED), paragraphs, punctuation
//   log      service log lines: timestamps, levels, thread names, request ids, paths, status
//            codes, sizes and durations
//   records  a binary table of 32-byte little-endian records: increasing ids, small category
//            codes, slowly drifting fixed-point measurements, 8-byte names from a small set
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

static uint64_t next(void) {  // splitmix64
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint32_t below(uint32_t n) { return (uint32_t)(next() % n); }

// Zipf-like rank in [0, n): the minimum of three uniform draws, squared into the head.
static uint32_t zipf(uint32_t n) {
  uint64_t a = next() % n, b = next() % n, c = next() % n;
  uint64_t m = a < b ? a : b;
  m = m < c ? m : c;
  return (uint32_t)(m * m / n);
}

static uint64_t budget, written;

static void out(const char *s, size_t n) {
  if (written + n > budget) n = (size_t)(budget - written);
  fwrite(s, 1, n, stdout);
  written += n;
}

static void outs(const char *s) { out(s, strlen(s)); }

#define VOCAB 4096
static char words[VOCAB][24];

static void make_vocabulary(void) {
  static const char *onset[] = {"",   "b",  "c",  "d",  "f",  "g",  "h",  "l",  "m",  "n",
                                "p",  "r",  "s",  "t",  "v",  "w",  "br", "ch", "cl", "cr",
                                "dr", "fl", "gr", "pl", "pr", "sh", "sl", "st", "th", "tr"};
  static const char *nucleus[] = {"a", "e", "i", "o", "u", "ea", "ou", "ai", "ee", "oo", "y"};
  static const char *coda[] = {"", "", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck", "rm"};
  for (int w = 0; w < VOCAB; w++) {
    char *p = words[w];
    p[0] = 0;
    int syllables = 1 + (w > 64) + (w > 512) + (int)below(2);
    for (int s = 0; s < syllables; s++) {
      strcat(p, onset[below(sizeof onset / sizeof *onset)]);
      strcat(p, nucleus[below(sizeof nucleus / sizeof *nucleus)]);
      strcat(p, coda[below(sizeof coda / sizeof *coda)]);
    }
  }
}

static void gen_text(void) {
  make_vocabulary();
  char buf[64];
  while (written < budget) {
    int sentences = 2 + (int)below(6);
    for (int s = 0; s < sentences && written < budget; s++) {
      int n = 4 + (int)below(18);
      for (int i = 0; i < n; i++) {
        const char *w = words[zipf(VOCAB)];
        if (i == 0) {
          snprintf(buf, sizeof buf, "%c%s", w[0] - 32, w + 1);
          outs(buf);
        } else {
          outs(w);
        }
        if (i + 1 < n) outs(below(9) == 0 ? ", " : " ");
      }
      outs(below(7) == 0 ? "? " : ". ");
    }
    outs("\n\n");
  }
}

static void gen_log(void) {
  static const char *levels[] = {"INFO ", "INFO ", "INFO ", "INFO ", "DEBUG", "WARN ", "ERROR"};
  static const char *methods[] = {"GET", "GET", "GET", "POST", "PUT", "DELETE"};
  static const char *paths[] = {"/api/v1/items",  "/api/v1/users",  "/api/v1/orders",
                                "/api/v2/search", "/static/app.js", "/healthz",
                                "/api/v1/carts",  "/login",         "/api/v1/profiles"};
  static const int statuses[] = {200, 200, 200, 200, 200, 201, 204, 304, 400, 404, 500};
  uint64_t ms = 1700000000000ull + next() % 1000000000ull;
  char line[512];
  while (written < budget) {
    ms += below(40);
    uint64_t s = ms / 1000;
    unsigned h = (unsigned)(s / 3600 % 24), m = (unsigned)(s / 60 % 60), sec = (unsigned)(s % 60);
    unsigned lvl = below(7), meth = below(6), path = below(9), st = below(11);
    // One draw per statement: the order of evaluation of call arguments is unspecified.
    unsigned item = zipf(100000), user = zipf(5000);
    unsigned worker = below(16), req_hi = (unsigned)next(), req_lo = (unsigned)next();
    unsigned bytes = 100 + zipf(60000), dur = zipf(2000), dur_tenth = below(10);
    int len = snprintf(line, sizeof line,
                       "2026-11-%02u %02u:%02u:%02u.%03u %s [worker-%u] req=%08x%08x user=%u "
                       "%s %s/%u status=%d bytes=%u dur_ms=%u.%u\n",
                       1 + (unsigned)(s / 86400 % 28), h, m, sec, (unsigned)(ms % 1000),
                       levels[lvl], worker, req_hi, req_lo, user, methods[meth], paths[path],
                       item, statuses[st], bytes, dur, dur_tenth);
    out(line, (size_t)len);
  }
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void gen_records(void) {
  static const char *names[] = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot",
                                "golf",  "hotel", "india",   "juliet", "kilo", "lima"};
  int32_t value[4] = {1000, -2000, 50000, 7};
  uint32_t id = below(1000);
  unsigned char rec[32];
  while (written < budget) {
    id += 1 + (below(8) == 0 ? below(100) : 0);
    put32(rec, id);
    uint32_t category = below(5), flags = below(3), bucket = zipf(64);
    put32(rec + 4, category | (flags << 8) | (bucket << 16));
    for (int i = 0; i < 4; i++) {
      value[i] += (int32_t)below(21) - 10;
      put32(rec + 8 + 4 * i, (uint32_t)value[i]);
    }
    memset(rec + 24, 0, 8);
    const char *name = names[zipf(12)];
    memcpy(rec + 24, name, strlen(name) < 8 ? strlen(name) : 8);
    out((const char *)rec, sizeof rec);
  }
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: corpus_gen text|log|records SEED BYTES\n");
    return 2;
  }
  rng_state = strtoull(argv[2], NULL, 10) * 0x2545f4914f6cdd1dull + 1;
  budget = strtoull(argv[3], NULL, 10);
  if (!strcmp(argv[1], "text")) {
    gen_text();
  } else if (!strcmp(argv[1], "log")) {
    gen_log();
  } else if (!strcmp(argv[1], "records")) {
    gen_records();
  } else {
    fprintf(stderr, "corpus_gen: unknown kind %s\n", argv[1]);
    return 2;
  }
  return fflush(stdout) == 0 ? 0 : 1;
}
