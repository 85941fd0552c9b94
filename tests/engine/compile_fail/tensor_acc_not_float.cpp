// Misuse: an accumulator tile of bf16 (PSUM is fp32: the accumulator must be accum<M, N>).
// Expected: "the accumulator must be a float tile".
#include "tilekern/engine/tensor.hpp"

int main() {
  using tilekern::bf16;
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  tilekern::accum<4, 8> acc;
#else
  tilekern::tile<bf16, 4, 8> acc;
#endif
  const tilekern::tile<bf16, 4, 16> a;
  const tilekern::tile<bf16, 16, 8> b;
  tilekern::tensor::matmul(acc, a, b);
  return static_cast<int>(acc(0, 0));
}
