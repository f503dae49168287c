// MemProf corpus program: one allocation site (make_buf) reached through two contexts with a
// known pattern. `hot_path` allocates HOT_BYTES, touches every byte and frees at once (short-lived,
// densely accessed); `cold_path` allocates COLD_BYTES, touches one byte and keeps it until exit
// (long-lived, sparsely accessed). argv[1] = number of hot allocations, argv[2] = number of cold
// ones, argv[3] = how long (ms) the cold buffers live before being freed.
#include <cstdlib>
#include <cstring>
#include <unistd.h>

static const unsigned long HOT_BYTES = 64;
static const unsigned long COLD_BYTES = 4096;

__attribute__((noinline)) char *make_buf(unsigned long n) {
  return new char[n];
}

__attribute__((noinline)) char *cold_path() {
  return make_buf(COLD_BYTES);
}

__attribute__((noinline)) char *hot_path() {
  return make_buf(HOT_BYTES);
}

int main(int argc, char **argv) {
  int hot = argc > 1 ? atoi(argv[1]) : 100;
  int cold = argc > 2 ? atoi(argv[2]) : 1;
  int keep_ms = argc > 3 ? atoi(argv[3]) : 50;
  if (cold > 64) cold = 64;
  char *kept[64];
  volatile long sum = 0;
  for (int i = 0; i < cold; i++) {
    kept[i] = cold_path();
    kept[i][0] = 1;
  }
  for (int i = 0; i < hot; i++) {
    char *h = hot_path();
    memset(h, i, HOT_BYTES);
    for (unsigned long k = 0; k < HOT_BYTES; k++) sum += h[k];
    delete[] h;
  }
  usleep(keep_ms * 1000);
  for (int i = 0; i < cold; i++) delete[] kept[i];
  return (int)(sum & 0);
}
