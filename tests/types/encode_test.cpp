// Encoding from float and double against the independent reference: every midpoint between
// neighbouring values, the overflow boundaries, subnormals, zeros, NaN and inf, and doubles
// that would round twice through float.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "types/reference.hpp"

namespace tilekern::test {
namespace {

constexpr rounding roundings[] = {rounding::nearest_even, rounding::toward_zero,
                                  rounding::stochastic};
constexpr overflow overflows[] = {overflow::standard, overflow::saturate};

// The random words that decide a stochastic rounding of x: both sides of the threshold
// 2^32 - floor(fraction * 2^32) at which it starts rounding up, and the extremes.
template <class F>
std::vector<std::uint32_t> deciding_words(double x) {
  std::vector<std::uint32_t> words = {0u, 0xffffffffu};
  const value_grid<F>& g = grid<F>();
  const double magnitude = std::fabs(x);
  if (!(magnitude < g.beyond)) return words;
  const auto above = std::upper_bound(g.values.begin(), g.values.end(), magnitude);
  const double lower = *(above - 1);
  const double upper = above == g.values.end() ? g.beyond : *above;
  const double threshold = std::floor(std::ldexp((magnitude - lower) / (upper - lower), 32));
  if (threshold > 0) {
    const auto first_up = static_cast<std::uint32_t>(4294967296.0 - threshold);
    words.push_back(first_up);
    words.push_back(first_up - 1);
  }
  return words;
}

// Calls check(value, round, on_overflow, word, want) for x and -x in every rounding and overflow
// mode, with the random words that decide stochastic rounding, and the reference's code.
template <class F, class T, class Check>
void for_each_mode(T x, Check&& check) {
  for (const T value : {x, -x}) {
    for (rounding round : roundings) {
      const auto words =
          round == rounding::stochastic ? deciding_words<F>(value) : std::vector<std::uint32_t>{0u};
      for (overflow on_overflow : overflows) {
        for (std::uint32_t word : words) {
          check(value, round, on_overflow, word, encode<F>(value, round, on_overflow, word));
        }
      }
    }
  }
}

// Checks from(float) and from(double) of x (and of -x) against the reference in every mode,
// and that the two agree. `failures` collects mismatches.
template <class F>
void check_float(float x, mismatches& failures) {
  for_each_mode<F>(x, [&](float value, rounding round, overflow on_overflow, std::uint32_t word,
                          std::uint32_t want) {
    const std::uint32_t got = F::from(value, round, on_overflow, word).code();
    const std::uint32_t got_double =
        F::from(static_cast<double>(value), round, on_overflow, word).code();
    if (got != want || got_double != want) {
      failures.add(format_name<F>(), " from(", value, ") ", name(round), " ", name(on_overflow),
                   " word ", hex(word), ": float ", hex(got), ", double ", hex(got_double),
                   ", expected ", hex(want));
    }
  });
}

template <class F>
void check_double(double x, mismatches& failures) {
  for_each_mode<F>(x, [&](double value, rounding round, overflow on_overflow, std::uint32_t word,
                          std::uint32_t want) {
    const std::uint32_t got = F::from(value, round, on_overflow, word).code();
    if (got != want) {
      failures.add(format_name<F>(), " from(double ", value, ") ", name(round), " ",
                   name(on_overflow), " word ", hex(word), ": ", hex(got), ", expected ",
                   hex(want));
    }
  });
}

TEST_CASE("encode: midpoints, neighbours and one fp32 ulp either side, in every mode") {
  for_each_tested_format([]<class F>() {
    mismatches failures;
    const value_grid<F>& g = grid<F>();
    for (std::size_t i = 0; i < g.values.size(); ++i) {
      const double lower = g.values[i];
      const double upper = i + 1 < g.values.size() ? g.values[i + 1] : g.beyond;
      const double midpoint = (lower + upper) / 2;  // exact
      const auto middle = static_cast<float>(midpoint);
      if (static_cast<double>(middle) != midpoint) failures.add("midpoint not in fp32");
      constexpr float infinity = std::numeric_limits<float>::infinity();
      check_float<F>(static_cast<float>(lower), failures);
      check_float<F>(middle, failures);
      check_float<F>(std::nextafter(middle, infinity), failures);
      check_float<F>(std::nextafter(middle, -infinity), failures);
      // A double just off the midpoint rounds to it as a float: from(double) must not.
      check_double<F>(std::nextafter(midpoint, HUGE_VAL), failures);
      check_double<F>(std::nextafter(midpoint, -HUGE_VAL), failures);
    }
    INFO(failures.text());
    CHECK(failures.count() == 0);
  });
}

TEST_CASE("encode: ties go to the even code, away from the tie goes to the nearer one") {
  for_each_tested_format([]<class F>() {
    CAPTURE(format_name<F>());
    const value_grid<F>& g = grid<F>();
    std::size_t failures = 0;
    for (std::size_t i = 0; i + 1 < g.values.size(); ++i) {
      const double midpoint = (g.values[i] + g.values[i + 1]) / 2;
      const std::uint32_t even = (g.codes[i] & 1) == 0 ? g.codes[i] : g.codes[i + 1];
      const auto above = static_cast<float>(std::nextafter(midpoint, HUGE_VAL));
      const auto tie = static_cast<float>(midpoint);
      failures += F::from(tie).code() != even;
      failures += F::from(std::nextafter(tie, HUGE_VALF)).code() != g.codes[i + 1];
      failures += F::from(std::nextafter(tie, 0.0f)).code() != g.codes[i];
      // Rounding through float would tie; the double is above the midpoint.
      failures += F::from(std::nextafter(midpoint, HUGE_VAL)).code() != g.codes[i + 1];
      failures += F::from(std::nextafter(midpoint, 0.0)).code() != g.codes[i];
      // The double-rounding trap is real: float(the double) is exactly the midpoint.
      failures += above != tie;
    }
    CHECK(failures == 0);
  });
}

TEST_CASE("encode: overflow boundaries, documented literals") {
  const cast_options zero{rounding::toward_zero};
  const cast_options saturate{rounding::nearest_even, overflow::saturate};
  const cast_options zero_saturate{rounding::toward_zero, overflow::saturate};

  // e4m3fn: 448 is max, 480 would be the next value (the NaN code).
  CHECK(fp8_e4m3fn::from(448.0f).code() == 0x7e);
  CHECK(fp8_e4m3fn::from(464.0f).code() == 0x7e);  // tie: 448 is even
  CHECK(fp8_e4m3fn::from(464.0).code() == 0x7e);
  CHECK(fp8_e4m3fn::from(465.0f).code() == 0x7f);  // NaN, no inf
  CHECK(fp8_e4m3fn::from(-465.0f).code() == 0xff);
  CHECK(fp8_e4m3fn::from(465.0f, saturate).code() == 0x7e);
  CHECK(fp8_e4m3fn::from(479.0f, zero).code() == 0x7e);  // rounds down to max: no overflow
  CHECK(fp8_e4m3fn::from(480.0f, zero).code() == 0x7f);
  CHECK(fp8_e4m3fn::from(480.0f, zero_saturate).code() == 0x7e);
  CHECK(fp8_e4m3fn::from(HUGE_VALF).code() == 0x7f);
  CHECK(fp8_e4m3fn::from(-HUGE_VALF, saturate).code() == 0xfe);

  // Neuron e4m3: max 240, next 256 = inf.
  CHECK(fp8_e4m3::from(247.0f).code() == 0x77);
  CHECK(fp8_e4m3::from(248.0f).code() == 0x78);  // tie with inf's code, which is even
  CHECK(fp8_e4m3::from(248.0f, saturate).code() == 0x77);
  CHECK(fp8_e4m3::from(255.0f, zero).code() == 0x77);
  CHECK(fp8_e4m3::from(256.0f, zero).code() == 0x78);
  CHECK(fp8_e4m3::from(-256.0f, zero_saturate).code() == 0xf7);

  CHECK(fp8_e5m2::from(57344.0f).code() == 0x7b);
  CHECK(fp8_e5m2::from(61439.0f).code() == 0x7b);
  CHECK(fp8_e5m2::from(61440.0f).code() == 0x7c);
  CHECK(fp8_e3m4::from(15.7f).code() == 0x6f);
  CHECK(fp8_e3m4::from(15.75f).code() == 0x70);  // inf
  CHECK(fp8_e3m4::from(15.99f, zero).code() == 0x6f);

  CHECK(fp16::from(65519.0f).bits() == 0x7bff);
  CHECK(fp16::from(65520.0f).bits() == 0x7c00);
  CHECK(fp16::from(65520.0f, saturate).bits() == 0x7bff);
  CHECK(fp16::from(65535.0f, zero).bits() == 0x7bff);
  CHECK(fp16::from(65536.0f, zero).bits() == 0x7c00);  // unlike IEEE roundTowardZero
  CHECK(fp16::from(65536.0f, zero_saturate).bits() == 0x7bff);
  CHECK(fp16::from(-HUGE_VALF, zero_saturate).bits() == 0xfbff);
  CHECK(fp16::from(-HUGE_VALF, zero).bits() == 0xfc00);

  constexpr float float_max = std::numeric_limits<float>::max();
  CHECK(bf16::from(0x1.fefffep127f).bits() == 0x7f7f);
  CHECK(bf16::from(0x1.ff0000p127f).bits() == 0x7f80);  // tie with 2^128: even
  CHECK(bf16::from(float_max).bits() == 0x7f80);
  CHECK(bf16::from(float_max, zero).bits() == 0x7f7f);
  CHECK(bf16::from(float_max, saturate).bits() == 0x7f7f);
  CHECK(bf16::from(1e300).bits() == 0x7f80);
  CHECK(bf16::from(1e300, zero).bits() == 0x7f80);
  CHECK(bf16::from(-1e300, zero_saturate).bits() == 0xff7f);
  CHECK(bf16::from(0x1.fffffffffp127, zero).bits() == 0x7f7f);  // double below 2^128
  CHECK(tf32::from(float_max).bits() == 0x7f800000u);
  CHECK(tf32::from(float_max, zero).bits() == 0x7f7fe000u);
}

TEST_CASE("encode: overflow boundaries of every format against the reference") {
  for_each_tested_format([]<class F>() {
    mismatches failures;
    const value_grid<F>& g = grid<F>();
    const double midpoint = (g.max() + g.beyond) / 2;
    constexpr float float_max = std::numeric_limits<float>::max();
    for (double x : {g.max(), midpoint, g.beyond, 2 * g.beyond, 1e300, HUGE_VAL}) {
      check_double<F>(x, failures);
      check_double<F>(std::nextafter(x, 0.0), failures);
      check_double<F>(std::nextafter(x, HUGE_VAL), failures);
      if (x <= float_max || std::isinf(x)) {
        const auto single = static_cast<float>(x);
        check_float<F>(single, failures);
        check_float<F>(std::nextafter(single, 0.0f), failures);
        check_float<F>(std::nextafter(single, HUGE_VALF), failures);
      }
    }
    check_float<F>(float_max, failures);
    // Infinite inputs: inf (NaN for fn) or, saturating, max; in every rounding mode.
    for (rounding round : roundings) {
      for (bool negative : {false, true}) {
        const float infinity = negative ? -HUGE_VALF : HUGE_VALF;
        const std::uint32_t sign = negative ? layout<F>::sign : 0;
        const F standard = F::from(infinity, round, overflow::standard, 0x12345678u);
        const F saturated = F::from(infinity, round, overflow::saturate, 0x12345678u);
        CHECK(saturated.code() == (sign | g.max_code()));
        CHECK(standard.is_negative() == negative);
        CHECK((layout<F>::finite_only ? standard.is_nan() : standard.is_inf()));
      }
    }
    INFO(format_name<F>(), "\n", failures.text());
    CHECK(failures.count() == 0);
  });
}

TEST_CASE("encode: subnormals, the half-smallest-subnormal boundary and signed zeros") {
  for_each_tested_format([]<class F>() {
    CAPTURE(format_name<F>());
    mismatches failures;
    const value_grid<F>& g = grid<F>();
    const double smallest = g.values[1];
    for (double x : {0.0, smallest / 2, smallest / 4, smallest * 1.5, smallest * 2.5,
                     smallest * 0.75, std::ldexp(smallest, -40), 1e-300, 4.9e-324}) {
      check_double<F>(x, failures);
      check_double<F>(std::nextafter(x, HUGE_VAL), failures);
      check_double<F>(std::nextafter(x, 0.0), failures);
      const auto single = static_cast<float>(x);
      check_float<F>(single, failures);
      check_float<F>(std::nextafter(single, HUGE_VALF), failures);
    }
    check_float<F>(std::numeric_limits<float>::denorm_min(), failures);
    check_float<F>(std::numeric_limits<float>::min(), failures);
    INFO(failures.text());
    CHECK(failures.count() == 0);

    const std::uint32_t sign = layout<F>::sign;
    const double half = smallest / 2;
    for (rounding round : roundings) {
      // Below half the smallest subnormal: signed zero, whatever the mode (stochastic with the
      // largest word may still round up, so only nearest and toward zero here).
      if (round == rounding::stochastic) continue;
      const cast_options options{round};
      CHECK(F::from(0.0f, options).code() == 0);
      CHECK(F::from(-0.0f, options).code() == sign);
      CHECK(F::from(-0.0, options).code() == sign);
      CHECK(F::from(std::nextafter(half, 0.0), options).code() == 0);
      CHECK(F::from(-std::nextafter(half, 0.0), options).code() == sign);
      CHECK(F::from(half, options).code() == 0);  // tie: zero is even
      CHECK(F::from(-half, options).code() == sign);
    }
    CHECK(F::from(std::nextafter(half, 1.0)).code() == 1);
    CHECK(F::from(-std::nextafter(half, 1.0)).code() == (sign | 1));
    CHECK(F::from(std::nextafter(smallest, 1.0), cast_options{rounding::toward_zero}).code() == 1);
    CHECK(F::from(std::nextafter(smallest, 0.0), cast_options{rounding::toward_zero}).code() == 0);
    CHECK(F::from(-0.0f, cast_options{rounding::stochastic, overflow::standard, 7}).code() == sign);
  });
  // Literals: fp16's smallest subnormal is 2^-24, bf16's 2^-133.
  CHECK(fp16::from(0x1p-25f).bits() == 0x0000);
  CHECK(fp16::from(0x1.000002p-25f).bits() == 0x0001);
  CHECK(fp16::from(-0x1.000002p-25f).bits() == 0x8001);
  CHECK(fp16::from(0x1.8p-24f).bits() == 0x0002);    // tie 1.5: to 2
  CHECK(fp16::from(0x1.ff8p-15f).bits() == 0x03ff);  // the largest subnormal
  CHECK(fp16::from(0x1.ffcp-15f).bits() == 0x0400);  // tie: rounds up into the normals
  CHECK(bf16::from(0x1p-134f).bits() == 0x0000);
  CHECK(bf16::from(0x1.8p-133f).bits() == 0x0002);
  CHECK(bf16::from(0x1p-149f).bits() == 0x0000);
  CHECK(bf16::from(-0x1p-149f).bits() == 0x8000);
}

TEST_CASE("encode: NaN keeps its sign; ieee formats keep the top payload bits, quiet") {
  const std::uint32_t float_nans[] = {0x7fc00000u,
                                      0x7f800001u,
                                      0xffffffffu,
                                      0x7fa00000u,
                                      0xff812345u,
                                      0x7fbfffffu,
                                      0x80000000u | 0x7fd55555u};
  for_each_tested_format([&]<class F>() {
    CAPTURE(format_name<F>());
    for (std::uint32_t bits : float_nans) {
      CAPTURE(hex(bits));
      const float x = std::bit_cast<float>(bits);
      for (rounding round : roundings) {
        for (overflow on_overflow : overflows) {
          const F result = F::from(x, round, on_overflow, 0xffffffffu);
          CHECK(result.is_nan());
          CHECK(result.is_negative() == ((bits >> 31) != 0));
          CHECK(result.code() == encode<F>(x, round, on_overflow));
          // From double: the same NaN widened keeps the same top bits.
          CHECK(F::from(static_cast<double>(x), round, on_overflow, 0).code() == result.code());
        }
      }
    }
    const double double_nan =
        std::bit_cast<double>(0xfff0000000000001ull);  // payload at the bottom
    CHECK(F::from(double_nan).code() ==
          encode<F>(double_nan, rounding::nearest_even, overflow::standard));
    CHECK(F::from(double_nan).is_negative());
  });
  // Literals.
  CHECK(bf16::from(std::bit_cast<float>(0xff812345u)).bits() == 0xffc1);
  CHECK(bf16::from(std::bit_cast<float>(0x7f800001u)).bits() == 0x7fc0);
  CHECK(fp16::from(std::bit_cast<float>(0x7fbfe000u)).bits() == 0x7fff);
  CHECK(fp16::from(std::bit_cast<float>(0xff802000u)).bits() == 0xfe01);
  CHECK(tf32::from(std::bit_cast<float>(0x7f80e000u)).bits() == 0x7fc0e000u);
  CHECK(fp8_e4m3::from(std::bit_cast<float>(0xffa00000u)).code() == 0xfe);
  CHECK(fp8_e4m3fn::from(std::bit_cast<float>(0x7fc00000u)).code() == 0x7f);
  CHECK(fp8_e4m3fn::from(std::bit_cast<float>(0xff800001u)).code() == 0xff);
  CHECK(fp8_e5m2::from(std::bit_cast<float>(0x7f800001u)).code() == 0x7e);
}

TEST_CASE("encode: exact values are unchanged in every mode") {
  for_each_tested_format([]<class F>() {
    CAPTURE(format_name<F>());
    std::size_t failures = 0;
    for (std::uint32_t code = 0; code < layout<F>::code_count; ++code) {
      const F value = F::from_code(code);
      if (value.is_nan()) continue;
      for (rounding round : roundings) {
        failures +=
            F::from(value.to_float(), round, overflow::standard, 0xffffffffu).code() != code;
        failures += F::from(value.to_double(), round, overflow::saturate, 0xffffffffu).code() !=
                    (value.is_inf() ? (code & layout<F>::sign) | grid<F>().max_code() : code);
      }
    }
    CHECK(failures == 0);
  });
}

TEST_CASE("encode: the constructors round to nearest even with standard overflow") {
  CHECK(bf16(1.00390625f).bits() == 0x3f80);  // 1 + 2^-8: tie, to even
  CHECK(bf16(1.01171875f).bits() == 0x3f82);  // 1 + 3 * 2^-8: tie, to even
  CHECK(bf16(1.00390625 + 0x1p-40).bits() == 0x3f81);
  CHECK(fp16(65520.0).bits() == 0x7c00);
  CHECK(fp8_e4m3fn(465.0f).is_nan());
}

}  // namespace
}  // namespace tilekern::test
