// Misuse: a tile matmul whose a has more columns than b has rows (the k of the product differs).
// Expected: "a's columns must equal b's rows".
#include "tilekern/engine/tensor.hpp"

int main() {
  using tilekern::bf16;
  tilekern::accum<4, 8> acc;
  const tilekern::tile<bf16, 4, 16> a;
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  const tilekern::tile<bf16, 16, 8> b;
#else
  const tilekern::tile<bf16, 12, 8> b;
#endif
  tilekern::tensor::matmul(acc, a, b);
  return static_cast<int>(acc(0, 0));
}
