#pragma once
// reference::layernorm: layer normalisation in plain fp64, what the accuracy of layernorm kernels
// (and of user-written versions) is measured against; and its gradients,
// reference::layernorm_backward.
//
//   mean[r]  = mean_c(x[r][c])
//   var[r]   = mean_c((x[r][c] - mean[r])^2)          the biased (1 / cols) variance
//   y[r][c]  = (x[r][c] - mean[r]) / sqrt(var[r] + eps) * gamma[c] + beta[c]
//
// Numerics: two passes in fp64. The mean is taken relative to the row's first element,
// mean = x0 + sum_c(x - x0) / cols (a plain left-to-right sum), then the variance as the mean of
// the squared deviations from it. Shifting by x0 makes a constant row exact: its deviations are
// exactly 0, so var = 0 and y = beta exactly (for eps > 0), whatever the value and the row length.
// For other rows the result is within about (cols + 10) * 2^-53 relative of the exact value
// (cancellation in x - mean is exact or bounded by the spread of the row, never by the magnitude
// of the mean, since the variance is computed from the deviations, not as E[x^2] - mean^2).
// Range: the squared deviations and their sum must stay finite and normal: |x - mean| between
// about 1e-150 and 1e150 / sqrt(cols) (so rows of 1e30 or of 1e-30 are far inside it; a row
// whose spread is below 1e-150 is dominated by eps unless eps is tiny as well).
//
// Special values follow the arithmetic: a NaN or an inf anywhere in a row makes the whole row NaN
// (the mean is NaN or inf, and inf - inf is NaN); a constant row gives beta exactly for eps > 0,
// and with eps = 0 it is NaN (0 * (1 / 0)), as rmsnorm's row of zeros is. NaN in gamma or beta
// makes its own column NaN.
//
// Gradients, for an upstream gradient dy of y (a loss L with dL/dy = dy), with
// rstd = 1 / sqrt(var + eps), xhat = (x - mean) * rstd and g = dy * gamma, per row:
//
//   dx[r][c]  = rstd * (g[r][c] - mean_c(g) - xhat[r][c] * mean_c(g * xhat))
//   dgamma[c] = sum_r dy[r][c] * xhat[r][c]
//   dbeta[c]  = sum_r dy[r][c]
//
// in plain fp64 loops (the statistics as in the forward, the row means and the column sums left
// to right), within about (cols + rows + 10) * 2^-53 of the exact value relative to the
// magnitudes summed. Special values follow the arithmetic (a NaN in a row of x or dy makes that
// row of dx NaN; dgamma and dbeta then pick it up through the column sums).
//
// Inputs in another format: decode them to double first (to_double() is exact), so that the
// reference sees exactly the values the kernel under test sees.

#include <cmath>
#include <cstddef>
#include <span>

#include "tilekern/error.hpp"
#include "tilekern/reference/rmsnorm.hpp"  // detail::check_shape
#include "tilekern/tile/view.hpp"

namespace tilekern::reference {
namespace detail {

struct row_statistics {
  double mean = 0.0;
  double rstd = 0.0;  // 1 / sqrt(var + eps)
};

// The mean (shifted by the first element, see the top) and 1 / sqrt(var + eps) of a non-empty row.
inline row_statistics layernorm_statistics(std::span<const double> row, double eps) {
  const auto n = static_cast<double>(row.size());
  const double shift = row[0];
  double sum_of_deviations = 0.0;
  for (double v : row) sum_of_deviations += v - shift;
  const double mean = shift + sum_of_deviations / n;
  double sum_of_squares = 0.0;
  for (double v : row) sum_of_squares += (v - mean) * (v - mean);
  return {mean, 1.0 / std::sqrt(sum_of_squares / n + eps)};
}

}  // namespace detail

// y = layernorm(x) * gamma + beta, row by row. gamma and beta have x.cols() elements; y has the
// shape of x and may be x itself. Throws shape_error, before writing anything, if the sizes do not
// fit.
inline void layernorm(view<const double> x, std::span<const double> gamma,
                      std::span<const double> beta, double eps, view<double> y) {
  constexpr const char* function = "tilekern::reference::layernorm";
  tilekern::detail::check_size(function, "gamma", gamma.size(), x.cols());
  tilekern::detail::check_size(function, "beta", beta.size(), x.cols());
  detail::check_shape(function, "y", y.rows(), y.cols(), x.rows(), x.cols(), "the shape of x");
  const std::size_t cols = x.cols();
  if (cols == 0) return;
  for (std::size_t r = 0; r < x.rows(); ++r) {
    const auto [mean, rstd] = detail::layernorm_statistics(x.row(r), eps);
    for (std::size_t c = 0; c < cols; ++c) y(r, c) = (x(r, c) - mean) * rstd * gamma[c] + beta[c];
  }
}

// The gradients of layernorm(x, gamma, beta, eps) for the upstream gradient dy (see the top); they
// do not depend on beta. dy and dx have the shape of x; gamma, dgamma and dbeta x.cols()
// elements; dgamma and dbeta are overwritten (not accumulated into). dx may be dy itself. Throws
// shape_error, before writing anything, if the sizes do not fit.
inline void layernorm_backward(view<const double> dy, view<const double> x,
                               std::span<const double> gamma, double eps, view<double> dx,
                               std::span<double> dgamma, std::span<double> dbeta) {
  constexpr const char* function = "tilekern::reference::layernorm_backward";
  detail::check_shape(function, "dy", dy.rows(), dy.cols(), x.rows(), x.cols(), "the shape of x");
  tilekern::detail::check_size(function, "gamma", gamma.size(), x.cols());
  detail::check_shape(function, "dx", dx.rows(), dx.cols(), x.rows(), x.cols(), "the shape of x");
  tilekern::detail::check_size(function, "dgamma", dgamma.size(), x.cols());
  tilekern::detail::check_size(function, "dbeta", dbeta.size(), x.cols());
  const std::size_t cols = x.cols();
  for (double& v : dgamma) v = 0.0;
  for (double& v : dbeta) v = 0.0;
  if (cols == 0) return;
  const auto n = static_cast<double>(cols);
  for (std::size_t r = 0; r < x.rows(); ++r) {
    const auto [mean, rstd] = detail::layernorm_statistics(x.row(r), eps);
    double sum_g = 0.0;
    double sum_g_xhat = 0.0;
    for (std::size_t c = 0; c < cols; ++c) {
      const double g = dy(r, c) * gamma[c];
      sum_g += g;
      sum_g_xhat += g * ((x(r, c) - mean) * rstd);
    }
    const double mean_g = sum_g / n;
    const double mean_g_xhat = sum_g_xhat / n;
    for (std::size_t c = 0; c < cols; ++c) {
      const double xhat = (x(r, c) - mean) * rstd;
      const double upstream = dy(r, c);  // read before dx(r, c) is written: dx may be dy
      dgamma[c] += upstream * xhat;
      dbeta[c] += upstream;
      dx(r, c) = rstd * (upstream * gamma[c] - mean_g - xhat * mean_g_xhat);
    }
  }
}

}  // namespace tilekern::reference
