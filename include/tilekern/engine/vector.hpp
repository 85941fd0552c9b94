#pragma once
// The vector engine: reductions, normalisation statistics, elementwise tensor-tensor and
// tensor-scalar arithmetic, selects, iota and transpose, on views in any format with fp32
// arithmetic inside (engine/lanes.hpp says how operands broadcast, how tails are handled and
// which lanes each ISA path uses).
//
// Destinations come first. A destination is a writable view (a tile, a range), rounded to
// nearest even, or `rounded(view, cast, first_index, index_stride)` for the caller's rounding
// and stochastic indices, or `streamed(rounded(...))` to write it with non-temporal stores (see
// destination in engine/lanes.hpp). Sources are views of the destination's shape, one row
// (broadcast down), one column (broadcast along: per-row values), a float, or an `affine` function
// of the indices. A source of any other shape is a shape_error naming the operation and the
// argument, thrown before anything is written. `column(view)` marks a column (or a 1 x 1 view) as
// one: the same values, held in a register along each row, where a plain view (which the loop is
// compiled for before its shape is known) is read from a row of scratch its value is copied into
// (engine/lanes.hpp, along). Kernels pass their per-row statistics so.
//
//   map(dst, f, sources...)          dst = f(d, x...) lane by lane: f is generic over Highway
//                                     vectors (d is the descriptor), e.g.
//                                     [](auto d, auto x, auto m) { return hn::Max(x, m); }
//   add sub mul div max min          dst = a op b (IEEE fp32; max and min as x86's, so a NaN in
//                                     a gives b, documented per op)
//   select(dst, mask, a, b)          dst = mask != 0 ? a : b   (mask: bool or any format)
//   affine_select(dst, src, p, fill) dst = p(r, c) >= 0 ? src : fill
//   iota(dst, p)                     dst = p(r, c)
//   transpose(dst, src)              dst(c, r) = src(r, c)
//   row_sum row_max row_min row_mean (column, x)   one fp32 value per row of x
//   col_sum col_max col_min col_mean (row, x)      one fp32 value per column of x
//   bn_stats(stats, x), bn_aggr(mean_var, stats)   per-row mean and variance in chunks
//   sums_then_map(dst, sums, reduce_f, reduce_sources, keep, map_f, map_sources)
//                                    row by row: the row's fp32 sums of reduce_f, then, if
//                                    keep(r), row r of dst = map_f (see there)
//
// In place: dst may be a source itself (the same memory and shape: each element is read before it
// is written); other overlaps of dst with a source are not supported (map takes rows two at a time
// where a source after the first is one row for all, and reads both rows' blocks before it stores
// either: engine/lanes.hpp, map_rows).
//
// Reductions: fp32, 64 partial results per row on every path, each adding one element of every
// whole round of 64 and at most one of the rest, in element order (element c into partial c % 64;
// on the vector paths, rows read only from bf16 go through their whole rounds by pairs of blocks,
// even and odd elements apart: engine/lanes.hpp, map_rows), then the 64 partials combined pairwise
// (reduce_slots); a sum of n terms is within (ceil(n / 64) + 6) u of the exact sum, relative to
// the sum of magnitudes, on every path, though which elements share a partial and the last levels
// of the combination differ between paths, and with them the last bits. row_sums_of keeps 32
// partials for each of its two sums (the registers of one): (ceil(n / 32) + 5) u. max and min
// propagate NaN (any NaN in the reduced elements gives NaN). An empty row sums to 0, has max -inf
// and min +inf; an empty column the same. row_max and row_min of a view of a 16-bit format (bf16,
// fp16) compare its codes as integers, twice the lanes of fp32 and nothing decoded: the same
// values, and of zeros of both signs the max is +0 and the min -0 (elsewhere either zero).
//
// Normalisation statistics, as the NeuronCore's bn_stats / bn_aggr: bn_stats splits each row into
// chunks of bn_chunk elements and writes (count, mean, m2) per chunk, m2 the sum of squared
// deviations from the chunk's mean, computed in two passes over the chunk (the chunk is in L1 for
// the second): no cancellation. bn_aggr combines chunks with Chan's pairwise formula in fp64 and
// writes (mean, variance = m2 / count), so splitting a row into chunks loses nothing: the result
// is within a few u of the fp64 two-pass statistics whatever the row's offset from zero.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "tilekern/engine/lanes.hpp"

