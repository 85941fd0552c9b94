// kernels/softmax.hpp against reference/softmax.hpp (fp64), on the active ISA path (CTest runs this
// binary once per TILEKERN_ISA cap):
// - forward, for float and every format in and out, rows of 1, 7, 31, 767, 769 and 4097 (3 rows,
//   and a strided view), no mask, a bool mask and an additive mask (rows x cols and one broadcast
//   row), scale 0.7, nearest even and stochastic rounding, outputs in guarded buffers. Bounds:
//     float y: relative error <= (4 + |a| + k) u + (|a| + m_a) 2^-28 (the bound at the top of
//       softmax.hpp: a the element's exponent s - m from the reference, k = ceil(cols / 64) + 6,
//       the engine's 64 partial sums, m_a the row's mean |a| weighted by the reference, 2^-28
//       softmax_exp's |a| term); the largest error in ulp beyond |a| is reported, and must be
//       within 8 ulp on every path for rows up to 4097;
//     format y, nearest even (with softmax_exp_narrow's error added to the bound for narrow
//       formats, for the element's exponential and for the row's sum): between F::from(reference -
//       bound) and F::from(reference + bound) (F::from is monotonic), and within 1 code of
//       F::from(reference), the bar;
//     format y, stochastic: a value of F between the largest one <= (reference - bound) and the
//       smallest one >= (reference + bound): one of the two neighbours of the fp32 result; the
//       same seed gives the same bytes, another seed different ones.
// - the row max of codes found alongside the exponentials (codes_max_along) against
//   reduce_code_row, every row length to 160.
// - softmax_exp, the exponential inside: within 2 ulp + |a| 2^-28 (relative) of e^a 2^64 for every
//   61st fp32 in [-120, 0], and the same bits on the active path as on 1 lane; softmax_exp_narrow,
//   the one for narrow outputs (bf16, fp16, tf32, fp8), within its documented relative error there
//   and on (0, 1/2].
// - mixed formats (bf16 in, float out; float in, bf16 out; fp16 mask).
// - special cases: fully masked rows give zeros (bool, additive, and -inf inputs); NaN in a row
//   gives NaN in that row only; +inf makes its row NaN; huge (3e9 to 1e37, with scale 1 and 0.7, an
//   equal row among them, row and block passes) and tiny (1e-30) inputs;
//   negative scale and scale 0; y = x in place.
// - backward against reference::softmax_backward, every format, with a bound from the fp32
//   arithmetic (see backward_for_format).
// - shape errors naming the kernel, the argument and both sizes, with sentinels proving nothing
//   was written.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/same_bits.hpp"
#include "support/elements.hpp"
#include "support/formats.hpp"
#include "support/guarded.hpp"
#include "tilekern/kernels/softmax.hpp"
#include "tilekern/reference/softmax.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

constexpr double u = 0x1p-24;
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr std::size_t lengths[] = {1, 7, 31, 767, 769, 4097};

using test::bracket;
using test::name_of;
using test::saturated;
using test::value_of;

// The partial sums of the engine's row reductions, on every path (engine/lanes.hpp,
// reduce_slots): they play the part of lanes in the error bound.
std::size_t lanes() {
  return 64;
}

// rows x cols of T in a guarded buffer, with a row stride.
template <class T>
struct tensor {
  tensor(std::size_t rows, std::size_t cols, std::size_t stride)
      : buffer(rows == 0 ? 0 : (rows - 1) * stride + cols),
        rows(rows),
        cols(cols),
        stride(stride) {}
  test::guarded_buffer<T> buffer;
  std::size_t rows, cols, stride;
  view<T> v() { return {buffer.data(), rows, cols, stride}; }
  view<const T> cv() { return {buffer.data(), rows, cols, stride}; }
  T& at(std::size_t r, std::size_t c) { return buffer[r * stride + c]; }
  // The decoded values, rows x cols contiguous.
  std::vector<double> values() {
    std::vector<double> out(rows * cols);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) out[r * cols + c] = value_of(at(r, c));
    return out;
  }
};

template <class T>
void fill_normal(tensor<T>& t, std::mt19937_64& generator, double sigma) {
  std::normal_distribution<double> distribution(0.0, sigma);
  for (std::size_t r = 0; r < t.rows; ++r)
    for (std::size_t c = 0; c < t.cols; ++c) t.at(r, c) = saturated<T>(distribution(generator));
}

enum class mask_kind { none, keep, keep_row, additive, additive_row };

const char* mask_name(mask_kind kind) {
  switch (kind) {
    case mask_kind::none:
      return "none";
    case mask_kind::keep:
      return "bool";
    case mask_kind::keep_row:
      return "bool row";
    case mask_kind::additive:
      return "additive";
    case mask_kind::additive_row:
      return "additive row";
  }
  return "";
}

struct worst {
  double beyond_exponent = 0;  // max over float outputs of (ulp error - |a|)
};
worst& float_worst() {
  static worst w;
  return w;
}

