#pragma once
// An independent reference for the minifloat formats, built only from their definition (sign,
// exponent and mantissa fields; what the all-ones exponent means) with exact double arithmetic.
// It takes nothing from minifloat.hpp but the template parameters: values come from std::ldexp
// of the fields, rounding compares distances to the two neighbouring representable values.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "tilekern/types/formats.hpp"

namespace tilekern::test {

// The named formats and three unnamed ones: a tiny format, the smallest legal one, and an fn
// format with a wide exponent.
using unnamed_formats =
    std::tuple<minifloat<3, 2, 3>, minifloat<2, 1, 1>, minifloat<5, 3, 15, specials::fn>>;

template <class Visitor>
void for_each_tested_format(Visitor&& visitor) {
  for_each_format(visitor);
  [&]<class... F>(std::tuple<F...>*) {
    (visitor.template operator()<F>(), ...);
  }(static_cast<unnamed_formats*>(nullptr));
}

enum class kind { number, infinity, nan };

struct decoded {
  kind what = kind::number;
  bool negative = false;
  double magnitude = 0;  // for numbers

  double value() const {
    if (what == kind::nan)
      return negative ? -std::numeric_limits<double>::quiet_NaN()
                      : std::numeric_limits<double>::quiet_NaN();
    const double m = what == kind::infinity ? std::numeric_limits<double>::infinity() : magnitude;
    return negative ? -m : m;
  }
};

// The layout of F, from its template parameters only.
template <class F>
struct layout {
  static constexpr int exponent_bits = F::exponent_bits;
  static constexpr int mantissa_bits = F::mantissa_bits;
  static constexpr int bias = F::bias;
  static constexpr bool finite_only = F::special_values == specials::fn;
  static constexpr int code_bits = 1 + exponent_bits + mantissa_bits;
  static constexpr std::uint32_t code_count = 1u << code_bits;
  static constexpr std::uint32_t sign = 1u << (exponent_bits + mantissa_bits);
  static constexpr std::uint32_t exponent_ones = (1u << exponent_bits) - 1;
  static constexpr std::uint32_t mantissa_ones = (1u << mantissa_bits) - 1;

  static constexpr std::uint32_t fields(bool negative, std::uint32_t exponent,
                                        std::uint32_t mantissa) {
    return (negative ? sign : 0) | (exponent << mantissa_bits) | mantissa;
  }
};

template <class F>
decoded decode(std::uint32_t code) {
  using L = layout<F>;
  const bool negative = (code & L::sign) != 0;
  const std::uint32_t exponent = (code >> L::mantissa_bits) & L::exponent_ones;
  const std::uint32_t mantissa = code & L::mantissa_ones;
  if (exponent == L::exponent_ones) {
    if (!L::finite_only) return {mantissa == 0 ? kind::infinity : kind::nan, negative, 0};
    if (mantissa == L::mantissa_ones) return {kind::nan, negative, 0};
  }
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, 1 - L::bias - L::mantissa_bits)
                    : std::ldexp(mantissa + (1u << L::mantissa_bits),
                                 static_cast<int>(exponent) - L::bias - L::mantissa_bits);
  return {kind::number, negative, magnitude};
}

// The fp32 bit pattern a code must decode to: the value, or for NaN a quiet NaN of the same
// sign whose payload starts with the code's mantissa bits.
template <class F>
std::uint32_t decoded_float_bits(std::uint32_t code) {
  using L = layout<F>;
  const decoded d = decode<F>(code);
  const std::uint32_t sign = d.negative ? 0x80000000u : 0;
  if (d.what == kind::nan) {
    return sign | 0x7fc00000u | ((code & L::mantissa_ones) << (23 - L::mantissa_bits));
  }
  return std::bit_cast<std::uint32_t>(static_cast<float>(d.value()));
}

// The non-negative finite values in increasing order with their codes.
template <class F>
struct value_grid {
  std::vector<double> values;
  std::vector<std::uint32_t> codes;
  double beyond = 0;  // the next grid point above max with the exponent unbounded

  double max() const { return values.back(); }
  std::uint32_t max_code() const { return codes.back(); }
};

