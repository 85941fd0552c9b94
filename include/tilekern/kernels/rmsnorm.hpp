#pragma once
// rmsnorm: RMS normalisation of each row of a runtime-shaped tensor, in any format.
//
//   y[r][c] = x[r][c] / sqrt(mean_c(x[r][c]^2) + eps) * gamma[c]
//
// x, gamma and y each hold float or any tilekern format; the arithmetic is fp32 throughout. The
// plain fp64 version is reference::rmsnorm (reference/rmsnorm.hpp).
//
// This first version is deliberately simple: one thread, row by row, each row decoded into an
// fp32 scratch row with convert() and encoded back with it. It is independent of engine/gpsimd
// (examples/custom_ops/rmsnorm.cpp checks a GPSIMD operator against it). The vector-engine
// issue rewrites it on engine operations for speed; the numerics documented here are the
// contract that version keeps.
//
// Accumulation: the sum of squares is fp32, in 16 lanes: element i goes to lane i % 16 (the
// remainder of a row, too), each lane a Kahan-compensated running sum in element order, a loop
// GCC vectorises without -ffast-math (one 512-bit or two 256-bit vectors of lanes). The 16 sums
// and their 16 compensations are then added by one more Kahan sum, in lane order. Then:
//   inverse_rms = 1 / sqrt(sum / cols + eps),   y = x * inverse_rms * gamma   (left to right).
// The fp32 arithmetic does not depend on the ISA path: results are bit-identical under every
// TILEKERN_ISA cap of one build (the conversions are exact or bit-exact on every path).
// Why compensated: plain 16-lane sums err by up to (cols / 16) u, and come near it: on a bf16
// N(0, 1) row of 100003 their sum was 5.9e-6 (about 100u) off, since the squares of bf16 values
// have few bits and their rounding errors do not cancel.
//
// Error bound: against reference::rmsnorm on the same (decoded) inputs, every fp32 result before
// it is encoded has relative error at most 8u = 2^-21, about 4.8e-7 (u = 2^-24; 4 to 8 fp32 ulp,
// depending on where y falls in its binade), for any cols below 2^24 where no square leaves
// fp32's normal range. Measured: 3.4u at most, on N(0, 1) rows of 768 to 100003. (The sum: 2u
// for the lanes' Kahan sums and 2u for the last one, plus O(cols u^2), negligible below 2^24,
// and u for squares the compiler does not fuse into an FMA; halved by the square root, as are
// the u of the mean and of + eps: 3.5u. Then sqrt, the reciprocal and the two products, u each:
// 7.5u in all.) The encoded result adds the output format's rounding: half an ulp of y's format
// (nearest even), under one ulp (stochastic, toward zero).
//
// Special values and ranges:
// - A NaN in a row makes the row NaN. An inf makes its element NaN and the row's finite elements
//   zero (the rms is inf), as the fp64 arithmetic does.
// - A row whose squares overflow fp32 (|x| above about 1.8e19, possible in float, bf16 and tf32)
//   is scaled by a power of two and summed again, so it keeps the bound above.
// - Squares below fp32's normal range (|x| below about 1.1e-19) lose precision. That is
//   invisible unless eps is as small: with eps = 0, a row whose rms is that small loses
//   accuracy, and a row of zeros is NaN (0 / 0), as in the reference.
//
// Stochastic rounding: element (r, c) of y draws its random bits with index r * cols + c (its
// row-major index in y, whatever y's stride), stream cast.stream.
//
// y may be x itself (the same memory and format): each row is decoded before it is written.
// Other overlaps between y and x or gamma are not supported.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tilekern/error.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/minifloat.hpp"
#include "tilekern/types/rounding.hpp"