// Checks y (decoded) against the fp64 reference ref, with the element exponents a = s - m.
template <class Y>
void check_forward(const std::vector<double>& y, const std::vector<double>& ref,
                   const std::vector<double>& exponent, std::size_t cols, rounding mode,
                   const std::string& what) {
  const auto l = static_cast<double>(lanes());
  const double k = std::ceil(static_cast<double>(cols) / l) + std::log2(l);
  // Each row's mean |a|, weighted by the reference: the |a| term of its sum's relative error.
  std::vector<double> mean_exponent(y.size() / cols, 0.0);
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (std::isfinite(exponent[i]) && std::isfinite(ref[i])) {
      mean_exponent[i / cols] += ref[i] * std::abs(exponent[i]);
    }
  }
  for (std::size_t i = 0; i < y.size(); ++i) {
    INFO(what, " element ", i, " (row ", i / cols, "): y ", y[i], ", reference ", ref[i]);
    if (std::isnan(ref[i])) {
      CHECK(std::isnan(y[i]));
      continue;
    }
    const double a = std::isfinite(exponent[i]) ? std::abs(exponent[i]) : 0.0;
    // The exponential's error beyond 2 ulp (softmax_exp's |a| term; softmax_exp_narrow's own
    // error for a narrow y): in the element's exponential and, as a mean weighted by the
    // reference, in the row's sum.
    const double a_terms = a + mean_exponent[i / cols];  // the element's |a| and the sum's mean
    const double exp_error =
        detail::softmax_narrow_output<Y>
            ? 2 * detail::softmax_narrow_exp_error + a_terms * detail::softmax_narrow_exp_slope
            : a_terms * detail::softmax_exp_slope;
    const double bound = ((4 + a + k) * u + exp_error) * ref[i];
    if constexpr (std::is_same_v<Y, float>) {
      const double error = std::abs(y[i] - ref[i]);
      CHECK(error <= bound);
      if (ref[i] >= 0x1p-126) {
        const double ulp = std::ldexp(1.0, std::ilogb(ref[i]) - 23);
        float_worst().beyond_exponent = std::max(float_worst().beyond_exponent, error / ulp - a);
      }
    } else {
      const auto [down, up] = bracket<Y>(ref[i] - bound, ref[i] + bound);
      if (mode == rounding::nearest_even) {
        // F::from is monotonic: the code of the fp32 result lies between these two.
        const double lo = value_of(Y::from(ref[i] - bound)), hi = value_of(Y::from(ref[i] + bound));
        CHECK((y[i] >= lo && y[i] <= hi));
        // The bar: within 1 code of the correctly rounded result.
        const double nearest = value_of(Y::from(ref[i]));
        const auto [below, above] =
            bracket<Y>(std::nextafter(nearest, -inf), std::nextafter(nearest, inf));
        CHECK((y[i] >= below && y[i] <= above));
      } else {
        CHECK((y[i] >= down && y[i] <= up));
      }
    }
  }
}

// The reference of softmax(scale * x (+ mask)), and each element's exponent s - m.
struct reference_result {
  std::vector<double> y, exponent;
};
reference_result reference_softmax(const std::vector<double>& x, std::size_t rows, std::size_t cols,
                                   double scale, mask_kind kind,
                                   const std::vector<double>& additive,
                                   const std::vector<bool>& keep, std::size_t mask_rows) {
  reference_result result{std::vector<double>(rows * cols), std::vector<double>(rows * cols)};
  const view<const double> xv(x.data(), rows, cols);
  const view<double> yv(result.y.data(), rows, cols);
  std::vector<double> scores(rows * cols);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t mr = mask_rows == 1 ? 0 : r;
    for (std::size_t c = 0; c < cols; ++c) {
      double s = scale * x[r * cols + c];
      if (kind == mask_kind::additive || kind == mask_kind::additive_row)
        s += additive[mr * cols + c];
      if ((kind == mask_kind::keep || kind == mask_kind::keep_row) && !keep[mr * cols + c])
        s = -inf;
      scores[r * cols + c] = s;
    }
  }
  if (kind == mask_kind::none) {
    reference::softmax(xv, scale, yv);
  } else if (kind == mask_kind::additive || kind == mask_kind::additive_row) {
    reference::softmax(xv, scale, view<const double>(additive.data(), mask_rows, cols), yv);
  } else {
    std::vector<char> keep_bytes(keep.begin(), keep.end());
    const view<const bool> kv(reinterpret_cast<const bool*>(keep_bytes.data()), mask_rows, cols);
    reference::softmax(xv, scale, kv, yv);
  }
  for (std::size_t r = 0; r < rows; ++r) {
    double m = -inf;
    for (std::size_t c = 0; c < cols; ++c) m = std::max(m, scores[r * cols + c]);
    for (std::size_t c = 0; c < cols; ++c) result.exponent[r * cols + c] = scores[r * cols + c] - m;
  }
  return result;
}

