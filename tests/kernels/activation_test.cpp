// kernels/activation.hpp against reference::activation (fp64), for every act, on the active ISA
// path (CTest runs this binary once per TILEKERN_ISA cap), outputs in guarded buffers:
// - float in, float out: about 70000 inputs per function (a dense grid over [-30, 30] and
//   log-spaced magnitudes from 1e-38 to 3e38 of both signs), those in the function's stated range
//   (accuracy(f) in simd/math.hpp): within accuracy(f).max_ulp fp32 ulp of the fp64 value (ulp as
//   simd/math.hpp defines it: 2^-149 below 2^-126); NaN where the reference is NaN; inf where it
//   is inf (also outside the range); the reference's sign where it is 0 or inf (f(-0), 1 / -0).
// - every format F in and out, every code of F as input (tf32: every third code), nearest even
//   and stochastic (seed 7): for inputs in the stated range whose fp64 result r is within F's
//   range, with d = max_ulp fp32 ulp of r (the fp32 result lies in [r - d, r + d]):
//     nearest even: the code is F::from(r - d) or F::from(r + d). These are F::from(r) or, where a
//       rounding boundary of F lies within d of r, the codes on either side of it; so the code is
//       the correctly rounded result or its neighbour across a boundary the function's own error
//       can cross (within 1 code always), and exactly F::from(r) where no boundary is that close;
//     stochastic: between the largest value of F <= r - d and the smallest >= r + d (one of the
//       two codes bracketing the fp32 result); the same seed gives the same bytes.
//   NaN where the reference is NaN; the reference's sign where it is 0 or inf.
// - a strided 2-D view and a mixed-format call (bf16 in, float out), y = x in place, and the
//   shape error.
// - the tables (formats of at most 16 bits in; y in the same format, rounded to nearest even with
//   either overflow mode, or float): every code of x through a strided view of 253 columns into a
//   guarded y (each row's lookup takes every step: 253 = 31 x 8 + 4 + 1, or 15 x 16 + 8 + 4 + 1
//   with the gathers; streamed, the rows, 258 elements apart, start 4 bytes further into a 64-byte
//   line each (bf16 out; float out 8), so their plain heads and tails take as many lengths),
//   looked up and computed, the same bits, the gaps between rows untouched; in place; the kernel
//   itself; and when a call builds a table (at least as many elements as x has codes), also from
//   four threads at once.
// - every act through the kernel with every output streamed (non-temporal stores) and with none,
//   over rows that start at many offsets into a 64-byte line: the same bits.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/elements.hpp"
#include "support/formats.hpp"
#include "support/guarded.hpp"
#include "tilekern/kernels/activation.hpp"
#include "tilekern/reference/activation.hpp"
#include "tilekern/simd/math.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

using test::bits_of;
using test::bracket;

// simd/math.hpp's ulp of an exact result y.
double ulp32(double y) {
  const double a = std::abs(y);
  if (a < 0x1p-126) return 0x1p-149;
  return std::ldexp(1.0, std::ilogb(a) - 23);
}

bool in_range(act f, double x) {
  const act_accuracy a = accuracy(f);
  return x >= a.lo && x <= a.hi;
}

std::vector<float> float_inputs() {
  std::vector<float> x;
  for (int i = -30000; i <= 30000; ++i) x.push_back(static_cast<float>(i * 1e-3));
  for (int i = 0; i <= 4000; ++i) {
    const auto magnitude = static_cast<float>(std::pow(10.0, -38.0 + i * (76.4 / 4000)));
    x.push_back(magnitude);
    x.push_back(-magnitude);
  }
  x.push_back(0.0f);
  x.push_back(-0.0f);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  return x;
}

