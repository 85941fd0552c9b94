// simd/math.hpp: every activation against reference::activation (fp64), in fp32 ulp of the exact
// result (the spacing of fp32 at |exact|, 2^-149 in the subnormals), over a dense strided sweep
// of every fp32 input in [lo, hi] on the active ISA path, and over every fp32 input in [lo, hi]
// on the widest path (the "long" suite). Then the special values, and the same bits for every
// lane count.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tilekern/reference/activation.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/simd/math.hpp"

namespace tilekern::test {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

constexpr float infinity = std::numeric_limits<float>::infinity();
constexpr float quiet_nan = std::numeric_limits<float>::quiet_NaN();

// The lane counts this build has: 1 always, 8 where Highway's target is AVX2 or better, 16 where
// it is AVX-512.
std::vector<std::size_t> compiled_lane_counts() {
  std::vector<std::size_t> counts = {1};
#if HWY_TARGET <= HWY_AVX2
  counts.push_back(8);
#endif
#if HWY_TARGET <= HWY_AVX3
  counts.push_back(16);
#endif
  return counts;
}

// The lane count of an ISA path, as the scalar engine uses it.
std::size_t lanes_of(isa level) {
  if (level >= isa::avx512) return 16;
  if (level == isa::avx2) return 8;
  return 1;
}

// out[i] = f(in[i]) on N lanes; n is a multiple of 16.
template <act F, std::size_t N>
void apply_lanes(const float* in, float* out, std::size_t n) {
  const hn::Simd<float, N, 0> d;
  for (std::size_t i = 0; i < n; i += N) {
    hn::StoreU(detail::activate<F>(d, hn::LoadU(d, in + i)), d, out + i);
  }
}

// No doctest assertion here: the sweeps call it from several threads.
template <act F>
bool apply(std::size_t lanes, const float* in, float* out, std::size_t n) {
  if (n % 16 != 0) return false;
  switch (lanes) {
#if HWY_TARGET <= HWY_AVX3
    case 16:
      apply_lanes<F, 16>(in, out, n);
      return true;
#endif
#if HWY_TARGET <= HWY_AVX2
    case 8:
      apply_lanes<F, 8>(in, out, n);
      return true;
#endif
    case 1:
      apply_lanes<F, 1>(in, out, n);
      return true;
    default:
      return false;
  }
}

void apply(std::size_t lanes, act f, const float* in, float* out, std::size_t n) {
  const bool done = detail::visit_act(
      f, [&](auto function) { return apply<decltype(function)::value>(lanes, in, out, n); });
  REQUIRE_MESSAGE(done, "no path with " << lanes << " lanes in this build, or n = " << n);
}

// fp32 values in order as unsigned keys: -max ... -0, +0 ... max are consecutive.
std::uint32_t key_of(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}
float float_of(std::uint32_t key) {
  return std::bit_cast<float>((key & 0x80000000u) != 0 ? key & 0x7fffffffu : ~key);
}

// |got - exact| in ulp of exact; infinite when got is NaN, inf or of the wrong kind.
inline double ulp_error(float got, double exact) {
  constexpr double fail = std::numeric_limits<double>::infinity();
  const double difference = std::fabs(static_cast<double>(got) - exact);
  if (!(difference <= std::numeric_limits<double>::max())) {  // NaN or inf somewhere
    if (std::isnan(exact) || std::isnan(got)) {
      return std::isnan(exact) && std::isnan(got) ? 0 : fail;
    }
    return static_cast<float>(exact) == got ? 0 : fail;  // inf - inf, or an infinite error
  }
  const auto rounded = static_cast<float>(exact);
  if (std::isinf(rounded)) return got == rounded ? 0 : fail;  // overflow: exact rounds to inf
  // 1 / ulp = 2^(23 - exponent of exact), built from the fp64 exponent field.
  const auto exponent_field = (std::bit_cast<std::uint64_t>(exact) >> 52) & 0x7ff;
  const double inverse_ulp = exponent_field < 1023 - 126
                                 ? 0x1p149
                                 : std::bit_cast<double>((2 * 1023 + 23 - exponent_field) << 52);
  return difference * inverse_ulp;
}

struct sweep_result {
  double max_ulp = 0;
  float worst_input = 0;
  float worst_output = 0;
  std::uint64_t count = 0;
  bool ok = true;  // every block had a path

