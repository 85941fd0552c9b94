#pragma once
// softmax over the last axis of a runtime-shaped tensor, optionally scaled and masked, in any
// format; and its gradient.
//
//   s[r][c] = scale * x[r][c]   (+ mask[r][c], an additive mask)
//   y[r][c] = exp(s[r][c] - m[r]) / sum_c exp(s[r][c] - m[r]),   m[r] = max_c s[r][c]
//   dx[r][c] = scale * y[r][c] * (dy[r][c] - sum_c dy[r][c] y[r][c])   (softmax_backward)
//
// A boolean mask (a view of bool, true = keep) removes the elements it marks false, as if their
// score were -inf, without using their x. An additive mask holds float or any format; -inf masks
// out. Either is rows x cols, or 1 x cols broadcast to every row. The plain fp64 versions are
// reference::softmax and reference::softmax_backward (reference/softmax.hpp), whose definitions
// these kernels follow, special values included.
//
// Algorithm: one thread, blocks of rows (about row_block_bytes() of x and fp32 scratch per block,
// half of L2, so that a block stays in L2 between its passes), engine operations only (the row
// passes below: the engine's row bodies, detail::map_row):
//   m = row max of the scores                    for a finite scale > 0, scale times row_max
//                                                 of x (which compares bf16 and fp16 codes);
//                                                 else vector::row_max_of the products, or
//                                                 row_max of a scores block
//   e = exp(scale * x - m) 2^64, sums = row sums of e   softmax_exp (below; softmax_exp_narrow
//                                                 for a y of a narrow format; four blocks at a
//                                                 time on AVX2) in one engine pass with its row
//                                                 sums, into y when y is float, else an fp32
//                                                 scratch block
//   y = e * (1 / sum)                             vector::mul into rounded(y block); with
//                                                 non-temporal stores where y is large and not
//                                                 float (stream_threshold(), engine/lanes.hpp)
// With a mask the scores are first written into the scratch block (vector::map), then the same
// three passes run over it.
// Row passes (row_passes(), simd/isa.hpp): the same passes one row at a time instead
// (softmax_rows below), the row's exponentials in one row of fp32 scratch (or in y's row when y
// is float and not streamed), so that the later passes read the row from L1; with a mask the
// scores pass also finds the row's max. While it takes a row's exponentials it prefetches the next
// row of x (on Intel processors a row of 8 KiB or more by its pages in turn: prefetch_pages,
// engine/lanes.hpp; on AMD's in order: softmax bf16 at 4096 x 4096 so took 0.83-0.92 of the time
// on a Zen 5, stop 71), and the row of y for writing (a float y not streamed: the next row, into
// which the next exponentials go), so that reading x and writing y from memory overlap exp's
// arithmetic, where the block passes wait for each in turn. The bits are the same either way
// (tests/kernels/same_bits.hpp). On a 2-core Intel Xeon with AVX512-BF16 (Emerald Rapids
// class), the bench built with and without them, seven rounds alternating the two (medians of 3
// runs each): bf16 1576 x 768 1.05-1.13 times as fast (median 1.11), 4096 x 4096 1.42-1.64
// (1.51); fp32 1.29-1.36 (1.31) and 0.90-1.55 (1.37). Prefetching a float y's next row rather
// than none: fp32 1576 x 768 1.06-1.15 times as fast again (three rounds). The next row's max
// comes between a row's exponentials and its products (with a mask, its scores into a second
// scratch row), so that it runs while the row's sum and 1 / sum complete: bf16 and fp32 1576 x 768
// 1.08-1.09 times as fast again, 4096 x 4096 within 1% (CONTRIBUTING.md, stop 54). Where y is not
// streamed and there is no mask, the next row's max of 16-bit codes is taken alongside a row's
// exponentials instead, a pair of blocks of it with each pair of theirs, and the row after it
// prefetched (codes_max_along): bf16 1.04-1.10 times as fast again (stop 78).
// A streamed y (stream_threshold(), engine/lanes.hpp) takes the products with non-temporal stores
// over the whole 64-byte lines of its rows: on a 2-core Intel Xeon with AMX, 4096 x 4096 bf16 1.01
// times as fast (bound by exp). A float y too, its exponentials then in the scratch row: there
// 4096 x 4096 fp32 ran 1.26 times as fast with the next row of x prefetched by its pages (1.08
// with it prefetched in order; two libraries in one process, medians of 7 rounds), and in the
// bench, the same run, 0.79-0.80 of memcpy and 2.03-2.09x oneDNN where it was 0.62 and 1.58x
// (CONTRIBUTING.md, stop 62). Written into y and read back, its lines were read from memory
// before they were written (three streams of memory where memcpy has two).
// Where y is streamed or float, a row's products go alongside the next row's exponentials, a block
// of them with each block of those (products_along; with scratch, two rows of it), so that the
// stores of y, a streamed y's above all, overlap exp's arithmetic, where in a loop of their own
// they waited for memory: on a 2-core Intel Xeon with AMX, two libraries in one process, medians
// of 9 to 21 rounds in three runs, 4096 x 4096 fp32 1.15-1.18 times as fast, bf16 1.06-1.12, fp16
// 1.02-1.06, and 1576 x 768 fp32 1.05-1.09 (its exponentials into y's rows). A bf16 y at
// 1576 x 768, not streamed, keeps the products' own loop: fused, it ran 0.94-0.99 times as fast
// (CONTRIBUTING.md, stop 64). They are fused only where two rows of exponentials and a row of x
// fit in L1, for a streamed y on Intel processors and AMD's from Zen 5 on, and for exponentials in
// y's rows where those do not alias (softmax_fuses below: on an AMD EPYC (Zen 4), unfused,
// 4096 x 4096 took 0.62-0.80 of the time; on a Zen 5, 1.08-1.14).
// The backward is two passes: dot = row_sum_of(dy * y), then dx = scale * y * (dy - dot)
// (vector::map).
//
// Numerics (fp32 inside). An fp32 result y32 (before y's rounding) has relative error at most
//     (2 + |a| + 2 + k) u + (|a| + m_a) 2^-28,   u = 2^-24, a = s - m the element's exponent,
// against the exact softmax of the decoded inputs: 2 ulp + |a| 2^-28 for exp (softmax_exp below;
// the test measures at most 1.12 ulp beyond the |a| term over [-120, 0]; its results are normal,
// as are e and sum, so only y's last rounding meets the subnormals), which the row's sum carries as
// m_a 2^-28, m_a the row's mean |a| weighted by y,
// |a| u for rounding its argument a = scale * x - m (one FMA; the error of m itself cancels, as
// every element of the row shares it), u each for the reciprocal and the product, and
// k u <= (ceil(cols / 64) + 6) u for the fp32 sum of e (64 partial sums on every path, then
// combined pairwise: engine/lanes.hpp). Measured (tests/kernels/softmax_test.cpp: normal inputs,
// sigma 2, scale 0.7, rows of 1 to 4097, every mask), the error beyond the |a| term: at most 3.8
// fp32 ulp, on every path; the test checks the bound above and 8 ulp. The |a| terms are the price
// of fp32 scores (and, a sixteenth as much, of ln2/8 as one fp32 constant in exp): an element 20
// below its row's max (y about 2e-9 of the largest) may be 20 ulp off; the large elements, which
// carry the row's mass, are within the few ulp above.
// A y of a narrow format (at most 10 mantissa bits: bf16, fp16, tf32, fp8) takes a cheaper
// exponential, softmax_exp_narrow, of relative error 8e-5 + |a| 2^-23. The element's exponential
// and the row's sum both carry it, so the bound above gains 1.6e-4 + (|a| + m_a) 2^-23 in place of
// its 2^-28 term (the test checks that bound with it): two thirds of half the 2^-11 or more
// between such codes (the |a| terms matter only far below the row's max, among y's smallest
// codes). So each code is the correctly rounded fp64 result or, where that result lies within the
// fp32 error of a rounding boundary, its neighbour (1 ulp).
//
// Special values (as reference/softmax.hpp defines them):
//   - a row whose scores are all -inf (fully masked by either mask, or -inf inputs with scale > 0)
//     gives zeros;
//   - NaN in any score that is not masked out makes its row NaN, and only its row (a NaN x under a
//     -inf additive mask is a NaN score; a boolean mask never uses a masked x);
//   - a +inf score makes its row NaN (inf - inf), as do 0 * inf (scale 0, infinite x) and
//     inf + -inf (an infinite x under a -inf additive mask);
//   - huge inputs do not overflow: exp sees s - m <= 0 (or at most half an ulp of m above, the
//     exact product scale * x against the rounded max: below 1/2), and the largest term is about
//     1; a row whose max score is 2^24 or more in magnitude takes its scores rounded to fp32
//     before exp, one more pass (softmax_huge below). The scores are fp32: scale * x (+ mask) must
//     be below fp32's max (3.4e38), or the row is NaN, where the fp64 reference may still be
//     finite;
//   - scale may be negative or 0 (scale 0: a uniform row, 1 / cols everywhere).
// The backward follows the arithmetic: NaN in a row of y or dy makes that row of dx NaN; a fully
// masked row (y = 0) gives dx = 0 for finite dy.
//
// Rounding: y and dx are encoded with `cast` (nearest even by default; stochastic: element (r, c)
// draws its bits with index r * cols + c, stream cast.stream, whatever the blocking or stride).
// y may be x itself, and dx may be dy itself (the same memory and format); other overlaps are not
// supported. Shapes that do not fit throw shape_error naming the kernel, the argument and both
// sizes, before anything is written.

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tilekern/engine/vector.hpp"
#include "tilekern/error.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/rounding.hpp"