namespace tilekern::vector {

namespace hn = hwy::HWY_NAMESPACE;

// A destination with the caller's rounding; see destination in engine/lanes.hpp.
template <class Tensor>
auto rounded(Tensor&& to, const cast_options& cast, std::uint64_t first_index = 0,
             std::uint64_t index_stride = 0) {
  auto as_view = detail::to_view(std::forward<Tensor>(to));
  return destination<typename decltype(as_view)::element_type>{as_view, cast, first_index,
                                                               index_stride};
}

// `to` written with non-temporal stores (see destination in engine/lanes.hpp).
template <class T>
destination<T, true> streamed(const destination<T>& to) {
  return {to.to, to.cast, to.first_index, to.index_stride};
}

namespace detail {

using namespace tilekern::detail;  // NOLINT(google-build-using-namespace): the engine's own

template <class T>
struct is_destination : std::false_type {};
template <class T, bool Streamed>
struct is_destination<destination<T, Streamed>> : std::true_type {};

template <class Tensor>
auto as_destination(Tensor&& to) {
  if constexpr (is_destination<std::remove_cvref_t<Tensor>>::value) {
    return std::remove_cvref_t<Tensor>(to);
  } else {
    return rounded(std::forward<Tensor>(to), cast_options{});
  }
}

template <class Destination>
void check_destination() {
  using element = typename decltype(Destination::to)::element_type;
  static_assert(engine_element<element>,
                "tilekern engine: a destination must hold float or a tilekern format (bf16, "
                "fp16, tf32, fp8_*, any minifloat<...>)");
  static_assert(!std::is_const_v<element>,
                "tilekern engine: a destination must be writable (not a view of const)");
}

// map_rows over a destination and named sources, resolving and checking every source first;
// with Reduce, also the fp32 row sums of the results into `sums`.
template <bool Reduce = false, class Dst, class Sums, class F, class... Sources>
void elementwise(const char* function, std::initializer_list<const char*> names, Dst&& dst,
                 [[maybe_unused]] Sums&& sums, F&& f, const Sources&... sources) {
  const auto to = as_destination(std::forward<Dst>(dst));
  check_destination<decltype(to)>();
  const std::size_t rows = to.to.rows(), cols = to.to.cols();
  const char* const* name = names.begin();
  [[maybe_unused]] const auto resolve_next = [&](const auto& source) {
    return resolve(function, *name++, as_source(source), rows, cols);
  };
  // Braced initialisation evaluates in order, so each source meets its own name.
  const std::tuple resolved{resolve_next(sources)...};
  column_out column{nullptr, 0};
  if constexpr (Reduce) column = resolve_column(function, "sums", to_view(sums), rows);
  std::apply(
      [&](const auto&... operands) { map_rows<Reduce, combine::sum>(to, column, f, operands...); },
      resolved);
}

// The formats whose row maxima and minima are found on their codes (reduce_codes).
template <class T>
constexpr bool reduced_as_codes = minifloat_format<T> && sizeof(T) == 2;

// The maximum and minimum of 16-bit codes (twice the lanes of fp32, and no decoding), from three
// running extremes of their storage words, whose top bit is the sign: the signed max (the largest
// non-negative value, or a positive NaN, where there is one), the unsigned min (the non-negative
// value nearest 0, else the negative one nearest 0) and the unsigned max (the negative value
// farthest from 0, or a negative NaN, where there is one). value<Op>() is NaN if any code lies
// past the infinities (or past the largest finite codes where the format has none), else the max
// or the min: the same values as the fp32 reduction, except that of zeros of both signs the max
// is +0 and the min -0.
template <class T>
struct code_extremes {
  std::int16_t signed_max = std::numeric_limits<std::int16_t>::min();
  std::uint16_t unsigned_min = 0xffff, unsigned_max = 0;

  void add(std::uint16_t code) {
    signed_max = std::max(signed_max, static_cast<std::int16_t>(code));
    unsigned_min = std::min(unsigned_min, code);
    unsigned_max = std::max(unsigned_max, code);
  }
  void add(const code_extremes& other) {
    signed_max = std::max(signed_max, other.signed_max);
    unsigned_min = std::min(unsigned_min, other.unsigned_min);
    unsigned_max = std::max(unsigned_max, other.unsigned_max);
  }
  template <combine Op>
  float value() const {
    // The least magnitude of a NaN's storage word (codes sit above the padding bits).
    constexpr int nan_from = ((T::has_infinity ? T::infinity_code : T::max_code) + 1)
                             << T::padding_bits;
    constexpr int sign = 0x8000;
    if (signed_max >= nan_from || unsigned_max >= sign + nan_from)
      return std::numeric_limits<float>::quiet_NaN();
    const bool non_negative = signed_max >= 0, negative = unsigned_max >= sign;
    const int code = Op == combine::max ? (non_negative ? signed_max : unsigned_min)
                                        : (negative ? unsigned_max : unsigned_min);
    return T::from_bits(static_cast<typename T::storage_type>(code)).to_float();
  }
};
// The same on lanes DU of codes, folded into one code_extremes at the end. Each vector of codes
// is loaded once (in_register, engine/lanes.hpp): gcc 12 folded a load into each of the three
// operations, and the row max of softmax's streamed row passes, which waits for lines on their way
// from memory, made bf16 softmax at 4096 x 4096 run 0.94-0.95 times as fast (stop 78).
template <class T, class DU>
struct code_extremes_lanes {
  using DI = hn::RebindToSigned<DU>;
  hn::Vec<DI> signed_max = hn::Set(DI(), std::numeric_limits<std::int16_t>::min());
  hn::Vec<DU> unsigned_min = hn::Set(DU(), 0xffff), unsigned_max = hn::Zero(DU());

