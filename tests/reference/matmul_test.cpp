// reference/matmul.hpp: reference::matmul and reference::magnitude against products written out
// by hand (2x3 times 3x2), the semantics of alpha, beta (beta = 0 does not read c), bias and the
// activation (applied last), strided views, K = 0, the summation order, and shape errors that
// name the argument before anything is written.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "tilekern/error.hpp"
#include "tilekern/reference/matmul.hpp"
#include "tilekern/simd/math.hpp"

namespace tilekern {
namespace {

constexpr double sentinel = 12345.0;
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// a = [1 -2 3; 4 5 -6], b = [7 8; 9 10; 11 12]:
//   a b   = [7 - 18 + 33, 8 - 20 + 36; 28 + 45 - 66, 32 + 50 - 72] = [22 24; 7 10]
//   |a||b| = [7 + 18 + 33, 8 + 20 + 36; 28 + 45 + 66, 32 + 50 + 72] = [58 64; 139 154]
const std::vector<double> a = {1, -2, 3, 4, 5, -6};
const std::vector<double> b = {7, 8, 9, 10, 11, 12};
const view<const double> av(a.data(), 2, 3);
const view<const double> bv(b.data(), 3, 2);

TEST_CASE("reference::matmul: a 2x3 times 3x2 product written out by hand") {
  std::vector<double> c(4, nan);  // beta = 0: never read
  reference::matmul(av, bv, view<double>(c.data(), 2, 2));
  CHECK(c == std::vector<double>{22, 24, 7, 10});

  std::vector<double> mag(4, sentinel);
  reference::magnitude(av, bv, view<double>(mag.data(), 2, 2));
  CHECK(mag == std::vector<double>{58, 64, 139, 154});
}

TEST_CASE("reference::matmul: alpha, beta, bias, then the activation") {
  // t = 2 a b + 0.5 c + bias, c = [1 -2; 3 4], bias = [10 -30]:
  //   [44 + 0.5 + 10, 48 - 1 - 30; 14 + 1.5 + 10, 20 + 2 - 30] = [54.5 17; 25.5 -8]
  const std::vector<double> c0 = {1, -2, 3, 4}, bias = {10, -30};
  std::vector<double> c = c0;
  reference::matmul(av, bv, view<double>(c.data(), 2, 2), 2.0, 0.5, bias);
  CHECK(c == std::vector<double>{54.5, 17, 25.5, -8});

  c = c0;
  reference::matmul(av, bv, view<double>(c.data(), 2, 2), 2.0, 0.5, bias, act::relu);
  CHECK(c == std::vector<double>{54.5, 17, 25.5, 0});

  c = c0;
  reference::matmul(av, bv, view<double>(c.data(), 2, 2), 2.0, 0.5, bias, act::square);
  CHECK(c == std::vector<double>{54.5 * 54.5, 17 * 17, 25.5 * 25.5, 64});

  // beta = 0 does not read c (NaN ignored); the bias still adds: 2 a b + bias.
  std::fill(c.begin(), c.end(), nan);
  reference::matmul(av, bv, view<double>(c.data(), 2, 2), 2.0, 0.0, bias);
  CHECK(c == std::vector<double>{54, 18, 24, -10});

  // beta != 0 reads c: NaN there gives NaN in that element only.
  c = c0;
  c[1] = nan;
  reference::matmul(av, bv, view<double>(c.data(), 2, 2), 1.0, -1.0);
  CHECK(c[0] == 22 - 1);
  CHECK(std::isnan(c[1]));
  CHECK(c[2] == 7 - 3);
  CHECK(c[3] == 10 - 4);

  // alpha = -1, no bias, sigmoid(t) for t = -a b: 1 / (1 + e^(a b))
  reference::matmul(av, bv, view<double>(c.data(), 2, 2), -1.0, 0.0, {}, act::sigmoid);
  const double ab[] = {22, 24, 7, 10};
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(c[i] == doctest::Approx(1 / (1 + std::exp(ab[i]))).epsilon(1e-15));
  }
}

TEST_CASE("reference::matmul: strided views; nothing outside c is written") {
  // a and b embedded in wider rows (stride 5 and 4), c in rows of 3.
  const std::vector<double> wide_a = {1, -2, 3, sentinel, sentinel, 4, 5, -6, sentinel, sentinel};
  const std::vector<double> wide_b = {7, 8, sentinel, sentinel, 9, 10, sentinel, sentinel, 11, 12};
  std::vector<double> c = {1, -2, sentinel, 3, 4};
  reference::matmul(view<const double>(wide_a.data(), 2, 3, 5),
                    view<const double>(wide_b.data(), 3, 2, 4), view<double>(c.data(), 2, 2, 3),
                    1.0, 1.0, std::vector<double>{0.5, 0.25});
  CHECK(c ==
        std::vector<double>{22 + 1 + 0.5, 24 - 2 + 0.25, sentinel, 7 + 3 + 0.5, 10 + 4 + 0.25});
  std::vector<double> mag = {sentinel, sentinel, sentinel, sentinel, sentinel};
  reference::magnitude(view<const double>(wide_a.data(), 2, 3, 5),
                       view<const double>(wide_b.data(), 3, 2, 4),
                       view<double>(mag.data(), 2, 2, 3));
  CHECK(mag == std::vector<double>{58, 64, sentinel, 139, 154});
}

TEST_CASE("reference::matmul: K = 0 gives f(beta c + bias); magnitude 0") {
  std::vector<double> c = {1, -2, 3, 4, -5, 6};
  const std::vector<double> bias = {0.5, -0.5, 10};
  reference::matmul(view<const double>(nullptr, 2, 0), view<const double>(nullptr, 0, 3),
                    view<double>(c.data(), 2, 3), 3.0, 2.0, bias, act::abs);
  CHECK(c == std::vector<double>{2.5, 4.5, 16, 8.5, 10.5, 22});
  std::vector<double> mag(6, sentinel);
  reference::magnitude(view<const double>(nullptr, 2, 0), view<const double>(nullptr, 0, 3),
                       view<double>(mag.data(), 2, 3));
  CHECK(mag == std::vector<double>(6, 0.0));
}

TEST_CASE("reference::matmul: products summed left to right in fp64") {
  // 2^53 + 1 + 1: left to right each + 1 is a tie that rounds back to 2^53 (even); the exact sum,
  // or a right-to-left sum, is 2^53 + 2.
  const std::vector<double> row = {0x1p53, 1, 1}, column = {1, 1, 1};
  double c = sentinel;
  reference::matmul(view<const double>(row.data(), 1, 3), view<const double>(column.data(), 3, 1),
                    view<double>(&c, 1, 1));
  CHECK(c == 0x1p53);
  // magnitude: the same order over the absolute products
  const std::vector<double> signed_row = {-0x1p53, 1, -1};
  reference::magnitude(view<const double>(signed_row.data(), 1, 3),
                       view<const double>(column.data(), 3, 1), view<double>(&c, 1, 1));
  CHECK(c == 0x1p53);
}

// Runs call, which must throw a shape_error with exactly `message`.
template <class Call>
void check_shape_error(Call call, const std::string& message) {
  try {
    call();
    FAIL("no shape_error: ", message);
  } catch (const shape_error& error) {
    CHECK(std::string(error.what()) == message);
  }
}

TEST_CASE("reference::matmul: shape errors name the argument and both sizes; nothing is written") {
  std::vector<double> c(12, sentinel);
  const std::vector<double> bias3 = {1, 2, 3};
  check_shape_error(
      [&] {
        reference::matmul(av, view<const double>(b.data(), 2, 2), view<double>(c.data(), 2, 2));
      },
      "tilekern::reference::matmul: b has 2 rows, expected 3 (the columns of a)");
  check_shape_error(
      [&] { reference::matmul(av, bv, view<double>(c.data(), 2, 3)); },
      "tilekern::reference::matmul: c is 2x3, expected 2x2 (rows of a x columns of b)");
  check_shape_error(
      [&] { reference::matmul(av, bv, view<double>(c.data(), 3, 2)); },
      "tilekern::reference::matmul: c is 3x2, expected 2x2 (rows of a x columns of b)");
  check_shape_error(
      [&] { reference::matmul(av, bv, view<double>(c.data(), 2, 2), 1.0, 0.0, bias3); },
      "tilekern::reference::matmul: bias has 3 elements, expected 2 (columns of c)");
  check_shape_error(
      [&] {
        reference::magnitude(av, view<const double>(b.data(), 2, 3), view<double>(c.data(), 2, 3));
      },
      "tilekern::reference::magnitude: b has 2 rows, expected 3 (the columns of a)");
  check_shape_error([&] { reference::magnitude(av, bv, view<double>(c.data(), 2, 1)); },
                    "tilekern::reference::magnitude: out is 2x1, expected 2x2 (rows of a x columns "
                    "of b)");
  CHECK(std::all_of(c.begin(), c.end(), [](double v) { return v == sentinel; }));
}

}  // namespace
}  // namespace tilekern
