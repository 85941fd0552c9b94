// kernels/layernorm.hpp against reference::layernorm and reference::layernorm_backward (fp64, on
// the decoded inputs), on the ISA path the CTest cap selects: every format (x, gamma, beta, y the
// same, and mixed), odd row lengths, strided views, nearest-even and stochastic rounding,
// saturation, special rows, and shape errors. Outputs and inputs end right before an unreadable
// page (guarded_buffer).
//
// Accuracy checked (kernels/layernorm.hpp states it), u = 2^-24:
//   fp32 y:        |y - y_ref| <= B u (|xhat * gamma| + |beta| + |gamma| * s), s = rstd *
//                  mean_c |x - c| with c the row's shift (the mean of its first 64 elements or
//                  x[r][0]: the larger of the two, the test not knowing which the row took),
//                  B = 8 on every path
//   bf16, fp16 y:  within one code of the correctly rounded fp64 result (nearest even), except
//                  where y_ref is below 2^-12 of those magnitudes (then the fp32 bound plus half
//                  an ulp); every other format the fp32 bound plus its rounding
//   gradients:     |dx - dx_ref| <= 32 u * rstd * (max_c |g| (1 + s) + max_c |xhat| *
//                  mean_c |g * xhat|) per row (g = dy * gamma) plus dx's rounding; dgamma within
//                  32 u * sum_r |dy| (|xhat| + s), dbeta 32 u * sum_r |dy|, plus their rounding.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/same_bits.hpp"
#include "support/elements.hpp"
#include "support/guarded.hpp"
#include "tilekern/kernels/layernorm.hpp"
#include "tilekern/reference/layernorm.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

using test::code_distance;
using test::encoded;
using test::guarded_buffer;
using test::name_of;
using test::same_bits;
using test::saturated;
using test::ulp;
using test::value_of;

constexpr double u = 0x1p-24;

// What an fp32 result within `bound` of `want` may become in T: the bound plus T's rounding.
template <class T>
double rounding_slack(double want, rounding mode) {
  if constexpr (std::is_same_v<T, float>) return 0x1p-149;
  return mode == rounding::nearest_even ? ulp<T>(want) / 2 : ulp<T>(want);
}

// Whether `got` is an fp32 result within `bound` of `want`, rounded to T with `cast`; beyond T's
// range, within one code of want's own encoding (inf, NaN or max, as cast.on_overflow says).
template <class T>
bool agrees(T got, double want, double bound, const cast_options& cast) {
  if constexpr (!std::is_same_v<T, float>) {
    if (std::abs(want) >= value_of(std::numeric_limits<T>::max())) {
      const T expected = encoded<T>(want, {.on_overflow = cast.on_overflow});
      return expected.is_nan() ? got.is_nan() : code_distance(got, expected) <= 1;
    }
  }
  return std::abs(value_of(got) - want) <= bound + rounding_slack<T>(want, cast.round);
}

// ---- a rows x cols problem with strided inputs, and its fp64 reference ----

template <class X, class G, class B>
struct problem {
  std::size_t rows, cols, stride;
  guarded_buffer<X> x;
  guarded_buffer<G> gamma;
  guarded_buffer<B> beta;
  std::vector<double> x64, gamma64, beta64;

  problem(std::size_t rows_, std::size_t cols_, std::size_t stride_)
      : rows(rows_),
        cols(cols_),
        stride(stride_),
        x(rows_ == 0 ? 0 : (rows_ - 1) * stride_ + cols_),
        gamma(cols_),
        beta(cols_),
        x64(rows_ * cols_),
        gamma64(cols_),
        beta64(cols_) {}

  view<const X> x_view() { return {x.data(), rows, cols, stride}; }
  void set_x(std::size_t r, std::size_t c, double v) {
    x[r * stride + c] = saturated<X>(v);
    x64[r * cols + c] = value_of(x[r * stride + c]);
  }
  void set_gamma(std::size_t c, double g, double b) {
    gamma[c] = saturated<G>(g);
    beta[c] = saturated<B>(b);
    gamma64[c] = value_of(gamma[c]);
    beta64[c] = value_of(beta[c]);
  }
  view<const double> x64_view() const { return {x64.data(), rows, cols}; }

