// reference/rmsnorm.hpp: the forward against its definition written differently (every
// normalised row has mean square 1 with eps = 0), the backward against central finite
// differences of the forward, in place, and shape errors naming the argument before anything is
// written.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/gradient.hpp"
#include "tilekern/error.hpp"
#include "tilekern/reference/rmsnorm.hpp"

namespace tilekern {
namespace {

using test::check_gradient;
using test::numerical_gradient;

constexpr double sentinel = 12345.0;

std::vector<double> random_values(std::size_t n, std::mt19937_64& generator, double low = -2.0,
                                  double high = 2.0) {
  std::uniform_real_distribution<double> distribution(low, high);
  std::vector<double> values(n);
  for (double& v : values) v = distribution(generator);
  return values;
}

// sum |a * b|
double magnitude(std::span<const double> a, std::span<const double> b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += std::abs(a[i] * b[i]);
  return sum;
}

double dot(std::span<const double> a, std::span<const double> b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// Runs call, which must throw a shape_error whose message starts with function, names argument
// and contains both sizes (each of `sizes`).
template <class Call>
void check_shape_error(Call call, const std::string& function, const std::string& argument,
                       const std::vector<std::string>& sizes) {
  try {
    call();
    FAIL("no shape_error for ", argument);
  } catch (const shape_error& error) {
    const std::string message = error.what();
    INFO(message);
    CHECK(message.rfind(function + ": " + argument + " ", 0) == 0);
    for (const std::string& size : sizes) CHECK(message.find(size) != std::string::npos);
  }
}

bool all_equal(std::span<const double> values, double expected) {
  return std::all_of(values.begin(), values.end(), [&](double v) { return v == expected; });
}

struct shape {
  std::size_t rows, cols;
};
constexpr shape shapes[] = {{3, 7}, {2, 1}, {1, 31}};

TEST_CASE("reference::rmsnorm: every row of x / rms(x) has mean square 1 (eps = 0)") {
  std::mt19937_64 generator(1);
  for (const shape s : shapes) {
    const std::size_t rows = s.rows, cols = s.cols;
    const std::vector<double> x = random_values(rows * cols, generator);
    const std::vector<double> gamma(cols, 1.0);
    std::vector<double> y(rows * cols);
    reference::rmsnorm(view<const double>(x.data(), rows, cols), gamma, 0.0,
                       view<double>(y.data(), rows, cols));
    for (std::size_t r = 0; r < rows; ++r) {
      const std::span<const double> row(y.data() + r * cols, cols);
      INFO(rows, "x", cols, " row ", r);
      CHECK(dot(row, row) / static_cast<double>(cols) == doctest::Approx(1.0).epsilon(1e-13));
      // and the direction of x is kept: y = x * (a positive factor)
      for (std::size_t c = 0; c < cols; ++c) CHECK(y[r * cols + c] * x[r * cols + c] > 0.0);
    }
  }
}

TEST_CASE("reference::rmsnorm_backward: dx and dgamma are the finite differences of the forward") {
  std::mt19937_64 generator(2);
  for (const double eps : {1e-5, 0.3}) {
    for (const shape s : shapes) {
      const std::size_t rows = s.rows, cols = s.cols;
      INFO(rows, "x", cols, ", eps ", eps);
      std::vector<double> x = random_values(rows * cols, generator);
      std::vector<double> gamma = random_values(cols, generator, 0.5, 1.5);
      const std::vector<double> dy = random_values(rows * cols, generator);
      std::vector<double> y(rows * cols);
      const auto loss = [&] {
        reference::rmsnorm(view<const double>(x.data(), rows, cols), gamma, eps,
                           view<double>(y.data(), rows, cols));
        return dot(dy, y);
      };
      std::vector<double> dx(rows * cols, sentinel), dgamma(cols, sentinel);
      reference::rmsnorm_backward(view<const double>(dy.data(), rows, cols),
                                  view<const double>(x.data(), rows, cols), gamma, eps,
                                  view<double>(dx.data(), rows, cols), dgamma);
      loss();
      const double scale = magnitude(dy, y);
      check_gradient(dx, numerical_gradient(x, loss), "dx", scale);
      check_gradient(dgamma, numerical_gradient(gamma, loss), "dgamma", scale);

      // dx may be dy itself.
      std::vector<double> in_place = dy;
      std::vector<double> dgamma2(cols);
      reference::rmsnorm_backward(view<const double>(in_place.data(), rows, cols),
                                  view<const double>(x.data(), rows, cols), gamma, eps,
                                  view<double>(in_place.data(), rows, cols), dgamma2);
      CHECK(in_place == dx);
      CHECK(dgamma2 == dgamma);
    }
  }
}

TEST_CASE("reference::rmsnorm_backward: strided views; nothing outside them is written") {
  std::mt19937_64 generator(3);
  const std::size_t rows = 3, cols = 5, stride = 8;
  std::vector<double> x = random_values(rows * stride, generator);
  std::vector<double> dy = random_values(rows * stride, generator);
  const std::vector<double> gamma = random_values(cols, generator);
  std::vector<double> dx(rows * stride, sentinel), dgamma(cols);
  reference::rmsnorm_backward(view<const double>(dy.data(), rows, cols, stride),
                              view<const double>(x.data(), rows, cols, stride), gamma, 1e-5,
                              view<double>(dx.data(), rows, cols, stride), dgamma);
  // the same from contiguous copies
  std::vector<double> x_packed, dy_packed;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      x_packed.push_back(x[r * stride + c]);
      dy_packed.push_back(dy[r * stride + c]);
    }
  }
  std::vector<double> dx_packed(rows * cols), dgamma_packed(cols);
  reference::rmsnorm_backward(view<const double>(dy_packed.data(), rows, cols),
                              view<const double>(x_packed.data(), rows, cols), gamma, 1e-5,
                              view<double>(dx_packed.data(), rows, cols), dgamma_packed);
  CHECK(dgamma == dgamma_packed);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < stride; ++c) {
      if (c < cols) {
        CHECK(dx[r * stride + c] == dx_packed[r * cols + c]);
      } else {
        CHECK(dx[r * stride + c] == sentinel);
      }
    }
  }
}

