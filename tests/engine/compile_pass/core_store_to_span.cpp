// User code that must compile: core::store into a span made on the spot (a span is a view, so
// passing one by value is the natural call; core::store takes `Tensor&` and so rejects it).
#include <span>
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  namespace gpsimd = tilekern::gpsimd;
  std::vector<float> x(100, 1.0f);
  std::vector<tilekern::bf16> y(100);
  gpsimd::launch({}, [&](gpsimd::core& c) {
    for (gpsimd::range part : c.chunks(x.size(), 16)) {
      const std::span<float> local = c.local().first(part.size());
      c.load(x, part, local);
      c.store(local, std::span<tilekern::bf16>(y), part);
      c.store(local, std::span<tilekern::bf16>(y), part, {.round = tilekern::rounding::stochastic});
    }
  });
  return y[99].to_float() == 1.0f ? 0 : 1;
}
