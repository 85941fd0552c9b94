// kernels/matmul.hpp against reference/matmul.hpp (fp64, on the decoded operands), on the ISA path
// the CTest cap selects (this binary runs once per TILEKERN_ISA). Every operand, bias and C lives
// in a guarded buffer (the last stored element right before an unreadable page) with leading
// dimensions padded, and the gaps of C hold a sentinel that must survive.
//
// Covered: every operand format for A (B bf16) and for B (A bf16), mixed pairs, C in every format;
// op(A) = A^T and op(B) = B^T (transposed views), all four combinations; shapes 1, 15, 17, 33, 100,
// 257 in each of M, K and N, K = 0, M = 1 and 16 (the small-M groups), 200 x 300 x 300 (several
// blocks of 168 x 256 and k-blocks of 128); alpha, beta (beta = 0 ignores NaN in C), bias in
// several formats, activations; stochastic rounding (index r * N + c, stream, seed, unbiased);
// thread counts; pre-packed B; the precision policies; shape errors.
//
// The bound (u = 2^-24, gamma(n) = n u / (1 - n u), mag = reference::magnitude = sum_k |a_ik
// b_kj|): acc is K fused multiply-adds in fp32 (or K roundings in bf16 pairs), then the epilogue
// rounds alpha acc (+ beta c, itself rounded once) (+ bias) at most twice more, so each term of the
// exact t = alpha sum_k a_ik b_kj + beta c_old + bias collects at most K + 2 (products), 3 (beta
// c_old) and 1 (bias) relative roundings (Higham 3.1):
//   |t_fp32 - t| <= B = gamma(K + 2) |alpha| mag + gamma(3) |beta c_old| + u |bias|
//                       + K 2^-126 |alpha|   (vdpbf16ps flushes subnormal sums, engine/tensor.hpp)
// kernels/matmul.hpp states this for beta = 0 as (gamma(K) + 2u) |alpha| mag + u |bias|, which is
// gamma(K + 2) to first order. Note that beta c_old is rounded three times (beta * c, the fused
// multiply-add with alpha acc, the bias add), so u |beta c_old| alone would not bound it.
// With an activation f: |y_fp32 - f(t)| <= L_f B + accuracy(f).max_ulp ulp32(|f(t)| + L_f B), L_f
// the largest |f'| (1 for identity and relu, 1.13 for gelu_tanh, 1.1 for silu).
// An fp32 C must be within that; a narrower C, rounded from the fp32 result, must lie between
// F::from(f(t) - bound) and F::from(f(t) + bound) (nearest even; from() is monotonic), or between
// the largest value of F <= f(t) - bound and the smallest >= f(t) + bound (stochastic). Those
// bounds are computed by tests/types/reference.hpp's independent encoder, and operands are decoded
// by it too. Beyond the bound, a narrow C must be exactly F::from(fp32 result, cast, r * N + c)
// (the fp32 result from the same call into a float C), and a float C must be exactly the
// documented epilogue of the fp32 accumulator acc (fma(acc, alpha, beta * c) then + bias, or
// fma(acc, alpha, bias) when beta = 0), acc being on the fp32 compute path the fma chain
// acc = fma(a_ik, b_kj, acc) in k order from 0, and on bf16 pairs the result of an alpha = 1,
// beta = 0 call: a kernel wrong by one ulp anywhere fails one of these.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "support/elements.hpp"
#include "support/formats.hpp"
#include "support/guarded.hpp"
#include "tilekern/engine/tensor.hpp"
#include "tilekern/kernels/matmul.hpp"
#include "tilekern/reference/activation.hpp"
#include "tilekern/reference/matmul.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/simd/math.hpp"
#include "tilekern/types/formats.hpp"
#include "types/reference.hpp"

namespace tilekern {
namespace {

using test::bits_of;
using test::guarded_buffer;
using test::is_float;
using test::saturated;
using test::value_of;

constexpr double u = 0x1p-24;
constexpr double inf = std::numeric_limits<double>::infinity();

double gamma(std::size_t n) {
  const double nu = static_cast<double>(n) * u;
  return nu / (1 - nu);
}

// T's name (test::name_of), and below those of the precision policies.
template <class T>
std::string name_of() {
  return test::name_of<T>();
}

template <class T>
T quiet_nan() {
  return std::numeric_limits<T>::quiet_NaN();
}

template <class T>
bool is_nan(T x) {
  if constexpr (is_float<T>) {
    return std::isnan(x);
  } else {
    return x.is_nan();
  }
}

// simd/math.hpp's ulp of an exact result y.
double ulp32(double y) {
  const double a = std::abs(y);
  if (a < 0x1p-126) return 0x1p-149;
  return std::ldexp(1.0, std::ilogb(a) - 23);
}

// The largest |f'| over the reals, for the functions tested here.
double lipschitz(act f) {
  switch (f) {
    case act::identity:
    case act::relu:
      return 1.0;
    case act::gelu_tanh:
      return 1.13;  // gelu's slope peaks at 1.1289 near x = 1.5
    case act::silu:
      return 1.1;  // silu's slope peaks at 1.0998 near x = 2.4
    default:
      FAIL("no slope bound for ", std::string(name(f)));
      return inf;
  }
}

// ---- nearest-even, floor and ceiling in a format, by the independent reference ----

template <class F>
double code_value(std::uint32_t code) {
  return test::decode<F>(code).value();
}

// The largest finite value of F <= x and the smallest >= x (-inf or inf beyond the range).
template <class F>
double floor_in(double x);
template <class F>
double ceil_in(double x) {
  if (x < 0) return -floor_in<F>(-x);
  const auto& g = test::grid<F>().values;
  const auto it = std::lower_bound(g.begin(), g.end(), x);
  return it == g.end() ? inf : *it;
}
template <class F>
double floor_in(double x) {
  if (x < 0) return -ceil_in<F>(-x);
  const auto& g = test::grid<F>().values;
  return *(std::upper_bound(g.begin(), g.end(), x) - 1);  // g starts at 0
}

// Whether `got` (an element of format Out) is what an fp32 result within `bound` of `want` becomes
// with `cast` (see the top of this file).
template <class Out>
bool agrees(Out got, double want, double bound, const cast_options& cast) {
  const double value = value_of(got);
  if (std::isnan(want)) return std::isnan(value);
  if constexpr (is_float<Out>) {
    return std::abs(value - want) <= bound;
  } else {
    if (cast.round == rounding::stochastic) {
      return value >= floor_in<Out>(want - bound) && value <= ceil_in<Out>(want + bound);
    }
    const std::uint32_t lo =
        test::encode<Out>(want - bound, rounding::nearest_even, cast.on_overflow);
    const std::uint32_t hi =
        test::encode<Out>(want + bound, rounding::nearest_even, cast.on_overflow);
    if (lo == hi) return got.code() == lo;  // one code (also NaN on an fn format's overflow)
    return value >= code_value<Out>(lo) && value <= code_value<Out>(hi);
  }
}

// ---- operands and outputs in guarded buffers ----

// op(X), rows x cols: stored as it is (leading dimension cols + pad) or, when `transpose`, stored
// cols x rows (leading dimension rows + pad) and passed as transposed(view).
template <class T>
struct operand {
  std::size_t rows, cols;
  bool transpose;
  std::size_t stored_rows, stored_cols, ld;
  guarded_buffer<T> data;
  std::vector<double> values;  // op(X), rows x cols, decoded

