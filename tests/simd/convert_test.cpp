// Bulk conversion (simd/convert.hpp): every ISA path gives exactly the bits of the scalar
// definition (types/minifloat.hpp), for every format, rounding mode and overflow mode, on inputs
// chosen to sit on every rounding and range boundary, at every length, without touching memory
// outside the spans.

#include <doctest/doctest.h>
#include <xmmintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/guarded.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

using test::for_each_isa;
using test::guarded_buffer;

// Unnamed formats: tiny ones (2- and 3-bit exponents), one whose subnormals straddle fp32's
// smallest normal (Bias + M > 127, no inf), and full-width significands (no dropped bits for
// normal inputs), with Bias 127 and with a smaller range.
using e3m2 = minifloat<3, 2, 3>;
using e2m1 = minifloat<2, 1, 1>;
using e5m9fn = minifloat<5, 9, 120, specials::fn>;
using e8m23 = minifloat<8, 23, 127>;
using e7m23 = minifloat<7, 23, 100>;

template <class Visitor>
void for_each_tested_format(Visitor&& visitor) {
  for_each_format(visitor);
  visitor.template operator()<e3m2>();
  visitor.template operator()<e2m1>();
  visitor.template operator()<e5m9fn>();
  visitor.template operator()<e8m23>();
  visitor.template operator()<e7m23>();
}

constexpr rounding all_roundings[] = {rounding::nearest_even, rounding::toward_zero,
                                      rounding::stochastic};
constexpr overflow all_overflows[] = {overflow::standard, overflow::saturate};

std::string hex(std::uint32_t bits) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", bits);
  return text;
}

std::string describe(isa level, std::string_view format, const cast_options& options) {
  return std::string(name(level)) + " " + std::string(format) + " " +
         std::string(name(options.round)) + " " + std::string(name(options.on_overflow));
}

// The definition: F::from element by element, with the random word of element i drawn at
// first_index + i.
template <minifloat_format F>
std::vector<std::uint32_t> defined_codes(std::span<const float> inputs, const cast_options& options,
                                         std::uint64_t first_index) {
  const random_key key = random_key::from(options.seed, options.stream);
  std::vector<std::uint32_t> codes(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::uint32_t random =
        options.round == rounding::stochastic ? random_bits(key, first_index + i) : 0;
    codes[i] = F::from(inputs[i], options.round, options.on_overflow, random).bits();
  }
  return codes;
}

// Converts `inputs` on every ISA path, from and into guarded buffers of exactly their size, and
// checks every element against `expected` (stored bits).
template <minifloat_format F>
void check_encode_against(std::span<const float> inputs, std::span<const std::uint32_t> expected,
                          const cast_options& options, std::uint64_t first_index) {
  for_each_isa([&](isa level) {
    guarded_buffer<float> from(inputs.size());
    std::copy(inputs.begin(), inputs.end(), from.data());
    guarded_buffer<F> to(inputs.size());
    convert(from.cspan(), to.span(), options, first_index);
    std::size_t mismatches = 0, first = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (to[i].bits() != expected[i] && mismatches++ == 0) first = i;
    }
    std::string message;
    if (mismatches != 0) {
      message = describe(level, format_name<F>(), options) + ": " + std::to_string(mismatches) +
                " of " + std::to_string(inputs.size()) + " differ; first at " +
                std::to_string(first) + " (index " + std::to_string(first_index + first) +
                "): input " + hex(std::bit_cast<std::uint32_t>(inputs[first])) + " gives " +
                hex(to[first].bits()) + ", defined " + hex(expected[first]);
    }
    CHECK_MESSAGE(mismatches == 0, message);
  });
}

template <minifloat_format F>
void check_encode(std::span<const float> inputs, const cast_options& options,
                  std::uint64_t first_index = 0) {
  const auto expected = defined_codes<F>(inputs, options, first_index);
  check_encode_against<F>(inputs, expected, options, first_index);
}

