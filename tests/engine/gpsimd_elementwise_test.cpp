// gpsimd::elementwise: every element of every output equals the scalar definition of its format
// applied to the fp64 value of the operator's math, for float and every format in and out (mixed
// too), every rounding and overflow mode, every ISA path, 1-D lengths and 2-D strided shapes,
// broadcast rows, one to three inputs and one or two outputs, and any number of cores and
// threads; approximations (xsimd::erf, tanh, exp) within stated bounds.

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/gpsimd_support.hpp"

namespace tilekern::test {
namespace {

struct shape {
  std::size_t rows, cols;
  std::size_t in_stride = 0, out_stride = 0;  // 0: contiguous
};

// Empty tensors, 1-D lengths around a batch (as one row), and 2-D shapes with odd rows and
// columns, strided inputs, strided outputs and both.
constexpr shape small_shapes[] = {{1, 0},      {0, 7},         {1, 1},          {1, 15},
                                  {1, 16},     {1, 17},        {1, 33},         {3, 17},
                                  {7, 33, 40}, {5, 19, 0, 23}, {9, 31, 37, 45}, {2, 1, 3, 2}};

// The op under test: x * 2 (exact in fp32 on grid values).
const auto twice = [](auto x) { return x * decltype(x)(2.0f); };

template <class In, class Out>
void check_twice(const shape& s, const gpsimd::options& opt, const std::string& what,
                 std::uint64_t seed) {
  tensor<In> x(s.rows, s.cols, s.in_stride);
  fill_grid(x, seed);
  tensor<Out> y(s.rows, s.cols, s.out_stride);
  gpsimd::elementwise(twice, gpsimd::inputs(x.cv()), gpsimd::outputs(y.v()), opt);
  const cast_options cast = cast_of_output(opt.cast, 0);
  check_elements(
      y,
      [&](std::size_t r, std::size_t c) {
        return expected_output<Out>(2.0 * value_of(x(r, c)), cast, r * s.cols + c);
      },
      what);
}

// Every shape, on every path, under `casts` (float outputs: the first only, nothing rounds) and
// `configs`; then a prime length well beyond a batch, split unevenly over threaded cores.
template <class In, class Out>
void check_twice_everywhere(std::uint64_t seed, std::span<const cast_options> casts,
                            std::span<const core_config> configs) {
  const std::string pair = name_of<In>() + " -> " + name_of<Out>();
  if (is_float<Out>) casts = casts.first(1);
  for_each_isa([&](isa level) {
    for (const cast_options& cast : casts) {
      for (core_config config : configs) {
        const gpsimd::options opt = with_cores({.cast = cast}, config);
        for (const shape& s : small_shapes) {
          check_twice<In, Out>(s, opt,
                               pair + " " + describe(level, config, cast) + " " +
                                   std::to_string(s.rows) + "x" + std::to_string(s.cols),
                               seed++);
        }
      }
      const gpsimd::options threaded = with_cores({.cast = cast}, threaded_config);
      check_twice<In, Out>({1, 65537}, threaded,
                           pair + " " + describe(level, threaded_config, cast) + " 65537", seed++);
    }
  });
}

// float to every format, every format to float and to itself, float to float; and mixed pairs.
void check_twice_every_format(std::span<const cast_options> casts,
                              std::span<const core_config> configs) {
  for_each_test_format([&]<class F>() {
    check_twice_everywhere<float, F>(1, casts, configs);
    check_twice_everywhere<F, float>(2, casts, configs);
    check_twice_everywhere<F, F>(3, casts, configs);
  });
  check_twice_everywhere<float, float>(4, casts, configs);
}

void check_twice_mixed_formats(std::span<const cast_options> casts,
                               std::span<const core_config> configs) {
  check_twice_everywhere<bf16, fp8_e4m3>(5, casts, configs);
  check_twice_everywhere<fp16, fp8_e5m2>(6, casts, configs);
  check_twice_everywhere<fp8_e3m4, bf16>(7, casts, configs);
  check_twice_everywhere<tf32, fp8_e4m3fn>(8, casts, configs);
  check_twice_everywhere<fp8_e4m3fn, fp16>(9, casts, configs);
  check_twice_everywhere<fp8_e5m2, tf32>(10, casts, configs);
  check_twice_everywhere<fp8_e4m3, fp8_e3m4>(11, casts, configs);
}

TEST_CASE("gpsimd: elementwise x * 2 from float and each test format into each test format") {
  check_twice_every_format(quick_casts, quick_core_configs);
}

TEST_CASE("gpsimd: elementwise x * 2 between mixed formats") {
  check_twice_mixed_formats(quick_casts, quick_core_configs);
}

TEST_SUITE("long") {
  TEST_CASE("gpsimd: elementwise x * 2, every cast and core count") {
    check_twice_every_format(all_casts, core_configs);
    check_twice_mixed_formats(all_casts, core_configs);
  }
}

TEST_CASE("gpsimd: elementwise over 1000003 elements (a large prime)") {
  // Exact against the definition at every element, with stochastic rounding so that every
  // element's index matters; at the path of this CTest run (TILEKERN_ISA).
  const cast_options cast{rounding::stochastic, overflow::standard, 99, 1};
  for (core_config config : {core_config{1, 1}, core_config{8, 0}}) {
    const gpsimd::options opt = with_cores({.cast = cast}, config);
    check_twice<float, bf16>({1, 1000003}, opt,
                             "float -> bf16 " + describe(active_isa(), config, cast), 12);
    check_twice<bf16, fp8_e4m3>({1, 1000003}, opt,
                                "bf16 -> fp8_e4m3 " + describe(active_isa(), config, cast), 13);
  }
}

// Relu written with select so that -0 gives +0 on every path: exact.
const auto relu = [](auto x) {
  using batch = decltype(x);
  return xsimd::select(x > batch(0.0f), x, batch(0.0f));
};

// Two inputs, the second a broadcast row or a full tensor; two outputs: (x + b, relu(x) * b).
template <class X, class B, class Y, class Z>
void check_two_in_two_out(const shape& s, bool broadcast, const gpsimd::options& opt,
                          const std::string& what, std::uint64_t seed) {
  tensor<X> x(s.rows, s.cols, s.in_stride);
  fill_grid(x, seed);
  tensor<B> b(broadcast ? 1 : s.rows, s.cols, broadcast ? 0 : s.in_stride);
  fill_grid(b, seed + 1000);
  tensor<Y> y(s.rows, s.cols, s.out_stride);
  tensor<Z> z(s.rows, s.cols);
  gpsimd::elementwise([](auto p, auto q) { return std::tuple(p + q, relu(p) * q); },
                      gpsimd::inputs(x.cv(), b.cv()), gpsimd::outputs(y.v(), z.v()), opt);
  const auto b_at = [&](std::size_t r, std::size_t c) { return value_of(b(broadcast ? 0 : r, c)); };
  check_elements(
      y,
      [&](std::size_t r, std::size_t c) {
        return expected_output<Y>(value_of(x(r, c)) + b_at(r, c), cast_of_output(opt.cast, 0),
                                  r * s.cols + c);
      },
      what + " output 0");
  check_elements(
      z,
      [&](std::size_t r, std::size_t c) {
        const double v = value_of(x(r, c));
        return expected_output<Z>((v > 0 ? v : 0.0) * b_at(r, c), cast_of_output(opt.cast, 1),
                                  r * s.cols + c);
      },
      what + " output 1");
}

template <class X, class B, class Y, class Z>
void check_two_in_two_out_everywhere(std::uint64_t seed) {
  const std::string types =
      name_of<X>() + ", " + name_of<B>() + " -> " + name_of<Y>() + ", " + name_of<Z>();
  for_each_isa([&](isa level) {
    for (const cast_options& cast : all_casts) {
      for (core_config config : quick_core_configs) {
        const gpsimd::options opt = with_cores({.cast = cast}, config);
        for (const shape& s : small_shapes) {
          for (bool broadcast : {false, true}) {
            check_two_in_two_out<X, B, Y, Z>(
                s, broadcast, opt,
                types + (broadcast ? " (broadcast) " : " ") + describe(level, config, cast) + " " +
                    std::to_string(s.rows) + "x" + std::to_string(s.cols),
                seed++);
          }
        }
      }
      check_two_in_two_out<X, B, Y, Z>(
          {9, 31, 37, 45}, true, with_cores({.cast = cast}, threaded_config),
          types + " " + describe(level, threaded_config, cast), seed++);
    }
  });
}

TEST_CASE("gpsimd: elementwise with two inputs (one a broadcast row) and two outputs") {
  check_two_in_two_out_everywhere<float, float, float, float>(20);
  check_two_in_two_out_everywhere<float, bf16, fp8_e4m3, float>(21);
  check_two_in_two_out_everywhere<fp16, fp8_e5m2, bf16, fp8_e3m4>(22);
  check_two_in_two_out_everywhere<fp8_e4m3fn, tf32, fp16, fp8_e4m3fn>(23);
  check_two_in_two_out_everywhere<bf16, bf16, bf16, bf16>(24);
  check_two_in_two_out_everywhere<fp8_e4m3, fp8_e3m4, tf32, fp8_e5m2>(25);
}

TEST_CASE("gpsimd: elementwise with three inputs, the first a broadcast row") {
  // x is one row, broadcast; y and z are full and strided: out = x + y - z (exact).
  for_each_isa([&](isa level) {
    for (const cast_options& cast : all_casts) {
      for (core_config config : {quick_core_configs[0], quick_core_configs[1], threaded_config}) {
        const gpsimd::options opt = with_cores({.cast = cast}, config);
        for (const shape& s : {shape{5, 19, 21, 0}, shape{1, 17}, shape{4, 64, 70, 65}}) {
          tensor<fp16> x(1, s.cols);
          tensor<float> y(s.rows, s.cols, s.in_stride);
          tensor<fp8_e5m2> z(s.rows, s.cols);
          fill_grid(x, 30);
          fill_grid(y, 31);
          fill_grid(z, 32);
          tensor<bf16> out(s.rows, s.cols, s.out_stride);
          gpsimd::elementwise([](auto a, auto b, auto c) { return a + b - c; },
                              gpsimd::inputs(x.cv(), y.cv(), z.cv()), gpsimd::outputs(out.v()),
                              opt);
          check_elements(
              out,
              [&](std::size_t r, std::size_t c) {
                return expected_output<bf16>(
                    value_of(x(0, c)) + value_of(y(r, c)) - value_of(z(r, c)), opt.cast,
                    r * s.cols + c);
              },
              "x + y - z " + describe(level, config, cast) + " " + std::to_string(s.rows) + "x" +
                  std::to_string(s.cols));
        }
      }
    }
  });
}

TEST_CASE("gpsimd: elementwise takes contiguous ranges as one-row tensors") {
  // std::vector and std::span in and out; the output a guarded span.
  for_each_isa([&](isa level) {
    for (std::size_t n : {0u, 1u, 15u, 16u, 17u, 100u}) {
      std::vector<float> x(n);
      std::vector<bf16> b(n);
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(i) * 0.25f - 3.0f;
        b[i] = bf16::from(static_cast<double>(i % 7) - 2.5);
      }
      guarded_buffer<fp16> y(n);
      std::vector<float> z(n, -1.0f);
      gpsimd::elementwise([](auto p, auto q) { return std::tuple(p - q, p * q); },
                          gpsimd::inputs(x, std::span<const bf16>(b)),
                          gpsimd::outputs(y.span(), z));
      mismatches failures;
      for (std::size_t i = 0; i < n; ++i) {
        const double p = x[i], q = value_of(b[i]);
        if (y[i].bits() != fp16::from(p - q).bits())
          failures.add(name(level), " y ", i, " ", value_of(y[i]));
        if (z[i] != static_cast<float>(p * q)) failures.add(name(level), " z ", i, " ", z[i]);
      }
      CHECK_MESSAGE(failures.count() == 0, failures.text());
    }
  });
}

// x * 2 over n elements with the output `offset` bytes after the input modulo 4 KiB (the output
// in a guarded buffer), so that the blocks go backward where 0 < offset < 2048 and forward
// otherwise (detail::backward); with `in_place`, x is the output's own memory.
template <class In, class Out>
void check_direction(std::size_t n, std::size_t offset, bool in_place, const gpsimd::options& opt,
                     const std::string& what) {
  guarded_buffer<Out> y(n);
  std::vector<std::byte> storage(n * sizeof(In) + 2 * 4096);
  In* x = nullptr;
  if constexpr (std::is_same_v<In, Out>) {
    if (in_place) x = y.data();
  }
  if (x == nullptr) {
    const auto page = (reinterpret_cast<std::uintptr_t>(storage.data()) + 4095) / 4096 * 4096;
    const auto to = reinterpret_cast<std::uintptr_t>(y.data());
    x = reinterpret_cast<In*>(page + (to - offset) % 4096);
    CHECK_MESSAGE(gpsimd::detail::backward(x, y.data(), n) == (offset != 0 && offset < 2048), what);
  }
  std::mt19937_64 random(n + offset);
  std::vector<In> values(n);
  for (In& v : values) v = grid_value<In>(random);
  std::copy(values.begin(), values.end(), x);
  gpsimd::elementwise(twice, gpsimd::inputs(std::span<const In>(x, n)), gpsimd::outputs(y.span()),
                      opt);
  mismatches failures;
  for (std::size_t i = 0; i < n; ++i) {
    const Out want = expected_output<Out>(2.0 * value_of(values[i]), opt.cast, i);
    if (bits_of(y[i]) != bits_of(want)) {
      failures.add(what, ": element ", i, " is ", value_of(y[i]), ", expected ", value_of(want));
    }
  }
  CHECK_MESSAGE(failures.count() == 0, failures.count(), " mismatches\n", failures.text());
}

TEST_CASE("gpsimd: elementwise gives the same results backward and forward, and in place") {
  const cast_options casts[] = {{}, {rounding::stochastic, overflow::standard, 7, 3}};
  const auto check = [&]<class In, class Out>() {
    for_each_isa([&](isa level) {
      for (const cast_options& cast : casts) {
        for (core_config config : quick_core_configs) {
          const gpsimd::options opt = with_cores({.cast = cast}, config);
          const std::string where =
              name_of<In>() + " -> " + name_of<Out>() + " " + describe(level, config, cast) + " n ";
          for (std::size_t n : {1u, 15u, 16u, 17u, 31u, 32u, 33u, 1000u, 4099u}) {
            for (std::size_t offset : {0u, 4u, 64u, 1000u, 2044u, 2048u, 2052u, 4032u, 4092u}) {
              check_direction<In, Out>(
                  n, offset, false, opt,
                  where + std::to_string(n) + " offset " + std::to_string(offset));
            }
            if constexpr (std::is_same_v<In, Out>) {
              check_direction<In, Out>(n, 0, true, opt, where + std::to_string(n) + " in place");
            }
          }
        }
      }
    });
  };
  check.operator()<float, float>();
  check.operator()<bf16, bf16>();  // interleaved blocks
  check.operator()<fp8_e4m3, fp8_e4m3>();
  check.operator()<bf16, float>();
}

TEST_CASE("gpsimd: elementwise on tiles through their views") {
  tile<bf16, 5, 12> a;
  accum<5, 12> b;
  for (std::size_t r = 0; r < 5; ++r) {
    for (std::size_t c = 0; c < 12; ++c) {
      a(r, c) = bf16::from(static_cast<double>(r) - static_cast<double>(c) / 4);
      b(r, c) = static_cast<float>(c) * 0.5f;
    }
  }
  row_vector<fp16, 12> bias;
  for (std::size_t c = 0; c < 12; ++c) bias(0, c) = fp16::from(static_cast<double>(c % 3));
  accum<5, 12> sum;
  gpsimd::elementwise([](auto p, auto q, auto s) { return p + q + s; },
                      gpsimd::inputs(a.view(), std::as_const(b).view(), bias.view()),
                      gpsimd::outputs(sum.view()));
  bool exact = true;
  for (std::size_t r = 0; r < 5; ++r) {
    for (std::size_t c = 0; c < 12; ++c) {
      const double want = (static_cast<double>(r) - static_cast<double>(c) / 4) + c * 0.5 + c % 3;
      exact = exact && sum(r, c) == static_cast<float>(want);
    }
  }
  CHECK(exact);
}

TEST_CASE("gpsimd: elementwise gives the same bits for any number of cores and threads") {
  // Stochastic rounding into bf16 and fp8, over a 2-D strided shape whose rows do not divide by
  // the cores, at the ISA path of this CTest run (TILEKERN_ISA); every configuration is checked
  // against the definition, so they all agree bit for bit.
  for (const cast_options& cast : all_casts) {
    for (core_config config : core_configs) {
      const gpsimd::options opt = with_cores({.cast = cast}, config);
      check_two_in_two_out<bf16, float, bf16, fp8_e4m3>(
          {37, 129, 131, 130}, true, opt,
          "bf16, float -> bf16, fp8_e4m3 " + describe(active_isa(), config, cast), 40);
      check_twice<float, fp8_e5m2>({1, 4099}, opt,
                                   "float -> fp8_e5m2 " + describe(active_isa(), config, cast), 41);
    }
  }
}

TEST_CASE("gpsimd: elementwise special values follow the scalar definition") {
  // Identity into every format: NaNs (with payloads and signs), infinities, signed zeros,
  // subnormals, values that overflow each format, in every rounding and overflow mode.
  std::vector<float> values;
  for (std::uint32_t bits : {0x00000000u, 0x7f800000u, 0x7fc00000u, 0x7fc12345u, 0x7f812345u,
                             0x00000001u, 0x007fffffu, 0x00800000u, 0x7f7fffffu, 0x3f800000u,
                             0x477fe000u, 0x43700000u, 0x43e80000u, 0x41780000u, 0x3e000000u}) {
    values.push_back(std::bit_cast<float>(bits));
    values.push_back(std::bit_cast<float>(bits | 0x80000000u));
  }
  for (float v : {240.0f, 247.9f, 248.0f, 448.0f, 464.0f, 465.0f, 57344.0f, 61440.0f, 15.5f, 15.75f,
                  16.0f, 65504.0f, 65520.0f, 3.0e38f, 1.0e-40f, 0.3333333f}) {
    values.push_back(v);
    values.push_back(-v);
  }
  const std::size_t n = values.size();
  for_each_test_format([&]<class F>() {
    for_each_isa([&](isa level) {
      for (rounding round : {rounding::nearest_even, rounding::toward_zero, rounding::stochastic}) {
        for (overflow on_overflow : {overflow::standard, overflow::saturate}) {
          const cast_options cast{round, on_overflow, 7, 3};
          guarded_buffer<float> x(n);
          std::copy(values.begin(), values.end(), x.data());
          guarded_buffer<F> y(n);
          gpsimd::elementwise([](auto v) { return v; }, gpsimd::inputs(x.cspan()),
                              gpsimd::outputs(y.span()), {.cores = 3, .cast = cast});
          mismatches failures;
          for (std::size_t i = 0; i < n; ++i) {
            // The scalar definition from the fp32 value, with the element's index.
            const F want = F::from(values[i], cast, i);
            if (y[i].bits() != want.bits()) {
              failures.add(format_name<F>(), " ", name(level), " ", name(round), " ",
                           name(on_overflow), ": ", values[i], " gives ", hex(y[i].bits()),
                           ", defined ", hex(want.bits()));
            }
          }
          CHECK_MESSAGE(failures.count() == 0, failures.text());
        }
      }
    });
  });
}

// ---- approximations ----

// Error bounds of the fp32 results, from xsimd's accuracy (measured over [-12, 12] at 2^-12
// steps on sse2, fma3<avx2> and avx512bw: erf 2.25 ulp, tanh 1.21 ulp, exp 1.47 ulp) and the
// fp32 roundings around them:
//   gelu(x) = x/2 (1 + erf(x / sqrt 2)): the erf term carries at most 4.3 * 2^-24 absolute error
//   (2.25 ulp of erf, the rounding of x / sqrt 2 times t erf'(t) <= 0.49, half an ulp of 1 + erf),
//   then two multiplies: |got - ref| <= 2^-21 (|x| + |ref|). The same bound holds for the tanh
//   form (tanh 1.21 ulp, |u tanh'(u)| < 1, a cubic with three roundings).
//   exp: 1.47 ulp <= 2^-22.4 |ref|, bounded by 2^-21 |ref|; tanh likewise.
double gelu_bound(double x, double ref) {
  return std::ldexp(std::fabs(x) + std::fabs(ref), -21);
}
double relative_bound(double, double ref) {
  return std::ldexp(std::fabs(ref), -21) + 1e-38;
}

const auto gelu_erf = [](auto x) {
  using batch = decltype(x);
  return batch(0.5f) * x * (batch(1.0f) + xsimd::erf(x * batch(0.70710678118654752f)));
};
double gelu_erf_reference(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

const auto gelu_tanh = [](auto x) {
  using batch = decltype(x);
  const batch inner = batch(0.7978845608028654f) * (x + batch(0.044715f) * x * x * x);
  return batch(0.5f) * x * (batch(1.0f) + xsimd::tanh(inner));
};
double gelu_tanh_reference(double x) {
  const double inner = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(inner));
}

// Whether `got` lies where rounding (nearest even) any fp32 value within `bound` of the exact
// result `ref` can put it: between F(ref - bound) and F(ref + bound), rounding being monotonic.
template <class T>
bool within(const T& got, double ref, double bound) {
  const double v = value_of(got);
  if constexpr (is_float<T>) {
    return std::fabs(v - ref) <= bound;
  } else {
    return value_of(T::from(ref - bound)) <= v && v <= value_of(T::from(ref + bound));
  }
}

template <class In, class Out, class Op, class Ref, class Bound>
void check_approximation(Op op, Ref ref, Bound bound, double lo, double hi,
                         const std::string& what) {
  constexpr std::size_t rows = 9, cols = 1031;
  tensor<In> x(rows, cols, cols + 3);
  fill_uniform(x, 50, lo, hi);
  for_each_isa([&](isa level) {
    tensor<Out> first(rows, cols);
    gpsimd::elementwise(op, gpsimd::inputs(x.cv()), gpsimd::outputs(first.v()),
                        {.cores = 1, .threads = 1});
    mismatches failures;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) {
        const double v = value_of(x(r, c)), want = ref(v);
        if (!within(first(r, c), want, bound(v, want))) {
          failures.add(what, " ", name_of<In>(), " -> ", name_of<Out>(), " ", name(level), ": x ",
                       v, " gives ", value_of(first(r, c)), ", reference ", want);
        }
      }
    }
    CHECK_MESSAGE(failures.count() == 0, failures.text());
    // Same path, any cores and threads: the same bits.
    for (core_config config : invariance_configs) {
      tensor<Out> again(rows, cols);
      gpsimd::elementwise(op, gpsimd::inputs(x.cv()), gpsimd::outputs(again.v()),
                          with_cores({}, config));
      CHECK_MESSAGE(same_bits(first, again), what, " ", name(level), " cores ", config.cores,
                    " threads ", config.threads, " differ from one core");
    }
  });
}

