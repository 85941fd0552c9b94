// reference/softmax.hpp: the forward against its definition read the other way (rows sum to 1,
// y_i / y_j = exp(s_i - s_j)), both masks (full and broadcast, the boolean one as an additive mask
// of 0 and -inf), the special cases (a fully masked row gives zeros; NaN or +inf scores make their
// row NaN, only it), in place and strided; the backward against central finite differences of
// the forward; shape errors naming the argument before anything is written.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/gradient.hpp"
#include "tilekern/error.hpp"
#include "tilekern/reference/softmax.hpp"

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

constexpr double inf = std::numeric_limits<double>::infinity();

view<const double> cview(const std::vector<double>& v, std::size_t rows, std::size_t cols) {
  return {v.data(), rows, cols};
}
view<double> mview(std::vector<double>& v, std::size_t rows, std::size_t cols) {
  return {v.data(), rows, cols};
}

// bool storage for view<const bool> (std::vector<bool> has none).
struct bool_matrix {
  bool_matrix(std::size_t rows, std::size_t cols, bool value)
      : rows(rows), cols(cols), values(new bool[rows * cols]) {
    std::fill_n(values.get(), rows * cols, value);
  }
  bool& operator()(std::size_t r, std::size_t c) { return values[r * cols + c]; }
  view<const bool> get() const { return {values.get(), rows, cols}; }
  std::size_t rows, cols;
  std::unique_ptr<bool[]> values;
};

std::vector<double> softmax(const std::vector<double>& x, std::size_t rows, std::size_t cols,
                            double scale) {
  std::vector<double> y(rows * cols, sentinel);
  reference::softmax(cview(x, rows, cols), scale, mview(y, rows, cols));
  return y;
}

// Checks one row of y against its scores s (-inf for masked ones) the other way round: the row
// sums to 1, masked elements are exactly 0, and y_i / y_j = exp(s_i - s_j).
void check_softmax_row(std::span<const double> y, std::span<const double> s) {
  double sum = 0.0;
  for (double v : y) sum += v;
  CHECK(sum == doctest::Approx(1.0).epsilon(1e-14));
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (s[i] == -inf) {
      CHECK(y[i] == 0.0);
      continue;
    }
    CHECK(y[i] > 0.0);
    for (std::size_t j = 0; j < y.size(); ++j) {
      if (s[j] == -inf) continue;
      INFO(i, ", ", j, ": s ", s[i], ", ", s[j]);
      CHECK(y[i] / y[j] == doctest::Approx(std::exp(s[i] - s[j])).epsilon(1e-13));
    }
  }
}

TEST_CASE("reference::softmax: rows sum to 1 and y_i / y_j = exp(s_i - s_j)") {
  std::mt19937_64 generator(21);
  for (const shape s : shapes) {
    const std::size_t rows = s.rows, cols = s.cols;
    for (const double scale : {1.0, 0.37, -1.5}) {
      INFO(rows, "x", cols, ", scale ", scale);
      const std::vector<double> x = random_values(rows * cols, generator, -4.0, 4.0);
      const std::vector<double> y = softmax(x, rows, cols, scale);
      for (std::size_t r = 0; r < rows; ++r) {
        std::vector<double> scores(cols);
        for (std::size_t c = 0; c < cols; ++c) scores[c] = scale * x[r * cols + c];
        check_softmax_row({y.data() + r * cols, cols}, scores);
      }
    }
  }
}

TEST_CASE("reference::softmax: large scores do not overflow (shift invariance)") {
  std::mt19937_64 generator(22);
  const std::size_t cols = 9;
  const std::vector<double> x = random_values(cols, generator, -4.0, 4.0);
  const std::vector<double> expected = softmax(x, 1, cols, 1.0);
  for (const double shift : {1000.0, -1000.0, 1e5}) {
    std::vector<double> shifted = x;
    for (double& v : shifted) v += shift;
    const std::vector<double> y = softmax(shifted, 1, cols, 1.0);
    for (std::size_t c = 0; c < cols; ++c) {
      INFO("shift ", shift, ", column ", c);
      // x + shift is rounded to the shift's ulp (1.5e-11 at 1e5)
      CHECK(y[c] == doctest::Approx(expected[c]).epsilon(1e-10));
    }
  }
  // 1e30 * 1e-30 and tiny scaled scores
  std::vector<double> huge = x;
  for (double& v : huge) v *= 1e30;
  const std::vector<double> y = softmax(huge, 1, cols, 1e-30);
  for (std::size_t c = 0; c < cols; ++c) CHECK(y[c] == doctest::Approx(expected[c]).epsilon(1e-13));
  for (double v : softmax(x, 1, cols, 1e-300)) CHECK(v == doctest::Approx(1.0 / cols));
}

