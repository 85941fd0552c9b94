#pragma once
// rmsnorm: RMS normalisation of each row of a runtime-shaped tensor, in any format, forward and
// backward, on the vector engine (engine/vector.hpp).
//
//   rstd[r]   = 1 / sqrt(mean_c(x[r][c]^2) + eps)
//   y[r][c]   = x[r][c] * rstd[r] * gamma[c]
//   dx[r][c]  = rstd[r] * (g[r][c] - xhat[r][c] * mean_c(g * xhat)),  g = dy * gamma,
//               xhat = x * rstd
//   dgamma[c] = sum_r dy[r][c] * xhat[r][c]
//
// x, gamma, y (and dy, dx, dgamma) each hold float or any tilekern format, a different one per
// tensor if you like; the arithmetic is fp32, per-row scalars (rstd and the backward's row means)
// fp64. The plain fp64 versions are reference::rmsnorm and reference::rmsnorm_backward
// (reference/rmsnorm.hpp).
//
// The kernel is a loop over blocks of rows, as many as keep a block of x (in its own format)
// within row_block_bytes() (half of L2), so that x is read from memory once and from L2 for the
// second pass:
//   1. sums[r] = sum_c x^2                 vector::row_sum_of, per chunk of 1024 columns
//   2. rstd[r] = 1 / sqrt(sums[r] / cols + eps)   fp64, rounded once to fp32
//   3. y = x * rstd * gamma                vector::map, rounded with the caller's cast_options;
//                                          a large y with non-temporal stores (write_rounded,
//                                          stream_threshold())
// Row passes: rows of up to 1024 columns (one chunk), and rows of 2 to 8 whole chunks where x's
// rows lie one after another (norm_row_chunks), run the three steps row by row instead
// (vector::sums_then_map: a row's sum, a chunk at a time, its rstd, then its map, while the row
// is in L1 or near it, the next row prefetched during the map and, for rows of up to 16 KiB of x
// and y together, y's row prefetched for writing during the sum; for rows of up to 8 KiB, the
// next row's sum before this row's map, while its rstd completes; rows two at a time, gamma loaded
// once for both: engine/lanes.hpp, reduce_then_map_rows). A row whose sum needs the
// scale below is left to the steps above, run over the runs of such rows. The bits are the same
// either way (tests/kernels/same_bits.hpp); set_row_passes(false) (simd/isa.hpp) turns the
// row passes off. A streamed y takes them too, with non-temporal stores over its rows' lines (on
// AMD processors since stop 71, where layernorm's takes the block passes); rows of one chunk of a
// format narrower than float take the block passes on AMD's (norm_row_passes below).
// The row passes measured as layernorm's (layernorm.hpp): 4096 x 4096 fp32 1.09-1.12 times as fast
// as the block passes, bf16 1.01-1.09; 8192 x 2048 and 2048 x 8192 1.01-1.05 (before the
// prefetches: the next row's adds 1.08-1.21 at 4096 x 4096 and 1.04-1.28 at 1576 x 768, y's
// 1.04-1.10 at 1576 x 768 fp32: engine/lanes.hpp, reduce_then_map_rows).
// The backward adds a row sum of g * xhat and a column sum (vector::col_sum_of, rows in order, in
// fp32 across all blocks) for dgamma, encoded into dgamma at the end.
//
// Accumulation: within a chunk of 1024 columns (norm_chunk), the engine's fp32 row sums: 64
// partial sums in element order, then combined pairwise (engine/lanes.hpp, reduce_slots), the
// same partials on every path; the chunk sums are added in fp64. The last levels of the pairwise
// combination differ between ISA paths, so results are not bit-identical across them, unlike the
// first version of this kernel.
//
// Error bound (forward, fp32 result before it is encoded, against reference::rmsnorm on the same
// decoded inputs): relative error at most ((k + 6) / 2 + 4) u, u = 2^-24, with
// k = ceil(min(cols, 1024) / 64) terms per partial sum: the sum of squares (all terms positive,
// each square fused into its partial: vector::product) errs by at most (k + 6) u relative (plus u
// had the squares been rounded on their own, which the bound keeps), halved by the square root; the
// fp64 mean, sqrt and reciprocal round once to fp32 (u/2), then x * rstd * gamma (two
// roundings). That is 15u for rows of 1024 or more, on every path: a worst case that needs every
// rounding error to go the same way (the first version's Kahan sums were within 8u). Measured on
// bf16 N(0, 1) rows times 2^-4 .. 2^4: tests/kernels/rmsnorm_test.cpp checks the bound and prints
// the measurement.
// For bf16 and fp16 outputs (nearest even) that keeps every result within one code of the
// correctly rounded fp64 result, which the tests check.
//
// Special values and ranges:
// - A NaN in a row makes the row NaN. An inf makes its element NaN and the row's finite elements
//   zero (the rms is inf), as the fp64 arithmetic does.
// - A row whose sum of squares is not finite (|x| above about 1.8e19, possible in float, bf16 and
//   tf32) or below 2^-60 (squares near or below fp32's normal range) is scaled by a power of two,
//   x * 2^-e with 2^e <= max |x| < 2^(e + 1) (2^-e at most 2^126), and summed again (its own
//   row_max_of and row_sum_of): y = (x * 2^-e) * rstd' * gamma with rstd' = 1 / sqrt(sum' / cols +
//   eps 2^-2e), so the bound above holds for rows of 1e30 or 1e-30 alike. A row of zeros is y = 0
//   (NaN with eps = 0: 0 / 0, as in the reference).
//
// Stochastic rounding: element (r, c) of a rows x cols output draws its random bits with index
// r * cols + c (its row-major index, whatever the stride); y uses stream cast.stream, and in the
// backward dx uses cast.stream and dgamma cast.stream + 1 (index c).
//
// y may be x itself (the same memory and format): each element is read before it is written.
// Other overlaps between outputs and inputs are not supported.

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
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

