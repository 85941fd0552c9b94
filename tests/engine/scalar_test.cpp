// The scalar engine (engine/scalar.hpp): activation and activation_sum for every act, against
// reference::activation in fp64 within accuracy(f).max_ulp (simd/math.hpp) over dense inputs in
// each function's stated range; scale and bias as floats, columns, rows and full tensors (the
// argument is one fused multiply-add, rounded once: std::fma in the test); float and three
// destination formats, one per conversion path (the output must lie between the roundings of the
// ends of the allowed interval; every named format is stored by the same code, which
// vector_test.cpp checks for each, and kernels/activation_test.cpp runs every act into every
// format); the row sums within a derived bound; NaN; the same bits on every ISA path; and the
// shape errors.

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_support.hpp"
#include "tilekern/engine/scalar.hpp"
#include "tilekern/reference/activation.hpp"

namespace tilekern::test::engine_tests {
namespace {

constexpr float flt_max = std::numeric_limits<float>::max();

std::string act_name(act f) {
  return std::string(name(f));
}

// The spacing of fp32 in |y|'s binade (2^-149 below 2^-126): the ulp simd/math.hpp measures in.
double ulp_of(double y) {
  const double magnitude = std::fabs(y);
  if (magnitude < 0x1p-126) return 0x1p-149;
  return std::ldexp(1.0, std::ilogb(magnitude) - 23);
}

// The error of an fp32 result `got` against the exact value, in ulp of the exact value; 0 when
// got is the correctly rounded value (also an overflow to inf), infinite for a wrong NaN or inf.
double ulp_error(float got, double exact) {
  if (std::isnan(exact) || std::isnan(got)) {
    return std::isnan(exact) && std::isnan(got) ? 0 : INFINITY;
  }
  if (got == static_cast<float>(exact)) return 0;
  if (std::isinf(got) || std::isinf(exact)) return INFINITY;
  return std::fabs(static_cast<double>(got) - exact) / ulp_of(exact);
}

// Dense inputs over [lo, hi]: every binade of both signs (random mantissas), uniform values in
// the central part where the functions bend, and the ends of the range and a few special points.
std::vector<float> dense_inputs(act f, std::size_t count) {
  const act_accuracy range = accuracy(f);
  std::mt19937_64 random(static_cast<std::uint64_t>(f) + 1);
  std::vector<float> inputs;
  const auto keep = [&](double x) {
    const auto v = static_cast<float>(x);
    if (v >= range.lo && v <= range.hi) inputs.push_back(v);
  };
  for (float special : {range.lo, range.hi, 0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 0x1p-149f,
                        -0x1p-149f, 0x1p-126f, flt_max, -flt_max, 88.0f, -87.0f, -103.9f}) {
    keep(special);
  }
  std::uniform_int_distribution<int> exponent(-149, 127);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  const double center_lo = std::max<double>(range.lo, -40.0);
  const double center_hi = std::min<double>(range.hi, 40.0);
  std::uniform_real_distribution<double> center(center_lo, center_hi);
  while (inputs.size() < count) {
    const double binade = std::ldexp(mantissa(random), exponent(random));
    keep(binade);
    keep(-binade);
    keep(center(random));
    keep(center(random) * 0.05);
  }
  inputs.resize(count);
  return inputs;
}

// Holds inputs as a rows x cols tensor of float with a row stride beyond cols.
void fill_from(tensor<float>& t, const std::vector<float>& values) {
  for (std::size_t r = 0; r < t.rows(); ++r) {
    for (std::size_t c = 0; c < t.cols(); ++c) t(r, c) = values[r * t.cols() + c];
  }
}

TEST_CASE("scalar: activation, every act, fp32, within accuracy(f).max_ulp over its range") {
  constexpr std::size_t rows = 3, cols = 4099;
  for (act f : all_acts) {
    const std::vector<float> inputs = dense_inputs(f, rows * cols);
    tensor<float> src(rows, cols, cols + 3);
    fill_from(src, inputs);
    tensor<float> dst(rows, cols, cols + 1);
    scalar::activation(dst.v(), src.cv(), f);
    double worst = 0;
    float worst_at = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) {
        // No scale or bias: the argument is x itself (-0 included).
        const float argument = src(r, c);
        const double error = ulp_error(dst(r, c), reference::activation(f, argument));
        if (error > worst) {
          worst = error;
          worst_at = argument;
        }
      }
    }
    CHECK_MESSAGE(worst <= accuracy(f).max_ulp, act_name(f), ": ", worst, " ulp at ", worst_at,
                  " (documented ", accuracy(f).max_ulp, ")");
    CHECK(dst.gaps_untouched());
  }
}

