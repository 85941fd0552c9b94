// Bulk conversion (simd/convert.hpp) on 1 Mi elements, on the active ISA path (TILEKERN_ISA caps
// it):
//   convert/<format>/<nearest|zero|stochastic>/encode   fp32 -> format, standard overflow
//   convert/<format>/decode                             format -> fp32
//   convert/memcpy                                      memcpy of the 4 MiB fp32 input
//
// Counters: items_per_second, bytes_per_second (bytes read plus bytes written), and
// memcpy_ratio = this benchmark's speed / the speed of memcpy of its input bytes (the fp32
// input for encode, the format's codes for decode).
//
// How memcpy_ratio is measured, and why it is fair: every iteration times the conversion and
// then a memcpy of the same input buffer into a buffer of the same size, back to back in the
// same process, so both see the same cache state (the input was just read by the other; 4 MiB of
// input plus at most 4 MiB of output stay in L3), the same clock frequency and the same
// neighbours on this shared machine. The ratio is total memcpy time / total conversion time
// over all iterations of the run. The benchmark's own time is the conversion's alone
// (UseManualTime), so items_per_second excludes the memcpy.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

constexpr std::size_t elements = std::size_t{1} << 20;

// Tensor-like data: normally distributed, so no fp32 subnormals and, for fp8, a few values beyond
// max only in the far tails.
const std::vector<float>& inputs() {
  static const std::vector<float> values = [] {
    std::mt19937 generator(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> result(elements);
    for (float& x : result) x = normal(generator);
    return result;
  }();
  return values;
}

double seconds_of(auto&& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(stop - start).count();
}

// Runs `convert` as the timed work, each iteration followed by a memcpy of `input_bytes` bytes
// of `input`, and reports the counters described at the top.
void run(benchmark::State& state, const void* input, std::size_t input_bytes,
         std::size_t output_bytes, auto&& convert) {
  std::vector<std::byte> copy(input_bytes);
  double convert_seconds = 0, memcpy_seconds = 0;
  for (auto _ : state) {
    const double seconds = seconds_of(convert);
    state.SetIterationTime(seconds);
    convert_seconds += seconds;
    memcpy_seconds += seconds_of([&] {
      std::memcpy(copy.data(), input, input_bytes);
      benchmark::ClobberMemory();
    });
  }
  const auto iterations = static_cast<std::int64_t>(state.iterations());
  state.SetItemsProcessed(iterations * static_cast<std::int64_t>(elements));
  state.SetBytesProcessed(iterations * static_cast<std::int64_t>(input_bytes + output_bytes));
  state.counters["memcpy_ratio"] = memcpy_seconds / convert_seconds;
}

template <minifloat_format F>
void register_format() {
  const std::string prefix = "convert/" + format_name<F>() + "/";
  for (rounding round : {rounding::nearest_even, rounding::toward_zero, rounding::stochastic}) {
    benchmark::RegisterBenchmark(
        (prefix + std::string(name(round)) + "/encode").c_str(),
        [round](benchmark::State& state) {
          const std::vector<float>& from = inputs();
          std::vector<F> to(elements);
          const cast_options options{round, overflow::standard, 1234, 0};
          run(state, from.data(), elements * sizeof(float), elements * sizeof(F), [&] {
            convert(std::span<const float>(from), std::span<F>(to), options);
            benchmark::DoNotOptimize(to.data());
            benchmark::ClobberMemory();
          });
        })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark((prefix + "decode").c_str(),
                               [](benchmark::State& state) {
                                 std::vector<F> from(elements);
                                 convert(std::span<const float>(inputs()), std::span<F>(from));
                                 std::vector<float> to(elements);
                                 run(state, from.data(), elements * sizeof(F),
                                     elements * sizeof(float), [&] {
                                       convert(std::span<const F>(from), std::span<float>(to));
                                       benchmark::DoNotOptimize(to.data());
                                       benchmark::ClobberMemory();
                                     });
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

// memcpy against itself: its memcpy_ratio shows the noise of the method (ideally 1).
void memcpy_benchmark(benchmark::State& state) {
  const std::vector<float>& from = inputs();
  std::vector<float> to(elements);
  run(state, from.data(), elements * sizeof(float), elements * sizeof(float), [&] {
    std::memcpy(to.data(), from.data(), elements * sizeof(float));
    benchmark::ClobberMemory();
  });
}

const bool registered = [] {
  benchmark::RegisterBenchmark("convert/memcpy", memcpy_benchmark)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  for_each_format([]<class F>() { register_format<F>(); });
  return true;
}();

}  // namespace
}  // namespace tilekern
