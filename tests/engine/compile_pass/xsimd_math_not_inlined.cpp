// User code that must compile warning-free with -Wall -Wextra -Werror at -O2: an operator calling
// xsimd::exp through a function GCC does not inline. GCC 12 reports the AVX-512 intrinsics that
// xsimd's exp uses as -Wuninitialized (GCC bug 105593, the same as -Wmaybe-uninitialized, which
// engine/gpsimd.hpp already silences for code that includes it before xsimd).
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

namespace {
__attribute__((noinline)) xsimd::batch<float> exp_of(xsimd::batch<float> x) {
  return xsimd::exp(x);
}
}  // namespace

int main() {
  std::vector<float> x(100, 1.0f), y(100);
  tilekern::gpsimd::elementwise([](xsimd::batch<float> v) { return exp_of(v); },
                                tilekern::gpsimd::inputs(x), tilekern::gpsimd::outputs(y));
  return y[0] > 2.0f ? 0 : 1;
}
