#pragma once
// layernorm: layer normalisation of each row of a runtime-shaped tensor, in any format, forward
// and backward, on the vector engine (engine/vector.hpp).
//
//   mean[r]   = mean_c(x[r][c]),  var[r] = mean_c((x[r][c] - mean[r])^2)   (biased)
//   rstd[r]   = 1 / sqrt(var[r] + eps),  xhat = (x - mean) * rstd
//   y[r][c]   = xhat[r][c] * gamma[c] + beta[c]
//   dx[r][c]  = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)),  g = dy * gamma
//   dgamma[c] = sum_r dy * xhat,  dbeta[c] = sum_r dy
//
// x, gamma, beta, y (and dy, dx, dgamma, dbeta) each hold float or any tilekern format, a
// different one per tensor if you like; the arithmetic is fp32, per-row scalars fp64. The plain
// fp64 versions are reference::layernorm and reference::layernorm_backward.
//
// The kernel is a loop over blocks of rows, as many as keep a block of x (in its own format)
// within row_block_bytes() (half of L2), so that x is read from memory once and from L2 by the
// later passes:
//   1. c[r] = the mean of x[r][0 .. 63]      vector::row_sum_of (64 partials of one element
//                                              each, combined pairwise), times 1/64
//   2. s1[r] = sum_c d, s2[r] = sum_c d^2,   vector::row_sums_of, fp32 per chunk of 1024 columns,
//      d = x - c                               the chunks added in fp64;
//      mean = c + s1 / cols,                   in fp64, kept where s1^2 / cols <= m2 / 8; the mean
//      m2 = s2 - s1^2 / cols                   as two fp32 values, shift + low (see below)
//   2'. rows where it is not kept, and every row of fewer than 64 elements, take two passes:
//      s1 = sum_c (x - x[r][0]) and the mean from it as above (the row's shift c is x[r][0]),
//      then m2 = sum_c ((x - shift) - low)^2 (vector::row_sum_of, the same chunks)
//   3. rstd = 1 / sqrt(m2 / cols + eps) in fp64, rounded once to fp32
//   4. xhat = (x - shift) * rstd - low * rstd,  vector::map (two fused multiply-adds; low * rstd
//      y = xhat * gamma + beta                 one fp32 value per row), rounded with the caller's
//                                              cast_options; a large y with non-temporal stores
//                                              (write_rounded, stream_threshold()); rows two at
//                                              a time, gamma and beta loaded once for both
//                                              (engine/lanes.hpp, map_rows)
// Row passes: rows of 64 to 1024 columns (one chunk), and rows of 2 to 8 whole chunks where x's
// rows lie one after another (norm_row_chunks in rmsnorm.hpp), run steps 2 to 4 row by row instead
// (vector::sums_then_map: a row's sums, a chunk at a time, its statistics in fp64, then its map,
// while the row is in L1 or near it, the next row prefetched during the map and, for rows of up to
// 16 KiB of x and y together, y's row prefetched for writing during the sums; for rows of up to
// 8 KiB, the next row's sums before this row's map, while its statistics complete; rows two at a
// time, as in step 4), after step 1 over the block. A row whose mean is not kept from the one pass,
// or whose statistics need the scale below, is left to the steps above, run over the runs of such
// rows. The bits are the same either way (tests/kernels/same_bits.hpp); set_row_passes(false)
// (simd/isa.hpp) turns the row passes off. A streamed y (stream_threshold()) takes them too on
// Intel processors, with non-temporal stores over the whole 64-byte lines of its rows
// (engine/lanes.hpp, reduce_then_map_rows): on a 2-core Intel Xeon with AMX at 4096 x 4096,
// bf16 1.14-1.28 times as fast, fp32 1.20-1.26 (CONTRIBUTING.md, stop 56). On AMD processors it
// takes the block passes, which stream faster there (norm_row_passes in rmsnorm.hpp; stops 57 and
// 71; rmsnorm's streamed y takes the row passes there), as
// do rows of one chunk of a format narrower than float (bf16 on a Zen 5, 1576 x 768: 1.2 times as
// fast so; stop 65). The row passes against the block passes, measured on a 2-core Intel Xeon
// (Cascade Lake), medians of 5 to 9 rounds alternating the two, x and y in L3 or beyond: 1576 x 768
// fp32 1.13-1.24 times as fast, bf16 1.04 (its per-element encoding, not the reads, is what bounds
// it); 4096 x 4096 fp32 1.07-1.10, bf16 1.06-1.12; 8192 x 2048 and 2048 x 8192 1.02-1.09; but 64 x
// 768 (in L2) fp32 0.92 times, bf16 1.04. Those are from before the prefetches: the next row's adds
// 1.08-1.19 at 1576 x 768 and 1.07-1.13 at 4096 x 4096, y's 1.08-1.09 at 1576 x 768 fp32, the next
// row's sums before the map 1.07 at 1576 x 768 bf16 on an Intel Xeon with AVX512-BF16
// (engine/lanes.hpp, reduce_then_map_rows).
// Why the one pass holds: s2 = m2 + s1^2 / cols, so where the mean is kept s2 <= 9/8 m2 and the
// subtraction loses under a bit. c is the mean of 64 of the row's own elements, so (by
// Cauchy-Schwarz) s1^2 / cols <= cols / 64 * m2 always, and for rows of independent values
// s1^2 / cols is near m2 / 64: 3 to 5 rows in 1000 take the two passes (768 and 4097 columns).
// Both shifts are values of the row, so that a constant row is exact: its deviations are exactly
// 0 (a pairwise sum of 64 equal values is exact), var = 0 and y = beta exactly, for any eps > 0.
// Why not bn_stats / bn_aggr: the engine's bn_stats takes each chunk's mean as its fp32 sum over
// its count, which for a constant row of fp32 values is in general not the value itself, so the
// deviations, and y - beta, would not be 0; and it reads each chunk twice.
// Why two fp32 values for the mean: one would lose u/2 of |mean|, which is an absolute error of
// xhat as large as u/2 |mean| rstd (for a row offset by 100 standard deviations, 50 u) and turns
// into many ulp where x is near the mean; x - shift is exact there (Sterbenz), and subtracting
// low * rstd in the multiply-add that scales it leaves only the rounding of the sums (low * rstd
// is below the spacing of x times rstd, so its own rounding is about u^2 of that).
// The backward recomputes the statistics from x (no saved state), adds the row sums of g and
// g * (x - shift) (one pass, vector::row_sums_of: fp32 per chunk, fp64 across chunks) and the
// column sums dgamma and dbeta (one pass, vector::col_sums_of: fp32, rows in order across all
// blocks), encoded into dgamma and dbeta at the end.
//
// Error (forward, the fp32 value of y before it is encoded, against reference::layernorm on the
// same decoded inputs). y = xhat * gamma + beta adds two terms, and xhat subtracts the mean, so the
// error is bounded by magnitudes, not by |y| (which may cancel):
//   |y - y_ref| <= B u (|xhat * gamma| + |beta| + |gamma| * rstd * mean_c |x - c|),
// u = 2^-24, c the row's shift (step 1 or 2'). The last term is what the fp32 sums leave in the
// mean: relative to the row's spread, not to its offset. Worst case, if every rounding error of a
// sum went the same way: for rows of two passes B = m + 4 with m = k + 6 (the engine's 64 partial
// sums, k = ceil(min(cols, 1024) / 64) terms each, combined in 6 levels: engine/lanes.hpp), 26;
// for rows of one pass m = k + 5 (32 partials each, k = ceil(min(cols, 1024) / 32)), and m2's
// relative error is below 2m u rather than m u (s2 <= 9/8 m2, and the error of s1^2 / cols is
// below 3/4 m u m2), so rstd's is below (m + 2) u and B = m + 5, 42. On every path. Measured
// (tests/kernels/layernorm_test.cpp prints it; N(0, 1) rows times 2^-4 .. 2^4, every third offset
// by 3 standard deviations, 768 and 4097 columns): at most 2.42 u on every path. The test checks
// B = 8.
// bf16 and fp16 outputs (nearest even): within one code of the correctly rounded fp64 result,
// except where y_ref is below 2^-12 of the magnitudes above (cancellation between xhat * gamma and
// beta, or x within a few u of the spread from the mean); there the bound above plus half an ulp
// holds. Measured with beta = 0: no such result in 64 x 768 and 64 x 4097 (bf16 and fp16
// together; 1 in each before the one pass), on every path; the tests check both statements.
// Gradients (fp32): |dx - dx_ref| <= 32 u * rstd * (max_c |g| (1 + s) + max_c |xhat| *
// mean_c |g * xhat|) per row, s = rstd * mean_c |x - c|; |dgamma - ref| <= 32 u *
// sum_r |dy| (|xhat| + s) and |dbeta - ref| <= 32 u * sum_r |dy| per column, as tested; measured
// at most 2.4 u of those scales (64 x 4097, every path).
//
// Special values and ranges:
// - A constant row gives beta exactly, for any eps > 0 (and NaN with eps = 0: 0 * (1 / 0)).
// - A NaN or an inf anywhere in a row makes the whole row NaN (as in the reference); NaN in gamma
//   or beta makes its column NaN.
// - A row whose statistics leave fp32's comfortable range (s1 or m2 not finite: |x - mean| above
//   about 1.8e19 / sqrt(cols); or m2 below 2^-60: deviations near fp32's smallest normals) is
//   scaled by a power of two, x * 2^-e with 2^e <= max |x| < 2^(e + 1), and its statistics taken
//   again (its own row_max_of and row_sum_of passes): xhat = ((x * 2^-e - shift') - low') * rstd'
//   with the mean' of x * 2^-e and rstd' = 1 / sqrt(m2' / cols + eps 2^-2e). So rows of 1e30
//   (float), bf16's 1e38 and 1e-30 keep the bound above. (x * 2^-e - shift' is one fused
//   multiply-subtract, the same operation as x - shift when no row needs it.)
//
// Stochastic rounding: element (r, c) of a rows x cols output draws its random bits with index
// r * cols + c (its row-major index, whatever the stride); y uses stream cast.stream; in the
// backward dx uses cast.stream, dgamma cast.stream + 1 and dbeta cast.stream + 2 (index c).
//
// y may be x itself (the same memory and format): each element is read before it is written.
// Other overlaps between outputs and inputs are not supported.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>
#include <vector>

