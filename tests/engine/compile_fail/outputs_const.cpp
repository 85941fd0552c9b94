// Misuse: a span of const as an output.
// Expected: "outputs must be writable".
#include <span>
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> x(16), y(16);
  namespace gpsimd = tilekern::gpsimd;
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::elementwise([](auto v) { return v; }, gpsimd::inputs(x),
                      gpsimd::outputs(std::span<float>(y)));
#else
  gpsimd::elementwise([](auto v) { return v; }, gpsimd::inputs(x),
                      gpsimd::outputs(std::span<const float>(y)));
#endif
  return 0;
}
