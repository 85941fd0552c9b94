#pragma once
// The tensor engine's atoms: one multiply-accumulate instruction of each ISA path, and nothing
// else. engine/tensor.hpp builds its register-blocked tile matmul on them; an atom knows its
// instruction, its register type and the layout of one k-step of packed operands.
//
// An atom has
//   lanes         fp32 accumulators in one register
//   depth         k values one instruction takes per accumulator (1: an fma; 2: a bf16 pair)
//   operand       the packed element of A: float, or a bf16 code (std::uint16_t)
//   b_operand     the packed element of B: operand, or (decoding atoms) a format's code
//   accumulator   the register type
//   zero(), load(const float*), store(float*, accumulator)     lanes fp32 values
//   load_b(const b_operand*)     one k-step of B for `lanes` columns: lanes * depth operands,
//                                depth consecutive k values of a column side by side
//   broadcast_a(const operand*)  one k-step of one row of A (depth operands) in every lane
//   mma(c, a, b)                 c + the depth products a * b, summed into each lane
//
// Numerics. The fp32 atoms compute c + a * b with one rounding (a fused multiply-add). The
// avx512_bf16 atom is AVX512-BF16's vdpbf16ps, which computes c + a0 * b0 + a1 * b1 as two
// roundings, the products exact (a bf16 times a bf16 fits in fp32), with the caller's MXCSR
// ignored: round to nearest even, subnormal inputs read as zero and subnormal results flushed to
// zero (Intel's definition; AMX's tdpbf16ps, the same in tiles, behaves alike). avx2_bf16_emulated
// computes the same sums with AVX2, for testing the pair path anywhere (see there). The decoding
// atoms (avx512_fp32_decoding, avx2_fp32_decoding) are avx512_fp32 and avx2_fp32 reading B as
// packed codes: the same fmas in the same order, so the same bits.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tilekern/simd/convert_vector.hpp"
#include "tilekern/simd/x86/fp16.hpp"
#include "tilekern/types/minifloat.hpp"

#if defined(TILEKERN_CONVERT_AVX2)
#include <immintrin.h>
#endif

namespace tilekern::tensor::atoms {

// fp32 fma on one lane: the scalar path, and the reference for the vector atoms' numerics.
struct scalar_fp32 {
  static constexpr std::size_t lanes = 1;
  static constexpr std::size_t depth = 1;
  using operand = float;
  using b_operand = operand;
  using accumulator = float;

  static accumulator zero() { return 0.0f; }
  static accumulator load(const float* from) { return *from; }
  static void store(float* to, accumulator c) { *to = c; }
  static float load_b(const operand* b) { return *b; }
  static float broadcast_a(const operand* a) { return *a; }
  static accumulator mma(accumulator c, float a, float b) { return std::fma(a, b, c); }
};

#if defined(TILEKERN_CONVERT_AVX2)
// vfmadd231ps on 8 lanes.
struct avx2_fp32 {
  static constexpr std::size_t lanes = 8;
  static constexpr std::size_t depth = 1;
  using operand = float;
  using b_operand = operand;
  using accumulator = __m256;

  static accumulator zero() { return _mm256_setzero_ps(); }
  static accumulator load(const float* from) { return _mm256_loadu_ps(from); }
  static void store(float* to, accumulator c) { _mm256_storeu_ps(to, c); }
  static __m256 load_b(const operand* b) { return _mm256_loadu_ps(b); }
  static __m256 broadcast_a(const operand* a) { return _mm256_broadcast_ss(a); }
  static accumulator mma(accumulator c, __m256 a, __m256 b) { return _mm256_fmadd_ps(a, b, c); }
};
#endif

#if defined(TILEKERN_CONVERT_AVX512)
// vfmadd231ps on 16 lanes.
struct avx512_fp32 {
  static constexpr std::size_t lanes = 16;
  static constexpr std::size_t depth = 1;
  using operand = float;
  using b_operand = operand;
  using accumulator = __m512;

