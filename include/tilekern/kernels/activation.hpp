#pragma once
// The activation functions of the scalar engine as standalone kernels: y = f(x) elementwise, on
// runtime-shaped tensors in any format.
//
//   activation(x, y, f, cast)      f a tilekern::act (simd/math.hpp): identity, exp, log, tanh,
//                                  sigmoid, relu, gelu_erf, gelu_tanh, silu, softplus, mish, erf,
//                                  sqrt, rsqrt, reciprocal, square, abs
//
// One pass of scalar::activation (engine/scalar.hpp): x is decoded exactly to fp32, f computed in
// fp32 lanes, and the result encoded into y's format with `cast`. Accuracy: the fp32 result is
// within accuracy(f).max_ulp fp32 ulp of f(x) over accuracy(f)'s input range (simd/math.hpp); y
// then adds its format's rounding: with nearest even, y is F::from(f(x)) (the correctly rounded
// result) except where f(x) lies within that fp32 error of a rounding boundary of F, where it may
// be the neighbour on the other side of the boundary; stochastically, one of the two codes
// bracketing the fp32 result. The fp64 version is reference::activation (reference/activation.hpp).
//
// Tables. An x of at most 16 bits a code (bf16, fp16, the fp8 formats) has at most 65536 values,
// so where the result does not depend on the element's position (y float, or rounded to nearest
// even) y is looked up: table[code of x], the table holding that same pass's result for every
// code of x. The bits are those of the pass, on every ISA path. Only the functions built from exp
// and log have tables (exp, log, tanh, sigmoid, gelu_erf, gelu_tanh, silu, softplus, mish, erf:
// tens of operations a lane; the others take a few and are as fast computed). A table is built
// by the first call that needs it with at least as many elements as x has codes (65536 for a
// 16-bit x, so building at most doubles that call's work), and kept for the process: one per
// function, format of x, format of y and overflow mode, 2^bits(x) elements of y (bf16 to bf16:
// 128 KiB), in the floating-point environment of the call that builds it. Smaller calls before
// it compute. For silu and gelu_tanh on bf16 (16 Mi elements, one thread, an Intel Xeon of the
// Cascade Lake generation) the lookup took 0.4 to 0.7 of the computation's time: see
// CONTRIBUTING.md, "Known gaps". The lookup gathers 16 entries at a time where the CPU's gathers
// are fast (lookup_gathers); each table then holds a few bytes more than its entries. Elsewhere a
// y larger than the caches (stream_threshold(), engine/lanes.hpp) of 2- or 4-byte entries is
// written with non-temporal stores (activation_lookup), as is one computed for a function that
// has no table (activation_computed).
//
// Rounding: element (r, c) of a rows x cols y draws its stochastic bits with index r * cols + c,
// stream cast.stream. y may be x itself (the same memory and format). x and y must have the same
// shape: otherwise shape_error naming the kernel, the argument and both sizes, before anything is
// written.

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tilekern/engine/scalar.hpp"
#include "tilekern/error.hpp"
#include "tilekern/simd/math.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/rounding.hpp"

