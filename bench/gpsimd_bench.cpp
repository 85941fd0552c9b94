// Custom operators through engine/gpsimd.hpp, each against memcpy and against the same operator
// written by hand as a Highway loop, in the same run:
//
//   gpsimd/<op>/<format>/<n>              one thread (gpsimd::options{.threads = 1}, 8 cores)
//   gpsimd/<op>/<format>/<n>/threads:2    the same call on two threads (GBps only)
// (Google Benchmark appends /manual_time to both.)
//
// ops, on N(0, 1) inputs (mt19937, seed 42), in and out in <format>, rounded to nearest even:
//   relu             y = max(x, 0)                                    elementwise
//   gelu_erf         y = 0.5 x (1 + erf(x / sqrt 2))                  elementwise
//   bias_gelu        y = gelu_erf(x + b), b one broadcast row         elementwise, rows x 768
//   tanh_derivative  y0 = tanh x, y1 = 1 - tanh^2 x (two outputs)     elementwise
//   rmsnorm          y = x / sqrt(mean(x^2) + 1e-6) * gamma per row   rowwise + sum + stream,
//                                                                     rows x 768
// formats: bf16 for every op; float, fp16 and fp8_e4m3 too for relu and gelu_erf.
// n: 1 Mi and 16 Mi elements per tensor. The row-wise shapes have floor(n / 768) rows (1365 and
// 21845: n is their nominal size; the label gives the shape).
//
// Counters (the benchmark's own time, UseManualTime, is the gpsimd call's alone):
//   GBps         bytes read + bytes written by the operator (a broadcast row counted once) / time
//   memcpy_frac  memcpy time / gpsimd time: 1 is as fast as copying the operator's input bytes
//   hand_frac    hand-written loop time / gpsimd time: >= 0.9 is "within 10%" (bf16 and float
//                only: formats without a hand loop, and threads:2 rows, have no such counter)
//
// How the ratios are measured, and why they are fair: every iteration times the gpsimd call, a
// memcpy of the operator's (non-broadcast) input bytes into its output 0 buffer, and the
// hand-written loop into the same output buffers, back to back in the same process (in the order
// gpsimd, memcpy, hand, and every other iteration hand, memcpy, gpsimd), so all three see the
// same cache state (each finds the input just read and the output just written by the one before
// it; at 1 Mi bf16 the 2 + 2 MiB stay in L3, at 16 Mi the 32 + 32 MiB do not), the same
// clock frequency and the same neighbours on this shared machine. A ratio is total time over all
// iterations / total gpsimd time. Every ratio is one thread against one thread. For
// tanh_derivative, whose outputs are twice its input, memcpy moves less than the operator.
//
// The hand-written loops (Highway, static target: 16 fp32 lanes on AVX-512, 8 on AVX2) are what
// a competent programmer writes without the framework: load the input, widen bf16 by a 16-bit
// shift (tilekern's decode also quiets signalling NaNs; no input here has one), compute, narrow
// with round-to-nearest-even (vcvtneps2bf16 where the CPU has AVX512-BF16, with an integer fallback
// for blocks holding fp32 subnormals, which the instruction flushes, and for builds without it),
// store; a last partial block goes through a zero-padded stack buffer. A broadcast row (bias,
// gamma) is widened to fp32 once per call. Transcendentals are not re-implemented: the loops call
// the same xsimd function (erf, tanh) on the raw register, and do the rest of the arithmetic in
// Highway with the same operations in the same order. So both sides compute the same math, and
// hand_frac isolates the framework's overhead: decoding, encoding, staging rows in local memory,
// splitting the work over logical cores. Each benchmark first checks that the hand loop writes
// bit-identical outputs to the gpsimd call (and its bf16 narrowing, tilekern's rounding on
// subnormals, NaN, inf and ties) and fails with SkipWithError if not. rmsnorm's sum reproduces
// gpsimd::sum's order: four running sums of the row's blocks (block j into sum j mod 4), added as
// (s0 + s1) + (s2 + s3), then xsimd::hadd's tree (halves of 512 bits, then of 256, then pairs).
//
// The hand loops exist for the build's widest path; when TILEKERN_ISA caps gpsimd below it, or the
// build has no AVX2, the hand_frac counter is left out.

