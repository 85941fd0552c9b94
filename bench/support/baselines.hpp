#pragma once
// What the layernorm, rmsnorm and softmax benchmarks time tilekern's kernels against, back to back
// in every iteration (as gpsimd_bench.cpp does with memcpy): a memcpy of the same bytes, and the
// same operator through oneDNN when the build found it (TILEKERN_HAVE_ONEDNN, set by
// bench/CMakeLists.txt). Every baseline runs on the calling thread only, so that each ratio is one
// thread against one thread.
//
// oneDNN on one thread: Debian 12's libdnnl (2.6) is built with DNNL_CPU_RUNTIME = OMP (it links
// libgomp), and oneDNN then takes its thread count from omp_get_max_threads() of the calling
// thread, both when a primitive is created (some implementations size their work split then) and
// when it runs. The wrappers set that to 1 with omp_set_num_threads(1) around both (the
// single_thread guard below) and restore the caller's value afterwards, so neither
// OMP_NUM_THREADS nor the benchmark's other OpenMP users (gpsimd's threads option) are affected,
// and a oneDNN parallel section with one thread runs inline, without waking the OpenMP pool. A
// oneDNN built with another runtime is refused at compile time (sequential needs nothing; TBB and
// threadpool builds would need their own limit). The benchmark must use the same OpenMP runtime
// as libdnnl (GCC's libgomp: build with GCC; clang's -fopenmp links LLVM's libomp).
//
// rmsnorm: oneDNN 2.6 has no RMS normalisation (its layer normalisation always subtracts the
// mean; later oneDNN versions add an rms_norm flag), so rmsnorm benchmarks compare with memcpy
// only.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstring>
#include <unordered_map>
#include <utility>

#if TILEKERN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#if !defined(_OPENMP)
#error \
    "oneDNN uses OpenMP here: build the benchmarks with -fopenmp (OpenMP::OpenMP_CXX), so that the baselines can limit it to one thread"
#endif
#include <omp.h>
#elif DNNL_CPU_RUNTIME != DNNL_RUNTIME_SEQ
#error \
    "this oneDNN uses a CPU runtime other than OpenMP or sequential: limit it to one thread in support/baselines.hpp before comparing with it"
#endif
#endif

namespace tilekern::bench {

// memcpy of `bytes` from src to dst. Not inlined, and the pointers escape to the optimiser, so the
// copy is done every time it is called and timed where it is called.
[[gnu::noinline]] inline void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  benchmark::DoNotOptimize(dst);
  benchmark::DoNotOptimize(src);
  std::memcpy(dst, src, bytes);
  benchmark::ClobberMemory();
}

#if TILEKERN_HAVE_ONEDNN

enum class dnnl_type { f32, bf16 };

namespace detail {

// The calling thread's OpenMP thread count is 1 while this lives (see the top).
class single_thread {
 public:
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  single_thread() : saved_(omp_get_max_threads()) {
    omp_set_num_threads(1);
  }
  ~single_thread() {
    omp_set_num_threads(saved_);
  }
#else
  single_thread() = default;  // sequential oneDNN: one thread already
#endif
  single_thread(const single_thread&) = delete;
  single_thread& operator=(const single_thread&) = delete;

 private:
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  int saved_;
#endif
};

inline dnnl::memory::data_type data_type_of(dnnl_type type) {
  return type == dnnl_type::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// rows x cols, row-major, no padding.
inline dnnl::memory::desc matrix_desc(dnnl_type type, std::size_t rows, std::size_t cols) {
  return dnnl::memory::desc(
      {static_cast<dnnl::memory::dim>(rows), static_cast<dnnl::memory::dim>(cols)},
      data_type_of(type), dnnl::memory::format_tag::ab);
}

// A primitive with its arguments bound once, run on one CPU stream, one thread. The scratchpad is
// the caller's (allocated here, once), so run() never allocates.
class bound_primitive {
 public:
  void run() {
    const single_thread one;
    primitive_.execute(stream_, arguments_);
    stream_.wait();
  }

 protected:
  // Call from the derived constructor, under a single_thread guard.
  void bind(const dnnl::primitive_desc& descriptor,
            std::unordered_map<int, dnnl::memory> arguments) {
    arguments_ = std::move(arguments);
    scratchpad_ = dnnl::memory(descriptor.scratchpad_desc(), engine_);
    arguments_.insert({DNNL_ARG_SCRATCHPAD, scratchpad_});
    primitive_ = dnnl::primitive(descriptor);
  }
  static dnnl::primitive_attr user_scratchpad() {
    dnnl::primitive_attr attributes;
    attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attributes;
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};

 private:
  dnnl::primitive primitive_;
  dnnl::memory scratchpad_;
  std::unordered_map<int, dnnl::memory> arguments_;
};

}  // namespace detail

// oneDNN 2.6 layer normalisation forward, inference, over the last axis of rows x cols:
// y = (x - mean) / sqrt(var + eps) * gamma + beta (flags use_scale | use_shift; the mean and
// variance are computed, not given). src and dst in `type`, gamma and beta f32 (cols each). The
// buffers are the caller's and must outlive this object; run() computes dst from src.
class onednn_layernorm : public detail::bound_primitive {
 public:
  onednn_layernorm(dnnl_type type, std::size_t rows, std::size_t cols, float eps, const void* src,
                   const float* gamma, const float* beta, void* dst) {
    const detail::single_thread one;
    const dnnl::memory::desc data = detail::matrix_desc(type, rows, cols);
    const dnnl::memory::desc vector({static_cast<dnnl::memory::dim>(cols)},
                                    dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
    const dnnl::layer_normalization_forward::desc operation(
        dnnl::prop_kind::forward_inference, data, eps,
        dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift);
    const dnnl::layer_normalization_forward::primitive_desc descriptor(operation, user_scratchpad(),
                                                                       engine_);
    // oneDNN takes non-const handles; it only reads src, gamma and beta.
    bind(descriptor, {{DNNL_ARG_SRC, dnnl::memory(data, engine_, const_cast<void*>(src))},
                      {DNNL_ARG_SCALE, dnnl::memory(vector, engine_, const_cast<float*>(gamma))},
                      {DNNL_ARG_SHIFT, dnnl::memory(vector, engine_, const_cast<float*>(beta))},
                      {DNNL_ARG_DST, dnnl::memory(data, engine_, dst)}});
  }
};

// oneDNN 2.6 softmax forward (softmax_v2, algorithm softmax_accurate: max subtracted first),
// inference, over the last axis of rows x cols, src and dst in `type`. The buffers are the
// caller's and must outlive this object; run() computes dst from src.
class onednn_softmax : public detail::bound_primitive {
 public:
  onednn_softmax(dnnl_type type, std::size_t rows, std::size_t cols, const void* src, void* dst) {
    const detail::single_thread one;
    const dnnl::memory::desc data = detail::matrix_desc(type, rows, cols);
    const dnnl::softmax_v2_forward::desc operation(dnnl::prop_kind::forward_inference,
                                                   dnnl::algorithm::softmax_accurate, data, data,
                                                   /*softmax_axis=*/1);
    const dnnl::softmax_v2_forward::primitive_desc descriptor(operation, user_scratchpad(),
                                                              engine_);
    bind(descriptor, {{DNNL_ARG_SRC, dnnl::memory(data, engine_, const_cast<void*>(src))},
                      {DNNL_ARG_DST, dnnl::memory(data, engine_, dst)}});
  }
};

#endif  // TILEKERN_HAVE_ONEDNN

}  // namespace tilekern::bench