  HWY_INLINE void add(hn::Vec<DU> codes) {
    in_register(codes);
    signed_max = hn::Max(signed_max, hn::BitCast(DI(), codes));
    unsigned_min = hn::Min(unsigned_min, codes);
    unsigned_max = hn::Max(unsigned_max, codes);
  }
  HWY_INLINE code_extremes<T> fold() const {
    return {hn::GetLane(hn::MaxOfLanes(DI(), signed_max)),
            hn::GetLane(hn::MinOfLanes(DU(), unsigned_min)),
            hn::GetLane(hn::MaxOfLanes(DU(), unsigned_max))};
  }
};

// The maximum or minimum of a row of a 16-bit format (code_extremes), in two chains of vectors.
template <combine Op, class T, class D>
HWY_INLINE float reduce_code_row(D, const T* row, std::size_t cols) {
  const std::uint16_t* codes = storage_of(row);
  code_extremes<T> extremes;
  std::size_t c = 0;
  if constexpr (hn::MaxLanes(D()) > 1) {
    const hn::Repartition<std::uint16_t, D> du;
    constexpr std::size_t lanes = hn::MaxLanes(du);
    code_extremes_lanes<T, decltype(du)> even, odd;
    for (; c + 2 * lanes <= cols; c += 2 * lanes) {
      even.add(hn::LoadU(du, codes + c));
      odd.add(hn::LoadU(du, codes + c + lanes));
    }
    if (c + lanes <= cols) {
      even.add(hn::LoadU(du, codes + c));
      c += lanes;
    }
    extremes = even.fold();
    extremes.add(odd.fold());
  }
  for (; c < cols; ++c) extremes.add(codes[c]);
  return extremes.template value<Op>();
}
// The same of each row of x into out (row_max and row_min).
template <combine Op, class T>
void reduce_codes(const view<const T>& x, column_out out) {
  visit_lanes([&](auto d) {
    for (std::size_t r = 0; r < x.rows(); ++r)
      out[r] = reduce_code_row<Op>(d, x.row(r).data(), x.cols());
  });
}

template <combine Op, class Out, class X>
void reduce_rows(const char* function, Out&& out, const X& x) {
  const auto source = as_source(x);
  const std::size_t rows = source.rows(), cols = source.cols();
  const column_out sums = resolve_column(function, "out", to_view(out), rows);
  using source_type = std::remove_const_t<decltype(source)>;
  if constexpr (Op != combine::sum && is_view<source_type>::value) {
    if constexpr (reduced_as_codes<std::remove_const_t<typename source_type::element_type>>) {
      if (cols > 0) return reduce_codes<Op>(source, sums);
    }
  }
  const destination<no_output> nothing{view<no_output>(nullptr, rows, cols)};
  // x has its own shape: it varies along the row.
  map_rows<true, Op>(
      nothing, sums, [](auto, auto v) { return v; },
      resolve(function, "x", source, rows, cols).template as<along::varies>());
}

template <combine Op, class Out, class X>
void reduce_columns(const char* function, Out&& out, const X& x) {
  const auto source = as_source(x);
  const std::size_t rows = source.rows(), cols = source.cols();
  const view<float> acc = to_view(out);
  if (acc.rows() != 1 || acc.cols() != cols) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": out is " + shape_text(acc.rows(), acc.cols()) +
             ", expected 1x" + std::to_string(cols) + " (one value per column of x)";
    });
  }
  const float empty = Op == combine::sum   ? 0.0f
                      : Op == combine::max ? -std::numeric_limits<float>::infinity()
                                           : std::numeric_limits<float>::infinity();
  std::fill_n(acc.data(), cols, empty);
  reduce_cols<Op>(
      std::array{acc.data()}, rows, cols, [](auto, auto v) { return v; },
      resolve(function, "x", source, rows, cols));
}