  // y_ref, and the magnitudes the error of y is bounded by (kernels/layernorm.hpp):
  // |xhat * gamma| + |beta| + |gamma| * slack[r], slack[r] = rstd * mean_c |x - c| bounding the
  // error of xhat that the fp32 sums of the mean leave, c the row's shift: the mean of its first
  // 64 elements or x[r][0], the larger (rstd in fp64 here, two passes).
  void reference(std::vector<double>& y, std::vector<double>& magnitude, double eps) const {
    std::vector<double> slack;
    reference(y, magnitude, slack, eps);
  }
  void reference(std::vector<double>& y, std::vector<double>& magnitude, std::vector<double>& slack,
                 double eps) const {
    slack.assign(rows, 0.0);
    y.assign(rows * cols, 0.0);
    magnitude.assign(rows * cols, 0.0);
    std::vector<double> xhat(rows * cols), ones(cols, 1.0), zeros(cols, 0.0);
    reference::layernorm(x64_view(), gamma64, beta64, eps, view<double>(y.data(), rows, cols));
    reference::layernorm(x64_view(), ones, zeros, eps, view<double>(xhat.data(), rows, cols));
    const auto n = static_cast<double>(cols);
    for (std::size_t r = 0; r < rows; ++r) {
      const double* row = x64.data() + r * cols;
      double mean = 0, var = 0;
      for (std::size_t c = 0; c < cols; ++c) mean += row[c] / n;
      for (std::size_t c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean) / n;
      const double head = cols < 64 ? row[0] : std::accumulate(row, row + 64, 0.0) / 64;
      double spread = 0, head_spread = 0;
      for (std::size_t c = 0; c < cols; ++c) {
        spread += std::abs(row[c] - row[0]) / n;
        head_spread += std::abs(row[c] - head) / n;
      }
      slack[r] = std::max(spread, head_spread) / std::sqrt(var + eps);
      for (std::size_t c = 0; c < cols; ++c) {
        const std::size_t i = r * cols + c;
        magnitude[i] =
            std::abs(xhat[i] * gamma64[c]) + std::abs(beta64[c]) + std::abs(gamma64[c]) * slack[r];
      }
    }
  }
};

// N(0, 1) rows times 2^-4 .. 2^4 (2^-1 .. 2^1 for fp8), every third row offset by 3 of its
// standard deviations; gamma = 1 + N(0, 0.25), beta = N(0, 0.5) (or 0).
template <class X, class G, class B>
void fill_normal(problem<X, G, B>& p, std::uint64_t seed, bool with_beta = true) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> normal;
  const int spread = sizeof(X) == 1 ? 1 : 4;
  for (std::size_t r = 0; r < p.rows; ++r) {
    const double sigma = std::ldexp(1.0, static_cast<int>(r % (2 * spread + 1)) - spread);
    const double offset = r % 3 == 2 ? 3 * sigma : 0.0;
    for (std::size_t c = 0; c < p.cols; ++c) p.set_x(r, c, offset + sigma * normal(generator));
  }
  for (std::size_t c = 0; c < p.cols; ++c) {
    p.set_gamma(c, 1 + 0.25 * normal(generator), with_beta ? 0.5 * normal(generator) : 0.0);
  }
}

// An output rows x cols in rows of `stride`, the gaps holding a sentinel.
template <class Y>
struct output {
  std::size_t rows, cols, stride;
  guarded_buffer<Y> y;
  output(std::size_t rows_, std::size_t cols_, std::size_t stride_)
      : rows(rows_),
        cols(cols_),
        stride(stride_),
        y(rows_ == 0 ? 0 : (rows_ - 1) * stride_ + cols_) {
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = sentinel();
  }
  static Y sentinel() { return encoded<Y>(1.5); }
  view<Y> view_of() { return {y.data(), rows, cols, stride}; }
  Y at(std::size_t r, std::size_t c) { return y[r * stride + c]; }
  bool gaps_untouched() {
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = cols; c < stride && r * stride + c < y.size(); ++c) {
        if (!same_bits(y[r * stride + c], sentinel())) return false;
      }
    }
    return true;
  }
};

// ---- forward ----

// B of the fp32 bound (see the top of this file): the engine sums in the same 64 partials on every
// path.
double forward_bound() {
  return 8 * u;
}

struct forward_result {
  double worst_fp32 = 0;      // largest |y - y_ref| / (u * magnitude)
  std::size_t cancelled = 0;  // elements more than a code away, where beta cancels
};

// Runs layernorm on p into a strided Y and checks every element against the reference (see the
// top of this file).
template <class Y, class X, class G, class B>
forward_result check_forward(problem<X, G, B>& p, float eps, const cast_options& cast = {}) {
  const std::string what = name_of<X>() + " x, " + name_of<G>() + " gamma, " + name_of<B>() +
                           " beta, " + name_of<Y>() + " y, " + std::to_string(p.rows) + "x" +
                           std::to_string(p.cols) + " stride " + std::to_string(p.stride) + ", " +
                           std::string(name(cast.round)) + ", " + std::string(name(active_isa()));
  INFO(what);
  std::vector<double> want, magnitude;
  p.reference(want, magnitude, eps);
  output<Y> out(p.rows, p.cols, p.stride + 2);
  layernorm(p.x_view(), std::span<const G>(p.gamma.cspan()), p.beta.cspan(), out.view_of(), eps,
            cast);
  CHECK(out.gaps_untouched());

  forward_result result;
  for (std::size_t r = 0; r < p.rows; ++r) {
    for (std::size_t c = 0; c < p.cols; ++c) {
      const double w = want[r * p.cols + c], m = magnitude[r * p.cols + c];
      const Y y = out.at(r, c);
      const double got = value_of(y), error = std::abs(got - w);
      if (!agrees(y, w, forward_bound() * m, cast)) {
        INFO("(", r, ", ", c, "): got ", got, ", want ", w, ", magnitude ", m);
        CHECK(agrees(y, w, forward_bound() * m, cast));
        return result;
      }
      if constexpr (std::is_same_v<Y, float>) {
        if (m > 0) result.worst_fp32 = std::max(result.worst_fp32, error / (u * m));
      } else if (cast.round == rounding::nearest_even) {
        const std::int64_t distance = code_distance(y, encoded<Y>(w, cast));
        if (distance > 1 && std::abs(w) < value_of(std::numeric_limits<Y>::max())) {
          if (std::abs(w) < 0x1p-12 * m) {
            ++result.cancelled;
          } else {
            INFO("(", r, ", ", c, "): got ", got, ", want ", w, ", ", distance, " codes away");
            CHECK(distance <= 1);
            return result;
          }
        }
      }
    }
  }
  return result;
}

