#pragma once
// Elements of float or of a named format, as the tests handle them: the type's name, its value,
// its encoding, its bits, and the spacing of its values.
//
// Values are decoded independently of the library (types/reference.hpp, test::decode); values are
// encoded by the library (`from`, which the types tests check against that reference's encode).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tilekern/types/formats.hpp"
#include "tilekern/types/rounding.hpp"
#include "types/reference.hpp"

namespace tilekern::test {

template <class T>
constexpr bool is_float = std::is_same_v<T, float>;

// "float", or the format's name ("bf16", "fp8_e4m3", ...).
template <class T>
std::string name_of() {
  if constexpr (is_float<T>) {
    return "float";
  } else {
    return format_name<T>();
  }
}

// The exact value of v.
template <class T>
double value_of(T v) {
  if constexpr (is_float<T>) {
    return v;
  } else {
    return decode<T>(v.code()).value();
  }
}

// v encoded by the library as `cast` says (a float: v rounded to nearest).
template <class T>
T encoded(double v, const cast_options& cast = {}) {
  if constexpr (is_float<T>) {
    return static_cast<float>(v);
  } else {
    return T::from(v, cast);
  }
}

// An input: v rounded to nearest even, saturating at T's largest finite value.
template <class T>
T saturated(double v) {
  return encoded<T>(v, {.on_overflow = overflow::saturate});
}

// The stored bits of v (to compare NaNs, signed zeros and codes exactly).
template <class T>
std::uint32_t bits_of(T v) {
  if constexpr (is_float<T>) {
    return std::bit_cast<std::uint32_t>(v);
  } else {
    return v.bits();
  }
}

template <class T>
bool same_bits(T a, T b) {
  return bits_of(a) == bits_of(b);
}

// The spacing of T's values around |v| (the subnormal spacing below the normals).
template <class T>
double ulp(double v) {
  // std::numeric_limits: digits counts the implicit bit; min_exponent is one above the smallest
  // normal's exponent (as for float).
  constexpr int mantissa_bits = std::numeric_limits<T>::digits - 1;
  constexpr int min_exponent = std::numeric_limits<T>::min_exponent - 1;
  const int exponent =
      v == 0 || !std::isfinite(v) ? min_exponent : std::max(std::ilogb(v), min_exponent);
  return std::ldexp(1.0, exponent - mantissa_bits);
}

// The position of a finite v among T's values in code order (-0 and +0 both 0).
template <class T>
std::int64_t ordered(T v) {
  std::uint32_t magnitude = 0;
  bool negative = false;
  if constexpr (is_float<T>) {
    magnitude = bits_of(v) & 0x7fffffffu;
    negative = (bits_of(v) >> 31) != 0;
  } else {
    magnitude = v.code() & T::magnitude_mask;
    negative = (v.code() & T::sign_code) != 0;
  }
  return negative ? -static_cast<std::int64_t>(magnitude) : magnitude;
}

// How many codes apart two finite values are.
template <class T>
std::int64_t code_distance(T a, T b) {
  const std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// The finite values of a format T, sorted, each once (-0 and +0 as 0).
template <class T>
const std::vector<double>& finite_values() {
  static const std::vector<double> values = [] {
    std::vector<double> all;
    for (std::uint32_t code = 0; code < (1u << T::code_bits); ++code) {
      const double v = value_of(T::from_code(code));
      if (std::isfinite(v)) all.push_back(v);
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    return all;
  }();
  return values;
}

// The largest value of T <= lo and the smallest >= hi (-inf and inf beyond the finite range).
template <class T>
std::pair<double, double> bracket(double lo, double hi) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if constexpr (is_float<T>) {
    auto down = static_cast<float>(lo);
    if (down > lo) down = std::nextafter(down, -std::numeric_limits<float>::infinity());
    auto up = static_cast<float>(hi);
    if (up < hi) up = std::nextafter(up, std::numeric_limits<float>::infinity());
    return {down, up};
  } else {
    const auto& values = finite_values<T>();
    const auto above_lo = std::upper_bound(values.begin(), values.end(), lo);
    const double down = above_lo == values.begin() ? -inf : *(above_lo - 1);
    const auto at_hi = std::lower_bound(values.begin(), values.end(), hi);
    const double up = at_hi == values.end() ? inf : *at_hi;
    return {down, up};
  }
}

}  // namespace tilekern::test