namespace tilekern {

namespace detail {

template <class T>
constexpr bool rmsnorm_element =
    std::is_same_v<std::remove_const_t<T>, float> || minifloat_format<std::remove_const_t<T>>;

template <class T>
struct is_rmsnorm_view : std::false_type {};
template <class T>
struct is_rmsnorm_view<view<T>> : std::true_type {};

// A view as it is, or a contiguous range as a view of one row.
template <class Tensor>
auto rmsnorm_view(Tensor&& tensor) {
  if constexpr (is_rmsnorm_view<std::remove_cvref_t<Tensor>>::value) {
    return std::remove_cvref_t<Tensor>(tensor);
  } else {
    return view(std::forward<Tensor>(tensor));
  }
}

inline std::string rmsnorm_shape(std::size_t rows, std::size_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// The sum over i of (v[i] * scale)^2, accumulated as the header comment says. scale is a power of
// two (exact) or 1.
inline float rmsnorm_sum_of_squares(const float* v, std::size_t n, float scale) {
  constexpr std::size_t lanes = 16;
  float sum[lanes] = {};
  float compensation[lanes] = {};  // minus the low-order bits each lane's sum has lost
  const auto add = [&](std::size_t lane, float term) {
    const float corrected = term - compensation[lane];
    const float next = sum[lane] + corrected;
    compensation[lane] = (next - sum[lane]) - corrected;
    sum[lane] = next;
  };
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    for (std::size_t lane = 0; lane < lanes; ++lane) {
      const float value = v[i + lane] * scale;
      add(lane, value * value);
    }
  }
  for (std::size_t lane = 0; i + lane < n; ++lane) {
    const float value = v[i + lane] * scale;
    add(lane, value * value);
  }
  float total = 0.0f, lost = 0.0f;
  const auto add_to_total = [&](float term) {
    const float corrected = term - lost;
    const float next = total + corrected;
    lost = (next - total) - corrected;
    total = next;
  };
  for (std::size_t lane = 0; lane < lanes; ++lane) add_to_total(sum[lane]);
  for (std::size_t lane = 0; lane < lanes; ++lane) add_to_total(-compensation[lane]);
  return total;
}

template <class T>
void rmsnorm_decode(const T* from, float* to, std::size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::copy_n(from, n, to);
  } else {
    convert(std::span<const T>(from, n), std::span<float>(to, n));
  }
}

template <class In, class G, class Out>
void rmsnorm_views(view<const In> x, view<const G> gamma, view<Out> y, float eps,
                   const cast_options& cast) {
  constexpr const char* function = "tilekern::rmsnorm";
  const std::size_t rows = x.rows(), cols = x.cols();
  if (gamma.rows() != 1) {
    throw shape_error(std::string(function) + ": gamma is " +
                      rmsnorm_shape(gamma.rows(), gamma.cols()) + ", expected one row of " +
                      std::to_string(cols) + " (the columns of x)");
  }
  if (gamma.cols() != cols) {
    throw shape_error(std::string(function) + ": gamma has " + std::to_string(gamma.cols()) +
                      " elements, expected " + std::to_string(cols) + " (the columns of x)");
  }
  if (y.rows() != rows || y.cols() != cols) {
    throw shape_error(std::string(function) + ": y is " + rmsnorm_shape(y.rows(), y.cols()) +
                      ", expected " + rmsnorm_shape(rows, cols) + " (the shape of x)");
  }
  if (rows * cols == 0) return;

  std::vector<float> scratch(2 * cols);  // (2, cols): the current row, then gamma
  float* const row = scratch.data();
  float* const gamma32 = scratch.data() + cols;
  rmsnorm_decode(gamma.data(), gamma32, cols);
  const auto count = static_cast<float>(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    rmsnorm_decode(x.row(r).data(), row, cols);
    float sum = rmsnorm_sum_of_squares(row, cols, 1.0f);
    float scale = 1.0f;
    if (!std::isfinite(sum)) {  // a NaN or inf in the row, or squares beyond fp32's range
      float largest = 0.0f;
      bool nan = false;
      for (std::size_t c = 0; c < cols; ++c) {
        nan = nan || std::isnan(row[c]);
        largest = std::max(largest, std::fabs(row[c]));
      }
      if (nan) {
        sum = std::numeric_limits<float>::quiet_NaN();
      } else if (std::isinf(largest)) {
        sum = std::numeric_limits<float>::infinity();
      } else {
        scale = std::ldexp(1.0f, -std::ilogb(largest));  // largest * scale is in [1, 2)
        sum = rmsnorm_sum_of_squares(row, cols, scale);
      }
    }
    // eps * scale^2 may underflow when scale < 1: it is then far below sum / cols >= 1 / cols.
    const float inverse_rms = 1.0f / std::sqrt(sum / count + eps * scale * scale);
    for (std::size_t c = 0; c < cols; ++c) row[c] = row[c] * scale * inverse_rms * gamma32[c];
    if constexpr (std::is_same_v<Out, float>) {
      std::copy_n(row, cols, y.row(r).data());
    } else {
      convert(std::span<const float>(row, cols), y.row(r), cast, r * cols);
    }
  }
}

}  // namespace detail

// y = x / sqrt(mean(x^2) + eps) * gamma, row by row (see the top of this header).
//   x      rows x cols: a view<T> or view<const T>, or a contiguous range (one row)
//   gamma  cols elements: a contiguous range, or a view of one row
//   y      rows x cols, writable
// Each holds float or a tilekern format; y is encoded with `cast` (rounding and overflow). Throws
// shape_error naming the argument and both sizes, before touching any memory, if gamma does not
// have x's columns or y does not have x's shape.
template <class X, class Gamma, class Y>
void rmsnorm(X&& x, Gamma&& gamma, Y&& y, float eps, const cast_options& cast = {}) {
  auto x_view = detail::rmsnorm_view(std::forward<X>(x));
  auto gamma_view = detail::rmsnorm_view(std::forward<Gamma>(gamma));
  auto y_view = detail::rmsnorm_view(std::forward<Y>(y));
  using in_type = typename decltype(x_view)::element_type;
  using gamma_type = typename decltype(gamma_view)::element_type;
  using out_type = typename decltype(y_view)::element_type;
  static_assert(detail::rmsnorm_element<in_type> && detail::rmsnorm_element<gamma_type> &&
                    detail::rmsnorm_element<out_type>,
                "tilekern::rmsnorm: x, gamma and y must hold float or a tilekern format "
                "(bf16, fp16, tf32, fp8_*, any minifloat<...>)");
  static_assert(!std::is_const_v<out_type>,
                "tilekern::rmsnorm: y must be writable (not a view of const or a const range)");
  detail::rmsnorm_views(view<const std::remove_const_t<in_type>>(x_view),
                        view<const std::remove_const_t<gamma_type>>(gamma_view), y_view, eps, cast);
}

}  // namespace tilekern
