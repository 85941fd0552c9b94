// layernorm and rmsnorm (kernels/layernorm.hpp, kernels/rmsnorm.hpp) against memcpy and oneDNN,
// one thread, in the same run:
//
//   layernorm/<format>/<rows>x<cols>      forward, bf16 and float at 1576x768 (ViT-B/16, batch 8),
//   rmsnorm/<format>/<rows>x<cols>        4096x4096 and 1x768 (one token, as in batch-1 decoding:
//                                         what a call costs beyond its arithmetic)
//   layernorm/<format>/1576x768/plain     the same, timed on a plain loop instead of the kernel
//   rmsnorm/<format>/1576x768/plain       (support/plain.hpp: one fp32 statistics pass without a
//                                         shift, no NaN or subnormal care; where the build has it,
//                                         AVX512-BF16 or AVX2 and FMA): what this machine gives a
//                                         loop that does strictly less than the kernel
//   layernorm_bwd/<format>/1576x768       backward (dy, x in; dx, dgamma, dbeta out), GBps only
//   rmsnorm_bwd/<format>/1576x768
// (Google Benchmark appends /manual_time.)
//
// Inputs: x and dy N(0, 1) (mt19937, seeds 42 and 43) in <format>; gamma 1 + N(0, 0.1) and beta
// N(0, 0.1), fp32 (as oneDNN takes them); y and dx in <format>, dgamma and dbeta fp32; eps 1e-5;
// rounded to nearest even.
// At 1x768 each timed piece (the kernel, memcpy, oneDNN) is 256 calls in a row
// (support/timing.hpp, calls_per_piece): the time column is that of 256 calls, and the counter
// call_ns the kernel's time per call.
// Counters (the benchmark's own time, UseManualTime, is the tilekern call's alone; in a plain
// row the plain loop's, which then stands for tilekern's below):
//   GBps         bytes read + written by the kernel / time: x and y once each, gamma and beta once
//                per call (backward: dy, x, dx, gamma, dgamma, dbeta)
//   memcpy_frac  memcpy time / tilekern time: a memcpy of x's bytes into y's buffer
//   onednn_frac  oneDNN layer normalisation (forward inference, use_scale | use_shift, same
//                format, fp32 gamma and beta, one thread) time / tilekern time; layernorm only
//                (oneDNN 2.6 has no RMS normalisation), and only when the build found oneDNN
//   err          the largest |y - y_ref| / max(|y_ref|, 1) against reference::layernorm or
//                reference::rmsnorm (fp64, on the decoded inputs), over every element, computed
//                once before the timed loop (forward only)
// Times are the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), as in softmax_bench.cpp: on
// this shared 2-core machine the wall clock mostly measures waiting to be scheduled. Every call
// timed is single-threaded (oneDNN included: support/baselines.hpp). Every iteration times the
// kernel, the memcpy and oneDNN back to back into the same output buffer, alternating the order
// (kernel first on even iterations, last on odd ones), so all see the same cache state and clock;
// a ratio is the total time of one over the total of the other. The plain loop has rows of its
// own: timed as a fourth piece beside the kernel (until stop 84), it changed what the kernel and
// the memcpy found in the caches (on a first-generation Zen, rmsnorm fp32 1576x768 ran at 0.85 of
// memcpy without it, 0.63 with it).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "support/baselines.hpp"
#include "support/plain.hpp"
#include "support/tensors.hpp"
#include "support/timing.hpp"
#include "tilekern/kernels/layernorm.hpp"
#include "tilekern/kernels/rmsnorm.hpp"
#include "tilekern/reference/layernorm.hpp"
#include "tilekern/reference/rmsnorm.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

using bench::decode;
using bench::decoded;
using bench::name_of;
using bench::normal_tensor;
using bench::time_against;

// The largest |y - want| / max(|want|, 1).
template <class T>
double largest_error(const std::vector<T>& y, const std::vector<double>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double error = std::abs(decode(y[i]) - want[i]);
    worst = std::max(worst, error / std::max(std::abs(want[i]), 1.0));
  }
  return worst;
}

enum class norm { layer, rms };

// The plain loop of a layernorm or rmsnorm (support/plain.hpp), writing y; empty where this build
// or the shape has none (no row is registered for it there).
template <class T>
std::function<void()> plain_of(norm kind, const std::vector<T>& x, const std::vector<float>& gamma,
                               const std::vector<float>& beta, std::vector<T>& y, std::size_t rows,
                               std::size_t cols, float eps) {
#if defined(TILEKERN_BENCH_PLAIN)
  if (bench::plain_fits(rows, cols)) {
    return [=, &x, &gamma, &beta, &y] {
      if (kind == norm::layer) {
        bench::plain_norm<true>(x.data(), gamma.data(), beta.data(), y.data(), rows, cols, eps);
      } else {
        bench::plain_norm<false>(x.data(), gamma.data(), beta.data(), y.data(), rows, cols, eps);
      }
    };
  }
#endif
  (void)kind, (void)x, (void)gamma, (void)beta, (void)y, (void)rows, (void)cols, (void)eps;
  return nullptr;
}

