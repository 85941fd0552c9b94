#pragma once
// reference::softmax: row-wise softmax of scaled scores in plain fp64, optionally masked, what the
// accuracy of softmax (and attention) kernels is measured against; and its gradient,
// reference::softmax_backward.
//
//   s[r][c] = scale * x[r][c]                      (+ mask[r][c], an additive mask)
//   y[r][c] = exp(s[r][c] - m[r]) / sum_c exp(s[r][c] - m[r]),   m[r] = max_c s[r][c]
//
// A boolean mask instead removes the elements whose keep[r][c] is false, as if their score were
// -inf, without reading their x. Either mask is rows x cols, or 1 x cols and broadcast to every
// row.
//
// Numerics: exp of s - m <= 0 never overflows, and the largest term is exactly 1, so the sum is in
// [1, cols] and never underflows; the sum is a plain left-to-right fp64 sum. Each y is within
// about (cols + 10) * 2^-53 relative of the exact value. Range: any finite scores whose scale * x
// (+ mask) does not overflow fp64 (|s| below about 1.8e308); elements more than about 745 below
// the row's maximum get exactly 0, as the exact value is below the smallest fp64 subnormal.
//
// Special values (the first two are defined, the rest follow the arithmetic):
//   - A row whose scores are all -inf (fully masked, by either mask, or -inf inputs with
//     scale > 0) gives all zeros, not NaN (0 / 0).
//   - NaN in any of a row's scores that are not masked out makes that row all NaN, and only that
//     row. For the additive mask a score is scale * x + mask, so a NaN x under a -inf mask is
//     still a NaN score (NaN + -inf is NaN); the boolean mask never reads a masked x.
//   - A +inf score makes its row all NaN: m = +inf, and inf - inf is NaN. So do +inf + -inf
//     (an inf x under a -inf additive mask) and 0 * inf (scale = 0 and an infinite x), which are
//     NaN scores.
//   - -inf scores (masked elements) get exactly 0 in a row that has a finite score.
//
// Gradient, for an upstream gradient dy of y (a loss L with dL/dy = dy), from the forward's output
// y (the mask is in y: masked elements have y = 0, so their dx is 0):
//
//   dx[r][c] = scale * y[r][c] * (dy[r][c] - sum_c(dy[r][c] * y[r][c]))
//
// the row's dot product a plain left-to-right fp64 sum. It is the gradient with respect to x; the
// gradient with respect to an additive mask is dx / scale. Special values follow the arithmetic
// (a NaN in a row of y or dy makes that row of dx NaN; a fully masked row, y = 0, gives dx = 0
// for finite dy).
//
// Inputs in another format: decode them to double first (to_double() is exact), so that the
// reference sees exactly the values the kernel under test sees.

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>

#include "tilekern/error.hpp"
#include "tilekern/reference/rmsnorm.hpp"  // detail::check_shape
#include "tilekern/tile/view.hpp"

