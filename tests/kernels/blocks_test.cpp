// The normalisation and softmax kernels work through blocks of rows of row_block_bytes() each
// (simd/isa.hpp: half of the machine's L2). Their results must not depend on it: the same bits
// with a row a block, with blocks of a few rows (a short last one), and with the default, at
// which most other tests run. So the other tests' fp64 checks hold for any block size, and a
// user's results are the same whatever the machine's L2.
//
// Every kernel that blocks (layernorm, rmsnorm and softmax, forward and backward; softmax with no
// mask, an additive mask and a bool mask; nearest-even and stochastic rounding) runs over 37 rows
// of 769 and of 4097 columns, in float, bf16 and fp8_e4m3, on the active ISA path, each output in
// a buffer that ends right before an unreadable page.
//
// layernorm, rmsnorm and softmax run each row's passes one after the other where they can
// (set_row_passes): the same bits as every pass over a block of rows, at 64, 769, 1024 and 1025
// columns (softmax also with one row of additive mask for every row, and with the row passes
// off for every block size above, since with them on it takes no blocks).
// Some rows of x take the norms' second tries (a huge element, a mean far from the first
// elements', a constant row), in every test here.
//
// layernorm, rmsnorm and softmax write large outputs with non-temporal stores (stream_threshold(),
// engine/lanes.hpp), the whole 64-byte lines of each row (softmax's into float only with its row
// passes, through their scratch row). With the threshold at 0, every kernel here gives the same
// bits as with none, in float, bf16, fp16 and fp8_e4m3, with rows on lines and off them, their
// row passes on (on any vendor's processor) and off.
//
// softmax's row passes give the same bits with a row's products fused with the next row's
// exponentials as without (detail::set_softmax_fusion), and choose between the two by the L1's
// size, the vendor and y's stride (detail::softmax_fuses).

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/guarded.hpp"
#include "tilekern/kernels/layernorm.hpp"
#include "tilekern/kernels/rmsnorm.hpp"
#include "tilekern/kernels/softmax.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

using test::guarded_buffer;

// A kernel's name and the bytes of one of its outputs.
using named_bytes = std::pair<std::string, std::vector<unsigned char>>;