TEST_CASE("reference::softmax: an additive mask, full or broadcast, and a boolean mask") {
  std::mt19937_64 generator(23);
  const std::size_t rows = 4, cols = 7;
  const double scale = 0.8;
  const std::vector<double> x = random_values(rows * cols, generator, -3.0, 3.0);
  // finite mask values everywhere, -inf on a pattern (row 3 keeps only column 6)
  std::vector<double> mask = random_values(rows * cols, generator);
  bool_matrix keep(rows, cols, true);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      if (r == 3 ? c != 6 : (r + 2 * c) % 3 == 0) {
        mask[r * cols + c] = -inf;
        keep(r, c) = false;
      }
    }
  }
  std::vector<double> y(rows * cols, sentinel);
  reference::softmax(cview(x, rows, cols), scale, cview(mask, rows, cols), mview(y, rows, cols));
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<double> scores(cols);
    for (std::size_t c = 0; c < cols; ++c) {
      scores[c] = scale * x[r * cols + c] + mask[r * cols + c];
    }
    INFO("row ", r);
    check_softmax_row({y.data() + r * cols, cols}, scores);
  }
  CHECK(y[3 * cols + 6] == 1.0);

  // The boolean mask: the same as an additive mask of 0 and -inf; masked x never read.
  std::vector<double> zero_or_minus_inf(rows * cols), nan_where_masked = x;
  for (std::size_t i = 0; i < rows * cols; ++i) {
    if (mask[i] == -inf) {
      zero_or_minus_inf[i] = -inf;
      nan_where_masked[i] = std::nan("");
    }
  }
  std::vector<double> additive(rows * cols), boolean(rows * cols, sentinel);
  reference::softmax(cview(x, rows, cols), scale, cview(zero_or_minus_inf, rows, cols),
                     mview(additive, rows, cols));
  reference::softmax(cview(nan_where_masked, rows, cols), scale, keep.get(),
                     mview(boolean, rows, cols));
  CHECK(boolean == additive);

  // Broadcast: a 1 x cols mask is the same as that row repeated.
  const std::vector<double> row_mask(mask.begin() + cols, mask.begin() + 2 * cols);
  std::vector<double> repeated, broadcast(rows * cols), full(rows * cols);
  bool_matrix keep_row(1, cols, true), keep_repeated(rows, cols, true);
  for (std::size_t r = 0; r < rows; ++r) {
    repeated.insert(repeated.end(), row_mask.begin(), row_mask.end());
    for (std::size_t c = 0; c < cols; ++c) keep_repeated(r, c) = keep(1, c);
  }
  for (std::size_t c = 0; c < cols; ++c) keep_row(0, c) = keep(1, c);
  reference::softmax(cview(x, rows, cols), scale, cview(row_mask, 1, cols),
                     mview(broadcast, rows, cols));
  reference::softmax(cview(x, rows, cols), scale, cview(repeated, rows, cols),
                     mview(full, rows, cols));
  CHECK(broadcast == full);
  reference::softmax(cview(x, rows, cols), scale, keep_row.get(), mview(broadcast, rows, cols));
  reference::softmax(cview(x, rows, cols), scale, keep_repeated.get(), mview(full, rows, cols));
  CHECK(broadcast == full);
}

TEST_CASE("reference::softmax: a fully masked row gives zeros, the others are untouched") {
  std::mt19937_64 generator(24);
  const std::size_t rows = 3, cols = 5;
  const std::vector<double> x = random_values(rows * cols, generator);
  const std::vector<double> clean = softmax(x, rows, cols, 1.0);
  std::vector<double> mask(rows * cols, 0.0);
  bool_matrix keep(rows, cols, true);
  for (std::size_t c = 0; c < cols; ++c) {
    mask[1 * cols + c] = -inf;
    keep(1, c) = false;
  }
  std::vector<double> additive(rows * cols, sentinel), boolean(rows * cols, sentinel);
  reference::softmax(cview(x, rows, cols), 1.0, cview(mask, rows, cols),
                     mview(additive, rows, cols));
  reference::softmax(cview(x, rows, cols), 1.0, keep.get(), mview(boolean, rows, cols));
  // -inf inputs with a positive scale, no mask
  std::vector<double> minus_inf_row = x;
  for (std::size_t c = 0; c < cols; ++c) minus_inf_row[1 * cols + c] = -inf;
  const std::vector<double> unmasked = softmax(minus_inf_row, rows, cols, 2.0);
  const std::vector<double> clean2 = softmax(x, rows, cols, 2.0);
  for (std::size_t i = 0; i < rows * cols; ++i) {
    const bool masked_row = i / cols == 1;
    CHECK(additive[i] == (masked_row ? 0.0 : clean[i]));
    CHECK(boolean[i] == (masked_row ? 0.0 : clean[i]));
    CHECK(unmasked[i] == (masked_row ? 0.0 : clean2[i]));
  }
  // a fully masked broadcast row masks every row
  const std::vector<double> all_masked(cols, -inf);
  std::vector<double> y(rows * cols, sentinel);
  reference::softmax(cview(x, rows, cols), 1.0, cview(all_masked, 1, cols), mview(y, rows, cols));
  CHECK(all_equal(y, 0.0));
}

