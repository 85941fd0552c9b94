#pragma once
// matmul on runtime-shaped tensors, any format per operand, with an epilogue:
//
//   C = act(alpha * op(A) op(B) + beta * C + bias)
//
//   matmul<Policy>(a, b, c, options, bias)
//     a      op(A), M x K: a view (or tile, or range) of float or any tilekern format, or
//            transposed(view) for A^T
//     b      op(B), K x N: the same, or a packed_matrix from pack_b (weights packed once)
//     c      M x N, writable, float or any format; encoded with options.cast (nearest even or
//            stochastic, saturating or not); element (r, col) draws stochastic bits with index
//            r * N + col, stream options.cast.stream, whatever the blocking or thread count
//     bias   optional: N values (a 1 x N view or a range of any format), added per column
//     options.alpha, beta   beta = 0 does not read C (NaN there is ignored, as in BLAS)
//     options.activation    any tilekern::act, applied last, before C's rounding
//     options.threads       0: OpenMP's default (1 without OpenMP)
//     Policy  precision<auto_cast::none / matmult / all, CastType>: Neuron's --auto-cast
//
// Numerics. The product accumulates in fp32 (engine/tensor.hpp), never rounded between blocks of
// K: acc is within gamma(K) sum_k |a_ik b_kj| of the exact product of the decoded operands,
// gamma(K) = K u / (1 - K u), u = 2^-24. The epilogue then computes, in fp32,
//   t = alpha * acc + beta * C (one multiply and one fused multiply-add; just alpha * acc when beta
//   is 0), act(t + bias) (bias added with one fused multiply-add, act within its documented ulp
//   bound, simd/math.hpp), and C's rounding. So for act = identity and beta = 0, an fp32 C is
//   within (gamma(K) + 2u) |alpha| sum_k |a_ik b_kj| + u |bias_j| of the exact result. A NaN or
//   inf operand propagates as fp32 arithmetic says.
// Results are identical for any thread count: each element of C is computed by one thread, in
// the same order. Asked for (TILEKERN_BF16_PAIRS=on), bf16 and fp8 operands multiply in bf16
// pairs instead, which differ in the last bits from the fp32 paths (see engine/tensor.hpp).
//
// Precision policies (Neuron's --auto-cast, --auto-cast-type; chosen at compile time):
//   precision<auto_cast::none>               operands are multiplied as they are (default)
//   precision<auto_cast::matmult, T>         float operands are first rounded to T (nearest
//                                            even); other formats are left as they are
//   precision<auto_cast::all, T>             as matmult, and the epilogue runs "in T": a float
//                                            bias is rounded to T, and a float C receives the
//                                            result rounded to T (nearest even) before it
// T is bf16, fp16, tf32 or fp8_e4m3 on a NeuronCore; any tilekern format works here.
//
// Algorithm (the blocking of GotoBLAS, with the accumulators kept apart, as PSUM is):
//   B is packed into panels of 32 columns (pack_b; an unpacked b is packed at the start of the
//   call). C is split into blocks of block_rows x block_cols; threads take contiguous runs of
//   blocks in row-major order. For each block: pack its rows of A (all of K) into groups, then for
//   each k-block of 128 steps, for each panel: widen the panel's k-block if its format is not the
//   compute operand (fp8 to bf16, or anything to fp32), and multiply every group by it into the
//   block's fp32 accumulators. Last, the epilogue writes the block of C (engine/vector.hpp,
//   engine/scalar.hpp). Small M takes the same loops with groups of at most 8 rows, reading each
//   panel start to end: every weight is read once per block of rows, in its own format (an fp8
//   weight is one byte). Up to 4 rows (GEMV, batch-1 decoding) with bf16 or fp8 weights on avx2
//   and up, nothing is widened: the multiply decodes each weight in registers as it loads it
//   (engine/atoms.hpp, avx512_fp32_decoding and avx2_fp32_decoding), with the bits of the
//   widening path.
//
// Memory: pack_b allocates the packed matrix (K x N in B's format, padded to 32 columns); matmul
// with an unpacked b allocates one per call. Each thread keeps its scratch between calls (packed
// rows of A, 168 x K operands; 168 x 256 fp32 accumulators; a panel slice), so that no call
// allocates in its loops.
//
// Shapes that do not fit throw shape_error naming the kernel, the argument and both sizes,
// before any memory is touched. C must not overlap A, B or bias.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "tilekern/engine/scalar.hpp"
#include "tilekern/engine/tensor.hpp"
#include "tilekern/engine/vector.hpp"
#include "tilekern/error.hpp"
#include "tilekern/simd/math.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/rounding.hpp"

