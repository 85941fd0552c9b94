#pragma once
// minifloat<ExponentBits, MantissaBits, Bias, Specials>: a binary floating-point format of at
// most 32 bits whose every value is exactly an fp32 value, with exact decoding and correctly
// rounded encoding from float and double.
//
// Layout: sign, exponent, mantissa, as in IEEE 754, stored left-aligned in the smallest of
// uint8/16/32 that holds them; the padding bits below are zero. So tf32 (1+8+10 bits) is stored
// as the fp32 bit pattern with the low 13 bits zero. Decoding ignores the padding bits.
//
// Encoding (from float or double, no double rounding):
//   1. NaN -> NaN of the same sign. `ieee`: quiet, keeping the top mantissa bits of the payload
//      (as x86's vcvtneps2bf16 and vcvtps2ph do); `fn`: the single NaN code.
//   2. The value is rounded with an unbounded exponent (keeping subnormals: the grid below the
//      smallest normal is the subnormal grid) by the caller's rounding mode.
//   3. If the rounded magnitude exceeds max, or the input is infinite, the overflow mode decides:
//      standard -> inf (`ieee`) or NaN (`fn`); saturate -> max. Signs are kept, zeros included.
//
// All three rounding modes are one rule: round up iff `window + r` carries out of the word,
// where `window` is the dropped bits as a fraction of one ulp of the result (64 bits, top 32
// for stochastic) and r is 0 (toward zero), just under one half plus the lsb (nearest even) or
// 32 random bits (stochastic). Stochastic rounding thus rounds up with probability
// floor(fraction * 2^32) / 2^32: exact whenever at most 32 bits are dropped (so for every fp32
// input whose result is normal), otherwise low by less than 2^-32. Rounding up past max follows
// the overflow mode.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tilekern/types/random.hpp"
#include "tilekern/types/rounding.hpp"

namespace tilekern {

// What the all-ones exponent means.
enum class specials : std::uint8_t {
  ieee,  // zero mantissa: inf; non-zero mantissa: NaN (IEEE 754, bf16, fp16, Neuron fp8_e4m3)
  fn,    // finite: no inf, one NaN per sign, S.1..1.1..1; the rest are numbers (OCP E4M3FN)
};

namespace detail {

template <int Bits>
using storage_for =
    std::conditional_t<Bits <= 8, std::uint8_t,
                       std::conditional_t<Bits <= 16, std::uint16_t, std::uint32_t>>;

// 2^k as a double, exact for -1022 <= k <= 1023.
constexpr double power_of_two(int k) {
  return std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52);
}

// Round up iff window + r carries out of 64 bits (see the header comment).
constexpr bool rounds_up(std::uint64_t window, bool odd, rounding mode, std::uint32_t random) {
  switch (mode) {
    case rounding::toward_zero:
      return false;
    case rounding::nearest_even:
      return window > (1ull << 63) || (window == (1ull << 63) && odd);
    case rounding::stochastic: {
      const auto fraction = static_cast<std::uint32_t>(window >> 32);
      return static_cast<std::uint32_t>(fraction + random) < fraction;
    }
  }
  return false;
}

}  // namespace detail

template <int ExponentBits, int MantissaBits, int Bias, specials Specials = specials::ieee>
class minifloat {
  static_assert(ExponentBits >= 2 && ExponentBits <= 8,
                "minifloat: ExponentBits must be 2..8, so that every value is an fp32 value");
  static_assert(MantissaBits >= 1 && MantissaBits <= 23,
                "minifloat: MantissaBits must be 1..23, so that every value is an fp32 value");
  static_assert(Bias >= 1 && Bias <= 127,
                "minifloat: Bias must be 1..127, so that the normal range starts at or above "
                "fp32's smallest normal");
  static_assert((1 << ExponentBits) - (Specials == specials::ieee ? 2 : 1) - Bias <= 127,
                "minifloat: the largest exponent (all-ones field minus Bias) exceeds fp32's 127; "
                "raise Bias or use fewer ExponentBits");

 public:
  using storage_type = detail::storage_for<1 + ExponentBits + MantissaBits>;

  static constexpr int exponent_bits = ExponentBits;
  static constexpr int mantissa_bits = MantissaBits;
  static constexpr int bias = Bias;
  static constexpr specials special_values = Specials;
  static constexpr bool has_infinity = Specials == specials::ieee;
  static constexpr int code_bits = 1 + ExponentBits + MantissaBits;
  static constexpr int storage_bits = 8 * sizeof(storage_type);
  static constexpr int padding_bits = storage_bits - code_bits;