namespace detail {

// ---- shared by the normalisation kernels (rmsnorm here, layernorm in layernorm.hpp) ----

// Rows per block: a block of x in its own format fits in row_block_bytes() (simd/isa.hpp: half of
// L2), at least one row.
template <class T>
std::size_t norm_block_rows(std::size_t cols) {
  return std::max<std::size_t>(1, row_block_bytes() / std::max<std::size_t>(1, cols * sizeof(T)));
}

// Row sums are fp32 within chunks of this many columns, the chunks added in fp64; rows of up to
// 1024 columns (768 in ViT-B, 1024 in BERT-large) are one chunk. Each chunk is a reduction of its
// own over the block's rows, which costs every row its setup and combination again and breaks the
// sequential reads of x: chunks of 512 (vector::bn_chunk) made layernorm fp32 1576x768 11% slower
// and rmsnorm 8% (CONTRIBUTING.md). Longer chunks loosen the worst-case bounds (k grows with the
// chunk, at the tops of this header and of layernorm.hpp); the measured errors went from 2.28 to
// 2.42 u (layernorm) and from 2.94 to 2.84 u (rmsnorm).
inline constexpr std::size_t norm_chunk = 1024;

// A tensor argument as a view of const elements (views, tiles and ranges alike).
template <class Tensor>
auto norm_input(Tensor&& tensor) {
  const auto as_view = to_view(std::forward<Tensor>(tensor));
  using element = std::remove_const_t<typename decltype(as_view)::element_type>;
  static_assert(engine_element<element>,
                "tilekern normalisation kernels: tensors must hold float or a tilekern format "
                "(bf16, fp16, tf32, fp8_*, any minifloat<...>)");
  return view<const element>(as_view);
}
template <class Tensor>
auto norm_output(Tensor&& tensor) {
  const auto as_view = to_view(std::forward<Tensor>(tensor));
  using element = typename decltype(as_view)::element_type;
  static_assert(engine_element<element>,
                "tilekern normalisation kernels: tensors must hold float or a tilekern format "
                "(bf16, fp16, tf32, fp8_*, any minifloat<...>)");
  static_assert(!std::is_const_v<element>,
                "tilekern normalisation kernels: outputs must be writable (not a view of const or "
                "a const range)");
  return as_view;
}

// Throws unless `tensor` has the shape rows x cols (`of_what` says why).
inline void norm_check_shape(const char* function, const char* argument, std::size_t rows,
                             std::size_t cols, std::size_t expected_rows, std::size_t expected_cols,
                             const char* of_what) {
  if (rows != expected_rows || cols != expected_cols) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": " + argument + " is " + shape_text(rows, cols) +
             ", expected " + shape_text(expected_rows, expected_cols) + " (" + of_what + ")";
    });
  }
}
// Throws unless `tensor` is one row of `cols` elements (gamma, beta, dgamma, dbeta).
inline void norm_check_row(const char* function, const char* argument, std::size_t rows,
                           std::size_t cols, std::size_t expected_cols) {
  if (rows != 1) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": " + argument + " is " + shape_text(rows, cols) +
             ", expected one row of " + std::to_string(expected_cols) + " (the columns of x)";
    });
  }
  if (cols != expected_cols) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": " + argument + " has " + std::to_string(cols) +
             " elements, expected " + std::to_string(expected_cols) + " (the columns of x)";
    });
  }
}

