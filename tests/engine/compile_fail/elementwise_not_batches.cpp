// Misuse: an elementwise operator that cannot take xsimd batches (it takes a pointer).
// Expected: "the operator must be callable with one xsimd::batch<float> per input".
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> x(16), y(16);
  namespace gpsimd = tilekern::gpsimd;
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::elementwise([](auto v) { return v; }, gpsimd::inputs(x), gpsimd::outputs(y));
#else
  gpsimd::elementwise([](int* p) { return static_cast<float>(*p); }, gpsimd::inputs(x),
                      gpsimd::outputs(y));
#endif
  return 0;
}
