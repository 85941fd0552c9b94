#pragma once
// Plain loops for the normalisation and softmax benchmarks: a layernorm, rmsnorm and softmax of
// bf16 or float rows written straight in intrinsics (AVX-512 with BF16, or AVX2 with FMA), without
// the library's guarantees, timed in the same run as tilekern's kernel and memcpy
// (bench/norm_bench.cpp, bench/softmax_bench.cpp). What memcpy_frac they reach shows what a
// memcpy_frac target asks of this machine: each reads each row of x from memory once and writes y
// once, as any kernel must, and leaves out every guarantee of the library's beyond the arithmetic
// (the norms do strictly less work than tilekern's; softmax's float exponential, a polynomial
// alone, takes more operations than tilekern's, which starts from a table: kernels/softmax.hpp).
//
//   plain_norm<centred>(x, gamma, beta, y, rows, cols, eps)   x and y both bf16 or both float,
//                                  gamma and beta float; layernorm when centred, else rmsnorm
//                                  (beta unused)
//   plain_softmax(x, y, rows, cols)   x and y both bf16 or both float, scale 1, no mask
//   plain_fits(rows, cols)         whether this build has them (TILEKERN_BENCH_PLAIN: AVX512-BF16,
//                                  or AVX2 and FMA) and the shape suits them: an even number of
//                                  rows, a multiple of 64 columns
//
// Both take a row's elements as fp32, a vector at a time (bf16: the even and the odd elements of a
// vector of codes apart, a shift and a mask decode them; encoded back to nearest even with
// subnormals flushed (AVX-512: vcvtne2ps2bf16, and one vpermw per 32 lanes to put them in order)
// or kept (AVX2: the integer rounding, and one blend per 16), NaN not looked for), prefetch the
// next row during their last pass over a row, a 64-byte line per line of x, and have no NaN,
// overflow or subnormal care, no stochastic rounding and no shape checks.
// - plain_norm: a row's statistics in fp32 and in one pass, the sum and the sum of squares (bf16
//   on AVX-512: straight from the codes with vdpbf16ps, against ones and against the row itself;
//   else decoded, then add and fma), and the variance as E[x^2] - mean^2: no shift, so no accuracy
//   for rows whose mean is large against their spread; then y = (x * rstd - mean * rstd) * gamma +
//   beta (rmsnorm: x * rstd * gamma), two operations per vector, two rows at a time, gamma and
//   beta loaded once for both.
// - plain_softmax: the row's max; then e = 2^(x log2(e) - max log2(e)), one FMA, a rounding, a
//   subtraction, a polynomial for 2^f on [-1/2, 1/2] (bf16: degree 3, relative error 1.0e-4;
//   float: degree 6, 1.9e-8; interpolated at Chebyshev nodes) and 2^n (AVX-512: vscalefps; AVX2:
//   n added to the exponent field, the argument first kept at or above -125 so that it stays a
//   normal: one max more), summed and kept in an fp32 row; then y = e * (1 / sum), with no guard
//   for huge rows.
// They write y with ordinary stores: where y streams (tilekern's kernels use non-temporal stores
// from stream_threshold(), 4096 x 4096 among the benchmarks' shapes) the comparison says little,
// and the benchmarks time them at 1576 x 768 alone.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX512BF16__) || (defined(__AVX2__) && defined(__FMA__))
#define TILEKERN_BENCH_PLAIN 1
#include <immintrin.h>
#endif

#include "tilekern/types/formats.hpp"