// Every rounding and overflow mode.
template <minifloat_format F>
void check_encode_all_modes(std::span<const float> inputs, std::uint64_t first_index = 0) {
  for (rounding round : all_roundings) {
    for (overflow on_overflow : all_overflows) {
      check_encode<F>(inputs, {round, on_overflow, 0x5eed, 7}, first_index);
    }
  }
}

template <minifloat_format F>
void check_decode(std::span<const typename F::storage_type> stored) {
  for_each_isa([&](isa level) {
    guarded_buffer<F> from(stored.size());
    for (std::size_t i = 0; i < stored.size(); ++i) from[i] = F::from_bits(stored[i]);
    guarded_buffer<float> to(stored.size());
    convert(from.cspan(), to.span());
    std::size_t mismatches = 0, first = 0;
    for (std::size_t i = 0; i < stored.size(); ++i) {
      const auto defined = std::bit_cast<std::uint32_t>(F::from_bits(stored[i]).to_float());
      if (std::bit_cast<std::uint32_t>(to[i]) != defined && mismatches++ == 0) first = i;
    }
    std::string message;
    if (mismatches != 0) {
      message = std::string(name(level)) + " " + format_name<F>() +
                " decode: " + std::to_string(mismatches) + " differ; first: stored " +
                hex(stored[first]) + " gives " + hex(std::bit_cast<std::uint32_t>(to[first])) +
                ", defined " +
                hex(std::bit_cast<std::uint32_t>(F::from_bits(stored[first]).to_float()));
    }
    CHECK_MESSAGE(mismatches == 0, message);
  });
}

float from_bits(std::uint32_t bits) {
  return std::bit_cast<float>(bits);
}

// fp32's special values: zeros, infinities, quiet and signaling NaNs with payloads (high, low,
// full), subnormals, the extremes of the normals; each with both signs.
std::vector<float> fp32_specials() {
  const std::uint32_t magnitudes[] = {
      0x00000000, 0x7f800000,                                      // 0, inf
      0x7fc00000, 0x7fc00001, 0x7fd55555, 0x7fffffff, 0x7fe00000,  // quiet NaNs
      0x7f800001, 0x7fa00000, 0x7f812345, 0x7fbfffff, 0x7f802000,  // signaling NaNs
      0x00000001, 0x00000002, 0x00012345, 0x00400000, 0x007fffff,  // subnormals
      0x00008000, 0x00010000, 0x00018000, 0x003fffff, 0x00400001,
      0x00800000, 0x00800001, 0x7f7fffff, 0x7f000000, 0x3f800000,  // normals
  };
  std::vector<float> values;
  for (std::uint32_t magnitude : magnitudes) {
    values.push_back(from_bits(magnitude));
    values.push_back(from_bits(magnitude | 0x80000000u));
  }
  return values;
}

// Values on F's boundaries: every code's value (a sample of them for formats of more than 12
// bits), the midpoint to the next code, one fp32 ulp either side of both, with both signs; and
// the values just above max.
template <minifloat_format F>
std::vector<float> boundary_inputs() {
  std::vector<float> values = fp32_specials();
  const auto add_around = [&](double value) {
    const float x = static_cast<float>(value);
    const float infinity = std::numeric_limits<float>::infinity();
    for (float y : {x, std::nextafter(x, infinity), std::nextafter(x, -infinity)}) {
      values.push_back(y);
      values.push_back(-y);
    }
  };
  std::vector<std::uint32_t> magnitudes;
  if (F::code_bits <= 12) {
    for (std::uint32_t c = 0; c <= F::max_code; ++c) magnitudes.push_back(c);
  } else {
    constexpr std::uint32_t min_normal = 1u << F::mantissa_bits;
    for (std::uint32_t c = 0; c < 256; ++c) {
      magnitudes.push_back(c);                     // smallest subnormals
      magnitudes.push_back(min_normal - 128 + c);  // around the smallest normal
      magnitudes.push_back(F::max_code - c);       // largest normals
    }
    std::mt19937 generator(F::code_bits);
    std::uniform_int_distribution<std::uint32_t> any_code(0, F::max_code);
    for (int k = 0; k < 2048; ++k) magnitudes.push_back(any_code(generator));
  }
  // ulp of the top binade: the step from max to the first value that overflows.
  const double top_ulp = std::ldexp(1.0, F::max_exponent - F::mantissa_bits);
  for (std::uint32_t c : magnitudes) {
    const double value = F::from_code(c).to_double();
    const double next = c < F::max_code ? F::from_code(c + 1).to_double() : value + top_ulp;
    add_around(value);
    add_around((value + next) / 2);
  }
  add_around(std::ldexp(1.0, F::max_exponent + 1));
  add_around(static_cast<double>(std::numeric_limits<float>::max()));
  return values;
}

