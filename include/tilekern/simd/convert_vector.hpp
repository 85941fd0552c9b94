#pragma once
// The vector paths of simd/convert.hpp: fp32 <-> minifloat, written once over a Highway
// descriptor and instantiated for 8 lanes (the avx2 path) and 16 lanes (avx512 and amx), with
// hardware conversions where they give the same bits (x86/fp16.hpp, x86/bf16.hpp).
//
// Every function here reproduces types/minifloat.hpp bit for bit, using integer operations only,
// so that a caller's MXCSR (rounding mode, FTZ, DAZ) cannot change a result.
//
// Static target selection: Highway is included once, for the target the compiler flags enable
// (HWY_TARGET); there is no dynamic dispatch. TILEKERN_CONVERT_AVX2 and TILEKERN_CONVERT_AVX512
// say which paths exist, and agree with compiled_isa() (checked below).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tilekern/simd/isa.hpp"
#include "tilekern/types/minifloat.hpp"
#include "tilekern/types/random.hpp"
#include "tilekern/types/rounding.hpp"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <hwy/highway.h>

#include "tilekern/simd/x86/bf16.hpp"
#include "tilekern/simd/x86/fp16.hpp"
#if HWY_TARGET <= HWY_AVX2
#define TILEKERN_CONVERT_AVX2 1
#endif
#if HWY_TARGET <= HWY_AVX3
#define TILEKERN_CONVERT_AVX512 1
#endif
// Highway 1.0.3's AVX3_DL target calls _mm256_permutexvar_epi8 with its operands swapped in
// TruncateTo (32 to 16 and 8 bits), which every narrowing encode here uses.
static_assert(HWY_TARGET != HWY_AVX3_DL || HWY_MAJOR > 1 || HWY_MINOR > 0 || HWY_PATCH > 3,
              "tilekern: Highway 1.0.3's AVX3_DL target narrows lanes wrongly; compile with "
              "-DHWY_DISABLED_TARGETS=HWY_AVX3_DL (tilekern's CMake package does)");
#endif

