#pragma once
// The tensor engine: matrix products accumulated into fp32 (the NeuronCore's PSUM), built on the
// atoms of engine/atoms.hpp.
//
//   matmul(acc, a, b)        acc += a b        acc: M x N float (an accum tile or a view),
//   matmul_AtB(acc, a, b)    acc += a^T b      a and b: tiles or views of float or any tilekern
//   matmul_ABt(acc, a, b)    acc += a b^T      format, mixed; transposed(view) works too
//
// The NeuronCore's nc_matmul(stationary, moving) is matmul_AtB. Shapes of tiles are checked at
// compile time, views at run time (shape_error naming the operation, the argument and both sizes).
//
// How a product runs (the same machinery serves kernels/matmul.hpp, which blocks it for caches):
//   1. Operands are packed: A into groups of rows, k-major (for each k, the group's rows side by
//      side), B into panels of panel_width = 32 columns, k-major. Packing decodes each format
//      exactly (every format's values are fp32 values).
//   2. A register-blocked tile multiply (tile_multiply) runs over each group and panel: a group
//      of up to 14 rows times a panel of 32 columns, that is 28 zmm accumulators, 2 zmm of B and
//      a broadcast of A per k-step (avx512), one B load per 14 fused multiply-adds.
//
// Paths (active_isa()), each an atom:
//   compute::fp32         by default every product: bf16 and fp8 operands widened to fp32 exactly,
//                         fp16, tf32, floats; fp32 fma on 16 lanes (avx512), 8 (avx2) or 1
//                         (scalar)
//   compute::bf16_pairs   only when asked (TILEKERN_BF16_PAIRS=on, set_bf16_pairs), when both
//                         operands are formats whose values are all bf16 values (bf16 and every
//                         fp8 format): vdpbf16ps with AVX512-BF16 at avx512, elsewhere its AVX2
//                         emulation; k runs in pairs, odd K padded with a zero. Not the default:
//                         on the one AVX512-BF16 CPU measured (a Sapphire Rapids-class guest)
//                         vdpbf16ps does half the flops of fp32 fma, and bf16 x bf16 ran 1.6x
//                         faster widened to fp32 (CONTRIBUTING.md, Known gaps)
//   compute::fp32_decoding  fp32 for up to decoding_rows rows of A (kernels/matmul.hpp) when B is
//                         bf16 or fp8 (avx2 and up): B's codes are decoded in registers rather
//                         than widened in memory first; the same fmas in the same order, so the
//                         same bits as fp32
//
// Numerics. A product of two decoded operands is exact in fp32 when their significands fit in 24
// bits together (every pair of formats but those with a float operand) and it neither overflows
// nor underflows; with a float operand the fused multiply-add rounds product and sum together.
// Accumulation is fp32 in k order, one
// rounding per fused multiply-add, or two per bf16 pair (vdpbf16ps): an element of a product
// over K terms is within gamma(K) = K u / (1 - K u), u = 2^-24, of the exact sum, relative to
// sum |a_k b_k| (Higham, Accuracy and Stability, 3.1, which holds for any order of summation).
// The fp32 paths (scalar, avx2, avx512) give identical bits: the same fma in the same order. The
// bf16 pair path differs in the last bits, and reads bf16 subnormal inputs as zero and flushes
// subnormal sums to zero (vdpbf16ps ignores MXCSR), which adds at most K * 2^-126 absolute error;
// its emulation gives the instruction's bits but for subnormals, which it keeps.

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "tilekern/engine/atoms.hpp"
#include "tilekern/error.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/tile/tile.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/minifloat.hpp"

