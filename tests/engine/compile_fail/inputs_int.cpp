// Misuse: a tensor of int as an input.
// Expected: "tensors hold float or a tilekern format".
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> y(16);
  namespace gpsimd = tilekern::gpsimd;
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  std::vector<tilekern::fp8_e4m3> x(16);
#else
  std::vector<int> x(16);
#endif
  gpsimd::elementwise([](auto v) { return v; }, gpsimd::inputs(x), gpsimd::outputs(y));
  return 0;
}
