/* shlib_user: calls into libpgoshared.so (linked with rpath $ORIGIN), including a callback
 * from the library back into the program. */
#include <stdio.h>

int shlib_mix(int x, int rounds);
int shlib_apply(int (*cb)(int), int x);

volatile int calls = 1200;

__attribute__((noinline)) static int callback(int x) { return x % 1000 + 7; }

int main(void) {
  long acc = 0;
  for (int i = 0; i < calls; i++) acc += shlib_mix(i, 8) + shlib_apply(callback, i);
  printf("%ld\n", acc);
  return 0;
}