namespace tilekern::detail {

#if defined(TILEKERN_CONVERT_AVX512)
static_assert(compiled_isa() >= isa::avx512,
              "tilekern: Highway targets AVX-512 but compiled_isa() says otherwise");
#elif defined(TILEKERN_CONVERT_AVX2)
static_assert(compiled_isa() == isa::avx2,
              "tilekern: compiled_isa() says AVX-512 but Highway's static target is narrower; "
              "compile with -DHWY_DISABLED_TARGETS=HWY_AVX3_DL if the flags enable AVX-VNNI and "
              "VBMI");
#else
// Highway 1.0.3's AVX2 target also requires AES and PCLMUL (which -march=x86-64-v3 lacks) unless
// HWY_DISABLE_PCLMUL_AES is defined, as tilekern's CMake package does.
static_assert(compiled_isa() == isa::scalar,
              "tilekern: the compiler targets AVX2 but Highway's static target is older; define "
              "HWY_DISABLE_PCLMUL_AES (or enable -maes -mpclmul)");
#endif

// The rounding mode as a compile-time value, so that a block loop is compiled once per mode.
template <rounding Mode>
using rounding_constant = std::integral_constant<rounding, Mode>;

template <class Body>
decltype(auto) visit_rounding(rounding mode, Body&& body) {
  switch (mode) {
    case rounding::stochastic:
      return body(rounding_constant<rounding::stochastic>());
    case rounding::toward_zero:
      return body(rounding_constant<rounding::toward_zero>());
    case rounding::nearest_even:
      break;
  }
  return body(rounding_constant<rounding::nearest_even>());
}

// The per-block lambdas must inline into their loop: vectors passed to a call go through memory.
// Left to its heuristics, which depend on the -O level and on the rest of the translation unit,
// gcc 12 did not always: at -O2 (CMake's RelWithDebInfo) layernorm bf16 1576 x 768 took 1.5 times
// as long, and at -O3 in a file holding every kernel softmax fp32 1.3 times. Not without
// optimisation, as Highway's HWY_INLINE.
#if defined(__OPTIMIZE__)
#define TILEKERN_INLINE_LAMBDA __attribute__((always_inline))
#else
#define TILEKERN_INLINE_LAMBDA
#endif

#if defined(TILEKERN_CONVERT_AVX2)

namespace hn = hwy::HWY_NAMESPACE;

// fp32 lanes of the avx2 path (256 bits) and of the avx512 and amx paths (512 bits).
using avx2_lanes = hn::Simd<float, 8, 0>;
#if defined(TILEKERN_CONVERT_AVX512)
using avx512_lanes = hn::Simd<float, 16, 0>;
#endif

// Minifloat arrays as arrays of their codes (a minifloat is its storage word, nothing more).
template <minifloat_format F>
auto* storage_of(F* values) {
  static_assert(sizeof(F) == sizeof(typename F::storage_type) && std::is_standard_layout_v<F>);
  return reinterpret_cast<typename F::storage_type*>(values);
}
template <minifloat_format F>
const auto* storage_of(const F* values) {
  return storage_of(const_cast<F*>(values));
}

// Calls block(in, out, index) for blocks of `Lanes` elements. A last partial block is staged
// through stack buffers, so that nothing outside [from, from + n) or [to, to + n) is touched.
// Not inlined, nor cloned for constants (GCC's noipa): a caller's constant n (say 4) would
// otherwise reach the loop, and GCC 12 warns (-Warray-bounds) about the full-vector accesses it
// can no longer reach; one call per convert().
#if defined(__clang__)
#define TILEKERN_OPAQUE_CALL __attribute__((noinline))
#else
#define TILEKERN_OPAQUE_CALL __attribute__((noipa))
#endif
template <std::size_t Lanes, class In, class Out, class Block>
TILEKERN_OPAQUE_CALL void for_each_block(const In* from, Out* to, std::size_t n,
                                         std::uint64_t first_index, Block&& block) {
  std::size_t i = 0;
  for (; i + Lanes <= n; i += Lanes) block(from + i, to + i, first_index + i);
  if (i == n) return;
  In in[Lanes] = {};
  Out out[Lanes] = {};
  std::copy_n(from + i, n - i, in);
  block(in, out, first_index + i);
  std::copy_n(out, n - i, to + i);
}

// random_mix (types/random.hpp), lane by lane: the same shifts and 32-bit multiplies.
template <class DU>
HWY_INLINE hn::Vec<DU> random_mix(DU du, hn::Vec<DU> x) {
  x = x ^ hn::ShiftRight<16>(x);
  x = x * hn::Set(du, 0x21f0aaadu);
  x = x ^ hn::ShiftRight<15>(x);
  x = x * hn::Set(du, 0x735a2d97u);
  return x ^ hn::ShiftRight<15>(x);
}

// Lane j: random_bits(key, index + j * Stride) = mix(counter(index) + j * Stride * step), with
// lane_steps holding j * Stride * step. Where the low words of the indices wrap past 2^32 within
// the vector (once per 2^32 elements), the lanes after the wrap also add high_step, the Weyl step
// of the high word.
template <std::uint32_t Stride = 1, class DU>
HWY_INLINE hn::Vec<DU> random_lanes(DU du, random_key key, hn::Vec<DU> lane_steps,
                                    std::uint64_t index) {
  auto counter = hn::Set(du, key.counter(index)) + lane_steps;
  const auto low_first = static_cast<std::uint32_t>(index);
  if (low_first > ~0u - Stride * (hn::MaxLanes(du) - 1)) [[unlikely]] {
    const auto offsets = hn::Iota(du, 0) * hn::Set(du, Stride);
    const auto wrapped = hn::Set(du, low_first) + offsets < hn::Set(du, low_first);
    counter = counter + hn::IfThenElseZero(wrapped, hn::Set(du, random_key::high_step));
  }
  return random_mix(du, counter);
}

// The rounding modes as the 32-bit increment of each lane, given the lane's magnitude code
// rounded toward zero (see encode_lanes).
struct round_toward_zero {
  template <class V>
  HWY_INLINE V operator()(V) const {
    return hn::Zero(hn::DFromV<V>());
  }
};
struct round_nearest_even {
  template <class V>
  HWY_INLINE V operator()(V truncated) const {
    const hn::DFromV<V> du;
    return hn::Set(du, 0x7fffffffu) + (truncated & hn::Set(du, 1u));
  }
};
template <class V>
struct round_stochastic {
  V random;  // random_lanes() of the block
  HWY_INLINE V operator()(V) const { return random; }
};

// Rounding where every lane drops the same d = 23 - M low bits of its fp32 pattern (lanes in
// F's normal range, or any lane when F's range starts at fp32's): with L the dropped bits and
// k = 32 - d, L * 2^k + r carries out of 32 bits iff L + (r >> k) reaches 2^d. So add r >> k to
// the fp32 bits and shift: the carry runs into the mantissa and the exponent by itself. Returns
// the rounded fp32 exponent field and top M mantissa bits.
template <int Dropped, class V, class Round>
HWY_INLINE V round_fixed_shift(V magnitude_bits, Round round) {
  if constexpr (Dropped == 0) {
    return magnitude_bits;
  } else {
    const auto increment = round(hn::ShiftRight<Dropped>(magnitude_bits));
    return hn::ShiftRight<Dropped>(magnitude_bits + hn::ShiftRight<32 - Dropped>(increment));
  }
}

// F::from for every lane of `bits` (fp32 bit patterns): the stored code, padding included.
//
// As in minifloat.hpp, a lane rounds up iff `window + increment` carries out of 32 bits, where
// window is the dropped bits as a 32-bit fraction of F's ulp and increment is given by `round`
// (above): 0, 0x7fffffff + lsb, or 32 random bits. 32 bits of window are exact for nearest even:
// they hold every dropped bit when at most 32 are dropped, and when more are, the value is below
// 2^-9 ulp and rounds down either way. Stochastic rounding uses the top 32 bits of the window in
// the scalar code too.
template <minifloat_format F, class DU, class Round>
HWY_INLINE hn::Vec<DU> encode_lanes(DU du, hn::Vec<DU> bits, Round round,
                                    hn::Vec<DU> overflow_code) {
  constexpr int mantissa_bits = F::mantissa_bits;
  // fp32's exponent field of F's smallest normal, 1..127; fields below it are F's subnormals.
  constexpr std::uint32_t normal_field = 128 - F::bias;
  const auto magnitude_bits = bits & hn::Set(du, 0x7fffffffu);

  hn::Vec<DU> magnitude;  // the rounded magnitude code
  const auto exponent_field = hn::ShiftRight<23>(magnitude_bits);
  const auto is_zero = magnitude_bits == hn::Zero(du);
  const auto normal_or_zero = hn::Or(hn::Set(du, normal_field - 1) < exponent_field, is_zero);
  if (normal_field == 1 || hn::AllTrue(du, normal_or_zero)) {
    // Bias 127: every input (fp32 subnormals too) keeps its exponent field. Otherwise all lanes
    // are zero or in F's normal range (inf and NaN too), where F's exponent field is fp32's
    // minus normal_field - 1.
    constexpr std::uint32_t rebias = (normal_field - 1) << mantissa_bits;
    magnitude = round_fixed_shift<23 - mantissa_bits>(magnitude_bits, round) - hn::Set(du, rebias);
    if constexpr (normal_field != 1) magnitude = hn::IfThenZeroElse(is_zero, magnitude);
  } else {
    const auto one = hn::Set(du, 1u);
    // fp32 subnormals: exponent field 0 means 1 without the implicit bit.
    const auto significand =
        (bits & hn::Set(du, 0x7fffffu)) | hn::ShiftLeft<23>(hn::Min(exponent_field, one));
    const auto field = hn::Max(exponent_field, hn::Set(du, normal_field));
    // 23 - M bits, plus one per binade below F's smallest normal: 0..148. Shift counts are
    // clamped to 31 in lanes whose result the select discards (or which shift out everything
    // anyway: the significand has 24 bits).
    const auto dropped = field - hn::Max(exponent_field, one) + hn::Set(du, 23u - mantissa_bits);
    const auto limit = hn::Set(du, 31u);
    const auto kept = significand >> hn::Min(dropped, limit);
    // The dropped bits as a 32-bit fraction. dropped < 32: significand << (32 - dropped), in two
    // steps so that 0 dropped gives 0.
    const auto left = hn::ShiftLeft<1>(significand << hn::Min(limit - dropped, limit));
    const auto right = significand >> hn::Min(dropped - hn::Set(du, 32u), limit);
    const auto window = hn::IfThenElse(dropped < hn::Set(du, 32u), left, right);
    // Exponent and mantissa in one sum: the implicit bit in `kept` moves into the exponent.
    const auto truncated = hn::ShiftLeft<mantissa_bits>(field - hn::Set(du, normal_field)) + kept;
    const auto increment = round(truncated);
    const auto up = hn::VecFromMask(du, window + increment < window);  // carry: all ones = -1
    magnitude = truncated - up;  // a carry out of the mantissa bumps the exponent
  }

  // Overflow, including inf and NaN inputs (exponent field 255, 2^128 or more: above every F's
  // max), then NaNs.
  magnitude = hn::IfThenElse(magnitude > hn::Set(du, F::max_code), overflow_code, magnitude);
  const auto is_nan = magnitude_bits > hn::Set(du, 0x7f800000u);
  if constexpr (F::has_infinity) {
    // Quiet, keeping the top M bits of the payload: fp32's exponent field 255 shifted right is
    // F's with Bias 127.
    const auto payload = normal_field == 1
                             ? hn::ShiftRight<23 - mantissa_bits>(magnitude_bits)
                             : hn::ShiftRight<23 - mantissa_bits>(bits & hn::Set(du, 0x7fffffu)) |
                                   hn::Set(du, F::infinity_code);
    magnitude = hn::IfThenElse(is_nan, payload | hn::Set(du, F::quiet_bit), magnitude);
  } else {
    magnitude = hn::IfThenElse(is_nan, hn::Set(du, F::nan_code), magnitude);
  }
  const auto sign = hn::ShiftRight<31 - (F::code_bits - 1)>(bits) & hn::Set(du, F::sign_code);
  return hn::ShiftLeft<F::padding_bits>(magnitude | sign);
}

// Whether F has fp32's exponent field (bf16, tf32): then every fp32 input, subnormals and inf
// included, keeps its exponent field, and encode_lanes_fp32_exponent applies.
template <minifloat_format F>
constexpr bool keeps_fp32_exponent = F::exponent_bits == 8 && F::bias == 127 && F::has_infinity;

// encode_lanes for such an F, in fewer operations: round_fixed_shift on the fp32 bits, sign
// included (a carry runs from the mantissa into the exponent, and from F's max into inf; it reaches
// the sign only from a NaN, whose lanes the select replaces), and NaN's top payload bits, made
// quiet. Overflow is left to the caller: a finite lane that overflowed is an inf code here, as for
// overflow::standard. Returns the codes without padding.
template <minifloat_format F, class DU, class Round>
HWY_INLINE hn::Vec<DU> encode_lanes_fp32_exponent(DU du, hn::Vec<DU> bits, Round round) {
  static_assert(keeps_fp32_exponent<F>);
  const hn::RebindToSigned<DU> di;
  const auto rounded = round_fixed_shift<23 - F::mantissa_bits>(bits, round);
  // |x| > inf as signed integers: magnitudes are below 2^31.
  const auto is_nan = hn::BitCast(di, bits & hn::Set(du, 0x7fffffffu)) > hn::Set(di, 0x7f800000);
  const auto quiet = hn::ShiftRight<23 - F::mantissa_bits>(bits) | hn::Set(du, F::quiet_bit);
  return hn::IfThenElse(hn::RebindMask(du, is_nan), quiet, rounded);
}

// F::to_float for every lane of `codes` (stored codes, padding included), as fp32 bit patterns.
template <minifloat_format F, class DU>
HWY_INLINE hn::Vec<DU> decode_lanes(DU du, hn::Vec<DU> codes) {
  constexpr int mantissa_bits = F::mantissa_bits;
  constexpr int bias = F::bias;
  const auto code = hn::ShiftRight<F::padding_bits>(codes);
  if constexpr (F::exponent_bits == 8 && F::has_infinity) {
    // fp32's exponent field (bf16, tf32): the code, shifted, is the fp32 pattern; NaNs are quieted.
    const auto bits = hn::ShiftLeft<23 - mantissa_bits>(code);
    const auto is_nan = (bits & hn::Set(du, 0x7fffffffu)) > hn::Set(du, 0x7f800000u);
    return hn::IfThenElse(is_nan, bits | hn::Set(du, 0x400000u), bits);
  }
  const auto magnitude = code & hn::Set(du, F::magnitude_mask);
  const auto sign = hn::ShiftLeft<31 - (F::code_bits - 1)>(code & hn::Set(du, F::sign_code));

  // Normals: rebias the exponent field (the result is an fp32 normal: F's exponents lie within
  // fp32's, as minifloat's static_asserts require).
  auto result = hn::ShiftLeft<23 - mantissa_bits>(magnitude) +
                hn::Set(du, static_cast<std::uint32_t>(127 - bias) << 23);

  // Subnormals m * 2^scale, scale = 1 - Bias - M. With Bias 127 they are fp32 subnormals with the
  // same bits, which the line above already gives. Otherwise convert m exactly to fp32
  // (m < 2^23) and add scale to its exponent field, except that values below fp32's smallest
  // normal (m < 2^(Bias + M - 127)) are fp32 subnormals whose bits are m << (scale + 149).
  if constexpr (bias != 127) {
    constexpr int scale = 1 - bias - mantissa_bits;
    const hn::RebindToSigned<DU> di;
    const hn::Rebind<float, DU> df;
    const auto subnormal = magnitude < hn::Set(du, 1u << mantissa_bits);
    const auto as_float = hn::BitCast(du, hn::ConvertTo(df, hn::BitCast(di, magnitude)));
    auto value = as_float + hn::Set(du, static_cast<std::uint32_t>(scale) << 23);
    if constexpr (bias + mantissa_bits > 127) {
      const auto tiny = magnitude < hn::Set(du, 1u << (bias + mantissa_bits - 127));
      value = hn::IfThenElse(tiny, hn::ShiftLeft<scale + 149>(magnitude), value);
    } else {
      value = hn::IfThenZeroElse(magnitude == hn::Zero(du), value);
    }
    result = hn::IfThenElse(subnormal, value, result);
  }

  const auto mantissa = magnitude & hn::Set(du, F::mantissa_mask);
  if constexpr (F::has_infinity) {
    // inf, or a quiet NaN keeping the mantissa as the top of its payload.
    const auto special = magnitude > hn::Set(du, F::max_code);  // inf and NaNs
    const auto quiet = hn::IfThenElseZero(mantissa != hn::Zero(du), hn::Set(du, 0x400000u));
    const auto nan_or_inf =
        hn::Set(du, 0x7f800000u) | quiet | hn::ShiftLeft<23 - mantissa_bits>(mantissa);
    result = hn::IfThenElse(special, nan_or_inf, result);
  } else {
    const auto nan = hn::Set(du, 0x7fc00000u | (F::mantissa_mask << (23 - mantissa_bits)));
    result = hn::IfThenElse(magnitude == hn::Set(du, F::nan_code), nan, result);
  }
  return result | sign;
}

// Whether vcvtneps2bf16 (x86/bf16.hpp) is used for this format, mode and width.
template <minifloat_format F, class D>
constexpr bool uses_bf16_instruction() {
#if defined(__AVX512BF16__)
  return std::is_same_v<F, bf16> && hn::MaxLanes(D()) == 16;
#else
  return false;
#endif
}

// v stored at out: with a plain store, or (Streamed) a non-temporal one where v is a whole vector
// of 16, 32 or 64 bytes, which `out` must then be aligned to (a smaller one, whose non-temporal
// store would write 16 bytes, takes a plain store).
template <bool Streamed, class DS, class T>
HWY_INLINE void store_lanes(hn::Vec<DS> v, DS d, T* out) {
  if constexpr (Streamed && hn::MaxLanes(DS()) * sizeof(hn::TFromD<DS>) >= 16) {
    hn::Stream(v, d, out);
  } else {
    hn::StoreU(v, d, out);
  }
}

// One block of fp32 lanes of `D` to F's codes, rounding in `Mode`, with the overflow mode, seed and
// stream of the cast_options it was made with: the per-block work of encode_vector, which the
// gpsimd engine also calls on the results of user code. Streamed: the codes go out with
// non-temporal stores (store_lanes), which need `out` aligned to the bytes stored.
// Plain: an encoder for casts that are plain() (no saturation, MXCSR.DAZ clear), which its blocks
// then take as given rather than test (see lane_store, engine/lanes.hpp).
template <minifloat_format F, class D, rounding Mode, bool Streamed = false, bool Plain = false>
class vector_encoder {
 public:
  using storage = typename F::storage_type;