// Random bit patterns, and random values within (and a little beyond) F's range.
template <minifloat_format F>
std::vector<float> random_inputs(std::size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::vector<float> values;
  std::uniform_int_distribution<int> exponent(F::min_exponent - F::mantissa_bits - 3,
                                              F::max_exponent + 1);
  std::uniform_real_distribution<float> significand(1.0f, 2.0f);
  for (std::size_t k = 0; k < count; ++k) {
    values.push_back(from_bits(static_cast<std::uint32_t>(generator())));
    const float value = std::ldexp(significand(generator), exponent(generator));
    values.push_back(generator() & 1 ? value : -value);
  }
  return values;
}

TEST_CASE("convert: every path encodes fp32 specials, boundaries and random inputs as defined") {
  for_each_tested_format([]<class F>() {
    const auto boundaries = boundary_inputs<F>();
    check_encode_all_modes<F>(boundaries);
    const auto random = random_inputs<F>(4096, 1);
    check_encode_all_modes<F>(random);
  });
}

// Far below the smallest subnormal more than 32 bits are dropped, and stochastic rounding rounds
// up with probability below 2^-9: many copies of each value, so that the window's exact value
// (and not just whether it is zero) decides some results.
TEST_CASE("convert: stochastic rounding of values far below the smallest subnormal") {
  for_each_tested_format([]<class F>() {
    std::mt19937 generator(6);
    std::uniform_real_distribution<float> significand(1.0f, 2.0f);
    std::vector<float> inputs;
    for (int below = 1; below <= 24; ++below) {
      const float value =
          std::ldexp(significand(generator), F::min_exponent - F::mantissa_bits - below);
      inputs.insert(inputs.end(), 4096, below % 2 ? value : -value);
    }
    check_encode<F>(inputs, {rounding::stochastic, overflow::standard, 11, 0});
  });
}

TEST_CASE("convert: every path decodes every code as defined") {
  for_each_tested_format([]<class F>() {
    using storage = typename F::storage_type;
    std::vector<storage> stored;
    if constexpr (F::storage_bits <= 16) {
      for (std::uint32_t bits = 0; bits <= std::numeric_limits<storage>::max(); ++bits) {
        // Padding bits are ignored by the definition; their stored value is still covered.
        stored.push_back(static_cast<storage>(bits));
      }
    } else {
      // Every code of the first and last 2^12 of each sign, the boundaries around the
      // smallest normal, and random storage words (padding bits included).
      for (std::uint32_t sign : {0u, F::sign_code}) {
        for (std::uint32_t c = 0; c < 4096; ++c) {
          stored.push_back(F::from_code(sign | c).bits());
          stored.push_back(F::from_code(sign | (F::magnitude_mask - c)).bits());
          stored.push_back(F::from_code(sign | ((1u << F::mantissa_bits) - 2048 + c)).bits());
        }
      }
      std::mt19937 generator(2);
      for (int k = 0; k < 65536; ++k) stored.push_back(static_cast<storage>(generator()));
    }
    check_decode<F>(stored);
  });
}