TEST_CASE("reference::rmsnorm_backward: NaN in a row of x makes that row of dx NaN, only it") {
  std::mt19937_64 generator(4);
  const std::size_t rows = 3, cols = 4;
  std::vector<double> x = random_values(rows * cols, generator);
  x[1 * cols + 2] = std::nan("");
  const std::vector<double> dy = random_values(rows * cols, generator);
  const std::vector<double> gamma = random_values(cols, generator);
  std::vector<double> dx(rows * cols), dgamma(cols);
  reference::rmsnorm_backward(view<const double>(dy.data(), rows, cols),
                              view<const double>(x.data(), rows, cols), gamma, 1e-5,
                              view<double>(dx.data(), rows, cols), dgamma);
  for (std::size_t c = 0; c < cols; ++c) {
    CHECK(std::isnan(dx[1 * cols + c]));
    CHECK(std::isfinite(dx[0 * cols + c]));
    CHECK(std::isfinite(dx[2 * cols + c]));
    CHECK(std::isnan(dgamma[c]));
  }
}

TEST_CASE("reference::rmsnorm_backward: shape errors name the argument; nothing is written") {
  const std::string function = "tilekern::reference::rmsnorm_backward";
  const std::size_t rows = 3, cols = 7;
  const std::vector<double> x(rows * cols, 1.0), dy(rows * cols, 1.0), gamma(cols, 1.0);
  const std::vector<double> short_gamma(cols - 1, 1.0);
  std::vector<double> dx(rows * cols + 8, sentinel), dgamma(cols + 1, sentinel);
  const view<const double> xv(x.data(), rows, cols);
  const auto call = [&](view<const double> dy_view, std::span<const double> gamma_span,
                        view<double> dx_view, std::span<double> dgamma_span) {
    return
        [=] { reference::rmsnorm_backward(dy_view, xv, gamma_span, 1e-5, dx_view, dgamma_span); };
  };
  const view<const double> dyv(dy.data(), rows, cols);
  const view<double> dxv(dx.data(), rows, cols);
  const std::span<double> dgammas(dgamma.data(), cols);
  check_shape_error(call(view<const double>(dy.data(), rows, cols - 1), gamma, dxv, dgammas),
                    function, "dy", {"3x6", "3x7"});
  check_shape_error(call(view<const double>(dy.data(), rows - 1, cols), gamma, dxv, dgammas),
                    function, "dy", {"2x7", "3x7"});
  check_shape_error(call(dyv, short_gamma, dxv, dgammas), function, "gamma", {"6", "7"});
  check_shape_error(call(dyv, gamma, view<double>(dx.data(), rows + 1, cols), dgammas), function,
                    "dx", {"4x7", "3x7"});
  check_shape_error(call(dyv, gamma, dxv, std::span<double>(dgamma.data(), cols + 1)), function,
                    "dgamma", {"8", "7"});
  CHECK(all_equal(dx, sentinel));
  CHECK(all_equal(dgamma, sentinel));

  // and the forward's message is unchanged
  check_shape_error(
      [&] { reference::rmsnorm(xv, gamma, 1e-5, view<double>(dx.data(), rows, cols + 1)); },
      "tilekern::reference::rmsnorm", "y", {"3x8", "3x7", "(the shape of x)"});
  check_shape_error([&] { reference::rmsnorm(xv, short_gamma, 1e-5, dxv); },
                    "tilekern::reference::rmsnorm", "gamma", {"has 6 elements, expected 7"});
  CHECK(all_equal(dx, sentinel));
}

}  // namespace
}  // namespace tilekern