// Every output of every kernel, run with the blocks as they are set now; a rows x cols output's
// rows are `stride` elements apart (cols unless given), and `pad` elements lie between its end and
// the unreadable page (compared too).
template <class T>
std::vector<named_bytes> outputs(std::size_t rows, std::size_t cols, std::size_t stride = 0,
                                 std::size_t pad = 0) {
  stride = stride != 0 ? stride : cols;
  const std::size_t n = rows * cols;
  std::mt19937_64 generator(cols);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const auto values = [&](std::size_t count, float mean, float spread) {
    std::vector<T> v(count);
    for (T& e : v) e = T(mean + spread * normal(generator));
    return v;
  };
  std::vector<T> x = values(n, 0.5f, 1.0f);
  const std::vector<T> dy = values(n, 0.0f, 1.0f), gamma = values(cols, 1.0f, 0.1f),
                       beta = values(cols, 0.0f, 0.1f), additive = values(n, 0.0f, 1.0f);
  // Rows the norms take through their second tries (layernorm.hpp, rmsnorm.hpp): a huge element
  // (rescaled), a mean far from the first elements' (192 in fp8_e4m3: a second pass for
  // layernorm's mean from 769 columns on), a constant row. No infinite one (1e30 in fp8_e4m3): its
  // row is NaN, and the NaN's sign differs between the plain and the non-temporal row loops
  // (likely the NaN operand that the fused multiply-add form gcc picks returns: CONTRIBUTING.md).
  if (rows > 3 && std::isfinite(static_cast<float>(T(1e30f)))) x[3 * cols] = T(1e30f);
  if (rows > 5 && cols > 9) x[5 * cols + 9] = T(200.0f);
  if (rows > 7) std::fill_n(x.begin() + static_cast<std::ptrdiff_t>(7 * cols), cols, T(0.25f));
  const auto keep = std::make_unique<bool[]>(n);
  for (std::size_t i = 0; i < n; ++i) keep[i] = (i * 7 + i / cols) % 5 != 0;
  const view<const T> xv(x.data(), rows, cols), dyv(dy.data(), rows, cols);
  const view<const T> gv(gamma.data(), 1, cols), bv(beta.data(), 1, cols);
  const cast_options stochastic{.round = rounding::stochastic, .seed = 9};

  std::vector<named_bytes> result;
  // Runs kernel(out) on guarded outputs of the given sizes and keeps their bytes.
  const auto run = [&](const char* name, std::vector<std::size_t> sizes, auto kernel) {
    std::vector<std::unique_ptr<guarded_buffer<T>>> out;
    for (std::size_t size : sizes) out.push_back(std::make_unique<guarded_buffer<T>>(size));
    kernel(out);
    for (std::size_t k = 0; k < out.size(); ++k) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(out[k]->data());
      result.emplace_back(name + std::string(", output ") + std::to_string(k),
                          std::vector<unsigned char>(bytes, bytes + sizes[k] * sizeof(T)));
    }
  };
  const auto matrix = [&](auto& out, std::size_t k) {
    return view<T>(out[k]->data(), rows, cols, stride);
  };
  const auto row = [&](auto& out, std::size_t k) { return view<T>(out[k]->data(), 1, cols); };
  const std::size_t m = (rows - 1) * stride + cols + pad;  // a matrix output's buffer

  run("layernorm", {m}, [&](auto& o) { layernorm(xv, gv, bv, matrix(o, 0), 1e-5f); });
  run("layernorm, stochastic", {m},
      [&](auto& o) { layernorm(xv, gv, bv, matrix(o, 0), 1e-5f, stochastic); });
  run("layernorm_backward, stochastic", {m, cols, cols}, [&](auto& o) {
    layernorm_backward(dyv, xv, gv, matrix(o, 0), row(o, 1), row(o, 2), 1e-5f, stochastic);
  });
  run("rmsnorm", {m}, [&](auto& o) { rmsnorm(xv, gv, matrix(o, 0), 1e-5f); });
  run("rmsnorm, stochastic", {m},
      [&](auto& o) { rmsnorm(xv, gv, matrix(o, 0), 1e-5f, stochastic); });
  run("rmsnorm_backward", {m, cols},
      [&](auto& o) { rmsnorm_backward(dyv, xv, gv, matrix(o, 0), row(o, 1), 1e-5f); });
  run("softmax, scale 0.7", {m}, [&](auto& o) { softmax(xv, matrix(o, 0), {.scale = 0.7f}); });
  run("softmax, stochastic", {m}, [&](auto& o) { softmax(xv, matrix(o, 0), {}, stochastic); });
  run("softmax, additive mask", {m}, [&](auto& o) {
    softmax(xv, view<const T>(additive.data(), rows, cols), matrix(o, 0), {.scale = 1.5f});
  });
  run("softmax, a row of additive mask", {m}, [&](auto& o) {
    softmax(xv, view<const T>(additive.data(), 1, cols), matrix(o, 0), {.scale = 1.5f});
  });
  run("softmax, bool mask", {m},
      [&](auto& o) { softmax(xv, view<const bool>(keep.get(), rows, cols), matrix(o, 0)); });
  run("softmax and softmax_backward", {m, m}, [&](auto& o) {
    softmax(xv, matrix(o, 0));
    softmax_backward(dyv, view<const T>(matrix(o, 0)), matrix(o, 1), {.scale = 0.7f});
  });
  return result;
}

