#pragma once
// reference::activation: the scalar engine's functions (simd/math.hpp) in plain fp64, what their
// accuracy is measured against, by the tests, the benchmarks and users.
//
// Numerics: each function is written so that fp64 evaluates it to a few fp64 ulp for every fp32
// input, which is exact to far below an fp32 ulp, also where the result is tiny:
// - no cancellation: sigmoid(x) = e^x / (1 + e^x) for x < 0; softplus(x) = log1p(e^x) for x < 0;
//   gelu_erf uses erfc for x < 0; gelu_tanh(x) = x sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)), the
//   same function as 0.5 x (1 + tanh(...)) without its cancellation for x < 0;
// - fp64 has the range: every fp32 input of exp, silu, gelu or mish gives a normal fp64 result
//   (e^-104 and 100 e^-100 are far above fp64's underflow).
// Special values follow the math and IEEE fp64: NaN in gives NaN out; the limits at +-inf are the
// ones listed in simd/math.hpp; relu(x) = x < 0 ? +0 : x (relu(-0) = -0).

#include <cmath>
#include <limits>
#include <numbers>

#include "tilekern/simd/math.hpp"

namespace tilekern::reference {

namespace detail {

// sigmoid(v) without cancellation or overflow.
inline double sigmoid(double v) {
  if (v < 0) {
    const double e = std::exp(v);
    return e / (1 + e);
  }
  return 1 / (1 + std::exp(-v));
}

// x sigmoid(v) with the right limit (-0, not NaN) at x = -inf.
inline double times_sigmoid(double x, double v) {
  if (x == -std::numeric_limits<double>::infinity()) return -0.0;
  return x * sigmoid(v);
}

inline double softplus(double x) {
  if (x < 0) return std::log1p(std::exp(x));
  return x + std::log1p(std::exp(-x));
}

}  // namespace detail

inline double activation(act f, double x) {
  switch (f) {
    case act::identity:
      return x;
    case act::exp:
      return std::exp(x);
    case act::log:
      return std::log(x);
    case act::tanh:
      return std::tanh(x);
    case act::sigmoid:
      return detail::sigmoid(x);
    case act::relu:
      return x < 0 ? 0.0 : x;
    case act::gelu_erf:
      if (x == -std::numeric_limits<double>::infinity()) return -0.0;
      if (x < 0) return 0.5 * x * std::erfc(-x / std::numbers::sqrt2);
      return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
    case act::gelu_tanh: {
      const double k = std::sqrt(2 / std::numbers::pi);
      return detail::times_sigmoid(x, 2 * k * (x + 0.044715 * x * x * x));
    }
    case act::silu:
      return detail::times_sigmoid(x, x);
    case act::softplus:
      return detail::softplus(x);
    case act::mish:
      if (x == -std::numeric_limits<double>::infinity()) return -0.0;
      return x * std::tanh(detail::softplus(x));
    case act::erf:
      return std::erf(x);
    case act::sqrt:
      return std::sqrt(x);
    case act::rsqrt:
      return 1 / std::sqrt(x);
    case act::reciprocal:
      return 1 / x;
    case act::square:
      return x * x;
    case act::abs:
      return std::fabs(x);
  }
  return x;
}

}  // namespace tilekern::reference