namespace tilekern {

struct softmax_options {
  float scale = 1.0f;  // softmax of scale * x (+ mask)
};

namespace detail {

namespace hn = hwy::HWY_NAMESPACE;

// Throws shape_error unless `tensor` is rows x cols.
inline void check_same_shape(const char* function, const char* argument, std::size_t rows,
                             std::size_t cols, std::size_t expected_rows, std::size_t expected_cols,
                             const char* what) {
  if (rows != expected_rows || cols != expected_cols) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": " + argument + " is " + shape_text(rows, cols) +
             ", expected " + shape_text(expected_rows, expected_cols) + " (" + what + ")";
    });
  }
}

// 2^(j/8) 2^64 for j = 0..7, each rounded to fp32, twice (16-lane lookups read the low 4 bits).
alignas(64) inline constexpr float softmax_exp_table[16] = {
    0x1p64f,        0x1.172b84p64f, 0x1.306fep64f,  0x1.4bfdaep64f, 0x1.6a09e6p64f, 0x1.8ace54p64f,
    0x1.ae89fap64f, 0x1.d5818ep64f, 0x1p64f,        0x1.172b84p64f, 0x1.306fep64f,  0x1.4bfdaep64f,
    0x1.6a09e6p64f, 0x1.8ace54p64f, 0x1.ae89fap64f, 0x1.d5818ep64f};

// Its first 8 entries less j in bits 20..22, as integers (no use as floats themselves): adding m
// shifted left by 20 (mod 2^32), m = 8k + j, to entry j gives 2^(j/8) 2^64 2^k (softmax_exp).
alignas(32) inline constexpr std::array<float, 8> softmax_exp_table_less_j = [] {
  std::array<float, 8> entries{};
  for (std::uint32_t j = 0; j < 8; ++j) {
    entries[j] =
        std::bit_cast<float>(std::bit_cast<std::uint32_t>(softmax_exp_table[j]) - (j << 20));
  }
  return entries;
}();

// table[j mod 8] in each lane, j the lane's integer (its low 3 bits; on 16 lanes its low 4, from a
// table of 16 entries, repeated): one permute on AVX2 and AVX-512.
template <class D>
HWY_INLINE hn::Vec<D> softmax_exp_lookup(D d, hn::Vec<hn::RebindToSigned<D>> j,
                                         const float* table) {
  if constexpr (hn::MaxLanes(D()) == 1) {
    return hn::Set(d, table[hn::GetLane(j) & 7]);
  } else if constexpr (hn::MaxLanes(D()) == 8) {
    return hn::Vec<D>{_mm256_permutevar8x32_ps(_mm256_load_ps(table), j.raw)};
  } else {
#if defined(__AVX512F__)
    // The zero-masking form with every lane selected compiles to the same vpermps; the plain
    // _mm512_permutexvar_ps passes _mm512_undefined_ps(), on which gcc 12 warns
    // maybe-uninitialized (bug 105593), an error under -Werror.
    return hn::Vec<D>{_mm512_maskz_permutexvar_ps(0xffff, j.raw, _mm512_load_ps(table))};
#endif
  }
}