namespace tilekern::bench {

inline bool plain_fits(std::size_t rows, std::size_t cols) {
#if defined(TILEKERN_BENCH_PLAIN)
  return rows % 2 == 0 && cols % 64 == 0 && cols > 0;
#else
  (void)rows, (void)cols;
  return false;
#endif
}

#if defined(TILEKERN_BENCH_PLAIN)
namespace plain_detail {

// What the loops below take from the instruction set: vec, `lanes` floats, and its arithmetic;
// the sum and the max of its lanes; decoded and encode (a vector of 2 * lanes bf16 codes as its
// even and its odd elements, and back); a bf16 row's sums; and exp2_of's rounding and scaling.
struct sums {
  float sum, squares;
};

#if defined(__AVX512BF16__)
using vec = __m512;
constexpr std::size_t lanes = 16;

// The zero-masking forms with every lane selected: the unmasked intrinsics, and
// _mm512_reduce_add_ps, start from an "undefined" register that GCC 12 reports as
// maybe-uninitialized (GCC bug 105593).
constexpr __mmask16 every_lane = 0xffff;
constexpr __mmask32 every_code = 0xffffffff;

inline vec load(const float* at) {
  return _mm512_loadu_ps(at);
}
inline void store(float* at, vec v) {
  _mm512_storeu_ps(at, v);
}
inline vec set(float v) {
  return _mm512_set1_ps(v);
}
inline vec add(vec a, vec b) {
  return _mm512_add_ps(a, b);
}
inline vec sub(vec a, vec b) {
  return _mm512_sub_ps(a, b);
}
inline vec mul(vec a, vec b) {
  return _mm512_mul_ps(a, b);
}
inline vec fma(vec a, vec b, vec c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline vec max(vec a, vec b) {
  return _mm512_maskz_max_ps(every_lane, a, b);
}

// The sum or the max of v's lanes, by halves.
template <class Op>
float lanes_combined(vec v, Op op) {
  v = op(v, _mm512_maskz_shuffle_f32x4(every_lane, v, v, 0x4e));  // 256-bit halves
  v = op(v, _mm512_maskz_shuffle_f32x4(every_lane, v, v, 0xb1));  // 128-bit quarters
  v = op(v, _mm512_maskz_shuffle_ps(every_lane, v, v, 0x4e));     // 64-bit pairs
  v = op(v, _mm512_maskz_shuffle_ps(every_lane, v, v, 0xb1));     // lanes
  return _mm512_cvtss_f32(v);
}
inline float lane_sum(vec v) {
  return lanes_combined(v, add);
}
inline float lane_max(vec v) {
  return lanes_combined(v, max);
}

// A 64-byte line of bf16 codes as fp32: its even elements and its odd ones.
struct halves {
  vec even, odd;
};
inline halves decoded(const std::uint16_t* line) {
  const __m512i codes = _mm512_loadu_si512(line);
  return {_mm512_castsi512_ps(_mm512_maskz_slli_epi32(every_lane, codes, 16)),
          _mm512_castsi512_ps(_mm512_and_si512(codes, _mm512_set1_epi32(-65536)))};
}
// The other way: the even and odd elements' nearest bf16, in order, into a 64-byte line.
inline void encode(std::uint16_t* line, vec even, vec odd) {
  // vcvtne2ps2bf16 puts the odd lanes' codes above the even ones'; vpermw interleaves them again
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const auto pairs = (__m512i)_mm512_cvtne2ps_pbh(odd, even);
  _mm512_storeu_si512(line, _mm512_maskz_permutexvar_epi16(every_code, order, pairs));
}

// A bf16 row's sum (when centred) and sum of squares, straight from the codes, two lines at a time.
template <bool centred>
sums row_sums(const std::uint16_t* row, std::size_t cols) {
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
  vec sum0 = _mm512_setzero_ps(), sum1 = sum0, squares0 = sum0, squares1 = sum0;
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
  return {lane_sum(add(sum0, sum1)), lane_sum(add(squares0, squares1))};
}

// For exp2_of: t, round(t), and p 2^n (a normal for any t).
inline vec least_exponent(vec t) {
  return t;
}
inline vec nearest_integer(vec t) {
  return _mm512_maskz_roundscale_ps(every_lane, t, _MM_FROUND_TO_NEAREST_INT);
}
inline vec scaled(vec p, vec n) {
  return _mm512_maskz_scalef_ps(every_lane, p, n);
}
#else
using vec = __m256;
constexpr std::size_t lanes = 8;

inline vec load(const float* at) {
  return _mm256_loadu_ps(at);
}
inline void store(float* at, vec v) {
  _mm256_storeu_ps(at, v);
}
inline vec set(float v) {
  return _mm256_set1_ps(v);
}
inline vec add(vec a, vec b) {
  return _mm256_add_ps(a, b);
}
inline vec sub(vec a, vec b) {
  return _mm256_sub_ps(a, b);
}
inline vec mul(vec a, vec b) {
  return _mm256_mul_ps(a, b);
}
inline vec fma(vec a, vec b, vec c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline vec max(vec a, vec b) {
  return _mm256_max_ps(a, b);
}

// The sum or the max of v's lanes, by halves.
template <class Op>
float lanes_combined(vec v, Op op) {
  __m128 q = op(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // 128-bit halves
  q = op(q, _mm_movehl_ps(q, q));                                         // 64-bit pairs
  q = op(q, _mm_movehdup_ps(q));                                          // lanes
  return _mm_cvtss_f32(q);
}
inline float lane_sum(vec v) {
  return lanes_combined(v, [](__m128 a, __m128 b) { return _mm_add_ps(a, b); });
}
inline float lane_max(vec v) {
  return lanes_combined(v, [](__m128 a, __m128 b) { return _mm_max_ps(a, b); });
}

// A 32-byte vector of bf16 codes as fp32: its even elements and its odd ones.
struct halves {
  vec even, odd;
};
inline halves decoded(const std::uint16_t* codes) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)),
          _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536)))};
}
// Each lane's nearest bf16 in its high 16 bits: its bits + 0x7fff + bit 16.
inline __m256i nearest(vec v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd);
}
// The other way: the even and odd elements' nearest bf16, in order, into 32 bytes.
inline void encode(std::uint16_t* codes, vec even, vec odd) {
  const __m256i low = _mm256_srli_epi32(nearest(even), 16);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes),
                      _mm256_blend_epi16(low, nearest(odd), 0xaa));
}

