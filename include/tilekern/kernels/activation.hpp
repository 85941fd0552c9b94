#pragma once
// The activation functions of the scalar engine as standalone kernels: y = f(x) elementwise, on
// runtime-shaped tensors in any format.
//
//   activation(x, y, f, cast)      f a tilekern::act (simd/math.hpp): identity, exp, log, tanh,
//                                  sigmoid, relu, gelu_erf, gelu_tanh, silu, softplus, mish, erf,
//                                  sqrt, rsqrt, reciprocal, square, abs
//
// One pass of scalar::activation (engine/scalar.hpp): x is decoded exactly to fp32, f computed in
// fp32 lanes, and the result encoded into y's format with `cast`. Accuracy: the fp32 result is
// within accuracy(f).max_ulp fp32 ulp of f(x) over accuracy(f)'s input range (simd/math.hpp); y
// then adds its format's rounding: with nearest even, y is F::from(f(x)) (the correctly rounded
// result) except where f(x) lies within that fp32 error of a rounding boundary of F, where it may
// be the neighbour on the other side of the boundary; stochastically, one of the two codes
// bracketing the fp32 result. The fp64 version is reference::activation (reference/activation.hpp).
//
// Rounding: element (r, c) of a rows x cols y draws its stochastic bits with index r * cols + c,
// stream cast.stream. y may be x itself (the same memory and format). x and y must have the same
// shape: otherwise shape_error naming the kernel, the argument and both sizes, before anything is
// written.

#include <string>
#include <type_traits>
#include <utility>

#include "tilekern/engine/scalar.hpp"
#include "tilekern/error.hpp"
#include "tilekern/simd/math.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/rounding.hpp"

namespace tilekern {

// y = f(x) elementwise. x: rows x cols, a view or a contiguous range (one row); y: the same
// shape, writable; each float or any tilekern format.
template <class X, class Y>
void activation(X&& x, Y&& y, act f, const cast_options& cast = {}) {
  const auto x_view = detail::to_view(std::forward<X>(x));
  const auto y_view = detail::to_view(std::forward<Y>(y));
  using x_type = std::remove_const_t<typename decltype(x_view)::element_type>;
  using y_type = typename decltype(y_view)::element_type;
  static_assert(engine_element<x_type> && engine_element<y_type>,
                "tilekern::activation: x and y must hold float or a tilekern format (bf16, fp16, "
                "tf32, fp8_*, any minifloat<...>)");
  static_assert(!std::is_const_v<y_type>,
                "tilekern::activation: y must be writable (not a view of const or a const range)");
  if (y_view.rows() != x_view.rows() || y_view.cols() != x_view.cols()) {
    detail::throw_shape_error([&] {
      return "tilekern::activation: y is " + detail::shape_text(y_view.rows(), y_view.cols()) +
             ", expected " + detail::shape_text(x_view.rows(), x_view.cols()) + " (the shape of x)";
    });
  }
  scalar::activation(vector::rounded(y_view, cast), view<const x_type>(x_view), f);
}

}  // namespace tilekern
