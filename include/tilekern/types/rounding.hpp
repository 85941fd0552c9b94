#pragma once
// How a value is rounded when it is cast to a narrower format.

#include <cstdint>

namespace tilekern {

enum class rounding : std::uint8_t {
  nearest_even,  // to the nearest representable value, ties to the even code
  toward_zero,   // truncate the dropped bits
  // Up with probability (x - lower) / (upper - lower), from 32 random bits that are a pure
  // function of (seed, stream, element index); see random.hpp.
  stochastic,
};

// What happens to a value whose rounded magnitude exceeds the format's max. The check is made
// after rounding (a value that rounds down to max is not an overflow), in every rounding mode:
// unlike IEEE 754's roundTowardZero, toward_zero overflows like the other modes.
enum class overflow : std::uint8_t {
  standard,  // +-inf where the format has one, NaN where it has none (e4m3fn)
  saturate,  // +-max; infinite inputs saturate too, so every non-NaN result is finite
};

// Everything a cast to a narrower format needs besides the value.
struct cast_options {
  rounding round = rounding::nearest_even;
  overflow on_overflow = overflow::standard;
  std::uint64_t seed = 0;    // stochastic rounding only
  std::uint64_t stream = 0;  // separates independent casts that share a seed (e.g. tensors)
};

}  // namespace tilekern