namespace tilekern::tensor {

// What the tensor engine multiplies: float or any tilekern format.
template <class T>
concept tensor_element =
    (std::is_same_v<std::remove_const_t<T>, float>) || minifloat_format<std::remove_const_t<T>>;

// Formats that run on bf16 pairs (types/minifloat.hpp).
using tilekern::exact_in_bf16;

// fp32_decoding is fp32 with B's panels of bf16 or fp8 codes decoded in registers rather than
// widened first (atoms::avx512_fp32_decoding, avx2_fp32_decoding): the same bits as fp32, for few
// rows of A (see multiply_group).
enum class compute : std::uint8_t { fp32, bf16_pairs, fp32_decoding };

// Columns of B in one packed panel: two zmm (avx512), four ymm (avx2) of fp32 accumulators.
inline constexpr std::size_t panel_width = 32;

constexpr std::size_t depth_of(compute kind) {
  return kind == compute::fp32 ? 1 : 2;
}

// The packed element of A for a compute kind: float, or a bf16 code.
template <compute Kind>
using operand_of = std::conditional_t<Kind == compute::bf16_pairs, std::uint16_t, float>;

// The path a product takes: the ISA level and the compute kind.
struct path {
  isa level = isa::scalar;
  compute kind = compute::fp32;
};

namespace detail {

// -1: as TILEKERN_BF16_PAIRS says; 0 off; 1 on.
inline std::atomic<int>& bf16_pairs_override() {
  static std::atomic<int> use{-1};
  return use;
}

// TILEKERN_BF16_PAIRS: unset or "auto", "on", "off".
inline int environment_bf16_pairs() {
  static const int use = [] {
    const char* text = std::getenv("TILEKERN_BF16_PAIRS");  // NOLINT(concurrency-mt-unsafe): once
    const std::string value = text == nullptr ? "" : text;
    if (value.empty() || value == "auto") return -1;
    if (value == "on" || value == "off") return value == "on" ? 1 : 0;
    throw std::invalid_argument("TILEKERN_BF16_PAIRS='" + value + "' is not one of auto, on, off");
  }();
  return use;
}

}  // namespace detail

// Overrides TILEKERN_BF16_PAIRS for the whole process: true on, false off, std::nullopt back to
// the environment.
inline void set_bf16_pairs(std::optional<bool> use) {
  detail::bf16_pairs_override().store(use ? static_cast<int>(*use) : -1);
}

// Whether vdpbf16ps can run now: built in (-march=native on a CPU with AVX512-BF16), on the CPU,
// and not capped below avx512.
inline bool bf16_instruction_available() {
#if defined(TILEKERN_HAVE_AVX512_BF16_ATOM)
  return active_isa() >= isa::avx512 && detected_cpu_features().avx512_bf16;
#else
  return false;
#endif
}

// Whether products of formats exact in bf16 run on bf16 pairs now. TILEKERN_BF16_PAIRS (or
// set_bf16_pairs) chooses:
//   off, auto or unset  never: the fp32 path is faster wherever it was measured (see the top)
//   on                  pairs on avx2 and above: vdpbf16ps where it can run
//                       (bf16_instruction_available()), elsewhere the emulated atom
//                       (atoms::avx2_bf16_emulated), so that the path is tested on any machine
inline bool bf16_pairs_available() {
  const int forced = detail::bf16_pairs_override().load(std::memory_order_relaxed);
  const int use = forced >= 0 ? forced : detail::environment_bf16_pairs();
  if (use != 1) return false;
  if (bf16_instruction_available()) return true;
#if defined(TILEKERN_CONVERT_AVX2)
  return active_isa() >= isa::avx2;
#else
  return false;
#endif
}

// Whether the bf16 pairs, when available, run emulated.
inline bool bf16_pairs_emulated() {
  return !bf16_instruction_available();
}

// The path for operands of formats A and B (after any precision policy's cast).
template <class A, class B>
path choose_path() {
  if (exact_in_bf16<A> && exact_in_bf16<B> && bf16_pairs_available()) {
    // vdpbf16ps on avx512, or its emulation by the avx2 atom.
    return {bf16_instruction_available() ? isa::avx512 : isa::avx2, compute::bf16_pairs};
  }
  return {active_isa(isa::avx512), compute::fp32};
}

namespace detail {

constexpr std::size_t round_up(std::size_t n, std::size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// op(X) for a view or a transposed view: element (i, k) is data[i * row_step + k * col_step].
template <class T>
struct strided {
  const T* data = nullptr;
  std::size_t rows = 0, cols = 0;
  std::size_t row_step = 0, col_step = 1;
};

template <class T>
strided<std::remove_const_t<T>> as_strided(view<T> of) {
  return {of.data(), of.rows(), of.cols(), of.stride(), 1};
}
template <class T>
strided<std::remove_const_t<T>> as_strided(transposed_view<T> of) {
  return {of.stored().data(), of.rows(), of.cols(), 1, of.stored().stride()};
}

// An aligned, growable scratch buffer; one per thread and use, so that no inner loop allocates.
class scratch {
 public:
  scratch() = default;
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  ~scratch() { release(); }

  template <class T>
  T* get(std::size_t count) {
    const std::size_t bytes = std::max<std::size_t>(count * sizeof(T), 64);
    if (bytes > bytes_) {
      release();
      data_ = ::operator new (bytes, std::align_val_t{64});
      bytes_ = bytes;
    }
    return static_cast<T*>(data_);
  }

 private:
  void release() {
    if (data_ != nullptr) ::operator delete (data_, std::align_val_t{64});
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Per-thread scratch buffers, kept between calls: 0-2 for the tile-level operation and packing,
// 3-8 for kernels/matmul.hpp.
inline scratch& thread_scratch(int which) {
  thread_local scratch buffers[9];
  return buffers[which];
}

// n elements of a line of op(X) (stride `step` apart) as fp32; Cast, if not void, is a format
// that float elements are rounded to first (nearest even), as a precision policy asks.
template <class Cast, class T>
void read_line(const T* from, std::size_t n, std::size_t step, float* to, float* spare) {
  if constexpr (std::is_same_v<T, float>) {
    if (step == 1) {
      std::copy_n(from, n, to);
    } else {
      for (std::size_t i = 0; i < n; ++i) to[i] = from[i * step];
    }
    if constexpr (!std::is_void_v<Cast>) {
      auto* rounded = reinterpret_cast<Cast*>(spare);  // Cast is at most 4 bytes
      convert(std::span<const float>(to, n), std::span<Cast>(rounded, n));
      convert(std::span<const Cast>(rounded, n), std::span<float>(to, n));
    }
  } else {
    if (step == 1) {
      convert(std::span<const T>(from, n), std::span<float>(to, n));
    } else {
      for (std::size_t i = 0; i < n; ++i) to[i] = from[i * step].to_float();
    }
  }
}

// The operand of `kind` that holds x exactly (a bf16 code holds the top half of fp32).
template <compute Kind>
operand_of<Kind> operand_from(float x) {
  if constexpr (Kind == compute::bf16_pairs) {
    return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x) >> 16);
  } else {
    return x;
  }
}

// ---------------------------------------------------------------------------------------------
// Groups of A's rows. Each path has a largest group (its register block) and smaller ones for
// the remainder, so that no row is padded: m rows are m / largest groups of `largest` and the
// binary digits of the rest (13 = 8 + 4 + 1 on avx512).

constexpr std::size_t largest_group(isa level) {
  return level >= isa::avx512 ? 14 : level == isa::avx2 ? 6 : 4;
}

// The rows of the group that starts with `remaining` rows left, for groups of at most `largest`
// rows (largest_group, or less).
constexpr std::size_t group_rows(std::size_t remaining, std::size_t largest) {
  if (remaining >= largest) return largest;
  return std::bit_floor(remaining);
}

// Packs rows [first, first + m) of op(A) (all of its K columns) in groups of at most `largest`
// rows (group_rows): group after group, each k-major
// with `rows` operands (times depth) per k-step. K is padded with zeros to a multiple of depth.
// `line` holds max(K, 14) floats, `spare` as many.
template <compute Kind, class Cast, class T>
void pack_rows(const strided<T>& a, std::size_t first, std::size_t m, std::size_t largest,
               operand_of<Kind>* out, float* line, float* spare) {
  constexpr std::size_t depth = depth_of(Kind);
  const std::size_t k = a.cols, padded_k = round_up(k, depth);
  for (std::size_t r = first; r < first + m;) {
    const std::size_t rows = group_rows(first + m - r, largest);
    // Element (i, kk) of the group goes to out[(kk / depth) * rows * depth + i * depth + kk %
    // depth].
    const auto place = [&](std::size_t i, std::size_t kk, float x) {
      out[(kk / depth) * rows * depth + i * depth + kk % depth] = operand_from<Kind>(x);
    };
    if (a.col_step == 1) {  // rows of op(A) are contiguous: read each
      for (std::size_t i = 0; i < rows; ++i) {
        read_line<Cast>(a.data + (r + i) * a.row_step, k, 1, line, spare);
        for (std::size_t kk = 0; kk < k; ++kk) place(i, kk, line[kk]);
      }
    } else {  // columns are: read the group's part of each
      for (std::size_t kk = 0; kk < k; ++kk) {
        read_line<Cast>(a.data + r * a.row_step + kk * a.col_step, rows, a.row_step, line, spare);
        for (std::size_t i = 0; i < rows; ++i) place(i, kk, line[i]);
      }
    }
    for (std::size_t kk = k; kk < padded_k; ++kk) {
      for (std::size_t i = 0; i < rows; ++i) place(i, kk, 0.0f);
    }
    out += rows * padded_k;
    r += rows;
  }
}

// ---------------------------------------------------------------------------------------------
// Panels of B: panel_width columns each, k-major. In the `pairs` layout (formats exact in bf16)
// each k-step holds two consecutive k per column side by side, as vdpbf16ps reads them:
//   element (kk, j) of a panel at (kk / 2) * 2 * panel_width + 2 * j + kk % 2;
// otherwise (kk, j) is at kk * panel_width + j. Columns past N and k past K are zero codes.

// Packs op(B) (K x N) into panels of Stored codes (B's format, or the precision policy's cast of
// float); `out` holds packed_panel_size<Stored>(K) elements per panel.
template <class Stored>
inline constexpr bool in_pairs = exact_in_bf16<Stored>;

template <class Stored>
constexpr std::size_t packed_panel_size(std::size_t k) {
  return round_up(k, in_pairs<Stored> ? 2 : 1) * panel_width;
}

template <class Stored, class T>
void pack_panels(const strided<T>& b, Stored* out, int threads = 1) {
  constexpr bool pairs = in_pairs<Stored>;
  const std::size_t k = b.rows, n = b.cols;
  const std::size_t panel_size = packed_panel_size<Stored>(k);
  const std::size_t panels = round_up(n, panel_width) / panel_width;
  const std::size_t longest = std::max(k, panel_width);
  const auto pack_panel = [&](std::size_t p) {
    const std::size_t first = p * panel_width, width = std::min(panel_width, n - first);
    Stored* panel = out + p * panel_size;
    std::fill_n(panel, panel_size, Stored{});
    // Three lines: fp32 for conversions, and two of codes (no wider than a float).
    auto* line = thread_scratch(2).get<float>(3 * longest);
    auto* codes = reinterpret_cast<Stored*>(line + longest);
    auto* next = reinterpret_cast<Stored*>(line + 2 * longest);
    // `count` elements of op(B), `step` apart, as Stored codes (copied when T is Stored).
    const auto read = [&](const T* from, std::size_t count, std::size_t step, Stored* to) {
      if constexpr (std::is_same_v<T, Stored>) {
        if (step == 1) {
          std::copy_n(from, count, to);
        } else {
          for (std::size_t i = 0; i < count; ++i) to[i] = from[i * step];
        }
      } else if constexpr (std::is_same_v<Stored, float>) {
        read_line<void>(from, count, step, to, nullptr);
      } else {
        read_line<void>(from, count, step, line, nullptr);
        convert(std::span<const float>(line, count), std::span<Stored>(to, count));
      }
    };
    if constexpr (pairs) {
      if (b.col_step == 1) {  // rows of op(B) are contiguous: interleave two at a time
        using code = typename Stored::storage_type;
        using pair = std::conditional_t<sizeof(code) == 1, std::uint16_t, std::uint32_t>;
        const auto* even = reinterpret_cast<const code*>(codes);
        const auto* odd = reinterpret_cast<const code*>(next);
        for (std::size_t kk = 0; kk < k; kk += 2) {
          read(b.data + kk * b.row_step + first, width, 1, codes);
          if (kk + 1 < k) {
            read(b.data + (kk + 1) * b.row_step + first, width, 1, next);
          } else {
            std::fill_n(next, width, Stored{});
          }
          auto* step = reinterpret_cast<pair*>(panel + kk * panel_width);
          for (std::size_t j = 0; j < width; ++j) {
            step[j] = static_cast<pair>(even[j] | static_cast<pair>(odd[j]) << 8 * sizeof(code));
          }
        }
        return;
      }
    }
    if (b.col_step == 1) {
      for (std::size_t kk = 0; kk < k; ++kk) {
        read(b.data + kk * b.row_step + first, width, 1, panel + kk * panel_width);
      }
    } else {  // columns of op(B) are contiguous (B^T)
      for (std::size_t j = 0; j < width; ++j) {
        read(b.data + (first + j) * b.col_step, k, b.row_step, codes);
        for (std::size_t kk = 0; kk < k; ++kk) {
          panel[pairs ? (kk & ~std::size_t{1}) * panel_width + 2 * j + (kk & 1)
                      : kk * panel_width + j] = codes[kk];
        }
      }
    }
  };
#if defined(_OPENMP)
  // Panels are independent: large matrices pack on `threads` threads (the result is the same).
  if (threads > 1 && panels > 1 && panels * panel_size * sizeof(Stored) >= (std::size_t{1} << 20) &&
      omp_in_parallel() == 0) {
    const auto count = static_cast<std::ptrdiff_t>(panels);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::ptrdiff_t p = 0; p < count; ++p) pack_panel(static_cast<std::size_t>(p));
    return;
  }
#endif
  (void)threads;
  for (std::size_t p = 0; p < panels; ++p) pack_panel(p);
}

// Steps [first_step, first_step + steps) of a panel of Stored codes as operands of Kind, when
// they differ (fp8 codes to bf16 codes; anything to fp32, deinterleaving pairs). first_step is
// even when pairs meet fp32; `line` holds (steps * depth + 1) * panel_width floats.
template <compute Kind, class Stored>
void widen_panel(const Stored* panel, std::size_t first_step, std::size_t steps,
                 operand_of<Kind>* out, float* line) {
  constexpr bool pairs = in_pairs<Stored>;
  constexpr std::size_t depth = depth_of(Kind);
  // Kind's steps cover steps * depth values of k; in Stored's layout they start here:
  const std::size_t first_k = first_step * depth;
  const std::size_t count = round_up(steps * depth, pairs ? 2 : 1) * panel_width;
  const Stored* from = panel + first_k * panel_width;
  if constexpr (Kind == compute::bf16_pairs && sizeof(Stored) == 1) {  // fp8: by table
    widen(std::span<const Stored>(from, count),
          std::span<bf16>(reinterpret_cast<bf16*>(out), count));
    return;
  }
  if constexpr (std::is_same_v<Stored, float>) {
    std::copy_n(from, count, line);
  } else {
    convert(std::span<const Stored>(from, count), std::span<float>(line, count));
  }
  if (Kind == compute::bf16_pairs || !pairs) {  // same layout
    for (std::size_t i = 0; i < count; ++i) out[i] = operand_from<Kind>(line[i]);
  } else {  // pairs to k-major
    for (std::size_t kk = 0; kk < steps; kk += 2) {
      for (std::size_t j = 0; j < panel_width; ++j) {
        out[kk * panel_width + j] = operand_from<Kind>(line[kk * panel_width + 2 * j]);
      }
      if (kk + 1 == steps) break;  // an odd K: the pair's zero stays behind
      for (std::size_t j = 0; j < panel_width; ++j) {
        out[(kk + 1) * panel_width + j] = operand_from<Kind>(line[kk * panel_width + 2 * j + 1]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The register-blocked tile multiply: c (Rows x Vectors * lanes, row stride ldc) = (or +=) a
// group of Rows rows times `steps` k-steps of a panel, b_step operands apart per k-step.
// Everything is in registers for the whole k loop: Rows * Vectors accumulators, Vectors loads of
// B and Rows broadcasts of A per step.
template <class Atom, std::size_t Rows, std::size_t Vectors>
HWY_INLINE void tile_multiply(float* c, std::size_t ldc, const typename Atom::operand* a,
                              const typename Atom::b_operand* b, std::size_t b_step,
                              std::size_t steps, bool accumulate) {
  typename Atom::accumulator acc[Rows][Vectors];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < Rows; ++r) {
#pragma GCC unroll 8
    for (std::size_t v = 0; v < Vectors; ++v) {
      acc[r][v] = accumulate ? Atom::load(c + r * ldc + v * Atom::lanes) : Atom::zero();
    }
  }
  for (std::size_t s = 0; s < steps; ++s) {
    decltype(Atom::load_b(b)) columns[Vectors];
#pragma GCC unroll 8
    for (std::size_t v = 0; v < Vectors; ++v) {
      columns[v] = Atom::load_b(b + v * Atom::lanes * Atom::depth);
    }
#pragma GCC unroll 16
    for (std::size_t r = 0; r < Rows; ++r) {
      const auto row = Atom::broadcast_a(a + r * Atom::depth);
#pragma GCC unroll 8
      for (std::size_t v = 0; v < Vectors; ++v) acc[r][v] = Atom::mma(acc[r][v], row, columns[v]);
    }
    a += Rows * Atom::depth;
    b += b_step;
  }
#pragma GCC unroll 16
  for (std::size_t r = 0; r < Rows; ++r) {
#pragma GCC unroll 8
    for (std::size_t v = 0; v < Vectors; ++v) Atom::store(c + r * ldc + v * Atom::lanes, acc[r][v]);
  }
}

// One group (rows of A) times one panel (panel_width columns of B) on an atom whose tile
// multiply covers Vectors * lanes columns: panel_width / that calls, side by side.
template <class Atom, std::size_t Vectors, std::size_t... Rows>
void group_times_panel(std::index_sequence<Rows...> /*groups*/, std::size_t rows, float* c,
                       std::size_t ldc, const typename Atom::operand* a,
                       const typename Atom::b_operand* b, std::size_t steps, bool accumulate) {
  constexpr std::size_t columns = Vectors * Atom::lanes;
  static_assert(panel_width % columns == 0, "a tile multiply must divide the panel");
  constexpr std::size_t b_step = panel_width * Atom::depth;
  const auto run = [&]<std::size_t R>(std::integral_constant<std::size_t, R>) {
    for (std::size_t j = 0; j < panel_width; j += columns) {
      tile_multiply<Atom, R, Vectors>(c + j, ldc, a, b + j * Atom::depth, b_step, steps,
                                      accumulate);
    }
  };
  ((rows == Rows ? run(std::integral_constant<std::size_t, Rows>()) : void()), ...);
}

// Products with few rows of A (up to decoding_rows: GEMV, small-batch decoding) multiply each
// weight by few rows, so that widening a panel would cost more than multiplying it: when B is
// stored in a decodable format and the path is fp32 on avx2 or above, they run fp32_decoding, in
// groups of at most decoding_group rows, each the width of a whole panel (2 zmm or 4 ymm
// accumulators per row).
inline constexpr std::size_t decoding_rows = 4;
inline constexpr std::size_t decoding_group = 2;

template <class Stored>
bool decodes(path where, std::size_t rows) {
#if defined(TILEKERN_CONVERT_AVX2)
  return atoms::decodable<Stored> && where.kind == compute::fp32 && where.level >= isa::avx2 &&
         rows <= decoding_rows;
#else
  (void)where, (void)rows;
  return false;
#endif
}

// c (rows x panel_width, row stride ldc) = (or +=) a group of `rows` rows times a panel (of
// operands, or of B's codes on fp32_decoding), over `steps` k-steps, on `where`'s atom. rows is
// 14, 8, 4, 2 or 1 on avx512, 6, 4, 2 or 1 on avx2, 4, 2 or 1 on scalar (group_rows with at most
// largest_group(where.level)), 2 or 1 on fp32_decoding.
template <compute Kind, class B = operand_of<Kind>>
void multiply_group(path where, std::size_t rows, float* c, std::size_t ldc,
                    const operand_of<Kind>* a, const B* b, std::size_t steps, bool accumulate) {
  if constexpr (Kind == compute::fp32_decoding) {
#if defined(TILEKERN_CONVERT_AVX512)
    if (where.level >= isa::avx512) {
      return group_times_panel<atoms::avx512_fp32_decoding<B>, 2>(std::index_sequence<2, 1>(), rows,
                                                                  c, ldc, a, b, steps, accumulate);
    }
#endif
#if defined(TILEKERN_CONVERT_AVX2)
    group_times_panel<atoms::avx2_fp32_decoding<B>, 4>(std::index_sequence<2, 1>(), rows, c, ldc, a,
                                                       b, steps, accumulate);
#else
    (void)where, (void)rows, (void)c, (void)ldc, (void)a, (void)b, (void)steps, (void)accumulate;
    throw std::logic_error("tilekern::tensor: decoding without AVX2");
#endif
  } else if constexpr (Kind == compute::bf16_pairs) {
#if defined(TILEKERN_HAVE_AVX512_BF16_ATOM)
    if (where.level >= isa::avx512) {
      return group_times_panel<atoms::avx512_bf16, 2>(std::index_sequence<14, 8, 4, 2, 1>(), rows,
                                                      c, ldc, a, b, steps, accumulate);
    }
#endif
#if defined(TILEKERN_CONVERT_AVX2)
    group_times_panel<atoms::avx2_bf16_emulated, 2>(std::index_sequence<6, 4, 2, 1>(), rows, c, ldc,
                                                    a, b, steps, accumulate);
#else
    (void)where, (void)rows, (void)c, (void)ldc, (void)a, (void)b, (void)steps, (void)accumulate;
    throw std::logic_error("tilekern::tensor: bf16 pairs without AVX2");
#endif
  } else {
#if defined(TILEKERN_CONVERT_AVX512)
    if (where.level >= isa::avx512) {
      return group_times_panel<atoms::avx512_fp32, 2>(std::index_sequence<14, 8, 4, 2, 1>(), rows,
                                                      c, ldc, a, b, steps, accumulate);
    }
#endif
#if defined(TILEKERN_CONVERT_AVX2)
    if (where.level >= isa::avx2) {
      return group_times_panel<atoms::avx2_fp32, 2>(std::index_sequence<6, 4, 2, 1>(), rows, c, ldc,
                                                    a, b, steps, accumulate);
    }
#endif
    group_times_panel<atoms::scalar_fp32, 8>(std::index_sequence<4, 2, 1>(), rows, c, ldc, a, b,
                                             steps, accumulate);
  }
}

// ---------------------------------------------------------------------------------------------
// acc (M x N, float) += op(A) op(B), whole: the tile-level operation.

template <compute Kind, class A, class B>
void accumulate_product(view<float> acc, const strided<A>& a, const strided<B>& b, path where) {
  using operand = operand_of<Kind>;
  constexpr std::size_t depth = depth_of(Kind);
  const std::size_t m = a.rows, k = a.cols, n = b.cols;
  const std::size_t padded_k = round_up(k, depth), steps = padded_k / depth;
  const std::size_t longest = std::max<std::size_t>(k, panel_width);
  // Scratch: packed A, one panel of B, c for one group and panel, and lines.
  const std::size_t line_floats = 2 * longest + 2 * panel_width * padded_k;
  auto* packed_a = thread_scratch(0).get<operand>(m * padded_k + panel_width * padded_k);
  auto* panel = packed_a + m * padded_k;
  auto* floats = thread_scratch(1).get<float>(line_floats + 14 * panel_width);
  float* line = floats;
  float* spare = floats + longest;
  float* c = floats + line_floats;
  const std::size_t largest = largest_group(where.level);
  pack_rows<Kind, void>(a, 0, m, largest, packed_a, line, spare);
  // B's panels hold bf16 codes (exact for every format that runs on pairs) or floats.
  using stored = std::conditional_t<Kind == compute::bf16_pairs, bf16, float>;
  for (std::size_t first = 0; first < n; first += panel_width) {
    const std::size_t width = std::min(panel_width, n - first);
    pack_panels<stored>(strided<B>{b.data + first * b.col_step, k, width, b.row_step, b.col_step},
                        reinterpret_cast<stored*>(panel));
    const operand* group = packed_a;
    for (std::size_t r = 0; r < m;) {
      const std::size_t rows = group_rows(m - r, largest);
      for (std::size_t i = 0; i < rows; ++i) {
        std::fill_n(c + i * panel_width, panel_width, 0.0f);
        std::copy_n(&acc(r + i, first), width, c + i * panel_width);
      }
      multiply_group<Kind>(where, rows, c, panel_width, group, panel, steps, true);
      for (std::size_t i = 0; i < rows; ++i)
        std::copy_n(c + i * panel_width, width, &acc(r + i, first));
      group += rows * padded_k;
      r += rows;
    }
  }
}

template <class X>
inline constexpr bool is_tile = false;
template <class T, std::size_t R, std::size_t C>
inline constexpr bool is_tile<tile<T, R, C>> = true;

template <class Acc>
view<float> accumulator_view(Acc&& acc) {
  if constexpr (is_tile<std::remove_cvref_t<Acc>>) {
    static_assert(std::is_same_v<typename decltype(acc.view())::element_type, float>,
                  "tilekern::tensor: the accumulator must be a float tile (accum<M, N>), as PSUM "
                  "is fp32");
    return acc.view();
  } else {
    static_assert(std::is_convertible_v<Acc, view<float>>,
                  "tilekern::tensor: the accumulator must be a writable float view or tile "
                  "(accum<M, N>), as PSUM is fp32");
    return view<float>(acc);
  }
}

template <class X>
auto operand_strided(const X& x) {
  if constexpr (requires { x.stored(); }) {
    return as_strided(x);
  } else if constexpr (requires { x.view(); }) {
    return as_strided(x.view());
  } else {
    return as_strided(view(x));
  }
}

template <class X>
auto transposed_operand(const X& x) {
  if constexpr (requires { x.stored(); }) {
    return as_strided(x.stored());
  } else {
    const auto s = operand_strided(x);
    return decltype(s){s.data, s.cols, s.rows, s.col_step, s.row_step};
  }
}

template <class A, class B>
void multiply(const char* function, view<float> acc, const strided<A>& a, const strided<B>& b) {
  static_assert(tensor_element<A> && tensor_element<B>,
                "tilekern::tensor: operands must hold float or a tilekern format (bf16, fp16, "
                "tf32, fp8_*, any minifloat<...>)");
  const auto fail = [&](const char* argument, std::size_t actual, std::size_t expected,
                        const char* what) {
    tilekern::detail::throw_shape_error([&] {
      return std::string(function) + ": " + argument + " has " + std::to_string(actual) + " " +
             what + ", expected " + std::to_string(expected);
    });
  };
  if (b.rows != a.cols) fail("b", b.rows, a.cols, "rows (the k of a)");
  if (acc.rows() != a.rows) fail("acc", acc.rows(), a.rows, "rows (the rows of a)");
  if (acc.cols() != b.cols) fail("acc", acc.cols(), b.cols, "columns (the columns of b)");
  if (a.rows == 0 || b.cols == 0 || a.cols == 0) return;
  const path where = choose_path<A, B>();
  if (where.kind == compute::bf16_pairs) {
    accumulate_product<compute::bf16_pairs>(acc, a, b, where);
  } else {
    accumulate_product<compute::fp32>(acc, a, b, where);
  }
}

}  // namespace detail

// acc += a b. acc: M x N float; a: M x K; b: K x N.
template <class Acc, class A, class B>
void matmul(Acc&& acc, const A& a, const B& b) {
  if constexpr (detail::is_tile<std::remove_cvref_t<Acc>> && detail::is_tile<A> &&
                detail::is_tile<B>) {
    using acc_tile = std::remove_cvref_t<Acc>;
    static_assert(A::cols == B::rows,
                  "tilekern::tensor::matmul(acc, a, b): a's columns must equal b's rows (the k "
                  "of the product); for a^T b use matmul_AtB, for a b^T matmul_ABt");
    static_assert(acc_tile::rows == A::rows && acc_tile::cols == B::cols,
                  "tilekern::tensor::matmul(acc, a, b): acc must be (rows of a) x (columns of b)");
  }
  detail::multiply("tilekern::tensor::matmul", detail::accumulator_view(acc),
                   detail::operand_strided(a), detail::operand_strided(b));
}

// acc += a^T b (the NeuronCore's nc_matmul(stationary = a, moving = b)). a: K x M; b: K x N.
template <class Acc, class A, class B>
void matmul_AtB(Acc&& acc, const A& a, const B& b) {
  if constexpr (detail::is_tile<std::remove_cvref_t<Acc>> && detail::is_tile<A> &&
                detail::is_tile<B>) {
    using acc_tile = std::remove_cvref_t<Acc>;
    static_assert(A::rows == B::rows,
                  "tilekern::tensor::matmul_AtB(acc, a, b): a and b must have the same rows (the "
                  "k of a^T b)");
    static_assert(acc_tile::rows == A::cols && acc_tile::cols == B::cols,
                  "tilekern::tensor::matmul_AtB(acc, a, b): acc must be (columns of a) x "
                  "(columns of b)");
  }
  detail::multiply("tilekern::tensor::matmul_AtB", detail::accumulator_view(acc),
                   detail::transposed_operand(a), detail::operand_strided(b));
}

// acc += a b^T (attention's q k^T). a: M x K; b: N x K.
template <class Acc, class A, class B>
void matmul_ABt(Acc&& acc, const A& a, const B& b) {
  if constexpr (detail::is_tile<std::remove_cvref_t<Acc>> && detail::is_tile<A> &&
                detail::is_tile<B>) {
    using acc_tile = std::remove_cvref_t<Acc>;
    static_assert(A::cols == B::cols,
                  "tilekern::tensor::matmul_ABt(acc, a, b): a and b must have the same columns "
                  "(the k of a b^T)");
    static_assert(acc_tile::rows == A::rows && acc_tile::cols == B::rows,
                  "tilekern::tensor::matmul_ABt(acc, a, b): acc must be (rows of a) x (rows of "
                  "b)");
  }
  detail::multiply("tilekern::tensor::matmul_ABt", detail::accumulator_view(acc),
                   detail::operand_strided(a), detail::transposed_operand(b));
}

}  // namespace tilekern::tensor
