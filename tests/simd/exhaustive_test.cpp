// Every fp32 input for bf16 and fp16, in nearest-even and toward-zero with both overflow modes:
// minifloat::from against an independent reference, the bulk convert() on every vector path, bf16's
// interleaved and in-order encoders of two blocks (elementwise loops) at every vector width, and
// the hardware conversions where the CPU has them. And every code of both through every path.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <barrier>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "support/guarded.hpp"
#include "tilekern/simd/convert.hpp"
#include "types/reference.hpp"

namespace tilekern::test {
namespace {

constexpr std::size_t chunk_size = std::size_t{1} << 15;
constexpr std::uint64_t all_inputs = std::uint64_t{1} << 32;
constexpr unsigned thread_count = 2;

// The four mode combinations, in the order of the expected-code arrays.
struct mode {
  rounding round;
  overflow on_overflow;
};
constexpr std::array<mode, 4> modes = {{{rounding::nearest_even, overflow::standard},
                                        {rounding::nearest_even, overflow::saturate},
                                        {rounding::toward_zero, overflow::standard},
                                        {rounding::toward_zero, overflow::saturate}}};

// A fast reference for an ieee format from fp32, from the fields: the input's binade (clamped
// to the format's subnormal range) fixes the spacing 2^(e - M); |x| / spacing is exact in
// double; floor and the fraction decide; the result is put back together from the fields.
template <class F>
struct fast_reference {
  static_assert(F::special_values == specials::ieee);
  static constexpr int mantissa_bits = F::mantissa_bits;
  static constexpr int min_exponent = 1 - F::bias;
  static constexpr std::uint32_t sign_bit = 1u << (F::exponent_bits + mantissa_bits);
  static constexpr std::uint32_t exponent_ones = (1u << F::exponent_bits) - 1;
  static constexpr std::uint32_t mantissa_ones = (1u << mantissa_bits) - 1;
  static constexpr std::uint32_t infinity = exponent_ones << mantissa_bits;
  static constexpr std::uint32_t max = ((exponent_ones - 1) << mantissa_bits) | mantissa_ones;
  static constexpr std::uint32_t overflowed = ~0u;

  std::array<double, 320> powers{};  // 2^(k - 160)

  fast_reference() {
    for (int k = 0; k < 320; ++k) powers[k] = std::ldexp(1.0, k - 160);
  }

  // The code of k spacings of 2^(exponent - M), or `overflowed`.
  static std::uint32_t compose(int exponent, std::uint32_t k) {
    if (exponent == min_exponent && k < (1u << mantissa_bits)) return k;  // subnormal or zero
    if (k == (2u << mantissa_bits)) {  // rounded up into the next binade
      ++exponent;
      k = 1u << mantissa_bits;
    }
    const auto field = static_cast<std::uint32_t>(exponent + F::bias);
    if (field >= exponent_ones) return overflowed;
    return (field << mantissa_bits) | (k - (1u << mantissa_bits));
  }

  // Codes for the four modes, in the order of `modes`.
  std::array<std::uint32_t, 4> codes(std::uint32_t bits) const {
    const std::uint32_t sign = (bits >> 31) != 0 ? sign_bit : 0;
    const std::uint32_t exponent_field = (bits >> 23) & 0xff;
    const std::uint32_t fraction = bits & 0x7fffff;
    if (exponent_field == 0xff) {
      if (fraction != 0) {
        const std::uint32_t nan =
            sign | infinity | (1u << (mantissa_bits - 1)) | (fraction >> (23 - mantissa_bits));
        return {nan, nan, nan, nan};
      }
      return {sign | infinity, sign | max, sign | infinity, sign | max};
    }
    const double magnitude = std::fabs(static_cast<double>(std::bit_cast<float>(bits)));
    const int exponent =
        std::max(exponent_field == 0 ? -126 : static_cast<int>(exponent_field) - 127, min_exponent);
    const double spacings = magnitude * powers[mantissa_bits - exponent + 160];  // exact
    const double whole = std::floor(spacings);
    const double fraction_of_spacing = spacings - whole;
    const auto down = static_cast<std::uint32_t>(whole);
    const bool up = fraction_of_spacing > 0.5 || (fraction_of_spacing == 0.5 && (down & 1) != 0);
    const std::uint32_t nearest = compose(exponent, down + (up ? 1 : 0));
    const std::uint32_t zero = compose(exponent, down);
    return {sign | (nearest == overflowed ? infinity : nearest),
            sign | (nearest == overflowed ? max : nearest),
            sign | (zero == overflowed ? infinity : zero),
            sign | (zero == overflowed ? max : zero)};
  }
};

// One thread's buffers for one chunk.
template <class F>
struct chunk {
  std::vector<float> input = std::vector<float>(chunk_size);
  std::array<std::vector<std::uint16_t>, 4> expected;
  std::vector<F> output = std::vector<F>(chunk_size);
  std::vector<std::uint16_t> hardware = std::vector<std::uint16_t>(chunk_size);
  mismatches failures;

