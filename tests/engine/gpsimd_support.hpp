#pragma once
// Shared pieces of the gpsimd tests: strided tensors in guarded buffers, inputs whose arithmetic
// is exact in fp32, element values and expected outputs from independent definitions, and the
// core/thread configurations every kind must give identical bits under.
//
// Expected values never come from the code under test (engine/gpsimd.hpp): input values are
// decoded by tests/types/reference.hpp (ldexp of the fields), the math is done in double, and the
// expected output is the format's scalar definition F::from(value, cast, index) (itself checked
// exhaustively by tests/types against the same reference), with cast.stream + k for output k and
// index = the element's row-major index in the output.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "support/elements.hpp"
#include "support/formats.hpp"
#include "support/guarded.hpp"
#include "tilekern/engine/gpsimd.hpp"
#include "tilekern/types/formats.hpp"
#include "types/reference.hpp"

namespace tilekern::test {

// The element an exactly known fp32 result `exact` must give as output: the format's scalar
// definition with `cast` and the element's index; for float outputs the value itself (callers
// only pass values that fp32 represents exactly).
template <class T>
T expected_output(double exact, const cast_options& cast, std::uint64_t index) {
  if constexpr (is_float<T>) {
    return static_cast<float>(exact);
  } else {
    return T::from(exact, cast, index);
  }
}

// The cast of output k: the same options with stream + k (the documented contract).
inline cast_options cast_of_output(cast_options cast, std::size_t k) {
  cast.stream += k;
  return cast;
}

// A value no run writes: a NaN whose payload the library never produces (quiet NaNs from the
// operators are 0x7fc00000-like; the inputs here hold no NaN). For formats, their NaN code with a
// distinctive sign.
template <class T>
T sentinel() {
  if constexpr (is_float<T>) {
    return std::bit_cast<float>(0xffa5a5a5u);
  } else {
    return T::from_code(T::nan_code | T::sign_code);
  }
}

// rows x cols elements of T, row r at data + r * stride, in a guarded buffer that ends right after
// the last element (a write past it crashes). The gaps between rows hold the sentinel.
template <class T>
class tensor {
 public:
  tensor(std::size_t rows, std::size_t cols, std::size_t stride = 0)
      : rows_(rows),
        cols_(cols),
        stride_(stride == 0 ? cols : stride),
        buffer_(rows == 0 ? 0 : (rows - 1) * stride_ + cols) {
    std::fill_n(buffer_.data(), buffer_.size(), sentinel<T>());
  }

  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }
  std::size_t stride() const { return stride_; }
  std::size_t size() const { return rows_ * cols_; }
  view<T> v() { return {buffer_.data(), rows_, cols_, stride_}; }
  view<const T> cv() { return {buffer_.data(), rows_, cols_, stride_}; }
  T& operator()(std::size_t r, std::size_t c) { return buffer_[r * stride_ + c]; }
  // Every element, row-major, without the gaps.
  std::vector<T> elements() {
    std::vector<T> out;
    out.reserve(size());
    for (std::size_t r = 0; r < rows_; ++r) {
      for (std::size_t c = 0; c < cols_; ++c) out.push_back((*this)(r, c));
    }
    return out;
  }
  // Whether every gap element still holds the sentinel.
  bool gaps_untouched() {
    for (std::size_t r = 0; r + 1 < rows_; ++r) {
      for (std::size_t c = cols_; c < stride_; ++c) {
        if (bits_of(buffer_[r * stride_ + c]) != bits_of(sentinel<T>())) return false;
      }
    }
    return true;
  }
  void fill(const T& x) {
    for (std::size_t r = 0; r < rows_; ++r) {
      for (std::size_t c = 0; c < cols_; ++c) (*this)(r, c) = x;
    }
  }
  bool all_sentinel() {
    for (std::size_t i = 0; i < buffer_.size(); ++i) {
      if (bits_of(buffer_[i]) != bits_of(sentinel<T>())) return false;
    }
    return true;
  }

 private:
  std::size_t rows_, cols_, stride_;
  guarded_buffer<T> buffer_;
};

// Grid values: k / 2^fraction_bits with |k| <= limit, rounded to T (nearest even, saturating).
// After rounding to any format the value is still a multiple of 2^-fraction_bits (the format's
// spacing is a power of two: either finer, and the value is exact, or coarser, and a multiple of
// it), and at most 16 in magnitude with the defaults (15 rounds up to 16 in fp8_e5m2). So with the
// defaults, sums of three (|s| <= 48, multiples of 2^-8: 14 bits) and products of two (|p| <= 256,
// multiples of 2^-16: 24 bits) are exact in fp32.
template <class T>
T grid_value(std::mt19937_64& random, int limit = 3840, int fraction_bits = 8) {
  std::uniform_int_distribution<int> k(-limit, limit);
  const double x = std::ldexp(static_cast<double>(k(random)), -fraction_bits);
  if constexpr (is_float<T>) {
    return static_cast<float>(x);
  } else {
    return T::from(x, {.on_overflow = overflow::saturate});
  }
}

