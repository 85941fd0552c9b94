#pragma once
// The machinery under the vector and scalar engines (engine/vector.hpp, engine/scalar.hpp): fp32
// lanes streamed row by row out of views in any format and back into one.
//
// An engine operation computes, for every element (r, c) of its destination, fp32 lanes from its
// operands, and rounds the result into the destination's format. Operands are
//   - a view of the destination's shape,
//   - a view of one row (1 x cols), the same row for every r (row broadcast),
//   - a view of one column (rows x 1), one value per row, the same for every c (column broadcast;
//     per-row statistics such as a row's max or mean are such columns),
//   - a 1 x 1 view or a float, the same value everywhere.
// Views hold float or any tilekern format; they are decoded exactly to fp32 as they are loaded
// (a signalling NaN in bf16 stays signalling until the first arithmetic, which x86 defines),
// and the destination is encoded with the caller's cast_options (element (r, c) of a
// destination of `cols` columns draws stochastic bits with index r * cols + c).
//
// Paths: lanes of the active ISA path (simd/isa.hpp): 16 fp32 lanes (avx512 and amx), 8 (avx2),
// or 1 (scalar), the same lane-wise code on each, so elementwise results are bit-identical on
// every path; only reductions, which add lanes in a different order, differ between paths.
// The last partial block of a row is staged through zero-filled stack buffers: no operation
// reads or writes outside its views.

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "tilekern/error.hpp"
#include "tilekern/simd/convert_vector.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/minifloat.hpp"
#include "tilekern/types/random.hpp"
#include "tilekern/types/rounding.hpp"

namespace tilekern {

// What the vector and scalar engines hold: float or any tilekern format.
template <class T>
concept engine_element = std::is_same_v < std::remove_const_t<T>,
float > || minifloat_format<std::remove_const_t<T>>;

namespace detail {

namespace hn = hwy::HWY_NAMESPACE;

// body(d) for the fp32 lanes `d` of the active path.
template <class Body>
decltype(auto) visit_lanes(Body&& body) {
  [[maybe_unused]] const isa level = active_isa();
#if defined(TILEKERN_CONVERT_AVX512)
  if (level >= isa::avx512) return body(hn::Simd<float, 16, 0>());
#endif
#if defined(TILEKERN_CONVERT_AVX2)
  if (level >= isa::avx2) return body(hn::Simd<float, 8, 0>());
#endif
  return body(hn::Simd<float, 1, 0>());
}

inline std::string shape_text(std::size_t rows, std::size_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// One block of fp32 lanes from `from`, exact.
template <class T, class D>
HWY_INLINE hn::Vec<D> load_lanes(D d, const T* from) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(d, from);
  } else if constexpr (std::is_same_v<T, bool>) {  // a mask: 0 or 1
    if constexpr (hn::MaxLanes(D()) == 1) {
      return hn::Set(d, *from ? 1.0f : 0.0f);
    } else {
      const hn::Rebind<std::uint8_t, D> bytes;
      const hn::Rebind<std::int32_t, D> words;
      const auto* codes = reinterpret_cast<const std::uint8_t*>(from);
      return hn::ConvertTo(d, hn::PromoteTo(words, hn::LoadU(bytes, codes)));
    }
  } else if constexpr (hn::MaxLanes(D()) == 1) {
    return hn::Set(d, from->to_float());
  } else {
#if defined(TILEKERN_CONVERT_AVX2)
    // bf16 as it is: unlike decode_block, widen_bf16 does not quiet signalling NaNs (the first
    // arithmetic on one does, and every encoder does).
    if constexpr (std::is_same_v<T, bf16>) {
      return widen_bf16(d, storage_of(from));
    } else {
      return decode_block<T>(d, storage_of(from));
    }
#endif
  }
}

// The first n < lanes elements of `from`, zeros after them.
template <class T, class D>
HWY_INLINE hn::Vec<D> load_partial(D d, const T* from, std::size_t n) {
  T staged[hn::MaxLanes(D())] = {};
  std::copy_n(from, n, staged);
  return load_lanes(d, staged);
}

// A view as it is, a tile's view, or a contiguous range as a view of one row.
template <class T>
struct is_view : std::false_type {};
template <class T>
struct is_view<view<T>> : std::true_type {};

template <class Tensor>
auto to_view(Tensor&& tensor) {
  if constexpr (is_view<std::remove_cvref_t<Tensor>>::value) {
    return std::remove_cvref_t<Tensor>(tensor);
  } else if constexpr (requires { tensor.view(); }) {
    return tensor.view();
  } else {
    return view(std::forward<Tensor>(tensor));
  }
}

// How an operand's lanes run along a row: loaded element by element (`varies`: a view of the
// destination's shape, or one row), or one value for the whole row (`constant`: vector::column, a
// float). A view whose shape decides at run time which it is (`either`) is loaded too: from its
// row, or, when it is a column, from its row's value repeated along a row of scratch (written
// once per row, see with_repeat_scratch). So no block tests what an operand is, and each row loop
// is compiled once per path.
enum class along : std::uint8_t { either, varies, constant };

// A source operand of an engine operation, resolved against the destination's shape (see the top
// of this header): element (r, c) is data[r * row_step + c * col_step], col_step 0 or 1, or
// `value` everywhere when data is null.
template <class T, along Kind = along::either>
struct operand {
  using element = T;
  static constexpr along kind = Kind;
  const T* data = nullptr;
  std::size_t row_step = 0;
  std::size_t col_step = 0;
  float value = 0.0f;
  T* repeated = nullptr;  // `either` columns: scratch for `repeats` copies of a row's value
  std::size_t repeats = 0;

  float at(std::size_t r) const {
    if (data == nullptr) return value;
    return static_cast<float>(data[r * row_step]);
  }
  bool varies() const { return data != nullptr && col_step == 1; }
  // The same operand with its kind known to be K.
  template <along K>
  operand<T, K> as() const {
    return {data, row_step, col_step, value};
  }

  // The operand's lanes along row r.
  template <class D>
  struct cursor {
    const T* row;  // null for a constant operand
    hn::Vec<D> splat;
    HWY_INLINE hn::Vec<D> load(D d, std::size_t c) const {
      if constexpr (Kind == along::constant) return splat;
      if constexpr (Kind != along::constant) return load_lanes(d, row + c);
    }
    HWY_INLINE hn::Vec<D> load_tail(D d, std::size_t c, std::size_t n) const {
      if constexpr (Kind == along::constant) return splat;
      if constexpr (Kind != along::constant) return load_partial(d, row + c, n);
    }
    // Lanes c..c+n-1 of a float row, zeros after, by a masked load (no staging through memory).
    HWY_INLINE hn::Vec<D> load_masked(D d, std::size_t c, std::size_t n) const {
      if constexpr (Kind == along::constant) return splat;
      if constexpr (Kind != along::constant) return hn::MaskedLoad(hn::FirstN(d, n), d, row + c);
    }
    // Block K (0 or 1) of the two from c on, interleaved (see map_rows): bf16 codes as they
    // are, a float row from its copy in that order (with_interleaved_rows). One block at a time,
    // not the pair: gcc 12 stored a pair of a constant's splats to the stack on every block.
    template <std::size_t K>
    HWY_INLINE hn::Vec<D> load_interleaved(D d, std::size_t c) const {
      if constexpr (Kind == along::constant) return splat;
      if constexpr (Kind != along::constant && std::is_same_v<T, float>) {
        return hn::LoadU(d, row + c + K * hn::MaxLanes(d));
      }
#if defined(TILEKERN_CONVERT_AVX2)
      if constexpr (Kind != along::constant && std::is_same_v<T, bf16>) {
        return std::get<K>(widen_bf16_interleaved(d, storage_of(row + c)));
      }
#endif
    }
  };
  template <class D>
  HWY_INLINE cursor<D> at_row(D d, std::size_t r) const {
    if constexpr (Kind == along::constant) {
      return {nullptr, hn::Set(d, at(r))};
    } else {
      if (Kind == along::either && repeated != nullptr) {
        std::fill_n(repeated, repeats, data[r * row_step]);
        return {repeated, hn::Zero(d)};
      }
      return {data + r * row_step, hn::Zero(d)};
    }
  }
};

// Scratch for `cols` copies of a row's value, for an `either` operand that is a column.
template <class Op>
auto repeat_scratch(const Op& operand, std::size_t cols) {
  if constexpr (Op::kind == along::either) {
    using T = typename Op::element;
    return operand.varies() ? std::unique_ptr<T[]>() : std::make_unique<T[]>(cols);
  } else {
    return 0;
  }
}
// body(operands...), each `either` operand that is a column given its scratch.
template <class Body, class... Operands>
decltype(auto) with_repeat_scratch(std::size_t cols, Body&& body, const Operands&... operands) {
  auto scratch = std::make_tuple(repeat_scratch(operands, cols)...);
  const auto given = [cols](auto operand, auto& buffer) {
    if constexpr (decltype(operand)::kind == along::either) {
      operand.repeated = buffer.get();
      operand.repeats = cols;
    }
    return operand;
  };
  return std::apply([&](auto&... buffers) { return body(given(operands, buffers)...); }, scratch);
}

}  // namespace detail

// An affine function of the element's indices, row * r + col * c + offset, evaluated in fp32
// (exact while every term and the sum are integers below 2^24): iota's values, and the predicate
// of affine_select (the causal mask is r - c + offset >= 0).
struct affine {
  float row = 0.0f;
  float col = 0.0f;
  float offset = 0.0f;
};

namespace detail {

template <>
struct operand<affine> {
  using element = affine;
  static constexpr along kind = along::varies;
  affine f;

  float at(std::size_t r) const { return f.row * static_cast<float>(r) + f.offset; }