constexpr std::size_t row_lengths[] = {1, 7, 31, 767, 769, 4097};

template <class T>
void forward_every_shape(std::uint64_t seed) {
  // Blocks of 64 KiB of x, whatever the machine's L2: 17 rows of 4097 are several blocks (3 to
  // 15 rows each, by format) and a shorter last one. same_bits.hpp checks that the results
  // are the same for every block size.
  const test::row_blocks_of blocks(std::size_t{64} << 10);
  for (std::size_t cols : row_lengths) {
    for (std::size_t rows : {std::size_t{1}, std::size_t{3}, std::size_t{17}}) {
      if (rows == 17 && cols < 4097) continue;
      problem<T, T, T> p(rows, cols, cols + 3);
      fill_normal(p, seed + cols + rows);
      check_forward<T>(p, 1e-5f);
      if constexpr (!std::is_same_v<T, float>) {
        check_forward<T>(p, 1e-5f, {.round = rounding::stochastic, .seed = 11});
      }
    }
  }
}

TEST_CASE("layernorm: every format against the fp64 reference, odd rows, strided") {
  forward_every_shape<float>(1);
  forward_every_shape<bf16>(2);
  forward_every_shape<fp16>(3);
  forward_every_shape<fp8_e4m3>(5);
#if !defined(TILEKERN_TEST_FEWER_FORMATS)  // see support/formats.hpp
  forward_every_shape<tf32>(4);
  forward_every_shape<fp8_e4m3fn>(6);
  forward_every_shape<fp8_e5m2>(7);
  forward_every_shape<fp8_e3m4>(8);
#endif
}

TEST_CASE("layernorm: mixed formats") {
  for (std::size_t cols : {std::size_t{31}, std::size_t{769}}) {
    problem<bf16, float, float> a(5, cols, cols);
    fill_normal(a, 20 + cols);
    check_forward<bf16>(a, 1e-5f);
    check_forward<float>(a, 1e-5f);
    problem<float, bf16, fp16> b(5, cols, cols + 1);
    fill_normal(b, 30 + cols);
    check_forward<fp16>(b, 1e-5f);
    check_forward<fp8_e4m3>(b, 1e-5f, {.round = rounding::stochastic, .seed = 3});
  }
}

TEST_CASE("layernorm: the accuracy bar (fp32 within B u of the magnitudes; bf16, fp16 one code)") {
  // beta = 0: y = xhat * gamma cannot cancel, so every bf16 and fp16 result is within one code.
  for (std::size_t cols : {std::size_t{768}, std::size_t{4097}}) {
    problem<float, float, float> p(64, cols, cols);
    fill_normal(p, 40 + cols, /*with_beta=*/false);
    const std::size_t near_zero =
        check_forward<bf16>(p, 1e-5f).cancelled + check_forward<fp16>(p, 1e-5f).cancelled;
    std::printf(
        "layernorm %s 64x%zu, beta = 0: %zu bf16 and fp16 results more than one code away "
        "(all within the fp32 bound)\n",
        std::string(name(active_isa())).c_str(), cols, near_zero);
    fill_normal(p, 50 + cols);
    const forward_result fp32 = check_forward<float>(p, 1e-5f);
    const forward_result narrow = check_forward<bf16>(p, 1e-5f);
    std::printf(
        "layernorm %s 64x%zu: fp32 error at most %.2f u of the magnitudes; "
        "bf16: %zu results more than one code away where beta cancels\n",
        std::string(name(active_isa())).c_str(), cols, fp32.worst_fp32, narrow.cancelled);
  }
}