  vector_encoder(D, const cast_options& options)
      : lane_steps_(hn::Iota(du_, 0) *
                    hn::Set(du_, random_key::from(options.seed, options.stream).step)),
        overflow_code_(hn::Set(du_, options.on_overflow == overflow::saturate ? F::max_code
                                    : F::has_infinity                         ? F::infinity_code
                                                                              : F::nan_code)),
        key_(random_key::from(options.seed, options.stream)),
        saturate_(options.on_overflow == overflow::saturate) {}

  // Whether the cast neither saturates nor runs under MXCSR.DAZ: what a Plain encoder assumes.
  bool plain() const { return !saturate_ && !daz_; }

  // Stores the codes of 2 * lanes bf16 elements, from index on, given interleaved: lane j of even
  // holds element 2j, lane j of odd element 2j + 1 (as widen_bf16_interleaved loads them). Each
  // word of the output is then one even lane's code below one odd lane's, which a shift and a
  // 16-bit blend put together without shuffles; with AVX512-BF16, nearest even, vcvtne2ps2bf16
  // and one permute (fp32 subnormals aside, which it flushes). The same bits as operator()
  // element by element.
  HWY_INLINE void interleaved(hn::Vec<D> even, hn::Vec<D> odd, storage* out,
                              std::uint64_t index) const requires std::is_same_v<F, bf16> {
    const hn::Repartition<storage, DU> dcodes;
#if defined(__AVX512BF16__)
    if constexpr (Mode == rounding::nearest_even && uses_bf16_instruction<F, D>()) {
      if (!x86::any_fp32_subnormal(even.raw, odd.raw, denormals_are_zero())) [[likely]] {
        const hn::Vec<decltype(dcodes)> codes{
            x86::bf16_interleaved_from_float_nearest(even.raw, odd.raw)};
        store_lanes<Streamed>(saturate_infinity(codes), dcodes, out);
        return;
      }
    }
#endif
    const auto [even_codes, odd_codes] = codes_in_high_halves<2>(even, odd, index, index + 1);
    const auto codes = hn::OddEven(hn::BitCast(dcodes, odd_codes),  // high halves: odd elements
                                   hn::BitCast(dcodes, hn::ShiftRight<16>(even_codes)));
    store_lanes<Streamed>(saturate_infinity(codes), dcodes, out);
  }