  static accumulator zero() { return _mm512_setzero_ps(); }
  static accumulator load(const float* from) { return _mm512_loadu_ps(from); }
  static void store(float* to, accumulator c) { _mm512_storeu_ps(to, c); }
  static __m512 load_b(const operand* b) { return _mm512_loadu_ps(b); }
  static __m512 broadcast_a(const operand* a) { return _mm512_set1_ps(*a); }
  static accumulator mma(accumulator c, __m512 a, __m512 b) { return _mm512_fmadd_ps(a, b, c); }
};
#endif

#if defined(TILEKERN_CONVERT_AVX512) && defined(__AVX512BF16__)
#define TILEKERN_HAVE_AVX512_BF16_ATOM 1
// vdpbf16ps: 16 lanes, each adding two bf16 products.
struct avx512_bf16 {
  static constexpr std::size_t lanes = 16;
  static constexpr std::size_t depth = 2;
  using operand = std::uint16_t;
  using b_operand = operand;
  using accumulator = __m512;

  static accumulator zero() { return _mm512_setzero_ps(); }
  static accumulator load(const float* from) { return _mm512_loadu_ps(from); }
  static void store(float* to, accumulator c) { _mm512_storeu_ps(to, c); }
  static __m512bh load_b(const operand* b) { return (__m512bh)_mm512_loadu_si512(b); }
  static __m512bh broadcast_a(const operand* a) {
    std::uint32_t pair = 0;
    __builtin_memcpy(&pair, a, sizeof pair);
    return (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
  }
  static accumulator mma(accumulator c, __m512bh a, __m512bh b) {
    return _mm512_dpbf16_ps(c, a, b);
  }
};
#endif

#if defined(TILEKERN_CONVERT_AVX2)
// vdpbf16ps emulated on 8 lanes with AVX2: each pair's two products added by two fused
// multiply-adds in the instruction's order (the odd k first). A product of two bf16 values is
// exact, so each fma rounds as the instruction's add does: the same bits as vdpbf16ps but for
// subnormals, which this keeps. It runs only when asked (TILEKERN_BF16_PAIRS=on,
// engine/tensor.hpp), so that the bf16-pair layout, packing and blocking are tested on CPUs without
// AVX512-BF16.
struct avx2_bf16_emulated {
  static constexpr std::size_t lanes = 8;
  static constexpr std::size_t depth = 2;
  using operand = std::uint16_t;
  using b_operand = operand;
  using accumulator = __m256;

  static accumulator zero() { return _mm256_setzero_ps(); }
  static accumulator load(const float* from) { return _mm256_loadu_ps(from); }
  static void store(float* to, accumulator c) { _mm256_storeu_ps(to, c); }
  static __m256i load_b(const operand* b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
  }
  static __m256i broadcast_a(const operand* a) {
    std::uint32_t pair = 0;
    __builtin_memcpy(&pair, a, sizeof pair);
    return _mm256_set1_epi32(static_cast<int>(pair));
  }
  static accumulator mma(accumulator c, __m256i a, __m256i b) {
    return _mm256_fmadd_ps(even(a), even(b), _mm256_fmadd_ps(odd(a), odd(b), c));
  }

