#pragma once
// AVX512-BF16 vcvtneps2bf16: 16 fp32 lanes to bf16, round to nearest even.
//
// Matches bf16's rounding (types/minifloat.hpp) with standard overflow and NaNs quieted with the
// top 7 payload bits kept, except that fp32 subnormal inputs are read as zero (the instruction
// always behaves as if MXCSR.DAZ were set): callers must route those lanes elsewhere.

#include <immintrin.h>

#include <bit>

namespace tilekern::x86 {

#if defined(__AVX512BF16__)
inline __m256i bf16_from_float_nearest(__m512 x) {
  return std::bit_cast<__m256i>(_mm512_cvtneps_pbh(x));
}
#endif

}  // namespace tilekern::x86