  void merge(const sweep_result& other) {
    if (other.max_ulp > max_ulp || count == 0) {
      max_ulp = other.max_ulp;
      worst_input = other.worst_input;
      worst_output = other.worst_output;
    }
    count += other.count;
    ok = ok && other.ok;
  }
};

// Collects inputs in blocks, evaluates them on `lanes` lanes, and keeps the largest error.
template <act F>
class checker {
 public:
  explicit checker(std::size_t lanes) : lanes_(lanes), in_(block), out_(block) {}

  void add(float x) {
    in_[filled_++] = x;
    if (filled_ == block) flush();
  }

  // Adds the inputs with keys [first, first + n), n <= block - filled.
  float* reserve(std::size_t n) {
    float* at = in_.data() + filled_;
    filled_ += n;
    return at;
  }
  static constexpr std::size_t block = 4096;

  void flush() {
    if (filled_ == 0) return;
    const std::size_t n = (filled_ + 15) / 16 * 16;
    std::fill(in_.begin() + static_cast<std::ptrdiff_t>(filled_),
              in_.begin() + static_cast<std::ptrdiff_t>(n), in_[0]);
    result_.ok = apply<F>(lanes_, in_.data(), out_.data(), n) && result_.ok;
    double block_max = -1;
    std::size_t worst = 0;
    for (std::size_t i = 0; i < filled_; ++i) {
      const double error = ulp_error(out_[i], reference::activation(F, in_[i]));
      if (!(error <= block_max)) {
        block_max = error;
        worst = i;
      }
    }
    if (!(block_max <= result_.max_ulp) || result_.count == 0) {
      result_.max_ulp = block_max;
      result_.worst_input = in_[worst];
      result_.worst_output = out_[worst];
    }
    result_.count += filled_;
    filled_ = 0;
  }

  sweep_result result() {
    flush();
    return result_;
  }

 private:
  std::size_t lanes_;
  std::vector<float> in_;
  std::vector<float> out_;
  std::size_t filled_ = 0;
  sweep_result result_;
};

std::string describe(act f, const sweep_result& r, std::size_t lanes) {
  char text[256];
  std::snprintf(text, sizeof text,
                "%-10s %2zu lanes: max %.3f ulp (bound %.1f) at x = %a (%.9g) -> %a; %llu inputs",
                std::string(name(f)).c_str(), lanes, r.max_ulp,
                static_cast<double>(accuracy(f).max_ulp), static_cast<double>(r.worst_input),
                static_cast<double>(r.worst_input), static_cast<double>(r.worst_output),
                static_cast<unsigned long long>(r.count));
  return text;
}

// About `points` inputs spread over [lo, hi] (an odd stride in key order, so that every mantissa
// bit varies), plus both ends and the 2^12 inputs on either side of zero that lie in the range.
template <act F>
sweep_result strided_sweep(std::size_t lanes, std::uint64_t points) {
  const act_accuracy range = accuracy(F);
  const std::uint32_t first = key_of(range.lo), last = key_of(range.hi);
  const std::uint64_t count = std::uint64_t{last} - first + 1;
  const std::uint64_t stride = std::max<std::uint64_t>(1, count / points) | 1;
  checker<F> check(lanes);
  for (std::uint64_t key = first; key <= last; key += stride) {
    check.add(float_of(static_cast<std::uint32_t>(key)));
  }
  check.add(range.lo);
  check.add(range.hi);
  const std::uint32_t zero = key_of(0.0f);
  for (std::uint32_t key = zero - 4096; key < zero + 4096; ++key) {
    if (key >= first && key <= last) check.add(float_of(key));
  }
  return check.result();
}

// Every input in [lo, hi], split between the hardware threads.
template <act F>
sweep_result full_sweep(std::size_t lanes) {
  const act_accuracy range = accuracy(F);
  const std::uint64_t first = key_of(range.lo), last = key_of(range.hi);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<sweep_result> results(threads);
  std::vector<std::thread> workers;
  const std::uint64_t chunk = (last - first + threads) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      checker<F> check(lanes);
      const std::uint64_t begin = first + t * chunk;
      const std::uint64_t end = std::min(last + 1, begin + chunk);
      for (std::uint64_t key = begin; key < end;) {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(end - key, checker<F>::block));
        float* in = check.reserve(n);
        for (std::size_t i = 0; i < n; ++i) in[i] = float_of(static_cast<std::uint32_t>(key + i));
        check.flush();
        key += n;
      }
      results[t] = check.result();
    });
  }
  for (auto& worker : workers) worker.join();
  sweep_result total;
  for (const auto& r : results) total.merge(r);
  return total;
}