// n values of T of per-call scratch, not initialised: on the stack up to Inline of them (the
// statistics of a few rows, so that a call on one row, as in batch-1 decoding, allocates nothing;
// its two allocations were 5-8% of a one-row layernorm or rmsnorm), else on the heap.
template <class T, std::size_t Inline>
class norm_scratch {
 public:
  explicit norm_scratch(std::size_t n)
      : heap_(n > Inline ? std::make_unique_for_overwrite<T[]>(n) : nullptr) {}
  T* data() { return heap_ ? heap_.get() : stack_; }

 private:
  T stack_[Inline];
  std::unique_ptr<T[]> heap_;
};

// A rows x 1 column of fp32 scratch.
inline view<float> norm_column(float* data, std::size_t rows) {
  return {data, rows, 1, 1};
}

// Columns [c0, c0 + n) of a source of `cols` columns (a row or the shape of x); a column
// (vector::column: one value per row) stays as it is.
template <class T>
view<const T> norm_slice(view<const T> source, std::size_t, std::size_t c0, std::size_t n) {
  return source.block(0, c0, source.rows(), n);
}
template <class T>
column_source<T> norm_slice(column_source<T> source, std::size_t, std::size_t, std::size_t) {
  return source;
}

// A rows x 1 column of fp32 scratch as a source: the same value along each row.
inline auto norm_per_row(view<float> column) {
  return vector::column(view<const float>(column));
}

// A source of a rows x cols block whose rows are q whole chunks, read as (rows * q) x norm_chunk:
// a view whose rows lie one after another (one row, or stride == cols) as it is, a column (one
// value per row) with each value repeated q times, into `scratch` (which it advances). Where q is
// 1, the source itself.
template <class T>
view<const T> norm_chunk_rows(view<const T> source, std::size_t q, float*&) {
  if (q == 1) return source;
  return {source.data(), source.rows() * q, norm_chunk, norm_chunk};
}
inline column_source<float> norm_chunk_rows(column_source<float> source, std::size_t q,
                                            float*& scratch) {
  if (q == 1) return source;
  float* const repeated = scratch;
  const std::size_t rows = source.values.rows();
  for (std::size_t r = 0; r < rows; ++r) std::fill_n(repeated + r * q, q, source.values(r, 0));
  scratch += rows * q;
  return {view<const float>(repeated, rows * q, 1, 1)};
}
template <class T>
bool norm_contiguous(view<const T> source, std::size_t rows, std::size_t cols) {
  return source.rows() == rows && (rows == 1 || source.stride() == cols);
}
template <class T>
bool norm_contiguous(column_source<T> source, std::size_t rows, std::size_t) {
  return source.values.rows() == rows;
}

// sums[k][r] = sum over the columns of the k-th result of reduce: fp32 per chunk of norm_chunk
// columns, the chunks added in fp64, in order. reduce(partials, sources...) is one engine
// reduction (vector::row_sum_of or row_sums_of) into K fp32 columns of the sources' rows. The
// first source has the shape rows x cols; `partials` are K rows x 1 columns of fp32 scratch.
// Rows of more than one chunk, stored one after another, are reduced as rows of a chunk each
// (norm_chunk_rows): the same fp32 sums, from one reduction that reads the block in order. A
// loop over the chunks, each a reduction over the block's rows, reads every row q times with
// a stride, and took layernorm and rmsnorm 4096x4096 13-34% longer (CONTRIBUTING.md).
template <std::size_t K, class Reduce, class... Sources>
void norm_chunk_sums(const std::array<double*, K>& sums, const std::array<view<float>, K>& partials,
                     Reduce reduce, Sources... sources) {
  const std::size_t cols = std::get<0>(std::tuple(sources...)).cols();
  const std::size_t rows = partials[0].rows(), q = cols / norm_chunk;
  for (double* s : sums) std::fill_n(s, rows, 0.0);
  if (q > 1 && cols % norm_chunk == 0 && (norm_contiguous(sources, rows, cols) && ...)) {
    norm_scratch<float, 256> scratch((K + sizeof...(Sources)) * rows * q);
    std::array<view<float>, K> chunk_sums;
    for (std::size_t k = 0; k < K; ++k) {
      chunk_sums[k] = norm_column(scratch.data() + k * rows * q, rows * q);
    }
    float* repeated = scratch.data() + K * rows * q;
    reduce(chunk_sums, norm_chunk_rows(sources, q, repeated)...);
    for (std::size_t k = 0; k < K; ++k) {
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t i = 0; i < q; ++i) sums[k][r] += chunk_sums[k](r * q + i, 0);
      }
    }
    return;
  }
  for (std::size_t c0 = 0; c0 < cols; c0 += norm_chunk) {
    const std::size_t n = std::min(norm_chunk, cols - c0);
    reduce(partials, norm_slice(sources, cols, c0, n)...);
    for (std::size_t k = 0; k < K; ++k) {
      for (std::size_t r = 0; r < rows; ++r) sums[k][r] += partials[k](r, 0);
    }
  }
}

