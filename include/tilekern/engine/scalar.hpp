#pragma once
// The scalar engine: dst = func(src * scale + bias), the NeuronCore's activation instruction,
// with an optional add-reduce along each row.
//
//   activation(dst, src, func, scale = 1, bias = 0)
//   activation_sum(dst, sums, src, func, scale = 1, bias = 0)
//       also sums[r] = the fp32 sum over row r of the results, before dst's rounding
//   exp(dst, src, scale = 1, bias = 0)     activation with act::exp, which attention reads as
//                                           exp(p, s) (and the other acts likewise)
//
// func is a tilekern::act (simd/math.hpp, which documents each function's error in fp32 ulp).
// scale and bias are floats or views: one column (a value per row, e.g. a row's -max for
// softmax), one row, or the shape of src; dst and src follow the vector engine's rules
// (engine/vector.hpp): any format, rounded(dst, cast, ...) for the caller's rounding. The
// argument is computed with one fused multiply-add, src * scale + bias, rounded once.

#include <utility>

#include "tilekern/engine/vector.hpp"
#include "tilekern/simd/math.hpp"

namespace tilekern::scalar {

namespace detail {

template <bool Reduce, class Dst, class Sums, class Src, class Scale, class Bias>
void activate(const char* function, Dst&& dst, Sums&& sums, const Src& src, act func,
              const Scale& scale, const Bias& bias) {
  tilekern::detail::visit_act(func, [&](auto f) {
    vector::detail::elementwise<Reduce>(
        function, {"src", "scale", "bias"}, std::forward<Dst>(dst), std::forward<Sums>(sums),
        [](auto d, auto x, auto s, auto b) {
          return tilekern::detail::activate<decltype(f)::value>(
              d, hwy::HWY_NAMESPACE::MulAdd(x, s, b));
        },
        src, scale, bias);
  });
}

}  // namespace detail

// dst = func(src * scale + bias).
template <class Dst, class Src, class Scale = float, class Bias = float>
void activation(Dst&& dst, const Src& src, act func, const Scale& scale = 1.0f,
                const Bias& bias = 0.0f) {
  detail::activate<false>("tilekern::scalar::activation", std::forward<Dst>(dst), nullptr, src,
                          func, scale, bias);
}

// dst = func(src * scale + bias), and sums[r] = the fp32 sum of row r's results (lane-wise
// partial sums in element order, then the lanes combined: see engine/vector.hpp). sums is a
// rows x 1 view of float or a range of rows floats.
template <class Dst, class Sums, class Src, class Scale = float, class Bias = float>
void activation_sum(Dst&& dst, Sums&& sums, const Src& src, act func, const Scale& scale = 1.0f,
                    const Bias& bias = 0.0f) {
  detail::activate<true>("tilekern::scalar::activation_sum", std::forward<Dst>(dst),
                         std::forward<Sums>(sums), src, func, scale, bias);
}

// dst = exp(src * scale + bias).
template <class Dst, class Src, class Scale = float, class Bias = float>
void exp(Dst&& dst, const Src& src, const Scale& scale = 1.0f, const Bias& bias = 0.0f) {
  activation(std::forward<Dst>(dst), src, act::exp, scale, bias);
}

}  // namespace tilekern::scalar
