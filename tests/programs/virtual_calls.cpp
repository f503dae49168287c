// virtual_calls: indirect calls through C++ virtual functions and through C function
// pointers. No libstdc++ runtime is needed (no new/delete, exceptions or RTTI use), so the
// program links only libc and starts quickly.
#include <cstdio>

volatile int iterations = 4000;

struct Shape {
  virtual int area(int scale) const = 0;
  virtual int perimeter(int scale) const { return 4 * scale; }
};
struct Square : Shape {
  int side;
  explicit Square(int s) : side(s) {}
  int area(int scale) const override { return side * side * scale; }
};
struct Rect : Shape {
  int w, h;
  Rect(int a, int b) : w(a), h(b) {}
  int area(int scale) const override { return w * h * scale; }
  int perimeter(int scale) const override { return 2 * (w + h) * scale; }
};
struct Tri : Shape {
  int b, h;
  Tri(int x, int y) : b(x), h(y) {}
  int area(int scale) const override { return b * h * scale / 2; }
};

extern "C" void __cxa_pure_virtual() {}

typedef int (*op_fn)(int, int);
__attribute__((noinline)) static int op_add(int a, int b) { return a + b; }
__attribute__((noinline)) static int op_xor(int a, int b) { return a ^ b; }
__attribute__((noinline)) static int op_mul(int a, int b) { return a * (b | 1); }

__attribute__((noinline)) long total_area(const Shape *const *shapes, int n, int scale) {
  long t = 0;
  for (int i = 0; i < n; i++) t += shapes[i]->area(scale) + shapes[i]->perimeter(scale);
  return t;
}

int main() {
  Square sq(3);
  Rect re(2, 5);
  Tri tr(4, 6);
  const Shape *shapes[] = {&sq, &re, &tr, &re};
  op_fn ops[] = {op_add, op_xor, op_mul};
  long acc = 0;
  for (int i = 0; i < iterations; i++) {
    acc += total_area(shapes, 4, i & 7);
    acc = ops[i % 3](static_cast<int>(acc), i);
  }
  std::printf("%ld\n", acc);
  return 0;
}