namespace tilekern {

enum class auto_cast : std::uint8_t { none, matmult, all };

namespace detail {

// A thread count, 0 meaning OpenMP's default (1 without OpenMP).
inline int default_threads(int threads) {
#if defined(_OPENMP)
  if (threads <= 0) return omp_get_max_threads();
#endif
  return std::max(threads, 1);
}

}  // namespace detail

template <auto_cast Mode = auto_cast::none, class CastType = bf16>
struct precision {
  static_assert(minifloat_format<CastType>,
                "tilekern::precision: the cast type must be a tilekern format (bf16, fp16, tf32, "
                "fp8_e4m3, ...)");
  static constexpr auto_cast mode = Mode;
  using cast_type = CastType;
};

// The format an operand of format T is multiplied in under Policy.
template <class Policy, class T>
using policy_operand =
    std::conditional_t<Policy::mode != auto_cast::none && std::is_same_v<T, float>,
                       typename Policy::cast_type, T>;

struct matmul_options {
  float alpha = 1.0f;
  float beta = 0.0f;
  act activation = act::identity;
  cast_options cast{};  // C's rounding
  int threads = 0;      // 0: OpenMP's default
};

// No bias: matmul's default.
struct no_bias {};

// op(B) (K x N) packed once into the layout the tensor engine reads (engine/tensor.hpp): panels of
// 32 columns, k-major, k in pairs for formats that run on bf16 pairs; in format T, so fp8 weights
// stay one byte each. Made by pack_b.
template <class T>
class packed_matrix {
 public:
  using element_type = T;

  // Packs on `threads` threads (0: OpenMP's default).
  template <class Source>
  explicit packed_matrix(const tensor::detail::strided<Source>& b, int threads = 0)
      : rows_(b.rows),
        cols_(b.cols),
        panel_size_(tensor::detail::packed_panel_size<T>(b.rows)),
        panels_(tensor::detail::round_up(b.cols, tensor::panel_width) / tensor::panel_width),
        data_(allocate(panel_size_ * panels_)) {
    tensor::detail::pack_panels<T>(b, data_.get(), detail::default_threads(threads));
  }

  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }
  // Panel p: columns [32 p, 32 p + 32), panel_size() elements.
  const T* panel(std::size_t p) const { return data_.get() + p * panel_size_; }
  std::size_t panel_size() const { return panel_size_; }

 private:
  struct release {
    void operator()(T* data) const { ::operator delete (data, std::align_val_t{64}); }
  };
  static std::unique_ptr<T[], release> allocate(std::size_t count) {
    const std::size_t bytes = std::max<std::size_t>(count * sizeof(T), 64);
    return std::unique_ptr<T[], release>(
        static_cast<T*>(::operator new (bytes, std::align_val_t{64})));
  }

  std::size_t rows_, cols_, panel_size_, panels_;
  std::unique_ptr<T[], release> data_;
};

// Packs op(B): a view, tile or range (K x N), or transposed(view) for B^T (weights stored N x K,
// as a Linear layer holds them). Under a precision policy that casts, float B is rounded to the
// cast type as it is packed. Large matrices pack on `threads` threads (0: OpenMP's default).
template <class Policy = precision<>, class B>
auto pack_b(const B& b, int threads = 0) {
  const auto source = tensor::detail::operand_strided(b);
  using source_type = std::remove_const_t<std::remove_pointer_t<decltype(source.data)>>;
  static_assert(tensor::tensor_element<source_type>,
                "tilekern::pack_b: b must hold float or a tilekern format");
  return packed_matrix<policy_operand<Policy, source_type>>(source, threads);
}

