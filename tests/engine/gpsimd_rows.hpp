#pragma once
// The row-wise statistics test shared by the gpsimd row-wise tests: an operator whose results
// are exact in fp32 (max, sum, a product and a difference over each row), checked against fp64
// loops for any formats in and out, with its inputs and outputs staged in local memory or
// streamed, on every shape, path, cast and core count.

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/gpsimd_support.hpp"

namespace tilekern::test {
namespace {

struct shape {
  std::size_t rows, cols;
  std::size_t x_stride = 0, y_stride = 0;  // 0: contiguous
};

constexpr shape row_shapes[] = {
    {1, 0},  {0, 5},         {1, 1},         {3, 15},      {4, 16},
    {5, 17}, {7, 33, 40, 0}, {6, 31, 0, 35}, {9, 7, 8, 9}, {2, 257, 300, 260}};

// What check_stats streams, as flags: the operator's outputs (gpsimd::stream) and its inputs x
// and g (given as gpsimd::streamed). What is not streamed is staged in local memory.
enum streams : unsigned { staged = 0, stream_out = 1, stream_x = 2, stream_g = 4 };

inline std::string streams_text(unsigned streams) {
  std::string text;
  if (streams & stream_out) text += " streamed out";
  if (streams & stream_x) text += " streamed x";
  if (streams & stream_g) text += " streamed g";
  return text;
}

// The statistics staged, and with their outputs streamed.
using and_streamed_out = std::integer_sequence<unsigned, staged, stream_out>;

// A tensor as an input of rowwise: streamed or staged.
template <bool Streamed, class Tensor>
auto rowwise_input(const Tensor& tensor) {
  if constexpr (Streamed) {
    return gpsimd::streamed(tensor);
  } else {
    return tensor;
  }
}

// y = f(x, ...) over a row: gpsimd::stream with Streamed, else gpsimd::transform.
template <bool Streamed>
const auto write_row = [](auto y, auto f, const auto&... x) {
  if constexpr (Streamed) {
    gpsimd::stream(y, f, x...);
  } else {
    gpsimd::transform(y, f, x...);
  }
};

// x - max(x), x * g, sum(x) and max(x * g) on every element of the row: exact in fp32 for
// inputs on the 2^-4 grid with |x| <= 8 and rows up to 65537 long (every partial sum of x is a
// multiple of 2^-4 below 2^20; products are multiples of 2^-8 below 64).
template <bool Streamed>
const auto stats = [](auto x, auto g, auto y0, auto y1, auto y2, auto y3) {
  using batch = typename decltype(x)::batch;
  const float m = gpsimd::max(x);
  const float s = gpsimd::sum(x);
  const float mg = gpsimd::max([](auto a, auto b) { return a * b; }, x, g);
  write_row<Streamed>(
      y0, [m](auto v) { return v - batch(m); }, x);
  write_row<Streamed>(
      y1, [](auto v, auto w) { return v * w; }, x, g);
  write_row<Streamed>(
      y2, [s](auto) { return batch(s); }, x);
  write_row<Streamed>(
      y3, [mg](auto) { return batch(mg); }, x);
};

// Streams: what is streamed (flags of `streams`).
template <unsigned Streams, class X, class G, class Y0, class Y1, class Y2, class Y3>
void check_stats(const shape& s, bool broadcast, const gpsimd::options& opt,
                 const std::string& what, std::uint64_t seed) {
  tensor<X> x(s.rows, s.cols, s.x_stride);
  fill_grid(x, seed, 128, 4);
  tensor<G> g(broadcast ? 1 : s.rows, s.cols);
  fill_grid(g, seed + 1, 128, 4);
  tensor<Y0> y0(s.rows, s.cols, s.y_stride);
  tensor<Y1> y1(s.rows, s.cols);
  tensor<Y2> y2(s.rows, s.cols, s.y_stride);
  tensor<Y3> y3(s.rows, s.cols);
  const auto in = gpsimd::inputs(rowwise_input<(Streams & stream_x) != 0>(x.cv()),
                                 rowwise_input<(Streams & stream_g) != 0>(g.cv()));
  const auto out = gpsimd::outputs(y0.v(), y1.v(), y2.v(), y3.v());
  gpsimd::rowwise(stats<(Streams & stream_out) != 0>, in, out, opt);
  // The reference: plain double loops over each row.
  std::vector<double> row_max(s.rows, -HUGE_VAL), row_sum(s.rows, 0.0),
      row_max_g(s.rows, -HUGE_VAL);
  const auto g_at = [&](std::size_t r, std::size_t c) { return value_of(g(broadcast ? 0 : r, c)); };
  for (std::size_t r = 0; r < s.rows; ++r) {
    for (std::size_t c = 0; c < s.cols; ++c) {
      const double v = value_of(x(r, c));
      row_max[r] = std::max(row_max[r], v);
      row_sum[r] += v;
      row_max_g[r] = std::max(row_max_g[r], v * g_at(r, c));
    }
  }
  const auto index = [&](std::size_t r, std::size_t c) { return r * s.cols + c; };
  check_elements(
      y0,
      [&](std::size_t r, std::size_t c) {
        return expected_output<Y0>(value_of(x(r, c)) - row_max[r], cast_of_output(opt.cast, 0),
                                   index(r, c));
      },
      what + " x - max(x)");
  check_elements(
      y1,
      [&](std::size_t r, std::size_t c) {
        return expected_output<Y1>(value_of(x(r, c)) * g_at(r, c), cast_of_output(opt.cast, 1),
                                   index(r, c));
      },
      what + " x * g");
  check_elements(
      y2,
      [&](std::size_t r, std::size_t c) {
        return expected_output<Y2>(row_sum[r], cast_of_output(opt.cast, 2), index(r, c));
      },
      what + " sum(x)");
  check_elements(
      y3,
      [&](std::size_t r, std::size_t c) {
        return expected_output<Y3>(row_max_g[r], cast_of_output(opt.cast, 3), index(r, c));
      },
      what + " max(x * g)");
}

// Every shape (the gamma broadcast on every other one), on every path, under `casts`, with the
// core configurations `configs` and one threaded run, once for each set of flags in Variants (an
// std::integer_sequence<unsigned, ...> of `streams`; each set costs compile time).
template <class X, class G, class Y0, class Y1, class Y2, class Y3,
          class Variants = std::integer_sequence<unsigned, staged>>
void check_stats_everywhere(std::uint64_t seed, std::span<const cast_options> casts = quick_casts,
                            std::span<const core_config> configs = quick_core_configs) {
  const std::string types = name_of<X>() + ", " + name_of<G>() + " -> " + name_of<Y0>() + ", " +
                            name_of<Y1>() + ", " + name_of<Y2>() + ", " + name_of<Y3>();
  const auto each_variant = [&]<unsigned... Streams>(
      std::integer_sequence<unsigned, Streams...>, const shape& s, bool broadcast,
      const gpsimd::options& opt, const std::string& what) {
    (check_stats<Streams, X, G, Y0, Y1, Y2, Y3>(s, broadcast, opt, what + streams_text(Streams),
                                                seed++),
     ...);
  };
  for_each_isa([&](isa level) {
    for (const cast_options& cast : casts) {
      for (core_config config : configs) {
        const gpsimd::options opt = with_cores({.cast = cast}, config);
        bool broadcast = seed % 2 == 0;
        for (const shape& s : row_shapes) {
          broadcast = !broadcast;
          const std::string what = types + (broadcast ? " (broadcast g) " : " ") +
                                   describe(level, config, cast) + " " + std::to_string(s.rows) +
                                   "x" + std::to_string(s.cols);
          each_variant(Variants(), s, broadcast, opt, what);
        }
      }
      const gpsimd::options threaded = with_cores({.cast = cast}, threaded_config);
      each_variant(Variants(), {9, 7, 8, 9}, true, threaded,
                   types + " " + describe(level, threaded_config, cast));
    }
  });
}

}  // namespace
}  // namespace tilekern::test