  template <class D>
  struct cursor {
    hn::Vec<D> first;  // the lanes of column 0
    float col;
    HWY_INLINE hn::Vec<D> load(D d, std::size_t c) const {
      return first + hn::Set(d, col * static_cast<float>(c));
    }
    HWY_INLINE hn::Vec<D> load_tail(D d, std::size_t c, std::size_t) const { return load(d, c); }
  };
  template <class D>
  HWY_INLINE cursor<D> at_row(D d, std::size_t r) const {
    return {hn::Set(d, at(r)) + hn::Iota(d, 0.0f) * hn::Set(d, f.col), f.col};
  }
};
inline operand<affine> resolve(const char*, const char*, affine f, std::size_t, std::size_t) {
  return {f};
}

// Resolves `source` (a view or a float) against a destination of rows x cols; throws shape_error
// naming the operation and the argument if it is none of the shapes the top of this header lists.
template <class T>
operand<T> resolve(const char* function, const char* argument, view<const T> source,
                   std::size_t rows, std::size_t cols) {
  const std::size_t r = source.rows(), c = source.cols();
  if (r == rows && c == cols) return {source.data(), source.stride(), 1};
  if (r == 1 && c == cols) return {source.data(), 0, 1};
  if (r == rows && c == 1) return {source.data(), source.stride(), 0};
  if (r == 1 && c == 1) return {source.data(), 0, 0};
  detail::throw_shape_error([&] {
    return std::string(function) + ": " + argument + " is " + shape_text(r, c) + ", expected " +
           shape_text(rows, cols) + ", 1x" + std::to_string(cols) + " (a row), " +
           std::to_string(rows) + "x1 (a column) or 1x1";
  });
}
inline operand<float, along::constant> resolve(const char*, const char*, float value, std::size_t,
                                               std::size_t) {
  return {nullptr, 0, 0, value};
}

// A source that is one value per row (vector::column): a rows x 1 or 1 x 1 view.
template <class T>
struct column_source {
  view<const T> values;
};
template <class T>
operand<T, along::constant> resolve(const char* function, const char* argument,
                                    column_source<T> source, std::size_t rows, std::size_t) {
  const std::size_t r = source.values.rows(), c = source.values.cols();
  if (c == 1 && r == rows) return {source.values.data(), source.values.stride(), 0};
  if (c == 1 && r == 1) return {source.values.data(), 0, 0};
  detail::throw_shape_error([&] {
    return std::string(function) + ": " + argument + " is " + shape_text(r, c) + ", expected " +
           shape_text(rows, 1) + " (a column) or 1x1";
  });
}

template <class T>
struct is_column_source : std::false_type {};
template <class T>
struct is_column_source<column_source<T>> : std::true_type {};

// A view or a float as an engine source: views of T and ranges become view<const T>.
template <class Source>
auto as_source(const Source& source) {
  if constexpr (std::is_arithmetic_v<Source>) {
    return static_cast<float>(source);
  } else if constexpr (std::is_same_v<Source, affine> || is_column_source<Source>::value) {
    return source;
  } else {
    const auto as_view = to_view(source);
    using element = std::remove_const_t<typename decltype(as_view)::element_type>;
    static_assert(engine_element<element> || std::is_same_v<element, bool>,
                  "tilekern engine: an operand must hold float, a tilekern format (bf16, fp16, "
                  "tf32, fp8_*, any minifloat<...>) or bool (a mask), or be a float");
    return view<const element>(as_view);
  }
}

// The destination type of a reduction that writes no tensor: stores of it do nothing.
struct no_output {};

}  // namespace detail

// Where an engine operation writes, and how it rounds: element (r, c) of `to` is encoded with
// `cast`, drawing stochastic bits with index first_index + r * index_stride + c (index_stride 0
// means to.cols()). A kernel that works on a block of rows of a larger tensor passes the
// block's offset and the tensor's columns, so that the bits do not depend on the blocking.
//
// A Streamed destination (vector::streamed) is written with non-temporal stores, which do not
// read the cache lines they write and do not keep them in the caches: for an output larger than
// the caches (stream_threshold()), whose lines would otherwise be read from memory first. The
// bits are the same. Only vectors of 16 bytes or more go so, and only where the rows are whole
// 64-byte lines (the first element, the stride and the row's length); otherwise it is written as
// usual. So no row ends in a partial vector, which would be encoded into a staging array on the
// stack first: streamed there, it was read back from memory (about 0.4 us a row).
// Streamed is a compile-time flag: with a run-time one, gcc 12 compiled the plain row loops
// differently, and layernorm bf16 1576x768 took 25-35% longer.
template <class T, bool Streamed = false>
struct destination {
  view<T> to;
  cast_options cast{};
  std::uint64_t first_index = 0;
  std::uint64_t index_stride = 0;
};

namespace detail {
// 16 MiB (stream_threshold() below).
inline std::size_t default_stream_threshold() {
  return std::size_t{16} << 20;
}
inline std::atomic<std::size_t>& stream_threshold_setting() {
  static std::atomic<std::size_t> bytes{default_stream_threshold()};
  return bytes;
}
}  // namespace detail

// The size of output from which layernorm, rmsnorm, softmax (not into float) and activation
// (kernels/activation.hpp) write it with non-temporal stores (destination), unless
// set_stream_threshold() said otherwise: by default 16 MiB, on every processor. Measured:
// - AMD EPYC (Zen 4, 32 MiB of L3): a copy loop with non-temporal stores was 10% slower than one
//   with plain stores at 8 MiB, 20% faster at 12 MiB and 1.4-1.8x as fast at 32 MiB; streamed,
//   the kernels' block passes at 4096 x 4096 took 0.63-0.90 of their time with plain stores.
// - Intel Xeon (Cascade Lake, 36 MiB of L3): the copy loop was as fast either way up to 32 MiB
//   and 8% faster streamed at 64 MiB, but streamed, the kernels at 4096 x 4096 took 1.03-1.17
//   times as long (layernorm and rmsnorm into bf16 and fp32, softmax into bf16). That was their
//   block passes: the row passes (reduce_then_map_rows) did not stream then, and so no Intel
//   processor streamed by default until stop 56.
// - Intel Xeon with AMX (Granite Rapids class, 2 cores of a VM): a copy loop of 64 MiB 1.09 times
//   memcpy's speed with plain stores, 1.36-1.38 with non-temporal ones. The row passes streamed,
//   4096 x 4096 with x and y on a line (16 bytes past one): layernorm bf16 1.28 (1.14) times as
//   fast, fp32 1.26 (1.20), rmsnorm bf16 1.38 (1.20), fp32 1.17 off a line, softmax bf16 1.01
//   off a line (fp32 through scratch 1.06 (1.03), but the bench 0.83-0.86: not streamed);
//   layernorm bf16 2048 x 4096 (16 MiB) 1.25 (1.16), but 1576 x 768 (2.4 MiB) 0.78-0.83 and
//   1024 x 4096 (8 MiB) 0.82-1.13 (CONTRIBUTING.md, stop 56).
// - The AMD EPYC again (stop 57): there the row passes streamed ran 0.73-0.91 times as fast as the
//   block passes streamed at 4096 x 4096 (layernorm and rmsnorm, which so take the block passes
//   there: norm_row_passes in kernels/rmsnorm.hpp), softmax bf16 1.18 times.
inline std::size_t stream_threshold() {
  return detail::stream_threshold_setting().load();
}

// Sets stream_threshold() for the whole process, to tune or to test; std::nullopt returns to the
// default. 0 streams every output that can be, SIZE_MAX none.
inline void set_stream_threshold(std::optional<std::size_t> bytes) {
  detail::stream_threshold_setting().store(bytes.value_or(detail::default_stream_threshold()));
}

namespace detail {

// Whether a kernel streams its output `to` (the whole tensor, not the block of rows it writes).
template <class T>
bool streams(const view<T>& to) {
  return to.rows() * to.cols() * sizeof(T) >= stream_threshold();
}

// Whether every row of `to` is whole 64-byte lines (its first element, its length and its stride),
// which map_rows needs to stream a Streamed destination; and the same destination with plain
// stores, for rows that are not.
template <class T>
bool whole_lines(const view<T>& to) {
  const auto at_64 = [](std::size_t bytes) { return bytes % 64 == 0; };
  return at_64(reinterpret_cast<std::uintptr_t>(to.data())) && at_64(to.cols() * sizeof(T)) &&
         (to.rows() <= 1 || at_64(to.stride() * sizeof(T)));
}
template <class T, bool Streamed>
destination<T> plain(const destination<T, Streamed>& to) {
  return {to.to, to.cast, to.first_index, to.index_stride};
}

// How the row passes (reduce_then_map_rows, softmax's softmax_rows) split each row of a streamed
// destination: `head` columns before the row's first 64-byte line and `tail` after its last, which
// they write with plain stores, and the `lines` columns between, which they stream. Rows whose
// lines do not fall at the same columns in every row (their stride not a multiple of 64 bytes, or
// their first element not at a multiple of its size) are all head: written with plain stores.
struct line_split {
  std::size_t head, lines, tail;
};
template <class T>
line_split split_at_lines(const view<T>& to) {
  const std::size_t cols = to.cols();
  const auto offset = reinterpret_cast<std::uintptr_t>(to.data()) % 64;
  const std::size_t before = (64 - offset) % 64;
  if (before % sizeof(T) != 0 || (to.rows() > 1 && to.stride() * sizeof(T) % 64 != 0)) {
    return {cols, 0, 0};
  }
  const std::size_t head = std::min(cols, before / sizeof(T));
  const std::size_t lines = (cols - head) * sizeof(T) / 64 * 64 / sizeof(T);
  return {head, lines, cols - head - lines};
}

// Columns [c, c + k) of `to`'s rows, with the rounding indices they have in `to`.
template <class T, bool Streamed>
destination<T, Streamed> columns_of(const destination<T, Streamed>& to, std::size_t c,
                                    std::size_t k) {
  return {to.to.block(0, c, to.to.rows(), k), to.cast, to.first_index + c,
          to.index_stride != 0 ? to.index_stride : to.to.cols()};
}
// An operand moved left by c columns: its column 0 is op's column c.
template <class T, along Kind>
operand<T, Kind> from_column(operand<T, Kind> op, std::size_t c) {
  if (op.data != nullptr) op.data += c * op.col_step;
  return op;
}
inline operand<affine> from_column(operand<affine> op, std::size_t c) {
  op.f.offset += op.f.col * static_cast<float>(c);
  return op;
}

// Whether the row loop encodes blocks of T two at a time, in order (lane_store::store_in_order):
// bf16 on AVX2's 8 lanes, where the encoding's shuffles and NaN test cost less per two blocks, and
// on 16 lanes with AVX512-BF16, one vcvtne2ps2bf16 per two blocks (see vector_encoder::in_order).
// (uses_bf16_instruction, simd/convert_vector.hpp, where the vector encoders are compiled.)
#if defined(__AVX512BF16__)
inline constexpr std::size_t bf16_instruction_lanes = 16;
#else
inline constexpr std::size_t bf16_instruction_lanes = 0;  // none
#endif
template <class T, class D>
constexpr bool two_blocks_in_order = std::is_same_v<T, bf16> &&
                                     (hn::MaxLanes(D()) == 8 ||
                                      hn::MaxLanes(D()) == bf16_instruction_lanes);

// The output side of the row loop: blocks of fp32 lanes encoded into row r of `to`. The rounding
// mode is chosen per block, at run time (a branch that always goes the same way): each row loop
// is compiled once per path, not once per mode, which keeps the engine's code (and its compile
// time) a third of what it would be. bf16 and fp16, whose nearest-even blocks test the cast's
// saturation and MXCSR.DAZ, take a fourth encoder for the usual cast, nearest even and plain()
// (vector_encoder), chosen by one branch where there were three: on a 2-core Intel Xeon with AMX,
// layernorm bf16 1576 x 768 1.04 times as fast, rmsnorm and softmax bf16 1.01-1.02
// (CONTRIBUTING.md, stop 63).
template <class T, class D, bool Streamed = false>
class lane_store {
 public:
  // Inlined, like every member: a lane_store whose address reached a call would count as escaped,
  // and gcc would read its fields from memory again after every vector store.
  HWY_INLINE lane_store(D d, const destination<T, Streamed>& to)
      : to_(to.to),
        cast_(to.cast),
        first_index_(to.first_index),
        index_stride_(to.index_stride != 0 ? to.index_stride : to.to.cols()),
        key_(random_key::from(cast_.seed, cast_.stream)),
        encoders_(make_encoders(d, cast_)) {
    plain_ = is_plain(encoders_, cast_);
  }

