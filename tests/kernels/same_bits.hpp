#pragma once
// The normalisation and softmax kernels' results must not depend on how they go through their
// rows. Each kernel's test (layernorm_test.cpp, rmsnorm_test.cpp, softmax_test.cpp) runs these
// checks on its outputs, through a function of its own (`same_bits_outputs`: every output of that
// kernel, forward and backward, in nearest-even and stochastic rounding, softmax's with no mask,
// an additive mask and a bool mask). There they reuse the kernels that test compiles anyway: in a
// file of their own they compiled every kernel a second time (6 CPU-minutes of CI's build, and
// 3.5 of the avx2 stage's; CONTRIBUTING.md, stop 77). The same bits:
//
// - for every size of the blocks of rows the kernels work through (row_block_bytes(),
//   simd/isa.hpp: half of the machine's L2): a row a block, blocks of a few rows (a short last
//   one) and the default, at which the other tests run. So their fp64 checks hold for any block
//   size, and a user's results are the same whatever the machine's L2 (every_block_size);
// - row by row, where layernorm, rmsnorm and softmax run each row's passes one after the other
//   (set_row_passes), as by every pass over a block of rows, at 64 to 9216 columns
//   (row_by_row);
// - with the large outputs' non-temporal stores (stream_threshold(), engine/lanes.hpp: the whole
//   64-byte lines of each row) as without, in float, bf16, fp16 and fp8_e4m3, with rows on lines
//   and off them, the row passes on (on any vendor's processor) and off (streamed).
//
// Some rows of x take the norms' second tries (a huge element, a mean far from the first
// elements', a constant row), in every check. Each output is in a buffer that ends right before
// an unreadable page. blocks_test.cpp tests the choices themselves (by vendor, by size).

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/elements.hpp"
#include "support/guarded.hpp"
#include "tilekern/engine/lanes.hpp"
#include "tilekern/kernels/rmsnorm.hpp"
#include "tilekern/tile/view.hpp"

namespace tilekern::test {

// A kernel's name and the bytes of one of its outputs.
using named_bytes = std::pair<std::string, std::vector<unsigned char>>;

// rows x cols outputs whose rows are `stride` elements apart (cols unless given), with `pad`
// elements between a matrix output's end and the unreadable page (compared too).
struct output_shape {
  std::size_t rows, cols, stride = 0, pad = 0;
};

// The inputs of a kernel's outputs, rows x cols (the same values for every kernel).
template <class T>
struct same_bits_inputs {
  same_bits_inputs(std::size_t rows, std::size_t cols)
      : rows(rows), cols(cols), keep(std::make_unique<bool[]>(rows * cols)) {
    std::mt19937_64 generator(cols);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    const auto values = [&](std::size_t count, float mean, float spread) {
      std::vector<T> v(count);
      for (T& e : v) e = T(mean + spread * normal(generator));
      return v;
    };
    const std::size_t n = rows * cols;
    x = values(n, 0.5f, 1.0f);
    dy = values(n, 0.0f, 1.0f);
    gamma = values(cols, 1.0f, 0.1f);
    beta = values(cols, 0.0f, 0.1f);
    additive = values(n, 0.0f, 1.0f);
    // Rows the norms take through their second tries (layernorm.hpp, rmsnorm.hpp): a huge element
    // (rescaled), a mean far from the first elements' (192 in fp8_e4m3: a second pass for
    // layernorm's mean from 769 columns on), a constant row. No infinite one (1e30 in fp8_e4m3):
    // its row is NaN, and the NaN's sign differs between the plain and the non-temporal row loops
    // (likely the NaN operand that the fused multiply-add form gcc picks returns: CONTRIBUTING.md).
    if (rows > 3 && std::isfinite(static_cast<float>(T(1e30f)))) x[3 * cols] = T(1e30f);
    if (rows > 5 && cols > 9) x[5 * cols + 9] = T(200.0f);
    if (rows > 7) std::fill_n(x.begin() + static_cast<std::ptrdiff_t>(7 * cols), cols, T(0.25f));
    for (std::size_t i = 0; i < n; ++i) keep[i] = (i * 7 + i / cols) % 5 != 0;
  }