// One forward case: X in, Y out, mask of M (additive) or bool.
template <class X, class Y, class M = X>
void forward_case(std::size_t rows, std::size_t cols, std::size_t stride, mask_kind kind,
                  float scale, rounding mode, std::uint64_t seed) {
  const std::string what = name_of<X>() + " -> " + name_of<Y>() + ", " + std::to_string(rows) +
                           "x" + std::to_string(cols) + " stride " + std::to_string(stride) +
                           ", mask " + mask_name(kind) + ", " +
                           (mode == rounding::nearest_even ? "nearest" : "stochastic");
  CAPTURE(what);
  std::mt19937_64 generator(seed);
  tensor<X> x(rows, cols, stride);
  fill_normal(x, generator, 2.0);
  const std::size_t mask_rows =
      (kind == mask_kind::keep_row || kind == mask_kind::additive_row) ? 1 : rows;
  tensor<M> additive(mask_rows, cols, cols);
  test::guarded_buffer<bool> keep(mask_rows * cols);
  std::vector<bool> keep_values(mask_rows * cols);
  std::bernoulli_distribution kept(0.8);
  std::normal_distribution<double> normal;
  for (std::size_t i = 0; i < mask_rows * cols; ++i) {
    keep_values[i] = kept(generator);
    keep[i] = keep_values[i];
    additive.buffer[i] = keep_values[i] ? saturated<M>(normal(generator)) : saturated<M>(-inf);
  }
  const std::vector<double> additive_values = additive.values();
  const auto ref = reference_softmax(x.values(), rows, cols, scale, kind, additive_values,
                                     keep_values, mask_rows);

  const auto run = [&](std::uint64_t cast_seed) {
    tensor<Y> y(rows, cols, stride);
    const cast_options cast{.round = mode, .seed = cast_seed};
    const softmax_options options{.scale = scale};
    if (kind == mask_kind::none) {
      softmax(x.cv(), y.v(), options, cast);
    } else if (kind == mask_kind::additive || kind == mask_kind::additive_row) {
      softmax(x.cv(), additive.cv(), y.v(), options, cast);
    } else {
      softmax(x.cv(), view<const bool>(keep.data(), mask_rows, cols), y.v(), options, cast);
    }
    return y.values();
  };
  const std::vector<double> y = run(seed);
  check_forward<Y>(y, ref.y, ref.exponent, cols, mode, what);
  if constexpr (!std::is_same_v<Y, float>) {
    if (mode == rounding::stochastic) {
      CHECK(run(seed) == y);  // reproducible
      if (rows * cols >= 100) CHECK(run(seed + 1) != y);
    }
  }
}

template <class T>
void forward_for_format() {
  std::uint64_t seed = 1;
  for (std::size_t cols : lengths) {
    for (mask_kind kind : {mask_kind::none, mask_kind::keep, mask_kind::keep_row,
                           mask_kind::additive, mask_kind::additive_row}) {
      for (rounding mode : {rounding::nearest_even, rounding::stochastic}) {
        if (std::is_same_v<T, float> && mode == rounding::stochastic) continue;
        // Strided (a gap of 5 after each row) for the no-mask and additive cases.
        const std::size_t stride =
            kind == mask_kind::none || kind == mask_kind::additive ? cols + 5 : cols;
        forward_case<T, T>(3, cols, stride, kind, 0.7f, mode, seed++);
      }
    }
  }
}

TEST_CASE("softmax forward against the fp64 reference, every format, odd rows, masks") {
  MESSAGE("isa: ", describe_isa());
  forward_for_format<float>();
  tilekern::test::for_each_test_format([]<class F>() { forward_for_format<F>(); });
  MESSAGE("float outputs: largest error beyond |a| ulp: ", float_worst().beyond_exponent, " ulp");
  CHECK(float_worst().beyond_exponent <= 8.0);
}

TEST_CASE("softmax forward, mixed formats and scales") {
  for (std::size_t cols : {std::size_t{7}, std::size_t{769}}) {
    forward_case<bf16, float>(4, cols, cols, mask_kind::none, 1.0f, rounding::nearest_even, 11);
    forward_case<float, bf16>(4, cols, cols + 1, mask_kind::keep, -1.3f, rounding::stochastic, 12);
    forward_case<fp16, fp8_e4m3, fp16>(4, cols, cols, mask_kind::additive_row, 0.125f,
                                       rounding::nearest_even, 13);
    forward_case<float, float, bf16>(4, cols, cols, mask_kind::additive, 2.0f,
                                     rounding::nearest_even, 14);
    forward_case<bf16, bf16>(2, cols, cols, mask_kind::none, -0.5f, rounding::nearest_even, 15);
  }
}

// softmax_exp, or softmax_exp_narrow, over n inputs (a multiple of 16) on `lanes` lanes.
template <std::size_t Lanes, bool Narrow>
void softmax_exps(const float* in, float* out, std::size_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::Simd<float, Lanes, 0> d;
  for (std::size_t i = 0; i < n; i += Lanes) {
    const auto a = hn::LoadU(d, in + i);
    hn::StoreU(Narrow ? detail::softmax_exp_narrow(d, a) : detail::softmax_exp(d, a), d, out + i);
  }
}

