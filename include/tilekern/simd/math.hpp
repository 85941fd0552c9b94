#pragma once
// The fp32 activation functions of the scalar engine, lane by lane on a Highway vector:
// detail::activate<F>(d, x) computes f(x) for every act F, on the 16-lane (avx512), 8-lane (avx2)
// and 1-lane (scalar) descriptors, with the same bits on all three (every operation is lane-wise
// IEEE arithmetic: FMA, division, square root, compares, selects and integer bit moves; no
// cross-lane op, no table, no approximate-reciprocal instruction, no state).
//
// Accuracy: the largest error, in fp32 ulp of the exact result, over every fp32 input in [lo, hi]
// (accuracy(f) below; tests/simd/math_test.cpp checks it densely on every path and exhaustively in
// its "long" suite, CTest's simd/long_math, which CI leaves out: run it by hand after a change
// here). The ulp of an exact result y is the spacing of fp32 in |y|'s binade, and
// 2^-149 (the subnormal spacing) below 2^-126, so a tiny result (gelu or silu of a large negative
// x) is measured against its own size, not against an absolute floor.
//
//   function     max ulp  inputs            measured max (every fp32 input in range, 16 lanes)
//   identity     0        every finite      0
//   exp          2        [-104, 88.72]     0.965 (results down to the subnormals)
//   log          2        [2^-149, max]     0.858
//   tanh         3        every finite      2.498
//   sigmoid      3        every finite      2.402
//   relu         0        every finite      0
//   gelu_erf     7        every finite      6.215
//   gelu_tanh    4        every finite      3.363
//   silu         4        every finite      3.344
//   softplus     3        every finite      1.805
//   mish         5        every finite      4.645
//   erf          4        every finite      3.333
//   sqrt         0.5      [0, max]          0.5 (correctly rounded)
//   rsqrt        1        [2^-149, max]     0.5
//   reciprocal   0.5      every finite      0.5 (correctly rounded)
//   square       0.5      every finite      0.5 (correctly rounded; overflow gives inf)
//   abs          0        every finite      0
//
// The bounds are the measured maxima rounded up with a margin, not proofs: each function is a
// handful of roundings (about 0.5 ulp each, up to 1 ulp of the result once a relative error meets
// a result whose mantissa is near 2) plus a fitted polynomial well below 2^-24, and the composed
// ones chain more of them (gelu_erf: t = 2/(2+z), t R(t), e^(-z^2), x times each).
//
// Numerics, and why:
// - exp: x = n ln2 + r, |r| <= ln2/2, with n rounded by the 1.5 * 2^23 trick inside one FMA and
//   ln2 in two parts (the high part has 13 bits, so n * ln2_hi is exact even without FMA);
//   e^r = 1 + r + r^2 Q(r), Q a degree-4 minimax fit (|error| < 7e-8, so < 1e-8 relative in e^r).
//   The scaling 2^n is applied as 2^(n/2) * 2^(n - n/2), so that a result in the subnormals is
//   rounded once, from the fp32 value of e^r: exp underflows gradually, as the exact value
//   rounds, down to 0 below -103.97; x > 88.7228 gives inf.
// - The composed functions never subtract nearly equal numbers:
//     sigmoid(x) = 1 / (1 + t) for x >= 0 and t / (1 + t) for x < 0, with t = e^-|x| in (0, 1];
//     silu(x) = x sigmoid(x), same t;
//     tanh|x| = -u / (u + 2), u = expm1(-2|x|) (relative accuracy at every x, also near 0);
//     gelu_tanh(x) = 0.5 x (1 + tanh(v)) = x sigmoid(2v), v = sqrt(2/pi) (x + 0.044715 x^3);
//     gelu_erf(x) = 0.5 x (1 + erf(x / sqrt2)) for x >= 0, 0.5 x erfc(|x| / sqrt2) for x < 0;
//     softplus(x) = max(x, 0) + log1p(e^-|x|)  (= e^x to the last bit when e^x is tiny);
//     mish(x) = x n / (n + 2), n = e^x (e^x + 2), rewritten in t = e^-x for x >= 0.
//   When a result is x times a tiny exponential (silu, gelu, mish of a large negative x), the
//   exponential is kept as 2^(n/2) e^r times a power of two applied last, so that no intermediate
//   value is subnormal and only the final product rounds to the subnormal grid.
// - gelu_tanh's exponent 2v is computed in double-fp32 (FMA residuals, both constants in two
//   parts), because for x < 0 the result is about x e^(2v) and an error d in 2v is a relative
//   error d in the result: rounding 2v to fp32 alone would cost up to about |2v| ulp (2v = -112
//   at x = -11). Likewise erfc's e^(-z^2) takes z^2 exactly (x * x plus its FMA residual), and
//   gelu_erf's t = 2 / (2 + z) is computed as 2 sqrt2 / (2 sqrt2 + |x|), without the rounding of
//   z = |x| / sqrt2.
// - log: x = 2^e m, m in [sqrt(1/2), sqrt2), f = m - 1 (exact), s = f / (2 + f);
//   log1p(f) = f - (f^2/2 - s (f^2/2 + R(s^2))), R the atanh series 2z/3 + 2z^2/5 + 2z^3/7 + 2z^4/9
//   (truncation below 5e-9 relative for |s| <= 0.172); subnormal x are scaled by 2^24 first.
// - erf: |x| < 0.5: x (2/sqrt(pi) + x^2 P(x^2)), P a degree-3 fit, 2/sqrt(pi) in two parts;
//   |x| >= 0.5: 1 - erfc(|x|), erfc(z) = e^(-z^2) t R(t), t = 2 / (2 + z), R a degree-9 fit of
//   erfcx(z) / t over z in [0.5, 10.6] (relative error < 3e-9).
// - sqrt, reciprocal, square: one IEEE operation (correctly rounded). rsqrt: y = 1 / sqrt(x),
//   then one correction from the exact residuals y s - 1 and x - s^2 (s = sqrt(x)); 1 / sqrt(x)
//   alone, two roundings, is off by up to about 1.5 ulp.
// All fitted coefficients were derived for this file (Lawson's minimax over Chebyshev nodes in
// fp64 against mpmath, coefficients rounded to fp32 one at a time, refitting the rest).
//
// Special values (tested):
// - NaN in gives NaN out for every function.
// - exp(-inf) = 0, exp(inf) = inf; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf;
//   tanh(+-inf) = +-1; sigmoid(-inf) = 0, sigmoid(inf) = 1; erf(+-inf) = +-1;
//   silu, gelu_erf, gelu_tanh, mish (-inf) = -0 and softplus(-inf) = +0 (not NaN); of inf, inf;
//   sqrt(x < 0) = NaN, sqrt(-0) = -0; rsqrt(+0) = inf, rsqrt(-0) = -inf, rsqrt(inf) = 0;
//   reciprocal(+-0) = +-inf; square(+-inf) = inf.
// - relu(x) = x < 0 ? +0 : x, so relu(-0) = -0 and relu(NaN) = NaN (the NaN itself).
// - The sign of zero: tanh, erf, sqrt, abs and identity keep it (tanh(-0) = -0); silu, gelu and
//   mish of -0 give -0, and of a negative x whose exact result rounds to zero, -0.
//
// Environment: the default floating-point environment (round to nearest, no FTZ/DAZ). A build
// without FMA (-march=x86-64: Highway's EMU128 target, 1 lane) evaluates MulAdd as a multiply
// and an add: the results stay close (the range reductions do not rely on FMA) but are not the
// bits of the FMA builds, and the compensated parts (gelu_tanh's exponent, erfc's z^2) lose their
// low words there, so accuracy(f) is only claimed, and tested, for the FMA builds.

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include <hwy/highway.h>

