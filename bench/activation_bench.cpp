// The standalone activation kernels (kernels/activation.hpp) against memcpy, one thread, in the
// same run:
//
//   activation/<func>/<format>/<n>    y = f(x), x and y in <format>, rounded to nearest even
// funcs relu, silu, gelu_tanh, gelu_erf and exp on bf16, and relu on float; n = 1 Mi and 16 Mi.
// (Google Benchmark appends /manual_time.) On bf16, silu, gelu_tanh, gelu_erf and exp are looked
// up in the kernel's tables (kernels/activation.hpp, "Tables"); the first call builds each.
//
// Inputs: N(0, 1) (mt19937, seed 42). Counters (the benchmark's own time, UseManualTime, is the
// kernel's alone):
//   GBps         bytes read + written (x once, y once) / time
//   memcpy_frac  memcpy time / kernel time: a memcpy of x's bytes into y's buffer
// Times are the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not the wall clock: on this
// shared 2-core machine other jobs often hold both cores, and wall time then mostly measures how
// long the thread waited to be scheduled (3-5x the CPU time, run to run). Every call timed is
// single-threaded (oneDNN included: support/baselines.hpp), so its CPU time is its running time.
// Every iteration times the kernel and the memcpy back to back, into the same output buffer,
// alternating the order, so both see the same cache state and clock; the ratio is total time over
// total time.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <ctime>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "support/baselines.hpp"
#include "tilekern/kernels/activation.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

template <class T>
std::vector<T> normal_tensor(std::size_t n, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> distribution;
  std::vector<float> values(n);
  for (float& v : values) v = distribution(generator);
  if constexpr (std::is_same_v<T, float>) {
    return values;
  } else {
    std::vector<T> result(n);
    convert(std::span<const float>(values), std::span<T>(result));
    return result;
  }
}

template <class T>
std::string name_of() {
  if constexpr (std::is_same_v<T, float>) {
    return "float";
  } else {
    return format_name<T>();
  }
}

template <class Work>
double seconds_of(Work&& work) {
  timespec start{}, stop{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  work();
  benchmark::ClobberMemory();
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &stop);
  return static_cast<double>(stop.tv_sec - start.tv_sec) +
         static_cast<double>(stop.tv_nsec - start.tv_nsec) * 1e-9;
}

template <class T>
void run(benchmark::State& state, act f, std::size_t n) {
  const std::vector<T> x = normal_tensor<T>(n, 42);
  std::vector<T> y(n);
  const std::size_t bytes = n * sizeof(T);
  double kernel_seconds = 0, memcpy_seconds = 0;
  bool kernel_first = true;
  for (auto _ : state) {
    double seconds = 0;
    if (kernel_first)
      seconds = seconds_of([&] { activation(std::span<const T>(x), std::span<T>(y), f); });
    memcpy_seconds += seconds_of([&] { bench::copy_bytes(y.data(), x.data(), bytes); });
    if (!kernel_first)
      seconds = seconds_of([&] { activation(std::span<const T>(x), std::span<T>(y), f); });
    kernel_seconds += seconds;
    state.SetIterationTime(seconds);
    kernel_first = !kernel_first;
  }
  const auto iterations = static_cast<double>(state.iterations());
  state.counters["GBps"] = 2.0 * static_cast<double>(bytes) * iterations / kernel_seconds * 1e-9;
  state.counters["memcpy_frac"] = memcpy_seconds / kernel_seconds;
}

template <class T>
void add(act f, std::size_t n) {
  const std::string label =
      "activation/" + std::string(name(f)) + "/" + name_of<T>() + "/" + std::to_string(n);
  benchmark::RegisterBenchmark(label.c_str(),
                               [f, n](benchmark::State& state) { run<T>(state, f, n); })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

const bool registered = [] {
  for (std::size_t n : {std::size_t{1} << 24, std::size_t{1} << 20}) {
    for (act f : {act::relu, act::silu, act::gelu_tanh, act::gelu_erf, act::exp}) add<bf16>(f, n);
    add<float>(act::relu, n);
  }
  return true;
}();

}  // namespace
}  // namespace tilekern