TEST_CASE("gpsimd: elementwise gelu (erf and tanh forms) within the stated bound") {
  check_approximation<float, float>(gelu_erf, gelu_erf_reference, gelu_bound, -8, 8, "gelu erf");
  check_approximation<float, float>(gelu_tanh, gelu_tanh_reference, gelu_bound, -8, 8, "gelu tanh");
  for_each_test_format([]<class F>() {
    check_approximation<F, F>(gelu_erf, gelu_erf_reference, gelu_bound, -8, 8, "gelu erf");
    check_approximation<float, F>(gelu_tanh, gelu_tanh_reference, gelu_bound, -8, 8, "gelu tanh");
  });
  check_approximation<bf16, fp8_e4m3>(gelu_erf, gelu_erf_reference, gelu_bound, -8, 8, "gelu erf");
}

TEST_CASE("gpsimd: elementwise exp and tanh into two outputs within the stated bound") {
  for_each_isa([&](isa level) {
    constexpr std::size_t n = 4099;
    tensor<fp16> x(1, n);
    fill_uniform(x, 60, -2, 2);
    tensor<bf16> e(1, n);
    tensor<float> t(1, n);
    gpsimd::elementwise([](auto v) { return std::tuple(xsimd::exp(v), xsimd::tanh(v)); },
                        gpsimd::inputs(x.cv()), gpsimd::outputs(e.v(), t.v()));
    mismatches failures;
    for (std::size_t i = 0; i < n; ++i) {
      const double v = value_of(x(0, i));
      const double want_e = std::exp(v), want_t = std::tanh(v);
      if (!within(e(0, i), want_e, relative_bound(v, want_e)))
        failures.add(name(level), " exp ", v, " gives ", value_of(e(0, i)));
      if (!within(t(0, i), want_t, relative_bound(v, want_t)))
        failures.add(name(level), " tanh ", v, " gives ", t(0, i));
    }
    CHECK_MESSAGE(failures.count() == 0, failures.text());
  });
}

