// kernels/rmsnorm.hpp against reference::rmsnorm and reference::rmsnorm_backward (fp64, on the
// decoded inputs), on the ISA path the CTest cap selects: every format (x, gamma, y the same, and
// mixed), odd row lengths, strided views, nearest-even and stochastic rounding, saturation,
// special rows, in place, and shape errors. Outputs and inputs end right before an unreadable page
// (guarded_buffer).
//
// Accuracy checked (kernels/rmsnorm.hpp states it):
//   fp32 y:       relative error at most ((k + 6) / 2 + 4) u, u = 2^-24, 64 partial sums,
//                 k = ceil(min(cols, 1024) / 64)
//   any other y:  within one code of the correctly rounded fp64 result (nearest even; y is a
//                 product, nothing cancels), and that bound plus the format's rounding
//   gradients:    |dx - dx_ref| <= 32 u * rstd * (max_c |g| + max_c |xhat| * mean_c |g * xhat|)
//                 per row (g = dy * gamma) plus dx's rounding; dgamma within
//                 32 u * sum_r |dy * xhat| per column plus its rounding.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/same_bits.hpp"
#include "support/elements.hpp"
#include "support/guarded.hpp"
#include "tilekern/kernels/rmsnorm.hpp"
#include "tilekern/reference/rmsnorm.hpp"
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

template <class T>
bool is_nan(T v) {
  return std::isnan(value_of(v));
}

// Whether `got` is an fp32 result within `bound` of `want`, rounded to T with `cast` (half an ulp
// for nearest even, under one otherwise); beyond T's range, within one code of want's own encoding
// (inf, NaN or max, as cast.on_overflow says). NaN agrees with NaN.
template <class T>
bool agrees(T got, double want, double bound, const cast_options& cast) {
  if (std::isnan(want)) return is_nan(got);
  if constexpr (!std::is_same_v<T, float>) {
    if (std::abs(want) >= value_of(std::numeric_limits<T>::max())) {
      const T expected = encoded<T>(want, {.on_overflow = cast.on_overflow});
      return expected.is_nan() ? got.is_nan() : code_distance(got, expected) <= 1;
    }
  }
  double slack = 0x1p-149;
  if constexpr (!std::is_same_v<T, float>) {
    slack = cast.round == rounding::nearest_even ? ulp<T>(want) / 2 : ulp<T>(want);
  }
  return std::abs(value_of(got) - want) <= bound + slack;
}

// The documented relative bound on the fp32 results on the active path.
double forward_bound(std::size_t cols) {
  // 64 partial sums on every path (engine/lanes.hpp), combined in 6 levels, within chunks of
  // 1024 columns (norm_chunk).
  const std::size_t k = (std::min<std::size_t>(cols, 1024) + 63) / 64;
  return ((static_cast<double>(k) + 6) / 2 + 4) * u;
}

// ---- a rows x cols problem with strided inputs, and its fp64 reference ----

template <class X, class G>
struct problem {
  std::size_t rows, cols, stride;
  guarded_buffer<X> x;
  guarded_buffer<G> gamma;
  std::vector<double> x64, gamma64;

  problem(std::size_t rows_, std::size_t cols_, std::size_t stride_)
      : rows(rows_),
        cols(cols_),
        stride(stride_),
        x(rows_ == 0 ? 0 : (rows_ - 1) * stride_ + cols_),
        gamma(cols_),
        x64(rows_ * cols_),
        gamma64(cols_) {}

  view<const X> x_view() { return {x.data(), rows, cols, stride}; }
  void set_x(std::size_t r, std::size_t c, double v) {
    x[r * stride + c] = saturated<X>(v);
    x64[r * cols + c] = value_of(x[r * stride + c]);
  }
  void set_gamma(std::size_t c, double g) {
    gamma[c] = saturated<G>(g);
    gamma64[c] = value_of(gamma[c]);
  }
  view<const double> x64_view() const { return {x64.data(), rows, cols}; }
  std::vector<double> reference(double eps) const {
    std::vector<double> y(rows * cols);
    reference::rmsnorm(x64_view(), gamma64, eps, view<double>(y.data(), rows, cols));
    return y;
  }
};