namespace tilekern {

namespace detail {

// Whether f has a table (see the top of this header): the functions built from exp and log.
constexpr bool tabulated(act f) {
  switch (f) {
    case act::identity:
    case act::relu:
    case act::sqrt:
    case act::rsqrt:
    case act::reciprocal:
    case act::square:
    case act::abs:
      return false;
    default:
      return true;
  }
}

// Whether x's format has tables: at most 16 bits a code.
template <class X>
concept tabulated_format = minifloat_format<X> && X::code_bits <= 16;

// y = f(x) computed: one pass of scalar::activation. Where f is not tabulated (a few operations a
// lane) and y is larger than the caches (streams(y)), the columns that fill whole 64-byte lines
// of y's rows go with non-temporal stores (write_rounded; where y's stride is whole lines too,
// engine/lanes.hpp). On a 2-core AMD EPYC (Zen 4), a timing program (as for activation_lookup
// below): relu from bf16 to bf16 over 16 Mi elements 1.16-1.30 times as fast streamed; silu and
// gelu_tanh, bound by their arithmetic, took 1.07-1.09 times as long streamed, and are not
// (stop 73).
template <class X, class Y>
void activation_computed(view<const X> x, view<Y> y, act f, const cast_options& cast) {
  write_rounded(y, cast, 0, !tabulated(f) && streams(y),
                [&](const auto& to, std::size_t c, std::size_t k) {
                  scalar::activation(to, x.block(0, c, x.rows(), k), f);
                });
}

// The entries a table holds after its last code's, so that 4 bytes read from any entry lie inside
// it (activation_gather).
template <class Y>
inline constexpr std::size_t table_padding = sizeof(Y) < 4 ? 4 / sizeof(Y) - 1 : 0;

// The table of f from X to Y, rounded to nearest even with on_overflow: entry i is
// activation_computed's result for X::from_code(i). Built on the first call with `build`, then
// kept; nullptr before that. A built table is found without taking the lock.
template <class X, class Y>
const Y* activation_table(act f, overflow on_overflow, bool build) {
  constexpr std::size_t slots = 2 * std::size(all_acts);
  static std::array<std::atomic<const Y*>, slots> built{};
  static std::array<std::vector<Y>, slots> tables;
  static std::mutex mutex;
  const std::size_t slot =
      2 * static_cast<std::size_t>(f) + (on_overflow == overflow::saturate ? 1 : 0);
  const Y* ready = built[slot].load(std::memory_order_acquire);
  if (ready != nullptr || !build) return ready;
  const std::lock_guard lock(mutex);
  if (tables[slot].empty()) {
    constexpr std::size_t codes = std::size_t{1} << X::code_bits;
    std::vector<X> every_code(codes);
    for (std::size_t code = 0; code < codes; ++code)
      every_code[code] = X::from_code(static_cast<std::uint32_t>(code));
    std::vector<Y> table(codes + table_padding<Y>);
    activation_computed(view<const X>(every_code.data(), 1, codes), view<Y>(table.data(), 1, codes),
                        f, {.on_overflow = on_overflow});
    tables[slot] = std::move(table);
    built[slot].store(tables[slot].data(), std::memory_order_release);
  }
  return tables[slot].data();
}

#if defined(TILEKERN_CONVERT_AVX512)
// to[c] = table[code of from[c]] for the whole vectors of 16 elements of a row of `cols`, each
// vector's codes widened to 32 bits, the 4 bytes from each one's entry on gathered (vpgatherdd,
// byte offsets code * sizeof(Y)) and cut to the entry's width. Returns how many it looked up.
template <class X, class Y>
std::size_t activation_gather(const X* from, Y* to, std::size_t cols, const Y* table) {
  namespace hn = hwy::HWY_NAMESPACE;
  using code = typename X::storage_type;
  using entry = hwy::UnsignedFromSize<sizeof(Y)>;
  const hn::Simd<std::int32_t, 16, 0> d32;
  const hn::Rebind<std::uint32_t, decltype(d32)> du32;
  const hn::Rebind<code, decltype(d32)> dcode;
  const hn::Rebind<entry, decltype(d32)> dentry;
  constexpr int shift = sizeof(Y) == 4 ? 2 : sizeof(Y) == 2 ? 1 : 0;
  const auto* const words = reinterpret_cast<const std::int32_t*>(table);
  std::size_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    const auto codes = hn::LoadU(dcode, reinterpret_cast<const code*>(from + c));
    const auto offsets = hn::ShiftLeft<shift>(hn::PromoteTo(d32, codes));
    const auto gathered = hn::BitCast(du32, hn::GatherOffset(d32, words, offsets));
    if constexpr (sizeof(Y) == 4) {
      hn::StoreU(gathered, du32, reinterpret_cast<entry*>(to + c));
    } else {
      hn::StoreU(hn::TruncateTo(dentry, gathered), dentry, reinterpret_cast<entry*>(to + c));
    }
  }
  return c;
}
#endif

// Whether activation_lookup gathers (activation_gather): on the AVX-512 path of CPUs with
// AVX512-FP16 (Intel's, Sapphire Rapids and later). On a 2-core Intel Xeon of that kind (Emerald
// Rapids class), the bench built with and without the gathers, three rounds alternating the two,
// silu, gelu_tanh and exp from bf16 to bf16 ran 1.26-1.46 times as fast over 16 Mi elements
// (0.43-0.46 of memcpy to 0.59-0.63) and 1.27-1.41 over 1 Mi. The older AVX-512 CPUs, whose
// gathers the microcode mitigation of Gather Data Sampling (Downfall) slows several times over,
// and AMD's look up element by element: on a 2-core AMD EPYC (Zen 4), the gathers ran silu from
// bf16 to bf16 0.71-0.73 times as fast over 1 Mi elements and 0.94-1.06 over 16 Mi (a timing
// program calling builds with and without them in turn, three processes; stop 57). On a Zen 5, a
// hand loop over 16 Ki 16-bit codes in L1 took 0.37 ns an element with vpgatherdd, 0.24 eight at
// a time as lookup_eight takes them (stop 71).
inline bool lookup_gathers() {
  return active_isa() >= isa::avx512 && detected_cpu_features().avx512_fp16;
}

// Whether lookup_eight takes entries of Y: 2 or 4 bytes, on a little-endian machine.
template <class Y>
inline constexpr bool lookup_by_eight =
    (sizeof(Y) == 2 || sizeof(Y) == 4) && std::endian::native == std::endian::little;

// Bytes (a multiple of 16) from `from` to `to` (on 16 bytes) with non-temporal stores, which do
// not read the lines they write first (engine/lanes.hpp, destination); plain ones off x86.
template <std::size_t Bytes>
HWY_INLINE void stream_bytes(void* to, const void* from) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::Simd<std::uint8_t, 16, 0> d;
  for (std::size_t i = 0; i < Bytes; i += 16) {
    hn::Stream(hn::LoadU(d, static_cast<const std::uint8_t*>(from) + i), d,
               static_cast<std::uint8_t*>(to) + i);
  }
#else
  std::memcpy(to, from, Bytes);
#endif
}