namespace tilekern::reference {
namespace detail {

// Throws unless a mask of rows x cols fits x: x.cols() columns, and x.rows() rows or one.
inline void check_mask(const char* function, const char* argument, std::size_t rows,
                       std::size_t cols, std::size_t x_rows, std::size_t x_cols) {
  if (cols != x_cols || (rows != x_rows && rows != 1)) {
    throw shape_error(std::string(function) + ": " + argument + " is " + std::to_string(rows) +
                      "x" + std::to_string(cols) + ", expected " + std::to_string(x_rows) + "x" +
                      std::to_string(x_cols) + " or 1x" + std::to_string(x_cols) +
                      " (the shape of x, or one row broadcast)");
  }
}

// y = softmax of the row's scores, score(c) giving s[c] or -inf for a masked element (see the top).
// The scores are stored into y first, so that each is one rounded fp64 value before m is
// subtracted (the compiler cannot fuse scale * x - m into one fma in one variant and not in
// another: the three softmax overloads agree exactly where their scores do), and so that y may be
// x (score(c) reads only x(r, c), before y[c] is written).
template <class Score>
void softmax_row(std::size_t cols, Score score, std::span<double> y) {
  constexpr double minus_infinity = -std::numeric_limits<double>::infinity();
  double m = minus_infinity;
  bool nan = false;
  for (std::size_t c = 0; c < cols; ++c) {
    const double s = score(c);
    y[c] = s;
    if (std::isnan(s)) nan = true;
    if (s > m) m = s;
  }
  if (nan) {
    for (double& v : y) v = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  if (m == minus_infinity) {  // fully masked: zeros, not 0 / 0
    for (double& v : y) v = 0.0;
    return;
  }
  double sum = 0.0;
  for (double& v : y) {
    v = std::exp(v - m);
    sum += v;
  }
  for (double& v : y) v /= sum;
}

}  // namespace detail

// y = softmax(scale * x), row by row. y has the shape of x and may be x itself. Throws
// shape_error, before writing anything, if the sizes do not fit.
inline void softmax(view<const double> x, double scale, view<double> y) {
  constexpr const char* function = "tilekern::reference::softmax";
  detail::check_shape(function, "y", y.rows(), y.cols(), x.rows(), x.cols(), "the shape of x");
  for (std::size_t r = 0; r < x.rows(); ++r) {
    detail::softmax_row(
        x.cols(), [&](std::size_t c) { return scale * x(r, c); }, y.row(r));
  }
}

// y = softmax(scale * x + mask), row by row; mask is rows x cols or 1 x cols (broadcast), its -inf
// entries mask out. y has the shape of x and may be x itself. Throws shape_error, before writing
// anything, if the sizes do not fit.
inline void softmax(view<const double> x, double scale, view<const double> mask, view<double> y) {
  constexpr const char* function = "tilekern::reference::softmax";
  detail::check_mask(function, "mask", mask.rows(), mask.cols(), x.rows(), x.cols());
  detail::check_shape(function, "y", y.rows(), y.cols(), x.rows(), x.cols(), "the shape of x");
  for (std::size_t r = 0; r < x.rows(); ++r) {
    const std::size_t mask_row = mask.rows() == 1 ? 0 : r;
    detail::softmax_row(
        x.cols(), [&](std::size_t c) { return scale * x(r, c) + mask(mask_row, c); }, y.row(r));
  }
}

// y = softmax(scale * x) over the elements keep marks true, row by row, 0 for the others; keep is
// rows x cols or 1 x cols (broadcast). y has the shape of x and may be x itself. Throws
// shape_error, before writing anything, if the sizes do not fit.
inline void softmax(view<const double> x, double scale, view<const bool> keep, view<double> y) {
  constexpr const char* function = "tilekern::reference::softmax";
  detail::check_mask(function, "keep", keep.rows(), keep.cols(), x.rows(), x.cols());
  detail::check_shape(function, "y", y.rows(), y.cols(), x.rows(), x.cols(), "the shape of x");
  constexpr double minus_infinity = -std::numeric_limits<double>::infinity();
  for (std::size_t r = 0; r < x.rows(); ++r) {
    const std::size_t keep_row = keep.rows() == 1 ? 0 : r;
    detail::softmax_row(
        x.cols(),
        [&](std::size_t c) { return keep(keep_row, c) ? scale * x(r, c) : minus_infinity; },
        y.row(r));
  }
}

// The gradient of y = softmax(scale * x (+ mask)) with respect to x, for the upstream gradient dy
// (see the top). dy and dx have the shape of y; dx may be dy itself. Throws shape_error, before
// writing anything, if the sizes do not fit.
inline void softmax_backward(view<const double> dy, view<const double> y, double scale,
                             view<double> dx) {
  constexpr const char* function = "tilekern::reference::softmax_backward";
  detail::check_shape(function, "dy", dy.rows(), dy.cols(), y.rows(), y.cols(), "the shape of y");
  detail::check_shape(function, "dx", dx.rows(), dx.cols(), y.rows(), y.cols(), "the shape of y");
  for (std::size_t r = 0; r < y.rows(); ++r) {
    double dot = 0.0;
    for (std::size_t c = 0; c < y.cols(); ++c) dot += dy(r, c) * y(r, c);
    for (std::size_t c = 0; c < y.cols(); ++c) dx(r, c) = scale * y(r, c) * (dy(r, c) - dot);
  }
}

}  // namespace tilekern::reference
