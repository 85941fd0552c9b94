// Misuse: an operator call without outputs.
// Expected: "give at least one output".
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> x(16), y(16);
  namespace gpsimd = tilekern::gpsimd;
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::rowwise([](auto, auto) {}, gpsimd::inputs(x), gpsimd::outputs(y));
#else
  gpsimd::rowwise([](auto) {}, gpsimd::inputs(x), gpsimd::outputs());
#endif
  return 0;
}