namespace detail {

template <class T>
inline constexpr bool is_packed = false;
template <class T>
inline constexpr bool is_packed<packed_matrix<T>> = true;

// Blocks of C. block_rows = 12 groups of 14: the block's k-slice of packed A (168 x 256 bf16 =
// 84 KiB) and its accumulators (168 x 256 fp32 = 168 KiB) stay in L2; each panel's k-slice
// (128 steps x 32 columns: 16 KiB in bf16 pairs or fp32) stays in L1 while every group of the
// block multiplies it, so each B element loaded from L1 feeds 14 fused multiply-adds.
inline constexpr std::size_t block_rows = 168;
inline constexpr std::size_t block_cols = 256;
inline constexpr std::size_t block_steps = 128;
// A block's packed rows of A up to this size stay in L2 whole: then the loops run panel by panel.
inline constexpr std::size_t small_a_bytes = std::size_t{256} * 1024;

// The epilogue of one block: c = act(alpha * acc + beta * c + bias), rounded (see the top).
template <class Policy, class C, class Bias>
void write_block(view<float> acc, view<C> c, const Bias& bias, const matmul_options& options,
                 std::uint64_t first_index, std::uint64_t index_stride) {
  namespace hn = hwy::HWY_NAMESPACE;
  float scale = options.alpha;
  if (options.beta != 0.0f) {
    vector::map(
        acc,
        [](auto /*d*/, auto x, auto old, auto alpha, auto beta) {
          return hn::MulAdd(x, alpha, hn::Mul(old, beta));
        },
        acc, view<const C>(c), options.alpha, options.beta);
    scale = 1.0f;
  }
  const auto out = [&](auto&& to) {
    if constexpr (std::is_same_v<Bias, no_bias>) {
      scalar::activation(to, acc, options.activation, scale);
    } else {
      scalar::activation(to, acc, options.activation, scale, bias);
    }
  };
  if constexpr (Policy::mode == auto_cast::all && std::is_same_v<C, float>) {
    using cast_type = typename Policy::cast_type;
    auto* result = tensor::detail::thread_scratch(8).get<cast_type>(acc.rows() * acc.cols());
    const view<cast_type> rounded(result, acc.rows(), acc.cols());
    out(rounded);  // in the cast type, nearest even
    vector::map(
        c, [](auto /*d*/, auto x) { return x; }, view<const cast_type>(rounded));
  } else {
    out(vector::rounded(c, options.cast, first_index, index_stride));
  }
}

// The bias of columns [first, first + count), rounded to the cast type under auto_cast::all.
template <class Policy, class Bias>
auto bias_block(const Bias& bias, std::size_t first, std::size_t count) {
  if constexpr (std::is_same_v<Bias, no_bias>) {
    return no_bias{};
  } else {
    using element = std::remove_const_t<typename Bias::element_type>;
    const auto block = bias.block(0, first, 1, count);
    if constexpr (Policy::mode == auto_cast::all && std::is_same_v<element, float>) {
      using cast_type = typename Policy::cast_type;
      auto* rounded = tensor::detail::thread_scratch(7).get<cast_type>(count);
      vector::map(
          view<cast_type>(rounded, 1, count), [](auto /*d*/, auto x) { return x; }, block);
      return view<const cast_type>(rounded, 1, count);
    } else {
      return block;
    }
  }
}

template <tensor::compute Kind, class Policy, class A, class Stored, class C, class Bias>
void multiply_blocks(tensor::path where, const tensor::detail::strided<A>& a,
                     const packed_matrix<Stored>& b, view<C> c, const Bias& bias,
                     const matmul_options& options, int threads) {
  using namespace tensor;          // NOLINT(google-build-using-namespace): the engine's own
  using namespace tensor::detail;  // NOLINT(google-build-using-namespace)
  using operand = operand_of<Kind>;
  using cast = std::conditional_t<std::is_same_v<policy_operand<Policy, A>, A>, void,
                                  typename Policy::cast_type>;
  constexpr std::size_t depth = depth_of(Kind);
  // Whether B's panels are read as they are (bf16 codes on pairs, floats on fp32, any decodable
  // codes on fp32_decoding), or widened to the compute operand first.
  constexpr bool direct = (Kind == compute::bf16_pairs && std::is_same_v<Stored, bf16>) ||
                          (Kind == compute::fp32 && std::is_same_v<Stored, float>) ||
                          Kind == compute::fp32_decoding;
  using column = std::conditional_t<Kind == compute::fp32_decoding, Stored, operand>;
  const std::size_t m = a.rows, n = b.cols(), k = a.cols;
  const std::size_t padded_k = round_up(k, depth), steps = padded_k / depth;
  const std::size_t row_blocks = round_up(m, block_rows) / block_rows;
  const std::size_t col_blocks = round_up(n, block_cols) / block_cols;
  const std::size_t blocks = row_blocks * col_blocks;

  const auto run = [&](std::size_t first_block, std::size_t last_block) {
    // Scratch, kept by the thread between calls: the block's packed A (all of K), its fp32
    // accumulators, a widened panel k-slice, and lines for packing and widening.
    const std::size_t line_floats = std::max<std::size_t>(k, panel_width);
    const std::size_t slice = block_steps * depth * panel_width;  // operands of a panel k-slice
    auto* packed_a = thread_scratch(3).get<operand>(block_rows * padded_k);
    auto* acc = thread_scratch(4).get<float>(block_rows * block_cols);
    auto* widened = thread_scratch(5).get<operand>(slice);
    auto* floats = thread_scratch(6).get<float>(2 * line_floats + slice + 2 * panel_width);
    float* line = floats;
    float* spare = floats + line_floats;
    float* wide_line = floats + 2 * line_floats;
    std::size_t packed_row_block = row_blocks;  // none yet
    for (std::size_t block = first_block; block < last_block; ++block) {
      const std::size_t row_block = block / col_blocks, col_block = block % col_blocks;
      const std::size_t first_row = row_block * block_rows,
                        rows = std::min(block_rows, m - first_row);
      const std::size_t first_col = col_block * block_cols,
                        cols = std::min(block_cols, n - first_col);
      const std::size_t panels = round_up(cols, panel_width) / panel_width;
      // Small M (up to 16 rows): groups of at most 8 rows (16 = 8 + 8, not 14 + 2, which would
      // load each B vector for 2 rows). Otherwise the path's largest groups.
      const bool small = rows <= 16;
      const std::size_t largest = Kind == compute::fp32_decoding ? decoding_group
                                  : small ? std::min<std::size_t>(8, largest_group(where.level))
                                          : largest_group(where.level);
      if (row_block != packed_row_block) {
        pack_rows<Kind, cast>(a, first_row, rows, largest, packed_a, line, spare);
        packed_row_block = row_block;
      }
      if (steps == 0) std::fill_n(acc, block_rows * block_cols, 0.0f);
      // Panel p's k-steps [first_step, first_step + block_steps) times every group of the block.
      const auto multiply_panel = [&](std::size_t p, std::size_t first_step) {
        const std::size_t count = std::min(block_steps, steps - first_step);
        const Stored* panel = b.panel(first_col / panel_width + p);
        const column* columns = nullptr;
        if constexpr (direct) {
          columns = reinterpret_cast<const column*>(panel) + first_step * depth * panel_width;
        } else {
          widen_panel<Kind>(panel, first_step, count, widened, wide_line);
          columns = widened;
        }
        for (std::size_t r = 0; r < rows;) {
          const std::size_t group = group_rows(rows - r, largest);
          multiply_group<Kind>(where, group, acc + r * block_cols + p * panel_width, block_cols,
                               packed_a + r * padded_k + first_step * group * depth, columns, count,
                               first_step > 0);
          r += group;
        }
      };
      // Each accumulator sums its k-steps in order either way. With few rows (small M), each
      // panel is read start to end, so that the prefetcher streams B; with many, a k-slice of the
      // block's packed A stays in L2 while every panel multiplies it.
      if (rows * padded_k * sizeof(operand) <= small_a_bytes) {
        for (std::size_t p = 0; p < panels; ++p) {
          for (std::size_t s = 0; s < steps; s += block_steps) multiply_panel(p, s);
        }
      } else {
        for (std::size_t s = 0; s < steps; s += block_steps) {
          for (std::size_t p = 0; p < panels; ++p) multiply_panel(p, s);
        }
      }
      write_block<Policy>(
          view<float>(acc, rows, cols, block_cols), c.block(first_row, first_col, rows, cols),
          bias_block<Policy>(bias, first_col, cols), options, first_row * n + first_col, n);
    }
  };
#if defined(_OPENMP)
  if (threads > 1 && blocks > 1) {
#pragma omp parallel num_threads(threads)
    {
      const auto count = static_cast<std::size_t>(omp_get_num_threads());
      const auto t = static_cast<std::size_t>(omp_get_thread_num());
      run(blocks * t / count, blocks * (t + 1) / count);
    }
    return;
  }
#endif
  (void)threads;
  run(0, blocks);
}

inline std::string sizes(std::size_t rows, std::size_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

template <class Policy, class A, class Stored, class C, class Bias>
void matmul_packed(const tensor::detail::strided<A>& a, const packed_matrix<Stored>& b, view<C> c,
                   const Bias& bias, const matmul_options& options) {
  if (a.rows == 0 || b.cols() == 0) return;
  const tensor::path where = tensor::choose_path<policy_operand<Policy, A>, Stored>();
  const int threads = default_threads(options.threads);
  if (where.kind == tensor::compute::bf16_pairs) {
    multiply_blocks<tensor::compute::bf16_pairs, Policy>(where, a, b, c, bias, options, threads);
    return;
  }
  if constexpr (tensor::atoms::decodable<Stored>) {
    if (tensor::detail::decodes<Stored>(where, a.rows)) {
      multiply_blocks<tensor::compute::fp32_decoding, Policy>(where, a, b, c, bias, options,
                                                              threads);
      return;
    }
  }
  multiply_blocks<tensor::compute::fp32, Policy>(where, a, b, c, bias, options, threads);
}

}  // namespace detail

// C = act(alpha * op(A) op(B) + beta * C + bias); see the top of this header.
template <class Policy = precision<>, class A, class B, class C, class Bias = no_bias>
void matmul(const A& a, const B& b, C&& c, const matmul_options& options = {},
            const Bias& bias = {}) {
  const auto a_source = tensor::detail::operand_strided(a);
  using a_type = std::remove_const_t<std::remove_pointer_t<decltype(a_source.data)>>;
  static_assert(tensor::tensor_element<a_type>,
                "tilekern::matmul: a must hold float or a tilekern format (bf16, fp16, tf32, "
                "fp8_*, any minifloat<...>)");
  const auto c_view = tilekern::detail::to_view(std::forward<C>(c));
  using c_type = typename decltype(c_view)::element_type;
  static_assert(!std::is_const_v<c_type> && tensor::tensor_element<c_type>,
                "tilekern::matmul: c must be a writable view (or tile, or range) of float or a "
                "tilekern format");
  const auto fail = [](const std::string& message) {
    detail::throw_shape_error([&] { return "tilekern::matmul: " + message; });
  };
  const std::size_t m = a_source.rows, k = a_source.cols;
  std::size_t b_rows = 0, n = 0;
  if constexpr (detail::is_packed<B>) {
    b_rows = b.rows(), n = b.cols();
  } else {
    const auto b_source = tensor::detail::operand_strided(b);
    b_rows = b_source.rows, n = b_source.cols;
  }
  if (b_rows != k) {
    fail("b has " + std::to_string(b_rows) + " rows, expected " + std::to_string(k) +
         " (the columns of a)");
  }
  if (c_view.rows() != m || c_view.cols() != n) {
    fail("c is " + detail::sizes(c_view.rows(), c_view.cols()) + ", expected " +
         detail::sizes(m, n) + " (rows of a x columns of b)");
  }
  if constexpr (std::is_same_v<Bias, no_bias>) {
    const no_bias none;
    if constexpr (detail::is_packed<B>) {
      detail::matmul_packed<Policy>(a_source, b, c_view, none, options);
    } else {
      detail::matmul_packed<Policy>(a_source, pack_b<Policy>(b, options.threads), c_view, none,
                                    options);
    }
  } else {
    const auto bias_view = tilekern::detail::to_view(bias);
    using bias_type = std::remove_const_t<typename decltype(bias_view)::element_type>;
    static_assert(tensor::tensor_element<bias_type>,
                  "tilekern::matmul: bias must hold float or a tilekern format");
    if (bias_view.rows() != 1 || bias_view.cols() != n) {
      fail("bias is " + detail::sizes(bias_view.rows(), bias_view.cols()) + ", expected 1x" +
           std::to_string(n) + " (one value per column of c)");
    }
    const view<const bias_type> row = bias_view;
    if constexpr (detail::is_packed<B>) {
      detail::matmul_packed<Policy>(a_source, b, c_view, row, options);
    } else {
      detail::matmul_packed<Policy>(a_source, pack_b<Policy>(b, options.threads), c_view, row,
                                    options);
    }
  }
}

}  // namespace tilekern
