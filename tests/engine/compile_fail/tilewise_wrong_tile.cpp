// Misuse: a tile-wise operator whose tiles are not the Rows x Cols of the call.
// Expected: "the operator must be callable with a const tile<float, Rows, Cols>& per input".
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> x(16), y(16);
  namespace gpsimd = tilekern::gpsimd;
  using tilekern::tile;
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::tilewise<1, 8>([](const tile<float, 1, 8>& in, tile<float, 1, 8>& out) { out = in; },
                         gpsimd::inputs(x), gpsimd::outputs(y));
#else
  gpsimd::tilewise<1, 8>([](const tile<float, 1, 4>& in, tile<float, 1, 4>& out) { out = in; },
                         gpsimd::inputs(x), gpsimd::outputs(y));
#endif
  return 0;
}