// Moderate arguments in each function's range, for the scale and bias tests: positive for the
// functions defined on [0, max] or (0, max].
bool positive_only(act f) {
  return accuracy(f).lo >= 0.0f;
}

// dst (D) = f(src * scale + bias) for scale and bias as floats, columns, rows or full tensors,
// and with activation_sum the row sums; checked against the fp64 reference of the fp32 argument.
template <class D>
void check_scale_bias(act f, shape s, broadcast scale_kind, broadcast bias_kind,
                      const cast_options& cast, index_config indices, bool with_sums) {
  const bool positive = positive_only(f);
  tensor<bf16> src(s.rows, s.cols, s.cols + 2);
  fill_uniform(src, s.cols + static_cast<std::uint64_t>(f), positive ? 0.25 : -6.0, 6.0);
  // Scales in [0.5, 2] and biases in [0, 1] (grid values are multiples of 2^-8).
  source<float> scale(scale_kind, s.rows, s.cols, 31, 1.25f);
  source<fp16> bias(bias_kind, s.rows, s.cols, 32, 0.375f);
  const auto remap = [](auto& t, double lo, double hi) {
    for (std::size_t r = 0; r < t.rows(); ++r) {
      for (std::size_t c = 0; c < t.cols(); ++c) {
        const double u = (value_of(t(r, c)) + 15.0) / 30.0;  // grid values lie in [-15, 15]
        using T = std::remove_cvref_t<decltype(t(r, c))>;
        t(r, c) = expected_from_float<T>(static_cast<float>(lo + (hi - lo) * u), {}, 0);
      }
    }
  };
  remap(scale.data(), 0.5, 2.0);
  remap(bias.data(), 0.0, 1.0);
  tensor<D> dst(s.rows, s.cols, s.cols + 1);
  tensor<float> sums(s.rows, 1, 2);
  const std::uint64_t index_stride = index_stride_of(indices, s.cols);
  const std::uint64_t stride = index_stride != 0 ? index_stride : s.cols;
  const auto out = vector::rounded(dst.v(), cast, indices.first_index, index_stride);
  if constexpr (is_float<D>) {
    // Every operand kind for fp32 destinations.
    scale.pass([&](const auto& scale_operand) {
      bias.pass([&](const auto& bias_operand) {
        if (with_sums) {
          scalar::activation_sum(out, sums.v(), src.cv(), f, scale_operand, bias_operand);
        } else {
          scalar::activation(out, src.cv(), f, scale_operand, bias_operand);
        }
      });
    });
  } else {
    // Formats: scale and bias as views (any broadcast shape), with the row sums (fewer
    // instantiations: the compile of every combination exhausts the machine's memory).
    REQUIRE((scale_kind != broadcast::scalar && bias_kind != broadcast::scalar && with_sums));
    scalar::activation_sum(out, sums.v(), src.cv(), f, scale.data().cv(), bias.data().cv());
  }
  const double max_ulp = accuracy(f).max_ulp;
  const std::string what = act_name(f) + " " + name_of<D>() + " " + shape_name(s.rows, s.cols) +
                           " scale " + broadcast_name(scale_kind) + " bias " +
                           broadcast_name(bias_kind) + " " + describe_cast(cast);
  mismatches failures;
  const std::size_t k = row_sum_roundings(s.cols);
  for (std::size_t r = 0; r < s.rows; ++r) {
    double sum = 0, sum_bound = 0;
    for (std::size_t c = 0; c < s.cols; ++c) {
      const float argument =
          std::fma(static_cast<float>(value_of(src(r, c))), static_cast<float>(scale.at(r, c)),
                   static_cast<float>(bias.at(r, c)));
      const double exact = reference::activation(f, argument);
      // The fp32 result lies within max_ulp ulp of exact; the output is that value rounded into
      // D with dst's cast and index, and rounding is monotone: the output lies between the
      // roundings of the two ends.
      const double allowed = max_ulp * ulp_of(exact);
      const std::uint64_t index = indices.first_index + r * stride + c;
      const double low = value_of(expected_from_float<D>(
          static_cast<float>(std::nextafter(exact - allowed, -INFINITY)), cast, index));
      const double high = value_of(expected_from_float<D>(
          static_cast<float>(std::nextafter(exact + allowed, INFINITY)), cast, index));
      const double got = value_of(dst(r, c));
      const bool both_nan = std::isnan(low) && std::isnan(high) && std::isnan(got);  // overflow
      if (!both_nan && !(got >= low && got <= high)) {
        failures.add(what, ": (", r, ", ", c, ") f(", argument, ") is ", got, ", expected in [",
                     low, ", ", high, "]");
      }
      // Sums of the fp32 results: each within `allowed` of exact, then k roundings.
      sum += exact;
      sum_bound += allowed + gamma(k) * (std::fabs(exact) + allowed);
    }
    if (with_sums) {
      if (std::fabs(sums(r, 0) - sum) > sum_bound) {
        failures.add(what, ": sum of row ", r, " is ", sums(r, 0), ", expected ", sum, " +- ",
                     sum_bound);
      }
    }
  }
  CHECK_MESSAGE(failures.count() == 0, failures.count(), " mismatches\n", failures.text());
  CHECK(dst.gaps_untouched());
  CHECK(sums.gaps_untouched());
  if (!with_sums) CHECK(sums.all_sentinel());
}