// N(0, 1) rows times 2^-4 .. 2^4 (2^-1 .. 2^1 for fp8); gamma = 1 + N(0, 0.25).
template <class X, class G>
void fill_normal(problem<X, G>& p, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> normal;
  const int spread = sizeof(X) == 1 ? 1 : 4;
  for (std::size_t r = 0; r < p.rows; ++r) {
    const double sigma = std::ldexp(1.0, static_cast<int>(r % (2 * spread + 1)) - spread);
    for (std::size_t c = 0; c < p.cols; ++c) p.set_x(r, c, sigma * normal(generator));
  }
  for (std::size_t c = 0; c < p.cols; ++c) p.set_gamma(c, 1 + 0.25 * normal(generator));
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

// Runs rmsnorm on p into a strided Y and checks every element against the reference (see the top
// of this file); returns the largest relative error of fp32 results in u.
template <class Y, class X, class G>
double check_forward(problem<X, G>& p, float eps, const cast_options& cast = {}) {
  INFO(name_of<X>(), " x, ", name_of<G>(), " gamma, ", name_of<Y>(), " y, ", p.rows, "x", p.cols,
       " stride ", p.stride, ", ", name(cast.round), ", ", name(active_isa()));
  const std::vector<double> want = p.reference(eps);
  output<Y> out(p.rows, p.cols, p.stride + 2);
  rmsnorm(p.x_view(), p.gamma.cspan(), out.view_of(), eps, cast);
  CHECK(out.gaps_untouched());
  const double bound = forward_bound(p.cols);
  double worst = 0;
  for (std::size_t r = 0; r < p.rows; ++r) {
    for (std::size_t c = 0; c < p.cols; ++c) {
      const double w = want[r * p.cols + c];
      const Y y = out.at(r, c);
      bool ok = agrees(y, w, bound * std::abs(w), cast);
      if constexpr (!std::is_same_v<Y, float>) {
        if (cast.round == rounding::nearest_even && std::isfinite(w)) {
          ok = ok && code_distance(y, encoded<Y>(w, {.on_overflow = cast.on_overflow})) <= 1;
        }
      } else if (w != 0 && std::isfinite(w)) {
        worst = std::max(worst, std::abs(y - w) / (u * std::abs(w)));
      }
      if (!ok) {
        INFO("(", r, ", ", c, "): got ", value_of(y), ", want ", w);
        CHECK(ok);
        return worst;
      }
    }
  }
  return worst;
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
      problem<T, T> p(rows, cols, cols + 3);
      fill_normal(p, seed + cols + rows);
      check_forward<T>(p, 1e-5f);
      if constexpr (!std::is_same_v<T, float>) {
        check_forward<T>(p, 1e-5f, {.round = rounding::stochastic, .seed = 11});
      }
    }
  }
}