  // Lanes c, c + 1, ... of row r.
  HWY_INLINE void store(D d, hn::Vec<D> x, std::size_t r, std::size_t c) const {
    encode(d, x, to_.data() + r * to_.stride() + c, index(r, c));
  }
  // Two blocks from c on, interleaved (bf16; see map_rows).
  HWY_INLINE void store_interleaved([[maybe_unused]] hn::Vec<D> even,
                                    [[maybe_unused]] hn::Vec<D> odd, [[maybe_unused]] std::size_t r,
                                    [[maybe_unused]] std::size_t c) const {
#if defined(TILEKERN_CONVERT_AVX2)
    if constexpr (std::is_same_v<T, bf16> && hn::MaxLanes(D()) > 1) {
      auto* out = storage_of(to_.data() + r * to_.stride() + c);
      with_encoder([&](const auto& encoder) TILEKERN_INLINE_LAMBDA {
        encoder.interleaved(even, odd, out, index(r, c));
      });
    }
#endif
  }
  // Two blocks from c on, in order, encoded together (two_blocks_in_order:
  // vector_encoder::in_order).
  HWY_INLINE void store_in_order([[maybe_unused]] hn::Vec<D> first,
                                 [[maybe_unused]] hn::Vec<D> second, [[maybe_unused]] std::size_t r,
                                 [[maybe_unused]] std::size_t c) const {
#if defined(TILEKERN_CONVERT_AVX2)
    if constexpr (two_blocks_in_order<T, D>) {
      auto* out = storage_of(to_.data() + r * to_.stride() + c);
      with_encoder([&](const auto& encoder) TILEKERN_INLINE_LAMBDA {
        encoder.in_order(first, second, out, index(r, c));
      });
    }
#endif
  }
  // Row r.
  HWY_INLINE T* row(std::size_t r) const {
    return to_.data() + r * to_.stride();
  }
  // Lanes c..c+n-1 of a float row, by a masked store.
  HWY_INLINE void store_masked(D d, hn::Vec<D> x, std::size_t r, std::size_t c,
                               std::size_t n) const {
    hn::BlendedStore(x, hn::FirstN(d, n), d, row(r) + c);
  }
  // The first n < lanes of them.
  HWY_INLINE void store_tail(D d, hn::Vec<D> x, std::size_t r, std::size_t c, std::size_t n) const {
    if constexpr (!std::is_same_v<T, no_output>) {
      // Streamed: not reached (map_rows streams whole lines), but aligned for the encoder's
      // non-temporal stores all the same.
      alignas(Streamed ? 64 : alignof(T)) T staged[hn::MaxLanes(D())] = {};
      encode(d, x, staged, index(r, c));
      std::copy_n(staged, n, to_.data() + r * to_.stride() + c);
    }
  }

 private:
  std::uint64_t index(std::size_t r, std::size_t c) const {
    return first_index_ + r * index_stride_ + c;
  }

  HWY_INLINE void encode(D d, hn::Vec<D> x, T* out, std::uint64_t index) const {
    if constexpr (std::is_same_v<T, no_output>) {
      return;
    } else if constexpr (std::is_same_v<T, float>) {
      if constexpr (Streamed && hn::MaxLanes(D()) >= 4) {
        hn::Stream(x, d, out);  // a whole vector, aligned (map_rows checks the rows)
      } else {
        hn::StoreU(x, d, out);
      }
    } else if constexpr (hn::MaxLanes(D()) == 1) {
      const bool stochastic = cast_.round == rounding::stochastic;
      const std::uint32_t random = stochastic ? random_bits(key_, index) : 0;
      *out = T::from(hn::GetLane(x), cast_.round, cast_.on_overflow, random);
    } else {
#if defined(TILEKERN_CONVERT_AVX2)
      with_encoder([&](const auto& encoder)
                       TILEKERN_INLINE_LAMBDA { encoder(x, storage_of(out), index); });
#endif
    }
  }

#if defined(TILEKERN_CONVERT_AVX2)
  // body(encoder) with the encoder of the cast's rounding mode, each case inlined with its mode
  // fixed. gcc 12 keeps the choice inside the row loop, once per vector, so the default mode is
  // tested first and alone: one compare and branch, where the switch took two before it (bf16
  // 1576x768 layernorm, rmsnorm and softmax 3-5% faster).
  template <class Body>
  HWY_INLINE void with_encoder(Body body) const {
    if constexpr (plain_encoder) {
      if (plain_) [[likely]]
        return body(std::get<3>(encoders_));
    }
    if (cast_.round == rounding::nearest_even) [[likely]]
      return body(std::get<0>(encoders_));
    switch (cast_.round) {
      case rounding::stochastic:
        return body(std::get<2>(encoders_));
      case rounding::toward_zero:
        return body(std::get<1>(encoders_));
      case rounding::nearest_even:
        break;
    }
    body(std::get<0>(encoders_));
  }
#endif

  static auto make_encoders([[maybe_unused]] D d, [[maybe_unused]] const cast_options& cast) {
#if defined(TILEKERN_CONVERT_AVX2)
    if constexpr (minifloat_format<T> && hn::MaxLanes(D()) > 1) {
      const auto modes = std::tuple(vector_encoder<T, D, rounding::nearest_even, Streamed>(d, cast),
                                    vector_encoder<T, D, rounding::toward_zero, Streamed>(d, cast),
                                    vector_encoder<T, D, rounding::stochastic, Streamed>(d, cast));
      if constexpr (plain_encoder) {
        return std::tuple_cat(
            modes,
            std::tuple(vector_encoder<T, D, rounding::nearest_even, Streamed, true>(d, cast)));
      } else {
        return modes;
      }
    } else {
      return 0;
    }
#else
    return 0;
#endif
  }

#if defined(TILEKERN_CONVERT_AVX2)
  static constexpr bool plain_encoder =
      (std::is_same_v<T, bf16> || std::is_same_v<T, fp16>)&&hn::MaxLanes(D()) > 1;
#else
  static constexpr bool plain_encoder = false;
#endif
  static bool is_plain([[maybe_unused]] const auto& encoders,
                       [[maybe_unused]] const cast_options& cast) {
    if constexpr (plain_encoder) {
      return cast.round == rounding::nearest_even && std::get<0>(encoders).plain();
    }
    return false;
  }