// Row r's sum from the fp32 sums of its q chunks, rows r q to r q + q - 1 of `partial`: added in
// fp64, in order, from 0, as norm_chunk_sums adds them.
inline double norm_chunk_total(view<float> partial, std::size_t r, std::size_t q) {
  double sum = 0.0;
  for (std::size_t i = r * q; i < (r + 1) * q; ++i) sum += partial(i, 0);
  return sum;
}

// The row passes (see the tops of this header and of layernorm.hpp) read each row of x as q rows
// of a chunk each, as norm_chunk_sums does, so that the sums are the same: q = 1 for rows of up to
// one chunk; q for rows of q whole chunks, up to norm_row_pass_chunks of them, where x's rows lie
// one after another; 0 (no row passes) otherwise.
inline constexpr std::size_t norm_row_pass_chunks = 8;
template <class T>
std::size_t norm_row_chunks(view<const T> x) {
  const std::size_t cols = x.cols(), q = cols / norm_chunk;
  if (cols <= norm_chunk) return 1;
  const bool whole = cols % norm_chunk == 0 && q <= norm_row_pass_chunks;
  return whole && norm_contiguous(x, x.rows(), cols) ? q : 0;
}

// sums[r] = sum over the columns of f(d, sources...)(r, c) (vector::row_sum_of per chunk, into
// the column `partial`).
template <class F, class... Sources>
void norm_row_sums(double* sums, view<float> partial, F f, Sources... sources) {
  norm_chunk_sums<1>(
      {sums}, {partial},
      [&](const std::array<view<float>, 1>& to, auto... chunks) {
        vector::row_sum_of(to[0], f, chunks...);
      },
      sources...);
}

// The same for two sums of one pass: f returns a pair, first[r] and second[r] the sums of each
// (vector::row_sums_of per chunk into the columns partial and partial2).
template <class F, class... Sources>
void norm_row_sum_pairs(double* first, double* second, view<float> partial, view<float> partial2,
                        F f, Sources... sources) {
  norm_chunk_sums<2>(
      {first, second}, {partial, partial2},
      [&](const std::array<view<float>, 2>& to, auto... chunks) {
        vector::row_sums_of(to[0], to[1], f, chunks...);
      },
      sources...);
}

// The largest |x| of one row (NaN if the row holds one).
template <class T>
float norm_row_max_abs(view<const T> row, float* scratch) {
  vector::row_max_of(
      norm_column(scratch, 1), [](auto, auto x) { return hwy::HWY_NAMESPACE::Abs(x); }, row);
  return *scratch;
}

// What a row whose sums left fp32's comfortable range should do (see the top of this header):
// 2^-e for a finite nonzero max |x| (2^e <= max < 2^(e + 1)), at most 2^126 so that it is an fp32
// value (a row of subnormals, max < 2^-126, is scaled to max >= 2^-23: its squares are normal); 0
// for a row of zeros (nothing to do); NaN for a row holding a NaN, inf for a row holding an inf.
inline float norm_rescale(float max_abs) {
  if (std::isnan(max_abs) || std::isinf(max_abs)) return max_abs;
  if (max_abs == 0.0f) return 0.0f;
  return std::ldexp(1.0f, std::min(-std::ilogb(max_abs), 126));
}

// Whether a row's sum of squares (or m2) needs the rescaled second attempt.
inline bool norm_needs_rescale(double sum_of_squares) {
  return !(sum_of_squares >= 0x1p-60 && sum_of_squares <= std::numeric_limits<float>::max());
}

// 1 / sqrt(sum / count + eps scale^2) in fp64, rounded once to fp32: one row's rstd.
inline float norm_rstd_of(double sum, double scale, double count, float eps) {
  return static_cast<float>(1.0 / std::sqrt(sum / count + eps * scale * scale));
}