TEST_CASE("rmsnorm: every format against the fp64 reference, odd rows, strided") {
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

TEST_CASE("rmsnorm: mixed formats, and the measured fp32 error") {
  for (std::size_t cols : {std::size_t{31}, std::size_t{769}}) {
    problem<bf16, float> a(5, cols, cols);
    fill_normal(a, 20 + cols);
    check_forward<bf16>(a, 1e-5f);
    check_forward<float>(a, 1e-5f);
    problem<float, bf16> b(5, cols, cols + 1);
    fill_normal(b, 30 + cols);
    check_forward<fp16>(b, 1e-5f);
    check_forward<fp8_e4m3>(b, 1e-5f, {.round = rounding::stochastic, .seed = 3});
  }
  for (std::size_t cols : {std::size_t{768}, std::size_t{4097}}) {
    problem<bf16, float> p(64, cols, cols);
    fill_normal(p, 40 + cols);
    const double worst = check_forward<float>(p, 1e-5f);
    std::printf("rmsnorm %s 64x%zu bf16 x: fp32 error at most %.2f u (bound %.1f u)\n",
                std::string(name(active_isa())).c_str(), cols, worst, forward_bound(cols) / u);
  }
}

TEST_CASE("rmsnorm: rows of whole chunks, stored one after another or strided, the same bits") {
  // Rows of several chunks (norm_chunk) stored one after another are summed as rows of one chunk
  // each (row by row in the row passes, same_bits.hpp); with a row stride, chunk by chunk, in
  // the block passes: the same fp32 sums either way.
  for (std::size_t rows : {std::size_t{2}, std::size_t{5}}) {
    problem<bf16, bf16> dense(rows, 3072, 3072), strided(rows, 3072, 3077);
    for (auto* p : {&dense, &strided}) {
      fill_normal(*p, 70 + rows);
      p->set_x(rows - 1, 7, 1e30);  // a row whose squares overflow: rescaled and summed again
    }
    check_forward<float>(dense, 1e-5f);
    check_forward<bf16>(dense, 1e-5f, {.round = rounding::stochastic, .seed = 5});
    output<float> a(rows, 3072, 3072), b(rows, 3072, 3072);
    rmsnorm(dense.x_view(), dense.gamma.cspan(), a.view_of(), 1e-5f);
    rmsnorm(strided.x_view(), strided.gamma.cspan(), b.view_of(), 1e-5f);
    for (std::size_t i = 0; i < a.y.size(); ++i) REQUIRE(same_bits(a.y[i], b.y[i]));
  }
}

TEST_CASE("rmsnorm: stochastic rounding is reproducible, seeded, indexed by r * cols + c") {
  problem<float, float> p(9, 769, 800);
  fill_normal(p, 60);
  const cast_options seeded{.round = rounding::stochastic, .seed = 5, .stream = 2};
  output<bf16> first(9, 769, 770), again(9, 769, 801), other(9, 769, 769);
  output<float> fp32(9, 769, 769);
  rmsnorm(p.x_view(), p.gamma.cspan(), first.view_of(), 1e-5f, seeded);
  rmsnorm(p.x_view(), p.gamma.cspan(), again.view_of(), 1e-5f, seeded);
  cast_options reseeded = seeded;
  reseeded.seed = 6;
  rmsnorm(p.x_view(), p.gamma.cspan(), other.view_of(), 1e-5f, reseeded);
  rmsnorm(p.x_view(), p.gamma.cspan(), fp32.view_of(), 1e-5f);
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

TEST_CASE("rmsnorm: saturating and standard overflow") {
  problem<float, float> p(3, 31, 31);
  fill_normal(p, 70);
  for (std::size_t c = 0; c < 31; ++c) p.set_gamma(c, 400.0 * (c % 2 == 0 ? 1 : -1));
  const std::vector<double> want = p.reference(1e-5);
  output<fp8_e4m3> saturated(3, 31, 31), standard(3, 31, 31);
  rmsnorm(p.x_view(), p.gamma.cspan(), saturated.view_of(), 1e-5f,
          {.on_overflow = overflow::saturate});
  rmsnorm(p.x_view(), p.gamma.cspan(), standard.view_of(), 1e-5f);
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

template <class T>
void check_special_rows() {
  const std::size_t cols = 769;
  problem<T, T> p(9, cols, cols);
  fill_normal(p, 80);
  std::mt19937_64 generator(81);
  std::normal_distribution<double> normal;
  const double big = value_of(std::numeric_limits<T>::max()) / 4;
  for (std::size_t c = 0; c < cols; ++c) {
    p.set_x(0, c, 0.0);                                                 // y = 0
    p.set_x(1, c, value_of(std::numeric_limits<T>::max()));             // y = gamma
    p.set_x(2, c, big * std::clamp(normal(generator), -4.0, 4.0) / 4);  // squares overflow
    p.set_x(3, c, 1e-30 * normal(generator));                           // squares underflow
    p.set_x(4, c, value_of(std::numeric_limits<T>::denorm_min()));      // subnormal row
    p.set_x(5, c, 1e30 * normal(generator));                            // huge
  }
  p.set_x(6, 5, std::numeric_limits<double>::quiet_NaN());  // the row is NaN
  if constexpr (std::numeric_limits<T>::has_infinity) {
    p.set_x(7, 3, std::numeric_limits<double>::infinity());  // NaN there, zeros elsewhere
    p.set_x(8, 0, -std::numeric_limits<double>::infinity());
  }
  check_forward<T>(p, 1e-5f);
  check_forward<float>(p, 1e-5f);
  check_forward<float>(p, 0.0f);  // rows of zeros are 0 / 0 = NaN, as in the reference
  output<float> zeros(1, cols, cols);
  rmsnorm(p.x_view().block(0, 0, 1, cols), p.gamma.cspan(), zeros.view_of(), 0.0f);
  for (std::size_t c = 0; c < cols; ++c) CHECK(std::isnan(zeros.at(0, c)));
}

TEST_CASE("rmsnorm: special rows and extreme ranges") {
  check_special_rows<float>();
  check_special_rows<bf16>();
  check_special_rows<fp16>();
  check_special_rows<tf32>();
}

TEST_CASE("rmsnorm: y may be x itself") {
  problem<bf16, float> p(3, 100, 100);
  fill_normal(p, 90);
  output<bf16> apart(3, 100, 100);
  rmsnorm(p.x_view(), p.gamma.cspan(), apart.view_of(), 1e-5f);
  const view<bf16> both(p.x.data(), 3, 100);
  rmsnorm(both, p.gamma.cspan(), both, 1e-5f);
  for (std::size_t i = 0; i < 300; ++i) CHECK(same_bits(p.x[i], apart.y[i]));
}

TEST_CASE("rmsnorm: shape errors name the argument and both sizes, and write nothing") {
  problem<bf16, float> p(3, 768, 768);
  fill_normal(p, 120);
  std::vector<float> short_gamma(767, 1.0f), gammas(2 * 768, 1.0f), dgamma(768, 7.0f),
      short_out(767, 7.0f);
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
    for (std::size_t i = 0; i < y.y.size(); ++i) REQUIRE(same_bits(y.y[i], y.sentinel()));
    CHECK(std::all_of(dgamma.begin(), dgamma.end(), [](float v) { return v == 7.0f; }));
    CHECK(std::all_of(short_out.begin(), short_out.end(), [](float v) { return v == 7.0f; }));
  };
  const view<bf16> y3(y.y.data(), 3, 768);
  expect([&] { rmsnorm(p.x_view(), short_gamma, y3, 1e-5f); },
         {"tilekern::rmsnorm", "gamma", "767", "768"});
  expect([&] { rmsnorm(p.x_view(), view<const float>(gammas.data(), 2, 768), y3, 1e-5f); },
         {"gamma", "2x768", "768"});
  expect([&] { rmsnorm(p.x_view(), p.gamma.cspan(), view<bf16>(y.y.data(), 3, 769), 1e-5f); },
         {"tilekern::rmsnorm", "y", "3x769", "3x768"});
  expect([&] { rmsnorm(p.x_view(), p.gamma.cspan(), view<bf16>(y.y.data(), 4, 768), 1e-5f); },
         {"y", "4x768", "3x768"});
  const view<const bf16> dy = p.x_view();
  expect(
      [&] {
        rmsnorm_backward(dy.block(0, 0, 2, 768), p.x_view(), p.gamma.cspan(), y3, dgamma, 1e-5f);
      },
      {"tilekern::rmsnorm_backward", "dy", "2x768", "3x768"});
  expect([&] { rmsnorm_backward(dy, p.x_view(), short_gamma, y3, dgamma, 1e-5f); },
         {"tilekern::rmsnorm_backward", "gamma", "767", "768"});
  expect(
      [&] {
        rmsnorm_backward(dy, p.x_view(), p.gamma.cspan(), view<bf16>(y.y.data(), 3, 769), dgamma,
                         1e-5f);
      },
      {"dx", "3x769", "3x768"});
  expect([&] { rmsnorm_backward(dy, p.x_view(), p.gamma.cspan(), y3, short_out, 1e-5f); },
         {"dgamma", "767", "768"});
}

// ---- backward ----

constexpr double backward_bound = 32 * u;

// Checks rmsnorm_backward on p and dy against the reference; returns the largest errors of fp32
// dx and dgamma in u of their scales.
template <class DX, class DG, class DY, class X, class G>
std::pair<double, double> check_backward(problem<X, G>& p, const std::vector<DY>& dy_codes,
                                         float eps, const cast_options& cast = {}) {
  const std::size_t rows = p.rows, cols = p.cols;
  INFO(name_of<X>(), " x, ", name_of<DY>(), " dy, ", name_of<DX>(), " dx, ", name_of<DG>(),
       " dgamma, ", rows, "x", cols, ", ", name(cast.round), ", ", name(active_isa()));
  guarded_buffer<DY> dy(rows * cols);
  std::vector<double> dy64(rows * cols);
  for (std::size_t i = 0; i < rows * cols; ++i) {
    dy[i] = dy_codes[i];
    dy64[i] = value_of(dy[i]);
  }
  std::vector<double> dx_ref(rows * cols), dgamma_ref(cols), xhat(rows * cols), ones(cols, 1.0);
  reference::rmsnorm_backward(view<const double>(dy64.data(), rows, cols), p.x64_view(), p.gamma64,
                              eps, view<double>(dx_ref.data(), rows, cols), dgamma_ref);
  reference::rmsnorm(p.x64_view(), ones, eps, view<double>(xhat.data(), rows, cols));

  output<DX> dx(rows, cols, cols + 1);
  guarded_buffer<DG> dgamma(cols);
  rmsnorm_backward(view<const DY>(dy.data(), rows, cols), p.x_view(), p.gamma.cspan(), dx.view_of(),
                   dgamma.span(), eps, cast);
  CHECK(dx.gaps_untouched());

  double worst_dx = 0, worst_dgamma = 0;
  const auto n = static_cast<double>(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    double max_g = 0, max_xhat = 0, mean_g_xhat = 0, mean_square = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      const double g = dy64[r * cols + c] * p.gamma64[c], h = xhat[r * cols + c];
      max_g = std::max(max_g, std::abs(g));
      max_xhat = std::max(max_xhat, std::abs(h));
      mean_g_xhat += std::abs(g * h) / n;
      mean_square += p.x64[r * cols + c] * p.x64[r * cols + c] / n;
    }
    const double scale = (max_g + max_xhat * mean_g_xhat) / std::sqrt(mean_square + eps);
    for (std::size_t c = 0; c < cols; ++c) {
      const double want = dx_ref[r * cols + c];
      const DX got = dx.at(r, c);
      if (!agrees(got, want, backward_bound * scale, cast)) {
        INFO("dx(", r, ", ", c, "): got ", value_of(got), ", want ", want, ", row scale ", scale);
        CHECK(agrees(got, want, backward_bound * scale, cast));
        return {worst_dx, worst_dgamma};
      }
      if (std::is_same_v<DX, float> && scale > 0) {
        worst_dx = std::max(worst_dx, std::abs(value_of(got) - want) / (u * scale));
      }
    }
  }
  for (std::size_t c = 0; c < cols; ++c) {
    double scale = 0;
    for (std::size_t r = 0; r < rows; ++r)
      scale += std::abs(dy64[r * cols + c] * xhat[r * cols + c]);
    INFO("column ", c);
    CHECK(agrees(dgamma[c], dgamma_ref[c], backward_bound * scale, cast));
    if (std::is_same_v<DG, float> && scale > 0) {
      worst_dgamma =
          std::max(worst_dgamma, std::abs(value_of(dgamma[c]) - dgamma_ref[c]) / (u * scale));
    }
  }
  return {worst_dx, worst_dgamma};
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
      problem<T, T> p(rows, cols, cols + 2);
      fill_normal(p, seed + cols + rows);
      const std::vector<T> dy = normal_codes<T>(rows * cols, seed + 1000 + cols);
      check_backward<T, T>(p, dy, 1e-5f);
      if constexpr (!std::is_same_v<T, float>) {
        check_backward<T, T>(p, dy, 1e-5f, {.round = rounding::stochastic, .seed = 4});
      }
    }
  }
}