template <class F>
const value_grid<F>& grid() {
  static const value_grid<F> result = [] {
    using L = layout<F>;
    value_grid<F> g;
    for (std::uint32_t code = 0; code < L::sign; ++code) {
      const decoded d = decode<F>(code);
      if (d.what != kind::number) continue;
      if (!g.values.empty() && !(d.magnitude > g.values.back())) {
        throw std::logic_error("reference: codes do not increase with value");
      }
      g.values.push_back(d.magnitude);
      g.codes.push_back(code);
    }
    // Above max the grid goes on with max's spacing, 2^(exponent of max - mantissa bits).
    g.beyond = g.max() + std::ldexp(1.0, std::ilogb(g.max()) - L::mantissa_bits);
    return g;
  }();
  return result;
}

// The code of an overflowed result.
template <class F>
std::uint32_t overflow_code(bool negative, overflow on_overflow) {
  using L = layout<F>;
  if (on_overflow == overflow::saturate) return (negative ? L::sign : 0) | grid<F>().max_code();
  return L::fields(negative, L::exponent_ones, L::finite_only ? L::mantissa_ones : 0);
}

// The code for NaN input with `payload` = the NaN's fraction bits left-aligned in 52 bits.
template <class F>
std::uint32_t nan_code(bool negative, std::uint64_t payload) {
  using L = layout<F>;
  if (L::finite_only) return L::fields(negative, L::exponent_ones, L::mantissa_ones);
  const auto top = static_cast<std::uint32_t>(payload >> (52 - L::mantissa_bits));
  return L::fields(negative, L::exponent_ones, top | (1u << (L::mantissa_bits - 1)));
}

// The correctly rounded code of x. `random` is the stochastic rounding word: x rounds up iff
// floor(fraction * 2^32) + random >= 2^32, fraction = (|x| - lower) / (upper - lower).
template <class F>
std::uint32_t encode(double x, rounding round, overflow on_overflow, std::uint32_t random = 0) {
  using L = layout<F>;
  const bool negative = std::signbit(x);
  if (std::isnan(x)) {
    return nan_code<F>(negative, std::bit_cast<std::uint64_t>(x) & ((1ull << 52) - 1));
  }
  const double magnitude = std::fabs(x);
  const value_grid<F>& g = grid<F>();
  if (magnitude >= g.beyond) return overflow_code<F>(negative, on_overflow);
  // lower <= magnitude < upper.
  const auto above = std::upper_bound(g.values.begin(), g.values.end(), magnitude);
  const auto index = static_cast<std::size_t>(above - g.values.begin()) - 1;
  const double lower = g.values[index];
  const bool upper_is_beyond = index + 1 == g.values.size();
  const double upper = upper_is_beyond ? g.beyond : g.values[index + 1];
  const std::uint32_t lower_code = g.codes[index];

  bool up = false;
  if (magnitude != lower) {
    const double below = magnitude - lower;  // exact (Sterbenz, or lower = 0)
    const double beneath = upper - magnitude;
    switch (round) {
      case rounding::toward_zero:
        break;
      case rounding::nearest_even: {
        // The even neighbour: the one whose mantissa's last bit is 0. Beyond max continues the
        // code sequence (the code after max_code).
        const bool lower_even = (lower_code & 1) == 0;
        up = below > beneath || (below == beneath && !lower_even);
        break;
      }
      case rounding::stochastic: {
        const double fraction = below / (upper - lower);  // exact: the gap is a power of two
        const double threshold = std::floor(std::ldexp(fraction, 32));
        up = static_cast<double>(random) + threshold >= 4294967296.0;
        break;
      }
    }
  }
  if (!up) return (negative ? L::sign : 0) | lower_code;
  if (upper_is_beyond) return overflow_code<F>(negative, on_overflow);
  return (negative ? L::sign : 0) | g.codes[index + 1];
}

template <class F>
std::uint32_t encode(float x, rounding round, overflow on_overflow, std::uint32_t random = 0) {
  if (std::isnan(x)) {
    const auto fraction = std::bit_cast<std::uint32_t>(x) & 0x7fffffu;
    return nan_code<F>(std::signbit(x), std::uint64_t{fraction} << 29);
  }
  return encode<F>(static_cast<double>(x), round, on_overflow, random);
}

// Collects the first few mismatches of a sweep so that one CHECK reports them.
class mismatches {
 public:
  template <class... Parts>
  void add(const Parts&... parts) {
    if (count_++ < 8) {
      std::ostringstream line;
      line << std::hexfloat;
      (line << ... << parts);
      text_ += line.str();
      text_ += '\n';
    }
  }
  std::size_t count() const { return count_; }
  const std::string& text() const { return text_; }

 private:
  std::size_t count_ = 0;
  std::string text_;
};

inline std::string hex(std::uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

}  // namespace tilekern::test