// rstd[r] = 1 / sqrt(sums[r] / count + eps scale[r]^2) in fp64, rounded once to fp32, for rows
// 0 .. rows - 1 of contiguous columns. Lane-wise IEEE arithmetic, so every path gives the bits of
// the scalar code; one row at a time, the divisions and square root took about 18 cycles a row
// (rmsnorm 1576x768: 157 to 154 us bf16, 186 to 182 fp32).
inline void norm_rstd(const double* sums, const float* scale, float* rstd, std::size_t rows,
                      double count, float eps) {
  namespace hn = hwy::HWY_NAMESPACE;
  std::size_t r = 0;
  visit_lanes([&](auto d) {
    if constexpr (hn::MaxLanes(d) > 1) {
      const hn::Repartition<double, decltype(d)> dd;
      const hn::Rebind<float, decltype(dd)> df;
      const auto n = hn::Set(dd, count), e = hn::Set(dd, eps), one = hn::Set(dd, 1.0);
      for (; r + hn::Lanes(dd) <= rows; r += hn::Lanes(dd)) {
        const auto s = hn::PromoteTo(dd, hn::LoadU(df, scale + r));
        const auto mean_square = hn::LoadU(dd, sums + r) / n + e * s * s;
        hn::StoreU(hn::DemoteTo(df, one / hn::Sqrt(mean_square)), df, rstd + r);
      }
    }
  });
  for (; r < rows; ++r) rstd[r] = norm_rstd_of(sums[r], scale[r], count, eps);
}

inline constexpr std::uint64_t norm_stream(const cast_options& cast, std::uint64_t output) {
  return cast.stream + output;
}
inline cast_options norm_cast(const cast_options& cast, std::uint64_t output) {
  cast_options result = cast;
  result.stream = norm_stream(cast, output);
  return result;
}

// Writes the fp32 accumulator row `acc` into `out` (one row), rounded with `cast`, index c.
template <class Out>
void norm_store_row(view<Out> out, const std::vector<float>& acc, const cast_options& cast) {
  vector::map(
      vector::rounded(out, cast, 0, out.cols()), [](auto, auto v) { return v; },
      view<const float>(acc.data(), 1, acc.size()));
}

// body(r0, n, flag) for each run of consecutive rows [r0, r0 + n) of `rows` on which
// flagged(r) is the same, flag.
template <class Flagged, class Body>
void norm_runs(std::size_t rows, Flagged&& flagged, Body&& body) {
  for (std::size_t r0 = 0; r0 < rows;) {
    const bool flag = flagged(r0);
    std::size_t r1 = r0 + 1;
    while (r1 < rows && flagged(r1) == flag) ++r1;
    body(r0, r1 - r0, flag);
    r0 = r1;
  }
}

// body(r0, n, scaled) for each run of consecutive rows whose scale is 1 (scaled false) or not
// (true): the common rows take the operation without the scale operand, which costs a multiply
// and an operand per vector.
template <class Body>
void norm_runs(view<const float> scale, Body&& body) {
  norm_runs(
      scale.rows(), [&](std::size_t r) { return scale(r, 0) != 1.0f; }, body);
}

// Whether layernorm (centred) and rmsnorm take the row passes (row_passes()), for a y that streams
// or not and an x of `x_bytes` an element and `cols` columns. On Intel processors they do. On
// AMD's they take the block passes where x's rows are one chunk (norm_chunk) of a format narrower
// than float, and layernorm where y streams:
// - Streamed, at 4096 x 4096 on a 2-core AMD EPYC (Zen 5), rmsnorm by rows (one prefetch stream
//   and two steps ahead: prefetch_pages and long_row_lead in engine/lanes.hpp) took 0.83-0.87 of
//   the block passes' time in bf16 and 0.93-0.95 in fp32 with x and y 16 bytes past a line, as the
//   bench's are, and 0.74-0.75 and 0.85-0.89 on lines; layernorm by rows took 1.10 (bf16) and 1.15
//   (fp32) past a line, 0.96 and 1.13 on lines (a timing program, two libraries in one process,
//   medians of 7 rounds; stop 71).
// - Streamed, at 4096 x 4096 on a 2-core AMD EPYC (Zen 4), the row passes, then prefetching by
//   pages one step ahead, ran 0.73-0.91 times as fast as the block passes. On an Intel Xeon with
//   AMX the block passes streamed ran 0.86-0.87 times as fast as the row passes with plain stores,
//   and the row passes streamed 1.14-1.38 times (CONTRIBUTING.md, stops 55 to 57).
// - One chunk of bf16, on a 2-core AMD EPYC (Zen 5): the block passes took 0.72-0.84 of the row
//   passes' time at 1576 x 768, 1576 x 1024 and 512 x 768 (layernorm and rmsnorm), and in the
//   bench, three runs alternating the two builds, layernorm bf16 1576 x 768 ran 1.30-1.32 times
//   oneDNN's speed by blocks against 1.07-1.10 by rows, rmsnorm 78-90 us against 102-108. fp32
//   took 0.93-0.99 (layernorm) and 1.10-1.16 (rmsnorm) of the time, rows of 2048 and 4096
//   columns 0.88-1.18, both formats, so those keep the row passes (stop 65). On a Zen 4 the row
//   passes had run layernorm bf16 1576 x 768 at 1.07-1.09 times oneDNN's speed and the block
//   passes, before them, at 1.05-1.12 (CONTRIBUTING.md, Known gaps).
// Set, the row passes are taken as on Intel processors whatever the vendor: so that the tests run
// them on AMD's too (tests/kernels/same_bits.hpp).
inline std::atomic<bool>& norm_row_passes_everywhere() {
  static std::atomic<bool> on{false};
  return on;
}
inline bool norm_row_passes(bool streamed, std::size_t x_bytes, std::size_t cols, bool centred) {
  if (!detected_cpu_features().amd || norm_row_passes_everywhere().load()) return row_passes();
  return row_passes() && (!streamed || !centred) && (x_bytes >= sizeof(float) || cols > norm_chunk);
}