#include "tilekern/engine/gpsimd.hpp"  // first: it silences GCC 12's xsimd warnings (see there)

#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "support/gpsimd_operators.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

constexpr std::size_t cols = 768;  // row length of bias_gelu and rmsnorm
constexpr std::size_t sizes[] = {std::size_t{1} << 20, std::size_t{1} << 24};

using namespace gpsimd_operators;  // the operators, as a user writes them

// ---- buffers and inputs ----

template <class T>
struct aligned_allocator {
  using value_type = T;
  aligned_allocator() = default;
  template <class U>
  explicit aligned_allocator(const aligned_allocator<U>&) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{64}); }
  friend bool operator==(const aligned_allocator&, const aligned_allocator&) { return true; }
};
// 64-byte aligned, so that no 512-bit access straddles a cache line (for either side).
template <class T>
using buffer = std::vector<T, aligned_allocator<T>>;

// n samples of mean + sigma * N(0, 1), fp32, seeded; cached (16 Mi take a while to draw).
const std::vector<float>& normal(std::size_t n, unsigned seed, float mean = 0, float sigma = 1) {
  static std::map<std::tuple<std::size_t, unsigned, float, float>, std::vector<float>> cache;
  std::vector<float>& values = cache[{n, seed, mean, sigma}];
  if (values.empty()) {
    std::mt19937 generator(seed);
    std::normal_distribution<float> distribution(mean, sigma);
    values.resize(n);
    for (float& x : values) x = distribution(generator);
  }
  return values;
}

template <class T>
buffer<T> tensor_of(const std::vector<float>& values) {
  buffer<T> result(values.size());
  if constexpr (std::is_same_v<T, float>) {
    std::copy(values.begin(), values.end(), result.begin());
  } else {
    convert(std::span<const float>(values), std::span<T>(result));
  }
  return result;
}

template <class T>
std::string name_of() {
  if constexpr (std::is_same_v<T, float>) {
    return "float";
  } else {
    return format_name<T>();
  }
}

// ---- the hand-written loops ----

#if defined(TILEKERN_CONVERT_AVX512) && XSIMD_WITH_AVX512BW
#define TILEKERN_BENCH_HAND 1
using hand_arch = xsimd::avx512bw;  // the batch architecture gpsimd uses on this path
constexpr isa hand_isa = isa::avx512;
#elif defined(TILEKERN_CONVERT_AVX2) && XSIMD_WITH_FMA3_AVX2
#define TILEKERN_BENCH_HAND 1
using hand_arch = xsimd::fma3<xsimd::avx2>;
constexpr isa hand_isa = isa::avx2;
#endif

// Which element types have a hand loop: float, and bf16 as its 16-bit codes.
template <class T>
constexpr bool has_hand_loop = std::is_same_v<T, float> || std::is_same_v<T, bf16>;

#if defined(TILEKERN_BENCH_HAND)

namespace hn = hwy::HWY_NAMESPACE;
using xbatch = xsimd::batch<float, hand_arch>;
constexpr std::size_t lanes = xbatch::size;
using D = hn::Simd<float, lanes, 0>;
using DU = hn::RebindToUnsigned<D>;
using D16 = hn::Rebind<std::uint16_t, D>;
using V = hn::Vec<D>;

#define TILEKERN_BENCH_ALWAYS_INLINE __attribute__((always_inline))
#define TILEKERN_BENCH_INLINE TILEKERN_BENCH_ALWAYS_INLINE inline

// The same xsimd function on the raw register (see the top of the file).
TILEKERN_BENCH_INLINE V xsimd_erf(V x) {
  return V{static_cast<xbatch::register_type>(xsimd::erf(xbatch(x.raw)))};
}
TILEKERN_BENCH_INLINE V xsimd_tanh(V x) {
  return V{static_cast<xbatch::register_type>(xsimd::tanh(xbatch(x.raw)))};
}

