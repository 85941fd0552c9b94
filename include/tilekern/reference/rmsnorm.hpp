#pragma once
// reference::rmsnorm: RMS normalisation in plain fp64, what the accuracy of tilekern::rmsnorm
// (kernels/rmsnorm.hpp) and of user-written versions is measured against.
//
//   y[r][c] = x[r][c] / sqrt(mean_c(x[r][c]^2) + eps) * gamma[c]
//
// Numerics: the sum of squares is a plain left-to-right fp64 sum, so the result is within about
// (cols + 6) * 2^-53 relative of the exact value: below 1e-10 for any row that fits in memory,
// which is negligible against every format tilekern writes. Special values follow the
// arithmetic: a NaN in a row makes the row NaN; an inf makes its own element NaN (inf / inf) and
// the row's finite elements 0; a row of zeros with eps = 0 is NaN (0 / 0).
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

// y = rmsnorm(x) * gamma, row by row. gamma has x.cols() elements; y has the shape of x and may be
// x itself. Throws shape_error, before writing anything, if the sizes do not fit.
inline void rmsnorm(view<const double> x, std::span<const double> gamma, double eps,
                    view<double> y) {
  constexpr const char* function = "tilekern::reference::rmsnorm";
  detail::check_size(function, "gamma", gamma.size(), x.cols());
  if (y.rows() != x.rows() || y.cols() != x.cols()) {
    throw shape_error(std::string(function) + ": y is " + std::to_string(y.rows()) + "x" +
                      std::to_string(y.cols()) + ", expected " + std::to_string(x.rows()) + "x" +
                      std::to_string(x.cols()) + " (the shape of x)");
  }
  const std::size_t cols = x.cols();
  if (cols == 0) return;
  for (std::size_t r = 0; r < x.rows(); ++r) {
    double sum_of_squares = 0.0;
    for (std::size_t c = 0; c < cols; ++c) sum_of_squares += x(r, c) * x(r, c);
    const double inverse_rms = 1.0 / std::sqrt(sum_of_squares / static_cast<double>(cols) + eps);
    for (std::size_t c = 0; c < cols; ++c) y(r, c) = x(r, c) * inverse_rms * gamma[c];
  }
}

}  // namespace tilekern::reference
