// Misuse: an elementwise operator with two parameters for one input.
// Expected: "the operator must be callable with one xsimd::batch<float> per input".
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> x(16), y(16);
  namespace gpsimd = tilekern::gpsimd;
  const auto add = [](auto a, auto b) { return a + b; };
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::elementwise(add, gpsimd::inputs(x, x), gpsimd::outputs(y));
#else
  gpsimd::elementwise(add, gpsimd::inputs(x), gpsimd::outputs(y));
#endif
  return 0;
}
