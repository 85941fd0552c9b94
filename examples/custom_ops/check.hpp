#pragma once
// What the custom-operator examples share to check themselves against fp64. Not part of the
// library: the operators are in the examples, between their "user code" markers.

#include <tilekern/tilekern.hpp>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace example {

using namespace tilekern;

// fp32's unit roundoff: a correctly rounded fp32 operation has relative error at most u.
inline constexpr double u = 0x1p-24;

template <class T>
std::string name_of() {
  if constexpr (std::is_same_v<T, float>) {
    return "float";
  } else {
    return format_name<T>();
  }
}

template <class T>
double to_double(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    return value;
  } else {
    return value.to_double();
  }
}

template <class T>
T from_double(double value) {  // nearest even
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(value);
  } else {
    return T::from(value);
  }
}

template <class T>
bool is_nan(T value) {
  return std::isnan(to_double(value));
}

// The gap between neighbouring values of T (float or a tilekern format) at magnitude |v|:
// 2^(exponent of v - mantissa bits), the subnormal gap below the smallest normal.
template <class T>
double ulp(double v) {
  constexpr int mantissa_bits = std::numeric_limits<T>::digits - 1;
  constexpr int min_exponent = std::numeric_limits<T>::min_exponent - 1;
  const int exponent = v == 0 || !std::isfinite(v) ? min_exponent : std::ilogb(v);
  return std::ldexp(1.0, std::max(exponent, min_exponent) - mantissa_bits);
}

// n values of T from N(0, sigma^2), rounded to nearest; reproducible for a seed.
template <class T>
std::vector<T> normal_values(std::size_t n, double sigma, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> normal(0.0, sigma);
  std::vector<T> values(n);
  for (T& value : values) value = from_double<T>(normal(engine));
  return values;
}

// The special values of T, which the examples put at the start of their inputs.
template <class T>
std::vector<T> special_values() {
  using limits = std::numeric_limits<T>;
  std::vector<T> values = {limits::quiet_NaN(), limits::max(),        limits::lowest(),
                           limits::min(),       limits::denorm_min(), from_double<T>(0.0),
                           from_double<T>(-0.0)};
  if constexpr (limits::has_infinity) {
    values.push_back(limits::infinity());
    values.push_back(from_double<T>(-std::numeric_limits<double>::infinity()));
  }
  return values;
}

// Runs body(path) under each ISA path this machine and build can run, lowest first, then restores
// the cap: the library picks its path (and the operators' batch width) from it.
template <class Body>
void for_each_isa(Body&& body) {
  const auto previous = isa_cap();
  for (isa level : all_isas) {
    if (level > detected_isa() || level > compiled_isa()) continue;
    set_isa_cap(level);
    body(level);
  }
  set_isa_cap(previous);
}

// Counts failed checks and prints the first few.
class checks {
 public:
  explicit checks(const char* program) : program_(program) {}

  __attribute__((format(printf, 2, 3))) void fail(const char* format, ...) {
    if (failures_++ >= 20) return;
    std::printf("FAIL %s: ", context_.c_str());
    va_list arguments;
    va_start(arguments, format);
    std::vprintf(format, arguments);
    va_end(arguments);
    std::printf("\n");
  }

  // What the following checks are about (format, shape, ISA path), printed with each failure.
  void context(std::string text) { context_ = std::move(text); }

  // got is within bound of expected, or both are NaN, or both are the same infinity.
  bool near(double got, double expected, double bound, std::size_t index) {
    const bool ok = std::isnan(expected)   ? std::isnan(got)
                    : std::isinf(expected) ? got == expected
                                           : std::fabs(got - expected) <= bound;
    if (!ok) fail("element %zu: %.9g, expected %.9g within %.3g", index, got, expected, bound);
    return ok;
  }

  // The exit status of the example: 0 if every check passed.
  int finish() const {
    if (failures_ != 0) {
      std::printf("%s: %ld checks FAILED\n", program_, failures_);
      return 1;
    }
    std::printf("%s: every check passed (%s)\n", program_, describe_isa().c_str());
    return 0;
  }

 private:
  const char* program_;
  std::string context_;
  long failures_ = 0;
};

}  // namespace example