TILEKERN_BENCH_INLINE V load(const float* p) {
  return hn::LoadU(D(), p);
}
TILEKERN_BENCH_INLINE void store(V v, float* p) {
  hn::StoreU(v, D(), p);
}

// bf16 -> fp32: the code in the top half.
TILEKERN_BENCH_INLINE V load(const std::uint16_t* p) {
  return hn::BitCast(D(), hn::ShiftLeft<16>(hn::PromoteTo(DU(), hn::LoadU(D16(), p))));
}

// fp32 -> bf16, round to nearest even with integers: add 0x7fff plus the kept lsb, keep the top
// half (a carry runs into the exponent, up to inf); NaN keeps its top payload bits, made quiet.
TILEKERN_BENCH_INLINE hn::Vec<DU> bf16_codes(V v) {
  const DU du;
  const auto bits = hn::BitCast(du, v);
  const auto top = hn::ShiftRight<16>(bits);
  const auto rounded = hn::ShiftRight<16>(bits + hn::Set(du, 0x7fffu) + (top & hn::Set(du, 1u)));
  const auto nan = (bits & hn::Set(du, 0x7fffffffu)) > hn::Set(du, 0x7f800000u);
  return hn::IfThenElse(nan, top | hn::Set(du, 0x40u), rounded);
}

TILEKERN_BENCH_INLINE void store(V v, std::uint16_t* p) {
#if defined(__AVX512BF16__)
  if constexpr (lanes == 16) {
    // vcvtneps2bf16 reads fp32 subnormals (magnitude bits 1..0x7fffff) as zero: such blocks
    // take the integer rounding below.
    const DU du;
    const auto magnitude = hn::BitCast(du, v) & hn::Set(du, 0x7fffffffu);
    if (hn::AllFalse(du, magnitude - hn::Set(du, 1u) < hn::Set(du, 0x7fffffu))) [[likely]] {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v.raw)));
      return;
    }
  }
#endif
  hn::StoreU(hn::TruncateTo(D16(), bf16_codes(v)), D16(), p);
}

template <class T>
using code_t = std::conditional_t<std::is_same_v<T, float>, float, std::uint16_t>;
template <class T>
const code_t<T>* codes(const T* p) {
  return reinterpret_cast<const code_t<T>*>(p);
}
template <class T>
code_t<T>* codes(T* p) {
  return reinterpret_cast<code_t<T>*>(p);
}

// y[i] = f(x[i]) for n elements; a last partial block goes through zero-padded buffers.
template <class In, class Out, class Fn>
void hand_map(const In* x, Out* y, std::size_t n, Fn f) {
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) store(f(load(x + i)), y + i);
  if (i == n) return;
  alignas(64) In in[lanes] = {};
  alignas(64) Out out[lanes];
  std::copy_n(x + i, n - i, in);
  store(f(load(in)), out);
  std::copy_n(out, n - i, y + i);
}

TILEKERN_BENCH_INLINE V hand_relu(V x) {
  return hn::Max(x, hn::Zero(D()));
}

TILEKERN_BENCH_INLINE V hand_gelu_erf(V x) {
  const D d;
  const V e = xsimd_erf(hn::Mul(x, hn::Set(d, 0.70710678f)));
  return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.0f), e));
}

// bias_gelu over rows x cols, the bias row widened once.
template <class In, class Out>
void hand_bias_gelu(const In* x, const In* bias, Out* y, std::size_t rows, float* bias32) {
  static_assert(cols % lanes == 0, "rows are whole blocks here; see hand_map for a tail");
  for (std::size_t j = 0; j < cols; j += lanes) store(load(bias + j), bias32 + j);
  for (std::size_t r = 0; r < rows; ++r) {
    const In* from = x + r * cols;
    Out* to = y + r * cols;
    for (std::size_t j = 0; j < cols; j += lanes) {
      store(hand_gelu_erf(hn::Add(load(from + j), hn::LoadU(D(), bias32 + j))), to + j);
    }
  }
}