  view<T> to_;
  cast_options cast_;
  std::uint64_t first_index_;
  std::uint64_t index_stride_;
  random_key key_;
  bool plain_ = false;  // the cast is nearest even and plain(): encoder 3 (before the encoders,
                        // whose alignment would pad a bool after them to 64 bytes)
  decltype(make_encoders(D(), cast_options())) encoders_;
};

// One fp32 value per row of a destination with `rows` rows: a column (rows x 1, any stride) or a
// contiguous row of `rows` elements (a span). Throws shape_error naming the argument otherwise.
struct column_out {
  float* data;
  std::size_t step;
  float& operator[](std::size_t r) const { return data[r * step]; }
};
inline column_out resolve_column(const char* function, const char* argument, view<float> out,
                                 std::size_t rows) {
  if (out.rows() == rows && out.cols() == 1) return {out.data(), out.stride()};
  if (out.rows() == 1 && out.cols() == rows) return {out.data(), 1};
  detail::throw_shape_error([&] {
    return std::string(function) + ": " + argument + " is " + shape_text(out.rows(), out.cols()) +
           ", expected " + shape_text(rows, 1) + " (one value per row)";
  });
}

// How lanes combine in a reduction, and what an empty lane holds.
enum class combine : std::uint8_t { sum, max, min };

template <combine Op, class D>
HWY_INLINE hn::Vec<D> identity_lanes(D d) {
  if constexpr (Op == combine::sum) return hn::Zero(d);
  if constexpr (Op == combine::max) return hn::Set(d, -std::numeric_limits<float>::infinity());
  if constexpr (Op == combine::min) return hn::Set(d, std::numeric_limits<float>::infinity());
}
// v held in a register, where the compiler cannot see into it: the load that gave it is not folded
// into each operation that takes it, and what computed it is not fused with what takes it. On
// x86's vector targets only (Highway's emulated ones keep their lanes in arrays).
template <class V>
HWY_INLINE void in_register([[maybe_unused]] V& v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  asm("" : "+v"(v.raw));
#endif
}

// v, computed before anything that uses it (in_register), so that a product in v is rounded on its
// own and never fused with the addition that takes it. gcc fuses a * b + c into one FMA
// (-ffp-contract=fast, its default) where its tuning says so, and with AMD's (-march=native, Zen 4)
// it left FMA chains of 256-bit vectors unfused in some row loops and not in others: layernorm's
// sums of squares on the AVX2 path then differed in their last bit between the row passes and the
// block passes (CONTRIBUTING.md, stop 57). 512-bit vectors are left to the compiler: gcc 12 fuses
// their chains under every tuning, and the barrier there cost layernorm and rmsnorm bf16 1576 x 768
// 8% on that machine (tests/kernels/same_bits.hpp would show a compiler that fuses them unevenly).
template <class V>
HWY_INLINE V unfused(V v) {
  if constexpr (sizeof(v.raw) < 64) in_register(v);
  return v;
}

// A term a * b of a sum, which the sum adds in one fused multiply-add (hn::MulAdd: rounded once,
// in every row loop, block and tail, whatever the compiler's tuning, where the target has FMA).
// f of a row or column sum may return one, alone or in a pair: layernorm's and rmsnorm's squares.
// A plain a * b is a vector like any other: below 512 bits it is rounded and then added
// (unfused, above); in 512 bits gcc 12 fuses it into the sum in the blocks but not in the tail,
// where the tail's blend comes between them. On the AVX2 path (Zen 4) the squares fused made
// layernorm and rmsnorm 1576 x 768 0.99-1.04 times as fast (medians; layernorm bf16 1.03-1.04,
// fp32 0.99-1.03: CONTRIBUTING.md, stop 58).
template <class V>
struct product {
  product(V a, V b) : a(a), b(b) {}  // clang 14 takes no aggregate's initialisers in parentheses
  V a, b;
};
template <class T>
inline constexpr bool is_product = false;
template <class V>
inline constexpr bool is_product<product<V>> = true;

// max and min propagate NaN through `nan`, which the caller folds in at the end (x86's max and
// min return their second operand when either is NaN, so a NaN would otherwise be dropped). A sum
// adds b as computed (unfused), or a product in one fused multiply-add, so that every row loop
// rounds the same way.
template <combine Op, class D, class B>
HWY_INLINE hn::Vec<D> combine_lanes(hn::Vec<D> a, const B& b) {
  if constexpr (is_product<B>) {
    static_assert(Op == combine::sum, "tilekern engine: products are terms of sums only");
    return hn::MulAdd(b.a, b.b, a);
  } else if constexpr (Op == combine::sum) {
    return a + unfused(b);
  } else if constexpr (Op == combine::max) {
    return hn::Max(a, b);
  } else {
    return hn::Min(a, b);
  }
}
// A term x of a reduction where `valid`, and elsewhere what adds nothing: the identity, or for a
// product zero factors.
template <combine Op, class D, class M, class X>
HWY_INLINE X where_valid(D d, M valid, const X& x) {
  if constexpr (is_product<X>) {
    return {hn::IfThenElseZero(valid, x.a), hn::IfThenElseZero(valid, x.b)};
  } else {
    return hn::IfThenElse(valid, x, identity_lanes<Op>(d));
  }
}
template <combine Op, class D>
HWY_INLINE float reduce_lanes(D d, hn::Vec<D> x) {
  if constexpr (Op == combine::sum) return hn::GetLane(hn::SumOfLanes(d, x));
  if constexpr (Op == combine::max) return hn::GetLane(hn::MaxOfLanes(d, x));
  if constexpr (Op == combine::min) return hn::GetLane(hn::MinOfLanes(d, x));
}

// The partial results of a row reduction: element c of a row is reduced into partial c % 64 in
// element order, on every path (4 vectors of 16 lanes, 8 of 8, or 64 single lanes), and the 64
// partials are then combined pairwise. So a sum of n terms has relative error at most
// (ceil(n / 64) + 6) u of the sum of magnitudes on every path, and the independent chains keep
// the adds from waiting on each other. Two sums of one pass (f returns a pair) share the
// registers: 32 partials each, (ceil(n / 32) + 5) u.
inline constexpr std::size_t reduce_slots = 64;

// How many sums a reduction's f gives: one per vector it returns, one or a std::pair of two.
template <class Result>
inline constexpr std::size_t sums_of = 1;
template <class A, class B>
inline constexpr std::size_t sums_of<std::pair<A, B>> = 2;

// Calls g(k, v) for each vector v of a result of f, k = 0, 1, ...
template <class Result, class G>
HWY_INLINE void each_sum(const Result& x, G&& g) {
  if constexpr (sums_of<Result> == 1) {
    g(std::size_t{0}, x);
  } else {
    g(std::size_t{0}, x.first);
    g(std::size_t{1}, x.second);
  }
}

// The partial results of a reduction are indexed by chain with compile-time indices where there
// are at most 8 chains (the vector paths), so that they stay in registers: gcc 12 kept them in
// memory, stored after every block, when one index into them was a run-time value. The scalar
// path's 32 or 64 chains take run-time indices.
template <std::size_t Chains>
inline constexpr bool static_chains = Chains <= 8;

// body(chain) for chain = 0, 1, ..., Chains - 1 (std::integral_constant where static_chains).
template <std::size_t Chains, class Body>
HWY_INLINE void for_chains(Body&& body) {
  if constexpr (static_chains<Chains>) {
    [&]<std::size_t... K>(std::index_sequence<K...>) TILEKERN_INLINE_LAMBDA {
      (body(std::integral_constant<std::size_t, K>()), ...);
    }
    (std::make_index_sequence<Chains>());
  } else {
    for (std::size_t chain = 0; chain < Chains; ++chain) body(chain);
  }
}

// body(chain) with a run-time chain made a compile-time one where static_chains (a compile-time
// chain passes as it is).
template <std::size_t Chains, class Chain, class Body>
HWY_INLINE void at_chain(Chain chain, Body&& body) {
  if constexpr (static_chains<Chains> && std::is_same_v<Chain, std::size_t>) {
    for_chains<Chains>([&](auto k) TILEKERN_INLINE_LAMBDA {
      if (chain == k) body(k);
    });
  } else {
    body(chain);
  }
}

// acc[0] = the pairwise combination of the chains: acc[i] with acc[i + Half] for i < Half, then
// the same with Half / 2, down to 1. With compile-time indices where static_chains, as acc's
// initialisation, so that gcc 12 keeps acc in registers: with run-time ones (loops over i and
// Half) it kept acc in memory and stored every partial again after each block of the row loop
// (one 512-bit store per 16 lanes; layernorm fp32 1576x768 took 4% longer on Zen 4).
template <combine Op, class D, std::size_t Half, std::size_t Chains>
HWY_INLINE void combine_halves(hn::Vec<D> (&acc)[Chains]) {
  if constexpr (Half > 0) {
    for_chains<Half>([&](auto i) TILEKERN_INLINE_LAMBDA {
      acc[i] = combine_lanes<Op, D>(acc[i], acc[i + Half]);
    });
    combine_halves<Op, D, Half / 2>(acc);
  }
}

// How many blocks a block function F takes at once on lanes D: F::blocks<D> where F has it, else 1.
// A reduction's whole rounds (map_row) then call f with each source as a std::array of that many
// blocks, the blocks of as many chains in turn, and f returns as many results, which are stored
// and summed as one block's are: the same bits. The blocks after the last whole round, and the
// rounds of bf16 (interleaved sources, or pairs of blocks into a bf16 destination), take one block
// a call. Written a step over all its blocks before the next (each_block), a long computation
// (softmax's exponentials) gives the processor independent work in program order, where one
// block's steps in a row each wait for the one before: a first-generation Zen, whose scheduler
// sees only a few blocks' operations at a time, ran softmax 1.2 times as fast so
// (softmax_exponential_blocks, kernels/softmax.hpp; CONTRIBUTING.md, stop 80).
template <class F, class D>
constexpr std::size_t blocks_at_once = 1;
template <class F, class D>
requires requires {
  std::remove_cvref_t<F>::template blocks<D>;
}
constexpr std::size_t blocks_at_once<F, D> = std::remove_cvref_t<F>::template blocks<D>;

// {step(0), step(1), ..., step(B - 1)}: one step of a block function's arithmetic over each of its
// B blocks (blocks_at_once).
template <std::size_t B, class Step>
HWY_INLINE auto each_block(Step&& step) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) TILEKERN_INLINE_LAMBDA {
    return std::array{step(I)...};
  }
  (std::make_index_sequence<B>());
}

// Whether map_rows may run interleaved blocks on lanes D: two blocks at a time, lane j of the
// first holding element 2j, of the second element 2j + 1 (widen_bf16_interleaved, which widens
// bf16 without shuffles); f treats lanes independently, so the results are the same. Two cases:
// - a bf16 destination without a reduction, every operand it loads bf16 or float. A float operand
//   qualifies at run time (interleavable): when it is the same row for every r, read from a copy
//   in the interleaved order (with_interleaved_rows), or one value per row; a float operand that
//   varies by row would need two shuffles per vector, and keeps the blocks in order.
// - a reduction without a destination, every operand it loads bf16: whole rounds of `slots`
//   elements go by pairs of blocks, the even elements of a pair into one chain and the odd into
//   the next, so that each partial still sums one element of every round, in element order (see
//   map_rows).
template <bool Floats, class... Operands>
constexpr bool interleaved_loads =
    ((Operands::kind == along::constant || std::is_same_v<typename Operands::element, bf16> ||
      (Floats && std::is_same_v<typename Operands::element, float>)) &&
     ...);
template <bool Reduce, class D, class Out, class... Operands>
constexpr bool interleaved_rows = hn::MaxLanes(D()) > 1 &&
                                  (Reduce ? std::is_same_v<Out, no_output> &&
                                                interleaved_loads<false, Operands...>
                                          : std::is_same_v<Out, bf16> &&
                                                interleaved_loads<true, Operands...>);

// Whether `operand` can be loaded in interleaved blocks (see interleaved_rows).
template <class Op>
bool interleavable(const Op& operand) {
  if constexpr (Op::kind != along::constant && std::is_same_v<typename Op::element, float>) {
    return operand.row_step == 0 || operand.col_step == 0;
  }
  return true;
}

// body(operands...), each float operand that is one row for every r read from a copy in the order
// interleaved blocks load it: for the pair of blocks from c on, elements c, c + 2, ... (the first
// block's lanes), then c + 1, c + 3, ...; the elements after the last pair stay in order.
template <class D, class Body, class... Operands>
void with_interleaved_rows(D, std::size_t cols, Body&& body, const Operands&... operands) {
  constexpr std::size_t lanes = hn::MaxLanes(D());
  const auto copy = [cols](const auto& operand) {
    using Op = std::remove_cvref_t<decltype(operand)>;
    std::unique_ptr<float[]> ordered;
    if constexpr (Op::kind != along::constant && std::is_same_v<typename Op::element, float>) {
      if (operand.row_step == 0 && operand.col_step == 1) {
        ordered = std::make_unique<float[]>(cols);
        std::size_t c = 0;
        for (; c + 2 * lanes <= cols; c += 2 * lanes) {
          for (std::size_t j = 0; j < lanes; ++j) {
            ordered[c + j] = operand.data[c + 2 * j];
            ordered[c + lanes + j] = operand.data[c + 2 * j + 1];
          }
        }
        std::copy(operand.data + c, operand.data + cols, ordered.get() + c);
      }
    }
    return ordered;
  };
  const auto reading = [](auto operand, const std::unique_ptr<float[]>& ordered) {
    if constexpr (std::is_same_v<typename decltype(operand)::element, float>) {
      if (ordered) operand.data = ordered.get();
    }
    return operand;
  };
  const auto copies = std::make_tuple(copy(operands)...);
  std::apply([&](const auto&... ordered) { body(reading(operands, ordered)...); }, copies);
}

// How many floats from `row` on come before the first that starts a 64-byte line, on 16 lanes
// (whose blocks are lines); 0 where the row starts there or is not aligned to 4 bytes. Always 0
// on 8 lanes: there only every other block of a row 16 bytes past a line (as glibc's malloc gives
// large buffers) crosses a line, and the head cost more than it saved. On a first-generation Zen
// (which takes 32 bytes as two 16-byte halves, none across a line), layernorm fp32 64 x 768 (in
// L2), rows 16 bytes past a line, took 0.92 of the time without it and rmsnorm 0.90; skipped at
// run time, the head's code still in the row loop, layernorm took 0.98 (CONTRIBUTING.md, stop 83).
template <class D>
std::size_t line_head(const float* row) {
  if constexpr (hn::MaxLanes(D()) * sizeof(float) < 64) {
    return 0;
  } else {
    const auto address = reinterpret_cast<std::uintptr_t>(row);
    if (address % sizeof(float) != 0) return 0;
    return (64 - address % 64) % 64 / sizeof(float);
  }
}