  operand(std::size_t rows_, std::size_t cols_, bool transpose_, std::size_t pad)
      : rows(rows_),
        cols(cols_),
        transpose(transpose_),
        stored_rows(transpose_ ? cols_ : rows_),
        stored_cols(transpose_ ? rows_ : cols_),
        ld(stored_cols + pad),
        data(stored_rows == 0 || stored_cols == 0 ? 0 : (stored_rows - 1) * ld + stored_cols),
        values(rows_ * cols_) {}

  T& at(std::size_t r, std::size_t c) { return transpose ? data[c * ld + r] : data[r * ld + c]; }
  void set(std::size_t r, std::size_t c, double v) {
    at(r, c) = saturated<T>(v);
    values[r * cols + c] = value_of(at(r, c));
  }
  void fill(std::mt19937_64& generator, double sigma) {
    std::normal_distribution<double> normal(0.0, sigma);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) set(r, c, normal(generator));
    }
  }
  // body(view) or body(transposed(view)): op(X) as matmul takes it.
  template <class Body>
  decltype(auto) with(Body&& body) {
    const view<const T> stored(data.data(), stored_rows, stored_cols, ld);
    if (transpose) return body(transposed(stored));
    return body(stored);
  }
};

// C: rows x cols in rows of cols + pad, the gaps holding a sentinel.
template <class C>
struct output {
  std::size_t rows, cols, ld;
  guarded_buffer<C> data;

  output(std::size_t rows_, std::size_t cols_, std::size_t pad)
      : rows(rows_),
        cols(cols_),
        ld(cols_ + pad),
        data(rows_ == 0 || cols_ == 0 ? 0 : (rows_ - 1) * ld + cols_) {
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = sentinel();
  }
  static C sentinel() { return saturated<C>(1.5); }
  view<C> v() { return {data.data(), rows, cols, ld}; }
  C& at(std::size_t r, std::size_t c) { return data[r * ld + c]; }
  bool gaps_untouched() {
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (i % ld >= cols && bits_of(data[i]) != bits_of(sentinel())) return false;
    }
    return true;
  }
  std::vector<C> elements() {
    std::vector<C> out;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) out.push_back(at(r, c));
    }
    return out;
  }
};

// ---- one problem: C = act(alpha op(A) op(B) + beta C + bias), formats fixed ----

struct shape {
  std::size_t m, k, n;
  bool transpose_a = false, transpose_b = false;
  std::size_t pad = 0;  // added to every leading dimension
};

std::string describe(const shape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n) +
         (s.transpose_a ? " A^T" : "") + (s.transpose_b ? " B^T" : "") + " pad " +
         std::to_string(s.pad);
}

std::string describe(const matmul_options& o) {
  return "alpha " + std::to_string(o.alpha) + " beta " + std::to_string(o.beta) + " " +
         std::string(name(o.activation)) + " " + std::string(name(o.cast.round)) + " seed " +
         std::to_string(o.cast.seed) + " stream " + std::to_string(o.cast.stream) + " " +
         std::string(name(o.cast.on_overflow)) + " threads " + std::to_string(o.threads);
}

// The value an operand of format T is multiplied as under Policy: float is rounded to the cast
// type (nearest even) by matmult and all.
template <class Policy, class T>
double policy_value(double v) {
  if constexpr (Policy::mode != auto_cast::none && is_float<T>) {
    using cast = typename Policy::cast_type;
    return code_value<cast>(test::encode<cast>(v, rounding::nearest_even, overflow::standard));
  } else {
    return v;
  }
}

// The format an fp32 result is rounded to: C, or the cast type for a float C under auto_cast::all.
template <class Policy, class C>
using rounded_to = std::conditional_t<Policy::mode == auto_cast::all && is_float<C>,
                                      typename Policy::cast_type, C>;

template <>
std::string name_of<precision<>>() {
  return "no auto-cast";
}
template <>
std::string name_of<precision<auto_cast::matmult, bf16>>() {
  return "auto_cast matmult bf16";
}
template <>
std::string name_of<precision<auto_cast::all, bf16>>() {
  return "auto_cast all bf16";
}

// Bias = void: no bias.
template <class A, class B, class C, class Bias = void>
struct problem {
  using bias_type = std::conditional_t<std::is_void_v<Bias>, float, Bias>;
  static constexpr bool has_bias = !std::is_void_v<Bias>;

  shape s;
  operand<A> a;
  operand<B> b;
  guarded_buffer<bias_type> bias;
  std::vector<double> bias_values;
  std::vector<C> c_old;  // C's contents before the call when beta != 0 (rows x cols)

  problem(const shape& s_, std::uint64_t seed)
      : s(s_),
        a(s_.m, s_.k, s_.transpose_a, s_.pad),
        b(s_.k, s_.n, s_.transpose_b, s_.pad),
        bias(has_bias ? s_.n : 0),
        bias_values(has_bias ? s_.n : 0),
        c_old(s_.m * s_.n) {
    std::mt19937_64 generator(seed);
    // op(A) op(B) of about unit size: A ~ N(0, 1 / K), B ~ N(0, 1).
    a.fill(generator, 1.0 / std::sqrt(static_cast<double>(std::max<std::size_t>(s.k, 1))));
    b.fill(generator, 1.0);
    std::normal_distribution<double> normal;
    for (std::size_t j = 0; j < bias.size(); ++j) {
      bias[j] = saturated<bias_type>(normal(generator));
      bias_values[j] = value_of(bias[j]);
    }
    for (C& c : c_old) c = saturated<C>(normal(generator));
  }

