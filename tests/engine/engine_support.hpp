#pragma once
// Shared pieces of the vector and scalar engine tests (engine/vector.hpp, engine/scalar.hpp),
// on top of the gpsimd tests' tensors in guarded buffers and independent element values
// (gpsimd_support.hpp).
//
// Expected values never come from the code under test: inputs are decoded by
// tests/types/reference.hpp, the math is done in double (for + - * / of fp32 values, rounding
// the double result to fp32 gives the correctly rounded fp32 result: double has more than
// 2 * 24 + 2 bits), and the expected output code is the format's scalar definition
// F::from(fp32 value, cast, index) with the documented stochastic index
// first_index + r * index_stride + c.

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/gpsimd_support.hpp"
#include "tilekern/engine/vector.hpp"

namespace tilekern::test::engine_tests {

// The fp32 lanes of the path the engines run on now (engine/lanes.hpp: 16 on avx512 and amx, 8
// on avx2, 1 on scalar), and log2 of it.
inline std::size_t active_lanes() {
  switch (active_isa()) {
    case isa::scalar:
      return 1;
    case isa::avx2:
      return 8;
    case isa::avx512:
    case isa::amx:
      return 16;
  }
  return 1;
}

// gamma_k = k u / (1 - k u), u = 2^-24: the relative bound of k roundings in fp32 (Higham).
inline double gamma(std::size_t k) {
  const double ku = static_cast<double>(k) * 0x1p-24;
  return ku / (1.0 - ku);
}

// The number of roundings an engine row reduction applies to one element of a row of n
// (engine/lanes.hpp, reduce_slots): on every path each of 64 partial sums (32 for each of the
// two of row_sums_of) adds at most ceil(n / slots) elements to a zero accumulator (the first add
// is exact), then the partials are combined in a tree of log2(slots) levels.
inline std::size_t row_sum_roundings(std::size_t n, std::size_t slots = 64) {
  const std::size_t per_slot = (n + slots - 1) / slots;
  return (per_slot == 0 ? 0 : per_slot - 1) + static_cast<std::size_t>(std::bit_width(slots) - 1);
}

// The output element for an fp32 result x: the format's scalar definition, or x itself.
template <class T>
T expected_from_float(float x, const cast_options& cast, std::uint64_t index) {
  if constexpr (is_float<T>) {
    return x;
  } else {
    return T::from(x, cast, index);
  }
}

template <class T>
bool is_nan_element(const T& x) {
  if constexpr (is_float<T>) {
    return std::isnan(x);
  } else {
    return x.is_nan();
  }
}

// Every element of `got` equals expected(r, c) bit for bit (any NaN where a NaN is expected),
// and the gaps between rows still hold the sentinel.
template <class T, class Expected>
void check_values(tensor<T>& got, Expected&& expected, const std::string& what) {
  mismatches failures;
  for (std::size_t r = 0; r < got.rows(); ++r) {
    for (std::size_t c = 0; c < got.cols(); ++c) {
      const T want = expected(r, c);
      const bool ok =
          is_nan_element(want) ? is_nan_element(got(r, c)) : bits_of(got(r, c)) == bits_of(want);
      if (!ok) {
        failures.add(what, ": (", r, ", ", c, ") is ", value_of(got(r, c)), " [",
                     hex(bits_of(got(r, c))), "], expected ", value_of(want), " [",
                     hex(bits_of(want)), "]");
      }
    }
  }
  CHECK_MESSAGE(failures.count() == 0, failures.count(), " mismatches\n", failures.text());
  CHECK_MESSAGE(got.gaps_untouched(), what, ": the gaps between rows were written");
}

inline std::string describe_cast(const cast_options& cast) {
  return std::string(name(cast.round)) + " " + std::string(name(cast.on_overflow)) + " seed " +
         std::to_string(cast.seed) + " stream " + std::to_string(cast.stream);
}

inline std::string shape_name(std::size_t rows, std::size_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// How a source operand is shaped against a rows x cols destination (engine/lanes.hpp).
enum class broadcast { full, row, column, one, scalar };
inline constexpr broadcast all_broadcasts[] = {broadcast::full, broadcast::row, broadcast::column,
                                               broadcast::one, broadcast::scalar};

inline const char* broadcast_name(broadcast kind) {
  switch (kind) {
    case broadcast::full:
      return "full";
    case broadcast::row:
      return "row";
    case broadcast::column:
      return "column";
    case broadcast::one:
      return "1x1";
    case broadcast::scalar:
      return "float";
  }
  return "?";
}

// A source of T in one of the broadcast shapes, filled with grid values (gpsimd_support.hpp);
// a full source has a row stride larger than its rows, a column source a stride of 3.
template <class T>
class source {
 public:
  source(broadcast kind, std::size_t rows, std::size_t cols, std::uint64_t seed,
         float scalar_value = 1.375f)
      : kind_(kind),
        data_(kind == broadcast::full || kind == broadcast::column ? rows : 1,
              kind == broadcast::full || kind == broadcast::row ? cols : 1,
              kind == broadcast::full     ? cols + 1
              : kind == broadcast::column ? 3
                                          : 0),
        scalar_(scalar_value) {
    fill_grid(data_, seed);
  }

  tensor<T>& data() { return data_; }
  broadcast kind() const { return kind_; }

  // The element the operation sees at (r, c), decoded independently.
  double at(std::size_t r, std::size_t c) {
    switch (kind_) {
      case broadcast::full:
        return value_of(data_(r, c));
      case broadcast::row:
        return value_of(data_(0, c));
      case broadcast::column:
        return value_of(data_(r, 0));
      case broadcast::one:
        return value_of(data_(0, 0));
      case broadcast::scalar:
        return scalar_;
    }
    return 0;
  }

  // Replaces every element that is zero by one (divisors).
  void avoid_zero() {
    for (std::size_t r = 0; r < data_.rows(); ++r) {
      for (std::size_t c = 0; c < data_.cols(); ++c) {
        if (value_of(data_(r, c)) == 0.0) data_(r, c) = expected_from_float<T>(1.0f, {}, 0);
      }
    }
  }

  // call(view<const T>) or call(float), as the operation takes it.
  template <class Call>
  void pass(Call&& call) {
    if (kind_ == broadcast::scalar) {
      call(scalar_);
    } else {
      call(data_.cv());
    }
  }

 private:
  broadcast kind_;
  tensor<T> data_;
  float scalar_;
};

struct shape {
  std::size_t rows;
  std::size_t cols;
};
// Odd shapes: one element, one row shorter and longer than the lanes, a row of exactly 16
// lanes, rows with a tail.
inline constexpr shape odd_shapes[] = {{1, 1}, {1, 17}, {3, 15}, {5, 16}, {7, 33}};

// The stochastic indices a destination is checked with: the default (0, cols) and a block of a
// larger tensor (first_index 977, index_stride cols + 5).
struct index_config {
  std::uint64_t first_index;
  std::uint64_t extra_stride;  // index_stride = cols + extra_stride, or 0 (the default) if 0
};
inline constexpr index_config index_configs[] = {{0, 0}, {977, 5}};

inline std::uint64_t index_stride_of(index_config config, std::size_t cols) {
  return config.extra_stride == 0 ? 0 : cols + config.extra_stride;
}

// Runs f() expecting a shape_error whose message contains every one of `parts`.
template <class F>
void check_shape_error(F&& f, std::initializer_list<std::string> parts) {
  std::string message;
  try {
    f();
  } catch (const shape_error& e) {
    message = e.what();
  }
  REQUIRE_MESSAGE(!message.empty(), "no shape_error thrown; expected one naming ", *parts.begin());
  for (const std::string& part : parts) {
    CHECK_MESSAGE(message.find(part) != std::string::npos, "the message \"", message,
                  "\" does not contain \"", part, "\"");
  }
}

// Every element type the engines take, in a fixed order (for mixing formats by position).
#if defined(TILEKERN_TEST_FEWER_FORMATS)  // see support/formats.hpp
using element_types = std::tuple<float, bf16, fp16, fp8_e4m3>;
#else
using element_types = std::tuple<float, bf16, fp16, tf32, fp8_e4m3, fp8_e4m3fn, fp8_e5m2, fp8_e3m4>;
#endif

}  // namespace tilekern::test::engine_tests
