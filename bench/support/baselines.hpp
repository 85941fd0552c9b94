#pragma once
// What the benchmarks time tilekern's kernels against, back to back in every iteration (as
// gpsimd_bench.cpp does with memcpy): a memcpy of the same bytes; the same operator through oneDNN
// when the build found it (TILEKERN_HAVE_ONEDNN, set by bench/CMakeLists.txt): layer
// normalisation, softmax, matmul; and OpenBLAS's sgemm when the build found OpenBLAS
// (TILEKERN_HAVE_OPENBLAS). Every baseline runs on the calling thread only, so that each ratio is
// one thread against one thread.
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
// OpenBLAS on one thread: openblas_set_num_threads(1) (Debian's libopenblas0-pthread runs its own
// pthreads pool, not OpenMP), set when an openblas_sgemm is made. OpenBLAS has no pre-packed
// interface: each cblas_sgemm call packs its operands itself. Debian 12's OpenBLAS 0.3.21
// declares cblas_sbgemm (bf16 x bf16 -> fp32) in cblas.h but is built without BUILD_BFLOAT16, so
// the library does not export it; bench/CMakeLists.txt checks by linking
// (TILEKERN_HAVE_OPENBLAS_SBGEMM) and openblas_description() says which.
//
// rmsnorm: oneDNN 2.6 has no RMS normalisation (its layer normalisation always subtracts the
// mean; later oneDNN versions add an rms_norm flag), so rmsnorm benchmarks compare with memcpy
// only.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
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

#if TILEKERN_HAVE_OPENBLAS
#include <cblas.h>
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

// A oneDNN baseline for a benchmark that times it beside tilekern's kernel: made if oneDNN has
// it for this CPU, else null, with the reason in the benchmark's label (oneDNN 2.6 has no bf16
// layer normalisation or softmax below AVX-512), so the kernel is still measured.
template <class Baseline, class... Args>
std::unique_ptr<Baseline> baseline_if_supported(benchmark::State& state, Args&&... args) {
  try {
    return std::make_unique<Baseline>(std::forward<Args>(args)...);
  } catch (const dnnl::error& error) {
    state.SetLabel(std::string("no oneDNN baseline: ") + error.what());
    return nullptr;
  }
}

// oneDNN 2.6 matmul: dst (m x n, f32) = src (m x k) weights (k x n), src and weights in `type`,
// all row-major in the caller's memory, which must outlive this object. The weights are reordered
// here, once, into the layout the implementation prefers (weights descriptor format_tag::any),
// into memory this object owns; run() multiplies. The shapes are fixed when it is made, as
// oneDNN likes best.
class onednn_matmul : public detail::bound_primitive {
 public:
  onednn_matmul(dnnl_type type, std::size_t m, std::size_t k, std::size_t n, const void* src,
                const void* weights, float* dst) {
    const detail::single_thread one;
    const dnnl::memory::desc src_desc = detail::matrix_desc(type, m, k);
    const dnnl::memory::desc user_weights = detail::matrix_desc(type, k, n);
    const dnnl::memory::desc any_weights(
        {static_cast<dnnl::memory::dim>(k), static_cast<dnnl::memory::dim>(n)},
        detail::data_type_of(type), dnnl::memory::format_tag::any);
    const dnnl::memory::desc dst_desc = detail::matrix_desc(dnnl_type::f32, m, n);
    const dnnl::matmul::desc operation(src_desc, any_weights, dst_desc);
    const dnnl::matmul::primitive_desc descriptor(operation, user_scratchpad(), engine_);
    implementation_ = descriptor.impl_info_str();
    packed_ = dnnl::memory(descriptor.weights_desc(), engine_);
    dnnl::memory user(user_weights, engine_, const_cast<void*>(weights));
    dnnl::reorder(user, packed_).execute(stream_, user, packed_);
    stream_.wait();
    bind(descriptor, {{DNNL_ARG_SRC, dnnl::memory(src_desc, engine_, const_cast<void*>(src))},
                      {DNNL_ARG_WEIGHTS, packed_},
                      {DNNL_ARG_DST, dnnl::memory(dst_desc, engine_, dst)}});
  }

  // The implementation oneDNN chose, e.g. "brg:avx512_core_bf16".
  const std::string& implementation() const { return implementation_; }

 private:
  dnnl::memory packed_;
  std::string implementation_;
};

#endif  // TILEKERN_HAVE_ONEDNN

#if TILEKERN_HAVE_OPENBLAS

// OpenBLAS's cblas_sgemm on one thread: c (m x n) = a (m x k) b (k x n), row-major fp32, in the
// caller's memory, which must outlive this object.
class openblas_sgemm {
 public:
  openblas_sgemm(std::size_t m, std::size_t k, std::size_t n, const float* a, const float* b,
                 float* c)
      : m_(static_cast<blasint>(m)),
        k_(static_cast<blasint>(k)),
        n_(static_cast<blasint>(n)),
        a_(a),
        b_(b),
        c_(c) {
    openblas_set_num_threads(1);
  }
  void run() const {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m_, n_, k_, 1.0f, a_, k_, b_, n_, 0.0f,
                c_, n_);
  }

 private:
  blasint m_, k_, n_;
  const float* a_;
  const float* b_;
  float* c_;
};

#if TILEKERN_HAVE_OPENBLAS_SBGEMM
// OpenBLAS's cblas_sbgemm on one thread: c (m x n, fp32) = a (m x k) b (k x n), a and b bf16
// codes (16-bit), row-major, in the caller's memory, which must outlive this object.
class openblas_sbgemm {
 public:
  openblas_sbgemm(std::size_t m, std::size_t k, std::size_t n, const void* a, const void* b,
                  float* c)
      : m_(static_cast<blasint>(m)),
        k_(static_cast<blasint>(k)),
        n_(static_cast<blasint>(n)),
        a_(static_cast<const bfloat16*>(a)),
        b_(static_cast<const bfloat16*>(b)),
        c_(c) {
    openblas_set_num_threads(1);
  }
  void run() const {
    cblas_sbgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m_, n_, k_, 1.0f, a_, k_, b_, n_, 0.0f,
                 c_, n_);
  }

 private:
  blasint m_, k_, n_;
  const bfloat16* a_;
  const bfloat16* b_;
  float* c_;
};
#endif

// What the benchmark's context says about OpenBLAS: its build and kernels, and whether it has
// sbgemm.
inline std::string openblas_description() {
  return std::string(openblas_get_config()) + ", kernels " + openblas_get_corename() +
#if TILEKERN_HAVE_OPENBLAS_SBGEMM
         "; cblas_sgemm on fp32 copies, and cblas_sbgemm on bf16 copies";
#else
         "; cblas_sgemm on fp32 copies; cblas_sbgemm unavailable (declared in cblas.h, not "
         "exported by this library)";
#endif
}

#endif  // TILEKERN_HAVE_OPENBLAS

}  // namespace tilekern::bench
