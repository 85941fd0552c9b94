#pragma once
// reference::rmsnorm: RMS normalisation in plain fp64, what the accuracy of tilekern::rmsnorm
// (kernels/rmsnorm.hpp) and of user-written versions is measured against; and its gradients,
// reference::rmsnorm_backward.
//
//   y[r][c] = x[r][c] / sqrt(mean_c(x[r][c]^2) + eps) * gamma[c]
//
// Numerics: the sum of squares is a plain left-to-right fp64 sum, so the result is within about
// (cols + 6) * 2^-53 relative of the exact value: below 1e-10 for any row that fits in memory,
// which is negligible against every format tilekern writes. Special values follow the
// arithmetic: a NaN in a row makes the row NaN; an inf makes its own element NaN (inf / inf) and
// the row's finite elements 0; a row of zeros with eps = 0 is NaN (0 / 0). Range: the squares
// must stay finite and normal, |x| between about 1e-150 and 1e150 (or a row whose sum of squares
// is dominated by eps); 1e30 and 1e-30 are far inside it.
//
// Gradients, for an upstream gradient dy of y (a loss L with dL/dy = dy), with
// rstd = 1 / sqrt(mean_c(x^2) + eps), xhat = x * rstd and g = dy * gamma:
//
//   dx[r][c]  = rstd * (g[r][c] - xhat[r][c] * mean_c(g * xhat))
//   dgamma[c] = sum_r dy[r][c] * xhat[r][c]
//
// in plain fp64 loops (the row means and the column sums left to right), each within about
// (cols + rows + 10) * 2^-53 of the exact value relative to the magnitudes summed. Special values
// follow the arithmetic as in the forward (a NaN in a row of x or dy makes that row of dx NaN, and
// NaN reaches dgamma through the column sums).
//
// Inputs in another format: decode them to double first (to_double() is exact), so that the
// reference sees exactly the values the kernel under test sees.

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include "tilekern/error.hpp"
#include "tilekern/tile/view.hpp"

namespace tilekern::reference {
namespace detail {

// Throws unless `argument` (of shape rows x cols) is expected_rows x expected_cols, naming the
// function, the argument and both shapes; `of_what` says where the expected shape comes from.
// Shared by the reference headers (layernorm.hpp and softmax.hpp include this one for it).
inline void check_shape(const char* function, const char* argument, std::size_t rows,
                        std::size_t cols, std::size_t expected_rows, std::size_t expected_cols,
                        const char* of_what) {
  if (rows != expected_rows || cols != expected_cols) {
    throw shape_error(std::string(function) + ": " + argument + " is " + std::to_string(rows) +
                      "x" + std::to_string(cols) + ", expected " + std::to_string(expected_rows) +
                      "x" + std::to_string(expected_cols) + " (" + of_what + ")");
  }
}

// 1 / sqrt(mean(row^2) + eps), the sum of squares left to right.
inline double inverse_rms(std::span<const double> row, double eps) {
  double sum_of_squares = 0.0;
  for (double v : row) sum_of_squares += v * v;
  return 1.0 / std::sqrt(sum_of_squares / static_cast<double>(row.size()) + eps);
}

}  // namespace detail

// y = rmsnorm(x) * gamma, row by row. gamma has x.cols() elements; y has the shape of x and may be
// x itself. Throws shape_error, before writing anything, if the sizes do not fit.
inline void rmsnorm(view<const double> x, std::span<const double> gamma, double eps,
                    view<double> y) {
  constexpr const char* function = "tilekern::reference::rmsnorm";
  tilekern::detail::check_size(function, "gamma", gamma.size(), x.cols());
  detail::check_shape(function, "y", y.rows(), y.cols(), x.rows(), x.cols(), "the shape of x");
  const std::size_t cols = x.cols();
  if (cols == 0) return;
  for (std::size_t r = 0; r < x.rows(); ++r) {
    const double inverse_rms = detail::inverse_rms(x.row(r), eps);
    for (std::size_t c = 0; c < cols; ++c) y(r, c) = x(r, c) * inverse_rms * gamma[c];
  }
}

// The gradients of rmsnorm(x, gamma, eps) for the upstream gradient dy (see the top). dy and dx
// have the shape of x, gamma and dgamma x.cols() elements; dgamma is overwritten (not accumulated
// into). dx may be dy itself. Throws shape_error, before writing anything, if the sizes do not
// fit.
inline void rmsnorm_backward(view<const double> dy, view<const double> x,
                             std::span<const double> gamma, double eps, view<double> dx,
                             std::span<double> dgamma) {
  constexpr const char* function = "tilekern::reference::rmsnorm_backward";
  detail::check_shape(function, "dy", dy.rows(), dy.cols(), x.rows(), x.cols(), "the shape of x");
  tilekern::detail::check_size(function, "gamma", gamma.size(), x.cols());
  detail::check_shape(function, "dx", dx.rows(), dx.cols(), x.rows(), x.cols(), "the shape of x");
  tilekern::detail::check_size(function, "dgamma", dgamma.size(), x.cols());
  const std::size_t cols = x.cols();
  for (double& v : dgamma) v = 0.0;
  if (cols == 0) return;
  const auto n = static_cast<double>(cols);
  for (std::size_t r = 0; r < x.rows(); ++r) {
    const double rstd = detail::inverse_rms(x.row(r), eps);
    double g_dot_xhat = 0.0;
    for (std::size_t c = 0; c < cols; ++c) g_dot_xhat += dy(r, c) * gamma[c] * (x(r, c) * rstd);
    const double mean_g_xhat = g_dot_xhat / n;
    for (std::size_t c = 0; c < cols; ++c) {
      const double xhat = x(r, c) * rstd;
      const double upstream = dy(r, c);  // read before dx(r, c) is written: dx may be dy
      dgamma[c] += upstream * xhat;
      dx(r, c) = rstd * (upstream * gamma[c] - xhat * mean_g_xhat);
    }
  }
}

}  // namespace tilekern::reference