// e^a 2^64 for a <= 0, always an fp32 normal (a below -120 counts as -120, whose result rounds to
// 0 once scaled back by the row sum; NaN gives a finite value: softmax_views makes such rows NaN).
// The 2^64 keeps the exponentials of elements far below the row's max normal, so that their
// final y = e * (1 / sum) rounds once, also into the subnormals, and costs one fp32 exponent add
// where a general exp spends a split scaling on it.
// a = (8k + j) ln2/8 + r, m = 8k + j = round(a 8/ln2) by the 1.5 * 2^23 trick inside one FMA,
// r = a - m c in one FMA, c = ln2/8 rounded to fp32 (2.75e-9 above it, relative), |r| <= ln2/16
// and a little: e^a then carries m (c - ln2/8), at most |a| 2^-28 relative, a sixteenth of the
// |a| u that softmax's rounding of a = scale * x - m costs it already;
// e^r - 1 = r + r^2 (c2 + c3 r) (c2, c3 a minimax fit of the relative error of e^r: 0.43 u);
// t = 2^(j/8) 2^64 from an 8-entry table, t e^r = t + t (e^r - 1) in one FMA, and 2^k added to
// the exponent field of t before it: m shifted left by 20 is k in the field and j in bits 20..22
// (the magic's bits shift out), which the table's entries have less (softmax_exp_table_less_j),
// so one integer add of that to the entry gives t 2^k, a normal (2^-110 or more), and the FMA
// rounds t 2^k e^r as it rounds t e^r, times 2^k: the same bits as adding k to its result, which
// took a mask more (on a first-generation Zen, a loop of exponentials 0.90 of the time, fp32
// softmax in the bench 4096 x 4096 0.97-0.98, 1576 x 768 within its noise; the same bits over
// every fp32 in [-130, 1/2], on 8 lanes and 1; stop 85); on AVX-512, vscalefps by m / 8 after the
// FMA (its floor is k), the same bits, results being normal (bf16 1576 x 768 softmax 467-469 us in
// two runs, 479-487 in five of the build before it).
// On AVX-512, m / 8 comes from the magic in one FMA, exactly, and r from it by ln2 rounded to fp32
// (8 c: the same products, the same bits), one multiplication fewer than taking m and then
// dividing it by 8 for vscalefps (fp32 1576 x 768 softmax 1.05 times as fast). Elsewhere
// m is the magic subtracted, which a first-generation Zen does on an adder, not on the two pipes
// of its multiply-adds. There, one block at a time, m so and t e^r as t + t (e^r - 1) took fp32
// softmax 0.89-0.96 of the time of m / 8 and t times e^r by Horner's rule (1576 x 768 and
// 4096 x 4096, medians of three runs, three runs each; CONTRIBUTING.md, stop 80), and t e^r
// rounds once where that rounded e^r and then its product. ln2/8 in two parts, as it was until
// stop 82, kept e^a within 2 ulp (1.14 measured), for one FMA more, in a loop bound by its
// arithmetic: with one, on a first-generation Zen, fp32 1576 x 768 softmax took 0.94 of the time
// (two libraries in one process, medians of 7 rounds), and in the bench ran 1.67-1.72x oneDNN
// against 1.59-1.62x (CONTRIBUTING.md, stop 82).
// Error: within 2 ulp + |a| softmax_exp_slope (relative) of e^a 2^64 on [-120, 0]
// (tests/kernels/softmax_test.cpp measures it on every path: at most 1.12 ulp beyond the |a| term).
inline constexpr double softmax_exp_slope = 0x1p-28;
// On B blocks at once, each step over all of them before the next (each_block, engine/lanes.hpp).
template <class D, std::size_t B>
HWY_INLINE std::array<hn::Vec<D>, B> softmax_exp(D d, const std::array<hn::Vec<D>, B>& a) {
  const hn::RebindToSigned<D> di;
#if defined(__AVX512F__)
  constexpr bool scalef = hn::MaxLanes(D()) == 16;
#else
  constexpr bool scalef = false;
#endif
  constexpr float unit = scalef ? 1.0f : 0.125f;  // of ln2 for the multiple below
  const auto magic = hn::Set(d, 0x1.8p23f);
  const auto step = [&](auto f) TILEKERN_INLINE_LAMBDA { return each_block<B>(f); };
  const auto x = step([&](std::size_t i) { return hn::Max(a[i], hn::Set(d, -120.0f)); });
  const auto shifted = step([&](std::size_t i) {  // magic + m
    return hn::MulAdd(x[i], hn::Set(d, 0x1.715476p+3f), magic);
  });
  // r = a - m ln2/8, by m / 8 for vscalefps, else by m.
  const auto multiple = step([&](std::size_t i) {
    return scalef ? hn::MulAdd(shifted[i], hn::Set(d, 0.125f), hn::Set(d, -0x1.8p20f))
                  : hn::Sub(shifted[i], magic);
  });
  const auto r = step([&](std::size_t i) {
    return hn::NegMulAdd(multiple[i], hn::Set(d, 0x1.62e43p-1f * unit), x[i]);
  });
  const auto c3_r_c2 = step([&](std::size_t i) {
    return hn::MulAdd(hn::Set(d, 0x1.555658p-3f), r[i], hn::Set(d, 0x1.000878p-1f));
  });
  const auto r2 = step([&](std::size_t i) { return hn::Mul(r[i], r[i]); });
  const auto e_r_minus_1 = step([&](std::size_t i) { return hn::MulAdd(r2[i], c3_r_c2[i], r[i]); });
  // t = 2^(j/8) 2^64, times 2^k where there is no vscalefps: the field add, on the table's entry.
  const auto t = step([&](std::size_t i) {
    const auto m = hn::BitCast(di, shifted[i]);
    if constexpr (scalef) {
      return softmax_exp_lookup(d, m, softmax_exp_table);
    } else {
      const auto entry = softmax_exp_lookup(d, m, softmax_exp_table_less_j.data());
      return hn::BitCast(d, hn::Add(hn::BitCast(di, entry), hn::ShiftLeft<20>(m)));
    }
  });
  const auto scaled = step([&](std::size_t i) { return hn::MulAdd(t[i], e_r_minus_1[i], t[i]); });
#if defined(__AVX512F__)
  if constexpr (scalef) {
    // 2^k by vscalefps (scaled 2^floor(m / 8)): one instruction for the two of the field add.
    // Zero-masking with every lane selected, as in softmax_exp_lookup (gcc bug 105593).
    return step([&](std::size_t i) {
      return hn::Vec<D>{_mm512_maskz_scalef_ps(0xffff, scaled[i].raw, multiple[i].raw)};
    });
  }
#endif
  return scaled;
}
template <class D>
HWY_INLINE hn::Vec<D> softmax_exp(D d, hn::Vec<D> a) {
  return softmax_exp(d, std::array{a})[0];
}

// e^a 2^64 as softmax_exp gives it, for a y of a narrow format (at most 10 mantissa bits: bf16,
// fp16, tf32, fp8), whose codes are 2^-11 or more apart relative: a cheaper exponential whose
// error is well below that. s = a log2(e) + 1/2 in one FMA = n + f with n = round(s) and f = s - n
// (|f| <= 1/2, exact: s's fraction bits), so e^a = 2^n 2^(f - 1/2); 2^(f - 1/2) 2^64 a polynomial
// of degree 3 (a minimax fit of the relative error on [-1/2, 1/2], 7.48e-5; its coefficients
// times 2^64); and 2^n added to the exponent field, on AVX-512 by vscalefps: 8 vector operations
// for 16 lanes where softmax_exp takes 10. The same bits on every path. Rounding s and log2(e) to
// fp32 adds at most |a| 2^-23 relative (and 2^-25 for s's half).
// n is vrndscaleps, not f vreduceps (s - round(s) in one instruction, then n = s - f): on a Zen 5
// vreduceps and vscalefps each take two slots of the two pipes that add, vrndscaleps one, and bf16
// 1576 x 768 softmax ran 1.04-1.05 times as fast without vreduceps (CONTRIBUTING.md, stop 67).
// bf16 1576 x 768 softmax ran 1.08 times as fast as with the 9 of a degree-4 polynomial of f
// (two libraries in one process, median of 15 rounds; the bench 1.08-1.13; CONTRIBUTING.md, stop
// 62), which had taken it 1.13-1.15 times as fast as the 12 of softmax_exp before its eighths
// (stop 59).
// Error: relative, at most softmax_narrow_exp_error + |a| softmax_narrow_exp_slope on [-120, 1/2]
// (tests/kernels/softmax_test.cpp measures it on every path: 7.49e-5 beyond the |a| term).
inline constexpr double softmax_narrow_exp_error = 8e-5, softmax_narrow_exp_slope = 0x1p-23;
// On B blocks at once, as softmax_exp.
template <class D, std::size_t B>
HWY_INLINE std::array<hn::Vec<D>, B> softmax_exp_narrow(D d, const std::array<hn::Vec<D>, B>& a) {
  const hn::RebindToSigned<D> di;
  const auto step = [&](auto f) TILEKERN_INLINE_LAMBDA { return each_block<B>(f); };
  const auto c = [&](float coefficient) { return hn::Set(d, coefficient * 0x1p64f); };
  const auto s = step([&](std::size_t i) {
    return hn::MulAdd(hn::Max(a[i], hn::Set(d, -120.0f)), hn::Set(d, 0x1.715476p+0f),
                      hn::Set(d, 0.5f));
  });
  const auto n = step([&](std::size_t i) { return hn::Round(s[i]); });
  const auto f = step([&](std::size_t i) { return s[i] - n[i]; });
  // 2^(f - 1/2) 2^64 by Horner's rule
  const auto p3 =
      step([&](std::size_t i) { return hn::MulAdd(c(0x1.3f96a4p-5f), f[i], c(0x1.5f56a4p-3f)); });
  const auto p2 = step([&](std::size_t i) { return hn::MulAdd(p3[i], f[i], c(0x1.f5f97ep-2f)); });
  const auto p = step([&](std::size_t i) { return hn::MulAdd(p2[i], f[i], c(0x1.6a033cp-1f)); });
  return step([&](std::size_t i) {
#if defined(__AVX512F__)
    if constexpr (hn::MaxLanes(D()) == 16) {
      // p 2^n, a normal, by vscalefps. Zero-masking with every lane selected, as in softmax_exp
      // (gcc bug 105593).
      return hn::Vec<D>{_mm512_maskz_scalef_ps(0xffff, p[i].raw, n[i].raw)};
    }
#endif
    return hn::BitCast(d,
                       hn::Add(hn::BitCast(di, p[i]), hn::ShiftLeft<23>(hn::ConvertTo(di, n[i]))));
  });
}
template <class D>
HWY_INLINE hn::Vec<D> softmax_exp_narrow(D d, hn::Vec<D> a) {
  return softmax_exp_narrow(d, std::array{a})[0];
}