TEST_CASE("activation kernel, float: within accuracy(f) of the fp64 reference") {
  const std::vector<float> inputs = float_inputs();
  test::guarded_buffer<float> x(inputs.size()), y(inputs.size());
  std::copy(inputs.begin(), inputs.end(), x.data());
  for (act f : all_acts) {
    CAPTURE(name(f));
    activation(x.cspan(), y.span(), f);
    double worst = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const double ref = reference::activation(f, inputs[i]);
      INFO("x ", inputs[i], ": y ", y[i], ", reference ", ref);
      if (std::isnan(ref)) {
        CHECK(std::isnan(y[i]));
        continue;
      }
      if (ref == 0 || std::isinf(ref)) CHECK(std::signbit(y[i]) == std::signbit(ref));
      if (std::abs(ref) > std::numeric_limits<float>::max()) {
        // Beyond fp32: inf, or max where the exact value rounds down to it.
        CHECK(std::abs(static_cast<double>(y[i])) >= std::numeric_limits<float>::max());
      } else if (in_range(f, inputs[i])) {
        const double error = std::abs(y[i] - ref) / ulp32(ref);
        worst = std::max(worst, error);
        CHECK(error <= accuracy(f).max_ulp);
      }
    }
    MESSAGE(name(f), ": largest error ", worst, " ulp (stated ", accuracy(f).max_ulp, ")");
  }
}

template <class F>
void check_format() {
  const std::size_t step = F::code_bits > 16 ? 3 : 1;
  std::vector<F> inputs;
  for (std::uint32_t code = 0; code < (1u << F::code_bits); code += step)
    inputs.push_back(F::from_code(code));
  const std::size_t n = inputs.size();
  test::guarded_buffer<F> x(n), y(n), again(n);
  std::copy(inputs.begin(), inputs.end(), x.data());
  const double max = std::numeric_limits<F>::max().to_double();
  for (act f : all_acts) {
    for (rounding mode : {rounding::nearest_even, rounding::stochastic}) {
      const cast_options cast{.round = mode, .seed = 7};
      CAPTURE(format_name<F>());
      CAPTURE(name(f));
      CAPTURE(mode == rounding::nearest_even ? "nearest" : "stochastic");
      activation(x.cspan(), y.span(), f, cast);
      std::size_t checked = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double xi = inputs[i].to_double();
        const double ref = reference::activation(f, xi);
        INFO("x ", xi, " (code ", inputs[i].code(), "): y ", y[i].to_double(), " (code ",
             y[i].code(), "), reference ", ref);
        if (std::isnan(ref)) {
          CHECK(y[i].is_nan());
          continue;
        }
        if (ref == 0 || std::isinf(ref)) CHECK(y[i].is_negative() == std::signbit(ref));
        if (!in_range(f, xi) || std::abs(ref) > max) continue;
        const double d = accuracy(f).max_ulp * ulp32(ref);
        const double v = y[i].to_double();
        if (mode == rounding::nearest_even) {
          const F lo = F::from(ref - d), hi = F::from(ref + d);
          CHECK((y[i].bits() == lo.bits() || y[i].bits() == hi.bits()));
        } else {
          const auto [down, up] = bracket<F>(ref - d, ref + d);
          CHECK((v >= down && v <= up));
        }
        ++checked;
      }
      CHECK(checked > n / 4);
      if (mode == rounding::stochastic) {
        activation(x.cspan(), again.span(), f, cast);
        CHECK(std::equal(y.data(), y.data() + n, again.data(),
                         [](F a, F b) { return a.bits() == b.bits(); }));
      }
    }
  }
}

TEST_CASE("activation kernel, every format: the correctly rounded result or its neighbour") {
  tilekern::test::for_each_test_format([]<class F>() { check_format<F>(); });
}

TEST_CASE("activation kernel: strided views, mixed formats, in place, shape errors") {
  constexpr std::size_t rows = 5, cols = 33, stride = 40;
  test::guarded_buffer<bf16> x((rows - 1) * stride + cols);
  test::guarded_buffer<float> y((rows - 1) * stride + cols);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = bf16::from(static_cast<double>(i % 97) * 0.1 - 4.0);
  activation(view<const bf16>(x.data(), rows, cols, stride),
             view<float>(y.data(), rows, cols, stride), act::silu);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      const double xi = x[r * stride + c].to_double();
      const double ref = reference::activation(act::silu, xi);
      CHECK(std::abs(y[r * stride + c] - ref) <= accuracy(act::silu).max_ulp * ulp32(ref));
    }
    for (std::size_t c = cols; c < stride && r + 1 < rows; ++c) CHECK(y[r * stride + c] == 0.0f);
  }
  // In place: the same codes as into another buffer.
  test::guarded_buffer<bf16> out(x.size());
  activation(x.cspan(), out.span(), act::gelu_tanh);
  activation(x.cspan(), x.span(), act::gelu_tanh);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i].bits() == out[i].bits());

  std::vector<float> in(12, 1.0f), result(12, 7.0f);
  CHECK_THROWS_WITH_AS(
      activation(view<const float>(in.data(), 3, 4), view<float>(result.data(), 1, 4), act::relu),
      "tilekern::activation: y is 1x4, expected 3x4 (the shape of x)", shape_error);
  CHECK(std::all_of(result.begin(), result.end(), [](float v) { return v == 7.0f; }));
}

