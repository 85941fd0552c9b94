#pragma once
// Which instruction-set path runs: what the CPU offers (detected once, at run time), what this
// translation unit was compiled for, and a cap from the environment or the program. Also the size
// of the kernels' blocks of rows, from the CPU's L2 cache (row_block_bytes(), at the end), and the
// size of its L1 data cache.
//
//   active_isa() = min(detected_isa(), compiled_isa(), cap)
//
// The cap is `TILEKERN_ISA` (scalar, avx2, avx512 or amx), read once, or set_isa_cap(), which
// takes precedence. A cap above what the machine has is no error (it is a cap); an unknown value
// is: active_isa() throws std::invalid_argument naming it.
//
// AMX needs the CPU's AMX-TILE and AMX-BF16, the OS's XTILEDATA state, and Linux's permission
// (arch_prctl(ARCH_REQ_XCOMP_PERM)), which detection requests once; Linux may refuse it.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tilekern {

enum class isa : std::uint8_t { scalar, avx2, avx512, amx };

inline constexpr isa all_isas[] = {isa::scalar, isa::avx2, isa::avx512, isa::amx};

constexpr std::string_view name(isa level) {
  switch (level) {
    case isa::scalar:
      return "scalar";
    case isa::avx2:
      return "avx2";
    case isa::avx512:
      return "avx512";
    case isa::amx:
      return "amx";
  }
  return "?";
}

constexpr std::optional<isa> parse_isa(std::string_view text) {
  for (isa level : all_isas) {
    if (name(level) == text) return level;
  }
  return std::nullopt;
}

// The path levels mean: avx2 = AVX2 + FMA + F16C; avx512 = AVX-512 F, BW, DQ and VL (with
// AVX512-BF16 instructions used where present; AVX512-FP16 is detected and reported, and no
// path needs it yet); amx = avx512 + AMX-TILE/BF16.
struct cpu_features {
  bool avx2 = false;    // with FMA, F16C and OS support for ymm state
  bool avx512 = false;  // F, BW, DQ, VL and OS support for zmm state
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool amx = false;            // AMX-TILE and AMX-BF16, XTILEDATA enabled by the OS
  bool amx_permitted = false;  // and Linux granted this process the tile data state
  bool amd = false;            // the vendor is AuthenticAMD
  unsigned family = 0;  // CPUID's family, its extended family added (AMD: 25 Zen 4, 26 Zen 5)
};

namespace detail {

#if defined(__x86_64__) || defined(__i386__)
constexpr bool bit(unsigned word, int position) {
  return ((word >> position) & 1u) != 0;
}

inline cpu_features detect_cpu_features() {
  cpu_features features;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __cpuid(0, eax, ebx, ecx, edx);
  features.amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // "AuthenticAMD"
  const unsigned max_leaf = eax;
  __cpuid_count(1, 0, eax, ebx, ecx, edx);
  const unsigned base_family = (eax >> 8) & 0xfu;
  features.family = base_family + (base_family == 0xfu ? (eax >> 20) & 0xffu : 0u);
  if (max_leaf < 7) return features;
  const bool osxsave = bit(ecx, 27), fma = bit(ecx, 12), f16c = bit(ecx, 29);
  if (!osxsave) return features;
  std::uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const std::uint64_t xcr0 = (std::uint64_t{xcr0_hi} << 32) | xcr0_lo;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;
  const bool os_tiles = (xcr0 & 0x60000) == 0x60000;

  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const unsigned leaf7_ebx = ebx, leaf7_edx = edx;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  const unsigned leaf7_1_eax = eax;

  features.avx2 = os_ymm && bit(leaf7_ebx, 5) && fma && f16c;
  const unsigned avx512_bits = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);  // F DQ BW VL
  features.avx512 = features.avx2 && os_zmm && (leaf7_ebx & avx512_bits) == avx512_bits;
  features.avx512_bf16 = features.avx512 && bit(leaf7_1_eax, 5);
  features.avx512_fp16 = features.avx512 && bit(leaf7_edx, 23);
  features.amx = features.avx512 && os_tiles && bit(leaf7_edx, 24) && bit(leaf7_edx, 22);
#if defined(__linux__)
  if (features.amx) {
    constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    features.amx_permitted = syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
  }
#endif
  return features;
}
#else
inline cpu_features detect_cpu_features() {
  return {};
}
#endif

inline std::atomic<int>& isa_cap_override() {
  static std::atomic<int> cap{-1};
  return cap;
}

inline std::optional<isa> environment_isa_cap() {
  static const std::optional<isa> cap = [] {
    const char* text = std::getenv("TILEKERN_ISA");  // NOLINT(concurrency-mt-unsafe): read once
    if (text == nullptr || *text == '\0') return std::optional<isa>{};
    auto level = parse_isa(text);
    if (!level) {
      throw std::invalid_argument(std::string("TILEKERN_ISA='") + text +
                                  "' is not one of scalar, avx2, avx512, amx");
    }
    return level;
  }();
  return cap;
}

}  // namespace detail