#include "tilekern/engine/vector.hpp"
#include "tilekern/error.hpp"
#include "tilekern/kernels/rmsnorm.hpp"  // detail::norm_*: what the normalisation kernels share
#include "tilekern/tile/view.hpp"
#include "tilekern/types/rounding.hpp"

namespace tilekern {

namespace detail {

// The per-row factors of a block of layernorm rows: xhat = ((x * scale - shift) - low) * rstd,
// the mean (times scale) as shift + low, two fp32 values (so that x - mean is exact to about u^2
// of the mean where x is near it, whatever the row's offset). first holds the shift c the sums
// are taken from (step 1 or 2' at the top of this header); partial and partial2 the fp32 sums of
// a chunk.
struct layernorm_columns {
  view<float> scale, first, shift, low, rstd, partial, partial2;
};

// Rows of at least this many columns take one statistics pass, shifted by the mean of their first
// this many elements (see the top of this header).
inline constexpr std::size_t layernorm_shift_count = 64;

// first[r] = the mean of x[r][0 .. 63], the shift c of the one pass (step 1 at the top).
template <class X>
void layernorm_first_means(view<const X> xb, view<float> first) {
  vector::row_sum_of(
      first, [](auto, auto v) { return v; }, xb.block(0, 0, xb.rows(), layernorm_shift_count));
  for (std::size_t r = 0; r < xb.rows(); ++r) first(r, 0) *= 1.0f / layernorm_shift_count;
}

// The two sums of the one pass (step 2): d = x - c and d^2.
inline constexpr auto layernorm_deviations = [](auto, auto v, auto c) {
  const auto deviation = v - c;
  return std::pair(deviation, product(deviation, deviation));
};

// A row's one pass from c and its sums s1, s2 of d and d^2 (step 2 at the top): m2, and the mean
// as shift + low where it is kept (8 s1^2 / cols <= m2); shift and low NaN where it is not.
struct layernorm_mean {
  double m2;
  float shift, low;
};
inline layernorm_mean layernorm_one_pass(double c, double s1, double s2, double count) {
  const double offset = s1 / count, m2 = s2 - s1 * offset;
  const double mean = 8 * s1 * offset <= m2 ? c + offset : std::numeric_limits<double>::quiet_NaN();
  const auto shift = static_cast<float>(mean);
  return {m2, shift, static_cast<float>(mean - shift)};
}

// scale, shift and rstd for the rows of xb (see the top of this header). sums: 2 * xb.rows()
// doubles; scratch: one float.
template <class X>
void layernorm_statistics(view<const X> xb, float eps, const layernorm_columns& out, double* sums,
                          float* scratch) {
  namespace hn = hwy::HWY_NAMESPACE;
  const std::size_t rows = xb.rows(), cols = xb.cols();
  const auto count = static_cast<double>(cols);
  double* const s1 = sums;
  double* const m2 = sums + rows;
  // The two passes over rows [r0, r0 + n), with the scale already in out.scale (1 unless scaled).
  const auto passes = [&](std::size_t r0, std::size_t n, bool scaled) {
    const view<const X> x = xb.block(r0, 0, n, cols);
    const auto scale = norm_per_row(out.scale.block(r0, 0, n, 1));
    const view<float> partial = out.partial.block(r0, 0, n, 1);
    const auto first = norm_per_row(out.first.block(r0, 0, n, 1));
    const auto shift = norm_per_row(out.shift.block(r0, 0, n, 1));
    const auto low = norm_per_row(out.low.block(r0, 0, n, 1));
    for (std::size_t r = r0; r < r0 + n; ++r) {
      out.first(r, 0) = static_cast<float>(xb(r, 0)) * out.scale(r, 0);
    }
    if (scaled) {
      norm_row_sums(
          s1 + r0, partial, [](auto, auto v, auto s, auto x0) { return hn::MulSub(v, s, x0); }, x,
          scale, first);
    } else {
      norm_row_sums(
          s1 + r0, partial, [](auto, auto v, auto x0) { return v - x0; }, x, first);
    }
    for (std::size_t r = r0; r < r0 + n; ++r) {
      const double mean = out.first(r, 0) + s1[r] / count;
      out.shift(r, 0) = static_cast<float>(mean);
      out.low(r, 0) = static_cast<float>(mean - out.shift(r, 0));
    }
    if (scaled) {
      norm_row_sums(
          m2 + r0, partial,
          [](auto, auto v, auto s, auto mean, auto lo) {
            const auto deviation = hn::MulSub(v, s, mean) - lo;
            return product(deviation, deviation);
          },
          x, scale, shift, low);
    } else {
      norm_row_sums(
          m2 + r0, partial,
          [](auto, auto v, auto mean, auto lo) {
            const auto deviation = (v - mean) - lo;
            return product(deviation, deviation);
          },
          x, shift, low);
    }
  };
  // One pass: s1 and s2, the sums of d = x - c and d^2, c the mean of the first 64 elements;
  // mean = c + s1 / cols and m2 = s2 - s1^2 / cols where s1^2 / cols <= m2 / 8, else the shift is
  // left NaN: the mean is not known yet.
  const auto one_pass = [&] {
    layernorm_first_means(xb, out.first);
    norm_row_sum_pairs(s1, m2, out.partial, out.partial2, layernorm_deviations, xb,
                       norm_per_row(out.first));
    for (std::size_t r = 0; r < rows; ++r) {  // m2 holds s2 until this loop makes it m2
      const layernorm_mean pass = layernorm_one_pass(out.first(r, 0), s1[r], m2[r], count);
      out.shift(r, 0) = pass.shift;
      out.low(r, 0) = pass.low;
      m2[r] = pass.m2;
    }
  };
  std::fill_n(out.scale.data(), rows, 1.0f);
  if (cols < layernorm_shift_count) {
    passes(0, rows, false);
  } else {
    one_pass();
    norm_runs(
        rows, [&](std::size_t r) { return std::isnan(out.shift(r, 0)); },
        [&](std::size_t r0, std::size_t n, bool unknown) {
          if (unknown) passes(r0, n, false);
        });
  }
  for (std::size_t r = 0; r < rows; ++r) {
    if (!std::isfinite(s1[r]) || norm_needs_rescale(m2[r])) {
      const float scale = norm_rescale(norm_row_max_abs(xb.block(r, 0, 1, cols), scratch));
      if (std::isnan(scale) || std::isinf(scale)) {
        out.shift(r, 0) = std::numeric_limits<float>::quiet_NaN();  // the row is NaN
      } else if (scale != 0.0f) {
        const float shift = out.shift(r, 0), low = out.low(r, 0);
        out.scale(r, 0) = scale;
        passes(r, 1, true);
        if (m2[r] == 0.0) {  // a row of equal values: exact as it was, without the scale
          out.scale(r, 0) = 1.0f;
          out.shift(r, 0) = shift;
          out.low(r, 0) = low;
        }
      }
    }
  }
  norm_rstd(m2, out.scale.data(), out.rstd.data(), rows, count, eps);
}

template <class X, class G, class B, class Y>
void layernorm_views(view<const X> x, view<const G> gamma, view<const B> beta, view<Y> y, float eps,
                     const cast_options& cast) {
  namespace hn = hwy::HWY_NAMESPACE;
  constexpr const char* function = "tilekern::layernorm";
  const std::size_t rows = x.rows(), cols = x.cols();
  norm_check_row(function, "gamma", gamma.rows(), gamma.cols(), cols);
  norm_check_row(function, "beta", beta.rows(), beta.cols(), cols);
  norm_check_shape(function, "y", y.rows(), y.cols(), rows, cols, "the shape of x");
  if (rows * cols == 0) return;

  const std::size_t block = std::min(rows, norm_block_rows<X>(cols));
  const bool streamed = streams(y);
  // The chunk-rows the row passes read each row of x as (norm_row_chunks); 0: no row passes.
  const std::size_t q =
      norm_row_passes(streamed, sizeof(X), cols, /*centred=*/true) && cols >= layernorm_shift_count
          ? norm_row_chunks(x)
          : 0;
  // every value written before it is read
  norm_scratch<float, 40> columns(std::max<std::size_t>(8, 3 * q + 4) * block + 1);
  norm_scratch<double, 8> sums(2 * block);
  norm_scratch<bool, 8> left_rows(block);
  bool* const left = left_rows.data();
  // Rows [r0, r0 + n) of x into y, each pass over all of them (steps 1 to 4 at the top).
  const auto normalise = [&](std::size_t r0, std::size_t n) {
    const auto column = [&](std::size_t k) { return norm_column(columns.data() + k * block, n); };
    const layernorm_columns stats{column(0), column(1), column(2), column(3),
                                  column(4), column(5), column(6)};
    const view<const X> xb = x.block(r0, 0, n, cols);
    layernorm_statistics(xb, eps, stats, sums.data(), columns.data() + 8 * block);
    // xhat = (x - shift) * rstd - low * rstd: one multiply-add where ((x - shift) - low) * rstd
    // takes a subtraction and a multiplication (bf16 1576x768 5% faster; fp32 the same).
    const view<float> low_rstd = column(7);
    for (std::size_t r = 0; r < n; ++r) low_rstd(r, 0) = stats.low(r, 0) * stats.rstd(r, 0);
    norm_runs(stats.scale, [&](std::size_t a, std::size_t m, bool scaled) {
      const auto rows_of = [&](view<float> c) { return norm_per_row(c.block(a, 0, m, 1)); };
      const auto normalise = [&](const auto& to, std::size_t c, std::size_t k) {
        const auto xk = xb.block(a, c, m, k);
        const auto gk = gamma.block(0, c, 1, k);  // gamma and beta may differ in format
        const auto bk = beta.block(0, c, 1, k);
        if (scaled) {
          vector::map(
              to,
              [](auto, auto v, auto s, auto mean, auto rstd, auto low_rstd, auto g, auto b) {
                return hn::MulAdd(hn::MulSub(hn::MulSub(v, s, mean), rstd, low_rstd), g, b);
              },
              xk, rows_of(stats.scale), rows_of(stats.shift), rows_of(stats.rstd),
              rows_of(low_rstd), gk, bk);
        } else {
          vector::map(
              to,
              [](auto, auto v, auto mean, auto rstd, auto low_rstd, auto g, auto b) {
                return hn::MulAdd(hn::MulSub(v - mean, rstd, low_rstd), g, b);
              },
              xk, rows_of(stats.shift), rows_of(stats.rstd), rows_of(low_rstd), gk, bk);
        }
      };
      write_rounded(y.block(r0 + a, 0, m, cols), cast, (r0 + a) * cols, streamed, normalise);
    });
  };
  // The same, row by row (the row passes at the top), where the row's mean is kept from one pass
  // and its statistics need no scale; the other rows are flagged in `left`, for normalise.
  const auto row_by_row = [&](std::size_t r0, std::size_t n) {
    const auto column = [&](std::size_t k) { return norm_column(columns.data() + k * block, n); };
    const view<float> first = column(0), shift = column(1), rstd = column(2), low_rstd = column(3);
    const view<float> partial = norm_column(columns.data() + 4 * block, n * q),
                      partial2 = norm_column(columns.data() + (4 + q) * block, n * q);
    float* repeated = columns.data() + (4 + 2 * q) * block;
    const view<const X> xb = x.block(r0, 0, n, cols);
    layernorm_first_means(xb, first);
    const auto count = static_cast<double>(cols);
    const auto factors = [&](std::size_t r) {
      const double s1 = norm_chunk_total(partial, r, q);
      const layernorm_mean pass =
          layernorm_one_pass(first(r, 0), s1, norm_chunk_total(partial2, r, q), count);
      left[r] = std::isnan(pass.shift) || !std::isfinite(s1) || norm_needs_rescale(pass.m2);
      if (left[r]) return false;
      shift(r, 0) = pass.shift;
      rstd(r, 0) = norm_rstd_of(pass.m2, 1.0, count, eps);
      low_rstd(r, 0) = pass.low * rstd(r, 0);
      return true;
    };
    const auto reducing = std::tuple(norm_chunk_rows(xb, q, repeated),
                                     norm_chunk_rows(norm_per_row(first), q, repeated));
    norm_row_destination(y.block(r0, 0, n, cols), cast, r0 * cols, streamed, [&](const auto& to) {
      vector::sums_then_map(
          to, std::array{partial, partial2}, layernorm_deviations, reducing, factors,
          [](auto, auto v, auto mean, auto r, auto lr, auto g, auto b) {
            return hn::MulAdd(hn::MulSub(v - mean, r, lr), g, b);
          },
          std::forward_as_tuple(xb, norm_per_row(shift), norm_per_row(rstd), norm_per_row(low_rstd),
                                gamma, beta));
    });
  };
  norm_blocks(rows, block, q > 0, left, row_by_row, normalise);
}

template <class DY, class X, class G, class DX, class DG, class DB>
void layernorm_backward_views(view<const DY> dy, view<const X> x, view<const G> gamma, view<DX> dx,
                              view<DG> dgamma, view<DB> dbeta, float eps,
                              const cast_options& cast) {
  namespace hn = hwy::HWY_NAMESPACE;
  constexpr const char* function = "tilekern::layernorm_backward";
  const std::size_t rows = x.rows(), cols = x.cols();
  norm_check_shape(function, "dy", dy.rows(), dy.cols(), rows, cols, "the shape of x");
  norm_check_row(function, "gamma", gamma.rows(), gamma.cols(), cols);
  norm_check_shape(function, "dx", dx.rows(), dx.cols(), rows, cols, "the shape of x");
  norm_check_row(function, "dgamma", dgamma.rows(), dgamma.cols(), cols);
  norm_check_row(function, "dbeta", dbeta.rows(), dbeta.cols(), cols);
  if (cols == 0) return;

  std::vector<float> dgamma_acc(cols, 0.0f), dbeta_acc(cols, 0.0f);
  const std::size_t block = std::max<std::size_t>(1, std::min(rows, norm_block_rows<X>(cols)));
  std::vector<float> columns(10 * block + 1);
  std::vector<double> sums(2 * block);
  const auto count = static_cast<double>(cols);
  for (std::size_t r0 = 0; r0 < rows; r0 += block) {
    const std::size_t n = std::min(block, rows - r0);
    const auto column = [&](std::size_t k) { return norm_column(columns.data() + k * block, n); };
    const layernorm_columns stats{column(0), column(1), column(2), column(3),
                                  column(4), column(5), column(6)};
    const view<float> a = column(7), b = column(8), c = column(9);
    const view<const X> xb = x.block(r0, 0, n, cols);
    const view<const DY> dyb = dy.block(r0, 0, n, cols);
    layernorm_statistics(xb, eps, stats, sums.data(), columns.data() + 10 * block);
    const auto scale = norm_per_row(stats.scale), shift = norm_per_row(stats.shift),
               low = norm_per_row(stats.low), rstd = norm_per_row(stats.rstd);

    // dgamma += sum over the block's rows of dy * xhat, dbeta += sum of dy (before dx is written).
    vector::col_sums_of(
        dgamma_acc, dbeta_acc,
        [](auto, auto d, auto v, auto s, auto mean, auto lo, auto r) {
          return std::pair(product(d, (hn::MulSub(v, s, mean) - lo) * r), d);
        },
        dyb, xb, scale, shift, low, rstd);
    // Row sums of g and of g * (x * scale - shift), so that sum_c g * xhat = rstd' * (the
    // second - low * the first); then dx = a * g + b - (x * scale - shift) * c with a the true
    // rstd, c = rstd' * a * mean_c(g * xhat) and b = -a * mean_c(g) + low * c.
    double* const sum_g = sums.data();
    double* const sum_g_deviation = sums.data() + n;
    norm_row_sum_pairs(
        sum_g, sum_g_deviation, stats.partial, stats.partial2,
        [](auto, auto d, auto g, auto v, auto s, auto mean) {
          const auto dg = d * g;
          return std::pair(dg, product(dg, hn::MulSub(v, s, mean)));
        },
        dyb, gamma, xb, scale, shift);
    for (std::size_t r = 0; r < n; ++r) {
      const double r_std = stats.rstd(r, 0), lo = stats.low(r, 0);
      const double true_rstd = static_cast<double>(stats.scale(r, 0)) * r_std;
      const double sum_g_xhat = r_std * (sum_g_deviation[r] - lo * sum_g[r]);
      const double c_r = r_std * true_rstd * (sum_g_xhat / count);
      a(r, 0) = static_cast<float>(true_rstd);
      b(r, 0) = static_cast<float>(-true_rstd * (sum_g[r] / count) + lo * c_r);
      c(r, 0) = static_cast<float>(c_r);
    }
    vector::map(
        vector::rounded(dx.block(r0, 0, n, cols), norm_cast(cast, 0), r0 * cols, cols),
        [](auto, auto d, auto v, auto g, auto s, auto mean, auto ra, auto rb, auto rc) {
          return hn::NegMulAdd(hn::MulSub(v, s, mean), rc, hn::MulAdd(ra, d * g, rb));
        },
        dyb, xb, gamma, scale, shift, norm_per_row(a), norm_per_row(b), norm_per_row(c));
  }
  norm_store_row(dgamma, dgamma_acc, norm_cast(cast, 1));
  norm_store_row(dbeta, dbeta_acc, norm_cast(cast, 2));
}

}  // namespace detail

// y = (x - mean) / sqrt(var + eps) * gamma + beta, row by row (see the top of this header).
//   x            rows x cols: a view<T> or view<const T>, a tile, or a contiguous range (one row)
//   gamma, beta  cols elements each: contiguous ranges, or views of one row
//   y            rows x cols, writable
// Each holds float or a tilekern format; y is encoded with `cast` (rounding and overflow). Throws
// shape_error naming the argument and both sizes, before touching any memory, if gamma or beta
// does not have x's columns or y does not have x's shape.
template <class X, class Gamma, class Beta, class Y>
void layernorm(X&& x, Gamma&& gamma, Beta&& beta, Y&& y, float eps, const cast_options& cast = {}) {
  detail::layernorm_views(detail::norm_input(std::forward<X>(x)),
                          detail::norm_input(std::forward<Gamma>(gamma)),
                          detail::norm_input(std::forward<Beta>(beta)),
                          detail::norm_output(std::forward<Y>(y)), eps, cast);
}

// The gradients of layernorm(x, gamma, beta, eps) for the upstream gradient dy (see the top of
// this header): dx (the shape of x, stream cast.stream), dgamma and dbeta (cols elements each,
// overwritten, streams cast.stream + 1 and + 2). Throws shape_error naming the argument and both
// sizes, before touching any memory, if dy or dx does not have x's shape or gamma, dgamma or dbeta
// not x's columns.
template <class DY, class X, class Gamma, class DX, class DGamma, class DBeta>
void layernorm_backward(DY&& dy, X&& x, Gamma&& gamma, DX&& dx, DGamma&& dgamma, DBeta&& dbeta,
                        float eps, const cast_options& cast = {}) {
  detail::layernorm_backward_views(
      detail::norm_input(std::forward<DY>(dy)), detail::norm_input(std::forward<X>(x)),
      detail::norm_input(std::forward<Gamma>(gamma)), detail::norm_output(std::forward<DX>(dx)),
      detail::norm_output(std::forward<DGamma>(dgamma)),
      detail::norm_output(std::forward<DBeta>(dbeta)), eps, cast);
}

}  // namespace tilekern