TEST_CASE("layernorm: rows of whole chunks, stored one after another or strided, the same bits") {
  // Rows of several chunks (norm_chunk) stored one after another are summed as rows of one chunk
  // each (row by row in the row passes, same_bits.hpp); with a row stride, chunk by chunk, in
  // the block passes: the same fp32 sums either way.
  for (std::size_t rows : {std::size_t{2}, std::size_t{5}}) {
    problem<bf16, bf16, bf16> dense(rows, 3072, 3072), strided(rows, 3072, 3077);
    for (auto* p : {&dense, &strided}) {
      fill_normal(*p, 70 + rows);
      p->set_x(rows - 1, 7, 1e30);  // a row whose sums overflow: rescaled and summed again
      p->set_x(0, 9, 1e4);  // a row far from one pass's condition: its mean in a second pass
    }
    check_forward<float>(dense, 1e-5f);
    check_forward<bf16>(dense, 1e-5f, {.round = rounding::stochastic, .seed = 5});
    output<float> a(rows, 3072, 3072), b(rows, 3072, 3072);
    layernorm(dense.x_view(), dense.gamma.cspan(), dense.beta.cspan(), a.view_of(), 1e-5f);
    layernorm(strided.x_view(), strided.gamma.cspan(), strided.beta.cspan(), b.view_of(), 1e-5f);
    for (std::size_t i = 0; i < a.y.size(); ++i) REQUIRE(same_bits(a.y[i], b.y[i]));
  }
}

TEST_CASE("layernorm: stochastic rounding is reproducible, seeded, indexed by r * cols + c") {
  problem<float, float, float> p(9, 769, 800);
  fill_normal(p, 60);
  const cast_options seeded{.round = rounding::stochastic, .seed = 5, .stream = 2};
  output<bf16> first(9, 769, 770), again(9, 769, 801), other(9, 769, 769);
  output<float> fp32(9, 769, 769);
  layernorm(p.x_view(), p.gamma.cspan(), p.beta.cspan(), first.view_of(), 1e-5f, seeded);
  layernorm(p.x_view(), p.gamma.cspan(), p.beta.cspan(), again.view_of(), 1e-5f, seeded);
  cast_options reseeded = seeded;
  reseeded.seed = 6;
  layernorm(p.x_view(), p.gamma.cspan(), p.beta.cspan(), other.view_of(), 1e-5f, reseeded);
  layernorm(p.x_view(), p.gamma.cspan(), p.beta.cspan(), fp32.view_of(), 1e-5f);
  std::size_t differ = 0, misindexed = 0;
  for (std::size_t r = 0; r < 9; ++r) {
    for (std::size_t c = 0; c < 769; ++c) {
      CHECK(same_bits(first.at(r, c), again.at(r, c)));
      differ += same_bits(first.at(r, c), other.at(r, c)) ? 0 : 1;
      // The same fp32 value (same path, same lanes) rounded with the documented index.
      misindexed +=
          same_bits(first.at(r, c), bf16::from(fp32.at(r, c), seeded, r * 769 + c)) ? 0 : 1;
    }
  }
  CHECK(differ > 9 * 769 / 10);  // about half the inexact results move with a new seed
  CHECK(misindexed == 0);
  check_forward<bf16>(p, 1e-5f, seeded);
}

TEST_CASE("layernorm: saturating and standard overflow") {
  problem<float, float, float> p(3, 31, 31);
  fill_normal(p, 70);
  for (std::size_t c = 0; c < 31; ++c) p.set_gamma(c, 400.0 * (c % 2 == 0 ? 1 : -1), 0.0);
  std::vector<double> want, magnitude;
  p.reference(want, magnitude, 1e-5);
  output<fp8_e4m3> saturated(3, 31, 31), standard(3, 31, 31);
  layernorm(p.x_view(), p.gamma.cspan(), p.beta.cspan(), saturated.view_of(), 1e-5f,
            {.on_overflow = overflow::saturate});
  layernorm(p.x_view(), p.gamma.cspan(), p.beta.cspan(), standard.view_of(), 1e-5f);
  std::size_t infinite = 0;
  for (std::size_t i = 0; i < 3 * 31; ++i) {
    const fp8_e4m3 s = saturated.y[i], plain = standard.y[i];
    CHECK(std::isfinite(value_of(s)));
    CHECK(code_distance(s, fp8_e4m3::from(want[i], {.on_overflow = overflow::saturate})) <= 1);
    infinite += plain.is_inf() ? 1 : 0;
    if (std::abs(want[i]) > 248) CHECK(plain.is_inf());
  }
  CHECK(infinite > 0);
  check_forward<fp8_e3m4>(p, 1e-5f, {.on_overflow = overflow::saturate});
}

