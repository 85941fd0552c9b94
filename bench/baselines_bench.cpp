// The baselines of support/baselines.hpp on their own (--benchmark_filter=baseline/), so that
// what the layernorm, rmsnorm and softmax benchmarks compare with can be measured apart:
//
//   baseline/memcpy/<bytes>                            copy_bytes of one tensor's bytes
//   baseline/onednn_layernorm/<bf16|f32>/1576x768      oneDNN layer normalisation, eps 1e-5
//   baseline/onednn_softmax/<bf16|f32>/1576x768        oneDNN softmax over each row
// (Google Benchmark appends /manual_time.)
//
// bytes: one 1576 x 768 tensor in bf16 and in f32 (2420736 and 4841472), the same bytes as the
// oneDNN inputs. Inputs N(0, 1) (mt19937, seed 42), gamma N(1, 0.1), beta N(0, 0.1), in f32 and
// rounded to bf16. One thread (oneDNN limited by the wrappers, see support/baselines.hpp).
//
// Counter GBps: bytes read + bytes written / time (memcpy: 2 x <bytes>; layernorm: input and
// output plus gamma and beta in f32; softmax: input and output). The time is the call's alone
// (UseManualTime), as in the other benchmarks.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "support/baselines.hpp"
#include "tilekern/types/minifloat.hpp"

namespace tilekern::bench {
namespace {

using tilekern::bf16;

constexpr std::size_t rows = 1576;
constexpr std::size_t cols = 768;

// Times work() per iteration and reports GBps for `bytes` moved per call.
void run(benchmark::State& state, std::size_t bytes, const std::function<void()>& work) {
  work();  // warm: first-touch pages, oneDNN's JIT
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    work();
    benchmark::ClobberMemory();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(elapsed.count());
    seconds += elapsed.count();
  }
  state.counters["GBps"] =
      static_cast<double>(bytes) * static_cast<double>(state.iterations()) / seconds * 1e-9;
}

void memcpy_benchmark(benchmark::State& state, std::size_t bytes) {
  const std::vector<std::byte> from(bytes, std::byte{1});
  std::vector<std::byte> to(bytes);
  run(state, 2 * bytes, [&] { copy_bytes(to.data(), from.data(), bytes); });
}

#if TILEKERN_HAVE_ONEDNN

std::vector<float> normal(std::size_t n, unsigned seed, float mean, float sigma) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> distribution(mean, sigma);
  std::vector<float> values(n);
  for (float& v : values) v = distribution(generator);
  return values;
}

// rows x cols N(0, 1) in `type`: f32, or bf16 rounded to nearest even.
std::vector<std::byte> input(dnnl_type type) {
  const std::vector<float> values = normal(rows * cols, 42, 0.0f, 1.0f);
  if (type == dnnl_type::f32) {
    std::vector<std::byte> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  std::vector<std::byte> bytes(values.size() * sizeof(bf16));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const bf16 value = bf16::from(values[i]);
    std::memcpy(bytes.data() + i * sizeof value, &value, sizeof value);
  }
  return bytes;
}

void layernorm_benchmark(benchmark::State& state, dnnl_type type) {
  const std::vector<std::byte> x = input(type);
  std::vector<std::byte> y(x.size());
  const std::vector<float> gamma = normal(cols, 44, 1.0f, 0.1f);
  const std::vector<float> beta = normal(cols, 45, 0.0f, 0.1f);
  try {
    onednn_layernorm layernorm(type, rows, cols, 1e-5f, x.data(), gamma.data(), beta.data(),
                               y.data());
    run(state, 2 * x.size() + 2 * cols * sizeof(float), [&] { layernorm.run(); });
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());  // e.g. no bf16 layer normalisation on this CPU
  }
}

void softmax_benchmark(benchmark::State& state, dnnl_type type) {
  const std::vector<std::byte> x = input(type);
  std::vector<std::byte> y(x.size());
  try {
    onednn_softmax softmax(type, rows, cols, x.data(), y.data());
    run(state, 2 * x.size(), [&] { softmax.run(); });
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
  }
}

#endif  // TILEKERN_HAVE_ONEDNN

void add(const std::string& name, std::function<void(benchmark::State&)> body) {
  benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& state) { body(state); })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

const bool registered = [] {
  for (const std::size_t element : {std::size_t{2}, std::size_t{4}}) {
    const std::size_t bytes = rows * cols * element;
    add("baseline/memcpy/" + std::to_string(bytes),
        [bytes](benchmark::State& state) { memcpy_benchmark(state, bytes); });
  }
#if TILEKERN_HAVE_ONEDNN
  // (appended piece by piece: "/" + std::to_string(...) trips GCC 12's -Wrestrict false positive,
  // GCC bug 105651)
  std::string shape = "/";
  shape += std::to_string(rows);
  shape += 'x';
  shape += std::to_string(cols);
  for (const dnnl_type type : {dnnl_type::bf16, dnnl_type::f32}) {
    const std::string format = type == dnnl_type::bf16 ? "bf16" : "f32";
    add("baseline/onednn_layernorm/" + format + shape,
        [type](benchmark::State& state) { layernorm_benchmark(state, type); });
    add("baseline/onednn_softmax/" + format + shape,
        [type](benchmark::State& state) { softmax_benchmark(state, type); });
  }
#endif
  return true;
}();

}  // namespace
}  // namespace tilekern::bench