template <class In, class Out>
void hand_tanh_derivative(const In* x, Out* y0, Out* y1, std::size_t n) {
  const D d;
  const auto block = [&](const In* from, Out* to0, Out* to1) TILEKERN_BENCH_ALWAYS_INLINE {
    const V t = xsimd_tanh(load(from));
    store(t, to0);
    store(hn::Sub(hn::Set(d, 1.0f), hn::Mul(t, t)), to1);
  };
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) block(x + i, y0 + i, y1 + i);
  if (i == n) return;
  alignas(64) In in[lanes] = {};
  alignas(64) Out out0[lanes], out1[lanes];
  std::copy_n(x + i, n - i, in);
  block(in, out0, out1);
  std::copy_n(out0, n - i, y0 + i);
  std::copy_n(out1, n - i, y1 + i);
}

// xsimd::hadd's order: the upper half of the lanes added to the lower half down to 4 lanes
// (512 -> 256 bits on AVX-512, then 256 -> 128), then (l0 + l1) + (l2 + l3).
float hadd_order(V v) {
  alignas(64) float l[lanes];
  hn::Store(v, D(), l);
  for (std::size_t half = lanes / 2; half >= 4; half /= 2) {
    for (std::size_t j = 0; j < half; ++j) l[j] = l[j + half] + l[j];
  }
  return (l[0] + l[1]) + (l[2] + l[3]);
}

// gpsimd::sum's order: four running sums, batch j into sum j mod 4, then (s0 + s1) + (s2 + s3).
template <class In, class Out>
void hand_rmsnorm(const In* x, const In* gamma, Out* y, std::size_t rows, float* gamma32) {
  static_assert(cols % (4 * lanes) == 0, "rows are whole groups of four blocks here");
  for (std::size_t j = 0; j < cols; j += lanes) store(load(gamma + j), gamma32 + j);
  for (std::size_t r = 0; r < rows; ++r) {
    const In* from = x + r * cols;
    Out* to = y + r * cols;
    V s0 = hn::Zero(D()), s1 = s0, s2 = s0, s3 = s0;
    for (std::size_t j = 0; j < cols; j += 4 * lanes) {
      const V v0 = load(from + j), v1 = load(from + j + lanes), v2 = load(from + j + 2 * lanes),
              v3 = load(from + j + 3 * lanes);
      s0 = hn::Add(s0, hn::Mul(v0, v0));
      s1 = hn::Add(s1, hn::Mul(v1, v1));
      s2 = hn::Add(s2, hn::Mul(v2, v2));
      s3 = hn::Add(s3, hn::Mul(v3, v3));
    }
    const V squares = hn::Add(hn::Add(s0, s1), hn::Add(s2, s3));
    const V scale = hn::Set(D(), rms_scale(hadd_order(squares), cols));
    for (std::size_t j = 0; j < cols; j += lanes) {
      store(hn::Mul(hn::Mul(load(from + j), scale), hn::LoadU(D(), gamma32 + j)), to + j);
    }
  }
}

// The hand narrowing against tilekern's bf16 rounding on the values it must handle: fp32
// subnormals (in a block of their own, and mixed with normals), NaN payloads, inf, overflow, ties.
// Returns an error message, or "".
std::string check_bf16_narrowing() {
  const std::uint32_t specials[] = {
      0x00000001u, 0x007fffffu, 0x00408000u, 0x00418000u, 0x80000001u, 0x807fffffu, 0x00007fffu,
      0x00008000u, 0x7f800001u, 0xffc12345u, 0x7fa00000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu,
      0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x00000000u, 0x80000000u, 0x3f800001u, 0xbf7fffffu,
      0x7f7f8000u, 0x7f7f7fffu, 0xc0490fdbu, 0x7fc00000u, 0x3e800000u, 0x00800000u, 0x0080ffffu,
      0x00400000u, 0x40490fdbu, 0x7f7fffffu, 0x3f7f8000u};
  constexpr std::size_t count = sizeof specials / sizeof specials[0];
  static_assert(count % 16 == 0);
  // The same values with the subnormals replaced by normals, so that the fast path runs too.
  std::vector<float> values;
  for (std::uint32_t bits : specials) values.push_back(std::bit_cast<float>(bits));
  for (std::uint32_t bits : specials) {
    values.push_back(std::bit_cast<float>((bits & 0x7f800000u) == 0 ? bits | 0x3f000000u : bits));
  }
  std::vector<std::uint16_t> hand(values.size());
  hand_map(values.data(), hand.data(), values.size(), [](V v) { return v; });
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint16_t expected = bf16::from(values[i]).bits();
    if (hand[i] != expected) {
      char text[160];
      std::snprintf(text, sizeof text,
                    "hand bf16 narrowing of 0x%08x gives 0x%04x, tilekern 0x%04x",
                    std::bit_cast<std::uint32_t>(values[i]), hand[i], expected);
      return text;
    }
  }
  return "";
}