TEST_CASE("scalar: activation with scale and bias as floats, columns, rows and tensors") {
  for (act f : all_acts) {
    for (shape s : odd_shapes) {
      for (broadcast scale_kind : all_broadcasts) {
        for (broadcast bias_kind : {broadcast::scalar, broadcast::column, broadcast::full}) {
          check_scale_bias<float>(f, s, scale_kind, bias_kind, {}, {0, 0}, false);
        }
      }
    }
  }
}

TEST_CASE(
    "scalar: activation and activation_sum, each test format as destination, every rounding") {
  for_each_element_type([]<class D>() {
    for (act f : all_acts) {
      for (shape s : {shape{3, 15}, shape{7, 33}}) {
        for (const cast_options& cast : quick_casts) {
          if (is_float<D> && cast.round != rounding::nearest_even) continue;
          const index_config indices =
              cast.round == rounding::stochastic ? index_config{977, 5} : index_config{0, 0};
          check_scale_bias<D>(f, s, broadcast::column, broadcast::column, cast, indices, true);
          check_scale_bias<D>(f, s, broadcast::one, broadcast::row, cast, indices, true);
        }
      }
    }
  });
}

TEST_CASE("scalar: activation_sum over long rows, sums as a column and as a range") {
  for (act f : {act::exp, act::silu, act::square, act::identity}) {
    check_scale_bias<float>(f, {2, 4097}, broadcast::column, broadcast::scalar, {}, {0, 0}, true);
    check_scale_bias<bf16>(f, {1, 767}, broadcast::one, broadcast::column,
                           {rounding::stochastic, overflow::saturate, 3, 2}, {0, 0}, true);
  }
  // Sums into a range of floats.
  tensor<float> src(3, 21);
  src.fill(0.5f);
  tensor<bf16> dst(3, 21);
  std::vector<float> sums(3, -1.0f);
  scalar::activation_sum(dst.v(), sums, src.cv(), act::square, 2.0f, 1.0f);  // (0.5 * 2 + 1)^2
  for (float s : sums) CHECK(s == 84.0f);
  check_values(
      dst, [](std::size_t, std::size_t) { return bf16::from(4.0f); }, "square");
}

