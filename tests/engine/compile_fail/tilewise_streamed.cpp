// Misuse: a streamed() input given to tilewise, which stages whole tiles.
// Expected: "an input is streamed, which only rowwise takes".
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> x(16), y(16);
  namespace gpsimd = tilekern::gpsimd;
  const auto copy = [](const auto& in, auto& out) { out = in; };
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::tilewise<1, 16>(copy, gpsimd::inputs(x), gpsimd::outputs(y));
#else
  gpsimd::tilewise<1, 16>(copy, gpsimd::inputs(gpsimd::streamed(x)), gpsimd::outputs(y));
#endif
  return 0;
}
