// reference/layernorm.hpp: the forward against a second computation (rmsnorm of the centred row,
// plus beta), its special cases (a constant row gives beta exactly; NaN and inf make their row
// NaN; rows of 1e30 and 1e-30 keep their accuracy), in place and strided; the backward against
// central finite differences of the forward; shape errors naming the argument before anything is
// written.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/gradient.hpp"
#include "tilekern/error.hpp"
#include "tilekern/reference/layernorm.hpp"
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

view<const double> cview(const std::vector<double>& v, std::size_t rows, std::size_t cols) {
  return {v.data(), rows, cols};
}
view<double> mview(std::vector<double>& v, std::size_t rows, std::size_t cols) {
  return {v.data(), rows, cols};
}

// layernorm written differently: the centred row (mean in long double) through rmsnorm, plus beta.
std::vector<double> layernorm_via_rmsnorm(const std::vector<double>& x, std::size_t rows,
                                          std::size_t cols, const std::vector<double>& gamma,
                                          const std::vector<double>& beta, double eps) {
  std::vector<double> centred(rows * cols), y(rows * cols);
  for (std::size_t r = 0; r < rows; ++r) {
    long double sum = 0;
    for (std::size_t c = 0; c < cols; ++c) sum += x[r * cols + c];
    const long double mean = sum / static_cast<long double>(cols);
    for (std::size_t c = 0; c < cols; ++c) {
      centred[r * cols + c] = static_cast<double>(x[r * cols + c] - mean);
    }
  }
  reference::rmsnorm(cview(centred, rows, cols), gamma, eps, mview(y, rows, cols));
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += beta[i % cols];
  return y;
}

std::vector<double> layernorm(const std::vector<double>& x, std::size_t rows, std::size_t cols,
                              const std::vector<double>& gamma, const std::vector<double>& beta,
                              double eps) {
  std::vector<double> y(rows * cols, sentinel);
  reference::layernorm(cview(x, rows, cols), gamma, beta, eps, mview(y, rows, cols));
  return y;
}

TEST_CASE("reference::layernorm: equals rmsnorm of the centred row, plus beta") {
  std::mt19937_64 generator(11);
  for (const shape s : shapes) {
    const std::size_t rows = s.rows, cols = s.cols;
    for (const double offset : {0.0, 100.0, -1e6}) {
      INFO(rows, "x", cols, ", offset ", offset);
      std::vector<double> x = random_values(rows * cols, generator);
      for (double& v : x) v += offset;
      const std::vector<double> gamma = random_values(cols, generator);
      const std::vector<double> beta = random_values(cols, generator);
      const std::vector<double> y = layernorm(x, rows, cols, gamma, beta, 1e-5);
      const std::vector<double> expected = layernorm_via_rmsnorm(x, rows, cols, gamma, beta, 1e-5);
      for (std::size_t i = 0; i < y.size(); ++i) {
        INFO(i, ": ", y[i], " vs ", expected[i]);
        // the offset costs digits in x - mean in both computations (x is rounded to it)
        CHECK(std::abs(y[i] - expected[i]) <= 1e-12 * (1.0 + std::abs(offset)));
      }
    }
  }
}

TEST_CASE("reference::layernorm: a constant row gives beta exactly") {
  std::mt19937_64 generator(12);
  for (const std::size_t cols : {std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
    for (const double value : {0.0, 0.1, -3.7, 1e30, -1e-30, 1e150, 2.5e-300}) {
      INFO(cols, " columns of ", value);
      const std::vector<double> x(2 * cols, value);
      const std::vector<double> gamma = random_values(cols, generator);
      const std::vector<double> beta = random_values(cols, generator);
      const std::vector<double> y = layernorm(x, 2, cols, gamma, beta, 1e-5);
      for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == beta[i % cols]);
    }
  }
  // with eps = 0 it is 0 * (1 / 0): NaN, as documented
  const std::vector<double> x(3, 0.25), gamma(3, 1.0), beta(3, 0.5);
  for (double v : layernorm(x, 1, 3, gamma, beta, 0.0)) CHECK(std::isnan(v));
}