// Column sums of f over the first source's shape, added into accs: one 1 x cols fp32 row per sum
// f gives, each named for its shape_error.
template <std::size_t N, class F, class First, class... Sources>
void col_sums_expression(const char* function, const std::array<view<float>, N>& accs,
                         const std::array<const char*, N>& acc_names, F&& f, const First& first,
                         const Sources&... sources) {
  const auto shape = as_source(first);
  const std::size_t rows = shape.rows(), cols = shape.cols();
  std::array<float*, N> rows_out{};
  for (std::size_t k = 0; k < N; ++k) {
    if (accs[k].rows() != 1 || accs[k].cols() != cols) {
      detail::throw_shape_error([&] {
        return std::string(function) + ": " + acc_names[k] + " is " +
               shape_text(accs[k].rows(), accs[k].cols()) + ", expected 1x" + std::to_string(cols) +
               " (one value per column)";
      });
    }
    rows_out[k] = accs[k].data();
  }
  const char* names[] = {"source 1", "source 2", "source 3", "source 4", "source 5", "source 6"};
  static_assert(sizeof...(Sources) < 6, "tilekern::vector: at most 6 sources");
  std::size_t next = 0;
  const auto resolve_next = [&](const auto& source) {
    return resolve(function, names[next++], as_source(source), rows, cols);
  };
  const std::tuple resolved{resolve_next(first), resolve_next(sources)...};
  std::apply(
      [&](const auto&... operands) {
        reduce_cols<combine::sum>(rows_out, rows, cols, f, operands...);
      },
      resolved);
}

// A reduction of f over the first source's shape into the columns columns_for(rows) gives: one
// column_out, or an array of two for a pair of sums.
template <combine Op, class Columns, class F, class First, class... Sources>
void reduce_expression(const char* function, Columns&& columns_for, F&& f, const First& first,
                       const Sources&... sources) {
  const auto shape = as_source(first);
  const std::size_t rows = shape.rows(), cols = shape.cols();
  const auto column = columns_for(rows);
  const char* names[] = {"source 1", "source 2", "source 3", "source 4", "source 5", "source 6"};
  static_assert(sizeof...(Sources) < 6, "tilekern::vector: at most 6 sources");
  std::size_t next = 0;
  const auto resolve_next = [&](const auto& source) {
    return resolve(function, names[next++], as_source(source), rows, cols);
  };
  // The first source has the shape: it varies along the row.
  const std::tuple resolved{resolve_next(first).template as<along::varies>(),
                            resolve_next(sources)...};
  const destination<no_output> nothing{view<no_output>(nullptr, rows, cols)};
  std::apply([&](const auto&... operands) { map_rows<true, Op>(nothing, column, f, operands...); },
             resolved);
}

}  // namespace detail

// A source that holds one value per row (a rows x 1 or 1 x 1 view of any format), as a view of
// that shape already is; saying so lets an operation keep the value in a register along the row
// (see the top of this header). Any other shape is a shape_error when the operation resolves it.
template <class Tensor>
auto column(const Tensor& values) {
  const auto as_view = detail::as_source(values);
  return detail::column_source<std::remove_const_t<typename decltype(as_view)::element_type>>{
      as_view};
}

// dst = f(d, sources...), lane by lane (see the top of this header).
template <class Dst, class F, class... Sources>
void map(Dst&& dst, F&& f, const Sources&... sources) {
  static_assert(sizeof...(Sources) <= 8, "tilekern::vector::map: at most 8 sources");
  detail::elementwise("tilekern::vector::map",
                      {"source 1", "source 2", "source 3", "source 4", "source 5", "source 6",
                       "source 7", "source 8"},
                      std::forward<Dst>(dst), nullptr, std::forward<F>(f), sources...);
}

// Tensor-tensor and tensor-scalar arithmetic: dst = a op b.
#define TILEKERN_VECTOR_BINARY(op, expression)                                 \
  template <class Dst, class A, class B>                                       \
  void op(Dst&& dst, const A& a, const B& b) {                                 \
    detail::elementwise(                                                       \
        "tilekern::vector::" #op, {"a", "b"}, std::forward<Dst>(dst), nullptr, \
        [](auto, auto x, auto y) { return expression; }, a, b);                \
  }
TILEKERN_VECTOR_BINARY(add, x + y)
TILEKERN_VECTOR_BINARY(sub, x - y)
TILEKERN_VECTOR_BINARY(mul, x* y)
TILEKERN_VECTOR_BINARY(div, x / y)
TILEKERN_VECTOR_BINARY(max, hn::Max(x, y))  // a NaN in either gives y (x86's maxps)
TILEKERN_VECTOR_BINARY(min, hn::Min(x, y))  // a NaN in either gives y (x86's minps)
#undef TILEKERN_VECTOR_BINARY

