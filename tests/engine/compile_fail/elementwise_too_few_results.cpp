// Misuse: an elementwise operator that returns one batch for two outputs.
// Expected: "the operator returns a different number of batches than there are outputs".
#include <tuple>
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> x(16), y(16), z(16);
  namespace gpsimd = tilekern::gpsimd;
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::elementwise([](auto v) { return std::tuple(v, v + v); }, gpsimd::inputs(x),
                      gpsimd::outputs(y, z));
#else
  gpsimd::elementwise([](auto v) { return v + v; }, gpsimd::inputs(x), gpsimd::outputs(y, z));
#endif
  return 0;
}