template <class T>
void forward(benchmark::State& state, norm kind, std::size_t rows, std::size_t cols, bool plain) {
  const std::size_t calls = bench::calls_per_piece(rows * cols);
  constexpr float eps = 1e-5f;
  const std::vector<T> x = normal_tensor<T>(rows * cols, 42);
  const std::vector<float> gamma = normal_tensor<float>(cols, 44, 1.0f, 0.1f);
  const std::vector<float> beta = normal_tensor<float>(cols, 45, 0.0f, 0.1f);
  std::vector<T> y(rows * cols);
  const view<const T> xv(x.data(), rows, cols);
  const view<T> yv(y.data(), rows, cols);
  const auto kernel = [&] {
    if (kind == norm::layer) {
      layernorm(xv, gamma, beta, yv, eps);
    } else {
      rmsnorm(xv, gamma, yv, eps);
    }
  };
  const std::function<void()> once =
      plain ? plain_of(kind, x, gamma, beta, y, rows, cols, eps) : kernel;

  // The errors against the fp64 reference, once, outside the timed loop.
  once();
  {
    const std::vector<double> x64 = decoded(x), gamma64 = decoded(gamma), beta64 = decoded(beta);
    std::vector<double> want(rows * cols);
    const view<const double> x64v(x64.data(), rows, cols);
    if (kind == norm::layer) {
      reference::layernorm(x64v, gamma64, beta64, eps, view<double>(want.data(), rows, cols));
    } else {
      reference::rmsnorm(x64v, gamma64, eps, view<double>(want.data(), rows, cols));
    }
    state.counters["err"] = largest_error(y, want);
  }

  const std::size_t bytes = rows * cols * sizeof(T);
  std::vector<std::function<void()>> others = {
      bench::repeated(calls, [&] { bench::copy_bytes(y.data(), x.data(), bytes); })};
#if TILEKERN_HAVE_ONEDNN
  std::unique_ptr<bench::onednn_layernorm> onednn;
  if (kind == norm::layer) {
    onednn = bench::baseline_if_supported<bench::onednn_layernorm>(
        state, std::is_same_v<T, float> ? bench::dnnl_type::f32 : bench::dnnl_type::bf16, rows,
        cols, eps, x.data(), gamma.data(), beta.data(), y.data());
    if (onednn) others.push_back(bench::repeated(calls, [&] { onednn->run(); }));
  }
#endif
  double seconds = 0;
  const auto ratios = time_against(state, bench::repeated(calls, once), others, seconds);
  const std::size_t vectors = (kind == norm::layer ? 2 : 1) * cols * sizeof(float);
  const auto iterations = static_cast<double>(state.iterations() * calls);
  state.counters["GBps"] = static_cast<double>(2 * bytes + vectors) * iterations / seconds * 1e-9;
  state.counters["memcpy_frac"] = ratios[0];
  if (ratios.size() > 1) state.counters["onednn_frac"] = ratios[1];  // others[1]: oneDNN
  if (calls > 1) state.counters["call_ns"] = seconds / iterations * 1e9;
}

template <class T>
void backward(benchmark::State& state, norm kind, std::size_t rows, std::size_t cols) {
  constexpr float eps = 1e-5f;
  const std::vector<T> x = normal_tensor<T>(rows * cols, 42);
  const std::vector<T> dy = normal_tensor<T>(rows * cols, 43);
  const std::vector<float> gamma = normal_tensor<float>(cols, 44, 1.0f, 0.1f);
  std::vector<T> dx(rows * cols);
  std::vector<float> dgamma(cols), dbeta(cols);
  const view<const T> xv(x.data(), rows, cols), dyv(dy.data(), rows, cols);
  const view<T> dxv(dx.data(), rows, cols);
  double seconds = 0;
  time_against(
      state,
      [&] {
        if (kind == norm::layer) {
          layernorm_backward(dyv, xv, gamma, dxv, dgamma, dbeta, eps);
        } else {
          rmsnorm_backward(dyv, xv, gamma, dxv, dgamma, eps);
        }
      },
      {}, seconds);
  const std::size_t vectors = (kind == norm::layer ? 3 : 2) * cols * sizeof(float);
  state.counters["GBps"] = static_cast<double>(3 * rows * cols * sizeof(T) + vectors) *
                           static_cast<double>(state.iterations()) / seconds * 1e-9;
}

void add(const std::string& name, std::function<void(benchmark::State&)> body) {
  benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& state) { body(state); })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

template <class T>
void register_format() {
  // rows, cols, and whether the plain loop has a row (not where y streams: support/plain.hpp)
  constexpr std::size_t shapes[][3] = {{1576, 768, 1}, {4096, 4096, 0}, {1, 768, 0}};
  for (const norm kind : {norm::layer, norm::rms}) {
    const std::string name = kind == norm::layer ? "layernorm" : "rmsnorm";
    for (const auto& shape : shapes) {
      const std::size_t rows = shape[0], cols = shape[1];
      const std::string row =
          name + "/" + name_of<T>() + "/" + std::to_string(rows) + "x" + std::to_string(cols);
      add(row, [=](benchmark::State& state) { forward<T>(state, kind, rows, cols, false); });
      if (shape[2] != 0 && bench::plain_fits(rows, cols)) {
        add(row + "/plain",
            [=](benchmark::State& state) { forward<T>(state, kind, rows, cols, true); });
      }
    }
    add(name + "_bwd/" + name_of<T>() + "/1576x768",
        [=](benchmark::State& state) { backward<T>(state, kind, 1576, 768); });
  }
}

const bool registered = [] {
  register_format<bf16>();
  register_format<float>();
  return true;
}();

}  // namespace
}  // namespace tilekern