 private:
  // The bf16 in the low (even k) and high (odd k) half of each 32-bit pair, as fp32.
  static __m256 even(__m256i pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)); }
  static __m256 odd(__m256i pairs) {
    return _mm256_castsi256_ps(
        _mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
};
#endif

// Formats that avx2_fp32_decoding reads: bf16, and 8-bit formats exact in bf16 whose codes, moved
// into fp16's fields, are fp16 codes of their values times a power of two (1 to 5 exponent bits, at
// least 2 mantissa bits): every fp8 format here.
template <class T>
inline constexpr bool decodable = [] {
  if constexpr (std::is_same_v<T, bf16>) {
    return true;
  } else if constexpr (minifloat_format<T>) {
    return exact_in_bf16<T> && 1 + T::exponent_bits + T::mantissa_bits == 8 &&
           T::exponent_bits <= 5 && T::mantissa_bits >= 2 && T::bias > -100 && T::bias < 100;
  } else {
    return false;
  }
}();

#if defined(TILEKERN_CONVERT_AVX2)
// avx2_fp32 reading B in the bf16-pairs layout (two consecutive k of a column side by side) as
// codes of Stored, decoded in registers, with A as floats, two k per step. mma adds the even k's
// product, then the odd k's: avx2_fp32's fmas over the decoded values in its order, so its bits.
// Decoding is exact: bf16 is the top half of an fp32 (a signalling NaN stays signalling until the
// fma quiets it, as widening would have); an fp8 code goes into an fp16's fields
// (exponent field at fp16's, the mantissa's top bit at fp16's), its inf and NaN codes get fp16's
// all-ones exponent field, F16C converts to fp32 (exactly: fp16 subnormals are fp32 normals, a NaN
// keeps its payload and turns quiet, as to_float() does), and one exact multiply by 2^(15 - bias)
// rebiases the exponent. The caller's MXCSR flush modes do not touch it: no fp32 value involved is
// subnormal.
template <class Stored>
requires decodable<Stored>
struct avx2_fp32_decoding {
  static constexpr std::size_t lanes = 8;
  static constexpr std::size_t depth = 2;
  using operand = float;
  using b_operand = Stored;
  using accumulator = __m256;
  struct pair {
    __m256 even, odd;  // k even and odd: the 8 lanes' values
  };

  static accumulator zero() { return _mm256_setzero_ps(); }
  static accumulator load(const float* from) { return _mm256_loadu_ps(from); }
  static void store(float* to, accumulator c) { _mm256_storeu_ps(to, c); }
  static pair broadcast_a(const operand* a) {
    return {_mm256_broadcast_ss(a), _mm256_broadcast_ss(a + 1)};
  }
  static accumulator mma(accumulator c, pair a, pair b) {
    return _mm256_fmadd_ps(a.odd, b.odd, _mm256_fmadd_ps(a.even, b.even, c));
  }

  // 8 columns' pairs of codes: 32 bytes of bf16 or 16 of fp8.
  static pair load_b(const b_operand* b) {
    if constexpr (sizeof(Stored) == 2) {
      const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
      return {_mm256_castsi256_ps(_mm256_slli_epi32(codes, 16)),
              _mm256_castsi256_ps(
                  _mm256_and_si256(codes, _mm256_set1_epi32(static_cast<int>(0xffff0000u))))};
    } else {
      const __m256i h = fp16_codes(b);
      __m256 even = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
      __m256 odd = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
      if constexpr (Stored::bias != 15) {
        const __m256 scale = _mm256_set1_ps(std::bit_cast<float>(
            static_cast<std::uint32_t>(127 + 15 - Stored::bias) << 23));  // 2^(15 - bias)
        even = _mm256_mul_ps(even, scale);
        odd = _mm256_mul_ps(odd, scale);
      }
      return {even, odd};
    }
  }

 private:
  // 16 fp8 codes (column j's even k at byte 2j, odd k at 2j + 1) as fp16 codes of value *
  // 2^(bias - 15): the even k's in the low 128 bits, the odd k's in the high.
  static __m256i fp16_codes(const b_operand* b) {
    constexpr int m = Stored::mantissa_bits;
    const __m256i bytes =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    // Each code to the high byte of a 16-bit lane (-1: zero): the low half takes the even bytes,
    // the high half (a copy of the same 16 bytes) the odd ones.
    const __m256i spread =
        _mm256_setr_epi8(-1, 0, -1, 2, -1, 4, -1, 6, -1, 8, -1, 10, -1, 12, -1, 14,  //
                         -1, 1, -1, 3, -1, 5, -1, 7, -1, 9, -1, 11, -1, 13, -1, 15);
    __m256i h = _mm256_shuffle_epi8(bytes, spread);  // code << 8
    if constexpr (m != 2) {  // align the mantissa with fp16's 10 bits; the sign stays on top
      h = _mm256_and_si256(_mm256_srai_epi16(h, m - 2),
                           _mm256_set1_epi16(static_cast<short>(0x8000 | 0x7f << (10 - m))));
    }
    if constexpr (Stored::exponent_bits < 5 || !Stored::has_infinity) {
      // Inf and NaN codes (from the first one up): fp16's exponent field all ones, the mantissa
      // kept (zero: inf; else NaN, as to_float() makes it).
      constexpr int first =
          static_cast<int>(Stored::has_infinity ? Stored::infinity_code : Stored::nan_code)
          << (10 - m);
      const __m256i magnitude = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
      const __m256i special = _mm256_cmpgt_epi16(magnitude, _mm256_set1_epi16(first - 1));
      h = _mm256_or_si256(h, _mm256_and_si256(special, _mm256_set1_epi16(0x7c00)));
    }
    return h;
  }
};
#endif

#if defined(TILEKERN_CONVERT_AVX512)
// avx2_fp32_decoding on 16 lanes (avx512_fp32's fmas, in the same order, so the same bits): the
// same decoding, 16 columns' pairs of codes at a time (64 bytes of bf16 or 32 of fp8).
template <class Stored>
requires decodable<Stored>
struct avx512_fp32_decoding {
  static constexpr std::size_t lanes = 16;
  static constexpr std::size_t depth = 2;
  using operand = float;
  using b_operand = Stored;
  using accumulator = __m512;
  struct pair {
    __m512 even, odd;
  };

  static accumulator zero() { return _mm512_setzero_ps(); }
  static accumulator load(const float* from) { return _mm512_loadu_ps(from); }
  static void store(float* to, accumulator c) { _mm512_storeu_ps(to, c); }
  static pair broadcast_a(const operand* a) { return {_mm512_set1_ps(a[0]), _mm512_set1_ps(a[1])}; }
  static accumulator mma(accumulator c, pair a, pair b) {
    return _mm512_fmadd_ps(a.odd, b.odd, _mm512_fmadd_ps(a.even, b.even, c));
  }

  // The zero-masking forms with every lane selected, as in simd/x86/fp16.hpp (GCC bug 105593).
  static constexpr __mmask16 all = 0xffff;

  static pair load_b(const b_operand* b) {
    if constexpr (sizeof(Stored) == 2) {
      const __m512i codes = _mm512_loadu_si512(b);
      return {_mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, codes, 16)),
              _mm512_castsi512_ps(
                  _mm512_and_si512(codes, _mm512_set1_epi32(static_cast<int>(0xffff0000u))))};
    } else {
      const __m512i h = fp16_codes(b);
      __m512 even = x86::float_from_fp16(_mm512_maskz_extracti64x4_epi64(0xff, h, 0));
      __m512 odd = x86::float_from_fp16(_mm512_maskz_extracti64x4_epi64(0xff, h, 1));
      if constexpr (Stored::bias != 15) {
        const __m512 scale = _mm512_set1_ps(std::bit_cast<float>(
            static_cast<std::uint32_t>(127 + 15 - Stored::bias) << 23));  // 2^(15 - bias)
        even = _mm512_mul_ps(even, scale);
        odd = _mm512_mul_ps(odd, scale);
      }
      return {even, odd};
    }
  }