// Whether softmax's y of format Y takes softmax_exp_narrow.
template <class Y>
constexpr bool softmax_narrow_output = false;
template <minifloat_format Y>
constexpr bool softmax_narrow_output<Y> = Y::mantissa_bits <= 10;

// Rows per block: about row_block_bytes() (simd/isa.hpp: half of L2) of x and fp32 scratch.
template <class X>
std::size_t softmax_block_rows(std::size_t rows, std::size_t cols) {
  const std::size_t row_bytes = cols * (sizeof(X) + sizeof(float));
  return std::clamp<std::size_t>(row_block_bytes() / std::max<std::size_t>(row_bytes, 1), 1, rows);
}

// What softmax needs per block of rows, allocated once per call.
struct softmax_scratch {
  softmax_scratch(std::size_t block_rows, std::size_t cols, bool block)
      : values(block ? std::make_unique_for_overwrite<float[]>(block_rows * cols) : nullptr),
        column(3 * block_rows) {}
  // block_rows x cols: scores or exponentials, each written before it is read (not cleared: a
  // memset of it was 7% of a one-row bf16 softmax)
  std::unique_ptr<float[]> values;
  std::vector<float> column;  // the row maxima, minus them, the row sums: block_rows each
};

// A rows x 1 view of n floats.
inline view<float> column_view(float* data, std::size_t n) {
  return {data, n, 1, 1};
}

// The mask kinds.
struct no_mask {};
template <class M>
constexpr bool is_boolean_mask = std::is_same_v<std::remove_const_t<M>, bool>;

// What softmax computes of each element, on lanes: the scores scale * x with a boolean mask (-inf
// where it is false) or an additive one, e = exp(scale * score + bias), and products.
inline constexpr auto softmax_kept_scores = [](auto d, auto v, auto keep, auto s) {
  return hn::IfThenElse(keep != hn::Zero(d), v * s,
                        hn::Set(d, -std::numeric_limits<float>::infinity()));
};
inline constexpr auto softmax_added_scores = [](auto, auto v, auto add, auto s) {
  return hn::MulAdd(v, s, add);
};
// e = exp(scale * score + bias), four blocks at a time on AVX2 (blocks_at_once, engine/lanes.hpp):
// on a 2-core AMD EPYC of the first Zen generation softmax took 0.81-0.84 of the time of one
// block at a time (fp32, 1576 x 768 and 4096 x 4096; bf16 0.77-0.85), two at a time 1.03-1.11
// times four's, eight 1.3-1.5 (spilling; medians of three runs, two or three runs each alternating,
// CONTRIBUTING.md, stop 80). One at a time with 16 lanes (AVX-512, not measured so).
template <class Y>
struct softmax_exponential_blocks {
  template <class D>
  static constexpr std::size_t blocks = hn::MaxLanes(D()) == 8 ? 4 : 1;
  template <class D, std::size_t B>
  HWY_INLINE std::array<hn::Vec<D>, B> operator()(D d, const std::array<hn::Vec<D>, B>& v,
                                                  const std::array<hn::Vec<D>, B>& s,
                                                  const std::array<hn::Vec<D>, B>& bias) const {
    const auto a = each_block<B>([&](std::size_t i) { return hn::MulAdd(v[i], s[i], bias[i]); });
    if constexpr (softmax_narrow_output<Y>)
      return softmax_exp_narrow(d, a);
    else
      return softmax_exp(d, a);
  }
  template <class D>
  HWY_INLINE hn::Vec<D> operator()(D d, hn::Vec<D> v, hn::Vec<D> s, hn::Vec<D> bias) const {
    return (*this)(d, std::array{v}, std::array{s}, std::array{bias})[0];
  }
};
template <class Y>
inline constexpr softmax_exponential_blocks<Y> softmax_exponential{};
inline constexpr auto softmax_product = [](auto, auto v, auto s) { return v * s; };
inline constexpr auto softmax_value = [](auto, auto v) { return v; };  // x itself, for its max

// A row's bias, -m, from its max m: 0 for a fully masked row (m = -inf), so that its arguments are
// -inf, not NaN.
inline float softmax_bias(float m) {
  return m == -std::numeric_limits<float>::infinity() ? 0.0f : -m;
}
// Whether a row of max score m takes its scores rounded to fp32 before its exponentials (without a
// mask; with one they are rounded already): |m| >= 2^24. The exponentials' FMA takes the exact
// products scale * x, which for the row's largest elements lie up to half an ulp of m from the
// rounded max m, and from 2^24 on that is a whole unit or more: above 44 their exponentials
// overflow (the row NaN), below -120 they underflow as every element does (the row uniform,
// where the fp64 softmax of the scores may be far from it). Rounded, the largest score is m.
inline bool softmax_huge(float m) {
  return std::abs(m) >= 0x1p24f && std::abs(m) < std::numeric_limits<float>::infinity();
}
// Whether the row max of the scores scale * x is scale times the row max of x, so that the max
// takes no products: for a finite scale > 0, by which fp32 multiplication rounds monotonically.
inline bool softmax_scaled_max(float scale) {
  return scale > 0 && scale < std::numeric_limits<float>::infinity();
}
// A row's factor, 1 / sum, from its max m and the sum of its exponentials: 0 for a fully masked
// row (m = -inf); NaN for a row with a NaN or +inf score (m NaN or +inf), which softmax_exp,
// finite for every argument, leaves to this.
inline float softmax_factor(float m, float sum) {
  constexpr float infinity = std::numeric_limits<float>::infinity();
  return m == -infinity    ? 0.0f
         : !(m < infinity) ? std::numeric_limits<float>::quiet_NaN()
                           : 1.0f / sum;
}

// Operand `op` moved down by `rows` rows: its row r is op's row r + rows.
template <class Op>
Op rows_down(Op op, std::size_t rows) {
  if (op.data != nullptr) op.data += rows * op.row_step;
  return op;
}