TEST_CASE("layernorm: special rows") {
  SUBCASE("a constant row gives beta exactly") {
    for (double value : {0.0, 0.1, -3.0, 1.0 / 3.0, 1e30, -2.5e-30, 3e38}) {
      for (std::size_t cols : {std::size_t{1}, std::size_t{7}, std::size_t{769}}) {
        problem<float, float, float> p(2, cols, cols);
        fill_normal(p, 80);
        for (std::size_t c = 0; c < cols; ++c) p.set_x(0, c, value);
        for (float eps : {1e-5f, 1e-30f}) {
          output<float> out(2, cols, cols);
          layernorm(p.x_view(), p.gamma.cspan(), p.beta.cspan(), out.view_of(), eps);
          for (std::size_t c = 0; c < cols; ++c) {
            INFO(value, " in ", cols, " columns, eps ", eps, ", column ", c);
            CHECK(out.at(0, c) == p.beta[c]);
          }
        }
        problem<bf16, bf16, bf16> q(1, cols, cols);
        fill_normal(q, 81);
        for (std::size_t c = 0; c < cols; ++c) q.set_x(0, c, value);
        output<bf16> out(1, cols, cols);
        layernorm(q.x_view(), q.gamma.cspan(), q.beta.cspan(), out.view_of(), 1e-5f);
        for (std::size_t c = 0; c < cols; ++c) CHECK(same_bits(out.at(0, c), q.beta[c]));
      }
    }
  }
  SUBCASE("NaN or inf in a row gives NaN in that row only") {
    problem<float, float, float> p(4, 769, 769);
    fill_normal(p, 90);
    p.set_x(1, 500, std::numeric_limits<double>::quiet_NaN());
    p.set_x(2, 3, std::numeric_limits<double>::infinity());
    output<float> out(4, 769, 769);
    layernorm(p.x_view(), p.gamma.cspan(), p.beta.cspan(), out.view_of(), 1e-5f);
    for (std::size_t c = 0; c < 769; ++c) {
      CHECK(std::isnan(out.at(1, c)));
      CHECK(std::isnan(out.at(2, c)));
    }
    problem<float, float, float> clean(2, 769, 769);
    for (std::size_t c = 0; c < 769; ++c) {
      clean.set_x(0, c, p.x64[c]);
      clean.set_x(1, c, p.x64[3 * 769 + c]);
      clean.set_gamma(c, p.gamma64[c], p.beta64[c]);
    }
    std::vector<double> want, magnitude;
    clean.reference(want, magnitude, 1e-5);
    for (std::size_t c = 0; c < 769; ++c) {
      CHECK(std::abs(out.at(0, c) - want[c]) <= forward_bound() * magnitude[c]);
      CHECK(std::abs(out.at(3, c) - want[769 + c]) <= forward_bound() * magnitude[769 + c]);
    }
  }
  SUBCASE("rows whose first 64 elements are far from the mean take two passes") {
    // fill_normal's rows, the first 64 elements of some offset by 10 (0.6 to 160 standard
    // deviations): one pass would cancel up to log2(1 + cols / 64) bits in s2 - s1^2 / cols, 6
    // for 4097 columns. Runs of such rows, and single ones.
    for (const std::size_t cols : {std::size_t{4097}, std::size_t{769}}) {
      problem<float, float, float> p(9, cols, cols);
      fill_normal(p, 120);
      for (const std::size_t r : {0, 1, 2, 5, 8}) {
        for (std::size_t c = 0; c < 64; ++c) p.set_x(r, c, p.x64[r * cols + c] + 10.0);
      }
      check_forward<float>(p, 1e-5f);
      check_forward<bf16>(p, 1e-5f);
    }
  }
  SUBCASE("huge and tiny rows keep their statistics") {
    for (const double scale : {1e30, 1e-30, 1e20, 1e-20}) {
      for (const double offset : {0.0, 5.0}) {
        problem<float, float, float> p(3, 769, 769);
        fill_normal(p, 100);
        for (std::size_t r = 0; r < 3; ++r) {
          for (std::size_t c = 0; c < 769; ++c)
            p.set_x(r, c, (p.x64[r * 769 + c] + offset) * scale);
        }
        INFO("float rows of ", scale);
        check_forward<float>(p, 1e-5f);
        check_forward<float>(p, 0.0f);  // eps = 0: the statistics alone
        check_forward<bf16>(p, 0.0f);
      }
    }
    // bf16 values up to 3e38: the sums of deviations overflow fp32 too.
    problem<bf16, bf16, bf16> q(2, 767, 767);
    fill_normal(q, 110);
    std::mt19937_64 generator(111);
    std::uniform_real_distribution<double> wide(-3e38, 3e38);
    for (std::size_t r = 0; r < 2; ++r) {
      for (std::size_t c = 0; c < 767; ++c) q.set_x(r, c, wide(generator));
    }
    check_forward<bf16>(q, 1e-5f);
    check_forward<float>(q, 1e-5f);
  }
}