// Whether map_rows reads and writes the partial blocks of a row (its head, up to its first line,
// on 16 lanes: line_head; and its tail) with masked loads and stores, not through staging: an
// elementwise operation (no reduction) from float rows and constants into a float destination,
// on 8 or 16 lanes, not streamed (streamed rows start on a line).
template <class Op>
constexpr bool float_or_constant =
    Op::kind == along::constant || std::is_same_v<typename Op::element, float>;
template <bool Reduce, bool Streamed, class Out, class D, class... Operands>
constexpr bool masked_ends = !Reduce && !Streamed && std::is_same_v<Out, float> &&
                             hn::MaxLanes(D()) > 1 && (float_or_constant<Operands> && ...);

// Column k of a reduction's sums: a column_out, or one of an array of two.
inline column_out sum_column(const column_out& sums, std::size_t) {
  return sums;
}
inline column_out sum_column(const std::array<column_out, 2>& sums, std::size_t k) {
  return sums[k];
}

// What a row loop prefetches into L1 as it goes: nothing, or, with each whole block from column c
// on, the lanes from element c of `row`: to read (reduce_then_map_rows: the next row it reduces,
// while it maps this one) or to write (the row it will map, while it reduces it; none where `row`
// is null). None on one lane (the scalar path), which would prefetch every element.
// A row to read may be taken in 2^shift streams `stride` elements apart (prefetch_pages), block i
// prefetching lanes i >> shift of stream i mod 2^shift, so that the blocks of a row visit its
// streams in turn; shift 0 (the default) is the row in order, the lanes from element c. (A branch,
// not one formula for both: computed for shift 0 too, the address cost layernorm bf16 1576 x 768
// 11-13% on an Intel Xeon with AMX, whose loop is bound by its vector ports.)
// map_row calls `at` once with each whole block of a row, in column order (in a reduction, blocks
// from column 0 on), before the block's loads; softmax's products_along, which stores a block of
// another row with each, counts on that (kernels/softmax.hpp).
struct no_prefetch {
  template <class D>
  HWY_INLINE void at(D, std::size_t) const {}
};
template <class T>
struct prefetch_row {
  const T* row;
  std::size_t shift = 0, stride = 0;
  template <class D>
  HWY_INLINE void at(D, std::size_t c) const {
    constexpr std::size_t lanes = hn::MaxLanes(D());
    if constexpr (lanes > 1) {
      if (shift == 0) [[likely]] {
        hwy::Prefetch(row + c);
      } else {
        const std::size_t block = c / lanes, streams = std::size_t{1} << shift;
        hwy::Prefetch(row + (block & (streams - 1)) * stride + (block >> shift) * lanes);
      }
    }
  }
};
template <class T>
prefetch_row(const T*) -> prefetch_row<T>;  // clang 14 deduces no aggregate's arguments

// Rows of `cols` elements to prefetch a page at a time in turn (pages(row) for each row): one
// stream for each whole 4 KiB of a row, up to 8 (a power of two), so that the next row's pages are
// fetched from memory together rather than one after another; one stream (the row in order) below
// 8 KiB, and on AMD processors. On a 2-core Intel Xeon with AMX, layernorm and rmsnorm at
// 4096 x 4096 (rows of 16 KiB in fp32, four streams; 8 KiB in bf16, two) ran 1.07-1.31 times as
// fast so (reduce_then_map_rows below; CONTRIBUTING.md, stop 61). On a 2-core AMD EPYC (Zen 5) the
// streams' addresses cost more than they gained (stop 71, with long_row_lead below). Made once
// per call: the vendor looked up for each row cost layernorm fp32 1576 x 768 5% there.
template <class T>
class prefetch_pages {
 public:
  explicit prefetch_pages(std::size_t cols) {
    const std::size_t pages = std::clamp<std::size_t>(cols * sizeof(T) / 4096, 1, 8);
    if (!detected_cpu_features().amd) shift_ = std::bit_width(pages) - 1;  // pages, rounded down
    stride_ = cols >> shift_;
  }
  prefetch_row<T> operator()(const T* row) const { return {row, shift_, stride_}; }

 private:
  std::size_t shift_ = 0, stride_ = 0;  // 2^shift_ streams, stride_ elements apart
};
// How many steps of rows ahead reduce_then_map_rows prefetches while it maps, for rows of
// `row_bytes` of its first reduce operand: two where a row has 8 KiB or more on AMD processors,
// else one (the next rows to sum).
// On a 2-core AMD EPYC (Zen 5), one stream (prefetch_pages) and two steps ahead took rmsnorm's row
// passes at 4096 x 4096, streamed, 0.74-0.95 of the time of the block passes (one stream and one
// step 0.88-0.97: norm_row_passes in kernels/rmsnorm.hpp); layernorm and rmsnorm at 512 x 4096,
// 1024 x 2048 and 256 x 8192 (not streamed) took 0.85-1.00 of their time with the page streams
// and one step (a timing program, two libraries in one process, medians of 7 to 9 rounds;
// CONTRIBUTING.md, stop 71).
inline std::size_t long_row_lead(std::size_t row_bytes) {
  return row_bytes >= (std::size_t{8} << 10) && detected_cpu_features().amd ? 2 : 1;
}
// Both prefetches with each block (a group of two rows, map_row, prefetching the next two; and
// softmax's products: kernels/softmax.hpp).
template <class A, class B>
struct prefetch_both {
  A a;
  B b;
  template <class D>
  HWY_INLINE void at(D d, std::size_t c) const {
    a.at(d, c);
    b.at(d, c);
  }
};
template <class A, class B>
prefetch_both(A, B) -> prefetch_both<A, B>;  // clang 14 deduces no aggregate's arguments
template <class T>
struct prefetch_write {
  T* row;
  template <class D>
  HWY_INLINE void at(D, std::size_t c) const {
    if constexpr (hn::MaxLanes(D()) > 1) {
      if (row != nullptr) __builtin_prefetch(row + c, 1, 3);
    }
  }
};
template <class T>
prefetch_write(T*) -> prefetch_write<T>;

// A group of rows (map_row) shares the rows of its sources after the first that are `either`
// operands: where each of them is one row for every r (shared_rows), as a layernorm's gamma and
// beta are, the compiler then sees one row for the whole group and loads each block of it once.
// The first source, x in the kernels, has a row of its own in each row of the group. Only maps
// that also take a value per row (a `constant` operand: a normalisation's statistics) group rows,
// so that the engine's other maps keep one row loop each (with every map grouped, vector_test.cpp
// took over 10.4 GB of memory to compile, where it had taken 9.5, and CI compiles two at once).
template <class First, class... Rest>
constexpr bool groups_rows = ((Rest::kind == along::either) || ...) &&
                             ((Rest::kind == along::constant) || ...);
template <class First, class... Rest>
bool shared_rows(const First&, const Rest&... rest) {
  const auto one_row = [](const auto& source) {
    if constexpr (std::remove_cvref_t<decltype(source)>::kind == along::either) {
      return source.row_step == 0;
    }
    return true;
  };
  return (one_row(rest) && ...);
}
// A shared source's cursor in a group of rows: each block it loads passes an empty asm, which the
// compiler takes for one value in every row of the group and keeps in a register. Without it gcc
// 12 loaded the block again for each row wherever an FMA overwrote the register that held it (x86's
// FMAs overwrite an operand). Not on Highway's scalar and emulated targets, whose lanes are not
// vector registers.
template <class Cursor>
struct shared_cursor : Cursor {
  template <class V>
  HWY_INLINE static V kept(V v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
    asm("" : "+v"(v.raw));
#endif
    return v;
  }
  template <class D>
  HWY_INLINE hn::Vec<D> load(D d, std::size_t c) const {
    return kept(Cursor::load(d, c));
  }
  template <class D>
  HWY_INLINE hn::Vec<D> load_tail(D d, std::size_t c, std::size_t n) const {
    return kept(Cursor::load_tail(d, c, n));
  }
  template <class D>
  HWY_INLINE hn::Vec<D> load_masked(D d, std::size_t c, std::size_t n) const {
    return kept(Cursor::load_masked(d, c, n));
  }
  template <std::size_t K, class D>
  HWY_INLINE hn::Vec<D> load_interleaved(D d, std::size_t c) const {
    return kept(Cursor::template load_interleaved<K>(d, c));
  }
};
// Whether source J of a group of Rows rows (map_row) is one row for the whole group: an `either`
// operand after the first.
template <std::size_t Rows, std::size_t J, class... Sources>
constexpr bool shared_in_group =
    Rows > 1 && J > 0 && std::tuple_element_t<J, std::tuple<Sources...>>::kind == along::either;
// A source's cursor of row r in a group from row r0: row r0's, shared, where the group shares it.
template <bool Shared, class D, class Source>
HWY_INLINE auto group_cursor(D d, const Source& source, std::size_t r0, std::size_t r) {
  if constexpr (Shared) {
    return shared_cursor<decltype(source.at_row(d, r0))>{source.at_row(d, r0)};
  } else {
    return source.at_row(d, r);
  }
}
template <std::size_t Rows, class D, std::size_t... J, class... Sources>
HWY_INLINE auto group_cursors(D d, std::size_t r0, std::size_t r, std::index_sequence<J...>,
                              const Sources&... sources) {
  return std::make_tuple(group_cursor<shared_in_group<Rows, J, Sources...>>(d, sources, r0, r)...);
}

// Row r of map_rows (below) on lanes D, with the blocks map_rows chose (Interleave, std::true_type
// where interleaved blocks apply), prefetching `ahead` with each whole block. Always inlined into
// its row loop, so that each row loop is compiled as one function; so are its per-block lambdas
// (TILEKERN_INLINE_LAMBDA), which gcc 12 at -O2 left as calls.
// Rows > 1 (no reduction; shared_rows): rows r to r + Rows - 1 together, each block of every row
// computed before any is stored, so that the blocks of the operands that are one row for all (a
// layernorm's gamma and beta) are loaded once for the group, where each row loaded them again.
template <bool Reduce, combine Op, std::size_t Rows = 1, class D, class Interleave, class Out,
          bool Streamed, class Sums, class F, class Ahead, class... Sources>