TEST_CASE("reference::softmax: NaN or +inf in a row's unmasked scores makes that row NaN") {
  std::mt19937_64 generator(25);
  const std::size_t rows = 3, cols = 6;
  const std::vector<double> clean_x = random_values(rows * cols, generator);
  const std::vector<double> clean = softmax(clean_x, rows, cols, 1.0);
  const std::vector<double> no_mask(rows * cols, 0.0);
  // (x value at row 1 column 2, mask value there, whether the row is NaN)
  struct special {
    double x, mask;
    bool nan_row;
  };
  const special cases[] = {
      {std::nan(""), 0.0, true}, {inf, 0.0, true},   {std::nan(""), -inf, true},
      {inf, -inf, true},         {-inf, 0.0, false}, {1.0, std::nan(""), true},
      {1.0, inf, true},
  };
  for (const special& s : cases) {
    INFO("x ", s.x, ", mask ", s.mask);
    std::vector<double> x = clean_x, mask = no_mask;
    x[1 * cols + 2] = s.x;
    mask[1 * cols + 2] = s.mask;
    std::vector<double> y(rows * cols, sentinel);
    reference::softmax(cview(x, rows, cols), 1.0, cview(mask, rows, cols), mview(y, rows, cols));
    for (std::size_t c = 0; c < cols; ++c) {
      CHECK(y[0 * cols + c] == clean[0 * cols + c]);
      CHECK(y[2 * cols + c] == clean[2 * cols + c]);
      if (s.nan_row) CHECK(std::isnan(y[1 * cols + c]));
    }
    if (!s.nan_row) {
      CHECK(y[1 * cols + 2] == 0.0);
      double sum = 0.0;
      for (std::size_t c = 0; c < cols; ++c) sum += y[1 * cols + c];
      CHECK(sum == doctest::Approx(1.0));
    }
    if (s.mask == 0.0) {  // the same without a mask, and with a boolean mask keeping it
      const std::vector<double> plain = softmax(x, rows, cols, 1.0);
      bool_matrix keep(rows, cols, true);
      std::vector<double> kept(rows * cols);
      reference::softmax(cview(x, rows, cols), 1.0, keep.get(), mview(kept, rows, cols));
      for (std::size_t i = 0; i < rows * cols; ++i) {
        CHECK((std::isnan(plain[i]) ? std::isnan(y[i]) : plain[i] == y[i]));
        CHECK((std::isnan(kept[i]) ? std::isnan(y[i]) : kept[i] == y[i]));
      }
    }
  }
  // 0 * inf: scale 0 and an infinite x is a NaN score
  std::vector<double> x = clean_x;
  x[1 * cols + 2] = inf;
  const std::vector<double> y = softmax(x, rows, cols, 0.0);
  for (std::size_t c = 0; c < cols; ++c) {
    CHECK(std::isnan(y[1 * cols + c]));
    CHECK(y[0 * cols + c] == doctest::Approx(1.0 / cols));
  }
}

TEST_CASE("reference::softmax: in place, strided; nothing outside the view is written") {
  std::mt19937_64 generator(26);
  const std::size_t rows = 3, cols = 5, stride = 8;
  std::vector<double> x = random_values(rows * stride, generator);
  std::vector<double> packed;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) packed.push_back(x[r * stride + c]);
  }
  const std::vector<double> expected = softmax(packed, rows, cols, 0.5);
  std::vector<double> y(rows * stride, sentinel);
  reference::softmax(view<const double>(x.data(), rows, cols, stride), 0.5,
                     view<double>(y.data(), rows, cols, stride));
  const std::vector<double> original = x;
  reference::softmax(view<const double>(x.data(), rows, cols, stride), 0.5,
                     view<double>(x.data(), rows, cols, stride));
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < stride; ++c) {
      const std::size_t i = r * stride + c;
      CHECK(y[i] == (c < cols ? expected[r * cols + c] : sentinel));
      CHECK(x[i] == (c < cols ? expected[r * cols + c] : original[i]));
    }
  }
}