#endif  // TILEKERN_BENCH_HAND

// ---- measuring ----

double seconds_of(auto&& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(stop - start).count();
}

struct workload {
  std::size_t bytes = 0;            // read + written by the operator
  std::function<void()> framework;  // the gpsimd call
  std::function<void()> hand;       // the hand-written loop; empty if none
  const void* copy_from = nullptr;  // the memcpy of the same bytes
  void* copy_to = nullptr;
  std::size_t copy_bytes = 0;
  std::vector<std::span<std::byte>> outputs;  // what framework and hand write
};

// Runs w.framework as the timed work; with `ratios`, each iteration is followed by the memcpy
// and the hand loop, and the counters at the top are reported.
void run(benchmark::State& state, workload& w, bool ratios) {
  if (w.hand) {
#if defined(TILEKERN_BENCH_HAND)
    static const std::string narrowing = check_bf16_narrowing();
    if (!narrowing.empty()) return state.SkipWithError(narrowing.c_str());
#endif
    w.framework();
    std::vector<std::vector<std::byte>> expected;
    for (auto out : w.outputs) {
      expected.emplace_back(out.begin(), out.end());
      std::memset(out.data(), 0xa5, out.size());  // so that an unwritten element shows
    }
    w.hand();
    for (std::size_t k = 0; k < w.outputs.size(); ++k) {
      const auto mismatch =
          std::mismatch(expected[k].begin(), expected[k].end(), w.outputs[k].begin());
      if (mismatch.first != expected[k].end()) {
        const std::string error = "the hand loop differs from gpsimd in output " +
                                  std::to_string(k) + " at byte " +
                                  std::to_string(mismatch.first - expected[k].begin());
        return state.SkipWithError(error.c_str());
      }
    }
  }
  double framework_seconds = 0, memcpy_seconds = 0, hand_seconds = 0;
  const auto time_framework = [&] {
    const double seconds = seconds_of([&] {
      w.framework();
      benchmark::ClobberMemory();
    });
    framework_seconds += seconds;
    return seconds;
  };
  const auto time_others = [&](bool hand) {
    if (!ratios) return;
    if (hand && w.hand) {
      hand_seconds += seconds_of([&] {
        w.hand();
        benchmark::ClobberMemory();
      });
    } else if (!hand) {
      memcpy_seconds += seconds_of([&] {
        std::memcpy(w.copy_to, w.copy_from, w.copy_bytes);
        benchmark::ClobberMemory();
      });
    }
  };
  // Odd iterations run the hand loop first (hand, memcpy, gpsimd; even ones gpsimd, memcpy, hand),
  // so that gpsimd and the hand loop each follow the memcpy half the time and themselves half the
  // time: memcpy's large copies use non-temporal stores and leave the caches unlike the loops do.
  bool hand_first = false;
  for (auto _ : state) {
    double seconds = 0;
    if (hand_first) {
      time_others(true);
      time_others(false);
      seconds = time_framework();
    } else {
      seconds = time_framework();
      time_others(false);
      time_others(true);
    }
    state.SetIterationTime(seconds);
    hand_first = !hand_first;
  }
  const auto iterations = static_cast<double>(state.iterations());
  state.counters["GBps"] = static_cast<double>(w.bytes) * iterations / framework_seconds * 1e-9;
  if (ratios) {
    state.counters["memcpy_frac"] = memcpy_seconds / framework_seconds;
    if (w.hand) state.counters["hand_frac"] = hand_seconds / framework_seconds;
  }
}