// A bf16 row's sum (when centred) and sum of squares, decoded a vector of codes at a time.
template <bool centred>
sums row_sums(const std::uint16_t* row, std::size_t cols) {
  vec sum0 = _mm256_setzero_ps(), sum1 = sum0, squares0 = sum0, squares1 = sum0;
  for (std::size_t c = 0; c < cols; c += 2 * lanes) {
    const halves v = decoded(row + c);
    if constexpr (centred) {
      sum0 = add(sum0, v.even);
      sum1 = add(sum1, v.odd);
    }
    squares0 = fma(v.even, v.even, squares0);
    squares1 = fma(v.odd, v.odd, squares1);
  }
  return {lane_sum(add(sum0, sum1)), lane_sum(add(squares0, squares1))};
}

// For exp2_of: t kept at or above -125, round(t), and p 2^n by n added to p's exponent field (p
// in [1/2, 2], so a normal).
inline vec least_exponent(vec t) {
  return max(t, set(-125.0f));
}
inline vec nearest_integer(vec t) {
  return _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline vec scaled(vec p, vec n) {
  const __m256i field = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), field));
}
#endif

// A float row's sum (when centred) and sum of squares, two vectors at a time.
template <bool centred>
sums row_sums(const float* row, std::size_t cols) {
  vec sum0 = set(0.0f), sum1 = sum0, squares0 = sum0, squares1 = sum0;
  for (std::size_t c = 0; c < cols; c += 2 * lanes) {
    const vec a = load(row + c), b = load(row + c + lanes);
    if constexpr (centred) {
      sum0 = add(sum0, a);
      sum1 = add(sum1, b);
    }
    squares0 = fma(a, a, squares0);
    squares1 = fma(b, b, squares1);
  }
  return {lane_sum(add(sum0, sum1)), lane_sum(add(squares0, squares1))};
}

// (v * scale + offset) * g + b, or v * scale * g
template <bool centred>
vec normalised(vec v, vec scale, vec offset, vec g, vec b) {
  if constexpr (centred) return fma(fma(v, scale, offset), g, b);
  return mul(mul(v, scale), g);
}

inline void prefetch(const void* at) {
  _mm_prefetch(static_cast<const char*>(at), _MM_HINT_T0);
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
  constexpr std::size_t step = narrow ? 2 * d::lanes : d::lanes;  // elements a vector of x holds
  const auto* const in = reinterpret_cast<const element*>(x);
  auto* const out = reinterpret_cast<element*>(y);
  const auto count = static_cast<float>(cols);
  for (std::size_t r = 0; r < rows; r += 2) {
    const element* const from[2] = {in + r * cols, in + (r + 1) * cols};
    element* const to[2] = {out + r * cols, out + (r + 1) * cols};
    d::vec scale[2], offset[2];
    for (std::size_t k = 0; k < 2; ++k) {
      const d::sums s = d::row_sums<centred>(from[k], cols);
      const float mean = centred ? s.sum / count : 0.0f;
      const float rstd = 1.0f / std::sqrt(s.squares / count - mean * mean + eps);
      scale[k] = d::set(rstd);
      offset[k] = d::set(-mean * rstd);
    }
    const element* const next = r + 2 < rows ? from[1] + cols : nullptr;
    for (std::size_t l = 0; l < cols; l += line) {
      if (next != nullptr) {
        d::prefetch(next + l);
        d::prefetch(next + cols + l);
      }
      for (std::size_t c = l; c < l + line; c += step) {
        if constexpr (narrow) {
          const std::size_t j = c / 2;
          const d::vec g_even = d::load(gamma_even + j), g_odd = d::load(gamma_odd + j);
          const d::vec b_even = d::load(beta_even + j), b_odd = d::load(beta_odd + j);
          for (std::size_t k = 0; k < 2; ++k) {
            const d::halves v = d::decoded(from[k] + c);
            d::encode(to[k] + c,
                      d::normalised<centred>(v.even, scale[k], offset[k], g_even, b_even),
                      d::normalised<centred>(v.odd, scale[k], offset[k], g_odd, b_odd));
          }
        } else {
          const d::vec g = d::load(gamma + c);
          const d::vec b = centred ? d::load(beta + c) : g;
          for (std::size_t k = 0; k < 2; ++k) {
            d::store(to[k] + c,
                     d::normalised<centred>(d::load(from[k] + c), scale[k], offset[k], g, b));
          }
        }
      }
    }
  }
}