  std::string what() const {
    return name_of<A>() + " x " + name_of<B>() + " -> " + name_of<C>() +
           (has_bias ? ", " + name_of<bias_type>() + " bias" : std::string()) + ", " + describe(s) +
           ", " + std::string(name(active_isa()));
  }

  // Runs matmul<Policy> into a fresh C (c_old when beta != 0, else NaN) and returns C's elements.
  template <class Policy = precision<>>
  std::vector<C> run(const matmul_options& options, bool prepacked = false) {
    output<C> out(s.m, s.n, s.pad);
    for (std::size_t r = 0; r < s.m; ++r) {
      for (std::size_t c = 0; c < s.n; ++c) {
        out.at(r, c) = options.beta != 0 ? c_old[r * s.n + c] : quiet_nan<C>();
      }
    }
    const auto call = [&](const auto& av, const auto& bv) {
      if constexpr (has_bias) {
        matmul<Policy>(av, bv, out.v(), options, view<const Bias>(bias.data(), 1, s.n));
      } else {
        matmul<Policy>(av, bv, out.v(), options);
      }
    };
    a.with([&](auto av) {
      b.with([&](auto bv) {
        if (prepacked) {
          const auto packed = pack_b<Policy>(bv);
          call(av, packed);
        } else {
          call(av, bv);
        }
      });
    });
    INFO(what(), ", ", describe(options));
    CHECK(out.gaps_untouched());
    return out.elements();
  }

  // t (before the activation) and the bound B of the top of this file, per element.
  template <class Policy = precision<>>
  void reference_t(const matmul_options& o, std::vector<double>& t,
                   std::vector<double>& bound) const {
    const std::size_t m = s.m, k = s.k, n = s.n;
    std::vector<double> av(m * k), bv(k * n), bias64(bias_values), old(m * n), mag(m * n);
    for (std::size_t i = 0; i < av.size(); ++i) av[i] = policy_value<Policy, A>(a.values[i]);
    for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = policy_value<Policy, B>(b.values[i]);
    for (double& v : bias64) v = policy_value<Policy, bias_type>(v);
    for (std::size_t i = 0; i < old.size(); ++i) old[i] = o.beta != 0 ? value_of(c_old[i]) : 0.0;
    t = old;
    reference::matmul(view<const double>(av.data(), m, k), view<const double>(bv.data(), k, n),
                      view<double>(t.data(), m, n), o.alpha, o.beta, bias64, act::identity);
    reference::magnitude(view<const double>(av.data(), m, k), view<const double>(bv.data(), k, n),
                         view<double>(mag.data(), m, n));
    bound.resize(m * n);
    const double alpha = std::abs(o.alpha), beta = std::abs(o.beta);
    for (std::size_t r = 0; r < m; ++r) {
      for (std::size_t c = 0; c < n; ++c) {
        const std::size_t i = r * n + c;
        bound[i] = gamma(k + 2) * alpha * mag[i] + gamma(3) * beta * std::abs(old[i]) +
                   (bias64.empty() ? 0.0 : u * std::abs(bias64[c])) +
                   static_cast<double>(k) * 0x1p-126 * alpha;
      }
    }
  }

  struct verdict {
    std::size_t failures = 0;
    std::string first;  // the first failing element
    double worst = 0;   // the largest error / bound of an fp32 result
  };

  // Compares every element of `got` with the reference (see the top of this file).
  template <class Policy = precision<>>
  verdict evaluate(const std::vector<C>& got, const matmul_options& o) const {
    using out_type = rounded_to<Policy, C>;
    std::vector<double> t, bound_t;
    reference_t<Policy>(o, t, bound_t);
    const double slope = lipschitz(o.activation);
    const double max_ulp = accuracy(o.activation).max_ulp;
    cast_options cast = o.cast;
    if constexpr (!std::is_same_v<out_type, C>) cast = {};  // auto_cast::all: nearest even
    verdict v;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double want = reference::activation(o.activation, t[i]);
      const double spread = slope * bound_t[i];
      const double bound = spread + max_ulp * ulp32(std::abs(want) + spread);
      bool ok = false;
      if constexpr (std::is_same_v<out_type, C>) {
        ok = agrees(got[i], want, bound, cast);
      } else {  // a float C that must hold a value of the cast type
        const auto as_cast = out_type::from(got[i]);
        ok = value_of(as_cast) == static_cast<double>(got[i]) && agrees(as_cast, want, bound, cast);
      }
      if (!ok) {
        if (v.failures++ == 0) {
          v.first = "element (" + std::to_string(i / s.n) + ", " + std::to_string(i % s.n) +
                    ") = " + std::to_string(value_of(got[i])) + ", reference " +
                    std::to_string(want) + ", bound " + std::to_string(bound);
        }
      } else if constexpr (is_float<out_type>) {
        if (bound > 0) v.worst = std::max(v.worst, std::abs(value_of(got[i]) - want) / bound);
      }
    }
    return v;
  }

  // One assertion per matrix: every element within the bound. Returns the worst error / bound.
  template <class Policy = precision<>>
  double check(const std::vector<C>& got, const matmul_options& o) const {
    const verdict v = evaluate<Policy>(got, o);
    INFO(what(), ", ", describe(o), ", ", name_of<Policy>(), ": ", v.failures,
         " elements beyond the bound, first ", v.first);
    CHECK(v.failures == 0);
    return v.worst;
  }
};

// The largest error / bound seen by the tests of fp32 C (printed at the end of the bound test).
double& worst_ratio() {
  static double worst = 0;
  return worst;
}

// Runs and checks one problem; returns C's elements.
template <class A, class B, class C, class Bias = void>
std::vector<C> run_checked(const shape& s, const matmul_options& o, std::uint64_t seed,
                           bool prepacked = false) {
  problem<A, B, C, Bias> p(s, seed);
  const std::vector<C> got = p.run(o, prepacked);
  worst_ratio() = std::max(worst_ratio(), p.check(got, o));
  return got;
}