// Both exponentials on every 61st fp32 in [-120, 0] (the narrow one also in (0, 1/2]) and a few
// special arguments, on the active path and on 1 lane: the same bits; softmax_exp within 2 ulp +
// |a| softmax_exp_slope (relative, |a| / 16 ulp at most) of e^a 2^64, softmax_exp_narrow within
// softmax_narrow_exp_error + |a| softmax_narrow_exp_slope of it, relative.
template <bool Narrow>
void check_exponential() {
  std::vector<float> a;
  for (auto bits = std::bit_cast<std::uint32_t>(-0.0f);
       bits <= std::bit_cast<std::uint32_t>(-120.0f); bits += 61) {
    a.push_back(std::bit_cast<float>(bits));
  }
  for (float special : {-120.0f, -103.97f, -87.34f, -0x1p-149f, 0.0f, -0x1.62e43p-4f}) {
    a.push_back(special);
  }
  if constexpr (Narrow) {
    // Its domain reaches 1/2: an exact product scale * x may lie above the rounded max.
    for (auto bits = std::bit_cast<std::uint32_t>(0x1p-149f);
         bits <= std::bit_cast<std::uint32_t>(0.5f); bits += 61) {
      a.push_back(std::bit_cast<float>(bits));
    }
  }
  a.resize((a.size() + 15) / 16 * 16, 0.0f);
  std::vector<float> got(a.size()), one_lane(a.size());
  softmax_exps<1, Narrow>(a.data(), one_lane.data(), a.size());
  const isa path = active_isa();
  CAPTURE(name(path));
#if HWY_TARGET <= HWY_AVX3
  if (path >= isa::avx512) softmax_exps<16, Narrow>(a.data(), got.data(), a.size());
#endif
#if HWY_TARGET <= HWY_AVX2
  if (path == isa::avx2) softmax_exps<8, Narrow>(a.data(), got.data(), a.size());
#endif
  if (path == isa::scalar) got = one_lane;
  double worst = 0;  // beyond the |a| term: ulp (softmax_exp), or relative (softmax_exp_narrow)
  float worst_a = 0;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double exact = std::ldexp(std::exp(static_cast<double>(a[i])), 64);
    const double difference = std::fabs(static_cast<double>(got[i]) - exact);
    const double error =
        Narrow ? difference / exact - std::fabs(a[i]) * detail::softmax_narrow_exp_slope
               : (difference - std::fabs(a[i]) * detail::softmax_exp_slope * exact) /
                     std::ldexp(1.0, std::ilogb(exact) - 23);
    if (!(error <= worst)) {
      worst = error;
      worst_a = a[i];
    }
    mismatches += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(one_lane[i]);
  }
  const std::string function = Narrow ? "softmax_exp_narrow" : "softmax_exp";
  const std::string unit = Narrow ? "relative beyond the |a| term" : "ulp beyond the |a| term";
  MESSAGE(function << " on " << name(path) << ": at most " << worst << " " << unit
                   << " (at a = " << worst_a << ") over " << a.size() << " arguments");
  CHECK(worst <= (Narrow ? detail::softmax_narrow_exp_error : 2.0));
  CHECK(mismatches == 0);
}

TEST_CASE(
    "softmax's exponential: within its bound of e^a 2^64 on [-120, 0], the same bits on 1 lane") {
  check_exponential<false>();
}

TEST_CASE("softmax's exponential for narrow outputs: within its bound, the same bits on 1 lane") {
  static_assert(detail::softmax_narrow_output<bf16> && detail::softmax_narrow_output<fp16> &&
                detail::softmax_narrow_output<tf32> && detail::softmax_narrow_output<fp8_e4m3> &&
                !detail::softmax_narrow_output<float> &&
                !detail::softmax_narrow_output<minifloat<8, 11, 127>>);
  check_exponential<true>();
}