// Row `row` of softmax's products, y = e * factor (softmax_product, as the products' own loop
// maps), into `out` from its exponentials `exps` (`end` columns), taken a block at a time alongside
// the next row's exponentials: at(d, c), which map_row calls with each whole block of a row in
// order, as it does a prefetch, stores the products' block c (bf16's blocks by pairs,
// two_blocks_in_order: the second of each pair stores both), and rest() what they left, after the
// row.
template <class D, class Y, bool Streamed>
struct products_along {
  static constexpr std::size_t lanes = hn::MaxLanes(D());
  static constexpr std::size_t step = two_blocks_in_order<Y, D> ? 2 * lanes : lanes;
  const lane_store<Y, D, Streamed>& out;
  const float* exps;
  hn::Vec<D> factor;
  std::size_t row, end;

  HWY_INLINE hn::Vec<D> product(D d, std::size_t c) const {
    return softmax_product(d, hn::LoadU(d, exps + c), factor);
  }
  HWY_INLINE void at(D d, std::size_t c) const {
    if constexpr (step == lanes) {
      if (c + lanes <= end) out.store(d, product(d, c), row, c);
    } else if (c % step != 0 && c + lanes <= end) {
      out.store_in_order(product(d, c - lanes), product(d, c), row, c - lanes);
    }
  }
  HWY_INLINE void rest(D d) const {
    std::size_t c = end / step * step;
    for (; c + lanes <= end; c += lanes) out.store(d, product(d, c), row, c);
    if (c < end) {
      alignas(64) float staged[lanes] = {};
      std::copy_n(exps + c, end - c, staged);
      out.store_tail(d, softmax_product(d, hn::Load(d, staged), factor), row, c, end - c);
    }
  }
};

// The max of a row of 16-bit codes, `codes` (`cols` of them; vector::detail::code_extremes), found
// alongside the exponentials of the row before it, with the row `after` it prefetched: at(d, c),
// which map_row calls with each whole block of a row in order from column 0 (a reduction's), as it
// does a prefetch, takes the blocks by pairs: with the first it prefetches the pair's codes of
// `after` (a 64-byte line on 16 lanes), with the second it takes the pair's codes of `codes`;
// value() takes the rest after the row, and gives the max as reduce_code_row does. softmax_rows
// takes it where y is not streamed and there is no mask, in place of a pass over the row of its
// own: on a 2-core AMD EPYC (Zen 4), bf16 softmax ran 1.04 times as fast at 1576 x 768, 512 x 2048
// and 1024 x 1024, 1.07-1.09 at 64 x 4096 and 2048 x 2048, and 1.10 at 197 x 64 (two libraries in
// one process, medians of 101 to 2001 rounds; in the bench at 1576 x 768, the bench's plain loop
// took 0.86 of its time against 0.82). At 4096 x 4096, streamed, where the row max waits for
// memory, it ran 0.97-0.99 times as fast, and it is not taken there (CONTRIBUTING.md, stop 78).
template <class D, class X>
struct codes_max_along {
  using DU = hn::Repartition<std::uint16_t, D>;
  static constexpr std::size_t lanes = hn::MaxLanes(D()), step = 2 * lanes;
  using extremes_type = std::conditional_t<(lanes > 1), vector::detail::code_extremes_lanes<X, DU>,
                                           vector::detail::code_extremes<X>>;
  const std::uint16_t* codes;
  const std::uint16_t* after;
  std::size_t cols;
  mutable extremes_type extremes{};

  HWY_INLINE void at(D, std::size_t c) const {
    if constexpr (lanes > 1) {
      if (c % step == 0) {
        hwy::Prefetch(after + c);
      } else {
        extremes.add(hn::LoadU(DU(), codes + c - lanes));
      }
    }
  }
  float value() const {
    vector::detail::code_extremes<X> all;
    std::size_t c = 0;
    if constexpr (lanes > 1) {
      all = extremes.fold();
      c = cols / step * step;
    }
    for (; c < cols; ++c) all.add(codes[c]);
    return all.template value<combine::max>();
  }
};

// Whether softmax's row passes fuse: -1 as softmax_fuses chooses (the default), 0 never, 1 always.
inline std::atomic<int>& softmax_fusion_setting() {
  static std::atomic<int> setting{-1};
  return setting;
}
// Sets whether softmax's row passes fuse a row's products with the next row's exponentials
// (softmax_fuses below), to test both ways on any machine; std::nullopt returns to the default.
inline void set_softmax_fusion(std::optional<bool> on) {
  softmax_fusion_setting().store(on ? (*on ? 1 : 0) : -1);
}
// Whether two rows `stride_bytes` apart start within 512 bytes of each other modulo 4 KiB, so that
// the processor may take a load from one for a store to the other at the same column (4K
// aliasing) and hold it back.
inline bool rows_alias(std::size_t stride_bytes) {
  const std::size_t offset = stride_bytes % 4096;
  return std::min(offset, 4096 - offset) < 512;
}
// Whether softmax_rows, where it can (y float or streamed), takes a row's products alongside the
// next row's exponentials (products_along), for rows of `cols` elements, x's of `x_bytes` each:
// where what it then keeps in L1 fits there (two rows of fp32 exponentials and a row of x) and,
// for exponentials in y's rows (a float y not streamed, `y_stride_bytes` apart), where those do not
// alias (rows_alias); for a streamed y, except on AMD processors before Zen 5 (family 26).
// Otherwise each row's products run in a loop of their own after its exponentials, which on a
// 2-core AMD EPYC (Zen 4, 32 KiB of L1) took, as a fraction of the fused loop's time: streamed,
// bf16 0.76-0.80 at 1536 to 4096 columns (0.96 at 1024), fp32 0.80 at 2048 and 4096; into y's
// rows, fp32 0.74-0.88 at 1024, 2048 and 4096 columns (rows 4 to 16 KiB apart), but 1.05 at 1536
// and 1.10 at 768 (stop 72). On a 2-core Intel Xeon with 48 KiB of L1 the fused loop had taken
// 0.85-0.94 of their time at 4096 x 4096 streamed (top of this header; CONTRIBUTING.md, stop 64),
// and on a 2-core AMD EPYC of the Zen 5 family (48 KiB of L1), streamed, 0.88-0.93 in bf16 at 1024
// to 4096 columns and 0.54-0.93 in fp32 (two libraries in one process, each way round; in the
// bench, fp32 4096 x 4096 0.80-0.94 of memcpy against 0.65-0.69, bf16 the same; stop 87).
inline bool softmax_fuses(bool streamed, std::size_t cols, std::size_t x_bytes,
                          std::size_t y_stride_bytes) {
  if (const int setting = softmax_fusion_setting().load(); setting >= 0) return setting == 1;
  if (cols * (2 * sizeof(float) + x_bytes) > l1_cache_bytes()) return false;
  const cpu_features& cpu = detected_cpu_features();
  return streamed ? !cpu.amd || cpu.family >= 26 : !rows_alias(y_stride_bytes);
}

