// gpsimd::rowwise and the row helpers sum, max, transform and stream: exact row statistics
// against fp64 loops for every format in and out, with outputs written to local memory and
// streamed, a broadcast gamma row, strided and odd shapes, every ISA path and core count; softmax
// and rmsnorm within stated bounds, streamed or not with the same bits; the helpers' edge cases
// (empty rows, NaN, tails, mismatched lengths, a row both written and streamed). Streamed inputs:
// gpsimd_streamed_test.cpp.

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/gpsimd_rows.hpp"

namespace tilekern::test {
namespace {

TEST_CASE("gpsimd: rowwise max, sum and transform with a broadcast gamma, each test format") {
  for_each_test_format([]<class F>() {
    check_stats_everywhere<F, float, F, F, float, F>(100);
    check_stats_everywhere<float, F, float, F, F, float>(200);
  });
}

TEST_CASE("gpsimd: rowwise max, sum and transform or stream, mixed formats, every cast") {
  // Streamed too: every output format, float included.
  check_stats_everywhere<float, float, float, float, float, float, and_streamed_out>(
      300, quick_casts.first(1));
  check_stats_everywhere<bf16, fp8_e4m3, fp8_e5m2, fp16, tf32, fp8_e3m4, and_streamed_out>(
      400, all_casts);
  check_stats_everywhere<fp8_e4m3fn, fp16, bf16, fp8_e4m3, fp8_e4m3fn, bf16, and_streamed_out>(
      500, all_casts);
}

TEST_SUITE("long") {
  TEST_CASE("gpsimd: rowwise statistics, each test format, every cast and core count") {
    // The formats of the test above, so that these are its instantiations: each costs compile
    // time, and this file was the longest compile of CI's build (CONTRIBUTING.md).
    for_each_test_format([]<class F>() {
      check_stats_everywhere<F, float, F, F, float, F>(1000, all_casts, core_configs);
      check_stats_everywhere<float, F, float, F, F, float>(2000, all_casts, core_configs);
    });
  }
}

TEST_CASE("gpsimd: rowwise over rows of 65537 elements") {
  // 6 arrays of 65537 fp32 need 1.5 MiB of local memory per core. At the path of this CTest run.
  for (const cast_options& cast : quick_casts) {
    const core_config config{3, 0};
    gpsimd::options opt = with_cores({.cast = cast}, config);
    opt.local_bytes = std::size_t{2} << 20;
    const std::string what = "65537 " + describe(active_isa(), config, cast);
    check_stats<staged, bf16, float, fp8_e4m3, bf16, float, fp16>({3, 65537}, true, opt, what, 600);
    check_stats<stream_out, bf16, float, fp8_e4m3, bf16, float, fp16>({3, 65537}, true, opt,
                                                                      what + " streamed", 601);
  }
}

TEST_CASE("gpsimd: rowwise gives the same bits for any number of cores and threads") {
  for (const cast_options& cast : all_casts) {
    for (core_config config : core_configs) {
      const gpsimd::options opt = with_cores({.cast = cast}, config);
      const std::string what = "cores " + describe(active_isa(), config, cast);
      check_stats<staged, fp16, bf16, bf16, fp8_e5m2, float, fp8_e3m4>({29, 45, 47, 46}, true, opt,
                                                                       what, 700);
      check_stats<stream_out, fp16, bf16, bf16, fp8_e5m2, float, fp8_e3m4>(
          {29, 45, 47, 46}, true, opt, what + " streamed", 700);
    }
  }
}

TEST_CASE("gpsimd: rowwise outputs start zero-filled") {
  for_each_isa([&](isa level) {
    tensor<float> x(5, 21);
    fill_grid(x, 800);
    tensor<float> y(5, 21, 24);
    tensor<fp8_e4m3> z(5, 21);
    gpsimd::rowwise([](auto, auto, auto) {}, gpsimd::inputs(x.cv()), gpsimd::outputs(y.v(), z.v()));
    check_elements(
        y, [](std::size_t, std::size_t) { return 0.0f; }, std::string(name(level)) + " y");
    check_elements(
        z, [](std::size_t, std::size_t) { return fp8_e4m3::from(0.0); },
        std::string(name(level)) + " z");
    // An output the operator writes only partly: the rest reads as zero.
    gpsimd::rowwise([](auto, auto out, auto) { out[0] = 1.0f; }, gpsimd::inputs(x.cv()),
                    gpsimd::outputs(y.v(), z.v()));
    check_elements(
        y, [](std::size_t, std::size_t c) { return c == 0 ? 1.0f : 0.0f; },
        std::string(name(level)) + " y, first column written");
    // One core takes every row, in order: row r writes only column r, so a value left over from
    // the row before would show.
    std::size_t calls = 0;
    gpsimd::rowwise([&](auto, auto out, auto) { out[calls++] = 1.0f; }, gpsimd::inputs(x.cv()),
                    gpsimd::outputs(y.v(), z.v()), {.cores = 1, .threads = 1});
    check_elements(
        y, [](std::size_t r, std::size_t c) { return c == r ? 1.0f : 0.0f; },
        std::string(name(level)) + " y, one core, column r written in row r");
    // Streamed rows leave the memory as it was: rows 0, 2 and 4 stream y (from x), rows 1 and 3
    // write column r of y's memory, which must be zero elsewhere.
    calls = 0;
    gpsimd::rowwise(
        [&](auto in, auto out, auto) {
          const std::size_t r = calls++;
          if (r % 2 == 0) {
            gpsimd::stream(
                out, [](auto v) { return v; }, in);
          } else {
            out[r] = 1.0f;
          }
        },
        gpsimd::inputs(x.cv()), gpsimd::outputs(y.v(), z.v()), {.cores = 1, .threads = 1});
    check_elements(
        y,
        [&](std::size_t r, std::size_t c) { return r % 2 == 0 ? x(r, c)
                                                   : c == r   ? 1.0f
                                                              : 0.0f; },
        std::string(name(level)) + " y, one core, even rows streamed, column r written in odd");
  });
}

TEST_CASE("gpsimd: rowwise rejects an output row both written and streamed") {
  for_each_isa([&](isa level) {
    CAPTURE(name(level));
    tensor<float> x(6, 19);
    fill_grid(x, 820);
    tensor<bf16> y(6, 19), z(6, 19);
    for (core_config config : {core_config{1, 1}, core_config{3, 0}}) {
      CHECK_THROWS_WITH_AS(
          gpsimd::rowwise(
              [](auto in, auto out0, auto out1) {
                gpsimd::stream(
                    out0, [](auto v) { return v; }, in);
                out1[3] = 2.0f;
                gpsimd::stream(
                    out1, [](auto v) { return v; }, in);
              },
              gpsimd::inputs(x.cv()), gpsimd::outputs(y.v(), z.v()), with_cores({}, config)),
          "tilekern::gpsimd::rowwise: output 1 was streamed and also written in local memory by "
          "the same call of the operator; write an output row one way",
          shape_error);
    }
  });
}

TEST_CASE("gpsimd: rowwise rows use the batch of the active path") {
  for_each_isa([&](isa level) {
    std::size_t lanes = 0;
    std::vector<float> x(10), y(10);
    gpsimd::rowwise([&](auto in, auto) { lanes = decltype(in)::batch::size; }, gpsimd::inputs(x),
                    gpsimd::outputs(y), {.cores = 1});
    CHECK_MESSAGE(lanes == lanes_of(level), name(level));
  });
}

// ---- approximations ----

// softmax: m = max(x), s = sum(exp(x - m)), y = exp(x - m) / s. With exp within 1.47 ulp (see the
// elementwise test) and s summed lane-wise (four running sums per lane of n / (4 lanes) terms each,
// then the four, then the lanes), the relative error of s is at most (n / 4 + 8) 2^-24 and of y at
// most (n / 4 + 12) 2^-24; the test allows (n + 16) 2^-24 relative. rmsnorm: y = x g /
// sqrt(mean(x^2) + eps), x^2 exact, the sum as above, then five roundings: the same bound.
const auto softmax = [](auto x, auto y) {
  using batch = typename decltype(x)::batch;
  const float m = gpsimd::max(x);
  const float s = gpsimd::sum([m](auto v) { return xsimd::exp(v - batch(m)); }, x);
  gpsimd::transform(
      y, [m, s](auto v) { return xsimd::exp(v - batch(m)) / batch(s); }, x);
};

constexpr float rms_epsilon = 1e-5f;
template <bool Streamed>
const auto rmsnorm = [](auto x, auto g, auto y) {
  using batch = typename decltype(x)::batch;
  const float mean_square =
      gpsimd::sum([](auto v) { return v * v; }, x) / static_cast<float>(x.size());
  const float scale = 1.0f / std::sqrt(mean_square + rms_epsilon);
  write_row<Streamed>(
      y, [scale](auto v, auto w) { return v * batch(scale) * w; }, x, g);
};

template <class T>
bool within(const T& got, double ref, double bound) {
  const double v = value_of(got);
  if constexpr (is_float<T>) {
    return std::fabs(v - ref) <= bound;
  } else {  // nearest-even rounding of any value within the bound (monotonic)
    return value_of(T::from(ref - bound)) <= v && v <= value_of(T::from(ref + bound));
  }
}

template <class X, class Y>
void check_softmax_and_rmsnorm(std::size_t rows, std::size_t cols) {
  tensor<X> x(rows, cols, cols + 1);
  fill_uniform(x, 900 + cols, -6, 6);
  tensor<bf16> g(1, cols);
  fill_uniform(g, 901, 0.5, 2);
  const double bound = std::ldexp(static_cast<double>(cols) + 16, -24);
  for_each_isa([&](isa level) {
    tensor<Y> soft(rows, cols), rms(rows, cols, cols + 2);
    gpsimd::rowwise(softmax, gpsimd::inputs(x.cv()), gpsimd::outputs(soft.v()));
    gpsimd::rowwise(rmsnorm<false>, gpsimd::inputs(x.cv(), g.cv()), gpsimd::outputs(rms.v()));
    mismatches failures;
    for (std::size_t r = 0; r < rows; ++r) {
      double m = -HUGE_VAL, s = 0, squares = 0;
      for (std::size_t c = 0; c < cols; ++c) m = std::max(m, value_of(x(r, c)));
      for (std::size_t c = 0; c < cols; ++c) {
        s += std::exp(value_of(x(r, c)) - m);
        squares += value_of(x(r, c)) * value_of(x(r, c));
      }
      const double scale = 1.0 / std::sqrt(squares / static_cast<double>(cols) + rms_epsilon);
      for (std::size_t c = 0; c < cols; ++c) {
        const double want_soft = std::exp(value_of(x(r, c)) - m) / s;
        const double want_rms = value_of(x(r, c)) * scale * value_of(g(0, c));
        if (!within(soft(r, c), want_soft, bound * std::fabs(want_soft))) {
          failures.add(name(level), " softmax (", r, ", ", c, ") ", value_of(soft(r, c)), " vs ",
                       want_soft);
        }
        if (!within(rms(r, c), want_rms, bound * std::fabs(want_rms))) {
          failures.add(name(level), " rmsnorm (", r, ", ", c, ") ", value_of(rms(r, c)), " vs ",
                       want_rms);
        }
      }
    }
    CHECK_MESSAGE(failures.count() == 0, name_of<X>(), " -> ", name_of<Y>(), "\n", failures.text());
    // Streamed, the output or also x: the same bits (for outputs that are not float or bf16 the
    // streamed stats tests cover the encoding; each instantiation here costs compile time).
    if constexpr (std::is_same_v<Y, float> || std::is_same_v<Y, bf16>) {
      tensor<Y> streamed(rows, cols, cols + 3);
      gpsimd::rowwise(rmsnorm<true>, gpsimd::inputs(x.cv(), g.cv()), gpsimd::outputs(streamed.v()));
      CHECK_MESSAGE(same_bits(rms, streamed), name(level), " rmsnorm streamed");
      tensor<Y> streamed_x(rows, cols);
      gpsimd::rowwise(rmsnorm<true>, gpsimd::inputs(gpsimd::streamed(x.cv()), g.cv()),
                      gpsimd::outputs(streamed_x.v()));
      CHECK_MESSAGE(same_bits(rms, streamed_x), name(level), " rmsnorm, x and y streamed");
      gpsimd::rowwise(softmax, gpsimd::inputs(gpsimd::streamed(x.cv())),
                      gpsimd::outputs(streamed_x.v()));
      CHECK_MESSAGE(same_bits(soft, streamed_x), name(level), " softmax, x streamed");
    }
    // Any cores and threads: the same bits on the same path.
    for (core_config config : invariance_configs) {
      tensor<Y> again(rows, cols);
      gpsimd::rowwise(softmax, gpsimd::inputs(x.cv()), gpsimd::outputs(again.v()),
                      with_cores({}, config));
      CHECK_MESSAGE(same_bits(soft, again), name(level), " softmax, cores ", config.cores,
                    " threads ", config.threads);
    }
  });
}

TEST_CASE("gpsimd: rowwise softmax and rmsnorm within the stated bound") {
  check_softmax_and_rmsnorm<float, float>(13, 1000);
  check_softmax_and_rmsnorm<float, float>(5, 3);
  check_softmax_and_rmsnorm<bf16, float>(7, 129);
  for_each_test_format([]<class F>() { check_softmax_and_rmsnorm<float, F>(11, 77); });
  check_softmax_and_rmsnorm<fp8_e4m3, bf16>(9, 64);
}

// ---- the row helpers ----

// Calls body(Arch()) with the batch architecture rowwise uses on each path.
template <class Body>
void with_each_arch(Body&& body) {
  for_each_isa([&](isa level) {
    CAPTURE(name(level));
    std::vector<float> x(1), y(1);
    gpsimd::rowwise([&](auto in, auto) { body(typename decltype(in)::arch()); }, gpsimd::inputs(x),
                    gpsimd::outputs(y), {.cores = 1, .threads = 1});
  });
}

TEST_CASE("gpsimd: sum and max of an empty row") {
  with_each_arch([]<class Arch>(Arch) {
    const gpsimd::row<const float, Arch> empty(nullptr, 0);
    CHECK(gpsimd::sum(empty) == 0.0f);
    CHECK(gpsimd::max(empty) == -std::numeric_limits<float>::infinity());
    CHECK(gpsimd::sum([](auto v) { return v + decltype(v)(1.0f); }, empty) == 0.0f);
  });
}

TEST_CASE("gpsimd: sum, max and transform over every length up to 70, tails included") {
  with_each_arch([]<class Arch>(Arch) {
    using batch = xsimd::batch<float, Arch>;
    for (std::size_t n = 1; n <= 70; ++n) {
      CAPTURE(n);
      guarded_buffer<float> x(n), w(n);
      double total = 0, plus_one = 0, best = -HUGE_VAL, dot = 0;
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>((i * 37) % 23) - 11.0f;  // integers: exact sums
        w[i] = static_cast<float>(i % 5) - 2.0f;
        total += x[i];
        plus_one += x[i] + 1.0;
        best = std::max(best, static_cast<double>(x[i]));
        dot += static_cast<double>(x[i]) * w[i];
      }
      const gpsimd::row<const float, Arch> xr(x.data(), n), wr(w.data(), n);
      CHECK(gpsimd::sum(xr) == total);
      CHECK(gpsimd::max(xr) == best);
      // The padding lanes of the last batch do not count, though f(0) is not 0.
      CHECK(gpsimd::sum([](auto v) { return v + batch(1.0f); }, xr) == plus_one);
      CHECK(gpsimd::max([](auto v) { return v - batch(100.0f); }, xr) == best - 100.0);
      CHECK(gpsimd::sum([](auto a, auto b) { return a * b; }, xr, wr) == dot);
      // f(0) is NaN in the padding lanes (0 / 0): neither sum nor max may see it.
      guarded_buffer<float> positive(n);
      for (std::size_t i = 0; i < n; ++i) positive[i] = 1.0f + static_cast<float>(i);
      const gpsimd::row<const float, Arch> pr(positive.data(), n);
      CHECK(gpsimd::sum([](auto v) { return v / v; }, pr) == static_cast<float>(n));
      CHECK(gpsimd::max([](auto v) { return batch(0.0f) / v; }, pr) == 0.0f);
      // transform writes exactly n elements (the buffer ends at the n-th).
      guarded_buffer<float> y(n);
      gpsimd::transform(
          gpsimd::row<float, Arch>(y.data(), n), [](auto a, auto b) { return a - b; }, xr, wr);
      bool exact = true;
      for (std::size_t i = 0; i < n; ++i) exact = exact && y[i] == x[i] - w[i];
      CHECK(exact);
      // stream on a row that is not an operator's output row is transform.
      guarded_buffer<float> z(n);
      gpsimd::stream(
          gpsimd::row<float, Arch>(z.data(), n), [](auto a, auto b) { return a * b; }, xr, wr);
      for (std::size_t i = 0; i < n; ++i) exact = exact && z[i] == x[i] * w[i];
      CHECK(exact);
    }
  });
}

TEST_CASE("gpsimd: max propagates NaN wherever it is") {
  with_each_arch([]<class Arch>(Arch) {
    for (std::size_t n : {1u, 3u, 4u, 8u, 15u, 16u, 17u, 33u}) {
      for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
        guarded_buffer<float> x(n);
        for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i);
        x[at] = std::numeric_limits<float>::quiet_NaN();
        const gpsimd::row<const float, Arch> xr(x.data(), n);
        CHECK_MESSAGE(std::isnan(gpsimd::max(xr)), "n ", n, " NaN at ", at);
        CHECK_MESSAGE(std::isnan(gpsimd::sum(xr)), "n ", n, " NaN at ", at);
        // NaN made by f at one element only; and -inf everywhere is -inf, not NaN.
        x[at] = static_cast<float>(at);
        const auto nan_at = [&](auto v) {
          using batch = decltype(v);
          return xsimd::select(v == batch(static_cast<float>(at)),
                               batch(std::numeric_limits<float>::quiet_NaN()), v);
        };
        CHECK_MESSAGE(std::isnan(gpsimd::max(nan_at, xr)), "n ", n, " f NaN at ", at);
        CHECK_MESSAGE(gpsimd::max(xr) == static_cast<float>(n - 1), "n ", n);
        for (std::size_t i = 0; i < n; ++i) x[i] = -std::numeric_limits<float>::infinity();
        CHECK(gpsimd::max(xr) == -std::numeric_limits<float>::infinity());
      }
    }
  });
}