namespace tilekern {

// The functions of the scalar engine, in the order of all_acts.
enum class act : std::uint8_t {
  identity,
  exp,
  log,
  tanh,
  sigmoid,
  relu,
  gelu_erf,
  gelu_tanh,
  silu,
  softplus,
  mish,
  erf,
  sqrt,
  rsqrt,
  reciprocal,
  square,
  abs
};

// A function fixed at compile time, as the scalar engine takes it in place of an act
// (scalar::activation(dst, src, act_constant<act::silu>()), engine/scalar.hpp): its loops are then
// compiled for that function alone, where a run-time act compiles them for all 17.
template <act F>
using act_constant = std::integral_constant<act, F>;

inline constexpr act all_acts[] = {
    act::identity, act::exp,       act::log,        act::tanh,     act::sigmoid, act::relu,
    act::gelu_erf, act::gelu_tanh, act::silu,       act::softplus, act::mish,    act::erf,
    act::sqrt,     act::rsqrt,     act::reciprocal, act::square,   act::abs};

constexpr std::string_view name(act f) {
  switch (f) {
    case act::identity:
      return "identity";
    case act::exp:
      return "exp";
    case act::log:
      return "log";
    case act::tanh:
      return "tanh";
    case act::sigmoid:
      return "sigmoid";
    case act::relu:
      return "relu";
    case act::gelu_erf:
      return "gelu_erf";
    case act::gelu_tanh:
      return "gelu_tanh";
    case act::silu:
      return "silu";
    case act::softplus:
      return "softplus";
    case act::mish:
      return "mish";
    case act::erf:
      return "erf";
    case act::sqrt:
      return "sqrt";
    case act::rsqrt:
      return "rsqrt";
    case act::reciprocal:
      return "reciprocal";
    case act::square:
      return "square";
    case act::abs:
      return "abs";
  }
  return "?";
}

constexpr std::optional<act> parse_act(std::string_view text) {
  for (act f : all_acts) {
    if (name(f) == text) return f;
  }
  return std::nullopt;
}

// The documented accuracy of f: for every fp32 input in [lo, hi], the result is within max_ulp
// fp32 ulp of the exact value (ulp as defined at the top of this file). 0 means the exact value
// itself; 0.5 correctly rounded.
struct act_accuracy {
  float max_ulp;
  float lo;
  float hi;
};

constexpr act_accuracy accuracy(act f) {
  constexpr float max = 0x1.fffffep127f;
  constexpr float denorm_min = 0x1p-149f;
  // NOLINTBEGIN(bugprone-branch-clone): one line per function, as the table above
  switch (f) {
    case act::identity:
      return {0.0f, -max, max};
    case act::exp:
      return {2.0f, -104.0f, 88.72f};
    case act::log:
      return {2.0f, denorm_min, max};
    case act::tanh:
      return {3.0f, -max, max};
    case act::sigmoid:
      return {3.0f, -max, max};
    case act::relu:
      return {0.0f, -max, max};
    case act::gelu_erf:
      return {7.0f, -max, max};
    case act::gelu_tanh:
      return {4.0f, -max, max};
    case act::silu:
      return {4.0f, -max, max};
    case act::softplus:
      return {3.0f, -max, max};
    case act::mish:
      return {5.0f, -max, max};
    case act::erf:
      return {4.0f, -max, max};
    case act::sqrt:
      return {0.5f, 0.0f, max};
    case act::rsqrt:
      return {1.0f, denorm_min, max};
    case act::reciprocal:
      return {0.5f, -max, max};
    case act::square:
      return {0.5f, -max, max};
    case act::abs:
      return {0.0f, -max, max};
  }
  // NOLINTEND(bugprone-branch-clone)
  return {0.0f, 0.0f, 0.0f};
}

namespace detail {

namespace hn = hwy::HWY_NAMESPACE;

// body(act_constant<f>()): a loop in body is compiled once per function, and once in all for an
// act_constant.
template <act F, class Body>
decltype(auto) visit_act(act_constant<F> f, Body&& body) {
  return body(f);
}
template <class Body>
decltype(auto) visit_act(act f, Body&& body) {
  switch (f) {
    case act::identity:
      break;
    case act::exp:
      return body(act_constant<act::exp>());
    case act::log:
      return body(act_constant<act::log>());
    case act::tanh:
      return body(act_constant<act::tanh>());
    case act::sigmoid:
      return body(act_constant<act::sigmoid>());
    case act::relu:
      return body(act_constant<act::relu>());
    case act::gelu_erf:
      return body(act_constant<act::gelu_erf>());
    case act::gelu_tanh:
      return body(act_constant<act::gelu_tanh>());
    case act::silu:
      return body(act_constant<act::silu>());
    case act::softplus:
      return body(act_constant<act::softplus>());
    case act::mish:
      return body(act_constant<act::mish>());
    case act::erf:
      return body(act_constant<act::erf>());
    case act::sqrt:
      return body(act_constant<act::sqrt>());
    case act::rsqrt:
      return body(act_constant<act::rsqrt>());
    case act::reciprocal:
      return body(act_constant<act::reciprocal>());
    case act::square:
      return body(act_constant<act::square>());
    case act::abs:
      return body(act_constant<act::abs>());
  }
  return body(act_constant<act::identity>());
}

namespace vmath {

// ln2 in two parts: 13 significant bits (n * ln2_hi is exact for |n| < 2^11), and the rest.
inline constexpr float ln2_hi = 0x1.62ep-1f;
inline constexpr float ln2_lo = 0x1.0bfbe8p-15f;
inline constexpr float ln2 = 0x1.62e43p-1f;  // rounded to nearest
inline constexpr float log2e = 0x1.715476p+0f;
// Adding 1.5 * 2^23 rounds a float of magnitude below 2^22 to an integer, found in the low bits.
inline constexpr float round_magic = 0x1.8p23f;

template <class D>
HWY_INLINE hn::Vec<D> splat(D d, float value) {
  return hn::Set(d, value);
}

// c[0] + x (c[1] + x (c[2] + ...)), by Horner's rule on FMAs.
template <class D>
HWY_INLINE hn::Vec<D> polynomial(D d, hn::Vec<D>, float c0) {
  return hn::Set(d, c0);
}
template <class D, class... Rest>
HWY_INLINE hn::Vec<D> polynomial(D d, hn::Vec<D> x, float c0, Rest... rest) {
  return hn::MulAdd(polynomial(d, x, rest...), x, hn::Set(d, c0));
}

// 2^(e - 127) for integer lanes e in [1, 254] (biased exponents).
template <class D>
HWY_INLINE hn::Vec<D> biased_power_of_two(D d, hn::Vec<hn::RebindToSigned<D>> e) {
  return hn::BitCast(d, hn::ShiftLeft<23>(e));
}

// 2^k for integer lanes k in [-126, 127].
template <class D>
HWY_INLINE hn::Vec<D> power_of_two(D d, hn::Vec<hn::RebindToSigned<D>> k) {
  const hn::RebindToSigned<D> di;
  return biased_power_of_two(d, hn::Add(k, hn::Set(di, 127)));
}

// -|x|, in one operation: x with its sign bit set.
template <class D>
HWY_INLINE hn::Vec<D> minus_abs(D d, hn::Vec<D> x) {
  return hn::Or(x, hn::SignBit(d));
}

// e^x = head * scale, for x = hi + lo (|lo| below an ulp or so of hi, or 0). hi is clamped to
// [-120, 89]: beyond, e^x is 0 or inf in fp32 even after a factor |x| < 2^7 (as in silu). head
// is e^r 2^(n/2), always normal; scale is 2^(n - n/2). head * scale rounds once, also into the
// subnormals. NaN in hi gives a finite result: callers restore it.
template <class D>
struct exp_split {
  hn::Vec<D> head;
  hn::Vec<D> scale;
};

// e^r - 1 - r = r^2 Q(r), |r| <= ln2/2: Q of degree 4 for exp (|error| < 6.8e-8), degree 5 for
// expm1 (|error| < 3.9e-9), where the term r^2 Q is not small next to the result.
template <class D>
HWY_INLINE hn::Vec<D> exp_q4(D d, hn::Vec<D> r) {
  return polynomial(d, r, 0x1p-1f, 0x1.5554dcp-3f, 0x1.5554b8p-5f, 0x1.120b68p-7f, 0x1.6d753ep-10f);
}
template <class D>
HWY_INLINE hn::Vec<D> exp_q5(D d, hn::Vec<D> r) {
  return polynomial(d, r, 0x1p-1f, 0x1.555556p-3f, 0x1.5554eap-5f, 0x1.1110acp-7f, 0x1.6d431cp-10f,
                    0x1.a17dfcp-13f);
}

// n = round(x / ln2) (as float and as integer) and r = x - n ln2, for |x| < 2^21.
template <class D>
struct reduced_exp {
  hn::Vec<D> n;
  hn::Vec<hn::RebindToSigned<D>> n_int;
  hn::Vec<D> r;
};

template <class D>
HWY_INLINE reduced_exp<D> reduce_exp(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto magic = hn::Set(d, round_magic);
  const auto shifted = hn::MulAdd(x, hn::Set(d, log2e), magic);
  const auto n = hn::Sub(shifted, magic);
  const auto n_int = hn::Sub(hn::BitCast(di, shifted), hn::BitCast(di, magic));
  auto r = hn::NegMulAdd(n, hn::Set(d, ln2_hi), x);
  r = hn::NegMulAdd(n, hn::Set(d, ln2_lo), r);
  return {n, n_int, r};
}

// head = e^r 2^(n >> 1), scale = 2^(n - (n >> 1)).
template <class D>
HWY_INLINE exp_split<D> exp_of_reduced(D d, hn::Vec<hn::RebindToSigned<D>> n_int, hn::Vec<D> r) {
  const hn::RebindToSigned<D> di;
  const auto one = hn::Set(d, 1.0f);
  const auto e_r = hn::MulAdd(hn::MulAdd(exp_q4(d, r), r, one), r, one);
  // Both biased exponents from one sum b = n + 254 (two integer operations fewer than
  // power_of_two twice): b >> 1 = (n >> 1) + 127 and b - (b >> 1) = n - (n >> 1) + 127.
  const auto b = hn::Add(n_int, hn::Set(di, 254));
  const auto b_half = hn::ShiftRight<1>(b);
  return {hn::Mul(e_r, biased_power_of_two(d, b_half)), biased_power_of_two(d, hn::Sub(b, b_half))};
}

// e^x for any x (NaN gives a finite result).
template <class D>
HWY_INLINE exp_split<D> exp_parts(D d, hn::Vec<D> x) {
  const auto reduced = reduce_exp(d, hn::Min(hn::Max(x, hn::Set(d, -120.0f)), hn::Set(d, 89.0f)));
  return exp_of_reduced(d, reduced.n_int, reduced.r);
}

// e^(hi + lo) for hi <= 0 (NaN gives a finite result).
template <class D>
HWY_INLINE exp_split<D> exp_parts_nonpositive(D d, hn::Vec<D> hi, hn::Vec<D> lo) {
  const auto reduced = reduce_exp(d, hn::Max(hi, hn::Set(d, -120.0f)));
  return exp_of_reduced(d, reduced.n_int, hn::Add(reduced.r, lo));
}
template <class D>
HWY_INLINE exp_split<D> exp_parts_nonpositive(D d, hn::Vec<D> x) {
  const auto reduced = reduce_exp(d, hn::Max(x, hn::Set(d, -120.0f)));
  return exp_of_reduced(d, reduced.n_int, reduced.r);
}

template <class V>
HWY_INLINE V restore_nan(V x, V y) {
  return hn::IfThenElse(hn::IsNaN(x), x, y);
}

// exp: at most 2 ulp on [-104, 88.72]; gradual underflow; inf above 88.7228.
template <class D>
HWY_INLINE hn::Vec<D> exp(D d, hn::Vec<D> x) {
  const auto parts = exp_parts(d, x);
  return restore_nan(x, hn::Mul(parts.head, parts.scale));
}

// e^y - 1 for y in [-20, 0]: relative error about 1 ulp (2^n (e^r - 1) + (2^n - 1), one rounding
// at the end; 2^n - 1 is exact for n >= -24, and below that the result is -1 to fp32 anyway).
template <class D>
HWY_INLINE hn::Vec<D> expm1_nonpositive(D d, hn::Vec<D> y) {
  const auto reduced = reduce_exp(d, y);
  const auto r = reduced.r;
  const auto em1_r = hn::MulAdd(hn::Mul(r, r), exp_q5(d, r), r);
  const auto scale = power_of_two(d, reduced.n_int);
  return hn::MulAdd(scale, em1_r, hn::Sub(scale, hn::Set(d, 1.0f)));
}

// tanh: at most 3 ulp for every finite x; tanh(-0) = -0.
template <class D>
HWY_INLINE hn::Vec<D> tanh(D d, hn::Vec<D> x) {
  // tanh(9.1) rounds to 1 in fp32; -2 * 9.1 keeps 2^n within [-27, 0].
  const auto y = hn::Mul(hn::Min(hn::Abs(x), hn::Set(d, 9.1f)), hn::Set(d, -2.0f));
  const auto u = expm1_nonpositive(d, y);  // in (-1, 0]
  const auto magnitude = hn::Div(u, hn::Sub(hn::Set(d, -2.0f), u));
  return restore_nan(x, hn::CopySign(magnitude, x));
}

// sigmoid: at most 3 ulp for every finite x.
template <class D>
HWY_INLINE hn::Vec<D> sigmoid(D d, hn::Vec<D> x) {
  const auto one = hn::Set(d, 1.0f);
  const auto parts = exp_parts_nonpositive(d, minus_abs(d, x));
  const auto t = hn::Mul(parts.head, parts.scale);  // e^-|x|
  const auto numerator = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), t, one);
  return restore_nan(x, hn::Div(numerator, hn::MulAdd(parts.head, parts.scale, one)));
}

// x sigmoid(v) for v with the sign of x, given e^-|v| = parts.head * parts.scale:
// x / (1 + e^-|v|) for x >= 0 and x e^-|v| / (1 + e^-|v|) for x < 0, the tiny factor
// parts.scale of the negative side applied last.
template <class D>
HWY_INLINE hn::Vec<D> times_sigmoid(D d, hn::Vec<D> x, exp_split<D> parts) {
  const auto one = hn::Set(d, 1.0f);
  const auto negative = hn::Lt(x, hn::Zero(d));
  // Below -128 the result is 0 anyway (|x| e^-120 < 2^-150); the clamp makes it 0 for -inf too.
  const auto numerator =
      hn::IfThenElse(negative, hn::Mul(hn::Max(x, hn::Set(d, -128.0f)), parts.head), x);
  const auto scale = hn::IfThenElse(negative, parts.scale, one);
  return hn::Mul(hn::Div(numerator, hn::MulAdd(parts.head, parts.scale, one)), scale);
}

// silu: at most 4 ulp for every finite x.
template <class D>
HWY_INLINE hn::Vec<D> silu(D d, hn::Vec<D> x) {
  return times_sigmoid(d, x, exp_parts_nonpositive(d, minus_abs(d, x)));
}

// gelu_tanh = x sigmoid(u), u = x s, s = c0 + c1 x^2, c0 = 2 sqrt(2/pi), c1 = 0.044715 c0.
// e^-|u| = 2^-w, w = |x| k, k = k0 + k1 x^2 = s log2(e): n = round(w) and the reduced argument
// come from w without a multiply by log2(e). k is kept as k_hi + k_lo: k_hi = fma(k1_hi, x^2,
// k0_hi), and its rounding error is fma(k1_hi, x^2, k0_hi - k_hi), where k0_hi - k_hi is exact
// because k0_hi is a multiple of 2^-20 and k_hi lies in [2.3, 14.8]; x^2's residual and the
// constants' low parts go into k_lo. Then e^-|u| = 2^-n e^r, r = -(|x| k_hi - n + |x| k_lo) ln2,
// where |x| k_hi - n is one FMA of the exact product: r is accurate to about 2^-25, while w
// reaches 163. At most 4 ulp for every finite x.
template <class D>
HWY_INLINE hn::Vec<D> gelu_tanh(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto k0_hi = hn::Set(d, 0x1.26aecp+1f);
  const auto k0_lo = hn::Set(d, 0x1.0de73ap-22f);
  const auto k1_hi = hn::Set(d, 0x1.a5a7dp-4f);
  const auto k1_lo = hn::Set(d, -0x1.151aaep-29f);
  // At |x| = 11, w = 162.5: 2^-w is below 2^-162, so sigmoid(u) is 0 (times x, 0) or 1 beyond;
  // the clamp keeps n within [0, 163].
  const auto t = hn::Min(hn::Abs(x), hn::Set(d, 11.0f));
  const auto x2 = hn::Mul(t, t);
  const auto x2_lo = hn::MulSub(t, t, x2);  // exact residual
  const auto k_hi = hn::MulAdd(k1_hi, x2, k0_hi);
  const auto k_error = hn::MulAdd(k1_hi, x2, hn::Sub(k0_hi, k_hi));
  const auto k_lo = hn::Add(k_error, hn::MulAdd(k1_hi, x2_lo, hn::MulAdd(k1_lo, x2, k0_lo)));
  // n = round(|x| k_hi) as magic + n, then f = |x| k_hi - n rounded once (|f| <= 1/2).
  const auto magic = hn::Set(d, round_magic);
  const auto shifted = hn::MulAdd(t, k_hi, magic);
  const auto minus_n = hn::Sub(hn::BitCast(di, magic), hn::BitCast(di, shifted));
  const auto f = hn::MulAdd(t, k_hi, hn::Sub(magic, shifted));
  const auto r = hn::Mul(hn::MulAdd(t, k_lo, f), hn::Set(d, -ln2));
  return times_sigmoid(d, x, exp_of_reduced(d, minus_n, r));
}

// ln(2^e (1 + f)) for f in [sqrt(1/2) - 1, sqrt2 - 1] and integer e (as float).
template <class D>
HWY_INLINE hn::Vec<D> log_of_parts(D d, hn::Vec<D> e, hn::Vec<D> f) {
  const auto s = hn::Div(f, hn::Add(hn::Set(d, 2.0f), f));
  const auto z = hn::Mul(s, s);
  const auto half_f2 = hn::Mul(hn::Mul(hn::Set(d, 0.5f), f), f);
  // f^2/2 + R(z), R(z) = z (2/3 + z (2/5 + ...)).
  const auto half_f2_plus_r =
      hn::MulAdd(z, polynomial(d, z, 2.0f / 3, 2.0f / 5, 2.0f / 7, 2.0f / 9), half_f2);
  const auto tail = hn::MulAdd(s, half_f2_plus_r, hn::Mul(e, hn::Set(d, ln2_lo)));
  return hn::MulAdd(e, hn::Set(d, ln2_hi), hn::Sub(f, hn::Sub(half_f2, tail)));
}

// log: at most 2 ulp on (0, max]; log(0) = -inf, log(x < 0) = NaN.
template <class D>
HWY_INLINE hn::Vec<D> log(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto tiny = hn::Lt(x, hn::Set(d, 0x1p-126f));
  const auto scaled = hn::IfThenElse(tiny, hn::Mul(x, hn::Set(d, 0x1p24f)), x);
  // Subtracting the bits of sqrt(1/2) puts the mantissa in [sqrt(1/2), sqrt2).
  const auto sqrt_half = hn::Set(di, 0x3f3504f3);
  const auto bits = hn::Sub(hn::BitCast(di, scaled), sqrt_half);
  const auto exponent = hn::ConvertTo(d, hn::ShiftRight<23>(bits));
  const auto m = hn::BitCast(d, hn::Add(hn::And(bits, hn::Set(di, 0x7fffff)), sqrt_half));
  const auto e = hn::Sub(exponent, hn::IfThenElseZero(tiny, hn::Set(d, 24.0f)));
  auto y = log_of_parts(d, e, hn::Sub(m, hn::Set(d, 1.0f)));
  y = hn::IfThenElse(hn::Eq(x, hn::Zero(d)), hn::Set(d, -std::numeric_limits<float>::infinity()),
                     y);
  y = hn::IfThenElse(hn::Ge(x, hn::Set(d, std::numeric_limits<float>::infinity())), x, y);
  return hn::IfThenElse(hn::Ge(x, hn::Zero(d)), y,
                        hn::Set(d, std::numeric_limits<float>::quiet_NaN()));
}

// log1p(t) for t in [0, 1].
template <class D>
HWY_INLINE hn::Vec<D> log1p_unit(D d, hn::Vec<D> t) {
  const auto large = hn::Gt(t, hn::Set(d, 0x1.a8279ap-2f));  // sqrt2 - 1
  // (1 + t) / 2 - 1 = (t - 1) / 2, exact in one FMA (and without one).
  const auto half = hn::Set(d, 0.5f);
  const auto f = hn::IfThenElse(large, hn::MulSub(t, half, half), t);
  return log_of_parts(d, hn::IfThenElseZero(large, hn::Set(d, 1.0f)), f);
}

// softplus: at most 3 ulp for every finite x; e^x to the last bit when tiny.
template <class D>
HWY_INLINE hn::Vec<D> softplus(D d, hn::Vec<D> x) {
  const auto parts = exp_parts_nonpositive(d, minus_abs(d, x));
  const auto t = hn::Mul(parts.head, parts.scale);
  const auto y = hn::Add(hn::Max(x, hn::Zero(d)), log1p_unit(d, t));
  return restore_nan(x, y);
}

// mish: at most 5 ulp for every finite x.
template <class D>
HWY_INLINE hn::Vec<D> mish(D d, hn::Vec<D> x) {
  const auto one = hn::Set(d, 1.0f);
  const auto two = hn::Set(d, 2.0f);
  const auto parts = exp_parts_nonpositive(d, minus_abs(d, x));
  const auto t = hn::Mul(parts.head, parts.scale);  // e^-|x|
  const auto negative = hn::Lt(x, hn::Zero(d));
  // x < 0: tanh(softplus x) = t (t + 2) / (t (t + 2) + 2), t = e^x.
  const auto t_plus_2 = hn::Add(t, two);
  // x >= 0: (1 + 2t) / (1 + 2t + 2t^2), t = e^-x.
  const auto one_plus_2t = hn::MulAdd(two, t, one);
  const auto x_negative = hn::Max(x, hn::Set(d, -128.0f));  // as in times_sigmoid
  const auto numerator = hn::IfThenElse(
      negative, hn::Mul(hn::Mul(x_negative, parts.head), t_plus_2), hn::Mul(x, one_plus_2t));
  const auto denominator = hn::IfThenElse(negative, hn::MulAdd(t, t_plus_2, two),
                                          hn::MulAdd(hn::Add(t, t), t, one_plus_2t));
  const auto scale = hn::IfThenElse(negative, parts.scale, one);
  return hn::Mul(hn::Div(numerator, denominator), scale);
}

// erf(z) for |z| < 0.5: z (2/sqrt(pi) + z^2 P(z^2)), 2/sqrt(pi) in two parts.
template <class D>
HWY_INLINE hn::Vec<D> erf_small(D d, hn::Vec<D> z) {
  const auto w = hn::Mul(z, z);
  const auto tail = hn::MulAdd(
      w, polynomial(d, w, -0x1.812738p-2f, 0x1.ce2638p-4f, -0x1.b67d22p-6f, 0x1.35dc1cp-8f),
      hn::Set(d, -0x1.f7ac92p-25f));
  return hn::MulAdd(z, hn::Set(d, 0x1.20dd76p+0f), hn::Mul(z, tail));
}

// erfc(z) / e^(-z^2) = t R(t), t = 2 / (2 + z), for z in [0.5, 10.6] (relative error < 3e-9).
template <class D>
HWY_INLINE hn::Vec<D> erfcx_large(D d, hn::Vec<D> t) {
  return hn::Mul(t, polynomial(d, t, 0x1.20db8ep-2f, 0x1.211198p-2f, 0x1.f4c164p-3f, 0x1.8803e6p-3f,
                               0x1.8c8026p-6f, 0x1.1d51d2p-3f, -0x1.03190ep-2f, 0x1.76b656p-5f,
                               0x1.368778p-4f, -0x1.094138p-5f));
}

// erf: at most 4 ulp for every finite x; erf(-0) = -0.
template <class D>
HWY_INLINE hn::Vec<D> erf(D d, hn::Vec<D> x) {
  const auto two = hn::Set(d, 2.0f);
  const auto z = hn::Min(hn::Abs(x), hn::Set(d, 10.6f));
  const auto z2 = hn::Mul(z, z);
  const auto z2_lo = hn::MulSub(z, z, z2);
  const auto parts = exp_parts_nonpositive(d, hn::Neg(z2), hn::Neg(z2_lo));
  // 1 - erfc(z) = 1 - erfcx(z) head scale.
  const auto one_minus_erfc =
      hn::NegMulAdd(hn::Mul(erfcx_large(d, hn::Div(two, hn::Add(two, z))), parts.head), parts.scale,
                    hn::Set(d, 1.0f));
  const auto magnitude =
      hn::IfThenElse(hn::Lt(z, hn::Set(d, 0.5f)), erf_small(d, z), one_minus_erfc);
  return restore_nan(x, hn::CopySign(magnitude, x));
}

// gelu_erf: at most 7 ulp for every finite x.
template <class D>
HWY_INLINE hn::Vec<D> gelu_erf(D d, hn::Vec<D> x) {
  const auto one = hn::Set(d, 1.0f);
  // z = |x| / sqrt2; beyond |x| = 15 (z = 10.6) e^(-z^2) underflows.
  const auto x_abs = hn::Min(hn::Abs(x), hn::Set(d, 15.0f));
  const auto z = hn::Mul(x_abs, hn::Set(d, 0x1.6a09e6p-1f));
  // z^2 = x^2 / 2 exactly, as x2 + x2_lo.
  const auto half = hn::Set(d, -0.5f);
  const auto x2 = hn::Mul(x_abs, x_abs);
  const auto x2_lo = hn::MulSub(x_abs, x_abs, x2);
  const auto parts = exp_parts_nonpositive(d, hn::Mul(x2, half), hn::Mul(x2_lo, half));
  // t = 2 / (2 + z) = 2 sqrt2 / (2 sqrt2 + |x|), without the rounding of z.
  const auto two_sqrt2 = hn::Set(d, 0x1.6a09e6p+1f);
  const auto erfcx = erfcx_large(d, hn::Div(two_sqrt2, hn::Add(two_sqrt2, x_abs)));
  const auto erf_z = erf_small(d, z);
  const auto small = hn::Lt(z, hn::Set(d, 0.5f));
  const auto negative = hn::Lt(x, hn::Zero(d));
  // 0.5 (1 + erf(x / sqrt2)), without the factor e^(-z^2) 2^(n - n/2) for x <= -0.5 sqrt2.
  const auto erfc_head = hn::Mul(erfcx, parts.head);
  const auto positive_factor = hn::IfThenElse(
      small, hn::Add(one, erf_z), hn::NegMulAdd(erfc_head, parts.scale, hn::Set(d, 2.0f)));
  const auto negative_factor = hn::IfThenElse(small, hn::Sub(one, erf_z), erfc_head);
  const auto factor =
      hn::Mul(hn::IfThenElse(negative, negative_factor, positive_factor), hn::Set(d, 0.5f));
  const auto scale = hn::IfThenElse(hn::AndNot(small, negative), parts.scale, one);
  // Below x = -15 the result is 0; clamping keeps -inf (and x e^-120 2^-86) from staying large.
  const auto x_clamped = hn::IfThenElse(negative, hn::Max(x, hn::Set(d, -128.0f)), x);
  return hn::Mul(hn::Mul(x_clamped, factor), scale);
}

// rsqrt: at most 1 ulp on (0, max] (measured: correctly rounded). y = 1 / s, s = sqrt(x), rounds
// twice; y s - 1 and x - s^2 are exact in one FMA each, and together give the relative error of y
// to first order, which one more FMA removes. x is scaled by 2^+-60 first, so that x - s^2 and y^2
// stay normal.
template <class D>
HWY_INLINE hn::Vec<D> rsqrt(D d, hn::Vec<D> x) {
  const auto one = hn::Set(d, 1.0f);
  const auto small = hn::Lt(x, hn::Set(d, 0x1p-60f));
  const auto large = hn::Gt(x, hn::Set(d, 0x1p60f));
  const auto x_scaled = hn::Mul(
      x,
      hn::IfThenElse(small, hn::Set(d, 0x1p60f), hn::IfThenElse(large, hn::Set(d, 0x1p-60f), one)));
  const auto unscale =
      hn::IfThenElse(small, hn::Set(d, 0x1p30f), hn::IfThenElse(large, hn::Set(d, 0x1p-30f), one));
  const auto s = hn::Sqrt(x_scaled);
  const auto y = hn::Div(one, s);
  const auto product_error = hn::MulSub(y, s, one);           // y s - 1
  const auto sqrt_remainder = hn::NegMulAdd(s, s, x_scaled);  // x - s^2
  // 1/sqrt(x) = y (1 - (y s - 1) - (x - s^2) y^2 / 2 + O(2^-46)).
  const auto correction =
      hn::MulAdd(hn::Mul(sqrt_remainder, hn::Mul(y, y)), hn::Set(d, 0.5f), product_error);
  const auto refined = hn::Mul(hn::NegMulAdd(y, correction, y), unscale);
  // 0, inf, negatives and NaN: the plain quotient has the right limit (+-inf, 0, NaN).
  const auto regular = hn::And(hn::Gt(x, hn::Zero(d)),
                               hn::Lt(x, hn::Set(d, std::numeric_limits<float>::infinity())));
  return hn::IfThenElse(regular, refined, hn::Div(one, hn::Sqrt(x)));
}

}  // namespace vmath