// dst = mask != 0 ? a : b; mask holds bool or any format (NaN counts as nonzero).
template <class Dst, class Mask, class A, class B>
void select(Dst&& dst, const Mask& mask, const A& a, const B& b) {
  detail::elementwise(
      "tilekern::vector::select", {"mask", "a", "b"}, std::forward<Dst>(dst), nullptr,
      [](auto d, auto m, auto x, auto y) {
        return hn::IfThenZeroElse(m == hn::Zero(d), x) + hn::IfThenElseZero(m == hn::Zero(d), y);
      },
      mask, a, b);
}

// dst = predicate(r, c) >= 0 ? src : fill. The causal mask of a query row r over key column c
// (keys aligned at the end when there are more keys than queries) is
// affine{.row = 1, .col = -1, .offset = keys - queries}.
template <class Dst, class Src>
void affine_select(Dst&& dst, const Src& src, affine predicate, float fill) {
  detail::elementwise(
      "tilekern::vector::affine_select", {"src", "predicate", "fill"}, std::forward<Dst>(dst),
      nullptr,
      [](auto d, auto x, auto p, auto f) { return hn::IfThenElse(p >= hn::Zero(d), x, f); }, src,
      predicate, fill);
}

// dst(r, c) = f.row * r + f.col * c + f.offset.
template <class Dst>
void iota(Dst&& dst, affine f) {
  detail::elementwise(
      "tilekern::vector::iota", {"f"}, std::forward<Dst>(dst), nullptr,
      [](auto, auto p) { return p; }, f);
}

// dst(c, r) = src(r, c): dst is src's cols x rows.
template <class Dst, class Src>
void transpose(Dst&& dst, const Src& src) {
  constexpr const char* function = "tilekern::vector::transpose";
  const auto to = detail::as_destination(std::forward<Dst>(dst));
  detail::check_destination<decltype(to)>();
  const auto from = detail::as_source(src);
  if (to.to.rows() != from.cols() || to.to.cols() != from.rows()) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": dst is " + detail::shape_text(to.to.rows(), to.to.cols()) +
             ", expected " + detail::shape_text(from.cols(), from.rows()) + " (src transposed)";
    });
  }
  // Column c of src, gathered into fp32 pieces, is row c of dst.
  constexpr std::size_t piece = 256;
  float staged[piece];
  const std::uint64_t stride = to.index_stride != 0 ? to.index_stride : to.to.cols();
  for (std::size_t c = 0; c < from.cols(); ++c) {
    for (std::size_t r0 = 0; r0 < from.rows(); r0 += piece) {
      const std::size_t n = std::min(piece, from.rows() - r0);
      for (std::size_t i = 0; i < n; ++i) staged[i] = static_cast<float>(from(r0 + i, c));
      detail::map_rows<false, detail::combine::sum>(
          destination<typename decltype(to.to)::element_type>{
              to.to.block(c, r0, 1, n), to.cast, to.first_index + c * stride + r0, stride},
          detail::column_out{nullptr, 0}, [](auto, auto v) { return v; },
          detail::operand<float>{staged, 0, 1});
    }
  }
}

// One fp32 value per row of x, into `out`: a rows x 1 view of float or a range of rows floats.
template <class Out, class X>
void row_sum(Out&& out, const X& x) {
  detail::reduce_rows<detail::combine::sum>("tilekern::vector::row_sum", out, x);
}
template <class Out, class X>
void row_max(Out&& out, const X& x) {
  detail::reduce_rows<detail::combine::max>("tilekern::vector::row_max", out, x);
}
template <class Out, class X>
void row_min(Out&& out, const X& x) {
  detail::reduce_rows<detail::combine::min>("tilekern::vector::row_min", out, x);
}
template <class Out, class X>
void row_mean(Out&& out, const X& x) {
  constexpr const char* function = "tilekern::vector::row_mean";
  detail::reduce_rows<detail::combine::sum>(function, out, x);
  const auto source = detail::as_source(x);
  const auto means = detail::resolve_column(function, "out", detail::to_view(out), source.rows());
  for (std::size_t r = 0; r < source.rows(); ++r) means[r] /= static_cast<float>(source.cols());
}

// One fp32 value per column of x, into `out`: one row of x.cols() floats.
template <class Out, class X>
void col_sum(Out&& out, const X& x) {
  detail::reduce_columns<detail::combine::sum>("tilekern::vector::col_sum", out, x);
}
template <class Out, class X>
void col_max(Out&& out, const X& x) {
  detail::reduce_columns<detail::combine::max>("tilekern::vector::col_max", out, x);
}
template <class Out, class X>
void col_min(Out&& out, const X& x) {
  detail::reduce_columns<detail::combine::min>("tilekern::vector::col_min", out, x);
}
template <class Out, class X>
void col_mean(Out&& out, const X& x) {
  detail::reduce_columns<detail::combine::sum>("tilekern::vector::col_mean", out, x);
  const view<float> means = detail::to_view(out);
  const auto count = static_cast<float>(detail::as_source(x).rows());
  for (std::size_t c = 0; c < means.cols(); ++c) means(0, c) /= count;
}

