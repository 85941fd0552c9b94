// Misuse: a row-wise operator that takes its input as a gpsimd::row, in local memory, when the
// input is streamed() (the operator gets a gpsimd::input_stream, which has no memory).
// Expected: "the operator must be callable with one gpsimd::row<const float, A> per input (a
// gpsimd::input_stream if it is streamed)".
#include <vector>

#include "tilekern/engine/gpsimd.hpp"

int main() {
  std::vector<float> x(16), y(16);
  namespace gpsimd = tilekern::gpsimd;
  const auto scaled = []<class A>(gpsimd::row<const float, A> in, gpsimd::row<float, A> out) {
    const float total = gpsimd::sum(in);
    gpsimd::transform(
        out, [total](auto v) { return v / total; }, in);
  };
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::rowwise(scaled, gpsimd::inputs(x), gpsimd::outputs(y));
#else
  gpsimd::rowwise(scaled, gpsimd::inputs(gpsimd::streamed(x)), gpsimd::outputs(y));
#endif
  return 0;
}