HWY_INLINE void map_row(D d, Interleave, const lane_store<Out, D, Streamed>& out,
                        [[maybe_unused]] const Sums& sums, F& f, const Ahead& ahead, std::size_t r,
                        std::size_t cols, const Sources&... sources) {
  static_assert(Rows == 1 || !Reduce, "tilekern engine: a group of rows has no reduction");
  using result = decltype(f(d, (static_cast<void>(sources), hn::Zero(d))...));
  constexpr std::size_t values = sums_of<result>;
  constexpr std::size_t columns = std::is_same_v<Sums, column_out> ? 1 : 2;
  static_assert(values == columns || !Reduce, "tilekern engine: one column per sum of f");
  static_assert(values == 1 || (Op == combine::sum && std::is_same_v<Out, no_output>),
                "tilekern engine: f returns a pair only for two sums of one pass");
  static_assert(!is_product<result> || (Reduce && std::is_same_v<Out, no_output>),
                "tilekern engine: f returns a product only for a sum");
  constexpr bool stored = values == 1 && !is_product<result>;
  // Two sums share the registers of one: reduce_slots / values partials each.
  constexpr std::size_t lanes = hn::MaxLanes(D()), slots = reduce_slots / values,
                        chains = slots / lanes;
  // A reduction's rounds take the blocks of `batch` chains by one call of f (blocks_at_once).
  constexpr std::size_t batch = blocks_at_once<F, D>;
  static_assert(chains % batch == 0, "tilekern engine: a round is whole batches of blocks");
  const auto cursors = [&]<std::size_t... K>(std::index_sequence<K...>) TILEKERN_INLINE_LAMBDA {
    return std::array{
        group_cursors<Rows>(d, r, r + K, std::index_sequence_for<Sources...>(), sources...)...};
  }
  (std::make_index_sequence<Rows>());
  // Row r + k's lanes (k 0 where Rows is 1). Every row reads a shared source through row r's
  // cursor: gcc 12 then loads each block once. With one cursor a row, built alike, it did not
  // always see that they point to the same row: in the bench's fp32 layernorm (the row passes) it
  // loaded gamma and beta again for the second row, and took about 1.2 times as long.
  const auto compute_row = [&](std::size_t k, auto load) TILEKERN_INLINE_LAMBDA {
    return [&]<std::size_t... J>(std::index_sequence<J...>) TILEKERN_INLINE_LAMBDA {
      return f(d, load(std::get<J>(cursors[shared_in_group<Rows, J, Sources...> ? 0 : k]))...);
    }
    (std::index_sequence_for<Sources...>());
  };
  const auto compute = [&](auto load) TILEKERN_INLINE_LAMBDA { return compute_row(0, load); };
  // store(k, x...) for each row r + k of the group, x... its lanes by each of `load...`, every
  // row's computed before the first is stored.
  const auto each_row = [&](auto store, auto... load) TILEKERN_INLINE_LAMBDA {
    using row_lanes = std::array<result, sizeof...(load)>;
    const auto lanes_of = [&](std::size_t k)
                              TILEKERN_INLINE_LAMBDA { return row_lanes{compute_row(k, load)...}; };
    const auto store_row = [&]<std::size_t... J>(std::size_t k, const row_lanes& x,
                                                 std::index_sequence<J...>) TILEKERN_INLINE_LAMBDA {
      store(k, x[J]...);
    };
    [&]<std::size_t... K>(std::index_sequence<K...>) TILEKERN_INLINE_LAMBDA {
      const std::array<row_lanes, Rows> x{lanes_of(K)...};
      (store_row(K, x[K], std::make_index_sequence<sizeof...(load)>()), ...);
    }
    (std::make_index_sequence<Rows>());
  };
  // Reductions keep `slots` partial results per sum, held in `chains` vectors: element c goes
  // to slot c % slots, lane c % lanes of chain (c / lanes) % chains, on every path; except that
  // interleaved rounds (below) permute the slots within each round. Either way each slot sums
  // one element of every whole round of `slots` and at most one of the rest, in element order.
  [[maybe_unused]] hn::Vec<D> acc[values][chains];
  for (auto& sum : acc)
    for_chains<chains>([&](auto j) TILEKERN_INLINE_LAMBDA { sum[j] = identity_lanes<Op>(d); });
  [[maybe_unused]] auto nan = hn::MaskFromVec(hn::Zero(d));
  const auto reduce = [&](const result& x, auto chain) TILEKERN_INLINE_LAMBDA {
    if constexpr (Reduce) {
      at_chain<chains>(chain, [&](auto j) TILEKERN_INLINE_LAMBDA {
        each_sum(x, [&](std::size_t k, auto v)
                        TILEKERN_INLINE_LAMBDA { acc[k][j] = combine_lanes<Op, D>(acc[k][j], v); });
        // x86's max and min give their second operand where either is NaN, so the new
        // partial is NaN exactly where x is. Testing it rather than x keeps gcc from reading
        // a block of a plain row twice (into the max and into the test).
        if constexpr (Op != combine::sum) nan = hn::Or(nan, hn::IsNaN(acc[0][j]));
      });
    }
  };
  const auto block = [&](std::size_t c, auto chain) TILEKERN_INLINE_LAMBDA {
    ahead.at(d, c);
    const auto load = [&](const auto& cursor) { return cursor.load(d, c); };
    if constexpr (Reduce) {
      const auto x = compute(load);
      if constexpr (stored) out.store(d, x, r, c);
      reduce(x, chain);
    } else if constexpr (stored) {
      each_row([&](std::size_t k, const auto& x)
                   TILEKERN_INLINE_LAMBDA { out.store(d, x, r + k, c); },
               load);
    }
  };
  // Blocks K = 0, 1, ... from `at` on, summed into chains First + K, by one call of f
  // (blocks_at_once).
  const auto blocks = [&]<std::size_t First, std::size_t... K>(
      std::size_t at, std::index_sequence<K...>) TILEKERN_INLINE_LAMBDA {
    (ahead.at(d, at + K * lanes), ...);
    const auto batch_of = [&](const auto& cursor) TILEKERN_INLINE_LAMBDA {
      return std::array{cursor.load(d, at + K * lanes)...};
    };
    const auto x = std::apply([&](const auto&... cursor)
                                  TILEKERN_INLINE_LAMBDA { return f(d, batch_of(cursor)...); },
                              cursors[0]);
    if constexpr (stored) (out.store(d, x[K], r, at + K * lanes), ...);
    (reduce(x[K], std::integral_constant<std::size_t, First + K>()), ...);
  };
  std::size_t c = 0;
  constexpr bool masked = masked_ends<Reduce, Streamed, Out, D, Sources...>;
  if constexpr (masked) {
    // A row that starts off a line at the same place as the first row it reads (as large
    // buffers from glibc's malloc do, 16 bytes past one; or in place): on 16 lanes, its first
    // elements as one block, so that every whole block after them is loaded and stored within a
    // line, not split across two (on 8 lanes none: line_head). Each element's result is the
    // same in any block; a reduction's partial sums would not be.
    // A group whose rows start at different places within a line takes them one at a time.
    const auto head_of = [&](std::size_t k) TILEKERN_INLINE_LAMBDA {
      const float* first = nullptr;
      std::apply([&](const auto&... cursor) { ((first = first ? first : cursor.row), ...); },
                 cursors[k]);
      const std::size_t head = line_head<D>(out.row(r + k));
      return first != nullptr && line_head<D>(first) == head ? head : 0;
    };
    const std::size_t head = head_of(0);
    if constexpr (Rows > 1) {
      for (std::size_t k = 1; k < Rows; ++k) {
        if (head_of(k) != head) {
          for (k = 0; k < Rows; ++k)
            map_row<Reduce, Op>(d, Interleave(), out, sums, f, ahead, r + k, cols, sources...);
          return;
        }
      }
    }
    if (head > 0 && head + lanes <= cols) {
      each_row([&](std::size_t k, const auto& x)
                   TILEKERN_INLINE_LAMBDA { out.store_masked(d, x, r + k, 0, head); },
               [&](const auto& cursor) { return cursor.load_masked(d, 0, head); });
      c = head;
    }
  }
  if constexpr (Interleave::value && Reduce) {
    // Rounds of `slots` elements by pairs of blocks: lane j of the pair from `at` on holds
    // element at + 2j in the first block, summed into `chain`, and at + 2j + 1 in the
    // second, summed into the next chain.
    for (; c + slots <= cols; c += slots) {
      for_chains<chains / 2>([&](auto pair) TILEKERN_INLINE_LAMBDA {
        constexpr std::size_t chain = 2 * decltype(pair)::value;
        const std::size_t at = c + chain * lanes;
        ahead.at(d, at);
        ahead.at(d, at + lanes);
        reduce(
            compute([&](const auto& cursor) { return cursor.template load_interleaved<0>(d, at); }),
            std::integral_constant<std::size_t, chain>());
        reduce(
            compute([&](const auto& cursor) { return cursor.template load_interleaved<1>(d, at); }),
            std::integral_constant<std::size_t, chain + 1>());
      });
    }
  } else if constexpr (Interleave::value) {
    for (; c + 2 * lanes <= cols; c += 2 * lanes) {
      ahead.at(d, c);
      ahead.at(d, c + lanes);
      each_row([&](std::size_t k, const auto& even, const auto& odd)
                   TILEKERN_INLINE_LAMBDA { out.store_interleaved(even, odd, r + k, c); },
               [&](const auto& cursor) { return cursor.template load_interleaved<0>(d, c); },
               [&](const auto& cursor) { return cursor.template load_interleaved<1>(d, c); });
    }
  }
  // Rounds of `chains` blocks, block j of a round summed into chain j; bf16 (two_blocks_in_order)
  // encodes them two at a time, in order. Without either, the loop below takes every block.
  constexpr bool pairs = two_blocks_in_order<Out, D> && !Interleave::value;
  if constexpr ((Reduce && !Interleave::value) || pairs) {
    for (; c + slots <= cols; c += slots) {
      if constexpr (pairs) {
        for_chains<chains / 2>([&](auto pair) TILEKERN_INLINE_LAMBDA {
          constexpr std::size_t chain = 2 * decltype(pair)::value;
          const std::size_t at = c + chain * lanes;
          ahead.at(d, at);
          ahead.at(d, at + lanes);
          const auto first = [&](const auto& cursor) { return cursor.load(d, at); };
          const auto second = [&](const auto& cursor) { return cursor.load(d, at + lanes); };
          if constexpr (Reduce) {
            const auto x = compute(first), y = compute(second);
            out.store_in_order(x, y, r, at);
            reduce(x, std::integral_constant<std::size_t, chain>());
            reduce(y, std::integral_constant<std::size_t, chain + 1>());
          } else {
            each_row([&](std::size_t k, const auto& x, const auto& y)
                         TILEKERN_INLINE_LAMBDA { out.store_in_order(x, y, r + k, at); },
                     first, second);
          }
        });
      } else if constexpr (batch > 1) {
        for_chains<chains / batch>([&](auto group) TILEKERN_INLINE_LAMBDA {
          constexpr std::size_t first = decltype(group)::value * batch;
          blocks.template operator()<first>(c + first * lanes, std::make_index_sequence<batch>());
        });
      } else {
        for_chains<chains>([&](auto chain)
                               TILEKERN_INLINE_LAMBDA { block(c + chain * lanes, chain); });
      }
    }
  }
  std::size_t chain = 0;  // a reduction's rounds end at a multiple of slots
  for (; c + lanes <= cols; c += lanes, ++chain) block(c, chain);
  if constexpr (masked) {
    if (c < cols) {
      const std::size_t n = cols - c;
      each_row([&](std::size_t k, const auto& x)
                   TILEKERN_INLINE_LAMBDA { out.store_masked(d, x, r + k, c, n); },
               [&](const auto& cursor) { return cursor.load_masked(d, c, n); });
    }
  } else if (c < cols) {
    const std::size_t n = cols - c;
    const auto tail = [&](const auto& cursor) { return cursor.load_tail(d, c, n); };
    if constexpr (!Reduce && stored) {
      each_row([&](std::size_t k, const auto& x)
                   TILEKERN_INLINE_LAMBDA { out.store_tail(d, x, r + k, c, n); },
               tail);
    }
    if constexpr (Reduce) {
      const auto x = compute(tail);
      if constexpr (stored) out.store_tail(d, x, r, c, n);
      const auto valid = hn::FirstN(d, n);
      at_chain<chains>(chain, [&](auto j) TILEKERN_INLINE_LAMBDA {
        each_sum(x, [&](std::size_t k, auto v) TILEKERN_INLINE_LAMBDA {
          acc[k][j] = combine_lanes<Op, D>(acc[k][j], where_valid<Op>(d, valid, v));
        });
      });
      if constexpr (Op != combine::sum) nan = hn::Or(nan, hn::And(valid, hn::IsNaN(x)));
    }
  }
  if constexpr (Reduce) {
    for (std::size_t k = 0; k < values; ++k) {
      combine_halves<Op, D, chains / 2>(acc[k]);
      float value = reduce_lanes<Op>(d, acc[k][0]);
      if constexpr (Op != combine::sum) {
        if (!hn::AllFalse(d, nan)) value = std::numeric_limits<float>::quiet_NaN();
      }
      sum_column(sums, k)[r] = value;
    }
  }
}