// The shapes that put each of 1, 15, 17, 33, 100, 257 in each of M, K and N, each with another
// combination of transposes and leading dimensions.
std::vector<shape> odd_shapes() {
  constexpr std::size_t sizes[] = {1, 15, 17, 33, 100, 257};
  std::vector<shape> shapes;
  for (std::size_t i = 0; i < 6; ++i) {
    shapes.push_back({sizes[i], sizes[(i + 1) % 6], sizes[(i + 2) % 6], (i & 1) != 0, (i & 2) != 0,
                      i % 3 == 0 ? 0u : 2 * i + 1});
  }
  return shapes;
}

// alpha, beta for the i-th shape of a sweep.
matmul_options options_for(std::size_t i) {
  constexpr float alphas[] = {1.0f, 0.75f, -2.0f};
  constexpr float betas[] = {0.0f, 0.5f};
  matmul_options o;
  o.alpha = alphas[i % 3];
  o.beta = betas[(i / 2) % 2];
  return o;
}

template <class A, class B>
void sweep_odd_shapes(std::uint64_t seed) {
  const std::vector<shape> shapes = odd_shapes();
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    run_checked<A, B, float>(shapes[i], options_for(i + seed), seed * 100 + i);
  }
}

TEST_CASE("matmul: every A format (B bf16), every B format (A bf16), mixed pairs; odd shapes") {
  sweep_odd_shapes<float, bf16>(1);
  sweep_odd_shapes<bf16, float>(2);
  test::for_each_test_format([]<class F>() {
    sweep_odd_shapes<F, bf16>(3);
    if constexpr (!std::is_same_v<F, bf16>) sweep_odd_shapes<bf16, F>(4);
  });
  sweep_odd_shapes<bf16, fp8_e4m3>(5);
  sweep_odd_shapes<float, float>(6);
#if !defined(TILEKERN_TEST_FEWER_FORMATS)  // see support/formats.hpp
  sweep_odd_shapes<fp16, fp8_e5m2>(7);
  sweep_odd_shapes<tf32, fp16>(8);
#else
  sweep_odd_shapes<fp16, fp8_e4m3>(7);
#endif
  std::printf("matmul %s: fp32 C error at most %.3f of the bound\n",
              std::string(name(active_isa())).c_str(), worst_ratio());
}