  chunk() {
    for (auto& codes : expected) codes.resize(chunk_size);
  }
};

template <class F>
void compare(const chunk<F>& work, std::span<const std::uint16_t> got, std::size_t combo,
             const char* what, mismatches& failures) {
  if (std::memcmp(got.data(), work.expected[combo].data(), chunk_size * 2) == 0) return;
  for (std::size_t i = 0; i < chunk_size; ++i) {
    if (got[i] != work.expected[combo][i]) {
      failures.add(format_name<F>(), " ", what, " ", name(modes[combo].round), " ",
                   name(modes[combo].on_overflow), " input ",
                   hex(std::bit_cast<std::uint32_t>(work.input[i])), ": ", hex(got[i]),
                   ", expected ", hex(work.expected[combo][i]));
    }
  }
}

// The hardware conversions, with their documented differences from tilekern.
template <class F>
void check_hardware(chunk<F>& work) {
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (std::is_same_v<F, fp16>) {
    if (!detected_cpu_features().avx2) return;
    for (int rounding_bits : {0, 3}) {  // imm 0: nearest even, 3: toward zero
      for (std::size_t i = 0; i < chunk_size; i += 8) {
        const __m256 x = _mm256_loadu_ps(&work.input[i]);
        const __m128i h = rounding_bits == 0 ? _mm256_cvtps_ph(x, 0) : _mm256_cvtps_ph(x, 3);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(&work.hardware[i]), h);
      }
      if (rounding_bits == 0) {
        // vcvtps2ph with imm 0 is IEEE roundTiesToEven: exactly tilekern's default.
        compare<F>(work, work.hardware, 0, "vcvtps2ph(nearest)", work.failures);
        continue;
      }
      // IEEE roundTowardZero overflows a finite input to max, tilekern (standard) to inf:
      // so the hardware matches saturate for finite inputs and standard for inf and NaN.
      for (std::size_t i = 0; i < chunk_size; ++i) {
        const bool finite = std::isfinite(work.input[i]);
        const std::uint16_t want = work.expected[finite ? 3 : 2][i];
        if (work.hardware[i] != want) {
          work.failures.add("vcvtps2ph(zero) input ",
                            hex(std::bit_cast<std::uint32_t>(work.input[i])), ": ",
                            hex(work.hardware[i]), ", expected ", hex(want));
        }
      }
    }
  }
#endif
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  if constexpr (std::is_same_v<F, bf16>) {
    if (!detected_cpu_features().avx512_bf16) return;
    for (std::size_t i = 0; i < chunk_size; i += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(&work.input[i]));
      std::memcpy(&work.hardware[i], &h, sizeof h);
    }
    // Intel SDM, VCVTNEPS2BF16: round to nearest even, MXCSR not consulted, and "denormal
    // inputs are treated as zero": an fp32 subnormal gives a zero of its sign. Otherwise
    // (NaN: top bits, quiet; overflow: inf) exactly tilekern's default.
    for (std::size_t i = 0; i < chunk_size; ++i) {
      const auto bits = std::bit_cast<std::uint32_t>(work.input[i]);
      const bool subnormal = (bits & 0x7f800000u) == 0 && (bits & 0x7fffffu) != 0;
      const std::uint16_t want =
          subnormal ? static_cast<std::uint16_t>((bits >> 16) & 0x8000u) : work.expected[0][i];
      if (work.hardware[i] != want) {
        work.failures.add("vcvtneps2bf16 input ", hex(bits), ": ", hex(work.hardware[i]),
                          ", expected ", hex(want));
      }
    }
  }
#endif
  (void)work;
}

