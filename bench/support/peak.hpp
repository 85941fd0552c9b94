#pragma once
// The limits the matmul benchmarks measure themselves against, in the same process:
//
//   run_peak(loop)        one timed run of a register-only loop: its flops and thread CPU seconds
//     peak_loop::bf16_pairs   vdpbf16ps on zmm (AVX512-BF16): 64 flops per instruction (16 lanes x
//                             2 products, each a multiply and an add)
//     peak_loop::fma_zmm      vfmadd231ps on zmm (AVX-512F): 32 flops per instruction
//     peak_loop::fma_ymm      vfmadd231ps on ymm (AVX2 + FMA): 16 flops per instruction
//   peak_gflops(loop)     the best of 5 runs, measured once per process (at the first call, for
//                         every loop) and cached; 0 when the build cannot run the loop
//   read_sum(data, bytes) a streaming read: the sum of every 64-bit word of the buffer
//
// A loop keeps 24 independent accumulators (more than latency x throughput on any AVX-512 core:
// 4 to 6 cycles x 1 or 2 per cycle), each updated once per iteration from two loop-invariant
// operands hidden from the optimiser, with no memory access.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "support/timing.hpp"

namespace tilekern::bench {

namespace detail {

inline constexpr int chains = 24;

// Runs `iterations` rounds of step(acc[c], x, y) over the chains and returns a sum of the
// accumulators (so the loop is not optimised away). x and y are hidden from the optimiser.
template <class Accumulator, class Operand, class Step>
[[gnu::always_inline]] inline float register_loop(std::size_t iterations, Accumulator zero,
                                                  Operand x, Operand y, Step step) {
  Accumulator acc[chains];
  for (Accumulator& a : acc) a = zero;
  asm volatile("" : "+v"(x), "+v"(y));
  for (std::size_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < chains; ++c) acc[c] = step(acc[c], x, y);
  }
  for (int c = 1; c < chains; ++c) acc[0] += acc[c];
  float first = 0;
  std::memcpy(&first, &acc[0], sizeof first);
  return first;
}

#if defined(__AVX512BF16__)
[[gnu::noinline]] inline float bf16_pair_loop(std::size_t iterations) {
  // x = 1.0 and y = 2^-20 in every bf16 half: the sums stay far from overflow and subnormals.
  return register_loop(iterations, _mm512_setzero_ps(), (__m512bh)_mm512_set1_epi16(0x3f80),
                       (__m512bh)_mm512_set1_epi16(0x3580),
                       [](__m512 c, __m512bh a, __m512bh b) { return _mm512_dpbf16_ps(c, a, b); });
}
#endif

#if defined(__AVX512F__)
[[gnu::noinline]] inline float fma_zmm_loop(std::size_t iterations) {
  return register_loop(iterations, _mm512_setzero_ps(), _mm512_set1_ps(1.0f),
                       _mm512_set1_ps(0x1p-20f),
                       [](__m512 c, __m512 a, __m512 b) { return _mm512_fmadd_ps(a, b, c); });
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
[[gnu::noinline]] inline float fma_ymm_loop(std::size_t iterations) {
  return register_loop(iterations, _mm256_setzero_ps(), _mm256_set1_ps(1.0f),
                       _mm256_set1_ps(0x1p-20f),
                       [](__m256 c, __m256 a, __m256 b) { return _mm256_fmadd_ps(a, b, c); });
}
#endif

}  // namespace detail

// The register-only loops, and one timed run of each: 2^18 iterations of 24 instructions (about
// 2 to 5 ms); 0 flops when the build cannot run it.
enum class peak_loop { bf16_pairs, fma_zmm, fma_ymm };

struct peak_run {
  double flops = 0;
  double seconds = 0;
};

inline peak_run run_peak(peak_loop which) {
  constexpr std::size_t iterations = std::size_t{1} << 18;
  float (*loop)(std::size_t) = nullptr;
  double flops_per_instruction = 0;
#if defined(__AVX512BF16__)
  if (which == peak_loop::bf16_pairs) loop = detail::bf16_pair_loop, flops_per_instruction = 64;
#endif
#if defined(__AVX512F__)
  if (which == peak_loop::fma_zmm) loop = detail::fma_zmm_loop, flops_per_instruction = 32;
#endif
#if defined(__AVX2__) && defined(__FMA__)
  if (which == peak_loop::fma_ymm) loop = detail::fma_ymm_loop, flops_per_instruction = 16;
#endif
  if (loop == nullptr) return {};
  float result = 0;
  const double seconds = thread_seconds([&] { result = loop(iterations); });
  benchmark::DoNotOptimize(result);
  return {flops_per_instruction * detail::chains * static_cast<double>(iterations), seconds};
}

// The peak of a loop in GFLOPS: the best of 40 runs (about 50 to 200 ms), measured at the first
// call, then cached. Five runs were too few: measured as a process starts, the best of five came
// out at 0.6 of what the same loop reaches as a benchmark (matmul/peak/...) on the KVM guest.
inline double peak_gflops(peak_loop which) {
  static const auto best = [](peak_loop loop) {
    double gflops = 0;
    for (int run = 0; run < 40; ++run) {
      const peak_run timed = run_peak(loop);
      if (timed.flops > 0) gflops = std::max(gflops, timed.flops / timed.seconds * 1e-9);
    }
    return gflops;
  };
  static const double peaks[] = {best(peak_loop::bf16_pairs), best(peak_loop::fma_zmm),
                                 best(peak_loop::fma_ymm)};
  return peaks[static_cast<int>(which)];
}

// The sum of the 64-bit words of `bytes` bytes at `data` (a whole number of words), each read
// once. The four quarters of the buffer are read side by side, front to back: on the machine
// these ran on (a KVM guest on AMD EPYC), one thread reads 10-20% faster from four streams than
// from one, as the kernels do when they walk several panels at once. Not inlined: the read is
// done every call, where it is called.
[[gnu::noinline]] inline std::uint64_t read_sum(const void* data, std::size_t bytes) {
  const auto* from = static_cast<const std::byte*>(data);
  std::uint64_t sum = 0;
  std::size_t done = 0;
#if defined(__AVX2__)
  constexpr std::size_t streams = 4;
  const std::size_t quarter = bytes / (64 * streams) * 64;
  // Two ymm per stream and 64-byte line.
  __m256i acc[streams][2];
  for (auto& a : acc) a[0] = a[1] = _mm256_setzero_si256();
  for (std::size_t i = 0; i < quarter; i += 64) {
    for (std::size_t s = 0; s < streams; ++s) {
      for (std::size_t h = 0; h < 2; ++h) {
        const auto* line = reinterpret_cast<const __m256i*>(from + s * quarter + i + 32 * h);
        acc[s][h] = _mm256_add_epi64(acc[s][h], _mm256_loadu_si256(line));
      }
    }
  }
  for (const auto& a : acc) {
    std::uint64_t words[4];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words), _mm256_add_epi64(a[0], a[1]));
    for (const std::uint64_t word : words) sum += word;
  }
  done = streams * quarter;
#endif
  for (std::size_t i = done; i + 8 <= bytes; i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, from + i, sizeof word);
    sum += word;
  }
  return sum;
}

}  // namespace tilekern::bench