  // Unbiased exponents of the smallest normal and of max.
  static constexpr int min_exponent = 1 - Bias;
  static constexpr int max_exponent = (1 << ExponentBits) - (has_infinity ? 2 : 1) - Bias;

  // Codes without sign and padding.
  static constexpr std::uint32_t mantissa_mask = (1u << MantissaBits) - 1;
  static constexpr std::uint32_t magnitude_mask = (1u << (ExponentBits + MantissaBits)) - 1;
  static constexpr std::uint32_t sign_code = 1u << (ExponentBits + MantissaBits);
  static constexpr std::uint32_t infinity_code = has_infinity ? magnitude_mask - mantissa_mask : 0;
  static constexpr std::uint32_t max_code = has_infinity ? infinity_code - 1 : magnitude_mask - 1;
  static constexpr std::uint32_t quiet_bit = 1u << (MantissaBits - 1);
  static constexpr std::uint32_t nan_code =
      has_infinity ? infinity_code | quiet_bit : magnitude_mask;

  constexpr minifloat() = default;

  // Round to nearest even, standard overflow.
  explicit constexpr minifloat(float x) : code_(from(x).code_) {}
  explicit constexpr minifloat(double x) : code_(from(x).code_) {}

  static constexpr minifloat from_bits(storage_type bits) {
    minifloat result;
    result.code_ = bits;
    return result;
  }
  constexpr storage_type bits() const { return code_; }

  // A code without padding, sign at bit code_bits - 1.
  static constexpr minifloat from_code(std::uint32_t code) {
    return from_bits(static_cast<storage_type>(code << padding_bits));
  }
  constexpr std::uint32_t code() const { return static_cast<std::uint32_t>(code_) >> padding_bits; }

  // `index` selects the random bits for stochastic rounding (the element's position).
  static constexpr minifloat from(float x, const cast_options& options = {},
                                  std::uint64_t index = 0) {
    return from(x, options.round, options.on_overflow, random_word(options, index));
  }
  static constexpr minifloat from(double x, const cast_options& options = {},
                                  std::uint64_t index = 0) {
    return from(x, options.round, options.on_overflow, random_word(options, index));
  }

  // With the random word given: random_bits(key, index) for stochastic rounding, else unused.
  static constexpr minifloat from(float x, rounding round, overflow on_overflow,
                                  std::uint32_t random) {
    const auto bits = std::bit_cast<std::uint32_t>(x);
    const bool negative = (bits >> 31) != 0;
    const std::uint32_t exponent_field = (bits >> 23) & 0xff;
    const std::uint32_t fraction = bits & 0x7fffff;
    if (exponent_field == 0xff) {
      return fraction != 0 ? nan_from_payload(negative, std::uint64_t{fraction} << 29)
                           : overflowed(negative, on_overflow);
    }
    const std::uint64_t significand = fraction | (exponent_field != 0 ? 0x800000u : 0u);
    const int exponent = std::max<int>(static_cast<int>(exponent_field), 1) - 127 - 23;
    return rounded(negative, significand, exponent, round, on_overflow, random);
  }

  static constexpr minifloat from(double x, rounding round, overflow on_overflow,
                                  std::uint32_t random) {
    const auto bits = std::bit_cast<std::uint64_t>(x);
    const bool negative = (bits >> 63) != 0;
    const auto exponent_field = static_cast<int>((bits >> 52) & 0x7ff);
    const std::uint64_t fraction = bits & ((1ull << 52) - 1);
    if (exponent_field == 0x7ff) {
      return fraction != 0 ? nan_from_payload(negative, fraction)
                           : overflowed(negative, on_overflow);
    }
    const std::uint64_t significand = fraction | (exponent_field != 0 ? 1ull << 52 : 0);
    const int exponent = std::max(exponent_field, 1) - 1023 - 52;
    return rounded(negative, significand, exponent, round, on_overflow, random);
  }

  constexpr bool is_negative() const { return (code() & sign_code) != 0; }
  constexpr bool is_nan() const {
    const std::uint32_t magnitude = code() & magnitude_mask;
    return has_infinity ? magnitude > infinity_code : magnitude == nan_code;
  }
  constexpr bool is_inf() const {
    return has_infinity && (code() & magnitude_mask) == infinity_code;
  }