// softmax of x into y row by row: the three passes of softmax_views over one row, the next row's
// max coming between its exponentials and its products, the row's exponentials in a row of fp32
// scratch (or in y's row when y is float and not streamed), all of them in L1; while it takes a
// row's exponentials it prefetches the next row of x (prefetch_pages), and the next
// row of y to be written (this row, or where the exponentials go into y the next), so that the
// reads and writes of memory overlap the arithmetic of exp. Streamed: the products go to the whole
// 64-byte lines of y's rows with non-temporal stores, and y is not prefetched. Where y is float or
// streamed, a row's products go alongside the next row's exponentials (products_along), not
// after its own.
template <bool Streamed, class X, class Mask, class Y>
void softmax_rows(view<const X> x, const Mask& mask, view<Y> y, float scale,
                  const cast_options& cast) {
  constexpr const char* function = "tilekern::softmax";
  const std::size_t rows = x.rows(), cols = x.cols();
  constexpr bool masked = !std::is_same_v<Mask, no_mask>;
  constexpr bool float_out = std::is_same_v<Y, float>;
  // The exponentials go into y's rows where y is float and not streamed, else into scratch.
  constexpr bool exps_in_y = float_out && !Streamed;
  // Where y is float or streamed, row r - 1's products may go alongside row r's exponentials
  // (products_along; see the loop below), and do where softmax_fuses says so.
  constexpr bool fusable = float_out || Streamed;
  const bool fused = fusable && softmax_fuses(Streamed, cols, sizeof(X), y.stride() * sizeof(Y));
  // Two scratch rows with a mask, or fused: the next row's scores go into one, or the row before
  // still holds its exponentials, while the other takes this row's. Otherwise the next row's max
  // reads x, and the products follow the exponentials, and one will do.
  const std::size_t scratch_rows = masked || fused ? 2 : 1;
  const auto scratch =
      exps_in_y ? nullptr : std::make_unique_for_overwrite<float[]>(scratch_rows * cols);
  const view<float> work = [&] {
    if constexpr (exps_in_y)
      return y;
    else
      return view<float>(scratch.get(), scratch_rows, cols);
  }();
  // work's rows: row r's exponentials go into row work_row(r) (below) of it.
  const operand<float, along::varies> work_rows{work.data(), work.stride(), 1};
  const auto x_rows = resolve(function, "x", x, rows, cols).template as<along::varies>();
  const auto mask_rows = [&] {
    if constexpr (masked)
      return resolve(function, "mask", mask, rows, cols).template as<along::varies>();
    else
      return 0;
  }();
  const auto constant = [](float value) {
    return operand<float, along::constant>{nullptr, 0, 0, value};
  };
  const bool scaled_max = softmax_scaled_max(scale);
  const bool codes = vector::detail::reduced_as_codes<X> && scaled_max;
  // Without a mask and not streamed, the next row's max of codes is found alongside a row's
  // exponentials (codes_max_along), where codes says so.
  constexpr bool max_along = vector::detail::reduced_as_codes<X> && !masked && !Streamed;
  const bool max_found_along = max_along && codes;
  visit_lanes([&](auto d) {
    using D = decltype(d);
    const std::false_type in_order;
    // Streamed: the products go to the rows' whole lines with non-temporal stores, to the columns
    // before and after them with plain ones (split_at_lines, engine/lanes.hpp).
    const line_split split = Streamed ? split_at_lines(y) : line_split{0, cols, 0};
    const lane_store<Y, D, Streamed> out(
        d, columns_of(destination<Y, Streamed>{y, cast}, split.head, split.lines));
    const lane_store<float, D> work_out(d, destination<float>{work});
    const lane_store<no_output, D> nothing(
        d, destination<no_output>{view<no_output>(nullptr, rows, cols)});
    const prefetch_pages<X> pages(cols);
    // maximum = the max of row r's scores (with a mask, the scores also into work's row `at`).
    // map_row takes one row index for its sources and its destination: where work is scratch
    // (at r % scratch_rows), the sources are moved down by r - at rows, so that their row at is
    // row r. Inlined: called, it took the lane_stores above with it by address, and gcc read their
    // fields from memory again after every vector store of the row loops (fp32 and bf16 1576 x 768
    // 1.03 times as fast inlined, fp32 4096 x 4096 1.04; CONTRIBUTING.md, stop 64).
    const auto scores = [&](std::size_t r, std::size_t at, auto& maximum) TILEKERN_INLINE_LAMBDA {
      if constexpr (masked) {
        if constexpr (is_boolean_mask<typename Mask::element_type>) {
          map_row<true, combine::max>(
              d, in_order, work_out, column_out{&maximum, 0}, softmax_kept_scores, no_prefetch(),
              at, cols, rows_down(x_rows, r - at), rows_down(mask_rows, r - at), constant(scale));
        } else {
          map_row<true, combine::max>(
              d, in_order, work_out, column_out{&maximum, 0}, softmax_added_scores, no_prefetch(),
              at, cols, rows_down(x_rows, r - at), rows_down(mask_rows, r - at), constant(scale));
        }
      } else if (codes) {
        if constexpr (vector::detail::reduced_as_codes<X>)
          maximum = scale * vector::detail::reduce_code_row<combine::max>(d, x.row(r).data(), cols);
      } else if (scaled_max) {
        // max(scale x) = scale max(x), rounding being monotonic: one product a row, where the
        // products took a multiplication a block (the block passes do the same). On a
        // first-generation Zen, fp32 softmax took 0.94-0.95 of the time at 1576 x 768 and
        // 0.92-1.00 at 4096 x 4096 (the bench, three rounds; CONTRIBUTING.md, stop 81).
        map_row<true, combine::max>(d, in_order, nothing, column_out{&maximum, 0}, softmax_value,
                                    no_prefetch(), r, cols, x_rows);
        maximum *= scale;
      } else {
        map_row<true, combine::max>(d, in_order, nothing, column_out{&maximum, 0}, softmax_product,
                                    no_prefetch(), r, cols, x_rows, constant(scale));
      }
    };
    // Row r's exponentials, then row r + 1's max, then row r's products: the max runs while the
    // sum of the exponentials and the factor 1 / sum complete, and the products while the max
    // does, where each pass waited for the one before. Fused, row r's products go alongside row
    // r + 1's exponentials instead (the last row's after the loop): see the top of this header.
    const auto work_row = [&](std::size_t r) -> std::size_t {
      return exps_in_y ? r : r % scratch_rows;
    };
    // Row r's exponentials, in work's row, as an operand whose row r it is (that of y).
    const auto exponentials = [&](std::size_t r) {
      return operand<float, along::varies>{work.row(work_row(r)).data(), 0, 1};
    };
    // Row r's products outside the lines of a streamed y, with their stores built once per call
    // (row_ends, engine/lanes.hpp); and all of them, in a loop of their own, from factor = 1 / the
    // row's sum. Built for each row, the ends' two stores took about 135 ns a row on a 2-core AMD
    // EPYC (Zen 4): built once, softmax bf16 4096 x 4096 ran 1.10-1.11 times as fast, fp32 1.09,
    // 1024 x 256 streamed 1.74 (a timing program, three processes); in the bench fp32 0.81 of
    // memcpy against 0.70, bf16 the same within its noise (CONTRIBUTING.md, stop 75).
    const auto y_ends = streamed_row_ends(d, destination<Y, Streamed>{y, cast}, split);
    const auto ends = [&](std::size_t r, float factor) TILEKERN_INLINE_LAMBDA {
      if constexpr (Streamed) y_ends.map(d, softmax_product, r, exponentials(r), constant(factor));
    };
    const auto products = [&](std::size_t r, float factor) TILEKERN_INLINE_LAMBDA {
      map_row<false, combine::sum>(d, in_order, out, column_out{nullptr, 0}, softmax_product,
                                   no_prefetch(), r, split.lines,
                                   from_column(exponentials(r), split.head), constant(factor));
      ends(r, factor);
    };
    float m = 0.0f;             // row r's max
    scores(0, work_row(0), m);  // x has a row: softmax returns first where it is empty
    float factor = 0.0f;        // 1 / the sum of the last row whose exponentials ran
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t at = work_row(r);
      float sum = 0.0f, next_m = 0.0f;
      const float bias = softmax_bias(m);
      // Fused, row r - 1's products (none for row 0, or not fused: `end` 0).
      const auto before = [&] {
        if constexpr (fusable) {
          const std::size_t b = r > 0 ? r - 1 : 0;
          return products_along<D, Y, Streamed>{out, work.row(work_row(b)).data() + split.head,
                                                hn::Set(d, factor), b,
                                                fused && r > 0 ? split.lines : 0};
        } else {
          return no_prefetch();
        }
      }();
      // Prefetched with the exponentials: the next row of x (or, where its max is found alongside,
      // the row after it: codes_max_along), and the next row of y that is written (this one's
      // product, or the next row's exponentials where they go into y). With them `before`, by
      // reference: gcc 12 read a copy of it back as one 64-byte load of what it had just stored a
      // word at a time, which then waited for those stores to reach L1, behind the non-temporal
      // stores of the products before them. On a 2-core AMD EPYC (Zen 4), bf16
      // 4096 x 4096 softmax ran 1.01-1.12 times as fast by reference (median 1.06; in the bench
      // 1.99x oneDNN against 1.82, median of five runs each; CONTRIBUTING.md, stop 76).
      const std::size_t next = std::min(r + 1, rows - 1);
      const auto next_x = [&] {
        if constexpr (max_along) {
          return codes_max_along<D, X>{storage_of(x.row(next).data()),
                                       storage_of(x.row(std::min(r + 2, rows - 1)).data()), cols};
        } else {
          return pages(x.row(next).data());
        }
      }();
      using along_type = decltype(before);
      // codes_max_along by reference, as it gathers; a prefetch_row by value.
      using next_type = std::conditional_t<max_along, const decltype(next_x)&, decltype(next_x)>;
      const prefetch_both<next_type, prefetch_both<prefetch_write<Y>, const along_type&>> ahead{
          next_x,
          {prefetch_write<Y>{Streamed ? nullptr : y.row(exps_in_y ? next : r).data()}, before}};
      if constexpr (masked) {
        map_row<true, combine::sum>(d, in_order, work_out, column_out{&sum, 0},
                                    softmax_exponential<Y>, ahead, at, cols, work_rows,
                                    constant(1.0f), constant(bias));
      } else if (softmax_huge(m)) {
        // The scores rounded into work's row first (softmax_huge), then as with a mask.
        map_row<false, combine::sum>(d, in_order, work_out, column_out{nullptr, 0}, softmax_product,
                                     no_prefetch(), at, cols, rows_down(x_rows, r - at),
                                     constant(scale));
        map_row<true, combine::sum>(d, in_order, work_out, column_out{&sum, 0},
                                    softmax_exponential<Y>, ahead, at, cols, work_rows,
                                    constant(1.0f), constant(bias));
      } else {
        map_row<true, combine::sum>(d, in_order, work_out, column_out{&sum, 0},
                                    softmax_exponential<Y>, ahead, at, cols,
                                    rows_down(x_rows, r - at), constant(scale), constant(bias));
      }
      // Fused: row r - 1's products finished before a mask's next scores go where its exponentials
      // are (in scratch, row (r + 1) % 2).
      if constexpr (fusable) {
        if (fused && r > 0) {
          before.rest(d);
          ends(r - 1, factor);
        }
      }
      if (r + 1 < rows) {
        if constexpr (max_along) {
          if (max_found_along) next_m = scale * next_x.value();
        }
        if (!max_found_along) scores(r + 1, work_row(r + 1), next_m);
      }
      factor = softmax_factor(m, sum);
      if (!fused) products(r, factor);
      m = next_m;
    }
    if (fused) products(rows - 1, factor);
    if constexpr (Streamed) hwy::FlushStream();  // its stores ordered before whatever follows
  });
}