// Reductions of an expression, without writing it: the shape is the first source's (a view),
// and the other sources broadcast against it as in map.
//   row_sum_of(sums, f, sources...)   sums[r] = the fp32 sum over c of f(d, sources...)(r, c)
//   row_max_of(maxes, f, sources...)  the same with max (NaN propagates)
//   row_sums_of(first, second, f, sources...)
//                                     two sums of one pass: f returns std::pair{a, b},
//                                     first[r] = the fp32 sum over c of a, second[r] of b (each
//                                     in 32 partials, not 64: see the top of this header)
//   col_sum_of(acc, f, sources...)    acc(0, c) += the fp32 sum over r, rows in order: acc keeps
//                                     what it held, so blocks of rows accumulate into one row
//   col_sums_of(first, second, f, sources...)
//                                     two of those of one pass: f returns std::pair{a, b}, the
//                                     sums of a added into first, of b into second
// A sum's term may be product(a, b) (f returns one, alone or in the pair): the sum adds a * b in
// one fused multiply-add, rounded once, in every row loop and under every compiler tuning, where a
// plain a * b is fused into the sum in some loops and not in others (engine/lanes.hpp, product).
// layernorm and rmsnorm sum their squares so.
using detail::product;

template <class Sums, class F, class First, class... Sources>
void row_sum_of(Sums&& sums, F&& f, const First& first, const Sources&... sources) {
  constexpr const char* function = "tilekern::vector::row_sum_of";
  detail::reduce_expression<detail::combine::sum>(
      function,
      [&](std::size_t rows) {
        return detail::resolve_column(function, "out", detail::to_view(sums), rows);
      },
      f, first, sources...);
}
template <class Maxes, class F, class First, class... Sources>
void row_max_of(Maxes&& maxes, F&& f, const First& first, const Sources&... sources) {
  constexpr const char* function = "tilekern::vector::row_max_of";
  detail::reduce_expression<detail::combine::max>(
      function,
      [&](std::size_t rows) {
        return detail::resolve_column(function, "out", detail::to_view(maxes), rows);
      },
      f, first, sources...);
}
template <class FirstSums, class SecondSums, class F, class First, class... Sources>
void row_sums_of(FirstSums&& first_sums, SecondSums&& second_sums, F&& f, const First& first,
                 const Sources&... sources) {
  constexpr const char* function = "tilekern::vector::row_sums_of";
  detail::reduce_expression<detail::combine::sum>(
      function,
      [&](std::size_t rows) {
        return std::array{
            detail::resolve_column(function, "first", detail::to_view(first_sums), rows),
            detail::resolve_column(function, "second", detail::to_view(second_sums), rows)};
      },
      f, first, sources...);
}
// Row by row: sums[r] = the fp32 sum over c of reduce_f(d, reduce_sources...)(r, c), as
// row_sum_of (sums one column), or row_sums_of (sums an std::array of two, reduce_f returning a
// pair); then, if keep(r) returns true, row r of dst = map_f(d, map_sources...), as map (dst a
// view, rounded(...) or streamed(rounded(...)), which streams the whole 64-byte lines of each row
// where the rows are a multiple of 64 bytes apart, and otherwise takes plain stores). Both take
// their sources as std::tuples (std::forward_as_tuple), the first of reduce_sources giving the
// shape, which dst must have. keep(r) may write row r of the columns map_sources read: a row's
// sources are read when its pass begins. So a row's statistics and its map run while the row is in
// L1, in place of a pass over every row for each (a block of rows in L2); the bits are those of the
// separate operations. While it maps row r it prefetches the next row of the first reduce source it
// sums, and while it reduces row r, where that row and dst's fit in 16 KiB together, row r of dst
// for writing; where they fit in 8 KiB, row r + 1's sums run right after keep(r), before row r's
// map, and overlap the statistics keep computes (engine/lanes.hpp, reduce_then_map_rows). Where
// map_sources hold a value per row and one row for every row (as map groups rows), rows go two at
// a time: both rows' sums and keeps, then their map together. keep is called in row order. The
// reduce sources may also hold each row of dst as q rows of cols / q elements: dst rows x cols,
// the first reduce source (q * rows) x (cols / q), e.g. a view of rows stored one after another,
// with stride cols / q. Then sums has q * rows rows, and keep(r) reads rows q r to q r + q - 1 of
// it: the sums row_sum_of (or row_sums_of) over the reduce sources would give.
template <class Dst, class Sums, class ReduceF, class... ReduceSources, class Keep, class MapF,
          class... MapSources>
