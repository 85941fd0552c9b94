// matmul (kernels/matmul.hpp) against oneDNN and OpenBLAS, one thread, in the same run:
//
//   matmul/<A>x<B>/<M>x<K>x<N>                 B pre-packed (pack_b, once, outside the timing)
//   matmul/bf16xbf16/512x512x512/unpacked      B packed inside every call (b passed as a view)
//   matmul/bf16xbf16/1576x768x2304/threads:2   options.threads = 2 (each ViT shape; float at one)
//   matmul/peak/<bf16_pairs|fma_zmm|fma_ymm>   the register-only loops of support/peak.hpp
// (Google Benchmark appends /manual_time.)
//
// Shapes M x K x N: 512x512x512; 1576x768x2304, 1576x768x3072 and 1576x3072x768 (the qkv, fc1 and
// fc2 products of a ViT-B/16 encoder at batch 8: 8 x 197 tokens); 4096x4096x4096 (2 iterations:
// it takes about 0.7 s); 1x4096x4096 and 16x4096x4096 (small M: batch-1 and batch-16 decoding).
// Operands: bf16 x bf16 at every shape; bf16 x fp8_e4m3 and bf16 x fp8_e5m2 (fp8 weights) at
// every shape but 4096^3; fp16 x fp16 at 512^3 and 1576x768x2304; float x float at 512^3 and the
// ViT shapes.
// Inputs: A and B N(0, 1) (mt19937, seeds 42 and 43) rounded to their format (nearest even); C
// float; alpha 1, beta 0, no bias, identity; options.threads = 1 except on the threads:2 row.
//
// Counters (the benchmark's own time, UseManualTime, is the tilekern call's alone):
//   GFLOPS           2 M N K / time
//   peak_frac        GFLOPS / the peak of the path that runs (tensor::choose_path<A, B>()): the
//                    vdpbf16ps loop for compute::bf16_pairs, the vfmadd231ps loop of the path's
//                    width for compute::fp32 (support/peak.hpp, measured once per process)
//   onednn_GFLOPS    oneDNN's matmul primitive (support/baselines.hpp) on the same values, one
//   onednn_frac      thread: bf16 x bf16 -> f32 when both formats are exact in bf16 (bf16, fp8:
//                    fp8 B as a bf16 copy; oneDNN 2.6 has no fp8) and oneDNN has a bf16 matmul for
//                    the CPU (AVX-512 and up), f32 x f32 -> f32 otherwise (fp16 too: neither has
//                    fp16 arithmetic on these CPUs; the label says which); weights reordered once,
//                    outside the timing, into the layout oneDNN prefers (format_tag::any). The
//                    label names oneDNN's implementation. frac = oneDNN time / tilekern time:
//                    above 1, tilekern is faster
//   openblas_GFLOPS  cblas_sgemm on fp32 copies of A and B (the same values), one thread; OpenBLAS
//   openblas_frac    has no pre-packed B: it packs inside each call. The context line `openblas`
//                    says whether the library has cblas_sbgemm; where it does, sbgemm_GFLOPS and
//                    sbgemm_frac time it on the bf16 copies
//   GBps             small M (M <= 16): bytes the call has to move, K N sizeof(B) + M K sizeof(A)
//                    + M N sizeof(float), / time
//   read_GBps        small M: bytes of packed B / the time of read_sum over them (a plain
//   bw_frac          streaming read, support/peak.hpp); bw_frac = GBps / read_GBps
//   err, err_bound   512^3 rows: max |c - ref| / max(|ref|, 1), and max |c - ref| / (K u |A||B|)
//                    with u = 2^-24 (at most 1: within the bound gamma(K) of engine/tensor.hpp);
//                    ref and |A||B| (sum_k |a_ik b_kj|) from reference/matmul.hpp in fp64 on the
//                    decoded inputs. Computed at the row's first run, outside the timing
//   speedup          threads:2: one-thread time / two-thread time of the same call
//
// Timing (support/timing.hpp): the one-thread rows use the calling thread's CPU time, as the norm
// and softmax benchmarks do (on this shared machine the wall clock mostly measures waiting to be
// scheduled); every iteration times tilekern, oneDNN, OpenBLAS (and read_sum) back to back into the
// same C, alternating the order, after one untimed call of each. The threads:2 row uses wall time
// for both of its calls (the caller's CPU time misses the second thread's work).
// Small-M rows stream B from memory, not from cache: they keep copies of packed B adding up to at
// least 128 MiB (4 x the 32 MiB L3 of the machine these ran on), and each call of tilekern or
// read_sum reads the copy least recently read. oneDNN and OpenBLAS read their one copy of B, which
// those streams evict between their calls.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "support/baselines.hpp"
#include "support/peak.hpp"
#include "support/tensors.hpp"
#include "support/timing.hpp"
#include "tilekern/kernels/matmul.hpp"
#include "tilekern/reference/matmul.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

