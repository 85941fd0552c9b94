#pragma once
// The tensor engine's atoms: one multiply-accumulate instruction of each ISA path, and nothing
// else. engine/tensor.hpp builds its register-blocked tile matmul on them; an atom knows its
// instruction, its register type and the layout of one k-step of packed operands.
//
// An atom has
//   lanes         fp32 accumulators in one register
//   depth         k values one instruction takes per accumulator (1: an fma; 2: a bf16 pair)
//   operand       the packed element: float, or a bf16 code (std::uint16_t)
//   accumulator   the register type
//   zero(), load(const float*), store(float*, accumulator)     lanes fp32 values
//   load_b(const operand*)       one k-step of B for `lanes` columns: lanes * depth operands,
//                                depth consecutive k values of a column side by side
//   broadcast_a(const operand*)  one k-step of one row of A (depth operands) in every lane
//   mma(c, a, b)                 c + the depth products a * b, summed into each lane
//
// Numerics. The fp32 atoms compute c + a * b with one rounding (a fused multiply-add). The
// avx512_bf16 atom is AVX512-BF16's vdpbf16ps, which computes c + a0 * b0 + a1 * b1 as two
// roundings, the products exact (a bf16 times a bf16 fits in fp32), with the caller's MXCSR
// ignored: round to nearest even, subnormal inputs read as zero and subnormal results flushed to
// zero (Intel's definition; AMX's tdpbf16ps, the same in tiles, behaves alike). avx2_bf16_emulated
// computes the same sums with AVX2, for testing the pair path anywhere (see there).

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "tilekern/simd/convert_vector.hpp"

#if defined(TILEKERN_CONVERT_AVX2)
#include <immintrin.h>
#endif

namespace tilekern::tensor::atoms {

// fp32 fma on one lane: the scalar path, and the reference for the vector atoms' numerics.
struct scalar_fp32 {
  static constexpr std::size_t lanes = 1;
  static constexpr std::size_t depth = 1;
  using operand = float;
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

}  // namespace tilekern::tensor::atoms
