// std::numeric_limits of every format against the documented constants, written as literals.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "types/reference.hpp"

namespace tilekern::test {
namespace {

struct documented {
  double max;
  double min;         // smallest normal
  double denorm_min;  // smallest subnormal
  double epsilon;
  bool has_infinity;
  int digits;
  int min_exponent;  // std convention: min = 2^(min_exponent - 1)
  int max_exponent;  // std convention: max < 2^max_exponent
  int digits10;
  int max_digits10;
  int min_exponent10;
  int max_exponent10;  // the largest n with 10^n <= max
};

template <class F>
void check(const documented& want) {
  using limits = std::numeric_limits<F>;
  CAPTURE(format_name<F>());
  static_assert(limits::is_specialized && limits::is_signed && !limits::is_integer);
  CHECK(limits::radix == 2);
  CHECK(limits::max().to_double() == want.max);
  CHECK(limits::lowest().to_double() == -want.max);
  CHECK(limits::min().to_double() == want.min);
  CHECK(limits::denorm_min().to_double() == want.denorm_min);
  CHECK(limits::epsilon().to_double() == want.epsilon);
  CHECK(limits::round_error().to_double() == 0.5);
  CHECK(limits::has_infinity == want.has_infinity);
  CHECK(F::has_infinity == want.has_infinity);
  CHECK(limits::has_quiet_NaN);
  CHECK(limits::has_denorm == std::denorm_present);
  CHECK(limits::digits == want.digits);
  CHECK(limits::min_exponent == want.min_exponent);
  CHECK(limits::max_exponent == want.max_exponent);
  CHECK(limits::digits10 == want.digits10);
  CHECK(limits::max_digits10 == want.max_digits10);
  CHECK(limits::min_exponent10 == want.min_exponent10);
  CHECK(limits::max_exponent10 == want.max_exponent10);

  CHECK(limits::quiet_NaN().is_nan());
  CHECK_FALSE(limits::quiet_NaN().is_negative());
  CHECK(std::isnan(limits::quiet_NaN().to_float()));
  if (want.has_infinity) {
    CHECK(limits::infinity().is_inf());
    CHECK(limits::infinity().to_double() == HUGE_VAL);
    // A signaling NaN: a NaN code whose quiet bit (the mantissa's top bit) is clear.
    if (limits::has_signaling_NaN) {
      const std::uint32_t mantissa = limits::signaling_NaN().code() & layout<F>::mantissa_ones;
      CHECK(limits::signaling_NaN().is_nan());
      CHECK((mantissa >> (layout<F>::mantissa_bits - 1)) == 0);
    }
  } else {
    CHECK_FALSE(limits::infinity().is_inf());
    CHECK_FALSE(limits::has_signaling_NaN);
  }

  // The same identities std::numeric_limits<float> satisfies, so the conventions match.
  CHECK(want.epsilon == std::ldexp(1.0, 1 - limits::digits));
  CHECK(want.min == std::ldexp(1.0, limits::min_exponent - 1));
  CHECK(want.max < std::ldexp(1.0, limits::max_exponent));
  CHECK(want.max >= std::ldexp(1.0, limits::max_exponent - 1));
  CHECK(want.denorm_min == std::ldexp(want.min, 1 - limits::digits));
  // And the reference's view of the same format.
  CHECK(grid<F>().max() == want.max);
  CHECK(grid<F>().values[1] == want.denorm_min);
}

TEST_CASE("limits: documented constants of the named formats") {
  //                max            min      denorm_min epsilon inf  dig minE maxE d10 md10 mE10 ME10
  check<bf16>({0x1.fep127, 0x1p-126, 0x1p-133, 0x1p-7, true, 8, -125, 128, 2, 4, -37, 38});
  check<fp16>({65504.0, 0x1p-14, 0x1p-24, 0x1p-10, true, 11, -13, 16, 3, 5, -4, 4});
  check<tf32>({0x1.ffcp127, 0x1p-126, 0x1p-136, 0x1p-10, true, 11, -125, 128, 3, 5, -37, 38});
  check<fp8_e4m3>({240.0, 0x1p-6, 0x1p-9, 0.125, true, 4, -5, 8, 0, 3, -1, 2});
  check<fp8_e4m3fn>({448.0, 0x1p-6, 0x1p-9, 0.125, false, 4, -5, 9, 0, 3, -1, 2});
  check<fp8_e5m2>({57344.0, 0x1p-14, 0x1p-16, 0.25, true, 3, -13, 16, 0, 2, -4, 4});
  check<fp8_e3m4>({15.5, 0.25, 0x1p-6, 0.0625, true, 5, -1, 4, 1, 3, 0, 1});
}

TEST_CASE("limits: unnamed formats") {
  check<minifloat<3, 2, 3>>({14.0, 0.25, 0.0625, 0.25, true, 3, -1, 4, 0, 2, 0, 1});
  check<minifloat<2, 1, 1>>({3.0, 1.0, 0.5, 0.5, true, 2, 1, 2, 0, 2, 0, 0});
  check<minifloat<5, 3, 15, specials::fn>>(
      {114688.0, 0x1p-14, 0x1p-17, 0.125, false, 4, -13, 17, 0, 3, -4, 5});
}

TEST_CASE("limits: bf16 and tf32 share fp32's exponent range") {
  using flt = std::numeric_limits<float>;
  CHECK(std::numeric_limits<bf16>::min().to_float() == flt::min());
  CHECK(std::numeric_limits<tf32>::min().to_float() == flt::min());
  CHECK(std::numeric_limits<bf16>::min_exponent == flt::min_exponent);
  CHECK(std::numeric_limits<bf16>::max_exponent == flt::max_exponent);
  CHECK(std::numeric_limits<tf32>::min_exponent10 == flt::min_exponent10);
  CHECK(std::numeric_limits<tf32>::max_exponent10 == flt::max_exponent10);
  // Infinity and NaN decode to fp32's.
  CHECK(std::numeric_limits<bf16>::infinity().to_float() == flt::infinity());
  CHECK(std::numeric_limits<bf16>::lowest().to_float() < -flt::max() / 2);
  CHECK(std::bit_cast<std::uint32_t>(std::numeric_limits<bf16>::quiet_NaN().to_float()) ==
        std::bit_cast<std::uint32_t>(flt::quiet_NaN()));
  CHECK(std::bit_cast<std::uint32_t>(std::numeric_limits<fp16>::quiet_NaN().to_float()) ==
        std::bit_cast<std::uint32_t>(flt::quiet_NaN()));
}

TEST_CASE("limits: the documented codes") {
  CHECK(std::numeric_limits<fp8_e4m3>::infinity().code() == 0x78);  // S.1111.000
  CHECK(std::numeric_limits<fp8_e4m3>::max().code() == 0x77);
  CHECK(std::numeric_limits<fp8_e4m3fn>::quiet_NaN().code() == 0x7f);  // S.1111.111
  CHECK(std::numeric_limits<fp8_e4m3fn>::max().code() == 0x7e);
  CHECK(std::numeric_limits<fp8_e5m2>::infinity().code() == 0x7c);
  CHECK(std::numeric_limits<fp16>::infinity().bits() == 0x7c00);
  CHECK(std::numeric_limits<fp16>::quiet_NaN().bits() == 0x7e00);
  CHECK(std::numeric_limits<bf16>::quiet_NaN().bits() == 0x7fc0);
  CHECK(std::numeric_limits<tf32>::quiet_NaN().bits() == 0x7fc00000u);
  CHECK(std::numeric_limits<tf32>::max().bits() == 0x7f7fe000u);
}

}  // namespace
}  // namespace tilekern::test