// Whether this run can compare T with a hand loop (see the top).
template <class T>
bool hand_runs() {
#if defined(TILEKERN_BENCH_HAND)
  return has_hand_loop<T> && active_isa() >= hand_isa;
#else
  return false;
#endif
}

template <class T>
std::span<std::byte> bytes_of(buffer<T>& b) {
  return std::as_writable_bytes(std::span<T>(b));
}

// ---- the benchmarks ----

enum class unary { relu, gelu_erf };

template <class T>
void unary_benchmark(benchmark::State& state, unary which, std::size_t n, std::size_t threads) {
  const buffer<T> x = tensor_of<T>(normal(n, 42));
  buffer<T> y(n);
  const gpsimd::options options{.threads = threads};
  workload w;
  w.bytes = 2 * n * sizeof(T);
  w.framework = [&] {
    const auto in = gpsimd::inputs(std::span<const T>(x));
    const auto out = gpsimd::outputs(std::span<T>(y));
    if (which == unary::relu) {
      gpsimd::elementwise(relu_op(), in, out, options);
    } else {
      gpsimd::elementwise(gelu_erf_op(), in, out, options);
    }
  };
  if constexpr (has_hand_loop<T>) {
#if defined(TILEKERN_BENCH_HAND)
    if (hand_runs<T>()) {
      w.hand = [&] {
        if (which == unary::relu) {
          hand_map(codes(x.data()), codes(y.data()), n,
                   [](V v) TILEKERN_BENCH_ALWAYS_INLINE { return hand_relu(v); });
        } else {
          hand_map(codes(x.data()), codes(y.data()), n,
                   [](V v) TILEKERN_BENCH_ALWAYS_INLINE { return hand_gelu_erf(v); });
        }
      };
    }
#endif
  }
  w.copy_from = x.data();
  w.copy_to = y.data();
  w.copy_bytes = n * sizeof(T);
  w.outputs = {bytes_of(y)};
  run(state, w, threads == 1);
}

template <class T>
void bias_gelu_benchmark(benchmark::State& state, std::size_t n, std::size_t threads) {
  const std::size_t rows = n / cols;
  const buffer<T> x = tensor_of<T>(normal(rows * cols, 42));
  const buffer<T> bias = tensor_of<T>(normal(cols, 43, 0.0f, 0.1f));
  buffer<T> y(rows * cols);
  buffer<float> bias32(cols);
  const gpsimd::options options{.threads = threads};
  workload w;
  w.bytes = (2 * rows + 1) * cols * sizeof(T);
  w.framework = [&] {
    gpsimd::elementwise(
        bias_gelu_op(),
        gpsimd::inputs(view<const T>(x.data(), rows, cols), view<const T>(bias.data(), 1, cols)),
        gpsimd::outputs(view<T>(y.data(), rows, cols)), options);
  };
  if constexpr (has_hand_loop<T>) {
#if defined(TILEKERN_BENCH_HAND)
    if (hand_runs<T>()) {
      w.hand = [&] {
        hand_bias_gelu(codes(x.data()), codes(bias.data()), codes(y.data()), rows, bias32.data());
      };
    }
#endif
  }
  w.copy_from = x.data();
  w.copy_to = y.data();
  w.copy_bytes = rows * cols * sizeof(T);
  w.outputs = {bytes_of(y)};
  state.SetLabel(std::to_string(rows) + "x" + std::to_string(cols));
  run(state, w, threads == 1);
}