// widen (fp8 to bf16 codes): every code of every one-byte format that is exact in bf16, against
// the decoded value's fp32 bits cut to their top half (exact: the low half must be zero), in a
// guarded output.
TEST_CASE("convert: widen gives every fp8 code's exact bf16 code") {
  std::size_t formats = 0;
  for_each_tested_format([&]<class F>() {
    if constexpr (sizeof(typename F::storage_type) == 1 && exact_in_bf16<F>) {
      ++formats;
      std::vector<F> codes;
      for (std::uint32_t bits = 0; bits < 256; ++bits) {
        codes.push_back(F::from_bits(static_cast<typename F::storage_type>(bits)));
      }
      guarded_buffer<bf16> out(codes.size());
      widen(std::span<const F>(codes), out.span());
      for (std::size_t i = 0; i < codes.size(); ++i) {
        const auto bits = std::bit_cast<std::uint32_t>(codes[i].to_float());
        INFO(format_name<F>(), " code ", i);
        if (std::isnan(codes[i].to_float())) {
          CHECK(out.span()[i].is_nan());
          CHECK((out.span()[i].bits() >> 15) == (bits >> 31));  // the sign is kept
        } else {
          REQUIRE((bits & 0xffffu) == 0);
          CHECK(out.span()[i].bits() == (bits >> 16));
        }
      }
    }
  });
  CHECK(formats >= 4);  // e4m3, e4m3fn, e5m2, e3m4 and the small unnamed ones
  std::vector<fp8_e4m3> two(2);
  std::vector<bf16> three(3);
  CHECK_THROWS_AS(widen(std::span<const fp8_e4m3>(two), std::span<bf16>(three)), shape_error);
}

TEST_CASE("convert: lengths that are not multiples of the vector stay within both spans") {
  const auto pool = random_inputs<fp8_e4m3>(2500, 3);
  for_each_tested_format([&]<class F>() {
    for (std::size_t length : {0, 1, 7, 15, 16, 17, 31, 33, 1000, 4097}) {
      const std::span<const float> inputs(pool.data(), length);
      check_encode_all_modes<F>(inputs, 12345);
      std::vector<typename F::storage_type> stored(length);
      for (std::size_t i = 0; i < length; ++i) {
        stored[i] = static_cast<typename F::storage_type>(i * 2654435761u);
      }
      check_decode<F>(stored);
    }
  });
}

// Splitting a conversion at offsets, with first_index advanced by each offset, gives the bits of
// converting whole: pieces shorter than, equal to and not multiples of a vector, one of which
// crosses index 2^32 (the carry into the high word of the index) mid-vector.
TEST_CASE("convert: first_index makes any split equal converting whole") {
  const auto inputs = random_inputs<bf16>(500, 4);  // 1000 values
  const std::size_t cuts[] = {0, 3, 19, 35, 36, 52, 100, 613, 1000};
  const std::uint64_t bases[] = {0, (1ull << 32) - 37, ~0ull - 500};  // the last wraps 2^64
  for_each_tested_format([&]<class F>() {
    for (std::uint64_t base : bases) {
      for (rounding round : all_roundings) {
        const cast_options options{round, overflow::saturate, 99, 3};
        const auto expected = defined_codes<F>(inputs, options, base);
        check_encode_against<F>(inputs, expected, options, base);
        for_each_isa([&](isa level) {
          std::vector<F> pieces(inputs.size());
          for (std::size_t k = 0; k + 1 < std::size(cuts); ++k) {
            const std::size_t offset = cuts[k], size = cuts[k + 1] - cuts[k];
            guarded_buffer<float> from(size);
            std::copy_n(inputs.begin() + static_cast<std::ptrdiff_t>(offset), size, from.data());
            guarded_buffer<F> to(size);
            convert(from.cspan(), to.span(), options, base + offset);
            std::copy_n(to.data(), size, pieces.begin() + static_cast<std::ptrdiff_t>(offset));
          }
          std::size_t mismatches = 0;
          for (std::size_t i = 0; i < inputs.size(); ++i)
            mismatches += pieces[i].bits() != expected[i];
          const std::string context =
              describe(level, format_name<F>(), options) + " split at base " + std::to_string(base);
          CHECK_MESSAGE(mismatches == 0, context);
        });
      }
    }
  });
}