// body(the destination of the row passes over `rows`, whole rows of y from element `first` on):
// with non-temporal stores where y is streamed (reduce_then_map_rows streams the rows that are
// whole 64-byte lines and writes the others with plain stores), else plain.
template <class Y, class Body>
void norm_row_destination(view<Y> rows, const cast_options& cast, std::uint64_t first,
                          bool streamed, Body&& body) {
  const auto to = vector::rounded(rows, cast, first, rows.cols());
  if (streamed) return body(vector::streamed(to));
  body(to);
}

// The loop of the forward kernels over blocks of `block` rows: where by_row, row_by_row(r0, n)
// (the row passes), which flags in `left` the rows it leaves, then normalise(r0 + a, m) for each
// run of them; else normalise(r0, n) (every pass over the block).
template <class RowByRow, class Normalise>
void norm_blocks(std::size_t rows, std::size_t block, bool by_row, const bool* left,
                 RowByRow&& row_by_row, Normalise&& normalise) {
  for (std::size_t r0 = 0; r0 < rows; r0 += block) {
    const std::size_t n = std::min(block, rows - r0);
    if (!by_row) {
      normalise(r0, n);
      continue;
    }
    row_by_row(r0, n);
    norm_runs(
        n, [&](std::size_t r) { return left[r]; },
        [&](std::size_t a, std::size_t m, bool flagged) {
          if (flagged) normalise(r0 + a, m);
        });
  }
}

// ---- rmsnorm ----

// The per-row factors of a block of rmsnorm rows: xhat = (x * scale) * rstd.
struct rms_columns {
  view<float> scale, rstd, partial;
};

// scale and rstd for the rows of xb (see the top of this header). sums: xb.rows() doubles.
template <class X>
void rms_statistics(view<const X> xb, float eps, const rms_columns& out, double* sums,
                    float* scratch) {
  const std::size_t rows = xb.rows(), cols = xb.cols();
  const auto count = static_cast<double>(cols);
  const auto sum_of_squares = [&](view<const X> x, view<float> scale, view<float> partial,
                                  double* result) {
    norm_row_sums(
        result, partial,
        [](auto, auto v, auto s) {
          const auto scaled = v * s;
          return product(scaled, scaled);
        },
        x, norm_per_row(scale));
  };
  std::fill_n(out.scale.data(), rows, 1.0f);
  norm_row_sums(
      sums, out.partial, [](auto, auto v) { return product(v, v); }, xb);
  for (std::size_t r = 0; r < rows; ++r) {
    if (norm_needs_rescale(sums[r])) {
      const float scale = norm_rescale(norm_row_max_abs(xb.block(r, 0, 1, cols), scratch));
      if (std::isnan(scale)) {
        sums[r] = std::numeric_limits<double>::quiet_NaN();
      } else if (std::isinf(scale)) {
        sums[r] = std::numeric_limits<double>::infinity();
      } else if (scale != 0.0f) {
        out.scale(r, 0) = scale;
        sum_of_squares(xb.block(r, 0, 1, cols), out.scale.block(r, 0, 1, 1),
                       out.partial.block(r, 0, 1, 1), sums + r);
      }
    }
  }
  norm_rstd(sums, out.scale.data(), out.rstd.data(), rows, count, eps);
}

