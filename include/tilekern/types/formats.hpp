#pragma once
// The named formats as a list: their names, and a way to visit each one (for tools, reports,
// tests and benchmarks that cover every format).

#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "tilekern/types/minifloat.hpp"

namespace tilekern {

using named_formats = std::tuple<bf16, fp16, tf32, fp8_e4m3, fp8_e4m3fn, fp8_e5m2, fp8_e3m4>;

// "bf16", ..., or for an unnamed minifloat "e{E}m{M}b{Bias}" with "fn" appended for `fn`.
template <minifloat_format F>
std::string format_name() {
  if constexpr (std::is_same_v<F, bf16>)
    return "bf16";
  else if constexpr (std::is_same_v<F, fp16>)
    return "fp16";
  else if constexpr (std::is_same_v<F, tf32>)
    return "tf32";
  else if constexpr (std::is_same_v<F, fp8_e4m3>)
    return "fp8_e4m3";
  else if constexpr (std::is_same_v<F, fp8_e4m3fn>)
    return "fp8_e4m3fn";
  else if constexpr (std::is_same_v<F, fp8_e5m2>)
    return "fp8_e5m2";
  else if constexpr (std::is_same_v<F, fp8_e3m4>)
    return "fp8_e3m4";
  else {
    // Appended, not "e" + ...: gcc 12's -Wrestrict misfires on operator+(const char*, string&&).
    std::string text = "e";
    text += std::to_string(F::exponent_bits);
    text += "m";
    text += std::to_string(F::mantissa_bits);
    text += "b";
    text += std::to_string(F::bias);
    if (F::special_values == specials::fn) text += "fn";
    return text;
  }
}

// Calls visitor.template operator()<F>() for each named format, in the order of named_formats.
template <class Visitor>
void for_each_format(Visitor&& visitor) {
  [&]<class... F>(std::tuple<F...>*) {
    (visitor.template operator()<F>(), ...);
  }(static_cast<named_formats*>(nullptr));
}

// Calls visitor.template operator()<F>() for the named format called `name`; false if none is.
template <class Visitor>
bool visit_format(std::string_view name, Visitor&& visitor) {
  bool found = false;
  for_each_format([&]<class F>() {
    if (!found && format_name<F>() == name) {
      found = true;
      visitor.template operator()<F>();
    }
  });
  return found;
}

constexpr std::string_view name(rounding mode) {
  switch (mode) {
    case rounding::nearest_even:
      return "nearest";
    case rounding::toward_zero:
      return "zero";
    case rounding::stochastic:
      return "stochastic";
  }
  return "?";
}

constexpr std::string_view name(overflow mode) {
  return mode == overflow::saturate ? "saturate" : "standard";
}

}  // namespace tilekern
