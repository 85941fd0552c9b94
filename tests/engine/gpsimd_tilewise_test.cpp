// gpsimd::tilewise<Rows, Cols>: each operator call sees one tile of every tensor, zero-padded at
// the right and bottom edges, at the right place; outputs are written back only inside the
// tensor, with each element's row-major index for stochastic rounding; tile sizes from 1x1 to
// larger than the tensor; every format, every core count.

#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/gpsimd_support.hpp"

namespace tilekern::test {
namespace {

struct shape {
  std::size_t rows, cols;
  std::size_t x_stride = 0, y_stride = 0;  // 0: contiguous
};

constexpr shape tile_shapes[] = {{0, 0},          {0, 5},           {3, 0},   {1, 1},
                                 {15, 17},        {16, 16},         {17, 15}, {5, 7},
                                 {37, 45, 50, 0}, {13, 29, 31, 33}, {1, 100}};

// Per tile: y0 = x + x(0, 0) (the tile's first element: where the tile starts), y1 = the sum of
// the tile's row (the zero padding adds nothing), y2 = 2 x + g (g a broadcast row or a full
// tensor), y3 = x reflected through the tile's centre (brings the padding into view at the edges).
// Exact in fp32 on grid values (|x| <= 16, multiples of 2^-8, tile rows of at most 64).
const auto tile_op = [](const auto& x, const auto& g, auto& y0, auto& y1, auto& y2, auto& y3) {
  using tile_type = std::remove_cvref_t<decltype(x)>;
  constexpr std::size_t rows = tile_type::rows, cols = tile_type::cols;
  for (std::size_t r = 0; r < rows; ++r) {
    float row_sum = 0.0f;
    for (std::size_t c = 0; c < cols; ++c) row_sum += x(r, c);
    for (std::size_t c = 0; c < cols; ++c) {
      y0(r, c) = x(r, c) + x(0, 0);
      y1(r, c) = row_sum;
      y2(r, c) = 2.0f * x(r, c) + g(r, c);
      y3(r, c) = x(rows - 1 - r, cols - 1 - c);
    }
  }
};

template <std::size_t R, std::size_t C, class X, class G, class Y0, class Y1, class Y2, class Y3>
void check_tiles(const shape& s, bool broadcast, const gpsimd::options& opt,
                 const std::string& what, std::uint64_t seed) {
  tensor<X> x(s.rows, s.cols, s.x_stride);
  fill_grid(x, seed);
  tensor<G> g(broadcast ? 1 : s.rows, s.cols);
  fill_grid(g, seed + 1);
  tensor<Y0> y0(s.rows, s.cols, s.y_stride);
  tensor<Y1> y1(s.rows, s.cols);
  tensor<Y2> y2(s.rows, s.cols, s.y_stride);
  tensor<Y3> y3(s.rows, s.cols);
  gpsimd::tilewise<R, C>(tile_op, gpsimd::inputs(x.cv(), g.cv()),
                         gpsimd::outputs(y0.v(), y1.v(), y2.v(), y3.v()), opt);
  // The reference: where each element's tile starts, by integer division.
  const auto xv = [&](std::size_t r, std::size_t c) { return value_of(x(r, c)); };
  const auto index = [&](std::size_t r, std::size_t c) { return r * s.cols + c; };
  check_elements(
      y0,
      [&](std::size_t r, std::size_t c) {
        return expected_output<Y0>(xv(r, c) + xv(r / R * R, c / C * C), cast_of_output(opt.cast, 0),
                                   index(r, c));
      },
      what + " y0");
  check_elements(
      y1,
      [&](std::size_t r, std::size_t c) {
        double sum = 0;
        for (std::size_t k = c / C * C; k < std::min(c / C * C + C, s.cols); ++k) sum += xv(r, k);
        return expected_output<Y1>(sum, cast_of_output(opt.cast, 1), index(r, c));
      },
      what + " y1");
  check_elements(
      y2,
      [&](std::size_t r, std::size_t c) {
        return expected_output<Y2>(2 * xv(r, c) + value_of(g(broadcast ? 0 : r, c)),
                                   cast_of_output(opt.cast, 2), index(r, c));
      },
      what + " y2");
  check_elements(
      y3,
      [&](std::size_t r, std::size_t c) {
        const std::size_t r0 = r / R * R, c0 = c / C * C;
        const std::size_t rr = r0 + (R - 1 - (r - r0)), cc = c0 + (C - 1 - (c - c0));
        return expected_output<Y3>(rr < s.rows && cc < s.cols ? xv(rr, cc) : 0.0,
                                   cast_of_output(opt.cast, 3), index(r, c));
      },
      what + " y3");
}

// Every shape (g broadcast on every other one), on every path, under `casts`, with the core
// configurations `configs` and one threaded run.
template <std::size_t R, std::size_t C, class X, class G, class Y0, class Y1, class Y2, class Y3>
void check_tiles_everywhere(std::uint64_t seed, std::span<const cast_options> casts = all_casts,
                            std::span<const core_config> configs = quick_core_configs) {
  const std::string types = std::to_string(R) + "x" + std::to_string(C) + " tiles " + name_of<X>() +
                            ", " + name_of<G>() + " -> " + name_of<Y0>() + ", " + name_of<Y1>() +
                            ", " + name_of<Y2>() + ", " + name_of<Y3>();
  for_each_isa([&](isa level) {  // tiles are plain fp32; the paths differ in the conversions
    for (const cast_options& cast : casts) {
      for (core_config config : configs) {
        const gpsimd::options opt = with_cores({.cast = cast}, config);
        bool broadcast = seed % 2 == 0;
        for (const shape& s : tile_shapes) {
          broadcast = !broadcast;
          check_tiles<R, C, X, G, Y0, Y1, Y2, Y3>(
              s, broadcast, opt,
              types + (broadcast ? " (broadcast g) " : " ") + describe(level, config, cast) + " " +
                  std::to_string(s.rows) + "x" + std::to_string(s.cols),
              seed++);
        }
      }
      check_tiles<R, C, X, G, Y0, Y1, Y2, Y3>(
          {13, 29, 31, 33}, true, with_cores({.cast = cast}, threaded_config),
          types + " " + describe(level, threaded_config, cast), seed++);
    }
  });
}

TEST_CASE("gpsimd: tilewise with edge tiles, every tile size") {
  check_tiles_everywhere<8, 16, float, float, float, float, float, float>(1, quick_casts.first(1));
  check_tiles_everywhere<1, 1, float, bf16, fp16, float, fp8_e4m3, float>(2);
  check_tiles_everywhere<4, 4, bf16, float, fp8_e5m2, bf16, float, fp8_e3m4>(3);
  check_tiles_everywhere<3, 5, fp8_e4m3fn, tf32, tf32, fp16, fp8_e4m3fn, bf16>(4);
  // Larger than most of the shapes: one padded tile.
  check_tiles_everywhere<16, 32, fp16, fp8_e4m3, float, bf16, fp16, fp8_e4m3>(5);
}

TEST_CASE("gpsimd: tilewise from and into each test format") {
  for_each_test_format([]<class F>() {
    check_tiles_everywhere<4, 8, F, float, F, float, F, F>(10, quick_casts);
    check_tiles_everywhere<2, 3, float, F, float, F, float, F>(20, quick_casts);
  });
}

TEST_SUITE("long") {
  TEST_CASE("gpsimd: tilewise, each test format, every cast and core count") {
    for_each_test_format([]<class F>() {
      check_tiles_everywhere<4, 8, F, F, F, bf16, F, F>(30, all_casts, core_configs);
      check_tiles_everywhere<5, 3, float, F, F, F, fp8_e4m3, F>(40, all_casts, core_configs);
    });
  }
}

TEST_CASE("gpsimd: tilewise over 65537 columns") {
  for (const cast_options& cast : quick_casts) {
    const core_config config{8, 0};
    check_tiles<8, 16, bf16, float, fp8_e4m3, float, bf16, fp16>(
        {3, 65537}, true, with_cores({.cast = cast}, config),
        "65537 " + describe(active_isa(), config, cast), 30);
  }
}

TEST_CASE("gpsimd: tilewise gives the same bits for any number of cores and threads") {
  for (const cast_options& cast : all_casts) {
    for (core_config config : core_configs) {
      check_tiles<4, 8, fp16, bf16, bf16, fp8_e5m2, float, fp8_e4m3>(
          {37, 45, 47, 46}, true, with_cores({.cast = cast}, config),
          "cores " + describe(active_isa(), config, cast), 40);
    }
  }
}

TEST_CASE("gpsimd: tilewise visits tiles in row-major order, aligned, outputs zero-filled") {
  constexpr std::size_t rows = 10, cols = 13;
  tensor<float> x(rows, cols);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) x(r, c) = static_cast<float>(r * cols + c);
  }
  tensor<float> y(rows, cols, cols + 2);
  tensor<bf16> z(rows, cols);
  std::vector<float> firsts;
  bool aligned = true;
  gpsimd::tilewise<4, 4>(
      [&](const accum<4, 4>& in, accum<4, 4>& out, tile<float, 4, 4>&) {
        firsts.push_back(in(0, 0));
        aligned = aligned && reinterpret_cast<std::uintptr_t>(&in) % 64 == 0 &&
                  reinterpret_cast<std::uintptr_t>(&out) % 64 == 0;
        out(1, 1) = 1.0f;  // everything else stays zero
      },
      gpsimd::inputs(x.cv()), gpsimd::outputs(y.v(), z.v()), {.cores = 1});
  std::vector<float> expected;
  for (std::size_t r0 = 0; r0 < rows; r0 += 4) {
    for (std::size_t c0 = 0; c0 < cols; c0 += 4)
      expected.push_back(static_cast<float>(r0 * cols + c0));
  }
  CHECK(firsts == expected);
  CHECK(aligned);
  check_elements(
      y, [](std::size_t r, std::size_t c) { return r % 4 == 1 && c % 4 == 1 ? 1.0f : 0.0f; }, "y");
  check_elements(
      z, [](std::size_t, std::size_t) { return bf16::from(0.0); }, "z");
}

TEST_CASE("gpsimd: tilewise lets an operator's exception reach the caller") {
  tensor<float> x(20, 20), y(20, 20);
  fill_grid(x, 50);
  x(17, 3) = 100.0f;
  for (core_config config : core_configs) {
    const auto run = [&] {
      gpsimd::tilewise<8, 8>(
          [](const auto& in, auto&) {
            for (float v : in.values) {
              if (v == 100.0f) throw std::out_of_range("found 100");
            }
          },
          gpsimd::inputs(x.cv()), gpsimd::outputs(y.v()), with_cores({}, config));
    };
    CHECK_THROWS_WITH_AS(run(), "found 100", std::out_of_range);
  }
}

}  // namespace
}  // namespace tilekern::test