  // values (x, dy or additive) as the rows x cols matrix, gamma or beta as one row.
  view<const T> matrix(const std::vector<T>& values) const {
    return view<const T>(values.data(), rows, cols);
  }
  view<const T> row(const std::vector<T>& values) const {
    return view<const T>(values.data(), 1, cols);
  }

  std::size_t rows, cols;
  std::vector<T> x, dy, gamma, beta, additive;
  std::unique_ptr<bool[]> keep;  // softmax's bool mask
};

// A kernel's outputs, run on guarded buffers of their own; `run` keeps their bytes.
template <class T>
class output_bytes {
 public:
  explicit output_bytes(const output_shape& s)
      : s_{s.rows, s.cols, s.stride != 0 ? s.stride : s.cols, s.pad} {}

  // A matrix output's elements (with its pad), and a row output's.
  std::size_t matrix_size() const { return (s_.rows - 1) * s_.stride + s_.cols + s_.pad; }
  std::size_t row_size() const { return s_.cols; }

  // kernel(out) on guarded outputs of the given sizes; out.matrix(k) and out.row(k) view the k-th.
  template <class Kernel>
  void run(const std::string& name, const std::vector<std::size_t>& sizes, Kernel&& kernel) {
    outputs out{s_, {}};
    for (std::size_t size : sizes) out.buffers.push_back(std::make_unique<guarded_buffer<T>>(size));
    kernel(out);
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(out.buffers[k]->data());
      bytes_.emplace_back(name + ", output " + std::to_string(k),
                          std::vector<unsigned char>(bytes, bytes + sizes[k] * sizeof(T)));
    }
  }

  std::vector<named_bytes> bytes() && { return std::move(bytes_); }

 private:
  struct outputs {
    output_shape s;
    std::vector<std::unique_ptr<guarded_buffer<T>>> buffers;
    view<T> matrix(std::size_t k) { return view<T>(buffers[k]->data(), s.rows, s.cols, s.stride); }
    view<T> row(std::size_t k) { return view<T>(buffers[k]->data(), 1, s.cols); }
  };

  output_shape s_;
  std::vector<named_bytes> bytes_;
};

// Every output of one kernel for a shape (a kernel test's `same_bits_outputs<T>`).
using outputs_of = std::vector<named_bytes> (*)(const output_shape&);

// got and want output by output, each named in `what`'s terms.
inline void check_same_bytes(const std::vector<named_bytes>& got,
                             const std::vector<named_bytes>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    INFO(what, ": ", want[k].first);
    CHECK(got[k].second == want[k].second);
  }
}

// detail::norm_row_passes_everywhere() for the life of the object.
class row_passes_everywhere {
 public:
  row_passes_everywhere() { detail::norm_row_passes_everywhere().store(true); }
  ~row_passes_everywhere() { detail::norm_row_passes_everywhere().store(false); }
  row_passes_everywhere(const row_passes_everywhere&) = delete;
  row_passes_everywhere& operator=(const row_passes_everywhere&) = delete;
};

// set_stream_threshold(bytes) for the life of the object, then the default.
class stream_threshold_of {
 public:
  explicit stream_threshold_of(std::size_t bytes) { set_stream_threshold(bytes); }
  ~stream_threshold_of() { set_stream_threshold(std::nullopt); }
  stream_threshold_of(const stream_threshold_of&) = delete;
  stream_threshold_of& operator=(const stream_threshold_of&) = delete;
};

// T's name and the shape, for a check's messages.
template <class T>
std::string shape_text(const output_shape& s) {
  return name_of<T>() + ", " + std::to_string(s.rows) + "x" + std::to_string(s.cols) + ", stride " +
         std::to_string(s.stride != 0 ? s.stride : s.cols) + ", pad " + std::to_string(s.pad);
}

