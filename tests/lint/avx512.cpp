// Compiled, never run (tests/CMakeLists.txt: lint/avx512/<kernel>): one kernel header, alone, for
// an AVX-512 CPU with AVX512-BF16, AVX512-FP16 and AMX (-march=sapphirerapids), at -O1 with
// warnings as errors, on every machine. A -march=native build on an AVX2 machine never compiles
// the 16-lane paths, and gcc 12's maybe-uninitialized false positives on AVX-512 intrinsics (bug
// 105593) appear only where those paths are instantiated and optimised, and only in translation
// units that have not included xsimd first (engine/gpsimd.hpp silences them for the intrinsics'
// own lines): softmax's exp table lookup once broke every AVX-512 build of softmax_test.cpp that
// way, unseen by the AVX2 machines that tested it. At -O1: gcc 12 gives the headers' "'__Y' is
// used uninitialized" warnings alike at -O1 and -O2 (that lookup's _mm512_permutexvar_ps among
// them), and -O1 takes two thirds of the time (CONTRIBUTING.md, stop 77). Each kernel for float,
// bf16 and fp16 (the formats with AVX-512 instructions of their own) and fp8_e4m3 (the general
// encoder).
#include <span>

#if defined(TILEKERN_LINT_LAYERNORM)
#include "tilekern/kernels/layernorm.hpp"
#elif defined(TILEKERN_LINT_RMSNORM)
#include "tilekern/kernels/rmsnorm.hpp"
#elif defined(TILEKERN_LINT_SOFTMAX)
#include "tilekern/kernels/softmax.hpp"
#elif defined(TILEKERN_LINT_ACTIVATION)
#include "tilekern/kernels/activation.hpp"
#elif defined(TILEKERN_LINT_MATMUL)
#include "tilekern/kernels/matmul.hpp"
#endif
#include "tilekern/types/formats.hpp"

namespace tilekern::lint {

template <class T>
void kernel(view<const T> x, view<T> y, [[maybe_unused]] std::span<const float> gamma,
            [[maybe_unused]] std::span<float> dgamma, [[maybe_unused]] std::span<float> dbeta) {
  [[maybe_unused]] const cast_options stochastic{.round = rounding::stochastic};
#if defined(TILEKERN_LINT_LAYERNORM)
  layernorm(x, gamma, gamma, y, 1e-5f);
  layernorm_backward(x, x, gamma, y, dgamma, dbeta, 1e-5f, stochastic);
#elif defined(TILEKERN_LINT_RMSNORM)
  rmsnorm(x, gamma, y, 1e-6f);
  rmsnorm_backward(x, x, gamma, y, dgamma, 1e-6f, stochastic);
#elif defined(TILEKERN_LINT_SOFTMAX)
  softmax(x, y);
  softmax_backward(x, x, y, {}, stochastic);
#elif defined(TILEKERN_LINT_ACTIVATION)
  activation(x, y, act::gelu_tanh, stochastic);
#elif defined(TILEKERN_LINT_MATMUL)
  matmul(x, x, y);
#else
#error "define TILEKERN_LINT_<KERNEL>: LAYERNORM, RMSNORM, SOFTMAX, ACTIVATION or MATMUL"
#endif
}

template void kernel<float>(view<const float>, view<float>, std::span<const float>,
                            std::span<float>, std::span<float>);
template void kernel<bf16>(view<const bf16>, view<bf16>, std::span<const float>, std::span<float>,
                           std::span<float>);
template void kernel<fp16>(view<const fp16>, view<fp16>, std::span<const float>, std::span<float>,
                           std::span<float>);
template void kernel<fp8_e4m3>(view<const fp8_e4m3>, view<fp8_e4m3>, std::span<const float>,
                               std::span<float>, std::span<float>);

}  // namespace tilekern::lint
