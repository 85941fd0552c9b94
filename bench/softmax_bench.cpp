// softmax (kernels/softmax.hpp) against memcpy and oneDNN, one thread, in the same run:
//
//   softmax/<format>/<rows>x<cols>       forward, no mask, scale 1, bf16 and float at 1576x768
//                                        (ViT-B/16, batch 8), 4096x4096 and 1x768 (one row: what a
//                                        call costs beyond its arithmetic)
//   softmax/<format>/1576x768/plain      the same, timed on a plain loop instead of the kernel
//                                        (support/plain.hpp: a polynomial exponential without a
//                                        table, no NaN, huge-row or subnormal care; where the build
//                                        has it, AVX512-BF16 or AVX2 and FMA)
//   softmax_bwd/<format>/1576x768        backward (dy and y in, dx out), GBps only
// (Google Benchmark appends /manual_time.)
//
// Inputs: N(0, 1) (mt19937, seed 42), in and out in <format>, rounded to nearest even.
// At 1x768 each timed piece (the kernel, memcpy, oneDNN) is 256 calls in a row
// (support/timing.hpp, calls_per_piece): the time column is that of 256 calls, and the counter
// call_ns the kernel's time per call.
// Counters (the benchmark's own time, UseManualTime, is the tilekern call's alone; in a plain
// row the plain loop's, which then stands for tilekern's below):
//   GBps         bytes read + written by the kernel (x once, y once; backward dy, y and dx) / time
//   memcpy_frac  memcpy time / tilekern time: a memcpy of x's bytes into y's buffer
//   onednn_frac  oneDNN softmax (softmax_accurate, same format, one thread) time / tilekern time;
//                only when the build found oneDNN (TILEKERN_HAVE_ONEDNN)
//   err          the largest |y - y_ref| / y_ref against reference::softmax (fp64, on the decoded
//                inputs), over every element, computed once before the timed loop (forward only)
// Times are the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not the wall clock: on this
// shared 2-core machine other jobs often hold both cores, and wall time then mostly measures how
// long the thread waited to be scheduled (3-5x the CPU time, run to run). Every call timed is
// single-threaded (oneDNN included: support/baselines.hpp), so its CPU time is its running time.
// Every iteration times the kernel, the memcpy and oneDNN back to back, into the same output
// buffer, alternating the order (kernel first on even iterations, last on odd ones), so all see
// the same cache state and clock; a ratio is the total time of one over the total of the other.
// The plain loop has rows of its own, as in norm_bench.cpp.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "support/baselines.hpp"
#include "support/plain.hpp"
#include "support/tensors.hpp"
#include "support/timing.hpp"
#include "tilekern/kernels/softmax.hpp"
#include "tilekern/reference/softmax.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

using bench::decode;
using bench::name_of;
using bench::normal_tensor;
using bench::time_against;

// The largest |y - want| / want (want > 0: every softmax output of these inputs).
template <class T>
double largest_error(const std::vector<T>& y, const std::vector<double>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    worst = std::max(worst, std::abs(decode(y[i]) - want[i]) / want[i]);
  }
  return worst;
}

// The plain loop (support/plain.hpp), writing y; empty where this build or the shape has none (no
// row is registered for it there).
template <class T>
std::function<void()> plain_of(const std::vector<T>& x, std::vector<T>& y, std::size_t rows,
                               std::size_t cols) {
#if defined(TILEKERN_BENCH_PLAIN)
  if (bench::plain_fits(rows, cols)) {
    return [=, &x, &y] { bench::plain_softmax(x.data(), y.data(), rows, cols); };
  }
#endif
  (void)x, (void)y, (void)rows, (void)cols;
  return nullptr;
}

template <class T>
void forward(benchmark::State& state, std::size_t rows, std::size_t cols, bool plain) {
  const std::vector<T> x = normal_tensor<T>(rows * cols, 42);
  std::vector<T> y(rows * cols);
  const view<const T> xv(x.data(), rows, cols);
  const view<T> yv(y.data(), rows, cols);
  const auto kernel = [&] { softmax(xv, yv); };
  const std::function<void()> once = plain ? plain_of(x, y, rows, cols) : kernel;

  // The errors against the fp64 reference, once, outside the timed loop.
  once();
  {
    const std::vector<double> x64 = bench::decoded(x);
    std::vector<double> want(rows * cols);
    reference::softmax(view<const double>(x64.data(), rows, cols), 1.0,
                       view<double>(want.data(), rows, cols));
    state.counters["err"] = largest_error(y, want);
  }

  const std::size_t bytes = rows * cols * sizeof(T);
  const std::size_t calls = bench::calls_per_piece(rows * cols);
  std::vector<std::function<void()>> others = {
      bench::repeated(calls, [&] { bench::copy_bytes(y.data(), x.data(), bytes); })};
#if TILEKERN_HAVE_ONEDNN
  const auto onednn = bench::baseline_if_supported<bench::onednn_softmax>(
      state, std::is_same_v<T, float> ? bench::dnnl_type::f32 : bench::dnnl_type::bf16, rows, cols,
      x.data(), y.data());
  if (onednn) others.push_back(bench::repeated(calls, [&] { onednn->run(); }));
#endif
  double seconds = 0;
  const auto ratios = time_against(state, bench::repeated(calls, once), others, seconds);
  const auto iterations = static_cast<double>(state.iterations() * calls);
  state.counters["GBps"] = 2.0 * static_cast<double>(bytes) * iterations / seconds * 1e-9;
  state.counters["memcpy_frac"] = ratios[0];
  if (ratios.size() > 1) state.counters["onednn_frac"] = ratios[1];  // others[1]: oneDNN
  if (calls > 1) state.counters["call_ns"] = seconds / iterations * 1e9;
}

template <class T>
void backward(benchmark::State& state, std::size_t rows, std::size_t cols) {
  const std::vector<T> dy = normal_tensor<T>(rows * cols, 42);
  std::vector<T> y(rows * cols), dx(rows * cols);
  softmax(view<const T>(normal_tensor<T>(rows * cols, 43)), view<T>(y));
  const std::size_t bytes = rows * cols * sizeof(T);
  double seconds = 0;
  time_against(
      state,
      [&] {
        softmax_backward(view<const T>(dy.data(), rows, cols), view<const T>(y.data(), rows, cols),
                         view<T>(dx.data(), rows, cols));
      },
      {}, seconds);
  state.counters["GBps"] =
      3.0 * static_cast<double>(bytes) * static_cast<double>(state.iterations()) / seconds * 1e-9;
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
  for (const auto& shape : shapes) {
    const std::size_t rows = shape[0], cols = shape[1];
    const std::string row =
        "softmax/" + name_of<T>() + "/" + std::to_string(rows) + "x" + std::to_string(cols);
    add(row, [=](benchmark::State& state) { forward<T>(state, rows, cols, false); });
    if (shape[2] != 0 && bench::plain_fits(rows, cols)) {
      add(row + "/plain", [=](benchmark::State& state) { forward<T>(state, rows, cols, true); });
    }
  }
  add("softmax_bwd/" + name_of<T>() + "/1576x768",
      [](benchmark::State& state) { backward<T>(state, 1576, 768); });
}

const bool registered = [] {
  register_format<bf16>();
  register_format<float>();
  return true;
}();

}  // namespace
}  // namespace tilekern
