// User code that must compile: sum() and max() over an output row the operator has just written
// (softmax's usual shape: y = exp(x - m), then s = sum(y); here y = x - m + 1). When sum() and
// max() took row<const float, Arch>, template deduction did not reach it from row<float, Arch>.
// And transform() from a plain span of fp32 (a scratch row of the operator's own).
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  namespace gpsimd = tilekern::gpsimd;
  std::vector<float> x(100, 1.0f), y(100);
  gpsimd::rowwise(
      [](auto in, auto out) {
        using batch = typename decltype(in)::batch;
        const float m = gpsimd::max(in);
        gpsimd::transform(
            out, [m](auto v) { return v - batch(m) + batch(1.0f); }, in);
        const float s = gpsimd::sum(out);
        const float top = gpsimd::max(out);
        gpsimd::transform(
            out, [s, top](auto v) { return v / batch(s) + batch(0.0f * top); }, out);
        std::vector<float> scratch(out.size(), 0.0f);
        gpsimd::transform(
            out, [](auto v, auto zero) { return v + zero; }, out, std::span<const float>(scratch));
      },
      gpsimd::inputs(x), gpsimd::outputs(y));
  return y[0] == 0.01f ? 0 : 1;
}