template <class T>
void tanh_derivative_benchmark(benchmark::State& state, std::size_t n, std::size_t threads) {
  const buffer<T> x = tensor_of<T>(normal(n, 42));
  buffer<T> y0(n), y1(n);
  const gpsimd::options options{.threads = threads};
  workload w;
  w.bytes = 3 * n * sizeof(T);
  w.framework = [&] {
    gpsimd::elementwise(tanh_derivative_op(), gpsimd::inputs(std::span<const T>(x)),
                        gpsimd::outputs(std::span<T>(y0), std::span<T>(y1)), options);
  };
  if constexpr (has_hand_loop<T>) {
#if defined(TILEKERN_BENCH_HAND)
    if (hand_runs<T>()) {
      w.hand = [&] {
        hand_tanh_derivative(codes(x.data()), codes(y0.data()), codes(y1.data()), n);
      };
    }
#endif
  }
  w.copy_from = x.data();
  w.copy_to = y0.data();
  w.copy_bytes = n * sizeof(T);
  w.outputs = {bytes_of(y0), bytes_of(y1)};
  run(state, w, threads == 1);
}

template <class T>
void rmsnorm_benchmark(benchmark::State& state, std::size_t n, std::size_t threads) {
  const std::size_t rows = n / cols;
  const buffer<T> x = tensor_of<T>(normal(rows * cols, 42));
  const buffer<T> gamma = tensor_of<T>(normal(cols, 44, 1.0f, 0.1f));
  buffer<T> y(rows * cols);
  buffer<float> gamma32(cols);
  const gpsimd::options options{.threads = threads};
  workload w;
  w.bytes = (2 * rows + 1) * cols * sizeof(T);
  w.framework = [&] {
    gpsimd::rowwise(rmsnorm_op(),
                    gpsimd::inputs(gpsimd::streamed(view<const T>(x.data(), rows, cols)),
                                   view<const T>(gamma.data(), 1, cols)),
                    gpsimd::outputs(view<T>(y.data(), rows, cols)), options);
  };
  if constexpr (has_hand_loop<T>) {
#if defined(TILEKERN_BENCH_HAND)
    if (hand_runs<T>()) {
      w.hand = [&] {
        hand_rmsnorm(codes(x.data()), codes(gamma.data()), codes(y.data()), rows, gamma32.data());
      };
    }
#endif
  }
  w.copy_from = x.data();
  w.copy_to = y.data();
  w.copy_bytes = rows * cols * sizeof(T);
  w.outputs = {bytes_of(y)};
  state.SetLabel(std::to_string(rows) + "x" + std::to_string(cols));
  run(state, w, threads == 1);
}

void add(const std::string& op, const std::string& format, std::size_t n, std::size_t threads,
         std::function<void(benchmark::State&)> body) {
  std::string name = "gpsimd/" + op + "/" + format + "/" + std::to_string(n);
  if (threads != 1) name += "/threads:" + std::to_string(threads);
  benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& state) { body(state); })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

template <class T>
void register_unary(std::size_t n) {
  for (std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
    if (threads != 1 && !std::is_same_v<T, bf16>) continue;
    add("relu", name_of<T>(), n, threads,
        [=](benchmark::State& state) { unary_benchmark<T>(state, unary::relu, n, threads); });
    add("gelu_erf", name_of<T>(), n, threads,
        [=](benchmark::State& state) { unary_benchmark<T>(state, unary::gelu_erf, n, threads); });
  }
}

const bool registered = [] {
  for (std::size_t n : sizes) {
    register_unary<bf16>(n);
    register_unary<float>(n);
    register_unary<fp16>(n);
    register_unary<fp8_e4m3>(n);
    for (std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
      add("bias_gelu", "bf16", n, threads,
          [=](benchmark::State& state) { bias_gelu_benchmark<bf16>(state, n, threads); });
      add("tanh_derivative", "bf16", n, threads,
          [=](benchmark::State& state) { tanh_derivative_benchmark<bf16>(state, n, threads); });
      add("rmsnorm", "bf16", n, threads,
          [=](benchmark::State& state) { rmsnorm_benchmark<bf16>(state, n, threads); });
    }
  }
  return true;
}();

}  // namespace
}  // namespace tilekern