  // Exact. A NaN decodes to a quiet NaN of the same sign whose payload starts with the code's
  // mantissa bits (as x86's vcvtph2ps does).
  constexpr double to_double() const {
    const std::uint32_t magnitude = code() & magnitude_mask;
    const double sign = is_negative() ? -1.0 : 1.0;
    if (is_nan() || is_inf()) return static_cast<double>(to_float());
    const std::uint32_t exponent_field = magnitude >> MantissaBits;
    const std::uint32_t mantissa = magnitude & mantissa_mask;
    const std::uint32_t significand =
        exponent_field != 0 ? mantissa | (1u << MantissaBits) : mantissa;
    const int exponent = static_cast<int>(std::max(exponent_field, 1u)) - Bias - MantissaBits;
    return sign * static_cast<double>(significand) * detail::power_of_two(exponent);
  }

  constexpr float to_float() const {
    const std::uint32_t sign = is_negative() ? 0x80000000u : 0;
    if (is_nan()) {
      const std::uint32_t mantissa = code() & mantissa_mask;
      return std::bit_cast<float>(sign | 0x7fc00000u | (mantissa << (23 - MantissaBits)));
    }
    if (is_inf()) return std::bit_cast<float>(sign | 0x7f800000u);
    // Built from integers, so that a caller's flush-to-zero mode cannot touch subnormals.
    const std::uint32_t magnitude = code() & magnitude_mask;
    const std::uint32_t exponent_field = magnitude >> MantissaBits;
    const std::uint32_t mantissa = magnitude & mantissa_mask;
    if (exponent_field != 0) {  // normal: rebias the exponent field
      const std::uint32_t fp32_field = exponent_field + 127 - Bias;
      return std::bit_cast<float>(sign | (fp32_field << 23) | (mantissa << (23 - MantissaBits)));
    }
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal: mantissa * 2^(1 - Bias - M), normalised, or an fp32 subnormal below 2^-126.
    const int top_bit = static_cast<int>(std::bit_width(mantissa)) - 1;
    const int exponent = 1 - Bias - MantissaBits + top_bit;
    if constexpr (Bias + MantissaBits > 127) {  // the smallest values are below 2^-126
      if (exponent < -126) {
        return std::bit_cast<float>(sign | (mantissa << (1 - Bias - MantissaBits + 149)));
      }
    }
    const std::uint32_t fraction = (mantissa << (23 - top_bit)) & 0x7fffffu;
    return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(exponent + 127) << 23) |
                                fraction);
  }

  explicit constexpr operator float() const { return to_float(); }
  explicit constexpr operator double() const { return to_double(); }

 private:
  static constexpr std::uint32_t random_word(const cast_options& options, std::uint64_t index) {
    if (options.round != rounding::stochastic) return 0;
    return random_bits(random_key::from(options.seed, options.stream), index);
  }

  static constexpr minifloat signed_code(bool negative, std::uint32_t magnitude) {
    return from_code((negative ? sign_code : 0) | magnitude);
  }

  static constexpr minifloat overflowed(bool negative, overflow mode) {
    if (mode == overflow::saturate) return signed_code(negative, max_code);
    return signed_code(negative, has_infinity ? infinity_code : nan_code);
  }

  // `payload` is the NaN's fraction left-aligned in 52 bits.
  static constexpr minifloat nan_from_payload(bool negative, std::uint64_t payload) {
    if (!has_infinity) return signed_code(negative, nan_code);
    const auto mantissa = static_cast<std::uint32_t>(payload >> (52 - MantissaBits));
    return signed_code(negative, infinity_code | mantissa | quiet_bit);
  }

  // Rounds (-1)^negative * significand * 2^exponent, significand < 2^53.
  static constexpr minifloat rounded(bool negative, std::uint64_t significand, int exponent,
                                     rounding round, overflow on_overflow, std::uint32_t random) {
    if (significand == 0) return signed_code(negative, 0);
    // The result's binade (or the subnormal range) and its ulp, 2^(binade - MantissaBits).
    const int top_bit = static_cast<int>(std::bit_width(significand)) - 1;
    const int binade = std::max(exponent + top_bit, min_exponent);
    if (binade > max_exponent) return overflowed(negative, on_overflow);
    const int dropped = binade - MantissaBits - exponent;  // bits below the result's ulp

    std::uint64_t kept = 0;    // the value in ulps, rounded toward zero
    std::uint64_t window = 0;  // the dropped bits as a 64-bit fraction of one ulp
    if (dropped <= 0) {
      kept = significand << -dropped;
    } else if (dropped < 64) {
      kept = significand >> dropped;
      window = significand << (64 - dropped);
    } else if (dropped < 128) {
      window = significand >> (dropped - 64);
    }
    const bool up = detail::rounds_up(window, (kept & 1) != 0, round, random);
    // Exponent field and mantissa in one sum: a carry out of the mantissa bumps the exponent.
    const std::uint64_t magnitude =
        (static_cast<std::uint64_t>(binade - min_exponent) << MantissaBits) + kept + (up ? 1 : 0);
    if (magnitude > max_code) return overflowed(negative, on_overflow);
    return signed_code(negative, static_cast<std::uint32_t>(magnitude));
  }

  storage_type code_ = 0;
};