TEST_CASE("reference::layernorm: huge and tiny rows (1e30, 1e-30, 1e140) keep their accuracy") {
  // layernorm(k x, eps k^2) = layernorm(x, eps): the statistics scale by k and k^2 in fp64
  // without overflow or underflow anywhere in the documented range.
  std::mt19937_64 generator(13);
  const std::size_t rows = 3, cols = 33;
  const std::vector<double> x = random_values(rows * cols, generator);
  const std::vector<double> gamma = random_values(cols, generator);
  const std::vector<double> beta = random_values(cols, generator);
  const std::vector<double> expected = layernorm(x, rows, cols, gamma, beta, 1e-5);
  for (const double k : {1e30, 1e-30, 1e140, 1e-140, -7e20}) {
    INFO("k = ", k);
    std::vector<double> scaled = x;
    for (double& v : scaled) v *= k;
    const std::vector<double> y = layernorm(scaled, rows, cols, gamma, beta, 1e-5 * k * k);
    for (std::size_t i = 0; i < y.size(); ++i) {
      INFO(i, ": ", y[i], " vs ", expected[i]);
      // k < 0 mirrors the row: xhat changes sign
      const double want = k < 0 ? 2 * beta[i % cols] - expected[i] : expected[i];
      CHECK(std::abs(y[i] - want) <= 1e-12);
    }
  }
}

TEST_CASE("reference::layernorm: NaN or inf in a row makes that row NaN, only it") {
  std::mt19937_64 generator(14);
  const std::size_t rows = 3, cols = 5;
  const std::vector<double> gamma = random_values(cols, generator);
  const std::vector<double> beta = random_values(cols, generator);
  const double inf = std::numeric_limits<double>::infinity();
  for (const double special : {std::nan(""), inf, -inf}) {
    for (const std::size_t c_special : {std::size_t{0}, std::size_t{3}}) {
      INFO(special, " at column ", c_special);
      std::vector<double> x = random_values(rows * cols, generator);
      const std::vector<double> clean = layernorm(x, rows, cols, gamma, beta, 1e-5);
      x[1 * cols + c_special] = special;
      const std::vector<double> y = layernorm(x, rows, cols, gamma, beta, 1e-5);
      for (std::size_t c = 0; c < cols; ++c) {
        CHECK(std::isnan(y[1 * cols + c]));
        CHECK(y[0 * cols + c] == clean[0 * cols + c]);
        CHECK(y[2 * cols + c] == clean[2 * cols + c]);
      }
    }
  }
}

TEST_CASE("reference::layernorm: in place, strided; nothing outside the view is written") {
  std::mt19937_64 generator(15);
  const std::size_t rows = 3, cols = 6, stride = 9;
  std::vector<double> x = random_values(rows * stride, generator);
  const std::vector<double> gamma = random_values(cols, generator);
  const std::vector<double> beta = random_values(cols, generator);
  std::vector<double> packed;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) packed.push_back(x[r * stride + c]);
  }
  const std::vector<double> expected = layernorm(packed, rows, cols, gamma, beta, 1e-5);
  std::vector<double> y(rows * stride, sentinel);
  reference::layernorm(view<const double>(x.data(), rows, cols, stride), gamma, beta, 1e-5,
                       view<double>(y.data(), rows, cols, stride));
  const std::vector<double> original = x;
  reference::layernorm(view<const double>(x.data(), rows, cols, stride), gamma, beta, 1e-5,
                       view<double>(x.data(), rows, cols, stride));
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < stride; ++c) {
      const std::size_t i = r * stride + c;
      if (c < cols) {
        CHECK(y[i] == expected[r * cols + c]);
        CHECK(x[i] == expected[r * cols + c]);
      } else {
        CHECK(y[i] == sentinel);
        CHECK(x[i] == original[i]);
      }
    }
  }
}