// softmax of x into y, block by block, or row by row where row_passes() (softmax_rows; see the
// top of this header). mask is a view<const M> of rows x cols or 1 x cols, or no_mask.
template <class X, class Mask, class Y>
void softmax_views(view<const X> x, const Mask& mask, view<Y> y, float scale,
                   const cast_options& cast) {
  constexpr const char* function = "tilekern::softmax";
  const std::size_t rows = x.rows(), cols = x.cols();
  constexpr bool masked = !std::is_same_v<Mask, no_mask>;
  constexpr bool float_out = std::is_same_v<Y, float>;
  // A large y is written with non-temporal stores; in the block passes not a float y, whose
  // exponentials go into it: streaming it would need them in scratch, one more pass (fp32
  // 4096x4096 took 8-13% longer so). The row passes stream it through their scratch row (see the
  // top; the bench at 4096x4096 fp32 ran 0.83-0.86 times as fast so in stop 56, when the next row
  // of x was prefetched in order).
  if (row_passes()) {
    if (streams(y)) return softmax_rows<true>(x, mask, y, scale, cast);
    return softmax_rows<false>(x, mask, y, scale, cast);
  }
  const bool streamed = !float_out && streams(y);
  const std::size_t block_rows = softmax_block_rows<X>(rows, cols);
  // Scores with a mask, exponentials without one, unless they can go straight into y.
  softmax_scratch scratch(block_rows, cols, !float_out);

  for (std::size_t r0 = 0; r0 < rows; r0 += block_rows) {
    const std::size_t n = std::min(block_rows, rows - r0);
    const auto x_block = x.block(r0, 0, n, cols);
    const auto y_block = y.block(r0, 0, n, cols);
    const view<float> work = [&] {
      if constexpr (float_out)
        return y_block;
      else
        return view<float>(scratch.values.get(), n, cols);
    }();
    float* const maxes = scratch.column.data();
    float* const bias = maxes + block_rows;
    float* const sums = bias + block_rows;

    // m = the row maxima of the scores; `scores` what exp reads, with its scale.
    if constexpr (masked) {
      const auto mask_block = mask.rows() == 1 ? mask : mask.block(r0, 0, n, cols);
      if constexpr (is_boolean_mask<typename Mask::element_type>) {
        vector::map(work, softmax_kept_scores, x_block, mask_block, scale);
      } else {
        vector::map(work, softmax_added_scores, x_block, mask_block, scale);
      }
      vector::row_max(column_view(maxes, n), work);
    } else if (softmax_scaled_max(scale)) {
      // max(scale x) = scale max(x), rounding being monotonic: one product a row (bf16 and fp16:
      // row_max compares codes, without decoding them).
      vector::row_max(column_view(maxes, n), x_block);
      for (std::size_t r = 0; r < n; ++r) maxes[r] *= scale;
    } else {
      vector::row_max_of(column_view(maxes, n), softmax_product, x_block, scale);
    }
    for (std::size_t r = 0; r < n; ++r) bias[r] = softmax_bias(maxes[r]);

    // e = exp(score - m) 2^64, and the row sums of e.
    const auto row_bias = vector::column(column_view(bias, n));
    if constexpr (masked) {
      vector::detail::elementwise<true>(function, {"x", "scale", "bias"}, work,
                                        column_view(sums, n), softmax_exponential<Y>, work, 1.0f,
                                        row_bias);
    } else {
      vector::detail::elementwise<true>(function, {"x", "scale", "bias"}, work,
                                        column_view(sums, n), softmax_exponential<Y>, x_block,
                                        scale, row_bias);
      // Rows of huge scores again, their scores rounded first (softmax_huge), as the row passes
      // take them.
      for (std::size_t r = 0; r < n; ++r) {
        if (!softmax_huge(maxes[r])) continue;
        const auto row = work.block(r, 0, 1, cols);
        vector::map(row, softmax_product, x_block.block(r, 0, 1, cols), scale);
        vector::detail::elementwise<true>(function, {"x", "scale", "bias"}, row,
                                          column_view(sums + r, 1), softmax_exponential<Y>, row,
                                          1.0f, vector::column(column_view(bias + r, 1)));
      }
    }

    // y = e * (1 / sum). A fully masked row (m = -inf) has factor 0; a row with a NaN or +inf
    // score (m NaN or +inf) is NaN, which softmax_exp, finite for every argument, leaves to this.
    for (std::size_t r = 0; r < n; ++r) sums[r] = softmax_factor(maxes[r], sums[r]);
    write_rounded(y_block, cast, r0 * cols, streamed,
                  [&](const auto& to, std::size_t c, std::size_t k) {
                    vector::mul(to, work.block(0, c, n, k), vector::column(column_view(sums, n)));
                  });
  }
}

