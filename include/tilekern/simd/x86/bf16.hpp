#pragma once
// bf16 <-> fp32 on x86: AVX512-BF16's vcvtneps2bf16 (16 lanes, round to nearest even), and AVX2
// sequences for 8 lanes that use fewer shift and shuffle operations than the general Highway
// code (simd/convert_vector.hpp), which on AVX2 machines are what limits a bf16 loop: those
// operations run on two of the four vector ports of the CPUs measured (CONTRIBUTING.md).
//
// vcvtneps2bf16 matches bf16's rounding (types/minifloat.hpp) with standard overflow and NaNs
// quieted with the top 7 payload bits kept, except that fp32 subnormal inputs are read as zero (the
// instruction always behaves as if MXCSR.DAZ were set): callers must route those lanes elsewhere.

#include <immintrin.h>

#include <bit>
#include <cstdint>

namespace tilekern::x86 {

#if defined(__AVX512BF16__)
inline __m256i bf16_from_float_nearest(__m512 x) {
  return std::bit_cast<__m256i>(_mm512_cvtneps_pbh(x));
}

// The codes of two blocks of 16 lanes in order, first's then second's: one vcvtne2ps2bf16, which
// puts its second operand's codes below its first's.
inline __m512i bf16_in_order_from_float_nearest(__m512 first, __m512 second) {
  return std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(second, first));
}

// The codes of two blocks of 16 lanes interleaved: word 2j holds even's lane j, word 2j + 1 odd's
// (vector_encoder::interleaved): one vcvtne2ps2bf16 of both and one 16-bit permute.
inline __m512i bf16_interleaved_from_float_nearest(__m512 even, __m512 odd) {
  const __m512i in_order = bf16_in_order_from_float_nearest(even, odd);
  const __m512i interleave =
      _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave, in_order);
}

// Whether MXCSR.DAZ is set in this thread: then vfpclassps reads fp32 subnormals as zero.
inline bool denormals_are_zero() {
  return (_mm_getcsr() & 0x40u) != 0;
}

// The lanes of x that are fp32 subnormals (exponent field 0, mantissa not 0), which vcvtneps2bf16
// reads as 0, where `daz` is denormals_are_zero() of the calling thread: one vfpclassps where DAZ
// is clear; where it is set, vfpclassps sees zeros, so two bit tests, the second under the first's
// mask. (The bit tests made a bf16 relu loop at 1 Mi elements 16% slower on Zen 4, where mask
// results are what such a loop waits for: CONTRIBUTING.md.)
inline __mmask16 fp32_subnormal_lanes(__m512 x, bool daz) {
  if (!daz) [[likely]] {
    return _mm512_fpclass_ps_mask(x, 0x20);  // 0x20: denormal
  }
  const __m512i bits = _mm512_castps_si512(x);
  const __mmask16 zero_exponent = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_test_epi32_mask(zero_exponent, bits, _mm512_set1_epi32(0x7fffff));
}

// Whether any lane of x, or of y, is an fp32 subnormal (fp32_subnormal_lanes). The masks are moved
// to general registers and tested there: gcc tests the masks themselves with kortestw, and on Zen 4
// a bf16 relu over 1 Mi elements ran 8% faster without it (CONTRIBUTING.md).
inline bool any_fp32_subnormal(__m512 x, __m512 y, bool daz) {
  return (_cvtmask16_u32(fp32_subnormal_lanes(x, daz)) |
          _cvtmask16_u32(fp32_subnormal_lanes(y, daz))) != 0;
}
inline bool any_fp32_subnormal(__m512 x, bool daz) {
  return _cvtmask16_u32(fp32_subnormal_lanes(x, daz)) != 0;
}
#endif

#if defined(__AVX2__)
// The fp32 patterns of 8 bf16 codes (each code the top half of its lane; NaNs as they are): one
// 16-byte broadcast load and one byte shuffle (where widening and shifting take two shuffle-port
// operations).
inline __m256i float_bits_from_bf16(const std::uint16_t* codes) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m256i high_halves = _mm256_setr_epi8(
      -1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,         // codes 0..3 into lanes 0..3
      -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);  // codes 4..7 into lanes 4..7
  return _mm256_shuffle_epi8(both, high_halves);
}

// bf16's from (types/minifloat.hpp) for 8 fp32 bit patterns, standard overflow, rounding by
// `increment` (each lane below 2^16, added to the dropped low half: 0x7fff + the kept lsb for
// nearest even, 16 random bits for stochastic, 0 toward zero). bf16 has fp32's exponent field, so
// the sum's high half is the code for every input, subnormals included: a carry runs into the
// exponent by itself, and from max into inf. It reaches the sign only from a NaN, whose lanes
// take the quieted NaN (the top 7 payload bits kept). Returns the codes in the high halves.
inline __m256i bf16_codes_in_high_halves(__m256i bits, __m256i increment) {
  const __m256i rounded = _mm256_add_epi32(bits, increment);
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x400000));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

// The nearest-even increment of bf16_codes_in_high_halves.
inline __m256i bf16_nearest_increment(__m256i bits) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
}

// The high halves of 8 lanes, in order: one byte shuffle and one 64-bit permute.
inline __m128i bf16_from_high_halves(__m256i codes) {
  const __m256i high_halves =
      _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10,
                       11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i packed = _mm256_shuffle_epi8(codes, high_halves);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}
// The high halves of 16 lanes, a's 8 and then b's, in order: two shifts, one pack (which takes
// each 128-bit half of a and b in turn) and one 64-bit permute.
inline __m256i bf16_from_high_halves(__m256i a, __m256i b) {
  const __m256i packed = _mm256_packus_epi32(_mm256_srli_epi32(a, 16), _mm256_srli_epi32(b, 16));
  return _mm256_permute4x64_epi64(packed, 0xd8);
}
#endif

}  // namespace tilekern::x86