TEST_CASE("reference::softmax_backward: dx is the finite differences of the forward") {
  std::mt19937_64 generator(27);
  for (const shape s : shapes) {
    const std::size_t rows = s.rows, cols = s.cols;
    for (const double scale : {1.0, 0.37, -2.0}) {
      for (const int masking : {0, 1, 2}) {  // none, additive, boolean
        INFO(rows, "x", cols, ", scale ", scale, ", mask kind ", masking);
        std::vector<double> x = random_values(rows * cols, generator);
        const std::vector<double> dy = random_values(rows * cols, generator);
        std::vector<double> mask = random_values(rows * cols, generator);
        bool_matrix keep(rows, cols, true);
        for (std::size_t i = 0; i < rows * cols; ++i) {
          if (i % 3 == 1) {
            mask[i] = -inf;
            keep.values[i] = false;
          }
        }
        std::vector<double> y(rows * cols);
        const auto forward = [&] {
          if (masking == 0) {
            reference::softmax(cview(x, rows, cols), scale, mview(y, rows, cols));
          } else if (masking == 1) {
            reference::softmax(cview(x, rows, cols), scale, cview(mask, rows, cols),
                               mview(y, rows, cols));
          } else {
            reference::softmax(cview(x, rows, cols), scale, keep.get(), mview(y, rows, cols));
          }
        };
        const auto loss = [&] {
          forward();
          return dot(dy, y);
        };
        forward();
        std::vector<double> dx(rows * cols, sentinel);
        reference::softmax_backward(cview(dy, rows, cols), cview(y, rows, cols), scale,
                                    mview(dx, rows, cols));
        const double loss_scale = magnitude(dy, y);
        const std::vector<double> numerical = numerical_gradient(x, loss);
        if (masking == 0 || cols > 1) {
          check_gradient(dx, numerical, "dx", loss_scale);
        } else {
          // 2x1, 1x... with the only element of some rows masked: dx and the differences are 0
          CHECK(all_equal(dx, 0.0));
          CHECK(all_equal(numerical, 0.0));
        }
        forward();  // y again for x itself (the differences left it for a moved x)
        std::vector<double> in_place = dy;
        reference::softmax_backward(cview(in_place, rows, cols), cview(y, rows, cols), scale,
                                    mview(in_place, rows, cols));
        CHECK(in_place == dx);
      }
    }
  }
}

TEST_CASE("reference::softmax: shape errors name the argument; nothing is written") {
  const std::string forward = "tilekern::reference::softmax";
  const std::string backward = "tilekern::reference::softmax_backward";
  const std::size_t rows = 3, cols = 7;
  const std::vector<double> x(rows * cols, 1.0), mask(rows * cols, 0.0);
  std::vector<double> out(rows * cols + 8, sentinel);
  const bool_matrix keep(rows, cols, true);
  const auto xv = cview(x, rows, cols);
  const auto outv = mview(out, rows, cols);
  check_shape_error([&] { reference::softmax(xv, 1.0, mview(out, rows, 6)); }, forward, "y",
                    {"3x6", "3x7"});
  check_shape_error([&] { reference::softmax(xv, 1.0, cview(mask, rows, cols), mview(out, 4, 7)); },
                    forward, "y", {"4x7", "3x7"});
  check_shape_error([&] { reference::softmax(xv, 1.0, keep.get(), mview(out, 1, 7)); }, forward,
                    "y", {"1x7", "3x7"});
  check_shape_error([&] { reference::softmax(xv, 1.0, cview(mask, rows, 6), outv); }, forward,
                    "mask", {"3x6", "3x7 or 1x7"});
  check_shape_error([&] { reference::softmax(xv, 1.0, cview(mask, 2, cols), outv); }, forward,
                    "mask", {"2x7", "3x7 or 1x7"});
  check_shape_error(
      [&] { reference::softmax(xv, 1.0, view<const bool>(keep.values.get(), 2, 7), outv); },
      forward, "keep", {"2x7", "3x7 or 1x7"});
  check_shape_error(
      [&] { reference::softmax(xv, 1.0, view<const bool>(keep.values.get(), 1, 8), outv); },
      forward, "keep", {"1x8", "3x7 or 1x7"});
  check_shape_error([&] { reference::softmax_backward(cview(x, rows, 6), xv, 1.0, outv); },
                    backward, "dy", {"3x6", "3x7"});
  check_shape_error([&] { reference::softmax_backward(xv, xv, 1.0, mview(out, 2, 7)); }, backward,
                    "dx", {"2x7", "3x7"});
  CHECK(all_equal(out, sentinel));
}

}  // namespace
}  // namespace tilekern