TEST_CASE("rmsnorm_backward: every format against the fp64 reference") {
  backward_every_shape<float>(200);
  backward_every_shape<bf16>(201);
  backward_every_shape<fp16>(202);
  backward_every_shape<tf32>(203);
  backward_every_shape<fp8_e4m3>(204);
  backward_every_shape<fp8_e4m3fn>(205);
  backward_every_shape<fp8_e5m2>(206);
  backward_every_shape<fp8_e3m4>(207);
  problem<bf16, float> p(5, 769, 769);
  fill_normal(p, 210);
  check_backward<float, float>(p, normal_codes<bf16>(5 * 769, 211), 1e-5f);
  check_backward<bf16, float>(p, normal_codes<bf16>(5 * 769, 212), 1e-5f);

  problem<float, float> one_row(1, 2048, 2048);  // whole chunks: gamma read as chunk rows too
  fill_normal(one_row, 215);
  check_backward<float, float>(one_row, normal_codes<float>(2048, 216), 1e-5f);

  problem<float, float> q(64, 4097, 4097);
  fill_normal(q, 213);
  const auto [dx, dgamma] =
      check_backward<float, float>(q, normal_codes<float>(64 * 4097, 214), 1e-5f);
  std::printf("rmsnorm_backward %s 64x4097 fp32: dx %.2f u, dgamma %.2f u of their scales\n",
              std::string(name(active_isa())).c_str(), dx, dgamma);
}