// Stochastic rounding draws different bits for different elements: a constant input halfway
// between two codes rounds both ways (so the vector paths do not reuse one lane's word).
TEST_CASE("convert: stochastic rounding varies across lanes") {
  const float halfway = 1.0f + 1.0f / 256;  // between bf16 1 and 1 + 2^-7
  std::vector<float> inputs(64, halfway);
  for_each_isa([&](isa level) {
    std::vector<bf16> out(inputs.size());
    convert(std::span<const float>(inputs), std::span<bf16>(out), {rounding::stochastic});
    int up = 0;
    for (bf16 value : out) up += value.bits() == 0x3f81;
    INFO(name(level));
    CHECK(up > 10);
    CHECK(up < 54);
  });
}

// The caller's MXCSR (flush-to-zero, denormals-are-zero, rounding toward zero) changes nothing:
// every path uses integer operations and instructions with an explicit rounding mode.
TEST_CASE("convert: results do not depend on the caller's MXCSR") {
  for_each_tested_format([]<class F>() {
    auto inputs = boundary_inputs<F>();
    inputs.resize(std::min<std::size_t>(inputs.size(), 20000));
    const auto more = random_inputs<F>(1024, 5);
    inputs.insert(inputs.end(), more.begin(), more.end());
    std::vector<std::vector<std::uint32_t>> expected;
    for (rounding round : all_roundings) {
      expected.push_back(defined_codes<F>(inputs, {round, overflow::standard, 1, 2}, 0));
    }
    std::vector<typename F::storage_type> stored;
    for (std::uint32_t c = 0; c < 4096; ++c) {
      stored.push_back(F::from_code(c & (F::sign_code | F::magnitude_mask)).bits());
    }
    std::vector<std::uint32_t> decoded;
    for (auto bits : stored) {
      decoded.push_back(std::bit_cast<std::uint32_t>(F::from_bits(bits).to_float()));
    }

    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040u | 0x6000u);  // FTZ, DAZ, round toward zero
    std::vector<std::string> failures;
    for_each_isa([&](isa level) {
      for (std::size_t m = 0; m < std::size(all_roundings); ++m) {
        std::vector<F> out(inputs.size());
        convert(std::span<const float>(inputs), std::span<F>(out),
                {all_roundings[m], overflow::standard, 1, 2});
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          if (out[i].bits() != expected[m][i]) {
            failures.push_back(std::string(name(level)) + " encode " +
                               std::string(name(all_roundings[m])) + " " +
                               hex(std::bit_cast<std::uint32_t>(inputs[i])));
            break;
          }
        }
      }
      std::vector<F> codes(stored.size());
      for (std::size_t i = 0; i < stored.size(); ++i) codes[i] = F::from_bits(stored[i]);
      std::vector<float> out(stored.size());
      convert(std::span<const F>(codes), std::span<float>(out));
      for (std::size_t i = 0; i < stored.size(); ++i) {
        if (std::bit_cast<std::uint32_t>(out[i]) != decoded[i]) {
          failures.push_back(std::string(name(level)) + " decode " + hex(stored[i]));
          break;
        }
      }
    });
    _mm_setcsr(saved);
    INFO(format_name<F>());
    for (const auto& failure : failures) FAIL_CHECK(failure);
  });
}

