#pragma once
// Plain loops for the normalisation and softmax benchmarks: a layernorm, rmsnorm and softmax of
// bf16 or float rows written straight in AVX-512 intrinsics, without the library's guarantees,
// timed in the same run as tilekern's kernel and memcpy (bench/norm_bench.cpp,
// bench/softmax_bench.cpp). What memcpy_frac they reach shows what a memcpy_frac target asks of
// this machine: each reads each row of x from memory once and writes y once, as any kernel must,
// and leaves out every guarantee of the library's beyond the arithmetic (the norms do strictly
// less work than tilekern's; softmax's float exponential, a polynomial alone, takes more
// operations than tilekern's, which starts from a table: kernels/softmax.hpp).
//
//   plain_norm<centred>(x, gamma, beta, y, rows, cols, eps)   x and y both bf16 or both float,
//                                  gamma and beta float; layernorm when centred, else rmsnorm
//                                  (beta unused)
//   plain_softmax(x, y, rows, cols)   x and y both bf16 or both float, scale 1, no mask
//   plain_fits(rows, cols)         whether this build has them (AVX512-BF16) and the shape suits
//                                  them: an even number of rows, a multiple of 64 columns
//
// Both take a row's elements as fp32 (bf16: the even and the odd elements of a 64-byte line apart,
// a shift and a mask decode them; encoded back with vcvtne2ps2bf16, nearest even with subnormals
// flushed and not looked for, and put in order with one vpermw per 32 lanes), prefetch the next
// row during their last pass over a row, a 64-byte line per line of x, and have no NaN, overflow
// or subnormal care, no stochastic rounding and no shape checks.
// - plain_norm: a row's statistics in fp32 and in one pass, the sum and the sum of squares (bf16:
//   straight from the codes with vdpbf16ps, against ones and against the row itself; float: vaddps
//   and vfmadd), and the variance as E[x^2] - mean^2: no shift, so no accuracy for rows whose mean
//   is large against their spread; then y = (x * rstd - mean * rstd) * gamma + beta (rmsnorm:
//   x * rstd * gamma), two operations per 16 lanes, two rows at a time, gamma and beta loaded once
//   for both.
// - plain_softmax: the row's max; then e = 2^(x log2(e) - max log2(e)), one FMA, a rounding
//   (vrndscaleps), a subtraction, a polynomial for 2^f on [-1/2, 1/2] (bf16: degree 3, relative
//   error 1.0e-4; float: degree 6, 1.9e-8; interpolated at Chebyshev nodes) and vscalefps, summed
//   and kept in an fp32 row; then y = e * (1 / sum), with no guard for huge rows.
// They write y with ordinary stores: where y streams (tilekern's kernels use non-temporal stores
// from stream_threshold(), 4096 x 4096 among the benchmarks' shapes) the comparison says little,
// and the benchmarks time them at 1576 x 768 alone.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#include "tilekern/types/formats.hpp"