TEST_CASE("scalar: NaN in gives NaN out, in that element only, for every act") {
  for (act f : all_acts) {
    tensor<float> src(2, 19);
    src.fill(positive_only(f) ? 0.75f : -0.75f);
    src(0, 3) = std::numeric_limits<float>::quiet_NaN();
    src(1, 18) = std::numeric_limits<float>::quiet_NaN();
    tensor<fp16> dst(2, 19);
    std::vector<float> sums(2);
    scalar::activation_sum(dst.v(), sums, src.cv(), f);
    for (std::size_t r = 0; r < 2; ++r) {
      for (std::size_t c = 0; c < 19; ++c) {
        const bool is_nan_input = (r == 0 && c == 3) || (r == 1 && c == 18);
        CHECK_MESSAGE(dst(r, c).is_nan() == is_nan_input, act_name(f), " (", r, ", ", c, ")");
      }
      CHECK_MESSAGE(std::isnan(sums[r]), act_name(f), " row ", r);
    }
  }
}

TEST_CASE("scalar: exp(dst, src, scale, bias) is activation with act::exp") {
  tensor<float> src(4, 37);
  fill_uniform(src, 3, -20, 20);
  tensor<float> bias(4, 1);
  fill_uniform(bias, 4, -3, 0);
  tensor<float> a(4, 37), b(4, 37);
  scalar::exp(a.v(), src.cv(), 0.5f, bias.cv());
  scalar::activation(b.v(), src.cv(), act::exp, 0.5f, bias.cv());
  CHECK(same_bits(a, b));
  double worst = 0;
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t c = 0; c < 37; ++c) {
      const float argument = std::fma(src(r, c), 0.5f, bias(r, 0));
      worst = std::max(worst, ulp_error(a(r, c), std::exp(static_cast<double>(argument))));
    }
  }
  CHECK(worst <= accuracy(act::exp).max_ulp);
}

TEST_CASE("scalar: the argument is src, src * scale or src * scale + bias") {
  // Signed zeros (which a multiply-add with a zero bias would make +0), and products with the
  // scale that are inexact (which a product rounded before the bias is added would show).
  tensor<float> src(3, 21);
  fill_uniform(src, 5, -4, 4);
  src(0, 0) = -0.0f;
  src(1, 20) = 0.0f;
  src(2, 7) = -0.0f;
  const float scale = 0.1f, bias = 0x1p-3f;
  tensor<float> y(3, 21), y_scaled(3, 21), y_affine(3, 21), inverse(3, 21), sums(3, 1, 2);
  scalar::activation(y.v(), src.cv(), act::identity);
  scalar::activation(y_scaled.v(), src.cv(), act::identity, scale);
  scalar::activation_sum(y_affine.v(), sums.v(), src.cv(), act::identity, scale, bias);
  scalar::activation(inverse.v(), src.cv(), act::reciprocal);
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t c = 0; c < 21; ++c) {
      const float x = src(r, c);
      CAPTURE(x);
      CHECK(std::bit_cast<std::uint32_t>(y(r, c)) == std::bit_cast<std::uint32_t>(x));
      CHECK(std::bit_cast<std::uint32_t>(y_scaled(r, c)) ==
            std::bit_cast<std::uint32_t>(x * scale));
      CHECK(std::bit_cast<std::uint32_t>(y_affine(r, c)) ==
            std::bit_cast<std::uint32_t>(std::fma(x, scale, bias)));
      if (x == 0) CHECK(inverse(r, c) == (std::signbit(x) ? -INFINITY : INFINITY));  // 1 / -0
    }
  }
}

TEST_CASE("scalar: the same bits on every ISA path, every act") {
  for (act f : all_acts) {
    const std::vector<float> inputs = dense_inputs(f, 5 * 333);
    tensor<float> src(5, 333, 340);
    fill_from(src, inputs);
    tensor<float> bias(5, 1);
    fill_uniform(bias, 7, 0, 0.5);
    std::vector<std::uint32_t> first;
    for_each_isa([&](isa level) {
      tensor<bf16> dst(5, 333);
      tensor<float> exact(5, 333);
      std::vector<float> sums(5);
      scalar::activation(exact.v(), src.cv(), f, 1.0f, bias.cv());
      scalar::activation_sum(
          vector::rounded(dst.v(), {rounding::stochastic, overflow::standard, 9, 0}), sums,
          src.cv(), f, 1.0f, bias.cv());
      std::vector<std::uint32_t> bits;
      for (const float& e : exact.elements()) bits.push_back(bits_of(e));
      for (const bf16& e : dst.elements()) bits.push_back(bits_of(e));
      if (first.empty()) {
        first = bits;
      } else {
        CHECK_MESSAGE(bits == first, act_name(f), ": ", std::string(name(level)),
                      " differs from the first path");
      }
    });
  }
}

