/* recursion: direct recursion (fib), mutual recursion (is_even/is_odd) and a recursive
 * tree walk, with a few levels of frames for the call-chain walk. */
#include <stdio.h>

volatile int input = 18;

__attribute__((noinline)) int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int is_odd(unsigned n);
__attribute__((noinline)) int is_even(unsigned n) { return n == 0 ? 1 : is_odd(n - 1); }
__attribute__((noinline)) int is_odd(unsigned n) { return n == 0 ? 0 : is_even(n - 1); }

struct node {
  int value;
  struct node *left, *right;
};

static struct node pool[63];

static struct node *build(int depth, int *next) {
  if (depth == 0) return 0;
  struct node *n = &pool[(*next)++];
  n->value = *next;
  n->left = build(depth - 1, next);
  n->right = build(depth - 1, next);
  return n;
}

__attribute__((noinline)) long sum_tree(const struct node *n) {
  if (!n) return 0;
  return n->value + sum_tree(n->left) + sum_tree(n->right);
}

int main(void) {
  int next = 0;
  struct node *root = build(6, &next);
  long total = 0;
  for (int i = 0; i < 20; i++) total += sum_tree(root);
  printf("fib=%d even=%d tree=%ld\n", fib(input), is_even((unsigned)input * 37u), total);
  return 0;
}