  // Stores the codes of two blocks of bf16 elements in order, first's from index on, then
  // second's. On 8 lanes: rounded as interleaved does, then one pack of both blocks' high halves
  // (x86/bf16.hpp; for 16 elements 4 shift and shuffle operations where two calls of operator()
  // take 6, and one NaN test where they take 8 operations). On 16 lanes with AVX512-BF16, nearest
  // even: one vcvtne2ps2bf16 of both (fp32 subnormals aside, which it flushes), where two calls of
  // operator() take two vcvtneps2bf16 of two operations each (softmax bf16 1576 x 768 1.11-1.13
  // times as fast, CONTRIBUTING.md, stop 59); other modes as operator() does. The same bits as
  // operator() element by element.
  HWY_INLINE void in_order(hn::Vec<D> first, hn::Vec<D> second, storage* out,
                           std::uint64_t index) const
      requires(std::is_same_v<F, bf16> &&
               (hn::MaxLanes(D()) == 8 || uses_bf16_instruction<F, D>())) {
    const hn::Repartition<storage, DU> dcodes;
    if constexpr (hn::MaxLanes(D()) == 8) {
      const auto [first_codes, second_codes] =
          codes_in_high_halves<1>(first, second, index, index + 8);
      const hn::Vec<decltype(dcodes)> codes{
          x86::bf16_from_high_halves(first_codes.raw, second_codes.raw)};
      store_lanes<Streamed>(saturate_infinity(codes), dcodes, out);
    } else {
#if defined(__AVX512BF16__)
      if constexpr (Mode == rounding::nearest_even) {
        if (!x86::any_fp32_subnormal(first.raw, second.raw, denormals_are_zero())) [[likely]] {
          const hn::Vec<decltype(dcodes)> codes{
              x86::bf16_in_order_from_float_nearest(first.raw, second.raw)};
          store_lanes<Streamed>(saturate_infinity(codes), dcodes, out);
          return;
        }
      }
#endif
      (*this)(first, out, index);
      (*this)(second, out + hn::MaxLanes(D()), index + hn::MaxLanes(D()));
    }
  }