using bench::decoded;
using bench::name_of;
using bench::normal_tensor;

struct shape {
  std::size_t m, k, n;
};

enum class variant { packed, unpacked, two_threads };

constexpr shape cube{512, 512, 512};
constexpr shape vit[] = {{1576, 768, 2304}, {1576, 768, 3072}, {1576, 3072, 768}};
constexpr shape large{4096, 4096, 4096};
constexpr shape small[] = {{1, 4096, 4096}, {16, 4096, 4096}};

constexpr std::size_t small_m = 16;
constexpr std::size_t streamed_bytes = std::size_t{128} << 20;

template <class T>
std::vector<float> widened(const std::vector<T>& values) {
  if constexpr (std::is_same_v<T, float>) {
    return values;
  } else {
    std::vector<float> result(values.size());
    convert(std::span<const T>(values), std::span<float>(result));
    return result;
  }
}

// bf16 copies of values that are bf16 values (exact).
std::vector<bf16> to_bf16(const std::vector<float>& values) {
  std::vector<bf16> result(values.size());
  convert(std::span<const float>(values), std::span<bf16>(result));
  return result;
}

// The peak of the path that A x B takes (0: none measured).
template <class A, class B>
double peak_of() {
  const tensor::path where = tensor::choose_path<A, B>();
  if (where.kind == tensor::compute::bf16_pairs) {
    return bench::peak_gflops(bench::peak_loop::bf16_pairs);
  }
  if (where.level >= isa::avx512) return bench::peak_gflops(bench::peak_loop::fma_zmm);
  if (where.level == isa::avx2) return bench::peak_gflops(bench::peak_loop::fma_ymm);
  return 0;
}

struct errors {
  double relative = 0;  // max |c - ref| / max(|ref|, 1)
  double bound = 0;     // max |c - ref| / (K u |A||B|)
};

template <class A, class B>
errors measure_errors(const std::vector<A>& a, const std::vector<B>& b, const std::vector<float>& c,
                      shape s) {
  const std::vector<double> a64 = decoded(a), b64 = decoded(b);
  std::vector<double> want(s.m * s.n), magnitude(s.m * s.n);
  const view<const double> av(a64.data(), s.m, s.k), bv(b64.data(), s.k, s.n);
  reference::matmul(av, bv, view<double>(want.data(), s.m, s.n));
  reference::magnitude(av, bv, view<double>(magnitude.data(), s.m, s.n));
  const double ku = static_cast<double>(s.k) * 0x1p-24;
  errors result;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double error = std::abs(static_cast<double>(c[i]) - want[i]);
    result.relative = std::max(result.relative, error / std::max(std::abs(want[i]), 1.0));
    if (magnitude[i] > 0) result.bound = std::max(result.bound, error / (ku * magnitude[i]));
  }
  return result;
}

// What a row times against tilekern, by name: a baseline (<name>_GFLOPS, <name>_frac), "read"
// (read_GBps, bw_frac) or "one_thread" (speedup).
struct other {
  std::string name;
  std::function<void()> run;
};