// ---- the batch the operator gets ----

TEST_CASE("gpsimd: a generic operator gets the widest batch of the active path") {
  for_each_isa([&](isa level) {
    std::atomic<std::size_t> lanes{0};
    std::vector<float> x(100, 1.0f), y(100);
    gpsimd::elementwise(
        [&](auto v) {
          lanes = decltype(v)::size;
          return v + decltype(v)(1.0f);
        },
        gpsimd::inputs(x), gpsimd::outputs(y));
    CHECK_MESSAGE(lanes == lanes_of(level), name(level));
    CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 2.0f; }));
  });
}

TEST_CASE("gpsimd: an operator for one batch type runs at that width on every path") {
  for_each_isa([&](isa level) {
    std::atomic<std::size_t> lanes{0};
    std::vector<bf16> x(37), y(37);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = bf16::from(static_cast<double>(i));
    gpsimd::elementwise(
        [&](xsimd::batch<float, xsimd::sse2> v) {
          lanes = 4;
          return v * xsimd::batch<float, xsimd::sse2>(-1.0f);
        },
        gpsimd::inputs(x), gpsimd::outputs(y));
    CHECK_MESSAGE(lanes == 4, name(level));
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(value_of(y[i]) == -static_cast<double>(i));

    // xsimd::batch<float> is the build's default architecture, whatever the cap.
    std::vector<float> z(37);
    gpsimd::elementwise(
        [&](xsimd::batch<float> v) {
          lanes = xsimd::batch<float>::size;
          return v + xsimd::batch<float>(0.5f);
        },
        gpsimd::inputs(x), gpsimd::outputs(z));
    CHECK(lanes == xsimd::batch<float>::size);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(z[i] == static_cast<float>(i) + 0.5f);
  });
}

TEST_CASE("gpsimd: elementwise lets an operator's exception reach the caller") {
  for (core_config config : core_configs) {
    for_each_isa([&](isa level) {
      CAPTURE(name(level));
      CAPTURE(config.cores);
      std::vector<float> x(1000, 1.0f), y(1000);
      x[777] = -1.0f;
      const auto op = [](auto v) {
        if (xsimd::any(v < decltype(v)(0.0f))) throw std::runtime_error("negative input");
        return v;
      };
      CHECK_THROWS_WITH_AS(
          gpsimd::elementwise(op, gpsimd::inputs(x), gpsimd::outputs(y), with_cores({}, config)),
          "negative input", std::runtime_error);
    });
  }
}

}  // namespace
}  // namespace tilekern::test