  // Stores the codes of x, the elements with indices index, index + 1, ..., at out.
  HWY_INLINE void operator()(hn::Vec<D> x, storage* out, std::uint64_t index) const {
    if constexpr (std::is_same_v<F, bf16> && hn::MaxLanes(D()) == 8) {
      // x86/bf16.hpp: the same bits as encode_generic, in fewer shift and shuffle operations.
      const auto bits = hn::BitCast(du_, x);
      hn::Vec<DU> increment = hn::Zero(du_);  // toward zero
      if constexpr (Mode == rounding::stochastic) {
        increment = hn::ShiftRight<16>(random_lanes(du_, key_, lane_steps_, index));
      } else if constexpr (Mode == rounding::nearest_even) {
        increment.raw = x86::bf16_nearest_increment(bits.raw);
      }
      const hn::Vec<DS> codes{
          x86::bf16_from_high_halves(x86::bf16_codes_in_high_halves(bits.raw, increment.raw))};
      store_lanes<Streamed>(saturate_infinity(codes), dstorage_, out);
    } else if constexpr (Mode == rounding::stochastic) {
      const auto random = random_lanes(du_, key_, lane_steps_, index);
      encode_truncating(x, out, round_stochastic<hn::Vec<DU>>{random});
    } else if constexpr (Mode == rounding::toward_zero) {
      encode_truncating(x, out, round_toward_zero());
    } else if constexpr (std::is_same_v<F, fp16>) {
      const hn::Vec<DS> codes{x86::fp16_from_float_nearest(x.raw)};
      store_lanes<Streamed>(saturate_infinity(codes), dstorage_, out);
    } else if constexpr (uses_bf16_instruction<F, D>()) {
#if defined(__AVX512BF16__)
      if (x86::any_fp32_subnormal(x.raw, denormals_are_zero())) [[unlikely]] {
        encode_generic(x, out, round_nearest_even());
        return;
      }
      const hn::Vec<DS> codes{x86::bf16_from_float_nearest(x.raw)};
      store_lanes<Streamed>(saturate_infinity(codes), dstorage_, out);
#endif
    } else {
      encode_generic(x, out, round_nearest_even());
    }
  }