inline const cpu_features& detected_cpu_features() {
  static const cpu_features features = detail::detect_cpu_features();
  return features;
}

inline isa detected_isa() {
  const cpu_features& f = detected_cpu_features();
  if (f.amx && f.amx_permitted) return isa::amx;
  if (f.avx512) return isa::avx512;
  if (f.avx2) return isa::avx2;
  return isa::scalar;
}

// What the including translation unit was compiled for (the library adapts to the build
// machine: tilekern::tilekern compiles with -march=native unless TILEKERN_NATIVE is off).
constexpr isa compiled_isa() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
  return isa::amx;
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
  return isa::avx512;
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  return isa::avx2;
#else
  return isa::scalar;
#endif
}

// Overrides TILEKERN_ISA for the whole process; std::nullopt returns to it.
inline void set_isa_cap(std::optional<isa> cap) {
  detail::isa_cap_override().store(cap ? static_cast<int>(*cap) : -1);
}

inline std::optional<isa> isa_cap() {
  const int cap = detail::isa_cap_override().load(std::memory_order_relaxed);
  if (cap >= 0) return static_cast<isa>(cap);
  return detail::environment_isa_cap();
}

// The path that runs, at most `limit` (for code that has fewer paths than the machine).
inline isa active_isa(isa limit = isa::amx) {
  isa level = std::min({detected_isa(), compiled_isa(), limit});
  if (auto cap = isa_cap()) level = std::min(level, *cap);
  return level;
}

// One line for logs and reports, e.g. "avx512 (cpu: avx512, avx512-bf16; cap: none)".
inline std::string describe_isa() {
  const cpu_features& f = detected_cpu_features();
  std::string text(name(active_isa()));
  text += " (cpu: ";
  text += name(detected_isa());
  if (f.avx512_bf16) text += ", avx512-bf16";
  if (f.avx512_fp16) text += ", avx512-fp16";
  if (f.amx && !f.amx_permitted) text += ", amx refused by the OS";
  text += "; compiled: ";
  text += name(compiled_isa());
  text += "; cap: ";
  auto cap = isa_cap();
  text += cap ? name(*cap) : std::string_view("none");
  text += ")";
  return text;
}

// ---- Blocks of rows ----

// The size of one core's L1 data cache in bytes, as the C library reports it (read once), or
// 32 KiB where it does not say.
inline std::size_t l1_cache_bytes() {
  static const std::size_t bytes = [] {
#if defined(_SC_LEVEL1_DCACHE_SIZE)
    const long reported = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    if (reported > 0) return static_cast<std::size_t>(reported);
#endif
    return std::size_t{32} << 10;
  }();
  return bytes;
}

// The size of one core's L2 cache in bytes, as the C library reports it (read once), or 256 KiB
// where it does not say.
inline std::size_t l2_cache_bytes() {
  static const std::size_t bytes = [] {
#if defined(_SC_LEVEL2_CACHE_SIZE)
    const long reported = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (reported > 0) return static_cast<std::size_t>(reported);
#endif
    return std::size_t{256} << 10;
  }();
  return bytes;
}

namespace detail {
inline std::atomic<std::size_t>& row_block_bytes_override() {
  static std::atomic<std::size_t> bytes{0};  // 0: none
  return bytes;
}
}  // namespace detail

// The normalisation and softmax kernels work through blocks of rows, each about this many bytes
// (of the input; softmax counts its fp32 scratch too), so that a block read from memory by one
// pass is still in L2 for the next: half of l2_cache_bytes(), within 128 KiB and 1 MiB, unless
// set_row_block_bytes() says otherwise. A block holds at least one row, however long. The results
// do not depend on it, only the speed.
inline std::size_t row_block_bytes() {
  if (const std::size_t bytes = detail::row_block_bytes_override().load()) return bytes;
  return std::clamp<std::size_t>(l2_cache_bytes() / 2, std::size_t{128} << 10,
                                 std::size_t{1} << 20);
}

// Overrides row_block_bytes() for the whole process, to tune or to test (0 counts as 1: a row a
// block); std::nullopt returns to the default.
inline void set_row_block_bytes(std::optional<std::size_t> bytes) {
  detail::row_block_bytes_override().store(bytes ? std::max<std::size_t>(*bytes, 1) : 0);
}

namespace detail {
inline std::atomic<bool>& row_passes_setting() {
  static std::atomic<bool> on{true};
  return on;
}
}  // namespace detail

// Whether layernorm, rmsnorm and softmax run each row's passes one after the other, the row in
// L1 for the later ones (true, the default, where the kernel can: see the kernels' headers), or
// each pass over a whole block of rows. The results are the same bits either way;
// set_row_passes(false) is there to measure the difference and to test it. std::nullopt returns to
// the default.
inline bool row_passes() {
  return detail::row_passes_setting().load();
}
inline void set_row_passes(std::optional<bool> on) {
  detail::row_passes_setting().store(on.value_or(true));
}

}  // namespace tilekern