// The rows of a streamed destination `to`, split at their lines (split_at_lines), outside their
// lines: map(d, f, r, sources...) maps row r's columns before them and after them, with plain
// stores, element by element in order. (The row passes map the lines themselves with their blocks
// and non-temporal stores.) Made once per call, its two stores with it: on a 2-core AMD EPYC
// (Zen 5) at 4096 x 4096, x and y 16 bytes past a line, the ends built for every row took a
// quarter of layernorm bf16's row passes (skipped, 0.72-0.75 of the time); made once, layernorm
// bf16 by rows took 0.88-0.89 of the time, fp32 0.84-0.91, rmsnorm 0.83-0.84 and 0.91 (stop 71).
// softmax's row passes take their ends so too (kernels/softmax.hpp; stop 75).
template <class Out, class D>
class row_ends {
 public:
  template <bool Streamed>
  HWY_INLINE row_ends(D d, const destination<Out, Streamed>& to, const line_split& split)
      : head_(d, columns_of(plain(to), 0, split.head)),
        tail_(d, columns_of(plain(to), split.head + split.lines, split.tail)),
        head_cols_(split.head),
        tail_from_(split.head + split.lines),
        tail_cols_(split.tail) {}

  template <class F, class... Sources>
  HWY_INLINE void map(D d, F& f, std::size_t r, const Sources&... sources) const {
    if (head_cols_ > 0) {
      map_row<false, combine::sum>(d, std::false_type(), head_, column_out{nullptr, 0}, f,
                                   no_prefetch(), r, head_cols_, sources...);
    }
    if (tail_cols_ > 0) {
      map_row<false, combine::sum>(d, std::false_type(), tail_, column_out{nullptr, 0}, f,
                                   no_prefetch(), r, tail_cols_,
                                   from_column(sources, tail_from_)...);
    }
  }

 private:
  lane_store<Out, D> head_, tail_;
  std::size_t head_cols_, tail_from_, tail_cols_;
};
// A streamed destination's row_ends; none for a plain one, which has no ends (and so does not
// build their stores).
struct no_row_ends {};
template <class D, class Out, bool Streamed>
HWY_INLINE auto streamed_row_ends(D d, const destination<Out, Streamed>& to,
                                  const line_split& split) {
  if constexpr (Streamed) {
    return row_ends<Out, D>(d, to, split);
  } else {
    return no_row_ends{};
  }
}
// body(interleave, sources...) on lanes d: interleave is std::true_type where map_rows' interleaved
// blocks apply (interleaved_rows), the float sources then read from copies in that order. A
// compile-time flag, so that each row loop is compiled for exactly the blocks it runs: a run-time
// one made gcc 12 spill registers in the activation loops (silu and gelu_tanh bf16 9-14% slower).
template <bool Reduce, class Out, class D, class Body, class... Sources>
void with_blocks(D d, std::size_t cols, Body&& body, const Sources&... sources) {
  if constexpr (interleaved_rows<Reduce, D, Out, Sources...>) {
    constexpr bool loads_no_float = ((Sources::kind == along::constant ||
                                      !std::is_same_v<typename Sources::element, float>)&&...);
    if constexpr (loads_no_float) {
      return body(std::true_type(), sources...);
    } else if ((interleavable(sources) && ...)) {
      return with_interleaved_rows(
          d, cols, [&](const auto&... reordered) { body(std::true_type(), reordered...); },
          sources...);
    }
  }
  body(std::false_type(), sources...);
}

// The row loop of every elementwise operation: for each element (r, c) of `to`,
//   x = f(d, lanes of each operand),  to(r, c) = x rounded,  and with Reduce,
//   sums[r] = the reduction Op of x over the row (fp32, before rounding).
// f takes the descriptor and one hn::Vec per operand and returns one hn::Vec; or, for two sums
// of one pass (Op sum, `to` no_output), a std::pair of them, and sums is a std::array of two
// columns, sums[k][r] the sum of the k-th.
// Without Reduce, where the operands after the first include a value per row and one row for every
// r (groups_rows, shared_rows: a layernorm's statistics, gamma and beta), rows go two at a time
// (map_row with Rows 2), each block of the shared rows loaded once for both. A core that loads one
// 64-byte vector a cycle spends about a quarter of the map on them (a hand loop of layernorm's bf16
// map: 7 cycles per 32 lanes, 5.1 without them): on a 2-core AMD EPYC (Zen 5) layernorm bf16
// 1576 x 768 ran 1.22 times as fast so (two libraries in one process; the bench 1.15), rmsnorm
// bf16 1.12. Four rows at a time ran 0.88 times as fast as two (CONTRIBUTING.md, stop 67). The bits
// are the same.
template <bool Reduce, combine Op, class Out, bool Streamed, class Sums, class F, class... Operands>
void map_rows(const destination<Out, Streamed>& to, const Sums& sums, F&& f,
              const Operands&... operands) {
  const std::size_t rows = to.to.rows(), cols = to.to.cols();
  if constexpr (Streamed) {
    if (!whole_lines(to.to)) return map_rows<Reduce, Op>(plain(to), sums, f, operands...);
  }
  if (rows * cols == 0) {
    if constexpr (Reduce) {
      const float empty = Op == combine::sum   ? 0.0f
                          : Op == combine::max ? -std::numeric_limits<float>::infinity()
                                               : std::numeric_limits<float>::infinity();
      for (std::size_t k = 0; k < (std::is_same_v<Sums, column_out> ? 1 : 2); ++k) {
        for (std::size_t r = 0; r < rows; ++r) sum_column(sums, k)[r] = empty;
      }
    }
    return;
  }
  const auto rows_of = [&](auto d, auto interleave, const auto&... sources) {
    using D = decltype(d);
    // The loop bound as a local of this loop: a vector store may alias anything whose address is
    // taken, and the enclosing function's are (this lambda captures them), so they would be read
    // again after every block.
    const std::size_t cols = to.to.cols();
    const lane_store<Out, D, Streamed> out(d, to);
    std::size_t r = 0;
    // Pairs of rows where operands after the first are one row for all (map_row).
    if constexpr (!Reduce && groups_rows<std::remove_cvref_t<decltype(sources)>...>) {
      if (shared_rows(sources...)) {
        for (; r + 2 <= rows; r += 2) {
          map_row<Reduce, Op, 2>(d, interleave, out, sums, f, no_prefetch(), r, cols, sources...);
        }
      }
    }
    for (; r < rows; ++r) {
      map_row<Reduce, Op>(d, interleave, out, sums, f, no_prefetch(), r, cols, sources...);
    }
  };
  with_repeat_scratch(
      cols,
      [&](const auto&... sources) {
        visit_lanes([&](auto d) {
          with_blocks<Reduce, Out>(
              d, cols, [&](auto interleave, const auto&... s) { rows_of(d, interleave, s...); },
              sources...);
        });
      },
      operands...);
  if constexpr (Streamed) hwy::FlushStream();  // its stores ordered before whatever follows
}