#if defined(TILEKERN_CONVERT_AVX2)
// bf16 elements interleaved across two vectors (element 2j in lane j of the first, 2j + 1 in lane
// j of the second), as elementwise loops over bf16 hold them: widen_bf16_interleaved gives every
// code's fp32 bits, and vector_encoder::interleaved gives the definition's codes, element i
// drawing its random word at first_index + i, in every mode, at index bases across 2^32 and 2^64;
// so does vector_encoder::in_order (two blocks in order, on 8 lanes and with AVX512-BF16 on 16).
template <class D>
void check_interleaved_bf16(D d, std::span<const float> all_inputs) {
  namespace hn = detail::hn;
  constexpr std::size_t lanes = hn::MaxLanes(D()), block = 2 * lanes;
  const std::string width = std::to_string(lanes) + " lanes";
  const auto inputs = all_inputs.first(all_inputs.size() / block * block);

  std::vector<bf16> codes(0x10000);
  for (std::size_t c = 0; c < codes.size(); ++c) {
    codes[c] = bf16::from_bits(static_cast<std::uint16_t>(c));
  }
  std::size_t widen_mismatches = 0;
  for (std::size_t i = 0; i < codes.size(); i += block) {
    const auto [even, odd] = detail::widen_bf16_interleaved(d, detail::storage_of(&codes[i]));
    alignas(64) float widened[2][lanes];
    hn::Store(even, d, widened[0]);
    hn::Store(odd, d, widened[1]);
    for (std::size_t j = 0; j < block; ++j) {
      const auto got = std::bit_cast<std::uint32_t>(widened[j % 2][j / 2]);
      widen_mismatches += got != static_cast<std::uint32_t>(i + j) << 16;
    }
  }
  CHECK_MESSAGE(widen_mismatches == 0, width);

  for (std::uint64_t base :
       {std::uint64_t{0}, (std::uint64_t{1} << 32) - 37, ~std::uint64_t{0} - 50}) {
    for (rounding round : all_roundings) {
      for (overflow on_overflow : all_overflows) {
        const cast_options options{round, on_overflow, 0x5eed, 7};
        const auto expected = defined_codes<bf16>(inputs, options, base);
        const auto check = [&](const char* encoder, auto&& encode_block) {
          guarded_buffer<bf16> out(inputs.size());
          detail::visit_rounding(round, [&](auto mode) {
            const detail::vector_encoder<bf16, D, decltype(mode)::value> encode(d, options);
            for (std::size_t i = 0; i < inputs.size(); i += block) {
              encode_block(encode, &inputs[i], detail::storage_of(out.data() + i), base + i);
            }
          });
          std::size_t mismatches = 0, first = 0;
          for (std::size_t i = 0; i < inputs.size(); ++i) {
            if (out[i].bits() != expected[i] && mismatches++ == 0) first = i;
          }
          CHECK_MESSAGE(mismatches == 0, encoder, ", ", width, " ", name(round), " ",
                        name(on_overflow), " base ", base, ": ", mismatches,
                        " differ; first input ", hex(std::bit_cast<std::uint32_t>(inputs[first])),
                        " gives ", hex(out[first].bits()), ", defined ", hex(expected[first]));
        };
        check("interleaved", [&](const auto& encode, const float* in, auto* out, std::uint64_t i) {
          alignas(64) float even[lanes], odd[lanes];
          for (std::size_t j = 0; j < lanes; ++j) {
            even[j] = in[2 * j];
            odd[j] = in[2 * j + 1];
          }
          encode.interleaved(hn::Load(d, even), hn::Load(d, odd), out, i);
        });
        // two blocks in order (lane_store::store_in_order)
        if constexpr (lanes == 8 || detail::uses_bf16_instruction<bf16, D>()) {
          check("in order", [&](const auto& encode, const float* in, auto* out, std::uint64_t i) {
            encode.in_order(hn::LoadU(d, in), hn::LoadU(d, in + lanes), out, i);
          });
        }
      }
    }
  }
}

TEST_CASE("convert: bf16 interleaved across two vectors widens and encodes as defined") {
  auto inputs = boundary_inputs<bf16>();
  const auto random = random_inputs<bf16>(4096, 6);
  inputs.insert(inputs.end(), random.begin(), random.end());
  check_interleaved_bf16(detail::avx2_lanes(), inputs);
#if defined(TILEKERN_CONVERT_AVX512)
  check_interleaved_bf16(detail::avx512_lanes(), inputs);
#endif
}
#endif

TEST_CASE("convert: spans of different sizes throw shape_error before writing") {
  std::vector<float> wide(17, 1.0f);
  std::vector<fp16> narrow(16, fp16::from_bits(0x1234));
  for_each_isa([&](isa) {
    CHECK_THROWS_AS(convert(std::span<const float>(wide), std::span<fp16>(narrow)), shape_error);
    CHECK(narrow[0].bits() == 0x1234);
    std::vector<float> out(3, 5.0f);
    CHECK_THROWS_AS(convert(std::span<const fp16>(narrow), std::span<float>(out)), shape_error);
    CHECK(out[0] == 5.0f);
  });
}

}  // namespace
}  // namespace tilekern