// C in format F (bf16 operands) must be F::from(the fp32 result, cast, r * N + c) exactly, where
// the fp32 result is the same call's into a float C, and within the bound.
template <class F>
void check_c_format(const shape& s, matmul_options o, std::uint64_t seed) {
  problem<bf16, bf16, F> narrow(s, seed);
  problem<bf16, bf16, float> wide(s, seed);  // the same operands (same seed, same formats)
  for (std::size_t i = 0; i < wide.c_old.size(); ++i) {
    wide.c_old[i] = static_cast<float>(value_of(narrow.c_old[i]));  // exact
  }
  const std::vector<F> got = narrow.run(o);
  narrow.check(got, o);
  matmul_options fp32 = o;
  fp32.cast = {};
  const std::vector<float> reference = wide.run(fp32);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < got.size() && mismatches == 0; ++i) {
    const F want = F::from(reference[i], o.cast, i);  // index r * N + c
    if (bits_of(got[i]) != bits_of(want)) {
      ++mismatches;
      INFO(narrow.what(), ", ", describe(o), ": element ", i, " has code ", got[i].code(),
           ", the fp32 result ", reference[i], " gives ", want.code());
      CHECK(bits_of(got[i]) == bits_of(want));
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("matmul: C in every format, nearest even, stochastic and saturating, beta reads C") {
  const std::vector<shape> shapes = {{17, 33, 100, false, false, 3},
                                     {33, 100, 257, true, false, 0},
                                     {1, 257, 15, false, true, 1},
                                     {100, 17, 33, true, true, 5}};
  test::for_each_test_format([&]<class F>() {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      matmul_options o = options_for(i);
      o.beta = i % 2 == 0 ? 0.0f : -0.5f;
      check_c_format<F>(shapes[i], o, 10 + i);
      o.cast = {.round = rounding::stochastic, .seed = 7 + i, .stream = i};
      check_c_format<F>(shapes[i], o, 20 + i);
    }
    // Beyond the range: saturate gives max, standard gives inf (NaN without inf).
    matmul_options big;
    big.alpha = 2.0e5f;
    big.cast.on_overflow = overflow::saturate;
    check_c_format<F>(shapes[0], big, 30);
    big.cast.on_overflow = overflow::standard;
    check_c_format<F>(shapes[0], big, 31);
  });
}

TEST_CASE("matmul: bias in several formats, activations") {
  const shape s1{33, 100, 257, false, true, 3}, s2{17, 15, 33, true, false, 0};
  for (const act f : {act::identity, act::relu, act::gelu_tanh, act::silu}) {
    matmul_options o;
    o.activation = f;
    o.alpha = 0.5f;
    run_checked<bf16, bf16, float, float>(s1, o, 40);
    run_checked<bf16, fp8_e4m3, float, bf16>(s2, o, 41);
    o.beta = 0.25f;
    run_checked<bf16, bf16, float, fp8_e4m3>(s2, o, 42);
    run_checked<bf16, bf16, bf16, bf16>(s1, o, 43);
  }
}

TEST_CASE("matmul: K = 0 gives act(beta C + bias); NaN in C ignored when beta = 0") {
  for (const shape& s : {shape{17, 0, 33, false, false, 2}, shape{1, 0, 300, true, true, 0},
                         shape{200, 0, 5, true, false, 1}}) {
    for (const float beta : {0.0f, 1.5f}) {
      matmul_options o;
      o.beta = beta;
      o.activation = act::relu;
      const std::vector<float> got = run_checked<bf16, bf16, float, float>(s, o, 50);
      if (beta == 0.0f) {
        // C held NaN: the result is relu(bias) in every row, exactly (one rounding of bias: none).
        problem<bf16, bf16, float, float> p(s, 50);
        for (std::size_t i = 0; i < got.size(); ++i) {
          const double want = std::max(0.0, p.bias_values[i % s.n]);
          if (got[i] != want) {
            INFO("element ", i, ": ", got[i], ", want ", want);
            CHECK(got[i] == want);
            break;
          }
        }
      }
      run_checked<bf16, bf16, bf16>(s, o, 51);
    }
  }
}

TEST_CASE("matmul: small M (1 and 16) and shapes larger than one block") {
  for (const std::size_t m : {std::size_t{1}, std::size_t{16}}) {
    const shape s{m, 300, 300, false, m == 16, 1};  // N over two blocks, K over three k-blocks
    matmul_options o;
    o.beta = 0.5f;
    run_checked<bf16, bf16, float>(s, o, 60);
    run_checked<bf16, fp8_e4m3, float>(s, o, 61);
    run_checked<float, float, float>(s, o, 62);
    run_checked<bf16, float, float>(shape{m, 129, 257, true, false, 0}, o, 63);
  }
  // 2 x 2 blocks, 3 k-blocks; transposed and strided.
  const shape big{200, 300, 300, true, true, 3};
  matmul_options o;
  o.alpha = -0.75f;
  o.beta = 2.0f;
  run_checked<bf16, bf16, float>(big, o, 64);
  run_checked<bf16, fp8_e4m3, float>(shape{200, 300, 300, false, false, 0}, o, 65);
  run_checked<float, float, float>(shape{200, 257, 300, false, true, 0}, o, 66);
  check_c_format<bf16>(big, o, 67);
  o.cast = {.round = rounding::stochastic, .seed = 3};
  check_c_format<bf16>(shape{169, 129, 257, false, false, 1}, o, 68);
}

TEST_CASE("matmul: beta != 0 reads C; a NaN there stays in its element only") {
  const shape s{15, 33, 17, false, false, 2};
  problem<bf16, bf16, float> p(s, 70);
  matmul_options o;
  o.beta = 1.0f;
  p.c_old[3 * s.n + 5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> got = p.run(o);
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (i == 3 * s.n + 5) {
      CHECK(std::isnan(got[i]));
    } else if (!std::isfinite(got[i])) {
      INFO("element ", i, " = ", got[i]);
      CHECK(std::isfinite(got[i]));
    }
  }
  p.c_old[3 * s.n + 5] = 0.0f;
  p.check(p.run(o), o);
  // beta = 0: the same C contents (NaN placed by run()) are never read.
  o.beta = 0.0f;
  const std::vector<float> ignored = p.run(o);
  CHECK(std::none_of(ignored.begin(), ignored.end(), [](float v) { return std::isnan(v); }));
  p.check(ignored, o);
}

// A NaN in op(A) at (r, k) makes row r of C NaN; an inf in op(B) at (k, c) makes column c +-inf
// (the other operands are finite and non-zero); every other element stays finite.
template <class A, class B>
void check_specials(const shape& s) {
  problem<A, B, float> p(s, 75);
  const std::size_t nan_row = s.m / 2, inf_col = s.n - 1;
  p.a.at(nan_row, s.k / 3) = std::numeric_limits<A>::quiet_NaN();
  p.b.at(s.k - 1, inf_col) = std::numeric_limits<B>::infinity();
  for (std::size_t r = 0; r < s.m; ++r) {  // no zero meets the inf
    if (p.a.values[r * s.k + s.k - 1] == 0) p.a.at(r, s.k - 1) = saturated<A>(1.0);
  }
  const std::vector<float> got = p.run(matmul_options{.alpha = 0.5f});
  std::size_t wrong = 0;
  for (std::size_t r = 0; r < s.m; ++r) {
    for (std::size_t c = 0; c < s.n; ++c) {
      const float v = got[r * s.n + c];
      const bool ok = r == nan_row   ? std::isnan(v)
                      : c == inf_col ? std::isinf(v)
                                     : std::isfinite(v);
      if (!ok && wrong++ == 0) {
        INFO(p.what(), ": (", r, ", ", c, ") = ", v);
        CHECK(ok);
      }
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("matmul: NaN and inf operands propagate to their row and column only") {
  check_specials<bf16, bf16>(shape{15, 33, 40, false, true, 1});
  check_specials<bf16, bf16>(shape{200, 257, 300, true, false, 0});
#if !defined(TILEKERN_TEST_FEWER_FORMATS)
  check_specials<fp16, fp8_e5m2>(shape{17, 100, 33, false, false, 0});
#else
  check_specials<fp16, fp8_e4m3>(shape{17, 100, 33, false, false, 0});
#endif
  check_specials<float, float>(shape{16, 129, 257, true, true, 2});
}

TEST_CASE("matmul: M = 0 or N = 0 writes nothing") {
  for (const shape& s : {shape{0, 5, 7, false, false, 0}, shape{5, 7, 0, true, false, 0},
                         shape{0, 0, 0, false, true, 0}}) {
    problem<bf16, bf16, float, float> p(s, 76);
    matmul_options o;
    o.beta = 1.0f;
    CHECK(p.run(o).empty());  // and run() checked that no gap of C was written
  }
}

// ---- stochastic rounding ----

TEST_CASE("matmul: stochastic C is reproducible, depends on seed and stream, and is unbiased") {
  const shape s{16, 257, 33, false, true, 1};
  problem<bf16, bf16, bf16> p(s, 80);
  problem<bf16, bf16, float> wide(s, 80);
  matmul_options o;
  o.cast = {.round = rounding::stochastic, .seed = 42, .stream = 1};
  const std::vector<bf16> first = p.run(o);
  const std::vector<bf16> again = p.run(o);
  const auto same = [](const std::vector<bf16>& x, const std::vector<bf16>& y) {
    return std::equal(x.begin(), x.end(), y.begin(),
                      [](bf16 l, bf16 r) { return l.bits() == r.bits(); });
  };
  CHECK(same(first, again));
  matmul_options reseeded = o, restreamed = o;
  reseeded.cast.seed = 43;
  restreamed.cast.stream = 2;
  CHECK_FALSE(same(first, p.run(reseeded)));
  CHECK_FALSE(same(first, p.run(restreamed)));
  o.threads = 2;
  CHECK(same(first, p.run(o)));
  o.threads = 1;
  CHECK(same(first, p.run(o)));

  // Unbiased: over 256 seeds, each element's rounding is up with probability
  // p = (x - lower) / (upper - lower), x the fp32 result. The sum of the steps
  // (y - x) / (upper - lower), of mean 0 and variance p (1 - p), must be within 5 standard errors.
  const std::vector<float> x = wide.run(matmul_options{});
  double sum = 0, variance = 0;
  std::size_t inexact = 0;
  std::vector<double> mean(x.size(), 0.0);
  constexpr int seeds = 256;
  for (int seed = 0; seed < seeds; ++seed) {
    matmul_options sr;
    sr.cast = {.round = rounding::stochastic, .seed = static_cast<std::uint64_t>(1000 + seed)};
    const std::vector<bf16> y = p.run(sr);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double lower = floor_in<bf16>(x[i]), upper = ceil_in<bf16>(x[i]);
      const double v = value_of(y[i]);
      mean[i] += v / seeds;
      if (lower == upper) {
        CHECK(v == lower);
        continue;
      }
      if (seed == 0) ++inexact;
      const double step = upper - lower, q = (x[i] - lower) / step;
      sum += (v - x[i]) / step;
      variance += q * (1 - q);
    }
  }
  REQUIRE(inexact > 400);
  const double z = sum / std::sqrt(variance);
  std::printf("matmul %s: stochastic bf16 C over %d seeds, %zu inexact elements: z = %.2f\n",
              std::string(name(active_isa())).c_str(), seeds, inexact, z);
  INFO("sum of steps ", sum, ", standard error ", std::sqrt(variance), ", z = ", z);
  CHECK(std::abs(z) < 5.0);
  // and each element's mean is the fp32 value within 6 of its own standard errors (plus 1/256
  // of a step, for elements that rounded the same way every time)
  std::size_t far = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double lower = floor_in<bf16>(x[i]), upper = ceil_in<bf16>(x[i]);
    const double step = upper - lower, q = step > 0 ? (x[i] - lower) / step : 0.0;
    const double error = std::sqrt(q * (1 - q) / seeds) * step;
    if (std::abs(mean[i] - x[i]) > 6 * error + step / seeds) ++far;
  }
  CHECK(far == 0);
}

// ---- threads, packing, policies ----

template <class T>
bool same_bits(const std::vector<T>& x, const std::vector<T>& y) {
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(),
                                            [](T l, T r) { return bits_of(l) == bits_of(r); });
}

TEST_CASE("matmul: the same bits for any thread count") {
  for (const shape& s : {shape{200, 300, 300, false, true, 1}, shape{16, 257, 600, true, false, 0},
                         shape{400, 33, 17, false, false, 0}}) {
    problem<bf16, fp8_e4m3, float> p(s, 90);
    problem<bf16, bf16, bf16> q(s, 91);
    matmul_options o;
    o.beta = 0.5f;
    o.threads = 1;
    const std::vector<float> one = p.run(o);
    const std::vector<bf16> one_sr =
        q.run(matmul_options{.cast = {.round = rounding::stochastic, .seed = 5}, .threads = 1});
    for (const int threads : {2, 3, 0}) {
      INFO(describe(s), ", threads ", threads);
      o.threads = threads;
      CHECK(same_bits(one, p.run(o)));
      CHECK(
          same_bits(one_sr, q.run(matmul_options{.cast = {.round = rounding::stochastic, .seed = 5},
                                                 .threads = threads})));
    }
    p.check(one, matmul_options{.beta = 0.5f});
  }
}

TEST_CASE("matmul: pre-packed B gives the bits of unpacked B, and serves many calls") {
  matmul_options o;
  o.alpha = 1.25f;
  o.beta = -1.0f;
  for (const shape& s : {shape{33, 257, 100, false, false, 2}, shape{1, 300, 300, true, true, 0},
                         shape{17, 15, 33, false, true, 0}}) {
    INFO(describe(s));
    problem<bf16, fp8_e4m3, float> p(s, 100);
    CHECK(same_bits(p.run(o), p.run(o, /*prepacked=*/true)));
    problem<float, float, float> q(s, 101);
    CHECK(same_bits(q.run(o), q.run(o, true)));
    problem<bf16, bf16, bf16> r(s, 102);
    CHECK(same_bits(r.run(o), r.run(o, true)));
  }
  // One packed B, several A: each call the bits of its unpacked call.
  const shape s{40, 129, 70, false, true, 1};
  problem<bf16, fp8_e4m3, float> p(s, 103);
  const auto packed = p.b.with([](auto bv) { return pack_b(bv); });
  CHECK(packed.rows() == 129);
  CHECK(packed.cols() == 70);
  for (std::uint64_t seed = 0; seed < 3; ++seed) {
    problem<bf16, fp8_e4m3, float> other(s, 104 + seed);  // another A (and B, unused)
    output<float> c(s.m, s.n, 0);
    other.a.with([&](auto av) { matmul(av, packed, c.v()); });
    const std::vector<float> via_packed = c.elements();
    // the same A with p's B, unpacked
    for (std::size_t r = 0; r < s.m; ++r) {
      for (std::size_t k = 0; k < s.k; ++k) p.a.at(r, k) = other.a.at(r, k);
    }
    p.a.values = other.a.values;
    const std::vector<float> unpacked = p.run(matmul_options{});
    CHECK(same_bits(via_packed, unpacked));
    p.check(via_packed, matmul_options{});
  }
}

TEST_CASE("matmul: precision policies (Neuron's --auto-cast)") {
  using matmult = precision<auto_cast::matmult, bf16>;
  using all = precision<auto_cast::all, bf16>;
  for (const shape& s :
       {shape{33, 100, 257, false, true, 1}, shape{200, 300, 17, true, false, 0}}) {
    INFO(describe(s));
    matmul_options o;
    o.beta = 0.5f;
    // matmult: float operands rounded to bf16 (nearest even), then multiplied as bf16 operands.
    problem<float, float, float> p(s, 110);
    problem<bf16, bf16, float> hand(s, 110);
    for (std::size_t r = 0; r < s.m; ++r) {
      for (std::size_t k = 0; k < s.k; ++k) hand.a.at(r, k) = bf16::from(p.a.at(r, k));
    }
    for (std::size_t k = 0; k < s.k; ++k) {
      for (std::size_t c = 0; c < s.n; ++c) hand.b.at(k, c) = bf16::from(p.b.at(k, c));
    }
    hand.c_old = p.c_old;
    const std::vector<float> cast = p.run<matmult>(o);
    CHECK(same_bits(cast, hand.run(o)));
    p.check<matmult>(cast, o);
    CHECK(same_bits(cast, p.run<matmult>(o, /*prepacked=*/true)));  // pack_b<matmult> rounds B
    // none: float stays float. The bf16-rounded result is far outside the fp32 bound of the float
    // operands, so the bound tells the two apart.
    const std::vector<float> plain = p.run(o);
    p.check(plain, o);
    CHECK(p.evaluate(cast, o).failures > 0);

    // all: as matmult, the float bias rounded to bf16, and the float C receiving the result
    // rounded to bf16 (nearest even, whatever options.cast says).
    problem<float, float, float, float> q(s, 111);
    problem<bf16, bf16, float, float> by_hand(s, 111);
    for (std::size_t r = 0; r < s.m; ++r) {
      for (std::size_t k = 0; k < s.k; ++k) by_hand.a.at(r, k) = bf16::from(q.a.at(r, k));
    }
    for (std::size_t k = 0; k < s.k; ++k) {
      for (std::size_t c = 0; c < s.n; ++c) by_hand.b.at(k, c) = bf16::from(q.b.at(k, c));
    }
    for (std::size_t c = 0; c < s.n; ++c) {
      by_hand.bias[c] = bf16::from(q.bias[c]).to_float();
      by_hand.bias_values[c] = by_hand.bias[c];
    }
    by_hand.c_old = q.c_old;
    matmul_options stochastic = o;
    stochastic.activation = act::silu;
    stochastic.cast = {.round = rounding::stochastic, .seed = 9};
    const std::vector<float> rounded = q.run<all>(stochastic);
    q.check<all>(rounded, stochastic);
    matmul_options fp32 = stochastic;
    fp32.cast = {};
    const std::vector<float> unrounded = by_hand.run(fp32);
    std::vector<float> expected;
    for (const float v : unrounded) expected.push_back(bf16::from(v).to_float());
    CHECK(same_bits(rounded, expected));
  }
}

// ---- the fp32 path, bit for bit ----

// A float C is exactly the documented computation (the top of this file) applied to acc, the fp32
// accumulator: on the fp32 compute path acc is the fma chain in k order from 0; on emulated bf16
// pairs, the chain over pairs of k, the odd k first (vdpbf16ps's order, K padded with a zero). The
// instruction itself is not modelled (it flushes subnormals), but alpha = 1, beta = 0 and no bias
// give acc itself, and the epilogue of the other calls is checked on it. Returns whether the
// chain was checked too.
template <class A, class B, class Bias = void>
bool check_fma_chain(const shape& s, const matmul_options& o, std::uint64_t seed) {
  const bool fp32 = tensor::choose_path<A, B>().kind == tensor::compute::fp32;
  const bool modelled = fp32 || tensor::bf16_pairs_emulated();
  problem<A, B, float, Bias> p(s, seed);
  const std::vector<float> got = p.run(o);
  std::vector<float> acc(s.m * s.n);
  if (modelled) {
    const std::size_t step = fp32 ? 1 : 2;
    for (std::size_t r = 0; r < s.m; ++r) {
      for (std::size_t c = 0; c < s.n; ++c) {
        // Term k of the sum (zero past K).
        const auto a = [&](std::size_t k) {
          return k < s.k ? static_cast<float>(p.a.values[r * s.k + k]) : 0.0f;
        };
        const auto b = [&](std::size_t k) {
          return k < s.k ? static_cast<float>(p.b.values[k * s.n + c]) : 0.0f;
        };
        float chain = 0.0f;
        for (std::size_t k = 0; k < s.k; k += step) {
          if (!fp32) chain = std::fma(a(k + 1), b(k + 1), chain);
          chain = std::fma(a(k), b(k), chain);
        }
        acc[r * s.n + c] = chain;
      }
    }
  } else {  // alpha = 1, beta = 0 and no bias: fma(acc, 1, 0) = acc
    problem<A, B, float> plain(s, seed);
    acc = plain.run(matmul_options{});
  }
  std::size_t mismatches = 0;
  for (std::size_t r = 0; r < s.m; ++r) {
    for (std::size_t c = 0; c < s.n; ++c) {
      const float sum = acc[r * s.n + c];
      const float bias = p.bias_values.empty() ? 0.0f : static_cast<float>(p.bias_values[c]);
      float want = 0.0f;
      if (o.beta != 0.0f) {
        const float t = std::fma(sum, o.alpha, p.c_old[r * s.n + c] * o.beta);
        want = std::fma(t, 1.0f, bias);
      } else {
        want = std::fma(sum, o.alpha, bias);
      }
      const float have = got[r * s.n + c];
      if (std::bit_cast<std::uint32_t>(have) != std::bit_cast<std::uint32_t>(want) &&
          mismatches++ == 0) {
        INFO(p.what(), ", ", describe(o), ": (", r, ", ", c, ") = ", have, ", the model gives ",
             want,
             fp32       ? " (fma chain)"
             : modelled ? " (pair chain)"
                        : " (acc from the kernel)");
        CHECK(have == want);
      }
    }
  }
  CHECK(mismatches == 0);
  return modelled;
}

TEST_CASE("matmul: float C is the fma chain in k order (fp32 path) and the documented epilogue") {
  const shape shapes[] = {{17, 257, 33, true, false, 1},
                          {200, 300, 300, false, true, 0},
                          {1, 300, 257, false, false, 2},
                          {16, 129, 100, true, true, 0}};
  std::size_t ran = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    const shape& s = shapes[i];
    // Every problem with beta = 0 on two shapes and beta != 0 on the other two.
    matmul_options o, other;
    o.alpha = 0.75f;
    o.beta = i % 2 == 0 ? 0.0f : -0.5f;
    other.alpha = -1.5f;
    other.beta = i % 2 == 0 ? 2.0f : 0.0f;
#if !defined(TILEKERN_TEST_FEWER_FORMATS)
    ran += check_fma_chain<fp16, fp8_e5m2>(s, o, 120) ? 1 : 0;  // always the fp32 path
#else
    ran += check_fma_chain<fp16, fp8_e4m3>(s, o, 120) ? 1 : 0;
#endif
    ran += check_fma_chain<float, float>(s, other, 121) ? 1 : 0;
    ran += check_fma_chain<bf16, bf16, float>(s, o, 122) ? 1 : 0;  // fp32 unless pairs are asked
    ran += check_fma_chain<bf16, fp8_e4m3, bf16>(s, other, 123) ? 1 : 0;
    ran += check_fma_chain<bf16, float, float>(s, o, 124) ? 1 : 0;
  }
  MESSAGE("fma chain checked for ", ran, " of 20 problems (the epilogue for all) on ",
          std::string(name(active_isa())),
          std::string(!tensor::bf16_pairs_available() ? ""
                      : tensor::bf16_pairs_emulated() ? " (bf16 and fp8 on emulated bf16 pairs)"
                                                      : " (bf16 and fp8 pairs run on vdpbf16ps)"));
  CHECK(ran >= 12);
}