void sums_then_map(Dst&& dst, const Sums& sums, ReduceF&& reduce_f,
                   const std::tuple<ReduceSources...>& reduce_sources, Keep&& keep, MapF&& map_f,
                   const std::tuple<MapSources...>& map_sources) {
  constexpr const char* function = "tilekern::vector::sums_then_map";
  static_assert(
      sizeof...(ReduceSources) >= 1 && sizeof...(ReduceSources) <= 6 && sizeof...(MapSources) <= 8,
      "tilekern::vector::sums_then_map: 1 to 6 reduce sources, at most 8 map sources");
  const auto to = detail::as_destination(std::forward<Dst>(dst));
  detail::check_destination<decltype(to)>();
  const auto shape = detail::as_source(std::get<0>(reduce_sources));
  const std::size_t rows = to.to.rows(), cols = to.to.cols();
  const std::size_t q = rows == 0 ? 1 : std::max<std::size_t>(1, shape.rows() / rows);
  if (shape.rows() != rows * q || shape.cols() * q != cols) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": dst is " + detail::shape_text(rows, cols) + ", expected " +
             detail::shape_text(shape.rows(), shape.cols()) +
             " (the first reduce source), or each of its rows q at a time as one";
    });
  }
  const auto column_of = [&](const char* name, const auto& out) {
    return detail::resolve_column(function, name, detail::to_view(out), rows * q);
  };
  const auto columns = [&] {
    if constexpr (std::is_same_v<Sums, std::array<view<float>, 2>>) {
      return std::array{column_of("first sums", sums[0]), column_of("second sums", sums[1])};
    } else {
      return column_of("sums", sums);
    }
  }();
  const char* reduce_names[] = {"reduce source 1", "reduce source 2", "reduce source 3",
                                "reduce source 4", "reduce source 5", "reduce source 6"};
  const char* map_names[] = {"map source 1", "map source 2", "map source 3", "map source 4",
                             "map source 5", "map source 6", "map source 7", "map source 8"};
  const auto resolve_all = [&](const auto& sources, const char* const* names, std::size_t parts) {
    std::size_t next = 0;
    const auto resolve_next = [&](const auto& source) {
      return detail::resolve(function, names[next++], detail::as_source(source), rows * parts,
                             cols / parts);
    };
    // Braced initialisation evaluates in order, so each source meets its own name.
    return std::apply([&](const auto&... each) { return std::tuple{resolve_next(each)...}; },
                      sources);
  };
  // The first reduce source has the shape: it varies along the row.
  const auto reducing = resolve_all(reduce_sources, reduce_names, q);
  const auto first = std::get<0>(reducing).template as<detail::along::varies>();
  detail::reduce_then_map_rows(to, columns, reduce_f,
                               std::apply(
                                   [&](const auto&, const auto&... rest) {
                                     return std::tuple{first, rest...};
                                   },
                                   reducing),
                               keep, map_f, resolve_all(map_sources, map_names, 1), q);
}

template <class Acc, class F, class First, class... Sources>
void col_sum_of(Acc&& acc, F&& f, const First& first, const Sources&... sources) {
  detail::col_sums_expression<1>("tilekern::vector::col_sum_of", {detail::to_view(acc)}, {"acc"}, f,
                                 first, sources...);
}
template <class FirstAcc, class SecondAcc, class F, class First, class... Sources>
void col_sums_of(FirstAcc&& first_acc, SecondAcc&& second_acc, F&& f, const First& first,
                 const Sources&... sources) {
  detail::col_sums_expression<2>("tilekern::vector::col_sums_of",
                                 {detail::to_view(first_acc), detail::to_view(second_acc)},
                                 {"first", "second"}, f, first, sources...);
}

// The chunk length of bn_stats, as on the NeuronCore (BN_STATS_FMAX).
inline constexpr std::size_t bn_chunk = 512;

// The number of columns bn_stats writes for rows of `cols` elements: 3 per chunk.
constexpr std::size_t bn_stats_cols(std::size_t cols) {
  return 3 * ((cols + bn_chunk - 1) / bn_chunk);
}