// 37 rows of 769 and of 4097 columns: a row a block, then blocks of a few rows with a shorter
// last one (24 KiB holds 1 to 31 of these rows, 100 KiB 3 to 37, by format and kernel), with the
// row passes on and off (softmax takes none of the blocks with them on).
template <class T>
void same_bits_for_every_block_size(outputs_of outputs) {
  INFO("row_block_bytes() is ", row_block_bytes(), " (L2 ", l2_cache_bytes(), " bytes)");
  for (const std::size_t cols : {std::size_t{769}, std::size_t{4097}}) {
    const output_shape s{37, cols};
    const auto want = outputs(s);
    for (const std::size_t bytes :
         {std::size_t{1}, std::size_t{24} << 10, std::size_t{100} << 10}) {
      for (const bool row_by_row : {true, false}) {
        const row_blocks_of blocks(bytes);
        const row_passes_of passes(row_by_row);
        check_same_bytes(outputs(s), want,
                         shape_text<T>(s) + ", blocks of " + std::to_string(bytes) +
                             " bytes, row passes " + (row_by_row ? "on" : "off"));
      }
    }
  }
}

// layernorm and rmsnorm run a row's passes one after the other where they can (row_passes():
// rows of up to norm_chunk columns, or of 2 to norm_row_pass_chunks whole chunks stored one after
// another; for layernorm at least 64; layernorm's streamed y, and rows of one chunk of a format
// narrower than float, on Intel processors only: norm_row_passes, which row_passes_everywhere
// makes take them on AMD's too) and leave the other rows to the passes over blocks of rows: the
// same bits as those passes on every row (set_row_passes(false)), with the rows of second tries
// among them. Rows of 2048 to 8192 columns are summed a chunk at a time; 1025 and 9216 columns
// take only the block passes. softmax takes every row so, its output streamed or not.
template <class T>
void same_bits_row_by_row(outputs_of outputs) {
  for (const std::size_t cols :
       {std::size_t{64}, std::size_t{769}, std::size_t{1024}, std::size_t{1025}, std::size_t{2048},
        std::size_t{4096}, std::size_t{8192}, std::size_t{9216}}) {
    const output_shape s{37, cols, cols + 3, 5};
    const auto want = [&] {
      const row_passes_of off(false);
      return outputs(s);
    }();
    CHECK(row_passes());
    const row_passes_everywhere on_any_vendor;
    check_same_bytes(outputs(s), want, shape_text<T>(s));
  }
}

// The same outputs written with non-temporal stores (stream_threshold() 0) as without (SIZE_MAX).
// A streamed row is written with plain stores before its first 64-byte boundary and after its
// last, and with non-temporal ones between (write_rounded). Rows 4096 or 64 elements apart (a
// multiple of 64 bytes): of 4096 and 64 elements, on boundaries at both ends; of 4090 and 57
// elements right before the unreadable page, which start off a boundary and end on one; of 4090
// elements 6 before that page, which start on one and end off one; and of 4096 elements 16 bytes
// before it (as a std::vector starts 16 bytes after a boundary), off at both ends. Rows of 769
// elements are not streamed.
template <class T>
void same_bits_streamed(outputs_of outputs) {
  const std::size_t sixteen_bytes = 16 / sizeof(T);
  for (const output_shape s :
       {output_shape{37, 4096, 4096, 0}, output_shape{37, 4090, 4096, 0},
        output_shape{5, 64, 64, 0}, output_shape{5, 57, 64, 0}, output_shape{37, 4090, 4096, 6},
        output_shape{37, 4096, 4096, sixteen_bytes}, output_shape{37, 769, 769, 0}}) {
    const auto want = [&] {
      const stream_threshold_of none(SIZE_MAX);
      return outputs(s);
    }();
    const stream_threshold_of every(0);
    for (const bool by_row : {true, false}) {
      const row_passes_of passes(by_row);
      std::optional<row_passes_everywhere> on_any_vendor;
      if (by_row) on_any_vendor.emplace();
      check_same_bytes(outputs(s), want,
                       shape_text<T>(s) + ", row passes " + (by_row ? "on" : "off"));
    }
  }
}

}  // namespace tilekern::test