template <class X, class G, class Y>
void rmsnorm_views(view<const X> x, view<const G> gamma, view<Y> y, float eps,
                   const cast_options& cast) {
  constexpr const char* function = "tilekern::rmsnorm";
  const std::size_t rows = x.rows(), cols = x.cols();
  norm_check_row(function, "gamma", gamma.rows(), gamma.cols(), cols);
  norm_check_shape(function, "y", y.rows(), y.cols(), rows, cols, "the shape of x");
  if (rows * cols == 0) return;

  const std::size_t block = std::min(rows, norm_block_rows<X>(cols));
  const bool streamed = streams(y);
  // The chunk-rows the row passes read each row of x as (norm_row_chunks); 0: no row passes.
  const std::size_t q =
      norm_row_passes(streamed, sizeof(X), cols, /*centred=*/false) ? norm_row_chunks(x) : 0;
  // every value written before it is read
  norm_scratch<float, 16> columns(std::max<std::size_t>(3, q + 1) * block + 1);
  norm_scratch<double, 4> sums(block);
  norm_scratch<bool, 4> left_rows(block);
  bool* const left = left_rows.data();
  // Rows [r0, r0 + n) of x into y, each pass over all of them (steps 1 to 3 at the top).
  const auto normalise = [&](std::size_t r0, std::size_t n) {
    const rms_columns stats{norm_column(columns.data(), n), norm_column(columns.data() + block, n),
                            norm_column(columns.data() + 2 * block, n)};
    const view<const X> xb = x.block(r0, 0, n, cols);
    rms_statistics(xb, eps, stats, sums.data(), columns.data() + 3 * block);
    norm_runs(stats.scale, [&](std::size_t a, std::size_t m, bool scaled) {
      const auto rstd = norm_per_row(stats.rstd.block(a, 0, m, 1));
      const auto normalise = [&](const auto& to, std::size_t c, std::size_t k) {
        const auto xk = xb.block(a, c, m, k);
        const auto gk = gamma.block(0, c, 1, k);
        if (scaled) {
          vector::map(
              to, [](auto, auto v, auto s, auto r, auto g) { return v * s * r * g; }, xk,
              norm_per_row(stats.scale.block(a, 0, m, 1)), rstd, gk);
        } else {
          vector::map(
              to, [](auto, auto v, auto r, auto g) { return v * r * g; }, xk, rstd, gk);
        }
      };
      write_rounded(y.block(r0 + a, 0, m, cols), cast, (r0 + a) * cols, streamed, normalise);
    });
  };
  // The same, row by row (the row passes at the top), where the row's sum of squares needs no
  // scale; the other rows are flagged in `left`, for normalise.
  const auto row_by_row = [&](std::size_t r0, std::size_t n) {
    const view<float> rstd = norm_column(columns.data(), n),
                      partial = norm_column(columns.data() + block, n * q);
    const view<const X> xb = x.block(r0, 0, n, cols);
    const auto count = static_cast<double>(cols);
    const auto factors = [&](std::size_t r) {
      const double sum_of_squares = norm_chunk_total(partial, r, q);
      left[r] = norm_needs_rescale(sum_of_squares);
      if (left[r]) return false;
      rstd(r, 0) = norm_rstd_of(sum_of_squares, 1.0, count, eps);
      return true;
    };
    float* unused = nullptr;  // a view of x needs no scratch (norm_chunk_rows)
    norm_row_destination(y.block(r0, 0, n, cols), cast, r0 * cols, streamed, [&](const auto& to) {
      vector::sums_then_map(
          to, partial, [](auto, auto v) { return product(v, v); },
          std::tuple(norm_chunk_rows(xb, q, unused)), factors,
          [](auto, auto v, auto r, auto g) { return v * r * g; },
          std::forward_as_tuple(xb, norm_per_row(rstd), gamma));
    });
  };
  norm_blocks(rows, block, q > 0, left, row_by_row, normalise);
}