TEST_CASE("gpsimd: row helpers reject rows of different lengths") {
  with_each_arch([]<class Arch>(Arch) {
    // Guarded buffers, not vectors of constant size: GCC 12 would warn (-Warray-bounds) about the
    // batch loads it cannot prove unreachable after the length check throws.
    guarded_buffer<float> a(5), b(3), c(5);
    std::fill_n(a.data(), 5, 1.0f);
    std::fill_n(b.data(), 3, 1.0f);
    const gpsimd::row<const float, Arch> ar(a.data(), 5), br(b.data(), 3);
    const auto product = [](auto p, auto q) { return p * q; };
    CHECK_THROWS_WITH_AS(gpsimd::sum(product, ar, br),
                         "tilekern::gpsimd::sum: row 1 has 3 elements, expected 5", shape_error);
    CHECK_THROWS_WITH_AS(gpsimd::max(product, ar, br),
                         "tilekern::gpsimd::max: row 1 has 3 elements, expected 5", shape_error);
    // transform: row 0 is the output.
    CHECK_THROWS_WITH_AS(gpsimd::transform(gpsimd::row<float, Arch>(c.data(), 5), product, ar, br),
                         "tilekern::gpsimd::transform: row 2 has 3 elements, expected 5",
                         shape_error);
    CHECK_THROWS_WITH_AS(gpsimd::transform(
                             gpsimd::row<float, Arch>(c.data(), 4), [](auto p) { return p; }, ar),
                         "tilekern::gpsimd::transform: row 1 has 5 elements, expected 4",
                         shape_error);
    CHECK(std::all_of(c.data(), c.data() + 5, [](float v) { return v == 0.0f; }));
  });
}

TEST_CASE("gpsimd: rowwise lets an operator's exception reach the caller") {
  for (core_config config : core_configs) {
    tensor<float> x(17, 9), y(17, 9);
    fill_grid(x, 950);
    y.fill(-1.0f);
    // A helper's shape_error raised inside the operator.
    CHECK_THROWS_WITH_AS(
        gpsimd::rowwise(
            [](auto in, auto out) {
              gpsimd::transform(
                  out, [](auto v) { return v; }, decltype(in)(in.data(), in.size() - 1));
            },
            gpsimd::inputs(x.cv()), gpsimd::outputs(y.v()), with_cores({}, config)),
        "tilekern::gpsimd::transform: row 1 has 8 elements, expected 9", shape_error);
    // The user's own exception type, thrown on one row only.
    x(11, 4) = 15.0f;
    CHECK_THROWS_WITH_AS(
        gpsimd::rowwise(
            [](auto in, auto) {
              if (gpsimd::max(in) > 14.0f) throw std::domain_error("row too large");
            },
            gpsimd::inputs(x.cv()), gpsimd::outputs(y.v()), with_cores({}, config)),
        "row too large", std::domain_error);
  }
}

}  // namespace
}  // namespace tilekern::test