TEST_CASE("rmsnorm_backward: huge rows, reproducible stochastic gradients") {
  problem<float, float> p(3, 767, 767);
  fill_normal(p, 220);
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t c = 0; c < 767; ++c) p.set_x(r, c, p.x64[r * 767 + c] * 1e30);
  }
  check_backward<float, float>(p, normal_codes<float>(3 * 767, 221), 1e-5f);

  problem<float, float> q(4, 31, 31);
  fill_normal(q, 230);
  const std::vector<float> dy = normal_codes<float>(4 * 31, 231);
  const cast_options seeded{.round = rounding::stochastic, .seed = 9};
  std::vector<bf16> dx1(4 * 31), dx2(4 * 31), dg1(31), dg2(31);
  rmsnorm_backward(view<const float>(dy.data(), 4, 31), q.x_view(), q.gamma.cspan(),
                   view<bf16>(dx1.data(), 4, 31), dg1, 1e-5f, seeded);
  rmsnorm_backward(view<const float>(dy.data(), 4, 31), q.x_view(), q.gamma.cspan(),
                   view<bf16>(dx2.data(), 4, 31), dg2, 1e-5f, seeded);
  for (std::size_t i = 0; i < dx1.size(); ++i) CHECK(same_bits(dx1[i], dx2[i]));
  for (std::size_t i = 0; i < 31; ++i) CHECK(same_bits(dg1[i], dg2[i]));
}