template <class A, class B>
void run(benchmark::State& state, const std::string& key, shape s, variant kind) {
  const std::size_t m = s.m, k = s.k, n = s.n;
  const std::vector<A> a = normal_tensor<A>(m * k, 42);
  const std::vector<B> b = normal_tensor<B>(k * n, 43);
  std::vector<float> c(m * n);
  const view<const A> av(a.data(), m, k);
  const view<const B> bv(b.data(), k, n);
  const view<float> cv(c.data(), m, n);

  // Packed B, in copies for the small-M rows (see the top); `next` picks the least recently read.
  const bool streamed = kind == variant::packed && m <= small_m;
  std::vector<packed_matrix<B>> packed;
  packed.push_back(pack_b(bv));
  const std::size_t panels = (n + tensor::panel_width - 1) / tensor::panel_width;
  const std::size_t packed_bytes = panels * packed[0].panel_size() * sizeof(B);
  while (streamed && packed.size() * packed_bytes < streamed_bytes) packed.push_back(pack_b(bv));
  std::size_t reads = 0;
  const auto next = [&]() -> const packed_matrix<B>& { return packed[reads++ % packed.size()]; };

  const matmul_options options{.threads = kind == variant::two_threads ? 2 : 1};
  std::function<void()> kernel = [&] { matmul(av, next(), cv, options); };
  if (kind == variant::unpacked) kernel = [&] { matmul(av, bv, cv, options); };
  kernel();

  static std::map<std::string, errors> known_errors;  // the inputs are the same every run
  if (kind == variant::packed && m == 512 && k == 512 && n == 512 && !known_errors.count(key)) {
    known_errors[key] = measure_errors(a, b, c, s);
  }

  std::vector<other> others;
  if (kind == variant::two_threads) {
    const matmul_options one{.threads = 1};
    others.push_back({"one_thread", [&, one] { matmul(av, packed[0], cv, one); }});
  }
  if (streamed) {
    // The panels of a packed_matrix are one allocation today; read_sum reads it whole.
    if (panels > 1 && packed[0].panel(1) != packed[0].panel(0) + packed[0].panel_size()) {
      state.SkipWithError("packed_matrix panels are not contiguous: read them one by one");
      return;
    }
    others.push_back({"read", [&] {
                        const std::uint64_t sum = bench::read_sum(next().panel(0), packed_bytes);
                        benchmark::DoNotOptimize(sum);
                      }});
  }
  // The baselines' copies of A and B: fp32, and bf16 for formats exact in bf16.
  constexpr bool pairs = tensor::exact_in_bf16<A> && tensor::exact_in_bf16<B>;
  const std::vector<float> a32 = widened(a), b32 = widened(b);
  std::vector<bf16> a16, b16;
  if (pairs) {
    a16 = to_bf16(a32);
    b16 = to_bf16(b32);
  }
#if TILEKERN_HAVE_ONEDNN
  std::unique_ptr<bench::onednn_matmul> onednn;
  if (kind != variant::two_threads) {
    std::string type = "bf16";
    if (pairs) {
      try {
        onednn = std::make_unique<bench::onednn_matmul>(bench::dnnl_type::bf16, m, k, n, a16.data(),
                                                        b16.data(), c.data());
      } catch (const dnnl::error&) {  // no bf16 matmul for this CPU (oneDNN 2.6 below AVX-512)
        type = "f32, no bf16 matmul on this CPU";
      }
    }
    if (!onednn) {
      if (!pairs) type = "f32";
      onednn = std::make_unique<bench::onednn_matmul>(bench::dnnl_type::f32, m, k, n, a32.data(),
                                                      b32.data(), c.data());
    }
    state.SetLabel("onednn " + type + ": " + onednn->implementation());
    others.push_back({"onednn", [&] { onednn->run(); }});
  }
#endif
#if TILEKERN_HAVE_OPENBLAS
  const bench::openblas_sgemm sgemm(m, k, n, a32.data(), b32.data(), c.data());
  if (kind != variant::two_threads) others.push_back({"openblas", [&] { sgemm.run(); }});
#if TILEKERN_HAVE_OPENBLAS_SBGEMM
  const bench::openblas_sbgemm sbgemm(m, k, n, a16.data(), b16.data(), c.data());
  if (pairs && kind != variant::two_threads) others.push_back({"sbgemm", [&] { sbgemm.run(); }});
#endif
#endif
  std::vector<std::function<void()>> calls;
  for (const other& o : others) {
    o.run();  // untimed: first-touch pages, first-call allocations
    calls.push_back(o.run);
  }

  double seconds = 0;
  const auto ratios = bench::time_against(
      state, kernel, calls, seconds,
      kind == variant::two_threads ? bench::timer::wall : bench::timer::thread_cpu);
  const auto iterations = static_cast<double>(state.iterations());
  const double gflops = 2.0 * static_cast<double>(m * k * n) * iterations / seconds * 1e-9;
  state.counters["GFLOPS"] = gflops;
  const double peak = peak_of<A, B>();
  if (kind != variant::two_threads && peak > 0) state.counters["peak_frac"] = gflops / peak;
  const std::size_t bytes = k * n * sizeof(B) + m * k * sizeof(A) + m * n * sizeof(float);
  const double gbps = static_cast<double>(bytes) * iterations / seconds * 1e-9;
  if (streamed) state.counters["GBps"] = gbps;
  for (std::size_t i = 0; i < others.size(); ++i) {
    const std::string& name = others[i].name;
    if (name == "one_thread") {
      state.counters["speedup"] = ratios[i];
    } else if (name == "read") {
      const double read_gbps =
          static_cast<double>(packed_bytes) * iterations / (ratios[i] * seconds) * 1e-9;
      state.counters["read_GBps"] = read_gbps;
      state.counters["bw_frac"] = gbps / read_gbps;
    } else {
      state.counters[name + "_GFLOPS"] = gflops / ratios[i];
      state.counters[name + "_frac"] = ratios[i];
    }
  }
  if (known_errors.count(key)) {
    state.counters["err"] = known_errors[key].relative;
    state.counters["err_bound"] = known_errors[key].bound;
  }
}

