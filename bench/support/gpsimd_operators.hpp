#pragma once
// The custom operators of the gpsimd benchmarks (bench/gpsimd_bench.cpp) and of the report's
// custom-operator rows (tools/report/gpsimd.cpp), written as a user writes them: plain math over
// xsimd batches, or over the rows of a row-wise operator.
#include <cmath>
#include <cstddef>
#include <tuple>

#include "tilekern/engine/gpsimd.hpp"

namespace tilekern::gpsimd_operators {

// y = max(x, 0)
struct relu_op {
  template <class B>
  B operator()(B x) const {
    return xsimd::max(x, B(0.0f));
  }
};

// y = 0.5 x (1 + erf(x / sqrt 2))
struct gelu_erf_op {
  template <class B>
  B operator()(B x) const {
    return 0.5f * x * (1.0f + xsimd::erf(x * 0.70710678f));
  }
};

// y = gelu_erf(x + bias)
struct bias_gelu_op {
  template <class B>
  B operator()(B x, B bias) const {
    return gelu_erf_op()(x + bias);
  }
};

// y0 = tanh x, y1 = 1 - tanh^2 x
struct tanh_derivative_op {
  template <class B>
  std::tuple<B, B> operator()(B x) const {
    const B t = xsimd::tanh(x);
    return {t, 1.0f - t * t};
  }
};

// 1 / rms of a row from its sum of squares: shared by rmsnorm_op and the benchmark's hand loop.
inline float rms_scale(float squares, std::size_t n) {
  return 1.0f / std::sqrt(squares / static_cast<float>(n) + 1e-6f);
}

// y = x / sqrt(mean(x^2) + 1e-6) * gamma, per row; x read as given (a row, or an input_stream
// when the caller streams it), y streamed into its tensor (the output row as its own type, an
// output_row, which stream() needs to bypass local memory)
struct rmsnorm_op {
  template <class X, class Arch, class Y>
  void operator()(X x, gpsimd::row<const float, Arch> gamma, Y y) const {
    const float scale = rms_scale(gpsimd::sum([](auto v) { return v * v; }, x), x.size());
    gpsimd::stream(
        y, [scale](auto v, auto g) { return v * scale * g; }, x, gamma);
  }
};

}  // namespace tilekern::gpsimd_operators
