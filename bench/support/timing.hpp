#pragma once
// How the benchmarks time a kernel against what they compare it with, in the same run:
//
//   thread_seconds(work)   the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID) of one call
//   wall_seconds(work)     the wall time of one call (for calls that run on several threads)
//   time_against(state, kernel, others, kernel_seconds, use = timer::thread_cpu or timer::wall)
//                          each iteration times kernel() (the benchmark's own time:
//                          SetIterationTime, so register with UseManualTime) and each of others()
//                          back to back, alternating the order (kernel first on even iterations,
//                          last on odd ones), so that all see the same cache state and clock;
//                          returns, for each other, its total time over the kernel's total
//   calls_per_piece(elements)   how many calls of a kernel on `elements` elements one timed piece
//                          makes: 256 below 4096 elements (a call of well under a microsecond,
//                          about what reading the thread's CPU clock costs), else 1
//   repeated(calls, f)     f called `calls` times in a row, as one piece for time_against
//
// Thread CPU time is the default: on this shared 2-core machine other jobs often hold both cores,
// and the wall clock then mostly measures how long the thread waited to be scheduled (3-5x the CPU
// time, run to run). A single-threaded call's CPU time is its running time. A call on several
// threads must be timed on the wall clock (its other threads' time is not the caller's).

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <ctime>
#include <functional>
#include <utility>
#include <vector>

namespace tilekern::bench {

inline std::size_t calls_per_piece(std::size_t elements) {
  return elements < 4096 ? 256 : 1;
}

inline std::function<void()> repeated(std::size_t calls, std::function<void()> f) {
  return [calls, f = std::move(f)] {
    for (std::size_t i = 0; i < calls; ++i) f();
  };
}

inline double thread_seconds(const std::function<void()>& work) {
  timespec start{}, stop{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  work();
  benchmark::ClobberMemory();
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &stop);
  return static_cast<double>(stop.tv_sec - start.tv_sec) +
         static_cast<double>(stop.tv_nsec - start.tv_nsec) * 1e-9;
}

inline double wall_seconds(const std::function<void()>& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  benchmark::ClobberMemory();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

enum class timer { thread_cpu, wall };

inline std::vector<double> time_against(benchmark::State& state,
                                        const std::function<void()>& kernel,
                                        const std::vector<std::function<void()>>& others,
                                        double& kernel_seconds, timer use = timer::thread_cpu) {
  const auto seconds_of = use == timer::thread_cpu ? thread_seconds : wall_seconds;
  std::vector<double> totals(others.size(), 0.0);
  kernel_seconds = 0;
  bool kernel_first = true;
  for (auto _ : state) {
    double seconds = 0;
    if (kernel_first) seconds = seconds_of(kernel);
    for (std::size_t k = 0; k < others.size(); ++k) totals[k] += seconds_of(others[k]);
    if (!kernel_first) seconds = seconds_of(kernel);
    kernel_seconds += seconds;
    state.SetIterationTime(seconds);
    kernel_first = !kernel_first;
  }
  for (double& total : totals) total /= kernel_seconds;
  return totals;
}

}  // namespace tilekern::bench