// Every code of X, at element (r, c) of a rows x cols view with a stride of cols + 5, into a y of
// the same layout ending at a guard page: the lookup against the computed pass, bit for bit.
template <class X, class Y>
void check_tables(act f, overflow on_overflow) {
  constexpr std::size_t codes = std::size_t{1} << X::code_bits, cols = 253, stride = cols + 5;
  constexpr std::size_t rows = (codes + cols - 1) / cols, size = (rows - 1) * stride + cols;
  CAPTURE(format_name<X>());
  const char* y_format = std::is_same_v<Y, float> ? "float" : "the same format";
  CAPTURE(y_format);
  CAPTURE(name(f));
  CAPTURE(on_overflow == overflow::saturate ? "saturate" : "standard");
  test::guarded_buffer<X> x(size);
  test::guarded_buffer<Y> computed(size), kernel(size);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c)
      x[r * stride + c] = X::from_code(static_cast<std::uint32_t>((r * cols + c) % codes));
  }
  const view<const X> xv(x.data(), rows, cols, stride);
  const auto y_view = [&](test::guarded_buffer<Y>& y) {
    return view<Y>(y.data(), rows, cols, stride);
  };
  const auto same = [&](test::guarded_buffer<Y>& a, test::guarded_buffer<Y>& b) {
    std::size_t differ = 0;
    for (std::size_t i = 0; i < size; ++i) differ += bits_of(a[i]) != bits_of(b[i]) ? 1 : 0;
    return differ;
  };
  const cast_options cast{.on_overflow = on_overflow};
  detail::activation_computed(xv, y_view(computed), f, cast);
  const Y* table = detail::activation_table<X, Y>(f, on_overflow, true);
  REQUIRE(table != nullptr);
  // Element by element, with the gathers wherever the AVX-512 path is active (whatever the CPU:
  // by default only those with AVX512-FP16 gather), and streamed (whatever y's size).
  for (const auto& way : {std::pair{false, false}, {true, false}, {false, true}}) {
    const bool gather = way.first, streamed = way.second;
    CAPTURE(gather);
    CAPTURE(streamed);
    test::guarded_buffer<Y> looked_up(size);
    detail::activation_lookup(xv, y_view(looked_up), table, gather, streamed);
    CHECK(same(computed, looked_up) == 0);
    for (std::size_t r = 0; r + 1 < rows; ++r) {  // the gaps between rows are left alone
      for (std::size_t c = cols; c < stride; ++c) CHECK(bits_of(looked_up[r * stride + c]) == 0);
    }
  }
  activation(xv, y_view(kernel), f, cast);  // takes the table now, whatever its size
  CHECK(same(computed, kernel) == 0);
  if constexpr (std::is_same_v<X, Y>) {  // in place
    activation(xv, view<X>(x.data(), rows, cols, stride), f, cast);
    CHECK(same(computed, x) == 0);
  }
}

TEST_CASE("activation kernel, tables: the bits of the computed pass") {
  tilekern::test::for_each_test_format([]<class F>() {
    if constexpr (detail::tabulated_format<F>) {
      for (act f : all_acts) {
        if (!detail::tabulated(f)) continue;
        for (overflow on_overflow : {overflow::standard, overflow::saturate})
          check_tables<F, F>(f, on_overflow);
        check_tables<F, float>(f, overflow::standard);
      }
    }
  });
}

TEST_CASE("activation kernel, tables: built by a call of at least as many elements as codes") {
  // fp16 in, bf16 out: no other test makes this table.
  const auto built = [] {
    return detail::activation_table<fp16, bf16>(act::mish, overflow::saturate, false) != nullptr;
  };
  const cast_options saturate{.on_overflow = overflow::saturate};
  std::vector<fp16> x(65536, fp16(0.5f));
  std::vector<bf16> y(65536);
  REQUIRE_FALSE(built());
  activation(std::span<const fp16>(x.data(), 65535), std::span<bf16>(y.data(), 65535), act::mish,
             saturate);
  CHECK_FALSE(built());
  activation(x, y, act::mish, {.round = rounding::stochastic});  // stochastic: computed
  CHECK_FALSE(built());
  activation(x, y, act::mish, saturate);
  CHECK(built());
  std::vector<bf16> computed(1);
  detail::activation_computed(view<const fp16>(x.data(), 1, 1), view<bf16>(computed.data(), 1, 1),
                              act::mish, saturate);
  CHECK(y[65535].bits() == computed[0].bits());
}