// f(x) lane by lane; see the table at the top of this file.
template <act F, class D>
HWY_INLINE hn::Vec<D> activate(D d, hn::Vec<D> x) {
  static_assert(std::is_same_v<hn::TFromD<D>, float>, "tilekern::activate: fp32 lanes only");
  if constexpr (F == act::identity) {
    return x;
  } else if constexpr (F == act::exp) {
    return vmath::exp(d, x);
  } else if constexpr (F == act::log) {
    return vmath::log(d, x);
  } else if constexpr (F == act::tanh) {
    return vmath::tanh(d, x);
  } else if constexpr (F == act::sigmoid) {
    return vmath::sigmoid(d, x);
  } else if constexpr (F == act::relu) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
    // Max is maxps here, which returns its second operand, x, unless the first is the greater:
    // x < 0 ? +0 : x, NaN and -0 included. (The emulated targets' Max returns the other operand
    // of a NaN.)
    return hn::Max(hn::Zero(d), x);
#else
    return hn::IfThenZeroElse(hn::Lt(x, hn::Zero(d)), x);
#endif
  } else if constexpr (F == act::gelu_erf) {
    return vmath::gelu_erf(d, x);
  } else if constexpr (F == act::gelu_tanh) {
    return vmath::gelu_tanh(d, x);
  } else if constexpr (F == act::silu) {
    return vmath::silu(d, x);
  } else if constexpr (F == act::softplus) {
    return vmath::softplus(d, x);
  } else if constexpr (F == act::mish) {
    return vmath::mish(d, x);
  } else if constexpr (F == act::erf) {
    return vmath::erf(d, x);
  } else if constexpr (F == act::sqrt) {
    return hn::Sqrt(x);
  } else if constexpr (F == act::rsqrt) {
    return vmath::rsqrt(d, x);
  } else if constexpr (F == act::reciprocal) {
    return hn::Div(hn::Set(d, 1.0f), x);
  } else if constexpr (F == act::square) {
    return hn::Mul(x, x);
  } else {
    static_assert(F == act::abs);
    return hn::Abs(x);
  }
}

}  // namespace detail
}  // namespace tilekern