// ---------------------------------------------------------------------------------------------
// The same bits however the rows are taken (kernels/same_bits.hpp).

// Every output of rmsnorm and rmsnorm_backward for same_bits.hpp's checks.
template <class T>
std::vector<test::named_bytes> same_bits_outputs(const test::output_shape& s) {
  const test::same_bits_inputs<T> in(s.rows, s.cols);
  const view<const T> x = in.matrix(in.x), gamma = in.row(in.gamma);
  const cast_options stochastic{.round = rounding::stochastic, .seed = 9};
  test::output_bytes<T> out(s);
  const std::size_t matrix = out.matrix_size(), row = out.row_size();
  out.run("rmsnorm", {matrix}, [&](auto& o) { rmsnorm(x, gamma, o.matrix(0), 1e-5f); });
  out.run("rmsnorm, stochastic", {matrix},
          [&](auto& o) { rmsnorm(x, gamma, o.matrix(0), 1e-5f, stochastic); });
  out.run("rmsnorm_backward", {matrix, row}, [&](auto& o) {
    rmsnorm_backward(in.matrix(in.dy), x, gamma, o.matrix(0), o.row(1), 1e-5f);
  });
  return std::move(out).bytes();
}

TEST_CASE("rmsnorm: the same bits for every size of the blocks of rows") {
  test::same_bits_for_every_block_size<float>(same_bits_outputs<float>);
  test::same_bits_for_every_block_size<bf16>(same_bits_outputs<bf16>);
  test::same_bits_for_every_block_size<fp8_e4m3>(same_bits_outputs<fp8_e4m3>);
}

TEST_CASE("rmsnorm: the same bits row by row as by blocks of rows") {
  test::same_bits_row_by_row<float>(same_bits_outputs<float>);
  test::same_bits_row_by_row<bf16>(same_bits_outputs<bf16>);
  test::same_bits_row_by_row<fp8_e4m3>(same_bits_outputs<fp8_e4m3>);
}

TEST_CASE("rmsnorm: the same bits with non-temporal stores") {
  test::same_bits_streamed<float>(same_bits_outputs<float>);
  test::same_bits_streamed<bf16>(same_bits_outputs<bf16>);
  test::same_bits_streamed<fp16>(same_bits_outputs<fp16>);
  test::same_bits_streamed<fp8_e4m3>(same_bits_outputs<fp8_e4m3>);
}

}  // namespace
}  // namespace tilekern
