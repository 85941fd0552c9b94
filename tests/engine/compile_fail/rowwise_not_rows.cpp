// Misuse: a row-wise operator written for plain pointers instead of gpsimd rows.
// Expected: "the operator must be callable with one gpsimd::row<const float, A> per input".
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> x(16), y(16);
  namespace gpsimd = tilekern::gpsimd;
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::rowwise([](auto in, auto out) { out[0] = in[0]; }, gpsimd::inputs(x), gpsimd::outputs(y));
#else
  gpsimd::rowwise([](const float* in, float* out) { out[0] = in[0]; }, gpsimd::inputs(x),
                  gpsimd::outputs(y));
#endif
  return 0;
}
