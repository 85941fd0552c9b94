#pragma once
// Bulk conversion between fp32 and every format, on the best ISA path (simd/isa.hpp).
//
// Every path gives the same bits as the scalar definition in types/minifloat.hpp, in every
// rounding and overflow mode: element i of a call draws its stochastic random bits with index
// first_index + i, so converting a tensor in pieces (passing each piece's offset) gives the
// same bits as converting it whole, whatever the ISA path or thread count.
//
// Paths (active_isa()): scalar runs the definition element by element; avx2 runs
// simd/convert_vector.hpp on 8 lanes, with F16C for fp16; avx512 and amx run it on 16 lanes,
// with AVX-512F's vcvtps2ph/vcvtph2ps for fp16 and AVX512-BF16's vcvtneps2bf16 for bf16 round
// to nearest even where the compiler targets it. A path missing from the build (compiled_isa())
// is never chosen.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "tilekern/error.hpp"
#include "tilekern/simd/convert_vector.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/types/minifloat.hpp"

namespace tilekern {

namespace detail {

template <minifloat_format F>
void encode_scalar(const float* from, F* to, std::size_t n, const cast_options& options,
                   std::uint64_t first_index) {
  const random_key key = random_key::from(options.seed, options.stream);
  const bool stochastic = options.round == rounding::stochastic;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t random = stochastic ? random_bits(key, first_index + i) : 0;
    to[i] = F::from(from[i], options.round, options.on_overflow, random);
  }
}

template <minifloat_format F>
void decode_scalar(const F* from, float* to, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) to[i] = from[i].to_float();
}

}  // namespace detail

// fp32 -> F. Throws shape_error if the spans differ in size.
template <minifloat_format F>
void convert(std::span<const float> from, std::span<F> to, const cast_options& options = {},
             std::uint64_t first_index = 0) {
  detail::check_size("tilekern::convert", "to", to.size(), from.size());
  [[maybe_unused]] const isa level = active_isa();
#if defined(TILEKERN_CONVERT_AVX512)
  if (level >= isa::avx512) {
    return detail::encode_vector(detail::avx512_lanes(), from.data(), to.data(), from.size(),
                                 options, first_index);
  }
#endif
#if defined(TILEKERN_CONVERT_AVX2)
  if (level >= isa::avx2) {
    return detail::encode_vector(detail::avx2_lanes(), from.data(), to.data(), from.size(), options,
                                 first_index);
  }
#endif
  detail::encode_scalar(from.data(), to.data(), from.size(), options, first_index);
}

// F -> fp32, exact. Throws shape_error if the spans differ in size.
template <minifloat_format F>
void convert(std::span<const F> from, std::span<float> to) {
  detail::check_size("tilekern::convert", "to", to.size(), from.size());
  [[maybe_unused]] const isa level = active_isa();
#if defined(TILEKERN_CONVERT_AVX512)
  if (level >= isa::avx512) {
    return detail::decode_vector(detail::avx512_lanes(), from.data(), to.data(), from.size());
  }
#endif
#if defined(TILEKERN_CONVERT_AVX2)
  if (level >= isa::avx2) {
    return detail::decode_vector(detail::avx2_lanes(), from.data(), to.data(), from.size());
  }
#endif
  detail::decode_scalar(from.data(), to.data(), from.size());
}

// F -> bf16, exact, for one-byte formats whose values are all bf16 values (every fp8 format), by
// a table of the bf16 codes of the 128 magnitudes, the sign copied across. Throws shape_error if
// the spans differ in size.
namespace detail {

template <minifloat_format F>
requires(exact_in_bf16<F> &&
         sizeof(typename F::storage_type) == 1) const std::array<std::uint16_t, 128>& bf16_table() {
  static const std::array<std::uint16_t, 128> table = [] {
    std::array<std::uint16_t, 128> codes{};
    for (std::uint32_t i = 0; i < 128; ++i) {
      const float x = F::from_bits(static_cast<typename F::storage_type>(i)).to_float();
      codes[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x) >> 16);
    }
    return codes;
  }();
  return table;
}

}  // namespace detail

template <minifloat_format F>
requires(exact_in_bf16<F> && sizeof(typename F::storage_type) ==
                                 1) void widen(std::span<const F> from, std::span<bf16> to) {
  detail::check_size("tilekern::widen", "to", to.size(), from.size());
  const auto& table = detail::bf16_table<F>();
  const auto* codes = reinterpret_cast<const std::uint8_t*>(from.data());
  auto* out = reinterpret_cast<std::uint16_t*>(to.data());
  for (std::size_t i = 0; i < from.size(); ++i) {
    out[i] = static_cast<std::uint16_t>(table[codes[i] & 0x7fu] | (codes[i] & 0x80u) << 8);
  }
}

}  // namespace tilekern
