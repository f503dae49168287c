/* interp: a tiny bytecode interpreter; the switch in run() compiles to a jump table
 * (an indirect jmp per instruction dispatched). */
#include <stdio.h>

enum op { PUSH, ADD, SUB, MUL, DUP, SWAP, JNZ, DEC, POP, HALT };

struct insn {
  enum op op;
  int arg;
};

/* counter = 2500; acc = 0; do { acc = acc * 3 + counter - 1; } while (--counter); */
static const struct insn program[] = {
    {PUSH, 0},    /* 0: acc */
    {PUSH, 2500}, /* 1: counter */
    {SWAP, 0},    /* 2: counter acc */
    {PUSH, 3},    /* 3 */
    {MUL, 0},     /* 4: counter acc*3 */
    {PUSH, 1},    /* 5 */
    {SUB, 0},     /* 6: counter acc*3-1 */
    {SWAP, 0},    /* 7: acc counter */
    {DEC, 0},     /* 8 */
    {DUP, 0},     /* 9 */
    {JNZ, 2},     /* 10 */
    {POP, 0},     /* 11 */
    {HALT, 0},    /* 12 */
};

__attribute__((noinline)) long run(const struct insn *code) {
  long stack[16];
  int sp = 0, pc = 0;
  for (;;) {
    const struct insn in = code[pc++];
    switch (in.op) {
    case PUSH: stack[sp++] = in.arg; break;
    case ADD: sp--; stack[sp - 1] += stack[sp]; break;
    case SUB: sp--; stack[sp - 1] -= stack[sp]; break;
    case MUL: sp--; stack[sp - 1] *= stack[sp]; break;
    case DUP: stack[sp] = stack[sp - 1]; sp++; break;
    case SWAP: { long t = stack[sp - 1]; stack[sp - 1] = stack[sp - 2]; stack[sp - 2] = t; break; }
    case JNZ: if (stack[--sp]) pc = in.arg; break;
    case DEC: stack[sp - 1]--; break;
    case POP: sp--; break;
    case HALT: return stack[sp - 1];
    }
  }
}

int main(void) {
  printf("%ld\n", run(program));
  return 0;
}
