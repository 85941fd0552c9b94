// Misuse: the function as an integer code, not a tilekern::act (or an act_constant).
// Expected: "func is a tilekern::act or an act_constant".
#include <vector>

#include "tilekern/engine/scalar.hpp"

int main() {
  std::vector<float> x(8, 1.0f), y(8);
  const tilekern::view<const float> in(x.data(), 2, 4);
  const tilekern::view<float> out(y.data(), 2, 4);
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  tilekern::scalar::activation(out, in, tilekern::act_constant<tilekern::act::silu>());
#else
  tilekern::scalar::activation(out, in, 8);
#endif
  return static_cast<int>(y[0]);
}