template <class T>
void same_bits_for_every_block_size(const char* format) {
  for (const std::size_t cols : {std::size_t{769}, std::size_t{4097}}) {
    const std::size_t rows = 37;
    const auto want = outputs<T>(rows, cols);
    // A row a block, then blocks of a few rows with a shorter last one (24 KiB holds 1 to 31
    // of these rows, 100 KiB 3 to 37, by format and kernel).
    // With the row passes off too: softmax takes none of the blocks with them on.
    for (const std::size_t bytes :
         {std::size_t{1}, std::size_t{24} << 10, std::size_t{100} << 10}) {
      for (const bool row_by_row : {true, false}) {
        const test::row_blocks_of blocks(bytes);
        const test::row_passes_of passes(row_by_row);
        const auto got = outputs<T>(rows, cols);
        REQUIRE(got.size() == want.size());
        for (std::size_t k = 0; k < want.size(); ++k) {
          INFO(std::string(format), ", ", rows, "x", cols, ", blocks of ", bytes,
               " bytes, row passes ", row_by_row, ": ", want[k].first);
          CHECK(got[k].second == want[k].second);
        }
      }
    }
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

// layernorm and rmsnorm run a row's passes one after the other where they can (row_passes():
// rows of up to norm_chunk columns, or of 2 to norm_row_pass_chunks whole chunks stored one after
// another; for layernorm at least 64; layernorm's streamed y, and rows of one chunk of a format
// narrower than float, on Intel processors only: norm_row_passes, which row_passes_everywhere
// makes take them on AMD's too) and leave the other rows to the passes over blocks of rows: the
// same bits as those passes on every row (set_row_passes(false)), with the rows of second tries
// above among them. Rows of 2048 to 8192 columns are summed a chunk at a time; 1025 and 9216
// columns take only the block passes. softmax takes every row so, its output streamed or not.
template <class T>
void same_bits_row_by_row(const char* format) {
  for (const std::size_t cols :
       {std::size_t{64}, std::size_t{769}, std::size_t{1024}, std::size_t{1025}, std::size_t{2048},
        std::size_t{4096}, std::size_t{8192}, std::size_t{9216}}) {
    const std::size_t rows = 37;
    const auto want = [&] {
      const test::row_passes_of off(false);
      return outputs<T>(rows, cols, cols + 3, 5);
    }();
    CHECK(row_passes());
    const auto got = [&] {
      const row_passes_everywhere on_any_vendor;
      return outputs<T>(rows, cols, cols + 3, 5);
    }();
    REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      INFO(std::string(format), ", ", rows, "x", cols, ": ", want[k].first);
      CHECK(got[k].second == want[k].second);
    }
  }
}

// set_stream_threshold(bytes) for the life of the object, then the default.
class stream_threshold_of {
 public:
  explicit stream_threshold_of(std::size_t bytes) { set_stream_threshold(bytes); }
  ~stream_threshold_of() { set_stream_threshold(std::nullopt); }
  stream_threshold_of(const stream_threshold_of&) = delete;
  stream_threshold_of& operator=(const stream_threshold_of&) = delete;
};

// The same outputs written with non-temporal stores (stream_threshold() 0) as without (SIZE_MAX).
// A streamed row is written with plain stores before its first 64-byte boundary and after its
// last, and with non-temporal ones between (write_rounded). Rows 4096 or 64 elements apart (a
// multiple of 64 bytes): of 4096 and 64 elements, on boundaries at both ends; of 4090 and 57
// elements right before the unreadable page, which start off a boundary and end on one; of 4090
// elements 6 before that page, which start on one and end off one; and of 4096 elements 16 bytes
// before it (as a std::vector starts 16 bytes after a boundary), off at both ends. Rows of 769
// elements are not streamed.
template <class T>
void same_bits_streamed(const char* format) {
  struct shape {
    std::size_t rows, cols, stride, pad;
  };
  const std::size_t sixteen_bytes = 16 / sizeof(T);
  for (const shape s : {shape{37, 4096, 4096, 0}, shape{37, 4090, 4096, 0}, shape{5, 64, 64, 0},
                        shape{5, 57, 64, 0}, shape{37, 4090, 4096, 6},
                        shape{37, 4096, 4096, sixteen_bytes}, shape{37, 769, 769, 0}}) {
    const auto want = [&] {
      const stream_threshold_of none(SIZE_MAX);
      return outputs<T>(s.rows, s.cols, s.stride, s.pad);
    }();
    const stream_threshold_of every(0);
    for (const bool by_row : {true, false}) {
      const test::row_passes_of passes(by_row);
      std::optional<row_passes_everywhere> on_any_vendor;
      if (by_row) on_any_vendor.emplace();
      const auto got = outputs<T>(s.rows, s.cols, s.stride, s.pad);
      REQUIRE(got.size() == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) {
        INFO(std::string(format), ", ", s.rows, "x", s.cols, ", stride ", s.stride, ", pad ", s.pad,
             ", row passes ", std::string(by_row ? "on" : "off"), ": ", want[k].first);
        CHECK(got[k].second == want[k].second);
      }
    }
  }
}

// detail::set_softmax_fusion(on) for the life of the object, then the default.
class softmax_fusion_of {
 public:
  explicit softmax_fusion_of(bool on) { detail::set_softmax_fusion(on); }
  ~softmax_fusion_of() { detail::set_softmax_fusion(std::nullopt); }
  softmax_fusion_of(const softmax_fusion_of&) = delete;
  softmax_fusion_of& operator=(const softmax_fusion_of&) = delete;
};

// softmax's row passes give the same bits with a row's products alongside the next row's
// exponentials (fused) as in a loop of their own, at 769 columns and at 4096 (rows 16 bytes past a
// line, as a std::vector's), y streamed where it can be and not, with and without a mask (outputs
// above), whichever the machine would choose (softmax_fuses).
template <class T>
void same_bits_fused(const char* format) {
  const std::size_t sixteen_bytes = 16 / sizeof(T);
  for (const std::size_t cols : {std::size_t{769}, std::size_t{4096}}) {
    for (const std::size_t threshold : {std::size_t{0}, SIZE_MAX}) {
      const stream_threshold_of streaming(threshold);
      const std::size_t rows = 37, pad = cols == 4096 ? sixteen_bytes : 0;
      const auto want = [&] {
        const softmax_fusion_of off(false);
        return outputs<T>(rows, cols, cols, pad);
      }();
      const softmax_fusion_of on(true);
      const auto got = outputs<T>(rows, cols, cols, pad);
      REQUIRE(got.size() == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) {
        INFO(std::string(format), ", ", rows, "x", cols, ", stream threshold ", threshold, ": ",
             want[k].first);
        CHECK(got[k].second == want[k].second);
      }
    }
  }
}

// The processor's vendor as Linux reports it ("" elsewhere).
std::string cpuinfo_vendor() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("vendor_id", 0) != 0) continue;
    const std::size_t start = line.find_first_not_of(" \t", line.find(':') + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

// Which rows layernorm and rmsnorm take by rows (norm_row_passes): on AMD processors neither
// layernorm's streamed y nor rows of one chunk of a format narrower than float; everywhere under
// row_passes_everywhere (so that same_bits_row_by_row above compares the row passes there too);
// nowhere with set_row_passes(false).
TEST_CASE("the row passes' choice by vendor") {
  const bool amd = detected_cpu_features().amd;
  CHECK(detail::norm_row_passes(false, sizeof(float), 768, /*centred=*/true));
  CHECK(detail::norm_row_passes(false, sizeof(bf16), 2048, /*centred=*/true));
  CHECK(detail::norm_row_passes(false, sizeof(bf16), 768, /*centred=*/true) == !amd);
  CHECK(detail::norm_row_passes(false, sizeof(fp8_e4m3), 1024, /*centred=*/true) == !amd);
  CHECK(detail::norm_row_passes(true, sizeof(float), 4096, /*centred=*/true) == !amd);
  CHECK(detail::norm_row_passes(true, sizeof(float), 4096, /*centred=*/false));
  CHECK(detail::norm_row_passes(true, sizeof(bf16), 4096, /*centred=*/false));
  CHECK(detail::norm_row_passes(true, sizeof(bf16), 768, /*centred=*/false) == !amd);
  {
    const row_passes_everywhere on_any_vendor;
    CHECK(detail::norm_row_passes(false, sizeof(bf16), 768, /*centred=*/true));
    CHECK(detail::norm_row_passes(true, sizeof(float), 4096, /*centred=*/true));
    const test::row_passes_of off(false);
    CHECK_FALSE(detail::norm_row_passes(false, sizeof(float), 768, /*centred=*/true));
  }
  CHECK(detail::norm_row_passes(false, sizeof(bf16), 768, /*centred=*/true) == !amd);
}

// How far ahead the row passes prefetch (long_row_lead): two steps of rows of 8 KiB or more on AMD
// processors, else one.
TEST_CASE("the row passes' prefetch lead by vendor") {
  const bool amd = detected_cpu_features().amd;
  CHECK(detail::long_row_lead(std::size_t{8} << 10) == (amd ? 2 : 1));
  CHECK(detail::long_row_lead(std::size_t{64} << 10) == (amd ? 2 : 1));
  CHECK(detail::long_row_lead((std::size_t{8} << 10) - 1) == 1);
}

// When softmax's row passes fuse a row's products with the next row's exponentials: where two
// fp32 rows and a row of x fit in L1, a streamed y on Intel processors only, exponentials in y's
// rows where those rows do not start within 512 bytes of each other modulo 4 KiB.
TEST_CASE("softmax fuses its products by the L1's size, the vendor and y's stride") {
  const bool amd = detected_cpu_features().amd;
  const std::size_t l1 = l1_cache_bytes();
  INFO("L1 ", l1, " bytes");
  CHECK(l1 >= (std::size_t{16} << 10));
  CHECK(detail::rows_alias(4096));
  CHECK(detail::rows_alias(16384 + 511));
  CHECK(detail::rows_alias(8192 - 511));
  CHECK_FALSE(detail::rows_alias(4096 + 512));
  CHECK_FALSE(detail::rows_alias(3072));
  const std::size_t cols = l1 / 12;  // two fp32 rows and one of fp32 x: all of L1
  CHECK(detail::softmax_fuses(true, cols, sizeof(float), 0) == !amd);
  CHECK(detail::softmax_fuses(false, cols, sizeof(float), 3072));
  CHECK_FALSE(detail::softmax_fuses(false, cols, sizeof(float), 4096));
  CHECK_FALSE(detail::softmax_fuses(false, cols + 1, sizeof(float), 3072));
  CHECK_FALSE(detail::softmax_fuses(true, l1 / 10 + 1, sizeof(bf16), 0));
  CHECK(detail::softmax_fuses(false, 768, sizeof(float), 768 * sizeof(float)));
  {
    const softmax_fusion_of on(true);
    CHECK(detail::softmax_fuses(false, cols + 1, sizeof(float), 4096));
  }
  {
    const softmax_fusion_of off(false);
    CHECK_FALSE(detail::softmax_fuses(false, 768, sizeof(float), 768 * sizeof(float)));
  }
  CHECK(detail::softmax_fuses(false, 768, sizeof(float), 768 * sizeof(float)));
}

TEST_CASE("softmax gives the same bits with its products fused or not") {
  same_bits_fused<float>("float");
  same_bits_fused<bf16>("bf16");
  same_bits_fused<fp8_e4m3>("fp8_e4m3");
}

TEST_CASE("non-temporal stores by default from 16 MiB") {
  const std::string vendor = cpuinfo_vendor();
  INFO("vendor_id: ", vendor);
  if (!vendor.empty()) CHECK(detected_cpu_features().amd == (vendor == "AuthenticAMD"));
  const std::size_t by_default = std::size_t{16} << 20;
  CHECK(stream_threshold() == by_default);
  {
    const stream_threshold_of every(0);
    CHECK(stream_threshold() == 0);
  }
  CHECK(stream_threshold() == by_default);
}

TEST_CASE("the kernels give the same bits with non-temporal stores") {
  same_bits_streamed<float>("float");
  same_bits_streamed<bf16>("bf16");
  same_bits_streamed<fp16>("fp16");
  same_bits_streamed<fp8_e4m3>("fp8_e4m3");
}

TEST_CASE("layernorm, rmsnorm and softmax give the same bits row by row as by blocks of rows") {
  same_bits_row_by_row<float>("float");
  same_bits_row_by_row<bf16>("bf16");
  same_bits_row_by_row<fp8_e4m3>("fp8_e4m3");
}

TEST_CASE("the kernels give the same bits for every block size") {
  INFO("row_block_bytes() is ", row_block_bytes(), " (L2 ", l2_cache_bytes(), " bytes)");
  CHECK(row_block_bytes() >= (std::size_t{128} << 10));
  CHECK(row_block_bytes() <= (std::size_t{1} << 20));
  {
    const test::row_blocks_of blocks(0);
    CHECK(row_block_bytes() == 1);
  }
  same_bits_for_every_block_size<float>("float");
  same_bits_for_every_block_size<bf16>("bf16");
  same_bits_for_every_block_size<fp8_e4m3>("fp8_e4m3");
}

}  // namespace
}  // namespace tilekern