template <class Tensor>
auto const_view(Tensor&& tensor) {
  auto as_view = to_view(std::forward<Tensor>(tensor));
  using element = std::remove_const_t<typename decltype(as_view)::element_type>;
  return view<const element>(as_view);
}

// What a tensor argument of softmax is not: so that softmax(x, y, options) is never taken for
// softmax(x, mask, y).
template <class T>
concept not_softmax_options = !std::is_same_v<std::remove_cvref_t<T>, softmax_options>;

template <class X, class Y>
void check_softmax_types() {
  static_assert(engine_element<X>,
                "tilekern::softmax: x must hold float or a tilekern format (bf16, fp16, tf32, "
                "fp8_*, any minifloat<...>)");
  static_assert(engine_element<Y>,
                "tilekern::softmax: y must hold float or a tilekern format (bf16, fp16, tf32, "
                "fp8_*, any minifloat<...>)");
  static_assert(!std::is_const_v<Y>,
                "tilekern::softmax: y must be writable (not a view of const or a const range)");
}

}  // namespace detail

// y = softmax(scale * x) row by row (see the top of this header). x: rows x cols, a view or a
// contiguous range (one row); y: the same shape, writable; each float or any tilekern format.
template <class X, class Y>
void softmax(X&& x, Y&& y, const softmax_options& options = {}, const cast_options& cast = {}) {
  constexpr const char* function = "tilekern::softmax";
  const auto x_view = detail::const_view(std::forward<X>(x));
  const auto y_view = detail::to_view(std::forward<Y>(y));
  using x_type = std::remove_const_t<typename decltype(x_view)::element_type>;
  using y_type = typename decltype(y_view)::element_type;
  detail::check_softmax_types<x_type, y_type>();
  detail::check_same_shape(function, "y", y_view.rows(), y_view.cols(), x_view.rows(),
                           x_view.cols(), "the shape of x");
  if (x_view.empty()) return;
  detail::softmax_views(x_view, detail::no_mask{}, y_view, options.scale, cast);
}

// y = softmax(scale * x + mask) (mask of float or any format: additive, -inf masks out), or
// softmax over the elements a bool mask keeps (0 elsewhere); mask is rows x cols or 1 x cols.
template <class X, class Mask, detail::not_softmax_options Y>
void softmax(X&& x, Mask&& mask, Y&& y, const softmax_options& options = {},
             const cast_options& cast = {}) {
  constexpr const char* function = "tilekern::softmax";
  const auto x_view = detail::const_view(std::forward<X>(x));
  const auto mask_view = detail::const_view(std::forward<Mask>(mask));
  const auto y_view = detail::to_view(std::forward<Y>(y));
  using x_type = std::remove_const_t<typename decltype(x_view)::element_type>;
  using mask_type = std::remove_const_t<typename decltype(mask_view)::element_type>;
  using y_type = typename decltype(y_view)::element_type;
  detail::check_softmax_types<x_type, y_type>();
  static_assert(engine_element<mask_type> || std::is_same_v<mask_type, bool>,
                "tilekern::softmax: mask must hold bool (true = keep) or float or a tilekern "
                "format (additive)");
  const std::size_t rows = x_view.rows(), cols = x_view.cols();
  if (mask_view.cols() != cols || (mask_view.rows() != rows && mask_view.rows() != 1)) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": mask is " +
             detail::shape_text(mask_view.rows(), mask_view.cols()) + ", expected " +
             detail::shape_text(rows, cols) + " or 1x" + std::to_string(cols) +
             " (the shape of x, or one row broadcast)";
    });
  }
  detail::check_same_shape(function, "y", y_view.rows(), y_view.cols(), rows, cols,
                           "the shape of x");
  if (x_view.empty()) return;
  detail::softmax_views(x_view, mask_view, y_view, options.scale, cast);
}

// dx = scale * y * (dy - sum_c(dy * y)), row by row, from the forward's output y; dy and dx have
// y's shape.
template <class DY, class Y, class DX>
void softmax_backward(DY&& dy, Y&& y, DX&& dx, const softmax_options& options = {},
                      const cast_options& cast = {}) {
  constexpr const char* function = "tilekern::softmax_backward";
  const auto dy_view = detail::const_view(std::forward<DY>(dy));
  const auto y_view = detail::const_view(std::forward<Y>(y));
  const auto dx_view = detail::to_view(std::forward<DX>(dx));
  using dy_type = std::remove_const_t<typename decltype(dy_view)::element_type>;
  using y_type = std::remove_const_t<typename decltype(y_view)::element_type>;
  using dx_type = typename decltype(dx_view)::element_type;
  static_assert(engine_element<dy_type> && engine_element<y_type> && engine_element<dx_type>,
                "tilekern::softmax_backward: dy, y and dx must hold float or a tilekern format "
                "(bf16, fp16, tf32, fp8_*, any minifloat<...>)");
  static_assert(!std::is_const_v<dx_type>,
                "tilekern::softmax_backward: dx must be writable (not a view of const)");
  const std::size_t rows = y_view.rows(), cols = y_view.cols();
  detail::check_same_shape(function, "dy", dy_view.rows(), dy_view.cols(), rows, cols,
                           "the shape of y");
  detail::check_same_shape(function, "dx", dx_view.rows(), dx_view.cols(), rows, cols,
                           "the shape of y");
  if (y_view.empty()) return;

  const std::size_t block_rows = detail::softmax_block_rows<y_type>(rows, cols);
  std::vector<float> dots(block_rows);
  for (std::size_t r0 = 0; r0 < rows; r0 += block_rows) {
    const std::size_t n = std::min(block_rows, rows - r0);
    const auto dy_block = dy_view.block(r0, 0, n, cols);
    const auto y_block = y_view.block(r0, 0, n, cols);
    const auto dot = detail::column_view(dots.data(), n);
    vector::row_sum_of(
        dot, [](auto, auto g, auto p) { return g * p; }, dy_block, y_block);
    vector::map(
        vector::rounded(dx_view.block(r0, 0, n, cols), cast, r0 * cols, cols),
        [](auto, auto g, auto p, auto d, auto s) { return s * p * (g - d); }, dy_block, y_block,
        vector::column(dot), options.scale);
  }
}

}  // namespace tilekern