// to[i] = table[code of from[i]] for i < 8, entries of 2 or 4 bytes: the 8 entries into an array
// stored at once (in place too: every load comes before the store). gcc 12 assembles the array of
// unsigned integers in a vector register (vpinsrw, vpinsrd) and stores it with one instruction
// (an array of Y it assembled by shifts in general registers). On a 2-core AMD EPYC (Zen 5,
// stop 66): a timing program, medians of 9 to 15 rounds, silu over 1 Mi elements 0.82-0.93 times
// the time of four at a time (a code, an entry and a store each) for 16-bit codes, or 8-bit codes,
// into 16- or 32-bit entries, bf16 to bf16 over 16 Mi 0.89-0.92; the bench, built with and
// without, alternated four times, silu and gelu_tanh bf16 0.91-0.95 at 1 Mi and 0.89-0.90 at
// 16 Mi (medians of the four runs' medians). 16 at a time took 1.16-1.26 times the time of 8,
// and 1-byte entries (fp8 to fp8) 1.11 times that of four at a time, which they keep. The codes
// then came by 64-bit loads, taken apart by shifts; for 2-byte entries they now come one load
// each: on a 2-core AMD EPYC (Zen 4), a timing program, medians of 15 rounds over 64 Ki elements
// in cache, silu bf16 to bf16 1.09-1.11 times as fast, fp8_e4m3 to bf16 1.24-1.28, fp16 to fp16
// 1.01-1.02, but bf16 and fp8_e4m3 to float 0.89-0.98, which keep the 64-bit loads; streamed,
// silu and gelu_tanh bf16 to bf16 over 16 Mi 1.08-1.11 (stop 73). Streamed, the 8 entries go
// with non-temporal stores (stream_bytes), `to` on 16 bytes.
template <bool Streamed, class X, class Y>
HWY_INLINE void lookup_eight(const X* from, Y* to, const Y* table) {
  using code = typename X::storage_type;
  using entry = hwy::UnsignedFromSize<sizeof(Y)>;
  entry entries[8];
  if constexpr (sizeof(Y) == 2) {
    for (std::size_t i = 0; i < 8; ++i) std::memcpy(&entries[i], table + from[i].code(), sizeof(Y));
  } else {
    constexpr std::size_t per_word = sizeof(std::uint64_t) / sizeof(code);
    std::uint64_t words[8 / per_word];
    std::memcpy(words, from, sizeof words);
    for (std::size_t i = 0; i < 8; ++i) {
      const auto c = static_cast<code>(words[i / per_word] >> (8 * sizeof(code) * (i % per_word)));
      std::memcpy(&entries[i], table + c, sizeof(Y));
    }
  }
  if constexpr (Streamed) {
    stream_bytes<sizeof entries>(to, entries);
  } else {
    std::memcpy(to, entries, sizeof entries);
  }
}

// to[c] = table[code of from[c]] for c < n: eight at a time by lookup_eight where the entries are
// 2 or 4 bytes (Streamed: with non-temporal stores, n then a multiple of 8 and `to` on 16 bytes),
// then four at a time, their four lookups before their four stores (in place too; about 15%
// faster than one at a time), then one at a time.
template <bool Streamed, class X, class Y>
void lookup_range(const X* from, Y* to, std::size_t n, const Y* table) {
  std::size_t c = 0;
  if constexpr (lookup_by_eight<Y>) {
    for (; c + 8 <= n; c += 8) lookup_eight<Streamed>(from + c, to + c, table);
  }
  for (; c + 4 <= n; c += 4) {
    const Y y0 = table[from[c].code()], y1 = table[from[c + 1].code()],
            y2 = table[from[c + 2].code()], y3 = table[from[c + 3].code()];
    to[c] = y0;
    to[c + 1] = y1;
    to[c + 2] = y2;
    to[c + 3] = y3;
  }
  for (; c < n; ++c) to[c] = table[from[c].code()];
}