TEST_CASE("layernorm: shape errors name the argument and both sizes, and write nothing") {
  problem<bf16, float, float> p(3, 768, 768);
  fill_normal(p, 120);
  std::vector<float> short_gamma(767, 1.0f), gammas(2 * 768, 1.0f);
  output<bf16> y(4, 769, 769);
  const auto expect = [&](auto call, std::vector<std::string> words) {
    try {
      call();
      FAIL("no shape_error");
    } catch (const shape_error& error) {
      for (const std::string& word : words) {
        INFO(error.what(), " should say ", word);
        CHECK(std::string(error.what()).find(word) != std::string::npos);
      }
    }
    CHECK(y.gaps_untouched());
    for (std::size_t i = 0; i < y.y.size(); ++i) REQUIRE(same_bits(y.y[i], y.sentinel()));
  };
  const view<bf16> y3(y.y.data(), 3, 768);
  expect([&] { layernorm(p.x_view(), short_gamma, p.beta.cspan(), y3, 1e-5f); },
         {"tilekern::layernorm", "gamma", "767", "768"});
  expect([&] { layernorm(p.x_view(), p.gamma.cspan(), short_gamma, y3, 1e-5f); },
         {"tilekern::layernorm", "beta", "767", "768"});
  expect(
      [&] {
        layernorm(p.x_view(), view<const float>(gammas.data(), 2, 768), p.beta.cspan(), y3, 1e-5f);
      },
      {"gamma", "2x768", "768"});
  expect(
      [&] {
        layernorm(p.x_view(), p.gamma.cspan(), p.beta.cspan(), view<bf16>(y.y.data(), 3, 769),
                  1e-5f);
      },
      {"tilekern::layernorm", "y", "3x769", "3x768"});
  expect(
      [&] {
        layernorm(p.x_view(), p.gamma.cspan(), p.beta.cspan(), view<bf16>(y.y.data(), 4, 768),
                  1e-5f);
      },
      {"y", "4x768", "3x768"});

  // Backward: dy, dx, gamma, dgamma, dbeta; outputs untouched (dx is y's buffer, dgamma and dbeta
  // hold sentinels).
  std::vector<float> dgamma(768, 7.0f), dbeta(768, 7.0f), short_out(767, 7.0f);
  const auto untouched = [&] {
    CHECK(std::all_of(dgamma.begin(), dgamma.end(), [](float v) { return v == 7.0f; }));
    CHECK(std::all_of(dbeta.begin(), dbeta.end(), [](float v) { return v == 7.0f; }));
    CHECK(std::all_of(short_out.begin(), short_out.end(), [](float v) { return v == 7.0f; }));
  };
  const view<const bf16> dy = p.x_view();
  expect(
      [&] {
        layernorm_backward(p.x_view().block(0, 0, 2, 768), p.x_view(), p.gamma.cspan(), y3, dgamma,
                           dbeta, 1e-5f);
      },
      {"tilekern::layernorm_backward", "dy", "2x768", "3x768"});
  expect([&] { layernorm_backward(dy, p.x_view(), short_gamma, y3, dgamma, dbeta, 1e-5f); },
         {"tilekern::layernorm_backward", "gamma", "767", "768"});
  expect(
      [&] {
        layernorm_backward(dy, p.x_view(), p.gamma.cspan(), view<bf16>(y.y.data(), 3, 769), dgamma,
                           dbeta, 1e-5f);
      },
      {"dx", "3x769", "3x768"});
  expect([&] { layernorm_backward(dy, p.x_view(), p.gamma.cspan(), y3, short_out, dbeta, 1e-5f); },
         {"dgamma", "767", "768"});
  expect([&] { layernorm_backward(dy, p.x_view(), p.gamma.cspan(), y3, dgamma, short_out, 1e-5f); },
         {"dbeta", "767", "768"});
  untouched();
}

// ---- backward ----

// The gradients' bound (kernels/layernorm.hpp), relative to the scales computed below.
constexpr double backward_bound = 32 * u;

struct backward_error {
  double dx = 0, dgamma = 0, dbeta = 0;  // the largest errors in u of their scales (fp32 only)
};

