#pragma once
// reference::matmul: kernels/matmul.hpp's computation in plain fp64, what its accuracy is measured
// against by the tests, the benchmarks and users.
//
//   matmul(a, b, c, alpha, beta, bias, f)   c = f(alpha * a b + beta * c + bias)
//   magnitude(a, b, out)                    out = |a| |b|: sum_k |a_ik b_kj|, the scale of an
//                                           element's rounding error (gamma(K) times it bounds the
//                                           error of fp32 accumulation)
//
// a is M x K, b is K x N, c and out M x N, bias N values or empty (none): views of double, with
// any transposes already applied by the caller. Each product is summed left to right in fp64 from
// exact products of fp32-representable inputs: relative to the magnitude, within K 2^-53, far
// below an fp32 ulp. beta = 0 does not read c. Throws shape_error, before writing anything, if
// the sizes do not fit.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tilekern/error.hpp"
#include "tilekern/reference/activation.hpp"
#include "tilekern/simd/math.hpp"
#include "tilekern/tile/view.hpp"

namespace tilekern::reference {

namespace detail {

inline void check_product(const char* function, std::size_t a_rows, std::size_t a_cols,
                          std::size_t b_rows, std::size_t b_cols, const char* out_name,
                          std::size_t out_rows, std::size_t out_cols) {
  if (b_rows != a_cols) {
    throw shape_error(std::string(function) + ": b has " + std::to_string(b_rows) +
                      " rows, expected " + std::to_string(a_cols) + " (the columns of a)");
  }
  if (out_rows != a_rows || out_cols != b_cols) {
    throw shape_error(std::string(function) + ": " + out_name + " is " + std::to_string(out_rows) +
                      "x" + std::to_string(out_cols) + ", expected " + std::to_string(a_rows) +
                      "x" + std::to_string(b_cols) + " (rows of a x columns of b)");
  }
}

}  // namespace detail

inline void matmul(view<const double> a, view<const double> b, view<double> c, double alpha = 1,
                   double beta = 0, std::span<const double> bias = {}, act f = act::identity) {
  constexpr const char* function = "tilekern::reference::matmul";
  detail::check_product(function, a.rows(), a.cols(), b.rows(), b.cols(), "c", c.rows(), c.cols());
  if (!bias.empty() && bias.size() != b.cols()) {
    throw shape_error(std::string(function) + ": bias has " + std::to_string(bias.size()) +
                      " elements, expected " + std::to_string(b.cols()) + " (columns of c)");
  }
  // Row by row, k outer and j inner (so that b is read along its rows): each sum still runs over
  // k in order.
  std::vector<double> sums(b.cols());
  for (std::size_t i = 0; i < a.rows(); ++i) {
    std::fill(sums.begin(), sums.end(), 0.0);
    for (std::size_t k = 0; k < a.cols(); ++k) {
      for (std::size_t j = 0; j < b.cols(); ++j) sums[j] += a(i, k) * b(k, j);
    }
    for (std::size_t j = 0; j < b.cols(); ++j) {
      double t = alpha * sums[j];
      if (beta != 0) t += beta * c(i, j);
      if (!bias.empty()) t += bias[j];
      c(i, j) = activation(f, t);
    }
  }
}

inline void magnitude(view<const double> a, view<const double> b, view<double> out) {
  detail::check_product("tilekern::reference::magnitude", a.rows(), a.cols(), b.rows(), b.cols(),
                        "out", out.rows(), out.cols());
  for (std::size_t i = 0; i < a.rows(); ++i) {
    for (std::size_t j = 0; j < b.cols(); ++j) out(i, j) = 0;
    for (std::size_t k = 0; k < a.cols(); ++k) {
      for (std::size_t j = 0; j < b.cols(); ++j) out(i, j) += std::abs(a(i, k) * b(k, j));
    }
  }
}

}  // namespace tilekern::reference
