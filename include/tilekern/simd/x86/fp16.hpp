#pragma once
// F16C (and AVX-512F) conversions between fp32 and IEEE binary16, 8 or 16 lanes.
//
// vcvtps2ph with an immediate rounding mode ignores MXCSR.RC; round to nearest even gives
// tilekern's fp16 rounding (types/minifloat.hpp) with standard overflow, NaNs quieted with the
// top 10 payload bits kept. Toward zero matches it for results that are fp16 normals (IEEE's
// toward-zero overflow gives max where tilekern gives inf). vcvtph2ps is exact and quiets NaNs
// keeping the payload, as fp16::to_float does. Both handle fp16 subnormals in hardware, whatever
// MXCSR.DAZ/FTZ say.

#include <immintrin.h>

namespace tilekern::x86 {

#if defined(__F16C__)
inline __m128i fp16_from_float_nearest(__m256 x) {
  return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline __m128i fp16_from_float_toward_zero(__m256 x) {
  return _mm256_cvtps_ph(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
inline __m256 float_from_fp16(__m128i codes) {
  return _mm256_cvtph_ps(codes);
}
#endif

// The zero-masking forms with every lane selected: the plain intrinsics start from an
// "undefined" register that GCC 12 reports as maybe-uninitialized (GCC bug 105593).
#if defined(__AVX512F__)
inline __m256i fp16_from_float_nearest(__m512 x) {
  return _mm512_maskz_cvtps_ph(0xffff, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline __m256i fp16_from_float_toward_zero(__m512 x) {
  return _mm512_maskz_cvtps_ph(0xffff, x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
inline __m512 float_from_fp16(__m256i codes) {
  return _mm512_maskz_cvtph_ps(0xffff, codes);
}
#endif

}  // namespace tilekern::x86