 private:
  using DU = hn::RebindToUnsigned<D>;
  using DS = hn::Rebind<storage, D>;

  // bf16's codes of the lanes of a and b in the high halves of their lanes, as
  // x86::bf16_codes_in_high_halves computes them, in Highway's operations; the elements of a from
  // index_a on and of b from index_b on, Stride apart. NaNs are rare: only a pair of blocks whose
  // sum has one (a NaN lane, or inf - inf) takes the select. Neither a NaN test nor a sum's
  // NaN-ness depends on MXCSR.
  template <std::uint32_t Stride>
  HWY_INLINE std::pair<hn::Vec<DU>, hn::Vec<DU>> codes_in_high_halves(hn::Vec<D> a, hn::Vec<D> b,
                                                                      std::uint64_t index_a,
                                                                      std::uint64_t index_b) const {
    const auto rounded = [&](hn::Vec<D> x, std::uint64_t first) TILEKERN_INLINE_LAMBDA {
      const auto bits = hn::BitCast(du_, x);
      hn::Vec<DU> increment = hn::Zero(du_);  // toward zero
      if constexpr (Mode == rounding::stochastic) {
        static_assert(Stride == 1 || Stride == 2);
        const auto steps = Stride == 1 ? lane_steps_ : lane_steps_ + lane_steps_;
        increment = hn::ShiftRight<16>(random_lanes<Stride>(du_, key_, steps, first));
      } else if constexpr (Mode == rounding::nearest_even) {
        // 0x7fff, plus 1 where the kept lsb (bit 16) is set: minus that bit, shifted to the
        // sign and spread over the lane.
        const hn::RebindToSigned<DU> di;
        const auto lsb_mask = hn::BroadcastSignBit(hn::BitCast(di, hn::ShiftLeft<15>(bits)));
        increment = hn::Set(du_, 0x7fffu) - hn::BitCast(du_, lsb_mask);
      }
      return bits + increment;
    };
    const auto quieted = [&](hn::Vec<D> x, hn::Vec<DU> codes) TILEKERN_INLINE_LAMBDA {
      const auto bits = hn::BitCast(du_, x);
      return hn::IfThenElse(hn::RebindMask(du_, hn::IsNaN(x)), bits | hn::Set(du_, 0x400000u),
                            codes);
    };
    auto a_codes = rounded(a, index_a), b_codes = rounded(b, index_b);
    if (!hn::AllFalse(D(), hn::IsNaN(a + b))) [[unlikely]] {
      a_codes = quieted(a, a_codes);
      b_codes = quieted(b, b_codes);
    }
    return {a_codes, b_codes};
  }