template <class DX, class DG, class DY, class X, class G>
backward_error check_backward(problem<X, G, G>& p, const std::vector<DY>& dy_codes, float eps,
                              const cast_options& cast = {}) {
  const std::size_t rows = p.rows, cols = p.cols;
  INFO(name_of<X>(), " x, ", name_of<DY>(), " dy, ", name_of<DX>(), " dx, ", name_of<DG>(),
       " dgamma, ", rows, "x", cols, ", ", name(cast.round), ", ", name(active_isa()));
  guarded_buffer<DY> dy(rows * cols);
  std::vector<double> dy64(rows * cols);
  for (std::size_t i = 0; i < rows * cols; ++i) {
    dy[i] = dy_codes[i];
    dy64[i] = value_of(dy[i]);
  }
  std::vector<double> dx_ref(rows * cols), dgamma_ref(cols), dbeta_ref(cols), xhat(rows * cols);
  const view<const double> dy64_view(dy64.data(), rows, cols);
  reference::layernorm_backward(dy64_view, p.x64_view(), p.gamma64, eps,
                                view<double>(dx_ref.data(), rows, cols), dgamma_ref, dbeta_ref);
  std::vector<double> ones(cols, 1.0), zeros(cols, 0.0), y_unused, magnitude_unused, slack;
  reference::layernorm(p.x64_view(), ones, zeros, eps, view<double>(xhat.data(), rows, cols));
  p.reference(y_unused, magnitude_unused, slack, eps);

  output<DX> dx(rows, cols, cols + 1);
  guarded_buffer<DG> dgamma(cols), dbeta(cols);
  layernorm_backward(view<const DY>(dy.data(), rows, cols), p.x_view(), p.gamma.cspan(),
                     dx.view_of(), dgamma.span(), dbeta.span(), eps, cast);
  CHECK(dx.gaps_untouched());

  backward_error worst;
  const auto n = static_cast<double>(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    // The row's gradient scale: rstd (max |g| (1 + slack) + max |xhat| mean |g xhat|), slack the
    // error of xhat the fp32 mean may leave (see problem::reference).
    double max_g = 0, max_xhat = 0, mean_g_xhat = 0, mean = 0, var = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      const double g = dy64[r * cols + c] * p.gamma64[c], h = xhat[r * cols + c];
      max_g = std::max(max_g, std::abs(g));
      max_xhat = std::max(max_xhat, std::abs(h));
      mean_g_xhat += std::abs(g * h) / n;
      mean += p.x64[r * cols + c] / n;
    }
    for (std::size_t c = 0; c < cols; ++c) {
      var += (p.x64[r * cols + c] - mean) * (p.x64[r * cols + c] - mean) / n;
    }
    const double rstd = 1 / std::sqrt(var + eps);
    const double scale = rstd * (max_g * (1 + slack[r]) + max_xhat * mean_g_xhat);
    for (std::size_t c = 0; c < cols; ++c) {
      const double want = dx_ref[r * cols + c];
      const DX got = dx.at(r, c);
      if (!agrees(got, want, backward_bound * scale, cast)) {
        INFO("dx(", r, ", ", c, "): got ", value_of(got), ", want ", want, ", row scale ", scale);
        CHECK(agrees(got, want, backward_bound * scale, cast));
        return worst;
      }
      if (std::is_same_v<DX, float> && scale > 0) {
        worst.dx = std::max(worst.dx, std::abs(value_of(got) - want) / (u * scale));
      }
    }
  }
  for (std::size_t c = 0; c < cols; ++c) {
    double dgamma_scale = 0, dbeta_scale = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      dgamma_scale += std::abs(dy64[r * cols + c]) * (std::abs(xhat[r * cols + c]) + slack[r]);
      dbeta_scale += std::abs(dy64[r * cols + c]);
    }
    INFO("column ", c);
    CHECK(agrees(dgamma[c], dgamma_ref[c], backward_bound * dgamma_scale, cast));
    CHECK(agrees(dbeta[c], dbeta_ref[c], backward_bound * dbeta_scale, cast));
    if (std::is_same_v<DG, float> && dgamma_scale > 0) {
      worst.dgamma = std::max(worst.dgamma,
                              std::abs(value_of(dgamma[c]) - dgamma_ref[c]) / (u * dgamma_scale));
      worst.dbeta =
          std::max(worst.dbeta, std::abs(value_of(dbeta[c]) - dbeta_ref[c]) / (u * dbeta_scale));
    }
  }
  return worst;
}

template <class T>
std::vector<T> normal_codes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> normal;
  std::vector<T> codes(n);
  for (T& v : codes) v = saturated<T>(normal(generator));
  return codes;
}

template <class T>
void backward_every_shape(std::uint64_t seed) {
  // Several blocks for 17 rows of 4097, as in forward_every_shape.
  const test::row_blocks_of blocks(std::size_t{64} << 10);
  for (std::size_t cols : row_lengths) {
    for (std::size_t rows : {std::size_t{1}, std::size_t{3}, std::size_t{17}}) {
      if (rows == 17 && cols < 4097) continue;
      problem<T, T, T> p(rows, cols, cols + 2);
      fill_normal(p, seed + cols + rows);
      const std::vector<T> dy = normal_codes<T>(rows * cols, seed + 1000 + cols);
      check_backward<T, T>(p, dy, 1e-5f);
      if constexpr (!std::is_same_v<T, float>) {
        check_backward<T, T>(p, dy, 1e-5f, {.round = rounding::stochastic, .seed = 4});
      }
    }
  }
}