#if defined(TILEKERN_CONVERT_AVX2)
// vector_encoder::interleaved (elementwise loops over bf16) at the lanes of D, in every mode: the
// chunk regrouped into blocks of 2 * lanes, each block its even elements, then its odd ones.
template <class D>
void check_interleaved(D d, chunk<bf16>& work) {
  namespace hn = detail::hn;
  constexpr std::size_t lanes = hn::MaxLanes(D());
  std::vector<float> regrouped(chunk_size);
  for (std::size_t i = 0; i < chunk_size; i += 2 * lanes) {
    for (std::size_t j = 0; j < 2 * lanes; ++j) {
      regrouped[i + (j % 2) * lanes + j / 2] = work.input[i + j];
    }
  }
  const std::string label = "interleaved encoder, " + std::to_string(lanes) + " lanes";
  for (std::size_t c = 0; c < 4; ++c) {
    const cast_options options{modes[c].round, modes[c].on_overflow};
    detail::visit_rounding(options.round, [&](auto mode) {
      const detail::vector_encoder<bf16, D, decltype(mode)::value> encode(d, options);
      for (std::size_t i = 0; i < chunk_size; i += 2 * lanes) {
        encode.interleaved(hn::LoadU(d, &regrouped[i]), hn::LoadU(d, &regrouped[i + lanes]),
                           &work.hardware[i], i);
      }
    });
    compare<bf16>(work, work.hardware, c, label.c_str(), work.failures);
  }
}

// vector_encoder::in_order (two blocks of bf16 elements in order, lane_store::store_in_order) in
// every mode, on lanes of D.
template <class D>
void check_in_order(D d, chunk<bf16>& work) {
  namespace hn = detail::hn;
  constexpr std::size_t lanes = hn::MaxLanes(D());
  const std::string label = "in-order encoder, " + std::to_string(lanes) + " lanes";
  for (std::size_t c = 0; c < 4; ++c) {
    const cast_options options{modes[c].round, modes[c].on_overflow};
    detail::visit_rounding(options.round, [&](auto mode) {
      const detail::vector_encoder<bf16, D, decltype(mode)::value> encode(d, options);
      for (std::size_t i = 0; i < chunk_size; i += 2 * lanes) {
        encode.in_order(hn::LoadU(d, &work.input[i]), hn::LoadU(d, &work.input[i + lanes]),
                        &work.hardware[i], i);
      }
    });
    compare<bf16>(work, work.hardware, c, label.c_str(), work.failures);
  }
}
#endif

// from() with the modes as constants, so that the check itself is cheap.
template <class F, rounding Round, overflow OnOverflow>
void from_each(const std::vector<float>& input, std::vector<std::uint16_t>& output) {
  for (std::size_t i = 0; i < chunk_size; ++i) {
    output[i] = F::from(input[i], Round, OnOverflow, 0).bits();
  }
}

// The paths whose convert() the sweep checks: the vector ones. The scalar path is from() element
// by element (detail::encode_scalar), which the sweep checks in every mode; convert_test.cpp checks
// that loop on every path. The amx path converts as the avx512 one does.
std::vector<isa> vector_paths() {
  std::vector<isa> levels = available_isas();
  std::erase_if(levels, [](isa level) { return level == isa::scalar || level == isa::amx; });
  return levels;
}