template <class DY, class X, class G, class DX, class DG>
void rmsnorm_backward_views(view<const DY> dy, view<const X> x, view<const G> gamma, view<DX> dx,
                            view<DG> dgamma, float eps, const cast_options& cast) {
  namespace hn = hwy::HWY_NAMESPACE;
  constexpr const char* function = "tilekern::rmsnorm_backward";
  const std::size_t rows = x.rows(), cols = x.cols();
  norm_check_shape(function, "dy", dy.rows(), dy.cols(), rows, cols, "the shape of x");
  norm_check_row(function, "gamma", gamma.rows(), gamma.cols(), cols);
  norm_check_shape(function, "dx", dx.rows(), dx.cols(), rows, cols, "the shape of x");
  norm_check_row(function, "dgamma", dgamma.rows(), dgamma.cols(), cols);
  if (cols == 0) return;

  std::vector<float> dgamma_acc(cols, 0.0f);
  const std::size_t block = std::max<std::size_t>(1, std::min(rows, norm_block_rows<X>(cols)));
  std::vector<float> columns(5 * block + 1);
  std::vector<double> sums(block);
  const auto count = static_cast<double>(cols);
  for (std::size_t r0 = 0; r0 < rows; r0 += block) {
    const std::size_t n = std::min(block, rows - r0);
    const auto column = [&](std::size_t k) { return norm_column(columns.data() + k * block, n); };
    const rms_columns stats{column(0), column(1), column(2)};
    const view<float> a = column(3), c = column(4);
    const view<const X> xb = x.block(r0, 0, n, cols);
    const view<const DY> dyb = dy.block(r0, 0, n, cols);
    rms_statistics(xb, eps, stats, sums.data(), columns.data() + 5 * block);
    const auto scale = norm_per_row(stats.scale), rstd = norm_per_row(stats.rstd);

    // dgamma += sum over the block's rows of dy * xhat (before dx is written).
    vector::col_sum_of(
        view<float>(dgamma_acc.data(), 1, cols),
        [](auto, auto d, auto v, auto s, auto r) { return product(d, v * s * r); }, dyb, xb, scale,
        rstd);
    // sums[r] = sum_c g * xhat; dx = a * g - (x * scale) * c with a = the true rstd and
    // c = rstd' * a * mean_c(g * xhat).
    norm_row_sums(
        sums.data(), stats.partial,
        [](auto, auto d, auto v, auto g, auto s, auto r) { return product(d * g, v * s * r); }, dyb,
        xb, gamma, scale, rstd);
    for (std::size_t r = 0; r < n; ++r) {
      const double true_rstd = static_cast<double>(stats.scale(r, 0)) * stats.rstd(r, 0);
      a(r, 0) = static_cast<float>(true_rstd);
      c(r, 0) = static_cast<float>(stats.rstd(r, 0) * true_rstd * (sums[r] / count));
    }
    vector::map(
        vector::rounded(dx.block(r0, 0, n, cols), norm_cast(cast, 0), r0 * cols, cols),
        [](auto, auto d, auto v, auto g, auto s, auto ra, auto rc) {
          return hn::NegMulAdd(v * s, rc, ra * (d * g));
        },
        dyb, xb, gamma, scale, norm_per_row(a), norm_per_row(c));
  }
  norm_store_row(dgamma, dgamma_acc, norm_cast(cast, 1));
}

}  // namespace detail

// y = x / sqrt(mean(x^2) + eps) * gamma, row by row (see the top of this header).
//   x      rows x cols: a view<T> or view<const T>, a tile, or a contiguous range (one row)
//   gamma  cols elements: a contiguous range, or a view of one row
//   y      rows x cols, writable
// Each holds float or a tilekern format; y is encoded with `cast` (rounding and overflow). Throws
// shape_error naming the argument and both sizes, before touching any memory, if gamma does not
// have x's columns or y does not have x's shape.
template <class X, class Gamma, class Y>
void rmsnorm(X&& x, Gamma&& gamma, Y&& y, float eps, const cast_options& cast = {}) {
  detail::rmsnorm_views(detail::norm_input(std::forward<X>(x)),
                        detail::norm_input(std::forward<Gamma>(gamma)),
                        detail::norm_output(std::forward<Y>(y)), eps, cast);
}

// The gradients of rmsnorm(x, gamma, eps) for the upstream gradient dy (see the top of this
// header): dx (the shape of x, stream cast.stream) and dgamma (cols elements, overwritten,
// stream cast.stream + 1). Throws shape_error naming the argument and both sizes, before
// touching any memory, if dy or dx does not have x's shape or gamma or dgamma not x's columns.
template <class DY, class X, class Gamma, class DX, class DGamma>
void rmsnorm_backward(DY&& dy, X&& x, Gamma&& gamma, DX&& dx, DGamma&& dgamma, float eps,
                      const cast_options& cast = {}) {
  detail::rmsnorm_backward_views(
      detail::norm_input(std::forward<DY>(dy)), detail::norm_input(std::forward<X>(x)),
      detail::norm_input(std::forward<Gamma>(gamma)), detail::norm_output(std::forward<DX>(dx)),
      detail::norm_output(std::forward<DGamma>(dgamma)), eps, cast);
}

}  // namespace tilekern
