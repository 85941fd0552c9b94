#pragma once
// The scalar engine: dst = func(src * scale + bias), the NeuronCore's activation instruction,
// with an optional add-reduce along each row.
//
//   activation(dst, src, func[, scale[, bias]])
//   activation_sum(dst, sums, src, func[, scale[, bias]])
//       also sums[r] = the fp32 sum over row r of the results, before dst's rounding
//   exp(dst, src[, scale[, bias]])         activation with act::exp, which attention reads as
//                                           exp(p, s) (and the other acts likewise)
//
// func is a tilekern::act (simd/math.hpp, which documents each function's error in fp32 ulp), or
// act_constant<F>() for a function F known at compile time: the loops are then compiled for F
// alone, where an act compiles them for all 17; the same bits, but not always the same speed
// (attention's exponentials, taken so, ran 3-8% slower: CONTRIBUTING.md, stop 77).
// scale and bias are floats or views: one column (a value per row, e.g. a row's -max for
// softmax), one row, or the shape of src; dst and src follow the vector engine's rules
// (engine/vector.hpp): any format, rounded(dst, cast, ...) for the caller's rounding. The
// argument is computed with one fused multiply-add, src * scale + bias, rounded once; without a
// bias it is src * scale, and without a scale src itself (so func(-0) is func of -0, where
// -0 * 1 + 0 would be +0: 1 / -0 is -inf).

#include <type_traits>
#include <utility>

#include "tilekern/engine/vector.hpp"
#include "tilekern/simd/math.hpp"

namespace tilekern::scalar {

namespace detail {

// The argument of func: src itself, src * scale, or src * scale + bias (one fused multiply-add).
template <class V>
V argument(V src) {
  return src;
}
template <class V>
V argument(V src, V scale) {
  return src * scale;
}
template <class V>
V argument(V src, V scale, V bias) {
  return hwy::HWY_NAMESPACE::MulAdd(src, scale, bias);
}

// Whether Func is a function the scalar engine takes: an act, or an act_constant.
template <class Func>
inline constexpr bool is_function = std::is_same_v<Func, act>;
template <act F>
inline constexpr bool is_function<act_constant<F>> = true;

template <bool Reduce, class Dst, class Sums, class Src, class Func, class... ScaleBias>
void activate(const char* function, Dst&& dst, Sums&& sums, const Src& src, Func func,
              const ScaleBias&... scale_bias) {
  static_assert(is_function<Func>, "tilekern::scalar: func is a tilekern::act or an act_constant");
  static_assert(sizeof...(ScaleBias) <= 2, "give at most a scale and a bias");
  tilekern::detail::visit_act(func, [&](auto f) {
    vector::detail::elementwise<Reduce>(
        function, {"src", "scale", "bias"}, std::forward<Dst>(dst), std::forward<Sums>(sums),
        [](auto d, auto x, auto... s_b) {
          return tilekern::detail::activate<decltype(f)::value>(d, argument(x, s_b...));
        },
        src, scale_bias...);
  });
}

}  // namespace detail

// dst = func(src), func(src * scale) or func(src * scale + bias).
template <class Dst, class Src, class Func, class... ScaleBias>
void activation(Dst&& dst, const Src& src, Func func, const ScaleBias&... scale_bias) {
  detail::activate<false>("tilekern::scalar::activation", std::forward<Dst>(dst), nullptr, src,
                          func, scale_bias...);
}

// The same, and sums[r] = the fp32 sum of row r's results (lane-wise partial sums in element
// order, then the lanes combined: see engine/vector.hpp). sums is a rows x 1 view of float or a
// range of rows floats.
template <class Dst, class Sums, class Src, class Func, class... ScaleBias>
void activation_sum(Dst&& dst, Sums&& sums, const Src& src, Func func,
                    const ScaleBias&... scale_bias) {
  detail::activate<true>("tilekern::scalar::activation_sum", std::forward<Dst>(dst),
                         std::forward<Sums>(sums), src, func, scale_bias...);
}

// dst = exp(src), exp(src * scale) or exp(src * scale + bias).
template <class Dst, class Src, class... ScaleBias>
void exp(Dst&& dst, const Src& src, const ScaleBias&... scale_bias) {
  activation(std::forward<Dst>(dst), src, act::exp, scale_bias...);
}

}  // namespace tilekern::scalar