TEST_CASE("activation kernel, tables: threads that build the same table at once") {
  // fp16 in, fp8_e4m3 out: no other test makes this table.
  std::vector<fp16> x(65536);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = fp16::from_code(static_cast<std::uint32_t>(i));
  std::vector<fp8_e4m3> computed(x.size());
  detail::activation_computed(view<const fp16>(x.data(), 1, x.size()),
                              view<fp8_e4m3>(computed.data(), 1, x.size()), act::erf, {});
  std::vector<std::vector<fp8_e4m3>> y(4, std::vector<fp8_e4m3>(x.size()));
  std::vector<std::thread> threads;
  for (auto& out : y) threads.emplace_back([&x, &out] { activation(x, out, act::erf); });
  for (auto& thread : threads) thread.join();
  for (const auto& out : y) {
    CHECK(std::equal(out.begin(), out.end(), computed.begin(),
                     [](fp8_e4m3 a, fp8_e4m3 b) { return a.bits() == b.bits(); }));
  }
}

// Every act from X into Y, x a view of rows x 253 of every code of X (at least as many elements as
// codes, so the functions with tables take them), y of the same layout ending at a guard page:
// with every output streamed (stream threshold 0) and with none, the same bits, the gaps between
// rows untouched. Rows `stride` elements apart: 258 starts each row of a bf16 y 4 bytes further
// into a 64-byte line (float 8), which the lookup streams row by row; 320 starts every row at the
// same offset (the stride whole lines), which the computed pass needs to stream.
template <class X, class Y>
void check_streamed(rounding round, std::size_t stride) {
  constexpr std::size_t cols = 253, codes = std::size_t{1} << X::code_bits;
  const std::size_t rows = (codes + cols - 1) / cols, size = (rows - 1) * stride + cols;
  CAPTURE(stride);
  CAPTURE(format_name<X>());
  const std::string y_format = [] {
    if constexpr (std::is_same_v<Y, float>) {
      return std::string("float");
    } else {
      return format_name<Y>();
    }
  }();
  CAPTURE(y_format);
  CAPTURE(round == rounding::stochastic ? "stochastic" : "nearest even");
  test::guarded_buffer<X> x(size);
  for (std::size_t i = 0; i < size; ++i) x[i] = X::from_code(static_cast<std::uint32_t>(i % codes));
  const view<const X> xv(x.data(), rows, cols, stride);
  for (act f : all_acts) {
    CAPTURE(name(f));
    test::guarded_buffer<Y> plain(size), streamed(size);
    const cast_options cast{.round = round, .seed = 11};
    set_stream_threshold(SIZE_MAX);
    activation(xv, view<Y>(plain.data(), rows, cols, stride), f, cast);
    set_stream_threshold(0);
    activation(xv, view<Y>(streamed.data(), rows, cols, stride), f, cast);
    set_stream_threshold(std::nullopt);
    std::size_t differ = 0, gaps = 0;
    for (std::size_t i = 0; i < size; ++i) {
      differ += bits_of(plain[i]) != bits_of(streamed[i]) ? 1 : 0;
      gaps += i % stride >= cols && bits_of(streamed[i]) != 0 ? 1 : 0;
    }
    CHECK(differ == 0);
    CHECK(gaps == 0);
  }
}

TEST_CASE("activation kernel: the same bits streamed (non-temporal stores) or not") {
  for (std::size_t stride : {258, 320}) {
    for (rounding round : {rounding::nearest_even, rounding::stochastic}) {
      check_streamed<bf16, bf16>(round, stride);
      check_streamed<bf16, float>(round, stride);
      check_streamed<fp16, fp8_e4m3>(round, stride);
    }
    check_streamed<fp8_e5m2, bf16>(rounding::nearest_even, stride);
  }
}

}  // namespace
}  // namespace tilekern