void peak(benchmark::State& state, bench::peak_loop loop) {
  if (bench::run_peak(loop).flops == 0) {
    state.SkipWithError("this build cannot run the loop");
    return;
  }
  double flops = 0, seconds = 0;
  for (auto _ : state) {
    const bench::peak_run timed = bench::run_peak(loop);
    state.SetIterationTime(timed.seconds);
    flops += timed.flops;
    seconds += timed.seconds;
  }
  state.counters["GFLOPS"] = flops / seconds * 1e-9;
}

void add(const std::string& name, std::function<void(benchmark::State&)> body, int iterations = 0) {
  auto* added =
      benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& state) { body(state); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
  if (iterations > 0) added->Iterations(iterations);
}

// "matmul/<A>x<B>/<M>x<K>x<N>" (appended piece by piece: "/" + std::to_string(...) trips GCC 12's
// -Wrestrict false positive, GCC bug 105651).
template <class A, class B>
std::string row_name(shape s) {
  std::string name = "matmul/";
  name += name_of<A>();
  name += 'x';
  name += name_of<B>();
  name += '/';
  name += std::to_string(s.m);
  name += 'x';
  name += std::to_string(s.k);
  name += 'x';
  name += std::to_string(s.n);
  return name;
}

template <class A, class B>
void add_row(shape s, variant kind = variant::packed, const std::string& suffix = "") {
  const std::string name = row_name<A, B>(s) + suffix;
  const bool slow = s.m * s.k * s.n >= std::size_t{4096} * 4096 * 4096;
  add(
      name, [=](benchmark::State& state) { run<A, B>(state, name, s, kind); }, slow ? 2 : 0);
}

const bool registered = [] {
  add("matmul/peak/bf16_pairs",
      [](benchmark::State& state) { peak(state, bench::peak_loop::bf16_pairs); });
  add("matmul/peak/fma_zmm",
      [](benchmark::State& state) { peak(state, bench::peak_loop::fma_zmm); });
  add("matmul/peak/fma_ymm",
      [](benchmark::State& state) { peak(state, bench::peak_loop::fma_ymm); });

  // bf16 A times B at every shape but 4096^3.
  const auto bf16_times = []<class B>() {
    add_row<bf16, B>(cube);
    for (const shape& s : vit) add_row<bf16, B>(s);
    for (const shape& s : small) add_row<bf16, B>(s);
  };
  bf16_times.template operator()<bf16>();
  add_row<bf16, bf16>(large);
  bf16_times.template operator()<fp8_e4m3>();
  bf16_times.template operator()<fp8_e5m2>();
  add_row<fp16, fp16>(cube);
  add_row<fp16, fp16>(vit[0]);
  add_row<float, float>(cube);
  for (const shape& s : vit) add_row<float, float>(s);
  add_row<bf16, bf16>(cube, variant::unpacked, "/unpacked");
  for (const shape& s : vit) add_row<bf16, bf16>(s, variant::two_threads, "/threads:2");
  add_row<float, float>(vit[0], variant::two_threads, "/threads:2");
#if TILEKERN_HAVE_OPENBLAS
  benchmark::AddCustomContext("openblas", bench::openblas_description());
#endif
  return true;
}();

}  // namespace
}  // namespace tilekern