// softmax's exponentials, with their row sums, as the engine takes them four blocks at a time on
// AVX2 (softmax_exponential_blocks; blocks_at_once, engine/lanes.hpp), against the same arithmetic
// one block at a time: the same bits, exponentials and sums, at every row length to 300 (every
// tail of a round of 64 elements and of a batch of blocks), on the active path. Y picks the
// exponential (softmax_exp_narrow for narrow formats).
template <class Y>
void check_exponential_blocks() {
  const auto one_at_a_time = [](auto d, auto v, auto s, auto bias) {
    return detail::softmax_exponential<Y>(d, v, s, bias);  // the one-block operator()
  };
  static_assert(
      detail::blocks_at_once<decltype(one_at_a_time), hwy::HWY_NAMESPACE::Simd<float, 8, 0>> == 1);
#if HWY_TARGET <= HWY_AVX2
  static_assert(detail::blocks_at_once<decltype(detail::softmax_exponential<Y>),
                                       hwy::HWY_NAMESPACE::Simd<float, 8, 0>> == 4);
#endif
  std::mt19937_64 generator(11);
  for (std::size_t cols = 1; cols <= 300; ++cols) {
    CAPTURE(cols);
    tensor<float> x(2, cols, cols + 5);
    fill_normal(x, generator, 3.0);
    tensor<float> batched(2, cols, cols + 5), single(2, cols, cols + 5);
    std::vector<float> batched_sums(2), single_sums(2), bias{-2.0f, -1.5f};
    const auto row_bias = vector::column(view<const float>(bias.data(), 2, 1, 1));
    vector::detail::elementwise<true>("test", {"x", "scale", "bias"}, batched.v(),
                                      view<float>(batched_sums.data(), 2, 1, 1),
                                      detail::softmax_exponential<Y>, x.cv(), 0.7f, row_bias);
    vector::detail::elementwise<true>("test", {"x", "scale", "bias"}, single.v(),
                                      view<float>(single_sums.data(), 2, 1, 1), one_at_a_time,
                                      x.cv(), 0.7f, row_bias);
    std::size_t mismatches = 0;
    for (std::size_t r = 0; r < 2; ++r) {
      for (std::size_t c = 0; c < cols; ++c) {
        mismatches += std::bit_cast<std::uint32_t>(batched.at(r, c)) !=
                      std::bit_cast<std::uint32_t>(single.at(r, c));
      }
      mismatches += std::bit_cast<std::uint32_t>(batched_sums[r]) !=
                    std::bit_cast<std::uint32_t>(single_sums[r]);
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("softmax's exponentials several blocks at a time: the same bits as one at a time") {
  CAPTURE(name(active_isa()));
  check_exponential_blocks<float>();
  check_exponential_blocks<bf16>();
}

// The max of a row of 16-bit codes that softmax's row passes find alongside the row before's
// exponentials (detail::codes_max_along), driven as map_row drives it (each whole block of a row
// from column 0, in order; then value()), is reduce_code_row's, on the active path: rows of 1 to
// 160 codes (every tail of blocks and pairs), of random values with a NaN of either sign or an
// infinity placed in them, -0 with one +0, or all negative. (The two share code_extremes, which
// engine/vector_test.cpp checks for every code.)
template <class T>
void check_max_along() {
  namespace hn = hwy::HWY_NAMESPACE;
  std::mt19937 generator(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  detail::visit_lanes([&](auto d) {
    constexpr std::size_t lanes = hn::MaxLanes(d);
    for (std::size_t cols = 1; cols <= 160; ++cols) {
      for (int kind = 0; kind < 6; ++kind) {
        std::vector<T> row(cols);
        for (T& e : row) e = T(kind == 5 ? -std::fabs(normal(generator)) : normal(generator));
        const std::size_t at = generator() % cols;
        if (kind == 1) row[at] = T::from_code(T::nan_code);
        if (kind == 2) row[at] = T::from_code(T::sign_code | T::nan_code);
        if (kind == 3) row[at] = T::from_code(T::infinity_code);
        if (kind == 4) {
          std::fill(row.begin(), row.end(), T::from_code(T::sign_code));
          row[at] = T::from_code(0);
        }
        const auto* codes = detail::storage_of(row.data());
        const detail::codes_max_along<decltype(d), T> along{codes, codes, cols};
        for (std::size_t c = 0; c + lanes <= cols; c += lanes) along.at(d, c);
        const float want =
            vector::detail::reduce_code_row<detail::combine::max>(d, row.data(), cols);
        INFO(name_of<T>(), ", ", lanes, " lanes, ", cols, " columns, kind ", kind);
        CHECK(std::bit_cast<std::uint32_t>(along.value()) == std::bit_cast<std::uint32_t>(want));
      }
    }
  });
}

TEST_CASE("softmax's row max alongside the exponentials: reduce_code_row's, every tail") {
  check_max_along<bf16>();
  check_max_along<fp16>();
}

TEST_CASE("softmax special cases") {
  constexpr std::size_t rows = 4, cols = 37;
  std::mt19937_64 generator(5);
  tensor<float> x(rows, cols, cols);
  fill_normal(x, generator, 1.0);
  tensor<float> y(rows, cols, cols);

  SUBCASE("fully masked rows give zeros, the other rows are unchanged") {
    tensor<float> additive(rows, cols, cols);
    test::guarded_buffer<bool> keep(rows * cols);
    for (std::size_t i = 0; i < rows * cols; ++i) {
      const bool row1 = i / cols == 1;
      additive.buffer[i] = row1 ? -std::numeric_limits<float>::infinity() : 0.0f;
      keep[i] = !row1;
    }
    tensor<float> expected(rows, cols, cols);
    softmax(x.cv(), expected.v());
    for (int variant = 0; variant < 2; ++variant) {
      if (variant == 0) softmax(x.cv(), additive.cv(), y.v());
      if (variant == 1) softmax(x.cv(), view<const bool>(keep.data(), rows, cols), y.v());
      for (std::size_t c = 0; c < cols; ++c) {
        CHECK(y.at(1, c) == 0.0f);
        CHECK(y.at(0, c) == expected.at(0, c));
        CHECK(y.at(3, c) == expected.at(3, c));
      }
    }
    // -inf inputs without a mask (scale > 0), and with a negative scale +inf inputs.
    for (std::size_t c = 0; c < cols; ++c) x.at(2, c) = -std::numeric_limits<float>::infinity();
    softmax(x.cv(), y.v());
    for (std::size_t c = 0; c < cols; ++c) CHECK(y.at(2, c) == 0.0f);
    for (std::size_t c = 0; c < cols; ++c) x.at(2, c) = std::numeric_limits<float>::infinity();
    softmax(x.cv(), y.v(), {.scale = -2.0f});
    for (std::size_t c = 0; c < cols; ++c) CHECK(y.at(2, c) == 0.0f);
  }
  SUBCASE("NaN makes its row NaN, and only its row; so does +inf") {
    tensor<bf16> out(rows, cols, cols);
    x.at(1, 5) = std::numeric_limits<float>::quiet_NaN();
    x.at(3, 36) = std::numeric_limits<float>::infinity();
    softmax(x.cv(), out.v());
    for (std::size_t c = 0; c < cols; ++c) {
      CHECK(out.at(1, c).is_nan());
      CHECK(out.at(3, c).is_nan());
      CHECK(!out.at(0, c).is_nan());
      CHECK(!out.at(2, c).is_nan());
    }
    // A NaN under a -inf additive mask is a NaN score; under a false bool mask it is not read.
    tensor<float> additive(1, cols, cols);
    test::guarded_buffer<bool> keep(cols);
    for (std::size_t c = 0; c < cols; ++c) keep[c] = c != 5 && c != 36;
    additive.at(0, 5) = -std::numeric_limits<float>::infinity();
    softmax(x.cv(), additive.cv(), y.v());
    CHECK(std::isnan(y.at(1, 0)));
    softmax(x.cv(), view<const bool>(keep.data(), 1, cols), y.v());
    for (std::size_t c = 0; c < cols; ++c) {
      CHECK(!std::isnan(y.at(1, c)));
      CHECK(!std::isnan(y.at(3, c)));
    }
    CHECK(y.at(1, 5) == 0.0f);
  }
  SUBCASE("huge and tiny inputs, with an exact scale and an inexact one, row and block passes") {
    const std::vector<double> normal = x.values();
    for (bool row_passes : {true, false}) {
      const test::row_passes_of passes(row_passes);
      for (double magnitude : {1e30, 1e37, 3e9, 1e-30}) {
        for (float scale : {1.0f, 0.7f}) {
          for (std::size_t i = 0; i < rows * cols; ++i)
            x.buffer[i] = static_cast<float>(normal[i] * magnitude);
          for (std::size_t c = 1; c < cols; ++c) x.at(2, c) = x.at(2, 0);  // an equal row
          const std::vector<double> xs = x.values();
          std::vector<double> ref(rows * cols);
          reference::softmax(view<const double>(xs.data(), rows, cols), scale,
                             view<double>(ref.data(), rows, cols));
          tensor<bf16> narrow(rows, cols, cols);
          softmax(x.cv(), y.v(), {.scale = scale});
          softmax(x.cv(), narrow.v(), {.scale = scale});
          for (std::size_t i = 0; i < rows * cols; ++i) {
            INFO("row passes ", row_passes, ", magnitude ", magnitude, ", scale ", scale,
                 ", element ", i, ": y ", y.buffer[i], " (bf16 ", narrow.buffer[i].to_double(),
                 "), reference ", ref[i]);
            // Huge rows: every exponent is 0 (the max) or below -1e8 (exactly 0 in fp64 and
            // fp32), an equal row's all 0; tiny rows: every exponent is within 1e-29 of 0, so y is
            // 1 / cols to a few ulp.
            CHECK(std::abs(y.buffer[i] - ref[i]) <= 8 * u * ref[i]);
            CHECK(narrow.buffer[i].bits() == bf16::from(ref[i]).bits());
          }
        }
      }
    }
  }
  SUBCASE("scale 0 gives a uniform row; in place") {
    softmax(x.cv(), y.v(), {.scale = 0.0f});
    for (std::size_t i = 0; i < rows * cols; ++i)
      CHECK(std::abs(y.buffer[i] - 1.0 / cols) <= 4 * u / cols);
    tensor<bf16> z(rows, cols, cols);
    for (std::size_t i = 0; i < rows * cols; ++i) z.buffer[i] = bf16::from(x.buffer[i]);
    tensor<bf16> expected(rows, cols, cols);
    const softmax_options options{.scale = 0.7f};  // a variable: not taken for a mask
    softmax(z.cv(), expected.v(), options);
    softmax(z.cv(), z.v(), {.scale = 0.7f});
    for (std::size_t i = 0; i < rows * cols; ++i)
      CHECK(z.buffer[i].bits() == expected.buffer[i].bits());
  }
}

// dx against reference::softmax_backward on the decoded y and dy. fp32 bound per element:
// |scale| y ((|dy| + |dot|) 4u + (k + 2) u sum|dy y|), k = ceil(cols / lanes) + log2(lanes) (the
// dot's fp32 sum), then dx's format: a value of DX between the neighbours of that interval.
template <class T>
void backward_for_format() {
  std::uint64_t seed = 100;
  for (std::size_t cols : lengths) {
    for (rounding mode : {rounding::nearest_even, rounding::stochastic}) {
      if (std::is_same_v<T, float> && mode == rounding::stochastic) continue;
      constexpr std::size_t rows = 3;
      const std::size_t stride = cols + 2;
      std::mt19937_64 generator(seed++);
      tensor<T> x(rows, cols, cols), y(rows, cols, stride), dy(rows, cols, stride);
      fill_normal(x, generator, 2.0);
      fill_normal(dy, generator, 1.0);
      std::vector<double> xs = x.values(), probabilities(rows * cols);
      reference::softmax(view<const double>(xs.data(), rows, cols), 0.7,
                         view<double>(probabilities.data(), rows, cols));
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c)
          y.at(r, c) = saturated<T>(probabilities[r * cols + c]);
      const std::vector<double> ys = y.values(), dys = dy.values();
      std::vector<double> ref(rows * cols);
      reference::softmax_backward(view<const double>(dys.data(), rows, cols),
                                  view<const double>(ys.data(), rows, cols), 0.7,
                                  view<double>(ref.data(), rows, cols));
      tensor<T> dx(rows, cols, stride);
      softmax_backward(dy.cv(), y.cv(), dx.v(), {.scale = 0.7f}, {.round = mode, .seed = 9});
      const std::vector<double> dxs = dx.values();
      const auto l = static_cast<double>(lanes());
      const double k = std::ceil(static_cast<double>(cols) / l) + std::log2(l);
      for (std::size_t r = 0; r < rows; ++r) {
        double dot = 0, magnitude = 0;
        for (std::size_t c = 0; c < cols; ++c) {
          dot += dys[r * cols + c] * ys[r * cols + c];
          magnitude += std::abs(dys[r * cols + c] * ys[r * cols + c]);
        }
        for (std::size_t c = 0; c < cols; ++c) {
          const std::size_t i = r * cols + c;
          const double bound =
              0.7 * ys[i] * ((std::abs(dys[i]) + std::abs(dot)) * 4 * u + (k + 2) * u * magnitude);
          const auto [down, up] = bracket<T>(ref[i] - bound, ref[i] + bound);
          INFO(name_of<T>(), " ", rows, "x", cols, " element ", i, ": dx ", dxs[i], ", reference ",
               ref[i], ", bound ", bound);
          CHECK((dxs[i] >= down && dxs[i] <= up));
        }
      }
    }
  }
}

TEST_CASE("softmax backward against the fp64 reference, every format") {
  backward_for_format<float>();
  tilekern::test::for_each_test_format([]<class F>() { backward_for_format<F>(); });
}

TEST_CASE("softmax shape errors name the argument and both sizes, and write nothing") {
  std::vector<float> x(12, 1.0f), mask(12, 0.0f), y(12, 7.0f);
  const view<const float> x34(x.data(), 3, 4);
  const auto unchanged = [&] {
    return std::all_of(y.begin(), y.end(), [](float v) { return v == 7.0f; });
  };
  CHECK_THROWS_WITH_AS(softmax(x34, view<float>(y.data(), 4, 3)),
                       "tilekern::softmax: y is 4x3, expected 3x4 (the shape of x)", shape_error);
  CHECK(unchanged());
  CHECK_THROWS_WITH_AS(
      softmax(x34, view<const float>(mask.data(), 3, 3), view<float>(y.data(), 3, 4)),
      "tilekern::softmax: mask is 3x3, expected 3x4 or 1x4 (the shape of x, or one row broadcast)",
      shape_error);
  CHECK_THROWS_WITH_AS(
      softmax(x34, view<const float>(mask.data(), 2, 4), view<float>(y.data(), 3, 4)),
      "tilekern::softmax: mask is 2x4, expected 3x4 or 1x4 (the shape of x, or one row broadcast)",
      shape_error);
  CHECK(unchanged());
  bool keep[12] = {};
  CHECK_THROWS_WITH_AS(
      softmax(x34, view<const bool>(keep, 4, 1), view<float>(y.data(), 3, 4)),
      "tilekern::softmax: mask is 4x1, expected 3x4 or 1x4 (the shape of x, or one row broadcast)",
      shape_error);
  CHECK_THROWS_WITH_AS(softmax(x34, view<const bool>(keep, 3, 4), view<float>(y.data(), 3, 3)),
                       "tilekern::softmax: y is 3x3, expected 3x4 (the shape of x)", shape_error);
  CHECK(unchanged());
  CHECK_THROWS_WITH_AS(
      softmax_backward(view<const float>(x.data(), 2, 4), x34, view<float>(y.data(), 3, 4)),
      "tilekern::softmax_backward: dy is 2x4, expected 3x4 (the shape of y)", shape_error);
  CHECK_THROWS_WITH_AS(softmax_backward(x34, x34, view<float>(y.data(), 3, 2)),
                       "tilekern::softmax_backward: dx is 3x2, expected 3x4 (the shape of y)",
                       shape_error);
  CHECK(unchanged());
}

// ---------------------------------------------------------------------------------------------
// The same bits however the rows are taken (kernels/same_bits.hpp), and with a row's products
// fused with the next row's exponentials or not.

// Every output of softmax (no mask, an additive mask of every row or one row, a bool mask; a
// scale; stochastic rounding) and softmax_backward for same_bits.hpp's checks.
template <class T>
std::vector<test::named_bytes> same_bits_outputs(const test::output_shape& s) {
  const test::same_bits_inputs<T> in(s.rows, s.cols);
  const view<const T> x = in.matrix(in.x);
  const cast_options stochastic{.round = rounding::stochastic, .seed = 9};
  test::output_bytes<T> out(s);
  const std::size_t matrix = out.matrix_size();
  out.run("softmax, scale 0.7", {matrix},
          [&](auto& o) { softmax(x, o.matrix(0), {.scale = 0.7f}); });
  out.run("softmax, stochastic", {matrix},
          [&](auto& o) { softmax(x, o.matrix(0), {}, stochastic); });
  out.run("softmax, additive mask", {matrix},
          [&](auto& o) { softmax(x, in.matrix(in.additive), o.matrix(0), {.scale = 1.5f}); });
  out.run("softmax, a row of additive mask", {matrix},
          [&](auto& o) { softmax(x, in.row(in.additive), o.matrix(0), {.scale = 1.5f}); });
  out.run("softmax, bool mask", {matrix}, [&](auto& o) {
    softmax(x, view<const bool>(in.keep.get(), s.rows, s.cols), o.matrix(0));
  });
  out.run("softmax and softmax_backward", {matrix, matrix}, [&](auto& o) {
    softmax(x, o.matrix(0));
    softmax_backward(in.matrix(in.dy), view<const T>(o.matrix(0)), o.matrix(1), {.scale = 0.7f});
  });
  return std::move(out).bytes();
}

TEST_CASE("softmax: the same bits for every size of the blocks of rows") {
  test::same_bits_for_every_block_size<float>(same_bits_outputs<float>);
  test::same_bits_for_every_block_size<bf16>(same_bits_outputs<bf16>);
  test::same_bits_for_every_block_size<fp8_e4m3>(same_bits_outputs<fp8_e4m3>);
}

TEST_CASE("softmax: the same bits row by row as by blocks of rows") {
  test::same_bits_row_by_row<float>(same_bits_outputs<float>);
  test::same_bits_row_by_row<bf16>(same_bits_outputs<bf16>);
  test::same_bits_row_by_row<fp8_e4m3>(same_bits_outputs<fp8_e4m3>);
}

TEST_CASE("softmax: the same bits with non-temporal stores") {
  test::same_bits_streamed<float>(same_bits_outputs<float>);
  test::same_bits_streamed<bf16>(same_bits_outputs<bf16>);
  test::same_bits_streamed<fp16>(same_bits_outputs<fp16>);
  test::same_bits_streamed<fp8_e4m3>(same_bits_outputs<fp8_e4m3>);
}

// detail::set_softmax_fusion(on) for the life of the object, then the default.
class softmax_fusion_of {
 public:
  explicit softmax_fusion_of(bool on) { detail::set_softmax_fusion(on); }
  ~softmax_fusion_of() { detail::set_softmax_fusion(std::nullopt); }
  softmax_fusion_of(const softmax_fusion_of&) = delete;
  softmax_fusion_of& operator=(const softmax_fusion_of&) = delete;
};

// softmax's row passes give the same bits with a row's products alongside the next row's
// exponentials (fused) as in a loop of their own, at 769 columns and at 4096 (rows 16 bytes past a
// line, as a std::vector's), y streamed where it can be and not, with and without a mask
// (same_bits_outputs), whichever the machine would choose (softmax_fuses).
template <class T>
void same_bits_fused() {
  const std::size_t sixteen_bytes = 16 / sizeof(T);
  for (const std::size_t cols : {std::size_t{769}, std::size_t{4096}}) {
    for (const std::size_t threshold : {std::size_t{0}, SIZE_MAX}) {
      const test::stream_threshold_of streaming(threshold);
      const test::output_shape s{37, cols, cols, cols == 4096 ? sixteen_bytes : 0};
      const auto want = [&] {
        const softmax_fusion_of off(false);
        return same_bits_outputs<T>(s);
      }();
      const softmax_fusion_of on(true);
      test::check_same_bytes(
          same_bits_outputs<T>(s), want,
          test::shape_text<T>(s) + ", stream threshold " + std::to_string(threshold));
    }
  }
}

TEST_CASE("softmax: the same bits with its products fused or not") {
  same_bits_fused<float>();
  same_bits_fused<bf16>();
  same_bits_fused<fp8_e4m3>();
}

// When softmax's row passes fuse a row's products with the next row's exponentials: where two
// fp32 rows and a row of x fit in L1, a streamed y except on AMD processors before Zen 5 (family
// 26), exponentials in y's rows where those rows do not start within 512 bytes of each other
// modulo 4 KiB.
TEST_CASE("softmax fuses its products by the L1's size, the processor and y's stride") {
  const cpu_features& cpu = detected_cpu_features();
  const bool amd_before_zen5 = cpu.amd && cpu.family < 26;
  INFO("AMD: ", cpu.amd, ", family ", cpu.family);
  const std::size_t l1 = l1_cache_bytes();
  INFO("L1 ", l1, " bytes");
  CHECK(l1 >= (std::size_t{16} << 10));
  CHECK(detail::rows_alias(4096));
  CHECK(detail::rows_alias(16384 + 511));
  CHECK(detail::rows_alias(8192 - 511));
  CHECK_FALSE(detail::rows_alias(4096 + 512));
  CHECK_FALSE(detail::rows_alias(3072));
  const std::size_t cols = l1 / 12;  // two fp32 rows and one of fp32 x: all of L1
  CHECK(detail::softmax_fuses(true, cols, sizeof(float), 0) == !amd_before_zen5);
  CHECK(detail::softmax_fuses(false, cols, sizeof(float), 3072));
  CHECK_FALSE(detail::softmax_fuses(false, cols, sizeof(float), 4096));
  CHECK_FALSE(detail::softmax_fuses(false, cols + 1, sizeof(float), 3072));
  CHECK_FALSE(detail::softmax_fuses(true, l1 / 10 + 1, sizeof(bf16), 0));
  CHECK(detail::softmax_fuses(false, 768, sizeof(float), 768 * sizeof(float)));
  {
    const softmax_fusion_of on(true);
    CHECK(detail::softmax_fuses(false, cols + 1, sizeof(float), 4096));
  }
  {
    const softmax_fusion_of off(false);
    CHECK_FALSE(detail::softmax_fuses(false, 768, sizeof(float), 768 * sizeof(float)));
  }
  CHECK(detail::softmax_fuses(false, 768, sizeof(float), 768 * sizeof(float)));
}

}  // namespace
}  // namespace tilekern