template <class T>
void fill_grid(tensor<T>& t, std::uint64_t seed, int limit = 3840, int fraction_bits = 8) {
  std::mt19937_64 random(seed);
  for (std::size_t r = 0; r < t.rows(); ++r) {
    for (std::size_t c = 0; c < t.cols(); ++c)
      t(r, c) = grid_value<T>(random, limit, fraction_bits);
  }
}

// Uniform values in [lo, hi), rounded to T (nearest even).
template <class T>
void fill_uniform(tensor<T>& t, std::uint64_t seed, double lo, double hi) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (std::size_t r = 0; r < t.rows(); ++r) {
    for (std::size_t c = 0; c < t.cols(); ++c) {
      if constexpr (is_float<T>) {
        t(r, c) = static_cast<float>(u(random));
      } else {
        t(r, c) = T::from(u(random));
      }
    }
  }
}

// Compares every element of `got` with expected(r, c) bit for bit; one CHECK with the first few
// differences.
template <class T, class Expected>
void check_elements(tensor<T>& got, Expected&& expected, const std::string& what) {
  mismatches failures;
  for (std::size_t r = 0; r < got.rows(); ++r) {
    for (std::size_t c = 0; c < got.cols(); ++c) {
      const T want = expected(r, c);
      if (bits_of(got(r, c)) != bits_of(want)) {
        failures.add(what, ": (", r, ", ", c, ") is ", value_of(got(r, c)), " [",
                     hex(bits_of(got(r, c))), "], expected ", value_of(want), " [",
                     hex(bits_of(want)), "]");
      }
    }
  }
  CHECK_MESSAGE(failures.count() == 0, failures.count(), " mismatches\n", failures.text());
  CHECK_MESSAGE(got.gaps_untouched(), what, ": the gaps between rows were written");
}

// Two tensors hold the same bits.
template <class T>
bool same_bits(tensor<T>& a, tensor<T>& b) {
  const auto x = a.elements(), y = b.elements();
  return x.size() == y.size() &&
         std::equal(x.begin(), x.end(), y.begin(),
                    [](const T& p, const T& q) { return bits_of(p) == bits_of(q); });
}

// Core counts and thread counts every result must be the same under (threads 0: OpenMP's
// default, which is 2 on the 2-core test machine).
struct core_config {
  std::size_t cores;
  std::size_t threads;
};
inline constexpr core_config core_configs[] = {{1, 1}, {3, 0}, {8, 0}, {8, 1}, {8, 2}, {3, 2}};
// For the sweeps over formats and shapes: one core, and eight cores on the calling thread (the
// split without thread start-up costs, which dominate small calls when the machine is busy); the
// sweeps add one threaded run each, and the tests named "same bits for any number of cores and
// threads" cover every configuration.
inline constexpr core_config quick_core_configs[] = {{1, 1}, {8, 1}};
inline constexpr core_config threaded_config = {3, 2};
// After a first run on one core: the runs whose bits must match it, for the approximations.
inline constexpr core_config invariance_configs[] = {{8, 1}, {3, 2}, {8, 0}};

inline gpsimd::options with_cores(gpsimd::options opt, core_config config) {
  opt.cores = config.cores;
  opt.threads = config.threads;
  return opt;
}

inline std::string describe(isa level, core_config config, const cast_options& cast) {
  return std::string(name(level)) + " cores " + std::to_string(config.cores) + " threads " +
         std::to_string(config.threads) + " " + std::string(name(cast.round)) + " " +
         std::string(name(cast.on_overflow)) + " seed " + std::to_string(cast.seed) + " stream " +
         std::to_string(cast.stream);
}

// The casts the exact-result tests run under: every rounding and overflow mode, two seeds; the
// sweeps over every format in the default suite take the first and the third, the "long" suite
// all four.
inline constexpr cast_options test_casts[] = {
    {rounding::nearest_even, overflow::standard, 0, 0},
    {rounding::stochastic, overflow::standard, 11, 5},
    {rounding::toward_zero, overflow::saturate, 0, 0},
    {rounding::stochastic, overflow::saturate, 12, 0},
};
inline constexpr std::span<const cast_options> quick_casts(test_casts, 2);
inline constexpr std::span<const cast_options> all_casts(test_casts);

// The lanes of the batches each ISA path passes to operators (the contract in gpsimd.hpp: sse2 on
// scalar, fma3<avx2> on avx2, avx512bw on avx512 and amx), for the paths this build compiled.
inline std::size_t lanes_of(isa level) {
  switch (level) {
    case isa::scalar:
      return 4;
    case isa::avx2:
      return 8;
    case isa::avx512:
    case isa::amx:
      return 16;
  }
  return 0;
}

// Calls visitor.template operator()<T>() for float and each test format (support/formats.hpp).
template <class Visitor>
void for_each_element_type(Visitor&& visitor) {
  visitor.template operator()<float>();
  for_each_test_format(visitor);
}

}  // namespace tilekern::test