// Few rows of A with B in bf16 or fp8 decode B's codes in registers on avx2 and above
// (compute::fp32_decoding): the fp32 path's fma chain, bit for bit, for every such format, odd and
// even K, up to decoding_rows rows and one more (which widens B's panels instead).
TEST_CASE("matmul: small M decodes B in registers, with the fp32 path's bits") {
  const auto path_name = [](std::size_t m) -> std::string {
    const tensor::path where = tensor::choose_path<bf16, bf16>();
    return tensor::detail::decodes<bf16>(where, m) ? "decoding" : "widening";
  };
  MESSAGE("M = 1: ", path_name(1), ", M = ", tensor::detail::decoding_rows + 1, ": ",
          path_name(tensor::detail::decoding_rows + 1), " on ", std::string(name(active_isa())));
  std::size_t ran = 0, problems = 0;
  const auto sweep = [&]<class A, class B>() {
    for (std::size_t m = 1; m <= tensor::detail::decoding_rows + 1; ++m) {
      const shape s{m, m % 2 == 0 ? std::size_t{256} : std::size_t{257}, 100, m == 2, m == 3, m};
      matmul_options o;
      o.alpha = m % 2 == 0 ? 1.0f : -0.5f;
      o.beta = m == 3 ? 0.25f : 0.0f;
      ran += check_fma_chain<A, B>(s, o, 130 + m) ? 1 : 0;
      ++problems;
    }
  };
  sweep.template operator()<float, bf16>();
  sweep.template operator()<bf16, fp8_e4m3>();
#if !defined(TILEKERN_TEST_FEWER_FORMATS)
  sweep.template operator()<bf16, bf16>();
  sweep.template operator()<fp16, fp8_e4m3fn>();
  sweep.template operator()<float, fp8_e5m2>();
  sweep.template operator()<bf16, fp8_e3m4>();
#endif
  MESSAGE("fma chain checked for ", ran, " of ", problems, " problems");
  CHECK(ran * 2 >= problems);  // all but on vdpbf16ps, where fp16 and float A still are
  // Inf and NaN codes of B decode as such: they reach their column only.
  check_specials<bf16, fp8_e4m3>(shape{3, 33, 40, false, true, 1});
  check_specials<float, fp8_e3m4>(shape{1, 100, 33, false, false, 0});
  check_specials<bf16, bf16>(shape{4, 64, 70, true, false, 0});
}