// The named formats.
using bf16 = minifloat<8, 7, 127>;
using fp16 = minifloat<5, 10, 15>;
using tf32 = minifloat<8, 10, 127>;  // stored as fp32 with the low 13 bits zero
// Neuron's fp8_e4m3 (NeuronCore-v2/v3): IEEE-like, inf = S.1111.000, max 240.
using fp8_e4m3 = minifloat<4, 3, 7>;
// OCP E4M3FN: no inf, NaN only S.1111.111, max 448. Not the same format as fp8_e4m3.
using fp8_e4m3fn = minifloat<4, 3, 7, specials::fn>;
using fp8_e5m2 = minifloat<5, 2, 15>;  // max 57344
using fp8_e3m4 = minifloat<3, 4, 3>;   // max 15.5

template <class T>
inline constexpr bool is_minifloat_v = false;
template <int E, int M, int B, specials S>
inline constexpr bool is_minifloat_v<minifloat<E, M, B, S>> = true;

template <class T>
concept minifloat_format = is_minifloat_v<T>;

// Whether every value of T is a normal bf16 value (so that bf16 arithmetic, which reads subnormals
// as zero on x86, keeps it): every fp8 format; bf16 itself is here too, its subnormals aside.
template <class T>
inline constexpr bool exact_in_bf16 = [] {
  if constexpr (minifloat_format<T>) {
    return std::is_same_v<T, bf16> ||
           (T::mantissa_bits <= 7 && T::min_exponent - T::mantissa_bits >= -126);
  } else {
    return false;
  }
}();

}  // namespace tilekern

template <int E, int M, int B, tilekern::specials S>
class std::numeric_limits<tilekern::minifloat<E, M, B, S>> {
  using type = tilekern::minifloat<E, M, B, S>;

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = type::has_infinity;
  static constexpr bool has_quiet_NaN = true;
  // A signaling NaN needs a NaN code with the quiet bit clear.
  static constexpr bool has_signaling_NaN = type::has_infinity && M >= 2;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = M + 1;
  static constexpr int digits10 = M * 30103 / 100000;
  static constexpr int max_digits10 = 2 + (M + 1) * 30103 / 100000;
  static constexpr int radix = 2;
  static constexpr int min_exponent = type::min_exponent + 1;
  static constexpr int min_exponent10 = type::min_exponent * 30103 / 100000;  // rounds up
  static constexpr int max_exponent = type::max_exponent + 1;
  // floor(log10(max)): max's significand can carry it past floor(max_exponent * log10(2)),
  // e.g. fp8_e3m4's 15.5 >= 10^1 although 2^3 * log10(2) < 1.
  static constexpr int max_exponent10 = [] {
    const double max = type::from_code(type::max_code).to_double();
    int n = 0;
    double power = 1;
    for (; power * 10 <= max; power *= 10) ++n;
    for (; power > max; power /= 10) --n;
    return n;
  }();
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static constexpr type min() noexcept { return type::from_code(1u << M); }
  static constexpr type lowest() noexcept {
    return type::from_code(type::sign_code | type::max_code);
  }
  static constexpr type max() noexcept { return type::from_code(type::max_code); }
  static constexpr type epsilon() noexcept {
    return type::from(tilekern::detail::power_of_two(-M));
  }
  static constexpr type round_error() noexcept { return type::from(0.5); }
  static constexpr type infinity() noexcept {
    return has_infinity ? type::from_code(type::infinity_code) : type{};
  }
  static constexpr type quiet_NaN() noexcept { return type::from_code(type::nan_code); }
  static constexpr type signaling_NaN() noexcept {
    return has_signaling_NaN ? type::from_code(type::infinity_code | 1u) : quiet_NaN();
  }
  static constexpr type denorm_min() noexcept { return type::from_code(1); }
};