 private:
  // 32 fp8 codes (column j's even k at byte 2j, odd k at 2j + 1) as fp16 codes of value *
  // 2^(bias - 15): the even k's in the low 256 bits, the odd k's in the high.
  static __m512i fp16_codes(const b_operand* b) {
    constexpr int m = Stored::mantissa_bits;
    // Columns 0-7 in 128-bit lanes 0 and 2, columns 8-15 in lanes 1 and 3.
    const __m512i bytes =
        _mm512_maskz_broadcast_i64x4(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    // Each code to the high byte of a 16-bit lane (-1: zero): lanes 0 and 1 take the even bytes,
    // lanes 2 and 3 the odd ones (listed from lane 3's last byte down to lane 0's first).
    const __m512i spread =
        _mm512_set_epi8(15, -1, 13, -1, 11, -1, 9, -1, 7, -1, 5, -1, 3, -1, 1, -1,  //
                        15, -1, 13, -1, 11, -1, 9, -1, 7, -1, 5, -1, 3, -1, 1, -1,  //
                        14, -1, 12, -1, 10, -1, 8, -1, 6, -1, 4, -1, 2, -1, 0, -1,  //
                        14, -1, 12, -1, 10, -1, 8, -1, 6, -1, 4, -1, 2, -1, 0, -1);
    __m512i h = _mm512_shuffle_epi8(bytes, spread);  // code << 8
    if constexpr (m != 2) {  // align the mantissa with fp16's 10 bits; the sign stays on top
      h = _mm512_and_si512(_mm512_srai_epi16(h, m - 2),
                           _mm512_set1_epi16(static_cast<short>(0x8000 | 0x7f << (10 - m))));
    }
    if constexpr (Stored::exponent_bits < 5 || !Stored::has_infinity) {
      // Inf and NaN codes: fp16's exponent field all ones, the mantissa kept.
      constexpr int first =
          static_cast<int>(Stored::has_infinity ? Stored::infinity_code : Stored::nan_code)
          << (10 - m);
      const __m512i magnitude = _mm512_and_si512(h, _mm512_set1_epi16(0x7fff));
      const __mmask32 special = _mm512_cmpgt_epi16_mask(magnitude, _mm512_set1_epi16(first - 1));
      h = _mm512_or_si512(h, _mm512_maskz_mov_epi16(special, _mm512_set1_epi16(0x7c00)));
    }
    return h;
  }
};
#endif

}  // namespace tilekern::tensor::atoms