TEST_CASE("layernorm_backward: every format against the fp64 reference") {
  backward_every_shape<float>(200);
  {
    problem<float, float, float> p(64, 4097, 4097);
    fill_normal(p, 199);
    const backward_error worst =
        check_backward<float, float>(p, normal_codes<float>(64 * 4097, 198), 1e-5f);
    std::printf(
        "layernorm_backward %s 64x4097 fp32: dx %.2f u, dgamma %.2f u, dbeta %.2f u of their "
        "scales\n",
        std::string(name(active_isa())).c_str(), worst.dx, worst.dgamma, worst.dbeta);
  }
  backward_every_shape<bf16>(201);
  backward_every_shape<fp16>(202);
  backward_every_shape<tf32>(203);
  backward_every_shape<fp8_e4m3>(204);
  backward_every_shape<fp8_e4m3fn>(205);
  backward_every_shape<fp8_e5m2>(206);
  backward_every_shape<fp8_e3m4>(207);
  {
    problem<float, float, float> one_row(1, 2048, 2048);  // whole chunks: gamma as chunk rows too
    fill_normal(one_row, 196);
    check_backward<float, float>(one_row, normal_codes<float>(2048, 197), 1e-5f);
  }
  // Mixed: bf16 x and dy, float gamma, float gradients.
  problem<bf16, float, float> p(5, 769, 769);
  fill_normal(p, 210);
  check_backward<float, float>(p, normal_codes<bf16>(5 * 769, 211), 1e-5f);
  check_backward<bf16, float>(p, normal_codes<bf16>(5 * 769, 212), 1e-5f);
}

TEST_CASE("layernorm_backward: huge rows, reproducible stochastic gradients") {
  problem<float, float, float> p(3, 767, 767);
  fill_normal(p, 220);
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t c = 0; c < 767; ++c) p.set_x(r, c, p.x64[r * 767 + c] * 1e30);
  }
  check_backward<float, float>(p, normal_codes<float>(3 * 767, 221), 1e-5f);

  problem<float, float, float> q(4, 31, 31);
  fill_normal(q, 230);
  const std::vector<float> dy = normal_codes<float>(4 * 31, 231);
  const cast_options seeded{.round = rounding::stochastic, .seed = 9};
  std::vector<bf16> dx1(4 * 31), dx2(4 * 31), dg1(31), dg2(31), db1(31), db2(31);
  layernorm_backward(view<const float>(dy.data(), 4, 31), q.x_view(), q.gamma.cspan(),
                     view<bf16>(dx1.data(), 4, 31), dg1, db1, 1e-5f, seeded);
  layernorm_backward(view<const float>(dy.data(), 4, 31), q.x_view(), q.gamma.cspan(),
                     view<bf16>(dx2.data(), 4, 31), dg2, db2, 1e-5f, seeded);
  for (std::size_t i = 0; i < dx1.size(); ++i) CHECK(same_bits(dx1[i], dx2[i]));
  for (std::size_t i = 0; i < 31; ++i) CHECK(same_bits(dg1[i], dg2[i]));
  for (std::size_t i = 0; i < 31; ++i) CHECK(same_bits(db1[i], db2[i]));
}

// ---------------------------------------------------------------------------------------------
// The same bits however the rows are taken (kernels/same_bits.hpp).

// Every output of layernorm and layernorm_backward for same_bits.hpp's checks.
template <class T>
std::vector<test::named_bytes> same_bits_outputs(const test::output_shape& s) {
  const test::same_bits_inputs<T> in(s.rows, s.cols);
  const view<const T> x = in.matrix(in.x), gamma = in.row(in.gamma), beta = in.row(in.beta);
  const cast_options stochastic{.round = rounding::stochastic, .seed = 9};
  test::output_bytes<T> out(s);
  const std::size_t matrix = out.matrix_size(), row = out.row_size();
  out.run("layernorm", {matrix}, [&](auto& o) { layernorm(x, gamma, beta, o.matrix(0), 1e-5f); });
  out.run("layernorm, stochastic", {matrix},
          [&](auto& o) { layernorm(x, gamma, beta, o.matrix(0), 1e-5f, stochastic); });
  out.run("layernorm_backward, stochastic", {matrix, row, row}, [&](auto& o) {
    layernorm_backward(in.matrix(in.dy), x, gamma, o.matrix(0), o.row(1), o.row(2), 1e-5f,
                       stochastic);
  });
  return std::move(out).bytes();
}

TEST_CASE("layernorm: the same bits for every size of the blocks of rows") {
  test::same_bits_for_every_block_size<float>(same_bits_outputs<float>);
  test::same_bits_for_every_block_size<bf16>(same_bits_outputs<bf16>);
  test::same_bits_for_every_block_size<fp8_e4m3>(same_bits_outputs<fp8_e4m3>);
}

TEST_CASE("layernorm: the same bits row by row as by blocks of rows") {
  test::same_bits_row_by_row<float>(same_bits_outputs<float>);
  test::same_bits_row_by_row<bf16>(same_bits_outputs<bf16>);
  test::same_bits_row_by_row<fp8_e4m3>(same_bits_outputs<fp8_e4m3>);
}

TEST_CASE("layernorm: the same bits with non-temporal stores") {
  test::same_bits_streamed<float>(same_bits_outputs<float>);
  test::same_bits_streamed<bf16>(same_bits_outputs<bf16>);
  test::same_bits_streamed<fp16>(same_bits_outputs<fp16>);
  test::same_bits_streamed<fp8_e4m3>(same_bits_outputs<fp8_e4m3>);
}

}  // namespace
}  // namespace tilekern