// y = table[code of x], row by row: each row's whole vectors of 16 by activation_gather where
// `gather` (and the AVX-512 path is active), the rest by lookup_range. Where it does not gather,
// y is `streamed` (streams(y): larger than the caches) and its entries are 2 or 4 bytes, the
// columns of each row that fill whole 64-byte lines of y go with non-temporal stores, the
// columns before and after them with plain ones (split_at_lines). On a 2-core AMD EPYC (Zen 4),
// a timing program (one process, alternating with a memcpy of the same bytes; medians of 21
// rounds, three processes): silu from bf16 to bf16 over 16 Mi elements at 0.55-0.57 of memcpy's
// speed streamed, 0.46-0.47 not; gelu_tanh 0.54-0.60 and 0.38-0.50. The bench, three runs,
// streamed and with lookup_eight's codes one load each: silu 0.58-0.63 and gelu_tanh 0.56-0.65,
// where one run before had 0.47 and 0.49 (stop 73). Entries looked up 1024 at a time into an
// array on the stack, then streamed from there, came to 0.45-0.53. The gathers (Intel's CPUs with
// AVX512-FP16) keep their plain stores: not measured streamed.
template <class X, class Y>
void activation_lookup(view<const X> x, view<Y> y, const Y* table, bool gather, bool streamed) {
#if defined(TILEKERN_CONVERT_AVX512)
  gather = gather && active_isa() >= isa::avx512;
#else
  gather = false;
#endif
  streamed = streamed && !gather && lookup_by_eight<Y>;
  const std::size_t cols = x.cols();
  for (std::size_t r = 0; r < x.rows(); ++r) {
    const X* from = x.row(r).data();
    Y* to = y.row(r).data();
    if (streamed) {
      const line_split split = split_at_lines(view<Y>(to, 1, cols));
      const std::size_t tail_from = split.head + split.lines;
      lookup_range<false>(from, to, split.head, table);
      lookup_range<true>(from + split.head, to + split.head, split.lines, table);
      lookup_range<false>(from + tail_from, to + tail_from, split.tail, table);
      continue;
    }
    std::size_t c = 0;
#if defined(TILEKERN_CONVERT_AVX512)
    if (gather) c = activation_gather(from, to, cols, table);
#endif
    lookup_range<false>(from + c, to + c, cols - c, table);
  }
}

}  // namespace detail

// y = f(x) elementwise. x: rows x cols, a view or a contiguous range (one row); y: the same
// shape, writable; each float or any tilekern format.
template <class X, class Y>
void activation(X&& x, Y&& y, act f, const cast_options& cast = {}) {
  const auto x_view = detail::to_view(std::forward<X>(x));
  const auto y_view = detail::to_view(std::forward<Y>(y));
  using x_type = std::remove_const_t<typename decltype(x_view)::element_type>;
  using y_type = typename decltype(y_view)::element_type;
  static_assert(engine_element<x_type> && engine_element<y_type>,
                "tilekern::activation: x and y must hold float or a tilekern format (bf16, fp16, "
                "tf32, fp8_*, any minifloat<...>)");
  static_assert(!std::is_const_v<y_type>,
                "tilekern::activation: y must be writable (not a view of const or a const range)");
  if (y_view.rows() != x_view.rows() || y_view.cols() != x_view.cols()) {
    detail::throw_shape_error([&] {
      return "tilekern::activation: y is " + detail::shape_text(y_view.rows(), y_view.cols()) +
             ", expected " + detail::shape_text(x_view.rows(), x_view.cols()) + " (the shape of x)";
    });
  }
  const view<const x_type> x_in(x_view);
  if constexpr (detail::tabulated_format<x_type>) {
    if (detail::tabulated(f) &&
        (std::is_same_v<y_type, float> || cast.round == rounding::nearest_even)) {
      const bool build = x_in.size() >= (std::size_t{1} << x_type::code_bits);
      const y_type* table = detail::activation_table<x_type, y_type>(f, cast.on_overflow, build);
      if (table != nullptr) {
        detail::activation_lookup(x_in, y_view, table, detail::lookup_gathers(),
                                  detail::streams(y_view));
        return;
      }
    }
  }
  detail::activation_computed(x_in, y_view, f, cast);
}

}  // namespace tilekern
