/* shlib: libpgoshared.so, a shared library of our own (called by shlib_user). */
typedef int (*shlib_callback)(int);

__attribute__((noinline)) static int shlib_step(int x) { return (x * 1103515245 + 12345) & 0x7fffffff; }

int shlib_mix(int x, int rounds) {
  for (int i = 0; i < rounds; i++) x = shlib_step(x) ^ i;
  return x;
}

int shlib_apply(shlib_callback cb, int x) { return cb(shlib_mix(x, 3)) + 1; }