  HWY_INLINE auto narrow(hn::Vec<DU> codes) const {
    if constexpr (sizeof(storage) == 4) {
      return codes;
    } else {
      return hn::TruncateTo(dstorage_, codes);
    }
  }

  template <class Round>
  HWY_INLINE void encode_generic(hn::Vec<D> x, storage* out, Round round) const {
    const auto bits = hn::BitCast(du_, x);
    if constexpr (keeps_fp32_exponent<F>) {
      auto codes = encode_lanes_fp32_exponent<F>(du_, bits, round);
      if (saturating()) {  // each +-inf code becomes +-max, the code just below it
        const auto magnitude = codes & hn::Set(du_, F::magnitude_mask);
        codes = codes + hn::VecFromMask(du_, magnitude == hn::Set(du_, F::infinity_code));
      }
      store_lanes<Streamed>(narrow(hn::ShiftLeft<F::padding_bits>(codes)), dstorage_, out);
    } else {
      store_lanes<Streamed>(narrow(encode_lanes<F>(du_, bits, round, overflow_code_)), dstorage_,
                            out);
    }
  }

  // Toward zero and stochastic only: their round() gives the increment whatever its argument
  // (nearest even's depends on the lane's lsb, so it takes encode_generic).
  template <class Round>
  HWY_INLINE void encode_truncating(hn::Vec<D> x, storage* out, Round round) const {
    if constexpr (std::is_same_v<F, fp16>) {
      // Blocks whose results are all fp16 normals or zeros: add the increment's top 13 bits to
      // the fp32 bits (as round_fixed_shift does) and let vcvtps2ph truncate, which rebiases in
      // hardware. Other blocks (fp16 subnormals, overflow, inf, NaN) take the general encoder.
      constexpr std::uint32_t min_normal = 0x38800000u;     // 2^-14 as fp32 bits
      constexpr std::uint32_t overflow_bits = 0x47800000u;  // 2^16: rounds to no fp16 normal
      const auto magnitude = hn::BitCast(du_, x) & hn::Set(du_, 0x7fffffffu);
      const auto increment = hn::ShiftRight<19>(round(hn::Zero(du_)));
      const auto in_range =
          hn::And(magnitude - hn::Set(du_, min_normal) < hn::Set(du_, overflow_bits - min_normal),
                  magnitude + increment < hn::Set(du_, overflow_bits));
      if (hn::AllTrue(du_, hn::Or(in_range, magnitude == hn::Zero(du_)))) {
        const auto rounded = hn::BitCast(D(), hn::BitCast(du_, x) + increment);
        store_lanes<Streamed>(hn::Vec<DS>{x86::fp16_from_float_toward_zero(rounded.raw)}, dstorage_,
                              out);
        return;
      }
    }
    encode_generic(x, out, round);
  }

  // Saturating turns each +-inf code into +-max, the code just below it.
  template <class V>
  HWY_INLINE V saturate_infinity(V codes) const {
    if (!saturating()) [[likely]] {
      return codes;
    }
    const hn::DFromV<V> dcodes;
    const auto infinity = hn::Set(dcodes, static_cast<storage>(F::infinity_code));
    const auto magnitude = codes & hn::Set(dcodes, static_cast<storage>(F::magnitude_mask));
    return codes + hn::VecFromMask(dcodes, magnitude == infinity);  // all ones = -1
  }

  HWY_INLINE bool saturating() const {
    return !Plain && saturate_;
  }
  // MXCSR.DAZ as it was when the encoder was made, which decides how subnormals are found
  // (x86::fp32_subnormal_lanes); the gpsimd engine runs every core under its caller's MXCSR.
  HWY_INLINE bool denormals_are_zero() const {
    return !Plain && daz_;
  }