TEST_CASE("scalar: bf16 into bf16 gives the bits of the same values from float, every act") {
  // bf16 to bf16 runs interleaved blocks on the vector paths (engine/lanes.hpp), a float source
  // does not: the same values must give the same bits, in every rounding, scale and bias too.
  // From float, the call of the test above (activation_sum, float operands), which this file
  // compiles already: with activation and a bf16 bias, it took a quarter of the file's compile.
  for (act f : all_acts) {
    const std::vector<float> inputs = dense_inputs(f, 5 * 333);
    tensor<bf16> src(5, 333, 340);
    tensor<float> same(5, 333);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      src(i / 333, i % 333) = bf16::from(inputs[i]);
      same(i / 333, i % 333) = src(i / 333, i % 333).to_float();
    }
    tensor<bf16> bias(5, 1);
    fill_uniform(bias, 7, 0, 0.5);
    tensor<float> same_bias(5, 1);
    for (std::size_t r = 0; r < 5; ++r) same_bias(r, 0) = bias(r, 0).to_float();
    for (const cast_options& cast : all_casts) {
      tensor<bf16> got(5, 333, 335), want(5, 333);
      std::vector<float> sums(5);
      scalar::activation(vector::rounded(got.v(), cast, 11, 0), src.cv(), f, 0.75f, bias.cv());
      scalar::activation_sum(vector::rounded(want.v(), cast, 11, 0), sums, same.cv(), f, 0.75f,
                             same_bias.cv());
      CHECK_MESSAGE(same_bits(got, want), act_name(f), " ", describe_cast(cast));
    }
  }
}

TEST_CASE("scalar: an act_constant gives the bits of its act") {
  const auto check = [&]<act F>(act_constant<F> constant) {
    const std::vector<float> inputs = dense_inputs(F, 5 * 333);
    tensor<float> src(5, 333, 340);
    fill_from(src, inputs);
    tensor<float> bias(5, 1);
    fill_uniform(bias, 7, 0, 0.5);
    tensor<float> got(5, 333), want(5, 333);
    scalar::activation(got.v(), src.cv(), constant, 1.0f, bias.cv());
    scalar::activation(want.v(), src.cv(), F, 1.0f, bias.cv());
    CHECK_MESSAGE(same_bits(got, want), act_name(F));
  };
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    (check(act_constant<all_acts[K]>()), ...);
  }
  (std::make_index_sequence<std::size(all_acts)>());
}

TEST_CASE("scalar: shape errors name the operation and the argument, and write nothing") {
  tensor<bf16> dst(4, 5);
  tensor<float> full(4, 5), wrong(2, 3), sums_wrong(3, 1);
  full.fill(1.0f);
  wrong.fill(1.0f);
  check_shape_error([&] { scalar::activation(dst.v(), wrong.cv(), act::exp); },
                    {"tilekern::scalar::activation", "src is 2x3", "expected 4x5"});
  check_shape_error([&] { scalar::activation(dst.v(), full.cv(), act::exp, wrong.cv()); },
                    {"tilekern::scalar::activation", "scale is 2x3"});
  check_shape_error([&] { scalar::activation(dst.v(), full.cv(), act::exp, 1.0f, wrong.cv()); },
                    {"tilekern::scalar::activation", "bias is 2x3"});
  check_shape_error([&] { scalar::activation_sum(dst.v(), sums_wrong.v(), full.cv(), act::silu); },
                    {"tilekern::scalar::activation_sum", "sums is 3x1", "expected 4x1"});
  check_shape_error([&] { scalar::activation_sum(dst.v(), sums_wrong.v(), wrong.cv(), act::silu); },
                    {"tilekern::scalar::activation_sum", "src is 2x3"});
  check_shape_error([&] { scalar::exp(dst.v(), full.cv(), 1.0f, wrong.cv()); },
                    {"tilekern::scalar::activation", "bias is 2x3"});
  CHECK(dst.all_sentinel());
  CHECK(sums_wrong.all_sentinel());
}

}  // namespace
}  // namespace tilekern::test::engine_tests