// Two passes of map_rows over each row in turn, so that the second reads the row from L1, where
// the first left it: for each row r,
//   the row sums of reduce_f over reduce_operands into sums (map_rows with Reduce, no
//   destination), for its rows r * chunks to r * chunks + chunks - 1: reduce_operands hold each
//   row of `to` as `chunks` rows of cols / chunks elements (one row where chunks is 1),
//   then, if keep(r), row r of `to` = map_f over map_operands (map_rows without Reduce).
// keep(r) may write what map_operands read of row r (a column of per-row values): each row's
// operands are read when the row begins. The bits are map_rows' on every row: the same row
// bodies, blocks and sums.
// While it maps row r, it prefetches the next row's first reduce operand: `cols` elements from the
// start of row r + 1's first chunk-row, which are all of row r + 1 where its chunk-rows lie one
// after another (as layernorm's and rmsnorm's do), and otherwise lie within the operand's span.
// So that row's reduction reads from L1 what it would otherwise wait for: on a 2-core Intel Xeon
// (Cascade Lake), layernorm and rmsnorm in fp32 and bf16 ran 1.07-1.21 times as fast so at
// 4096 x 4096 and 1.04-1.28 at 1576 x 768 (medians of 5 to 7 rounds alternating the two). A row of
// 8 KiB or more it prefetches by its pages in turn (prefetch_pages): layernorm fp32 at 4096 x 4096
// on a 2-core Intel Xeon with AMX 1.13 times as fast again, rmsnorm 1.31. (On AMD processors: in
// order, and two steps ahead, long_row_lead.)
// While it reduces row r, it prefetches row r of `to` for writing (one prefetch a block), so that
// the map's stores find their lines in L1, where a row of `to` and one of the first reduce operand
// fit in write_ahead_bytes together (half of a 32 KiB L1). The bench on the same machine, two sets
// of 4 runs alternating the two: 1576 x 768 fp32 layernorm 1.08-1.09 times as fast (1.06-1.10x
// oneDNN before, 1.15-1.26x after), rmsnorm 1.04-1.10; bf16 within the noise. A hand layernorm loop
// at 4096 x 4096 fp32 (32 KiB of the two rows) ran 3-10% slower with it: the owned lines push the
// row the map reads out of L1.
// Where two rows of both fit in write_ahead_bytes (rows of up to 8 KiB of the first reduce operand
// and of `to` together), row r + 1's sums run between keep(r) and row r's map, not after it:
// keep's statistics end in a chain of fp64 divisions and a square root that the map waits for,
// and the sums, which don't, run while it completes. On a 2-core Intel Xeon with AVX512-BF16
// (Emerald Rapids class), the bench built with and without it, three rounds alternating the two:
// 1576 x 768 bf16 layernorm 1.07 times as fast, rmsnorm 1.20; fp32 0.99 (0.96-1.01 over seven
// rounds), bound by memory.
// Larger rows keep the first order: at 4096 x 4096 bf16 (16 KiB of a row of both) the second ran
// 0.86-0.94 times as fast (three rounds), the L1 then holding two rows of both and the next row's
// prefetch.
// Where the map's sources share rows as map_rows groups them (a layernorm's gamma and beta), rows
// go two at a time instead: the sums of both rows (each followed by its keep where the lag is 0),
// then their map as one group (map_row with Rows 2), prefetching the next two rows; the lag is
// then two rows, where four rows of both fit in write_ahead_bytes. A row that keep leaves is not
// mapped, and its partner is mapped alone. The bits are the same. On a 2-core AMD EPYC (Zen 5),
// two libraries in one process, medians of 21 rounds, time with pairs over time without: at
// 1576 x 768 within the noise (layernorm fp32 0.97-1.04, bf16 with the row passes, as Intel
// processors take them, 0.89-1.06), on longer rows faster (512 x 4096: layernorm fp32 0.90-0.94,
// bf16 0.79-0.85; rmsnorm bf16 0.82; CONTRIBUTING.md, stops 68 and 69).
// A Streamed destination is written with non-temporal stores over the whole 64-byte lines of each
// row, and with plain stores before and after them (split_at_lines: each row's map in three
// pieces, the lines' with the map's blocks, the others element by element in order); it is not
// prefetched for writing. What it gains: see stream_threshold().
inline constexpr std::size_t write_ahead_bytes = std::size_t{16} << 10;
template <class Out, bool Streamed, class Sums, class ReduceF, class... ReduceOperands, class Keep,
          class MapF, class... MapOperands>
void reduce_then_map_rows(const destination<Out, Streamed>& to, const Sums& sums,
                          ReduceF&& reduce_f, const std::tuple<ReduceOperands...>& reduce_operands,
                          Keep&& keep, MapF&& map_f, const std::tuple<MapOperands...>& map_operands,
                          std::size_t chunks) {
  const std::size_t rows = to.to.rows(), cols = to.to.cols(), chunk_cols = cols / chunks;
  if (rows * cols == 0) return;
  // The columns the map's blocks take, from `start` on; with Streamed, the lines (see above).
  const line_split split = Streamed ? split_at_lines(to.to) : line_split{0, cols, 0};
  if (Streamed && split.lines == 0) {
    return reduce_then_map_rows(plain(to), sums, reduce_f, reduce_operands, keep, map_f,
                                map_operands, chunks);
  }
  const std::size_t start = split.head, blocked = split.lines;
  const auto with_scratch = [](std::size_t n, const auto& operands, auto&& body) {
    std::apply([&](const auto&... each) { with_repeat_scratch(n, body, each...); }, operands);
  };
  with_scratch(chunk_cols, reduce_operands, [&](const auto&... reduce_sources) {
    with_scratch(cols, map_operands, [&](const auto&... map_sources) {
      visit_lanes([&](auto d) {
        with_blocks<true, no_output>(
            d, chunk_cols,
            [&](auto reduce_blocks, const auto&... reducing) {
              with_blocks<false, Out>(
                  d, blocked,
                  [&](auto map_blocks, const auto&... mapping) {
                    // Locals, as in map_rows: not captured by any lambda, so that no vector store
                    // can alias them and gcc keeps them in registers.
                    const std::size_t cols = to.to.cols(), chunk_cols = cols / chunks;
                    const lane_store<Out, decltype(d), Streamed> out(
                        d, columns_of(to, start, blocked));
                    const lane_store<no_output, decltype(d)> nothing(
                        d, destination<no_output>{
                               view<no_output>(nullptr, rows * chunks, chunk_cols)});
                    const auto* const first = std::get<0>(reduce_operands).data;
                    const std::size_t row_step = chunks * std::get<0>(reduce_operands).row_step;
                    const std::size_t row_bytes = cols * (sizeof(*first) + sizeof(Out));
                    const bool write_ahead = !Streamed && row_bytes <= write_ahead_bytes;
                    // Rows go `step` at a time (two where the map's sources share rows, as in
                    // map_rows): rows r to r + step - 1 are summed, then rows r - lag on mapped,
                    // lag = step where two steps fit in write_ahead_bytes (see above).
                    constexpr bool grouped = groups_rows<std::remove_cvref_t<decltype(mapping)>...>;
                    std::size_t step = 1;
                    if constexpr (grouped) step = shared_rows(mapping...) ? 2 : 1;
                    const std::size_t lag = 2 * step * row_bytes <= write_ahead_bytes ? step : 0;
                    const std::size_t lead = long_row_lead(cols * sizeof(*first)) * step;
                    const prefetch_pages<std::remove_cvref_t<decltype(*first)>> pages(cols);
                    const auto ends = streamed_row_ends(d, to, split);
                    for (std::size_t r = 0; r < rows + lag; r += step) {
                      const std::size_t m = r - lag;  // the first row mapped, where r >= lag
                      bool map[2] = {false, false};
                      for (std::size_t j = 0; j < step; ++j) {
                        if (lag > 0 && r >= lag && m + j < rows) map[j] = keep(m + j);
                        if (r + j >= rows) continue;
                        for (std::size_t k = (r + j) * chunks; k < (r + j + 1) * chunks; ++k) {
                          const prefetch_write mine{
                              write_ahead ? &to.to(r + j, (k - (r + j) * chunks) * chunk_cols)
                                          : nullptr};
                          map_row<true, combine::sum>(d, reduce_blocks, nothing, sums, reduce_f,
                                                      mine, k, chunk_cols, reducing...);
                        }
                        if (lag == 0) map[j] = keep(r + j);
                      }
                      // While it maps, it prefetches the rows `lead` on: the next rows to sum,
                      // or the ones after them (long_row_lead).
                      const auto next = pages(first + std::min(r + lead, rows - 1) * row_step);
                      if constexpr (grouped) {
                        if (map[0] && map[1]) {
                          const auto after =
                              pages(first + std::min(r + lead + 1, rows - 1) * row_step);
                          map_row<false, combine::sum, 2>(
                              d, map_blocks, out, column_out{nullptr, 0}, map_f,
                              prefetch_both{next, after}, m, blocked, mapping...);
                          map[0] = map[1] = false;
                          if constexpr (Streamed) {
                            ends.map(d, map_f, m, map_sources...);
                            ends.map(d, map_f, m + 1, map_sources...);
                          }
                        }
                      }
                      for (std::size_t j = 0; j < step; ++j) {
                        if (!map[j]) continue;
                        map_row<false, combine::sum>(d, map_blocks, out, column_out{nullptr, 0},
                                                     map_f, next, m + j, blocked, mapping...);
                        if constexpr (Streamed) {
                          ends.map(d, map_f, m + j, map_sources...);
                        }
                      }
                    }
                    if constexpr (Streamed) hwy::FlushStream();  // as map_rows
                  },
                  from_column(map_sources, start)...);
            },
            reduce_sources...);
      });
    });
  });
}

// The column loop: acc(0, c) = Op(acc(0, c), f(d, lanes of each operand at (r, c))) for r = 0,
// 1, ..., rows - 1 in order, in fp32; acc is one row of `cols` floats and keeps what it held.
// max and min propagate NaN. accs holds one acc per vector f returns: one, or two for a
// std::pair (two column sums of one pass).
template <combine Op, std::size_t N, class F, class... Operands>
void reduce_cols(const std::array<float*, N>& accs, std::size_t rows, std::size_t cols, F&& f,
                 const Operands&... operands) {
  if (rows * cols == 0) return;
  const auto rows_of = [&](auto d, const auto&... sources) {
    using D = decltype(d);
    using result = decltype(f(d, (static_cast<void>(sources), hn::Zero(d))...));
    static_assert(sums_of<result> == N, "tilekern engine: one accumulator row per sum of f");
    static_assert(N == 1 || Op == combine::sum, "tilekern engine: pairs of sums only");
    constexpr std::size_t lanes = hn::MaxLanes(D());
    const auto fold = [&](hn::Vec<D> a, const auto& x) TILEKERN_INLINE_LAMBDA {
      if constexpr (Op == combine::sum) {
        return combine_lanes<Op, D>(a, x);
      } else {
        const auto nan = hn::Or(hn::IsNaN(a), hn::IsNaN(x));
        return hn::IfThenElse(nan, a + x, combine_lanes<Op, D>(a, x));
      }
    };
    for (std::size_t r = 0; r < rows; ++r) {
      const auto cursors = std::make_tuple(sources.at_row(d, r)...);
      const auto compute = [&](auto load) TILEKERN_INLINE_LAMBDA {
        return std::apply([&](const auto&... cursor)
                              TILEKERN_INLINE_LAMBDA { return f(d, load(cursor)...); },
                          cursors);
      };
      std::size_t c = 0;
      for (; c + lanes <= cols; c += lanes) {
        const auto x = compute([&](const auto& cursor) { return cursor.load(d, c); });
        each_sum(x, [&](std::size_t k, auto v) TILEKERN_INLINE_LAMBDA {
          hn::StoreU(fold(hn::LoadU(d, accs[k] + c), v), d, accs[k] + c);
        });
      }
      if (c < cols) {
        const std::size_t n = cols - c;
        const auto x = compute([&](const auto& cursor) { return cursor.load_tail(d, c, n); });
        each_sum(x, [&](std::size_t k, auto v) {
          float staged[lanes] = {};
          std::copy_n(accs[k] + c, n, staged);
          hn::StoreU(fold(hn::LoadU(d, staged), v), d, staged);
          std::copy_n(staged, n, accs[k] + c);
        });
      }
    }
  };
  with_repeat_scratch(
      cols, [&](const auto&... sources) { visit_lanes([&](auto d) { rows_of(d, sources...); }); },
      operands...);
}

}  // namespace detail
}  // namespace tilekern