TEST_CASE("reference::layernorm_backward: dx, dgamma, dbeta are the finite differences") {
  std::mt19937_64 generator(16);
  for (const double eps : {1e-5, 0.3}) {
    for (const shape s : shapes) {
      const std::size_t rows = s.rows, cols = s.cols;
      INFO(rows, "x", cols, ", eps ", eps);
      std::vector<double> x = random_values(rows * cols, generator);
      std::vector<double> gamma = random_values(cols, generator, 0.5, 1.5);
      std::vector<double> beta = random_values(cols, generator);
      const std::vector<double> dy = random_values(rows * cols, generator);
      std::vector<double> y(rows * cols);
      const auto loss = [&] {
        reference::layernorm(cview(x, rows, cols), gamma, beta, eps, mview(y, rows, cols));
        return dot(dy, y);
      };
      std::vector<double> dx(rows * cols, sentinel), dgamma(cols, sentinel), dbeta(cols, sentinel);
      reference::layernorm_backward(cview(dy, rows, cols), cview(x, rows, cols), gamma, eps,
                                    mview(dx, rows, cols), dgamma, dbeta);
      loss();
      const double scale = magnitude(dy, y);
      // (with one column y = beta whatever x and gamma: those gradients are 0, and the numerical
      // ones exactly so)
      const std::vector<double> numerical_dx = numerical_gradient(x, loss);
      if (cols == 1) CHECK(all_equal(numerical_dx, 0.0));
      check_gradient(dx, numerical_dx, "dx", scale);
      check_gradient(dgamma, numerical_gradient(gamma, loss), "dgamma", scale);
      check_gradient(dbeta, numerical_gradient(beta, loss), "dbeta", scale);

      // dx may be dy itself.
      std::vector<double> in_place = dy;
      std::vector<double> dgamma2(cols), dbeta2(cols);
      reference::layernorm_backward(cview(in_place, rows, cols), cview(x, rows, cols), gamma, eps,
                                    mview(in_place, rows, cols), dgamma2, dbeta2);
      CHECK(in_place == dx);
      CHECK(dgamma2 == dgamma);
      CHECK(dbeta2 == dbeta);
    }
  }
}

TEST_CASE("reference::layernorm: shape errors name the argument; nothing is written") {
  const std::string forward = "tilekern::reference::layernorm";
  const std::string backward = "tilekern::reference::layernorm_backward";
  const std::size_t rows = 3, cols = 7;
  const std::vector<double> x(rows * cols, 1.0), dy(rows * cols, 1.0), gamma(cols, 1.0),
      beta(cols, 0.0), short_row(cols - 1, 1.0);
  std::vector<double> out(rows * cols + 8, sentinel), dgamma(cols + 1, sentinel),
      dbeta(cols + 1, sentinel);
  const auto xv = cview(x, rows, cols), dyv = cview(dy, rows, cols);
  const auto outv = mview(out, rows, cols);
  const std::span<double> dgammas(dgamma.data(), cols), dbetas(dbeta.data(), cols);

  check_shape_error([&] { reference::layernorm(xv, short_row, beta, 1e-5, outv); }, forward,
                    "gamma", {"has 6 elements, expected 7"});
  check_shape_error([&] { reference::layernorm(xv, gamma, short_row, 1e-5, outv); }, forward,
                    "beta", {"has 6 elements, expected 7"});
  check_shape_error([&] { reference::layernorm(xv, gamma, beta, 1e-5, mview(out, rows, 8)); },
                    forward, "y", {"3x8", "3x7"});
  check_shape_error([&] { reference::layernorm(xv, gamma, beta, 1e-5, mview(out, 2, cols)); },
                    forward, "y", {"2x7", "3x7"});

  const auto call = [&](view<const double> dy_view, std::span<const double> gamma_span,
                        view<double> dx_view, std::span<double> dgamma_span,
                        std::span<double> dbeta_span) {
    return [=] {
      reference::layernorm_backward(dy_view, xv, gamma_span, 1e-5, dx_view, dgamma_span,
                                    dbeta_span);
    };
  };
  check_shape_error(call(cview(dy, rows, cols + 1), gamma, outv, dgammas, dbetas), backward, "dy",
                    {"3x8", "3x7"});
  check_shape_error(call(cview(dy, 1, cols), gamma, outv, dgammas, dbetas), backward, "dy",
                    {"1x7", "3x7"});
  check_shape_error(call(dyv, short_row, outv, dgammas, dbetas), backward, "gamma",
                    {"has 6 elements, expected 7"});
  check_shape_error(call(dyv, gamma, mview(out, rows, cols - 1), dgammas, dbetas), backward, "dx",
                    {"3x6", "3x7"});
  check_shape_error(call(dyv, gamma, outv, std::span<double>(dgamma), dbetas), backward, "dgamma",
                    {"has 8 elements, expected 7"});
  check_shape_error(call(dyv, gamma, outv, dgammas, std::span<double>(dbeta.data(), cols - 1)),
                    backward, "dbeta", {"has 6 elements, expected 7"});
  CHECK(all_equal(out, sentinel));
  CHECK(all_equal(dgamma, sentinel));
  CHECK(all_equal(dbeta, sentinel));
}

}  // namespace
}  // namespace tilekern
