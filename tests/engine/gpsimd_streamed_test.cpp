// gpsimd::streamed inputs of rowwise: rows that sum, max, transform and stream read straight from
// their tensors, decoding a batch at a time, instead of from local memory. The exact row
// statistics (gpsimd_rows.hpp) with x, g or both streamed, staged or streamed outputs, every
// format in and out, every shape, cast, path and core count; rows that end right before an
// unreadable page, at every length up to 70 (a read past the row crashes); the local memory a
// streamed input does not take; the same bits as staged rows.

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>

#include "engine/gpsimd_rows.hpp"

namespace tilekern::test {
namespace {

constexpr unsigned stream_all = stream_x | stream_g | stream_out;

TEST_CASE("gpsimd: rowwise statistics with streamed inputs, mixed formats, every cast") {
  // x streamed and g staged (local memory holds g first), with streamed outputs; both inputs
  // streamed (g broadcast on every other shape), with outputs written to local memory.
  using variants = std::integer_sequence<unsigned, stream_x | stream_out, stream_x | stream_g>;
  check_stats_everywhere<float, float, float, float, float, float, variants>(3000,
                                                                             quick_casts.first(1));
  check_stats_everywhere<bf16, fp8_e4m3, fp8_e5m2, fp16, tf32, fp8_e3m4, variants>(3100, all_casts);
  check_stats_everywhere<fp8_e4m3fn, fp16, bf16, fp8_e4m3, fp8_e4m3fn, bf16, variants>(3200,
                                                                                       all_casts);
  // Every tensor bf16: stream() then takes blocks of interleaved lanes.
  check_stats_everywhere<bf16, bf16, bf16, bf16, bf16, bf16,
                         std::integer_sequence<unsigned, stream_all>>(3300, all_casts);
}

TEST_CASE("gpsimd: rowwise statistics with every row streamed, each test format") {
  for_each_test_format([]<class F>() {
    check_stats_everywhere<F, F, F, float, F, F, std::integer_sequence<unsigned, stream_all>>(
        3400, quick_casts, core_configs);
  });
}

TEST_CASE("gpsimd: rowwise with streamed inputs gives the same bits for any cores and threads") {
  for (const cast_options& cast : all_casts) {
    for (core_config config : core_configs) {
      const gpsimd::options opt = with_cores({.cast = cast}, config);
      const std::string what = "cores " + describe(active_isa(), config, cast) + " streamed";
      check_stats<stream_all, fp16, bf16, bf16, fp8_e5m2, float, fp8_e3m4>({29, 45, 47, 46}, true,
                                                                           opt, what, 3500);
    }
  }
}

TEST_CASE("gpsimd: a streamed input takes no local memory") {
  // Rows of 65537 (65552 fp32 with padding): g and the four outputs take five arrays, and x,
  // streamed, none. At the path of this CTest run.
  constexpr std::size_t cols = 65537, array_bytes = 65552 * sizeof(float);
  for (const cast_options& cast : quick_casts) {
    const core_config config{3, 0};
    gpsimd::options opt = with_cores({.cast = cast}, config);
    opt.local_bytes = 5 * array_bytes;
    const std::string what = "65537 " + describe(active_isa(), config, cast);
    check_stats<stream_x | stream_out, bf16, float, fp8_e4m3, bf16, float, fp16>(
        {3, cols}, true, opt, what + " streamed x", 3600);
  }
  // With x staged, the same call needs a sixth array.
  tensor<bf16> x(2, cols), g(1, cols), y(2, cols);
  fill_grid(x, 3601);
  fill_grid(g, 3602);
  const auto nothing = [](auto, auto, auto) {};
  const gpsimd::options opt{.local_bytes = 2 * array_bytes};
  CHECK_THROWS_WITH_AS(
      gpsimd::rowwise(nothing, gpsimd::inputs(x.cv(), g.cv()), gpsimd::outputs(y.v()), opt),
      ("tilekern::gpsimd::rowwise: a row of 65537 elements in 3 arrays needs " +
       std::to_string(3 * array_bytes) + " bytes of local memory, options.local_bytes is " +
       std::to_string(2 * array_bytes))
          .c_str(),
      shape_error);
  CHECK_NOTHROW(gpsimd::rowwise(nothing, gpsimd::inputs(gpsimd::streamed(x.cv()), g.cv()),
                                gpsimd::outputs(y.v()), opt));
  // Both streamed: only the output's array.
  const gpsimd::options one_array{.local_bytes = array_bytes};
  CHECK_NOTHROW(gpsimd::rowwise(nothing,
                                gpsimd::inputs(gpsimd::streamed(x.cv()), gpsimd::streamed(g.cv())),
                                gpsimd::outputs(y.v()), one_array));
}

// sum, max, transform and stream over the streamed rows x and w (one row of n elements, each in a
// tensor that ends right before an unreadable page), for every n up to 70: the tails are read
// without touching anything past the row, and padding lanes never count. A staged row p is read
// beside a streamed one.
template <class F>
void check_helpers_on_streamed_rows(isa level) {
  for (std::size_t n = 1; n <= 70; ++n) {
    CAPTURE(n);
    tensor<F> x(1, n), w(1, n), positive(1, n);
    double total = 0, plus_one = 0, best = -HUGE_VAL, dot = 0, dot_p = 0;
    for (std::size_t i = 0; i < n; ++i) {
      // Integers of at most 3 bits: exact in every format, and so are their sums in fp32.
      x(0, i) = expected_output<F>(static_cast<double>((i * 37) % 15) - 7.0, {}, 0);
      w(0, i) = expected_output<F>(static_cast<double>(i % 5) - 2.0, {}, 0);
      positive(0, i) = expected_output<F>(1.0 + static_cast<double>(i % 7), {}, 0);
      total += value_of(x(0, i));
      plus_one += value_of(x(0, i)) + 1.0;
      best = std::max(best, value_of(x(0, i)));
      dot += value_of(x(0, i)) * value_of(w(0, i));
      dot_p += value_of(x(0, i)) * value_of(positive(0, i));
    }
    tensor<float> difference(1, n), product(1, n);
    float sums[5] = {}, maxima[3] = {};
    gpsimd::rowwise(
        [&](auto xr, auto wr, auto pr, auto y, auto z) {
          using batch = typename decltype(xr)::batch;
          sums[0] = gpsimd::sum(xr);
          // The padding lanes of the last batch do not count, though f(0) is not 0, or is NaN.
          sums[1] = gpsimd::sum([](auto v) { return v + batch(1.0f); }, xr);
          sums[2] = gpsimd::sum([](auto a, auto b) { return a * b; }, xr, wr);
          sums[3] = gpsimd::sum([](auto v) { return v / v; }, pr);
          sums[4] = gpsimd::sum([](auto a, auto b) { return a * b; }, xr, pr);
          maxima[0] = gpsimd::max(xr);
          maxima[1] = gpsimd::max([](auto v) { return v - batch(100.0f); }, xr);
          maxima[2] = gpsimd::max([](auto v) { return batch(0.0f) / v; }, pr);
          gpsimd::transform(
              y, [](auto a, auto b) { return a - b; }, xr, wr);
          gpsimd::stream(
              z, [](auto a, auto b) { return a * b; }, xr, wr);
        },
        gpsimd::inputs(gpsimd::streamed(x.cv()), gpsimd::streamed(w.cv()), positive.cv()),
        gpsimd::outputs(difference.v(), product.v()), {.cores = 1, .threads = 1});
    CHECK(sums[0] == total);
    CHECK(sums[1] == plus_one);
    CHECK(sums[2] == dot);
    CHECK(sums[3] == static_cast<float>(n));
    CHECK(sums[4] == dot_p);
    CHECK(maxima[0] == best);
    CHECK(maxima[1] == best - 100.0);
    CHECK(maxima[2] == 0.0f);
    check_elements(
        difference,
        [&](std::size_t, std::size_t c) {
          return static_cast<float>(value_of(x(0, c)) - value_of(w(0, c)));
        },
        name_of<F>() + " " + std::string(name(level)) + " transform");
    check_elements(
        product,
        [&](std::size_t, std::size_t c) {
          return static_cast<float>(value_of(x(0, c)) * value_of(w(0, c)));
        },
        name_of<F>() + " " + std::string(name(level)) + " stream");
  }
}

TEST_CASE("gpsimd: sum, max, transform and stream over streamed rows of every length up to 70") {
  for_each_isa([](isa level) {
    CAPTURE(name(level));
    check_helpers_on_streamed_rows<float>(level);
    for_each_test_format([&]<class F>() { check_helpers_on_streamed_rows<F>(level); });
  });
}

}  // namespace
}  // namespace tilekern::test