// Evaluates f at one input on the active path.
float at(act f, float x) {
  alignas(64) float in[16], out[16];
  std::fill(std::begin(in), std::end(in), x);
  apply(lanes_of(active_isa()), f, in, out, 16);
  return out[0];
}

bool same_bits(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

TEST_CASE("math: names round-trip and every function is listed once") {
  std::size_t index = 0;
  for (act f : all_acts) {
    CHECK(static_cast<std::size_t>(f) == index++);
    CHECK(parse_act(name(f)) == f);
  }
  CHECK(index == static_cast<std::size_t>(act::abs) + 1);
  CHECK(name(act::gelu_erf) == "gelu_erf");
  CHECK(name(act::gelu_tanh) == "gelu_tanh");
  CHECK_FALSE(parse_act("gelu").has_value());
}

TEST_CASE("math: every function within its documented ulp bound on the active path") {
  const std::size_t lanes = lanes_of(active_isa());
  for (act f : all_acts) {
    const sweep_result r = detail::visit_act(f, [&](auto function) {
      return strided_sweep<decltype(function)::value>(lanes, std::uint64_t{1} << 22);
    });
    MESSAGE(describe(f, r, lanes));
    REQUIRE(r.ok);
    CHECK_MESSAGE(r.max_ulp <= accuracy(f).max_ulp, describe(f, r, lanes));
  }
}

TEST_CASE("math: special values on the active path") {
  // NaN in, NaN out, for every function; and the result agrees with the reference, value and
  // kind, at the infinities, zeros, extremes and the overflow and underflow edges.
  const float specials[] = {quiet_nan,
                            -quiet_nan,
                            infinity,
                            -infinity,
                            0.0f,
                            -0.0f,
                            0x1p-149f,
                            -0x1p-149f,
                            0x1p-126f,
                            -0x1p-126f,
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            88.72f,
                            88.7228394f,
                            88.73f,
                            -87.4f,
                            -103.9f,
                            -104.0f,
                            -110.0f,
                            -1e10f,
                            1e10f};
  for (act f : all_acts) {
    CAPTURE(name(f));
    for (float x : specials) {
      CAPTURE(x);
      const float got = at(f, x);
      const double exact = reference::activation(f, x);
      if (std::isnan(x)) {
        CHECK(std::isnan(got));
      } else {
        CHECK(ulp_error(got, exact) <= accuracy(f).max_ulp);
      }
    }
  }
  // The documented limits, literally.
  CHECK(at(act::exp, -infinity) == 0.0f);
  CHECK(at(act::exp, infinity) == infinity);
  CHECK(at(act::exp, 88.73f) == infinity);
  CHECK(at(act::exp, -104.0f) == 0.0f);
  CHECK(at(act::exp, -103.9f) > 0.0f);  // a subnormal, not flushed
  CHECK(at(act::log, 0.0f) == -infinity);
  CHECK(at(act::log, -0.0f) == -infinity);
  CHECK(std::isnan(at(act::log, -1.0f)));
  CHECK(std::isnan(at(act::log, -infinity)));
  CHECK(at(act::log, infinity) == infinity);
  CHECK(at(act::log, 1.0f) == 0.0f);
  CHECK(at(act::tanh, infinity) == 1.0f);
  CHECK(at(act::tanh, -infinity) == -1.0f);
  CHECK(same_bits(at(act::tanh, -0.0f), -0.0f));
  CHECK(at(act::sigmoid, -infinity) == 0.0f);
  CHECK(at(act::sigmoid, infinity) == 1.0f);
  CHECK(at(act::sigmoid, -100.0f) > 0.0f);  // e^-100, subnormal
  CHECK(at(act::erf, infinity) == 1.0f);
  CHECK(at(act::erf, -infinity) == -1.0f);
  CHECK(same_bits(at(act::erf, -0.0f), -0.0f));
  for (act f : {act::silu, act::gelu_erf, act::gelu_tanh, act::mish, act::softplus}) {
    CAPTURE(name(f));
    CHECK(at(f, -infinity) == 0.0f);
    CHECK(at(f, infinity) == infinity);
  }
  CHECK(at(act::softplus, -100.0f) > 0.0f);  // e^-100, not 0
  CHECK(same_bits(at(act::relu, -0.0f), -0.0f));
  CHECK(same_bits(at(act::relu, -1.0f), 0.0f));
  CHECK(std::isnan(at(act::relu, quiet_nan)));
  CHECK(std::isnan(at(act::sqrt, -1.0f)));
  CHECK(same_bits(at(act::sqrt, -0.0f), -0.0f));
  CHECK(at(act::rsqrt, 0.0f) == infinity);
  CHECK(at(act::rsqrt, -0.0f) == -infinity);
  CHECK(same_bits(at(act::rsqrt, infinity), 0.0f));
  CHECK(std::isnan(at(act::rsqrt, -1.0f)));
  CHECK(at(act::reciprocal, 0.0f) == infinity);
  CHECK(at(act::reciprocal, -0.0f) == -infinity);
  CHECK(at(act::square, -infinity) == infinity);
  CHECK(at(act::abs, -infinity) == infinity);
}

TEST_CASE("math: the same bits on every lane count") {
  std::vector<float> inputs;
  std::mt19937 random(12345);
  for (int i = 0; i < (1 << 16); ++i)
    inputs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(random())));
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int i = 0; i < (1 << 16); ++i) inputs.push_back(normal(random));
  for (float x : {quiet_nan, -quiet_nan, infinity, -infinity, 0.0f, -0.0f, 0x1p-149f, 1.0f, -88.8f,
                  88.8f, -104.0f, -120.0f, 0.5f, -0.5f, 0.70710677f}) {
    inputs.push_back(x);
  }
  inputs.resize((inputs.size() + 15) / 16 * 16, 1.0f);
  const std::vector<std::size_t> lane_counts = compiled_lane_counts();
  const std::size_t widest_available = lanes_of(detected_isa());
  for (act f : all_acts) {
    CAPTURE(name(f));
    std::vector<float> expected(inputs.size()), got(inputs.size());
    apply(1, f, inputs.data(), expected.data(), inputs.size());
    for (std::size_t lanes : lane_counts) {
      if (lanes > widest_available) continue;
      CAPTURE(lanes);
      apply(lanes, f, inputs.data(), got.data(), inputs.size());
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        if (!same_bits(got[i], expected[i])) {
          if (mismatches++ == 0) {
            CAPTURE(inputs[i]);
            CAPTURE(got[i]);
            CAPTURE(expected[i]);
            CHECK(same_bits(got[i], expected[i]));
          }
        }
      }
      CHECK(mismatches == 0);
    }
  }
}

TEST_SUITE("long") {
  TEST_CASE("math: every fp32 input in range, on the widest path") {
    const std::size_t lanes = std::min(lanes_of(detected_isa()), compiled_lane_counts().back());
    for (act f : all_acts) {
      const auto start = std::chrono::steady_clock::now();
      const sweep_result r = detail::visit_act(
          f, [&](auto function) { return full_sweep<decltype(function)::value>(lanes); });
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      MESSAGE(describe(f, r, lanes) << " in " << seconds << " s");
      REQUIRE(r.ok);
      CHECK_MESSAGE(r.max_ulp <= accuracy(f).max_ulp, describe(f, r, lanes));
    }
  }
}

}  // namespace
}  // namespace tilekern::test