// stats(r, 3k .. 3k + 2) = (count, mean, m2) of chunk k of row r of x: elements
// [k * bn_chunk, min((k + 1) * bn_chunk, cols)). stats is fp32, x.rows() x bn_stats_cols(cols).
template <class Stats, class X>
void bn_stats(Stats&& stats, const X& x) {
  constexpr const char* function = "tilekern::vector::bn_stats";
  const auto source = detail::as_source(x);
  const view<float> out = detail::to_view(stats);
  const std::size_t rows = source.rows(), cols = source.cols();
  if (out.rows() != rows || out.cols() != bn_stats_cols(cols)) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": stats is " + detail::shape_text(out.rows(), out.cols()) +
             ", expected " + detail::shape_text(rows, bn_stats_cols(cols)) + " (3 per chunk of " +
             std::to_string(bn_chunk) + " columns)";
    });
  }
  for (std::size_t c0 = 0; c0 < cols; c0 += bn_chunk) {
    const std::size_t n = std::min(bn_chunk, cols - c0);
    const auto chunk = source.block(0, c0, rows, n);
    const std::size_t k = 3 * (c0 / bn_chunk);
    const view<float> count = out.block(0, k, rows, 1), mean = out.block(0, k + 1, rows, 1),
                      m2 = out.block(0, k + 2, rows, 1);
    row_sum(mean, chunk);
    for (std::size_t r = 0; r < rows; ++r) {
      count(r, 0) = static_cast<float>(n);
      mean(r, 0) /= static_cast<float>(n);
    }
    const destination<detail::no_output> nothing{view<detail::no_output>(nullptr, rows, n)};
    detail::map_rows<true, detail::combine::sum>(
        nothing, detail::column_out{m2.data(), m2.stride()},
        [](auto, auto v, auto m) { return (v - m) * (v - m); },
        detail::resolve(function, "x", chunk, rows, n),
        detail::resolve(function, "stats", view<const float>(mean), rows, n));
  }
}

// mean_var(r, 0 .. 1) = (mean, variance) of row r from its bn_stats: the chunks combined by Chan's
// formula in fp64, variance = m2 / count (biased, as layernorm uses). mean_var is fp32, rows x 2.
// A row of no elements gives (NaN, NaN).
template <class MeanVar, class Stats>
void bn_aggr(MeanVar&& mean_var, const Stats& stats) {
  constexpr const char* function = "tilekern::vector::bn_aggr";
  const auto in = detail::as_source(stats);
  const view<float> out = detail::to_view(mean_var);
  static_assert(std::is_same_v<typename decltype(in)::element_type, const float>,
                "tilekern::vector::bn_aggr: stats must be the fp32 output of bn_stats");
  if (in.cols() % 3 != 0) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": stats has " + std::to_string(in.cols()) +
             " columns, expected a multiple of 3 (count, mean, m2 per chunk)";
    });
  }
  if (out.rows() != in.rows() || out.cols() != 2) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": mean_var is " + detail::shape_text(out.rows(), out.cols()) +
             ", expected " + detail::shape_text(in.rows(), 2) + " (mean, variance per row)";
    });
  }
  for (std::size_t r = 0; r < in.rows(); ++r) {
    double count = 0.0, mean = 0.0, m2 = 0.0;
    for (std::size_t k = 0; k < in.cols(); k += 3) {
      const double n = in(r, k), chunk_mean = in(r, k + 1), chunk_m2 = in(r, k + 2);
      if (n == 0.0) continue;
      const double total = count + n, delta = chunk_mean - mean;
      mean += delta * (n / total);
      m2 += chunk_m2 + delta * delta * (count * n / total);
      count = total;
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    out(r, 0) = static_cast<float>(count > 0.0 ? mean : nan);
    out(r, 1) = static_cast<float>(count > 0.0 ? m2 / count : nan);
  }
}

}  // namespace tilekern::vector

namespace tilekern::detail {

// write(destination, c, k) for columns c to c + k of `rows`, whole rows of a kernel's output y
// whose first element is element `first` of y, rounded with `cast`: all of them with plain
// stores; or, where `streamed` (streams(y)), the columns that fill whole 64-byte lines with
// non-temporal stores (destination in engine/lanes.hpp), and those before the first line and
// after the last with plain stores (a std::vector's elements start 16 bytes after a line; a
// streamed destination streams only rows of whole lines).
template <class Y, class Write>
void write_rounded(view<Y> rows, const cast_options& cast, std::uint64_t first, bool streamed,
                   Write&& write) {
  const std::size_t cols = rows.cols();
  const auto columns = [&](std::size_t c, std::size_t k) {
    return vector::rounded(rows.block(0, c, rows.rows(), k), cast, first + c, cols);
  };
  const auto line_offset = [](const Y* p) { return reinterpret_cast<std::uintptr_t>(p) % 64; };
  const std::size_t before = (64 - line_offset(rows.data())) % 64;
  if (!streamed || before % sizeof(Y) != 0) return write(columns(0, cols), 0, cols);
  const std::size_t head = std::min(cols, before / sizeof(Y));
  const std::size_t tail = std::min(cols - head, line_offset(rows.data() + cols) / sizeof(Y));
  const std::size_t lines = cols - head - tail;
  if (head > 0) write(columns(0, head), 0, head);
  if (lines > 0) write(vector::streamed(columns(head, lines)), head, lines);
  if (tail > 0) write(columns(head + lines, tail), head + lines, tail);
}

}  // namespace tilekern::detail