  static constexpr DU du_{};
  static constexpr DS dstorage_{};
  hn::Vec<DU> lane_steps_;
  hn::Vec<DU> overflow_code_;
  random_key key_;
  bool saturate_;
#if defined(__AVX512BF16__)
  bool daz_ = x86::denormals_are_zero();
#else
  bool daz_ = false;  // only the AVX512-BF16 encoders look for fp32 subnormals
#endif
};

// The fp32 lanes of one block of bf16 codes at `in`, NaNs as they are (decode_block quiets them;
// the first arithmetic on a signalling NaN does too, and so does every encoder): bf16 is the top
// half of fp32.
template <class D>
HWY_INLINE hn::Vec<D> widen_bf16(D d, const std::uint16_t* in) {
  const hn::RebindToUnsigned<D> du;
  if constexpr (hn::MaxLanes(D()) == 8) {
    return hn::BitCast(d, hn::Vec<decltype(du)>{x86::float_bits_from_bf16(in)});
  } else {
    const hn::Rebind<std::uint16_t, D> codes;
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(codes, in))));
  }
}

// Two blocks of bf16 codes at `in` (2 * lanes of them) as fp32 lanes, interleaved: lane j of the
// first holds element 2j, lane j of the second element 2j + 1; NaNs as they are (widen_bf16). Each
// 32-bit word holds one of each, so a shift and a mask widen them, with none of the shuffles that
// keep elements in order (on avx2, where shifts and shuffles share two ports, widening and
// narrowing in order take 4 of them per 8 lanes, interleaved 1). For loops that treat elements
// independently (elementwise), with every operand in this layout; vector_encoder::interleaved
// stores it.
// The empty asm (x86 vector targets) makes the words a register: gcc 12 otherwise folds the load
// into both the shift and the mask, and where the engine takes the two blocks in two calls
// (operand::load_interleaved) it loaded the same bytes twice, each load split across two cache
// lines where x is not 64-byte aligned (as glibc's large buffers are not). With it the two calls
// share one load (the asm has no side effects, so gcc merges them): bf16 1576 x 768 rmsnorm and
// layernorm about 1.05 times as fast (CONTRIBUTING.md, stop 54).
template <class D>
HWY_INLINE std::pair<hn::Vec<D>, hn::Vec<D>> widen_bf16_interleaved(D d, const std::uint16_t* in) {
  const hn::RebindToUnsigned<D> du;
  const hn::Repartition<std::uint16_t, decltype(du)> dcodes;
  auto words = hn::BitCast(du, hn::LoadU(dcodes, in));
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  asm("" : "+v"(words.raw));
#endif
  return {hn::BitCast(d, hn::ShiftLeft<16>(words)),
          hn::BitCast(d, words & hn::Set(du, 0xffff0000u))};
}

// One block of F's codes at `in` to fp32 lanes of `D`, exactly: the per-block work of
// decode_vector.
template <minifloat_format F, class D>
HWY_INLINE hn::Vec<D> decode_block(D d, const typename F::storage_type* in) {
  const hn::Rebind<typename F::storage_type, D> dstorage;
  if constexpr (std::is_same_v<F, fp16>) {
    return hn::Vec<D>{x86::float_from_fp16(hn::LoadU(dstorage, in).raw)};
  } else if constexpr (sizeof(typename F::storage_type) == 4) {
    return hn::BitCast(d, decode_lanes<F>(hn::RebindToUnsigned<D>(), hn::LoadU(dstorage, in)));
  } else {
    const hn::RebindToUnsigned<D> du;
    return hn::BitCast(d, decode_lanes<F>(du, hn::PromoteTo(du, hn::LoadU(dstorage, in))));
  }
}

// fp32 -> F on `d`'s lanes; see convert() in convert.hpp.
template <minifloat_format F, class D>
void encode_vector(D d, const float* from, F* to, std::size_t n, const cast_options& options,
                   std::uint64_t first_index) {
  visit_rounding(options.round, [&](auto mode) {
    const vector_encoder<F, D, decltype(mode)::value> encode(d, options);
    for_each_block<hn::MaxLanes(D())>(
        from, storage_of(to), n, first_index,
        [&](const float* in, typename F::storage_type* out, std::uint64_t index)
            TILEKERN_INLINE_LAMBDA { encode(hn::LoadU(d, in), out, index); });
  });
}

// F -> fp32 on `d`'s lanes; see convert() in convert.hpp.
template <minifloat_format F, class D>
void decode_vector(D d, const F* from, float* to, std::size_t n) {
  for_each_block<hn::MaxLanes(D())>(
      storage_of(from), to, n, 0,
      [&](const typename F::storage_type* in, float* out, std::uint64_t)
          TILEKERN_INLINE_LAMBDA { hn::StoreU(decode_block<F>(d, in), d, out); });
}

#endif  // TILEKERN_CONVERT_AVX2

}  // namespace tilekern::detail
