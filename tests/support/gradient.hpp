#pragma once
// Numerical gradients by central differences, and the check of an analytic gradient against one,
// for the tests of the fp64 references' backward passes.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace tilekern::test {

// d loss / d values[i] by central differences, each value moved by h = 1e-6 * max(1, |v|) and
// restored.
template <class Loss>
std::vector<double> numerical_gradient(std::vector<double>& values, Loss loss) {
  std::vector<double> gradient(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double saved = values[i];
    const double h = 1e-6 * std::max(1.0, std::abs(saved));
    const double up = saved + h;
    const double down = saved - h;
    values[i] = up;
    const double loss_up = loss();
    values[i] = down;
    const double loss_down = loss();
    values[i] = saved;
    gradient[i] = (loss_up - loss_down) / (up - down);
  }
  return gradient;
}

// Every element within 1e-6 of the numerical gradient, relative to its largest element, plus the
// differences' own rounding noise: about 2^-52 * |loss| / h, with h >= 1e-6 and loss_scale
// bounding the loss's terms (sum |dy * y| for a loss sum dy * y; it matters only where the
// gradient is nearly 0, as for a one-column rmsnorm row with a small eps).
inline void check_gradient(std::span<const double> analytic, std::span<const double> numerical,
                           const std::string& what, double loss_scale) {
  REQUIRE(analytic.size() == numerical.size());
  double largest = 0.0;
  for (double v : numerical) largest = std::max(largest, std::abs(v));
  const double tolerance = 1e-6 * largest + 1e-9 * loss_scale;
  REQUIRE(tolerance > 0.0);
  for (std::size_t i = 0; i < analytic.size(); ++i) {
    INFO(what, "[", i, "]: analytic ", analytic[i], ", numerical ", numerical[i]);
    CHECK(std::abs(analytic[i] - numerical[i]) <= tolerance);
  }
}

}  // namespace tilekern::test