namespace tilekern::bench {

inline bool plain_fits(std::size_t rows, std::size_t cols) {
#if defined(__AVX512BF16__)
  return rows % 2 == 0 && cols % 64 == 0 && cols > 0;
#else
  (void)rows, (void)cols;
  return false;
#endif
}

#if defined(__AVX512BF16__)
namespace plain_detail {

// The zero-masking forms with every lane selected: the unmasked intrinsics, and
// _mm512_reduce_add_ps, start from an "undefined" register that GCC 12 reports as
// maybe-uninitialized (GCC bug 105593).
constexpr __mmask16 every_lane = 0xffff;
constexpr __mmask32 every_code = 0xffffffff;

// The sum or the max of v's lanes, by halves.
template <class Op>
float lanes_combined(__m512 v, Op op) {
  v = op(v, _mm512_maskz_shuffle_f32x4(every_lane, v, v, 0x4e));  // 256-bit halves
  v = op(v, _mm512_maskz_shuffle_f32x4(every_lane, v, v, 0xb1));  // 128-bit quarters
  v = op(v, _mm512_maskz_shuffle_ps(every_lane, v, v, 0x4e));     // 64-bit pairs
  v = op(v, _mm512_maskz_shuffle_ps(every_lane, v, v, 0xb1));     // lanes
  return _mm512_cvtss_f32(v);
}
inline float lane_sum(__m512 v) {
  return lanes_combined(v, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
}
inline float lane_max(__m512 v) {
  return lanes_combined(v,
                        [](__m512 a, __m512 b) { return _mm512_maskz_max_ps(every_lane, a, b); });
}

// A 64-byte line of bf16 codes as fp32: its even elements and its odd ones.
struct halves {
  __m512 even, odd;
};
inline halves decoded(const std::uint16_t* line) {
  const __m512i codes = _mm512_loadu_si512(line);
  return {_mm512_castsi512_ps(_mm512_maskz_slli_epi32(every_lane, codes, 16)),
          _mm512_castsi512_ps(_mm512_and_si512(codes, _mm512_set1_epi32(-65536)))};
}
// The other way: the even and odd elements' nearest bf16, in order, into a 64-byte line.
inline void encode(std::uint16_t* line, __m512 even, __m512 odd) {
  // vcvtne2ps2bf16 puts the odd lanes' codes above the even ones'; vpermw interleaves them again
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const auto pairs = (__m512i)_mm512_cvtne2ps_pbh(odd, even);
  _mm512_storeu_si512(line, _mm512_maskz_permutexvar_epi16(every_code, order, pairs));
}

// A row's sum and sum of squares, over two 64-byte lines at a time.
struct sums {
  float sum, squares;
};
template <bool centred>
sums row_sums(const std::uint16_t* row, std::size_t cols) {
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
  __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0, squares0 = sum0, squares1 = sum0;
  for (std::size_t c = 0; c < cols; c += 64) {
    const auto a = (__m512bh)_mm512_loadu_si512(row + c);
    const auto b = (__m512bh)_mm512_loadu_si512(row + c + 32);
    if constexpr (centred) {
      sum0 = _mm512_dpbf16_ps(sum0, a, ones);
      sum1 = _mm512_dpbf16_ps(sum1, b, ones);
    }
    squares0 = _mm512_dpbf16_ps(squares0, a, a);
    squares1 = _mm512_dpbf16_ps(squares1, b, b);
  }
  return {lane_sum(_mm512_add_ps(sum0, sum1)), lane_sum(_mm512_add_ps(squares0, squares1))};
}
template <bool centred>
sums row_sums(const float* row, std::size_t cols) {
  __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0, squares0 = sum0, squares1 = sum0;
  for (std::size_t c = 0; c < cols; c += 32) {
    const __m512 a = _mm512_loadu_ps(row + c), b = _mm512_loadu_ps(row + c + 16);
    if constexpr (centred) {
      sum0 = _mm512_add_ps(sum0, a);
      sum1 = _mm512_add_ps(sum1, b);
    }
    squares0 = _mm512_fmadd_ps(a, a, squares0);
    squares1 = _mm512_fmadd_ps(b, b, squares1);
  }
  return {lane_sum(_mm512_add_ps(sum0, sum1)), lane_sum(_mm512_add_ps(squares0, squares1))};
}

// (v * scale + offset) * g + b, or v * scale * g
template <bool centred>
__m512 normalised(__m512 v, __m512 scale, __m512 offset, __m512 g, __m512 b) {
  if constexpr (centred) return _mm512_fmadd_ps(_mm512_fmadd_ps(v, scale, offset), g, b);
  return _mm512_mul_ps(_mm512_mul_ps(v, scale), g);
}

}  // namespace plain_detail

template <bool centred, class T>
[[gnu::noinline]] void plain_norm(const T* x, const float* gamma, const float* beta, T* y,
                                  std::size_t rows, std::size_t cols, float eps) {
  namespace d = plain_detail;
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, float>);
  constexpr bool narrow = std::is_same_v<T, bf16>;
  // bf16: gamma and beta's even and odd columns apart, as the decoded lanes take them (float reads
  // gamma and beta as they are; split is there only so that the pointers below are valid)
  const std::size_t half = cols / 2;
  std::vector<float> split(4 * half);
  for (std::size_t c = 0; narrow && c < cols; ++c) {
    split[(c % 2) * half + c / 2] = gamma[c];
    split[(2 + c % 2) * half + c / 2] = centred ? beta[c] : 0.0f;
  }
  const float* const gamma_even = split.data();
  const float* const gamma_odd = gamma_even + half;
  const float* const beta_even = gamma_odd + half;
  const float* const beta_odd = beta_even + half;
  using element = std::conditional_t<narrow, std::uint16_t, float>;
  constexpr std::size_t line = 64 / sizeof(element);
  const auto* const in = reinterpret_cast<const element*>(x);
  auto* const out = reinterpret_cast<element*>(y);
  const auto count = static_cast<float>(cols);
  for (std::size_t r = 0; r < rows; r += 2) {
    const element* const from[2] = {in + r * cols, in + (r + 1) * cols};
    element* const to[2] = {out + r * cols, out + (r + 1) * cols};
    __m512 scale[2], offset[2];
    for (std::size_t k = 0; k < 2; ++k) {
      const d::sums s = d::row_sums<centred>(from[k], cols);
      const float mean = centred ? s.sum / count : 0.0f;
      const float rstd = 1.0f / std::sqrt(s.squares / count - mean * mean + eps);
      scale[k] = _mm512_set1_ps(rstd);
      offset[k] = _mm512_set1_ps(-mean * rstd);
    }
    const element* const next = r + 2 < rows ? from[1] + cols : nullptr;
    for (std::size_t c = 0; c < cols; c += line) {
      if (next != nullptr) {
        _mm_prefetch(reinterpret_cast<const char*>(next + c), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(next + cols + c), _MM_HINT_T0);
      }
      if constexpr (narrow) {
        const std::size_t j = c / 2;
        const __m512 g_even = _mm512_loadu_ps(gamma_even + j),
                     g_odd = _mm512_loadu_ps(gamma_odd + j);
        const __m512 b_even = _mm512_loadu_ps(beta_even + j), b_odd = _mm512_loadu_ps(beta_odd + j);
        for (std::size_t k = 0; k < 2; ++k) {
          const d::halves v = d::decoded(from[k] + c);
          d::encode(to[k] + c, d::normalised<centred>(v.even, scale[k], offset[k], g_even, b_even),
                    d::normalised<centred>(v.odd, scale[k], offset[k], g_odd, b_odd));
        }
      } else {
        const __m512 g = _mm512_loadu_ps(gamma + c);
        const __m512 b = centred ? _mm512_loadu_ps(beta + c) : g;
        for (std::size_t k = 0; k < 2; ++k) {
          const __m512 v = _mm512_loadu_ps(from[k] + c);
          _mm512_storeu_ps(to[k] + c, d::normalised<centred>(v, scale[k], offset[k], g, b));
        }
      }
    }
  }
}

namespace plain_detail {

// 2^t: 2^f 2^n with n = round(t), f = t - n, 2^f by a polynomial (see the top of this header).
template <bool narrow>
__m512 exp2_of(__m512 t) {
  const __m512 n = _mm512_maskz_roundscale_ps(every_lane, t, _MM_FROUND_TO_NEAREST_INT);
  const __m512 f = _mm512_sub_ps(t, n);
  const auto c = [](float v) { return _mm512_set1_ps(v); };
  __m512 p;
  if constexpr (narrow) {
    p = _mm512_fmadd_ps(c(0.05583828f), f, c(0.24263948f));
    p = _mm512_fmadd_ps(p, f, c(0.69313675f));
    p = _mm512_fmadd_ps(p, f, c(0.99992454f));
  } else {
    p = _mm512_fmadd_ps(c(1.5461445e-4f), f, c(1.3400428e-3f));
    p = _mm512_fmadd_ps(p, f, c(9.618057e-3f));
    p = _mm512_fmadd_ps(p, f, c(5.550327e-2f));
    p = _mm512_fmadd_ps(p, f, c(0.2402265f));
    p = _mm512_fmadd_ps(p, f, c(0.6931472f));
    p = _mm512_fmadd_ps(p, f, c(1.0f));
  }
  return _mm512_maskz_scalef_ps(every_lane, p, n);
}

}  // namespace plain_detail

template <class T>
[[gnu::noinline]] void plain_softmax(const T* x, T* y, std::size_t rows, std::size_t cols) {
  namespace d = plain_detail;
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, float>);
  constexpr bool narrow = std::is_same_v<T, bf16>;
  using element = std::conditional_t<narrow, std::uint16_t, float>;
  constexpr std::size_t line = 64 / sizeof(element);
  const auto* const in = reinterpret_cast<const element*>(x);
  auto* const out = reinterpret_cast<element*>(y);
  const __m512 log2e = _mm512_set1_ps(1.44269504f);
  std::vector<float> e(cols);  // a row's exponentials (bf16: each line's even ones, then its odd)
  for (std::size_t r = 0; r < rows; ++r) {
    const element* const from = in + r * cols;
    element* const to = out + r * cols;
    __m512 max0 = _mm512_set1_ps(-std::numeric_limits<float>::infinity()), max1 = max0;
    for (std::size_t c = 0; c < cols; c += line) {
      if constexpr (narrow) {
        const d::halves v = d::decoded(from + c);
        max0 = _mm512_maskz_max_ps(d::every_lane, max0, v.even);
        max1 = _mm512_maskz_max_ps(d::every_lane, max1, v.odd);
      } else {
        max0 = _mm512_maskz_max_ps(d::every_lane, max0, _mm512_loadu_ps(from + c));
      }
    }
    const __m512 bias =
        _mm512_set1_ps(-d::lane_max(_mm512_maskz_max_ps(d::every_lane, max0, max1)) * 1.44269504f);
    const auto exp = [&](__m512 v, float* at) {
      const __m512 ev = d::exp2_of<narrow>(_mm512_fmadd_ps(v, log2e, bias));
      _mm512_storeu_ps(at, ev);
      return ev;
    };
    __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
    for (std::size_t c = 0; c < cols; c += line) {
      if constexpr (narrow) {
        const d::halves v = d::decoded(from + c);
        sum0 = _mm512_add_ps(sum0, exp(v.even, e.data() + c));
        sum1 = _mm512_add_ps(sum1, exp(v.odd, e.data() + c + 16));
      } else {
        sum0 = _mm512_add_ps(sum0, exp(_mm512_loadu_ps(from + c), e.data() + c));
      }
    }
    const __m512 inverse = _mm512_set1_ps(1.0f / d::lane_sum(_mm512_add_ps(sum0, sum1)));
    const element* const next = r + 1 < rows ? from + cols : nullptr;
    const auto product = [&](std::size_t at) {
      return _mm512_mul_ps(_mm512_loadu_ps(e.data() + at), inverse);
    };
    for (std::size_t c = 0; c < cols; c += line) {
      if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next + c), _MM_HINT_T0);
      if constexpr (narrow) {
        d::encode(to + c, product(c), product(c + 16));
      } else {
        _mm512_storeu_ps(to + c, product(c));
      }
    }
  }
}
#endif

}  // namespace tilekern::bench