// ---- shape errors ----

// call() must throw shape_error with the message `message`; C (sentinels) is left untouched.
template <class Call>
void check_shape_error(Call call, const std::string& message, output<float>& c) {
  std::vector<float> before = c.elements();
  try {
    call();
    FAIL("no shape_error: ", message);
  } catch (const shape_error& error) {
    CHECK(std::string(error.what()) == message);
  }
  CHECK(same_bits(before, c.elements()));
  CHECK(c.gaps_untouched());
}

TEST_CASE("matmul: shape errors name the argument and both sizes; C is untouched") {
  const shape s{3, 5, 4, false, false, 1};
  problem<bf16, bf16, float, float> p(s, 130);
  const view<const bf16> a(p.a.data.data(), 3, 5, 6);
  const view<const bf16> b(p.b.data.data(), 5, 4, 5);
  const view<const float> bias(p.bias.data(), 1, 4);
  output<float> c(3, 4, 2);
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t col = 0; col < 4; ++col) c.at(r, col) = -7.0f;
  }
  const std::string k = "tilekern::matmul: b has 4 rows, expected 5 (the columns of a)";
  check_shape_error([&] { matmul(a, b.block(0, 0, 4, 4), c.v().block(0, 0, 3, 4)); }, k, c);
  check_shape_error([&] { matmul(a, pack_b(b.block(0, 0, 4, 4)), c.v()); }, k, c);
  // op(A) = A^T of a 5 x 3 view is 3 x 5: b must have 5 rows; transposed(b) has 4.
  check_shape_error([&] { matmul(transposed(a.block(0, 0, 3, 3)), b, c.v()); },
                    "tilekern::matmul: b has 5 rows, expected 3 (the columns of a)", c);
  check_shape_error([&] { matmul(a, transposed(b), c.v()); },
                    "tilekern::matmul: b has 4 rows, expected 5 (the columns of a)", c);
  check_shape_error([&] { matmul(a, b, c.v().block(0, 0, 3, 3)); },
                    "tilekern::matmul: c is 3x3, expected 3x4 (rows of a x columns of b)", c);
  check_shape_error([&] { matmul(a, b, c.v().block(0, 0, 2, 4)); },
                    "tilekern::matmul: c is 2x4, expected 3x4 (rows of a x columns of b)", c);
  check_shape_error([&] { matmul(a, b, c.v(), {}, bias.block(0, 0, 1, 3)); },
                    "tilekern::matmul: bias is 1x3, expected 1x4 (one value per column of c)", c);
  check_shape_error([&] { matmul(a, b, c.v(), {}, view<const float>(p.bias.data(), 2, 2)); },
                    "tilekern::matmul: bias is 2x2, expected 1x4 (one value per column of c)", c);
  // and the same call with the right shapes writes C
  matmul(a, b, c.v(), {}, bias);
  CHECK(c.at(0, 0) != -7.0f);
}

}  // namespace
}  // namespace tilekern
