// Misuse: a streamed() input given to elementwise, which reads its inputs from the tensors anyway.
// Expected: "an input is streamed, which only rowwise takes".
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> x(16), y(16);
  namespace gpsimd = tilekern::gpsimd;
  const auto relu = [](auto v) { return xsimd::max(v, decltype(v)(0.0f)); };
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::elementwise(relu, gpsimd::inputs(x), gpsimd::outputs(y));
#else
  gpsimd::elementwise(relu, gpsimd::inputs(gpsimd::streamed(x)), gpsimd::outputs(y));
#endif
  return 0;
}