namespace plain_detail {

// 2^t: 2^f 2^n with n = round(t), f = t - n, 2^f by a polynomial (see the top of this header).
template <bool narrow>
vec exp2_of(vec t) {
  t = least_exponent(t);
  const vec n = nearest_integer(t);
  const vec f = sub(t, n);
  vec p;
  if constexpr (narrow) {
    p = fma(set(0.05583828f), f, set(0.24263948f));
    p = fma(p, f, set(0.69313675f));
    p = fma(p, f, set(0.99992454f));
  } else {
    p = fma(set(1.5461445e-4f), f, set(1.3400428e-3f));
    p = fma(p, f, set(9.618057e-3f));
    p = fma(p, f, set(5.550327e-2f));
    p = fma(p, f, set(0.2402265f));
    p = fma(p, f, set(0.6931472f));
    p = fma(p, f, set(1.0f));
  }
  return scaled(p, n);
}

}  // namespace plain_detail

template <class T>
[[gnu::noinline]] void plain_softmax(const T* x, T* y, std::size_t rows, std::size_t cols) {
  namespace d = plain_detail;
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, float>);
  constexpr bool narrow = std::is_same_v<T, bf16>;
  using element = std::conditional_t<narrow, std::uint16_t, float>;
  constexpr std::size_t line = 64 / sizeof(element);
  constexpr std::size_t step = narrow ? 2 * d::lanes : d::lanes;  // elements a vector of x holds
  const auto* const in = reinterpret_cast<const element*>(x);
  auto* const out = reinterpret_cast<element*>(y);
  const d::vec log2e = d::set(1.44269504f);
  // a row's exponentials (bf16: each vector's even ones, then its odd)
  std::vector<float> e(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    const element* const from = in + r * cols;
    element* const to = out + r * cols;
    d::vec max0 = d::set(-std::numeric_limits<float>::infinity()), max1 = max0;
    for (std::size_t c = 0; c < cols; c += step) {
      if constexpr (narrow) {
        const d::halves v = d::decoded(from + c);
        max0 = d::max(max0, v.even);
        max1 = d::max(max1, v.odd);
      } else {
        max0 = d::max(max0, d::load(from + c));
      }
    }
    const d::vec bias = d::set(-d::lane_max(d::max(max0, max1)) * 1.44269504f);
    const auto exp = [&](d::vec v, float* at) {
      const d::vec ev = d::exp2_of<narrow>(d::fma(v, log2e, bias));
      d::store(at, ev);
      return ev;
    };
    d::vec sum0 = d::set(0.0f), sum1 = sum0;
    for (std::size_t c = 0; c < cols; c += step) {
      if constexpr (narrow) {
        const d::halves v = d::decoded(from + c);
        sum0 = d::add(sum0, exp(v.even, e.data() + c));
        sum1 = d::add(sum1, exp(v.odd, e.data() + c + d::lanes));
      } else {
        sum0 = d::add(sum0, exp(d::load(from + c), e.data() + c));
      }
    }
    const d::vec inverse = d::set(1.0f / d::lane_sum(d::add(sum0, sum1)));
    const element* const next = r + 1 < rows ? from + cols : nullptr;
    const auto product = [&](std::size_t at) { return d::mul(d::load(e.data() + at), inverse); };
    for (std::size_t l = 0; l < cols; l += line) {
      if (next != nullptr) d::prefetch(next + l);
      for (std::size_t c = l; c < l + line; c += step) {
        if constexpr (narrow) {
          d::encode(to + c, product(c), product(c + d::lanes));
        } else {
          d::store(to + c, product(c));
        }
      }
    }
  }
}
#endif

}  // namespace tilekern::bench