// Every chunk of the 2^32 inputs, on two threads in lockstep: each chunk's reference is
// computed once, then checked against from(), the hardware, and convert() on every vector path
// (the cap is process-wide, so the threads switch it together between barriers).
template <class F>
mismatches sweep() {
  const fast_reference<F> reference;
  const std::vector<isa> levels = vector_paths();
  const auto previous_cap = isa_cap();
  std::array<chunk<F>, thread_count> works;
  std::barrier sync(thread_count);
  constexpr std::uint64_t rounds = all_inputs / (chunk_size * thread_count);
  constexpr std::array from_functions = {&from_each<F, rounding::nearest_even, overflow::standard>,
                                         &from_each<F, rounding::nearest_even, overflow::saturate>,
                                         &from_each<F, rounding::toward_zero, overflow::standard>,
                                         &from_each<F, rounding::toward_zero, overflow::saturate>};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      chunk<F>& work = works[t];
      for (std::uint64_t round = 0; round < rounds; ++round) {
        const std::uint64_t first = (round * thread_count + t) * chunk_size;
        for (std::size_t i = 0; i < chunk_size; ++i) {
          const auto bits = static_cast<std::uint32_t>(first + i);
          work.input[i] = std::bit_cast<float>(bits);
          const auto codes = reference.codes(bits);
          for (std::size_t c = 0; c < 4; ++c) {
            work.expected[c][i] = static_cast<std::uint16_t>(codes[c]);
          }
        }
        for (std::size_t c = 0; c < 4; ++c) {
          from_functions[c](work.input, work.hardware);
          compare<F>(work, work.hardware, c, "from", work.failures);
        }
        check_hardware<F>(work);
#if defined(TILEKERN_CONVERT_AVX2)
        if constexpr (std::is_same_v<F, bf16>) {
          check_interleaved(detail::avx2_lanes(), work);
          check_in_order(detail::avx2_lanes(), work);
#if defined(TILEKERN_CONVERT_AVX512)
          check_interleaved(detail::avx512_lanes(), work);
          if constexpr (detail::uses_bf16_instruction<bf16, decltype(detail::avx512_lanes())>()) {
            check_in_order(detail::avx512_lanes(), work);
          }
#endif
        }
#endif
        for (isa level : levels) {
          sync.arrive_and_wait();  // both threads are done with the previous path
          if (t == 0) set_isa_cap(level);
          sync.arrive_and_wait();
          const std::string label = "convert on " + std::string(name(level));
          for (std::size_t c = 0; c < 4; ++c) {
            const cast_options options{modes[c].round, modes[c].on_overflow};
            convert(std::span<const float>(work.input), std::span<F>(work.output), options);
            compare<F>(work,
                       std::span<const std::uint16_t>(
                           reinterpret_cast<const std::uint16_t*>(work.output.data()), chunk_size),
                       c, label.c_str(), work.failures);
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  set_isa_cap(previous_cap);
  mismatches all;
  for (auto& work : works) {
    if (work.failures.count() != 0) all.add(work.failures.count(), ":\n", work.failures.text());
  }
  return all;
}

template <class F>
void check_every_input() {
  const auto start = std::chrono::steady_clock::now();
  const mismatches failures = sweep<F>();
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  std::printf("exhaustive %s (from, hardware, convert on %zu vector paths): %.1f s\n",
              format_name<F>().c_str(), vector_paths().size(), seconds.count());
  INFO(format_name<F>(), "\n", failures.text());
  CHECK(failures.count() == 0);
}

TEST_SUITE("long") {
  TEST_CASE("exhaustive: every fp32 input to bf16") {
    check_every_input<bf16>();
  }
  TEST_CASE("exhaustive: every fp32 input to fp16") {
    check_every_input<fp16>();
  }

  TEST_CASE("exhaustive: every bf16 and fp16 code decodes the same on every path") {
    for_each_format([]<class F>() {
      if constexpr (sizeof(F) == 2) {
        constexpr std::size_t count = 0x10000;
        guarded_buffer<F> codes(count);
        for (std::size_t code = 0; code < count; ++code) {
          codes[code] = F::from_bits(static_cast<std::uint16_t>(code));
        }
        std::vector<std::uint32_t> want(count);
        for (std::size_t code = 0; code < count; ++code) {
          want[code] = decoded_float_bits<F>(static_cast<std::uint32_t>(code));
        }
        mismatches failures;
        const auto check = [&](const char* path, const float* got) {
          for (std::size_t code = 0; code < count; ++code) {
            if (std::bit_cast<std::uint32_t>(got[code]) != want[code]) {
              failures.add(format_name<F>(), " ", path, " code ", hex(code), ": ",
                           hex(std::bit_cast<std::uint32_t>(got[code])), ", expected ",
                           hex(want[code]));
            }
          }
        };
        std::vector<float> scalar(count);
        for (std::size_t code = 0; code < count; ++code) scalar[code] = codes[code].to_float();
        check("to_float", scalar.data());
        for_each_isa([&](isa level) {
          guarded_buffer<float> decoded(count);
          convert(codes.cspan(), decoded.span());
          check(std::string(name(level)).c_str(), decoded.data());
        });
#if defined(__F16C__) && defined(__AVX__)
        if constexpr (std::is_same_v<F, fp16>) {
          if (detected_cpu_features().avx2) {
            std::vector<float> hardware(count);
            for (std::size_t code = 0; code < count; code += 8) {
              const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&codes[code]));
              _mm256_storeu_ps(&hardware[code], _mm256_cvtph_ps(h));
            }
            check("vcvtph2ps", hardware.data());  // quiets NaN, keeps the payload: as tilekern
          }
        }
#endif
        INFO(failures.text());
        CHECK(failures.count() == 0);
      }
    });
  }
}

}  // namespace
}  // namespace tilekern::test
