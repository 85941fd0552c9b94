// kernels/attention.hpp against reference/attention.hpp (fp64, on the inputs decoded exactly with
// to_double()), on the ISA path the CTest cap selects (this binary runs once per TILEKERN_ISA).
// Every input and output (o, lse, dq, dk, dv) lives in a guarded buffer whose last element is
// right before an unreadable page; outputs start as NaN, so that an element never written fails.
//
// Covered:
// - forward, q = k = v in float and every test format, o in float and in the same format (nearest
//   even and stochastic); bf16 q with fp8_e4m3 k and v; masks: none, causal (seq_q = seq_k,
//   seq_q < seq_k, seq_q > seq_k: fully masked rows), key_lengths (0, partial, seq_k; with
//   causal), additive bias (float and bf16; broadcast with batch 1, heads 1, both; -inf entries
//   and a fully -inf row), grouped-query attention (4 query heads on 2 and on 1 kv heads), a
//   given scale (also negative); sequence lengths 1, 17, 70, 197 and 1000, head_dim 16, 64, 80,
//   128 and 256; the [batch, seq, heads, dim] layout (strided heads_views), and rows padded to
//   head_dim + 3 (every input and output, lse and bias too) whose gaps hold NaN that must be
//   neither read nor overwritten.
// - the bar: bf16 inputs, fp32 o, max |o - o_ref| <= 1e-2 max |o_ref| against the fp64
//   attention of the unrounded inputs.
// - backward (dq, dk, dv in float and bf16, nearest and stochastic) against
//   reference::attention_backward, with causal, GQA, key_lengths, bias and both strided layouts;
//   fully masked rows contribute nothing.
// - a format output is exactly F::from(the float output of the same call, cast, index) with the
//   index of the element in the whole [batch, heads, seq, dim] tensor, whatever the layout, and
//   the streams cast.stream (o, dq), + 1 (dk), + 2 (dv); stochastic rounding is reproducible and
//   changes with the seed and the stream.
// - threads 1, 2 and 3 give the same bits, forward and backward.
// - special values: a NaN in q makes its row of o and lse NaN and changes no other row's bits;
//   NaN in k, v and bias beyond key_lengths changes nothing (forward and backward); with causal
//   masks, NaN in q, k, v and d_o and inf in v make non-finite exactly the outputs that the fp64
//   reference makes non-finite, the others within their bounds (forward and backward).
// - shape errors throw shape_error with the message of kernels/attention_options.hpp, before
//   anything is written (the outputs keep a sentinel).
//
// The bounds are those at the top of kernels/attention.hpp, computed per row from the fp64 data
// (u = 2^-24, gamma(n) = n u / (1 - n u), n_b = ceil(seq_k / key_block) key blocks):
//   e_s = |scale| gamma(head_dim) sum_d |q_d k_d| + 2 u |s|, E_i = max over the keys row i sees,
//   |o_ic - o_ref| <= (2 E_i + (n_b + 8) u + gamma(seq_k)) sum_j p_ij |v_jc|,
//   |lse_i - lse_ref| <= E_i + (n_b + 8) u + u |lse_ref|,
//   a gradient within 4 (E + (n_b + 8) u + gamma(max(seq_q, seq_k, head_dim))) of the sum of the
//   magnitudes of its terms: sum_i p_ij |do_ic| for dv_jc, |scale| sum_j p_ij (a_ij + A_i) |k_jc|
//   for dq_ic, |scale| sum_i p_ij (a_ij + A_i) |q_ic| for dk_jc (over the query heads of the
//   group; E the largest of the rows in the sum), a_ij = sum_c |do_ic v_jc| the magnitude of
//   dp_ij and A_i = sum_j p_ij a_ij that of D_i.
// A format output must lie between F::from(ref - bound) and F::from(ref + bound) with nearest even
// (half an ulp of F beyond the bound), and between the values of F around [ref - bound, ref +
// bound] with stochastic rounding (one ulp). Fully masked rows must give exactly o = 0, lse = -inf
// and dq = 0; dk and dv of keys no query sees exactly 0.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/elements.hpp"
#include "support/formats.hpp"
#include "support/guarded.hpp"
#include "tilekern/kernels/attention.hpp"
#include "tilekern/reference/attention.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

using test::bits_of;
using test::bracket;
using test::guarded_buffer;
using test::is_float;
using test::name_of;
using test::saturated;
using test::value_of;

constexpr double u = 0x1p-24;
constexpr double inf = std::numeric_limits<double>::infinity();

double gamma(std::size_t n) {
  const double nu = static_cast<double>(n) * u;
  return nu / (1 - nu);
}

template <class T>
bool same_bits(const std::vector<T>& x, const std::vector<T>& y) {
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(),
                                            [](T l, T r) { return bits_of(l) == bits_of(r); });
}

// ---- rounding to a format ----

// Whether `got` is what an fp32 result within `bound` of `want` becomes in T (see the top).
template <class T>
bool agrees(T got, double want, double bound, rounding mode) {
  const double value = value_of(got);
  if constexpr (is_float<T>) {
    return std::abs(value - want) <= bound;
  } else if (mode == rounding::nearest_even) {
    return value >= value_of(T::from(want - bound)) && value <= value_of(T::from(want + bound));
  } else {
    const auto [down, up] = bracket<T>(want - bound, want + bound);
    return value >= down && value <= up;
  }
}

// ---- tensors in guarded buffers ----

enum class layout {
  heads_major,  // [batch, heads, seq, dim], contiguous
  seq_major,    // [batch, seq, heads, dim]: heads_views with strides
  padded,       // [batch, heads, seq, dim + 3]: gaps after each row, holding NaN
};

template <class T>
T nan_of() {
  return std::numeric_limits<T>::quiet_NaN();
}

// batch x heads x rows x cols of T; element i is the i-th of the [batch, heads, rows, cols]
// order, wherever the layout stores it. The last element stored is the last before the guard
// page; the gaps of the padded layout hold NaN, which must stay there and never be read.
template <class T>
struct tensor {
  std::size_t batch, heads, rows, cols;
  layout order;
  std::size_t stride;  // of the rows in the padded layout
  guarded_buffer<T> buffer;
  std::vector<double> raw;  // the values fill() drew, before rounding to T

  tensor(std::size_t batch_, std::size_t heads_, std::size_t rows_, std::size_t cols_,
         layout order_ = layout::heads_major)
      : batch(batch_),
        heads(heads_),
        rows(rows_),
        cols(cols_),
        order(order_),
        stride(order_ == layout::padded ? cols_ + 3 : cols_),
        buffer(size() == 0 ? 0 : (batch_ * heads_ * rows_ - 1) * stride + cols_) {
    fill_with(nan_of<T>());
  }

  std::size_t size() const { return batch * heads * rows * cols; }
  std::size_t offset(std::size_t i) const {
    if (order == layout::heads_major) return i;
    if (order == layout::padded) return i / cols * stride + i % cols;
    const std::size_t c = i % cols, r = i / cols % rows, h = i / (cols * rows) % heads,
                      b = i / (cols * rows * heads);
    return ((b * rows + r) * heads + h) * cols + c;
  }
  T& operator[](std::size_t i) { return buffer[offset(i)]; }
  T& at(std::size_t b, std::size_t h, std::size_t r, std::size_t c) {
    return (*this)[((b * heads + h) * rows + r) * cols + c];
  }
  heads_view<T> v() {
    if (order == layout::seq_major) {
      return {buffer.data(), batch, heads, rows, cols, rows * heads * cols, cols, heads * cols};
    }
    return {buffer.data(), batch, heads, rows, cols, heads * rows * stride, rows * stride, stride};
  }
  heads_view<const T> cv() { return v(); }

  std::vector<T> elements() {
    std::vector<T> out(size());
    for (std::size_t i = 0; i < size(); ++i) out[i] = (*this)[i];
    return out;
  }
  std::vector<double> values() {
    std::vector<double> out(size());
    for (std::size_t i = 0; i < size(); ++i) out[i] = value_of((*this)[i]);
    return out;
  }
  void fill(std::mt19937_64& generator, double sigma) {
    std::normal_distribution<double> normal(0.0, sigma);
    raw.resize(size());
    for (std::size_t i = 0; i < size(); ++i) {
      raw[i] = normal(generator);
      (*this)[i] = saturated<T>(raw[i]);
    }
  }
  // Every stored element, the gaps too.
  void fill_with(T x) {
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = x;
  }
  // Whether the gaps of the padded layout still hold NaN's bits.
  bool gaps_untouched() {
    if (order != layout::padded) return true;
    for (std::size_t i = 0; i < buffer.size(); ++i) {
      if (i % stride >= cols && bits_of(buffer[i]) != bits_of(nan_of<T>())) return false;
    }
    return true;
  }
};

// ---- problems ----

enum class bias_kind { none, full, one_batch, one_head, one };

struct config {
  std::size_t batch = 1, heads = 1, kv_heads = 1, seq_q = 1, seq_k = 1, dim = 64;
  bool causal = false;
  std::vector<std::size_t> key_lengths = {};
  bias_kind bias = bias_kind::none;
  layout order = layout::heads_major;
  std::optional<float> scale = std::nullopt;

  config with_causal() const {
    config c = *this;
    c.causal = true;
    return c;
  }
  config with_key_lengths(std::vector<std::size_t> lengths) const {
    config c = *this;
    c.key_lengths = std::move(lengths);
    return c;
  }
  config with_bias(bias_kind kind) const {
    config c = *this;
    c.bias = kind;
    return c;
  }
  config with_layout(layout order_) const {
    config c = *this;
    c.order = order_;
    return c;
  }
  config with_scale(float scale_) const {
    config c = *this;
    c.scale = scale_;
    return c;
  }
};

config shape(std::size_t batch, std::size_t heads, std::size_t kv_heads, std::size_t seq_q,
             std::size_t seq_k, std::size_t dim) {
  config c;
  c.batch = batch;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.seq_q = seq_q;
  c.seq_k = seq_k;
  c.dim = dim;
  return c;
}

std::string describe(const config& c) {
  std::string s = std::to_string(c.batch) + "x" + std::to_string(c.heads) + " (kv " +
                  std::to_string(c.kv_heads) + ") seq " + std::to_string(c.seq_q) + "/" +
                  std::to_string(c.seq_k) + " dim " + std::to_string(c.dim);
  if (c.causal) s += ", causal";
  if (!c.key_lengths.empty()) {
    s += ", key_lengths";
    for (const std::size_t l : c.key_lengths) s += " " + std::to_string(l);
  }
  constexpr const char* biases[] = {"", ", bias", ", bias batch 1", ", bias heads 1", ", bias 1x1"};
  s += biases[static_cast<int>(c.bias)];
  if (c.order == layout::seq_major) s += ", [batch, seq, heads, dim]";
  if (c.order == layout::padded) s += ", rows padded";
  if (c.scale) s += ", scale " + std::to_string(*c.scale);
  return s + ", " + std::string(name(active_isa()));
}

template <class Q, class K = Q, class V = K, class B = float>
struct problem {
  config c;
  tensor<Q> q;
  tensor<K> k;
  tensor<V> v;
  tensor<B> bias;

  // q ~ N(0, 4), k and v ~ N(0, 1): scores of standard deviation about 2 with the default scale.
  // The bias ~ N(0, 1) with one element in 8 -inf, and row seq_q / 2 of its first matrix all -inf.
  problem(const config& c_, std::uint64_t seed)
      : c(c_),
        q(c.batch, c.heads, c.seq_q, c.dim, c.order),
        k(c.batch, c.kv_heads, c.seq_k, c.dim, c.order),
        v(c.batch, c.kv_heads, c.seq_k, c.dim, c.order),
        bias(c.bias == bias_kind::none                                    ? 0
             : c.bias == bias_kind::full || c.bias == bias_kind::one_head ? c.batch
                                                                          : 1,
             c.bias == bias_kind::full || c.bias == bias_kind::one_batch ? c.heads : 1, c.seq_q,
             c.seq_k, c.order) {
    std::mt19937_64 generator(seed);
    q.fill(generator, 2.0);
    k.fill(generator, 1.0);
    v.fill(generator, 1.0);
    bias.fill(generator, 1.0);
    std::bernoulli_distribution masked(0.125);
    for (std::size_t i = 0; i < bias.size(); ++i) {
      if (masked(generator) || i / c.seq_k == c.seq_q / 2) bias[i] = saturated<B>(-inf);
    }
  }
  problem(const problem&) = delete;
  problem& operator=(const problem&) = delete;

  attention_options options(int threads = 0) const {
    return {.scale = c.scale, .causal = c.causal, .key_lengths = c.key_lengths, .threads = threads};
  }
  std::string what() const {
    return name_of<Q>() +
           (std::is_same_v<Q, K> && std::is_same_v<K, V>
                ? std::string()
                : "/" + name_of<K>() + "/" + name_of<V>()) +
           (c.bias == bias_kind::none ? std::string() : " (" + name_of<B>() + " bias)") + ", " +
           describe(c);
  }
  heads_view<const double> bias_of(const std::vector<double>& values) const {
    if (c.bias == bias_kind::none) return {};
    return {values.data(), bias.batch, bias.heads, c.seq_q, c.seq_k};
  }
};

// ---- forward ----

template <class O>
struct forward_result {
  std::vector<O> o;
  std::vector<float> lse;
};

// Runs the kernel into fresh guarded outputs (NaN until written) in p's layout.
template <class O, class Q, class K, class V, class B>
forward_result<O> run_forward(problem<Q, K, V, B>& p, const cast_options& cast = {},
                              int threads = 0) {
  tensor<O> o(p.c.batch, p.c.heads, p.c.seq_q, p.c.dim, p.c.order);
  tensor<float> lse(p.c.batch, p.c.heads, p.c.seq_q, 1, p.c.order);
  if (p.c.bias == bias_kind::none) {
    attention(p.q.cv(), p.k.cv(), p.v.cv(), o.v(), lse.v(), p.options(threads), cast);
  } else {
    attention(p.q.cv(), p.k.cv(), p.v.cv(), o.v(), lse.v(), p.options(threads), cast, p.bias.cv());
  }
  CHECK((o.gaps_untouched() && lse.gaps_untouched()));
  return {o.elements(), lse.elements()};
}

// One query's scores in fp64 (the keys it sees) and E, the bound on the kernel's score errors.
struct row_scores {
  std::vector<double> s;  // the scores of the keys [0, end)
  double e = 0;           // E: the largest e_s of the finite scores
};

template <class Q, class K, class V, class B>
struct fp64_problem {
  const config& c;
  attention_options options;
  std::vector<double> q, k, v, bias;
  double scale;
  std::size_t blocks;  // n_b

  explicit fp64_problem(problem<Q, K, V, B>& p)
      : c(p.c),
        options(p.options()),
        q(p.q.values()),
        k(p.k.values()),
        v(p.v.values()),
        bias(p.bias.values()),
        scale(detail::attention_scale(options, p.c.dim)),
        blocks(std::max<std::size_t>(
            1, (p.c.seq_k + detail::flash::key_block - 1) / detail::flash::key_block)) {
    bias_view = p.bias_of(bias);
  }
  heads_view<const double> bias_view;

  heads_view<const double> qv() const { return {q.data(), c.batch, c.heads, c.seq_q, c.dim}; }
  heads_view<const double> kv() const { return {k.data(), c.batch, c.kv_heads, c.seq_k, c.dim}; }
  heads_view<const double> vv() const { return {v.data(), c.batch, c.kv_heads, c.seq_k, c.dim}; }
  std::size_t group(std::size_t h) const { return h / (c.heads / c.kv_heads); }
  std::size_t row(std::size_t b, std::size_t h, std::size_t i) const {
    return (b * c.heads + h) * c.seq_q + i;
  }

  row_scores scores(std::size_t b, std::size_t h, std::size_t i) const {
    const std::size_t end = detail::visible_keys(options, b, i, c.seq_q, c.seq_k);
    const std::size_t g = group(h);
    row_scores r;
    r.s.resize(end);
    for (std::size_t j = 0; j < end; ++j) {
      double dot = 0, magnitude = 0;
      for (std::size_t d = 0; d < c.dim; ++d) {
        const double x =
            q[row(b, h, i) * c.dim + d] * k[((b * c.kv_heads + g) * c.seq_k + j) * c.dim + d];
        dot += x;
        magnitude += std::abs(x);
      }
      double s = scale * dot;
      if (!bias_view.empty()) {
        s += bias_view(bias_view.batch() == 1 ? 0 : b, bias_view.heads() == 1 ? 0 : h, i, j);
      }
      r.s[j] = s;
      if (std::isfinite(s)) {
        r.e = std::max(r.e, std::abs(scale) * gamma(c.dim) * magnitude + 2 * u * std::abs(s));
      }
    }
    return r;
  }
};

struct expected_forward {
  std::vector<double> o, lse, o_bound, lse_bound;
};

template <class Q, class K, class V, class B>
expected_forward expect_forward(problem<Q, K, V, B>& p) {
  const config& c = p.c;
  const fp64_problem<Q, K, V, B> x(p);
  expected_forward e;
  e.o.resize(c.batch * c.heads * c.seq_q * c.dim);
  e.lse.resize(c.batch * c.heads * c.seq_q);
  e.o_bound.assign(e.o.size(), 0.0);
  e.lse_bound.assign(e.lse.size(), 0.0);
  reference::attention(
      x.qv(), x.kv(), x.vv(), heads_view<double>(e.o.data(), c.batch, c.heads, c.seq_q, c.dim),
      heads_view<double>(e.lse.data(), c.batch, c.heads, c.seq_q, 1), x.options, x.bias_view);
  const double fixed = static_cast<double>(x.blocks + 8) * u;
  std::vector<double> w(c.dim);
  for (std::size_t b = 0; b < c.batch; ++b) {
    for (std::size_t h = 0; h < c.heads; ++h) {
      const std::size_t g = x.group(h);
      for (std::size_t i = 0; i < c.seq_q; ++i) {
        const std::size_t row = x.row(b, h, i);
        const double lse = e.lse[row];
        if (lse == -inf) continue;
        const row_scores r = x.scores(b, h, i);
        std::fill(w.begin(), w.end(), 0.0);
        for (std::size_t j = 0; j < r.s.size(); ++j) {
          const double pij = std::exp(r.s[j] - lse);
          for (std::size_t d = 0; d < c.dim; ++d) {
            w[d] += pij * std::abs(x.v[((b * c.kv_heads + g) * c.seq_k + j) * c.dim + d]);
          }
        }
        for (std::size_t d = 0; d < c.dim; ++d) {
          e.o_bound[row * c.dim + d] = (2 * r.e + fixed + gamma(c.seq_k)) * w[d];
        }
        e.lse_bound[row] = r.e + fixed + u * std::abs(lse);
      }
    }
  }
  return e;
}

// The largest error / bound of the float outputs checked so far.
struct worst_ratios {
  double o = 0, lse = 0, gradients = 0;
};
worst_ratios& worst() {
  static worst_ratios w;
  return w;
}

// The bounds are proofs, and loose: measured errors stay below 2% of o's, 6% of lse's and 1.5% of
// the gradients' (kernels/attention.hpp). A kernel that lost a few bits would still be within
// them; these measured margins catch it.
void check_tightness() {
  CHECK(worst().o <= 0.1);
  CHECK(worst().lse <= 0.25);
  CHECK(worst().gradients <= 0.1);
}

// Checks a forward result against the reference and the bounds (see the top of this file).
template <class O>
void check_forward(const forward_result<O>& got, const expected_forward& want, std::size_t dim,
                   rounding mode, const std::string& what) {
  std::size_t failures = 0, masked = 0;
  std::string first;
  const auto fail = [&](const std::string& message) {
    if (failures++ == 0) first = message;
  };
  for (std::size_t row = 0; row < want.lse.size(); ++row) {
    const double lse = got.lse[row];
    if (want.lse[row] == -inf) {  // sees no key: exactly o = 0 and lse = -inf
      ++masked;
      if (lse != -inf) fail("row " + std::to_string(row) + ": lse " + std::to_string(lse));
      for (std::size_t d = 0; d < dim; ++d) {
        if (value_of(got.o[row * dim + d]) != 0.0) {
          fail("masked row " + std::to_string(row) + ": o " +
               std::to_string(value_of(got.o[row * dim + d])));
        }
      }
      continue;
    }
    const double lse_error = std::abs(lse - want.lse[row]);
    if (!(lse_error <= want.lse_bound[row])) {
      fail("row " + std::to_string(row) + ": lse " + std::to_string(lse) + ", reference " +
           std::to_string(want.lse[row]) + ", bound " + std::to_string(want.lse_bound[row]));
    } else {
      worst().lse = std::max(worst().lse, lse_error / want.lse_bound[row]);
    }
    for (std::size_t d = 0; d < dim; ++d) {
      const std::size_t i = row * dim + d;
      if (!agrees(got.o[i], want.o[i], want.o_bound[i], mode)) {
        fail("row " + std::to_string(row) + " column " + std::to_string(d) + ": o " +
             std::to_string(value_of(got.o[i])) + ", reference " + std::to_string(want.o[i]) +
             ", bound " + std::to_string(want.o_bound[i]));
      } else if (is_float<O> && want.o_bound[i] > 0) {
        worst().o = std::max(worst().o, std::abs(value_of(got.o[i]) - want.o[i]) / want.o_bound[i]);
      }
    }
  }
  INFO(what, ": ", failures, " failures, the first ", first);
  CHECK(failures == 0);
}

// A format output is the float output of the same call rounded with `cast`, element index i of
// the whole tensor.
template <class O>
void check_rounded_from(const std::vector<O>& got, const std::vector<float>& fp32,
                        const cast_options& cast, const std::string& what) {
  REQUIRE(got.size() == fp32.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const O want = O::from(fp32[i], cast, i);
    if (bits_of(got[i]) != bits_of(want)) {
      INFO(what, ": element ", i, " has code ", got[i].code(), ", the float result ", fp32[i],
           " rounds to ", want.code());
      CHECK(bits_of(got[i]) == bits_of(want));
      return;
    }
  }
}

// Checks o in float, and in O with nearest even and with stochastic rounding (also against the
// float o of the same inputs, rounded).
template <class O, class Q, class K, class V, class B>
void forward_case(const config& c, std::uint64_t seed) {
  problem<Q, K, V, B> p(c, seed);
  const expected_forward want = expect_forward(p);
  const forward_result<float> fp32 = run_forward<float>(p);
  check_forward(fp32, want, c.dim, rounding::nearest_even, p.what() + " -> float");
  if constexpr (!is_float<O>) {
    const std::string what = p.what() + " -> " + name_of<O>();
    for (const cast_options cast :
         {cast_options{}, cast_options{.round = rounding::stochastic, .seed = seed, .stream = 2}}) {
      const forward_result<O> got = run_forward<O>(p, cast);
      check_forward(got, want, c.dim, cast.round, what);
      check_rounded_from(got.o, fp32.o, cast, what);
      CHECK(same_bits(got.lse, fp32.lse));
    }
  }
}

template <class F>
void forward_for_format(std::uint64_t seed) {
  forward_case<F, F, F, F, float>(shape(2, 2, 2, 17, 197, 64), seed);
  forward_case<F, F, F, F, float>(shape(1, 2, 1, 70, 70, 80)
                                      .with_causal()
                                      .with_bias(bias_kind::full)
                                      .with_layout(layout::padded),
                                  seed + 1);
}

TEST_CASE("attention forward: q = k = v in every format, o in float and in the format") {
  const auto start = std::chrono::steady_clock::now();
  MESSAGE("isa: ", describe_isa());
  forward_for_format<float>(1);
  std::uint64_t seed = 10;
  test::for_each_test_format([&]<class F>() {
    forward_for_format<F>(seed);
    seed += 10;
  });
  MESSAGE("float o: error at most ", worst().o, " of the bound; lse ", worst().lse, "; ",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s");
  check_tightness();
}

TEST_CASE("attention forward: bf16 queries with fp8_e4m3 keys and values") {
  const config configs[] = {
      shape(2, 2, 2, 17, 197, 64),
      shape(1, 4, 2, 197, 197, 128).with_causal(),
      shape(3, 2, 1, 17, 197, 80).with_key_lengths({197, 0, 50}),
  };
  std::uint64_t seed = 100;
  for (const config& c : configs) forward_case<bf16, bf16, fp8_e4m3, fp8_e4m3, float>(c, seed++);
}

TEST_CASE("attention forward: masks, bias, grouped-query attention, scale") {
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t seed = 200;
  const auto run = [&](const config& c) { forward_case<bf16, bf16, bf16, bf16, float>(c, seed++); };
  // causal: seq_q = seq_k, seq_q < seq_k, seq_q > seq_k (rows 0 to 179 see no key)
  run(shape(1, 2, 2, 197, 197, 64).with_causal());
  run(shape(2, 1, 1, 17, 197, 64).with_causal());
  run(shape(1, 2, 2, 197, 17, 64).with_causal());
  // key_lengths: seq_k, 0 (the whole batch masked) and partial; with causal
  run(shape(3, 2, 2, 17, 197, 64).with_key_lengths({197, 0, 130}));
  run(shape(2, 1, 1, 197, 197, 64).with_causal().with_key_lengths({100, 0}));
  run(shape(2, 1, 1, 70, 197, 16).with_causal().with_key_lengths({197, 1}));
  // additive bias, float: full, broadcast over batch, over heads, over both; with causal
  for (const bias_kind kind :
       {bias_kind::full, bias_kind::one_batch, bias_kind::one_head, bias_kind::one}) {
    run(shape(2, 2, 2, 17, 197, 64).with_bias(kind));
  }
  run(shape(2, 2, 1, 70, 150, 64)
          .with_causal()
          .with_key_lengths({150, 90})
          .with_bias(bias_kind::one_batch));
  // a bf16 bias
  forward_case<bf16, bf16, bf16, bf16, bf16>(shape(2, 2, 2, 17, 197, 64).with_bias(bias_kind::full),
                                             seed++);
  // grouped-query attention: 4 query heads on 2 kv heads and on 1 (multi-query)
  run(shape(2, 4, 2, 17, 197, 64));
  run(shape(1, 4, 1, 70, 197, 64).with_causal());
  run(shape(2, 4, 1, 17, 33, 80).with_key_lengths({0, 20}).with_bias(bias_kind::one_head));
  // several query tiles and key blocks, every mask at once
  run(shape(1, 2, 1, 300, 600, 64)
          .with_causal()
          .with_key_lengths({530})
          .with_bias(bias_kind::full));
  // a given scale, positive and negative
  run(shape(1, 2, 2, 17, 197, 64).with_scale(0.3f));
  run(shape(1, 2, 1, 17, 197, 64).with_causal().with_scale(-0.5f));
  MESSAGE("float o: error at most ", worst().o, " of the bound; lse ", worst().lse, "; ",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s");
  check_tightness();
}

TEST_CASE("attention forward: sequence lengths, head dims, [batch, seq, heads, dim] layout") {
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t seed = 300;
  const auto run = [&](const config& c) { forward_case<bf16, bf16, bf16, bf16, float>(c, seed++); };
  for (const std::size_t dim : {16, 64, 80, 128, 256}) {
    run(shape(1, 2, 2, 17, 197, dim));
    run(shape(1, 1, 1, 197, 197, dim).with_causal());
  }
  run(shape(2, 2, 2, 1, 1, 64));
  run(shape(1, 2, 2, 1, 17, 64).with_causal());
  run(shape(1, 2, 2, 17, 1, 64));
  run(shape(1, 4, 1, 1, 1000, 128));
  run(shape(1, 1, 1, 1000, 1000, 64).with_causal());
  // [batch, seq, heads, dim]
  run(shape(2, 3, 3, 17, 197, 64).with_layout(layout::seq_major));
  run(shape(2, 4, 2, 70, 70, 80)
          .with_causal()
          .with_key_lengths({70, 33})
          .with_bias(bias_kind::one_batch)
          .with_layout(layout::seq_major));
  // rows padded (NaN in the gaps of every input and output)
  run(shape(2, 4, 2, 70, 150, 80)
          .with_causal()
          .with_key_lengths({150, 60})
          .with_bias(bias_kind::full)
          .with_layout(layout::padded));
  forward_case<bf16, bf16, fp8_e4m3, fp8_e4m3, float>(
      shape(1, 2, 1, 17, 197, 128).with_layout(layout::seq_major), seed++);
  MESSAGE("float o: error at most ", worst().o, " of the bound; lse ", worst().lse, "; ",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s");
  check_tightness();
}

// The bar: bf16 inputs, fp32 output, max |o - o_ref| <= 1e-2 max |o_ref|, o_ref the fp64
// attention of the inputs before their rounding to bf16.
TEST_CASE("attention forward: bf16 inputs, fp32 o within 1e-2 of max |o| of the unrounded data") {
  const config configs[] = {
      shape(2, 2, 2, 197, 197, 64),
      shape(1, 4, 2, 197, 197, 128).with_causal(),
      shape(2, 2, 1, 17, 1000, 80).with_key_lengths({1000, 500}),
  };
  std::uint64_t seed = 400;
  double largest = 0;
  for (const config& c : configs) {
    problem<bf16> p(c, seed++);
    const forward_result<float> got = run_forward<float>(p);
    std::vector<double> o(got.o.size()), lse(got.lse.size());
    reference::attention(
        heads_view<const double>(p.q.raw.data(), c.batch, c.heads, c.seq_q, c.dim),
        heads_view<const double>(p.k.raw.data(), c.batch, c.kv_heads, c.seq_k, c.dim),
        heads_view<const double>(p.v.raw.data(), c.batch, c.kv_heads, c.seq_k, c.dim),
        heads_view<double>(o.data(), c.batch, c.heads, c.seq_q, c.dim),
        heads_view<double>(lse.data(), c.batch, c.heads, c.seq_q, 1), p.options());
    double error = 0, magnitude = 0;
    for (std::size_t i = 0; i < o.size(); ++i) {
      error = std::max(error, std::abs(got.o[i] - o[i]));
      magnitude = std::max(magnitude, std::abs(o[i]));
    }
    INFO(p.what(), ": max |o - o_ref| ", error, ", max |o_ref| ", magnitude);
    CHECK(error <= 1e-2 * magnitude);
    largest = std::max(largest, error / magnitude);
  }
  MESSAGE("bf16 inputs: max |o - o_ref| / max |o_ref| = ", largest, " (bar 1e-2)");
}

TEST_CASE("attention forward: stochastic o is reproducible and depends on the seed and stream") {
  problem<bf16> p(shape(2, 2, 1, 70, 150, 64).with_causal().with_layout(layout::seq_major), 500);
  const cast_options cast{.round = rounding::stochastic, .seed = 42, .stream = 1};
  const forward_result<bf16> first = run_forward<bf16>(p, cast);
  CHECK(same_bits(first.o, run_forward<bf16>(p, cast).o));
  cast_options reseeded = cast, restreamed = cast;
  reseeded.seed = 43;
  restreamed.stream = 2;
  CHECK_FALSE(same_bits(first.o, run_forward<bf16>(p, reseeded).o));
  CHECK_FALSE(same_bits(first.o, run_forward<bf16>(p, restreamed).o));
  check_rounded_from(first.o, run_forward<float>(p).o, cast, p.what());
  check_forward(first, expect_forward(p), p.c.dim, rounding::stochastic, p.what());
}

// ---- backward ----

template <class T>
struct gradients {
  std::vector<T> dq, dk, dv;
};

// The forward's float o and lse, and d_o ~ N(0, 1) in G, for a backward.
template <class G, class Q, class K, class V, class B>
struct backward_problem {
  problem<Q, K, V, B>& p;
  tensor<float> o, lse;
  tensor<G> d_o;

  backward_problem(problem<Q, K, V, B>& p_, std::uint64_t seed)
      : p(p_),
        o(p.c.batch, p.c.heads, p.c.seq_q, p.c.dim, p.c.order),
        lse(p.c.batch, p.c.heads, p.c.seq_q, 1, p.c.order),
        d_o(p.c.batch, p.c.heads, p.c.seq_q, p.c.dim, p.c.order) {
    std::mt19937_64 generator(seed);
    d_o.fill(generator, 1.0);
    forward();
  }
  void forward() {
    if (p.c.bias == bias_kind::none) {
      attention(p.q.cv(), p.k.cv(), p.v.cv(), o.v(), lse.v(), p.options());
    } else {
      attention(p.q.cv(), p.k.cv(), p.v.cv(), o.v(), lse.v(), p.options(), {}, p.bias.cv());
    }
  }
  std::string what() const { return p.what() + ", d_o " + name_of<G>(); }

  template <class D>
  gradients<D> run(const cast_options& cast = {}, int threads = 0) {
    const config& c = p.c;
    tensor<D> dq(c.batch, c.heads, c.seq_q, c.dim, c.order);
    tensor<D> dk(c.batch, c.kv_heads, c.seq_k, c.dim, c.order);
    tensor<D> dv(c.batch, c.kv_heads, c.seq_k, c.dim, c.order);
    if (c.bias == bias_kind::none) {
      attention_backward(p.q.cv(), p.k.cv(), p.v.cv(), o.cv(), d_o.cv(), lse.cv(), dq.v(), dk.v(),
                         dv.v(), p.options(threads), cast);
    } else {
      attention_backward(p.q.cv(), p.k.cv(), p.v.cv(), o.cv(), d_o.cv(), lse.cv(), dq.v(), dk.v(),
                         dv.v(), p.options(threads), cast, p.bias.cv());
    }
    CHECK((dq.gaps_untouched() && dk.gaps_untouched() && dv.gaps_untouched()));
    return {dq.elements(), dk.elements(), dv.elements()};
  }
};

struct expected_backward {
  gradients<double> value, bound;
};

template <class G, class Q, class K, class V, class B>
expected_backward expect_backward(backward_problem<G, Q, K, V, B>& bp) {
  const config& c = bp.p.c;
  const fp64_problem<Q, K, V, B> x(bp.p);
  const std::vector<double> d_o = bp.d_o.values();
  const std::size_t q_size = c.batch * c.heads * c.seq_q * c.dim;
  const std::size_t k_size = c.batch * c.kv_heads * c.seq_k * c.dim;
  expected_backward e;
  e.value = {std::vector<double>(q_size), std::vector<double>(k_size), std::vector<double>(k_size)};
  e.bound = {std::vector<double>(q_size, 0.0), std::vector<double>(k_size, 0.0),
             std::vector<double>(k_size, 0.0)};
  const heads_view<const double> d_o_view(d_o.data(), c.batch, c.heads, c.seq_q, c.dim);
  reference::attention_backward(
      x.qv(), x.kv(), x.vv(), d_o_view,
      heads_view<double>(e.value.dq.data(), c.batch, c.heads, c.seq_q, c.dim),
      heads_view<double>(e.value.dk.data(), c.batch, c.kv_heads, c.seq_k, c.dim),
      heads_view<double>(e.value.dv.data(), c.batch, c.kv_heads, c.seq_k, c.dim), x.options,
      x.bias_view);
  std::vector<double> o(q_size), lse(c.batch * c.heads * c.seq_q);
  reference::attention(
      x.qv(), x.kv(), x.vv(), heads_view<double>(o.data(), c.batch, c.heads, c.seq_q, c.dim),
      heads_view<double>(lse.data(), c.batch, c.heads, c.seq_q, 1), x.options, x.bias_view);

  const double fixed =
      static_cast<double>(x.blocks + 8) * u + gamma(std::max({c.seq_q, c.seq_k, c.dim}));
  const double scale = std::abs(x.scale);
  std::vector<double> key_factor(c.batch * c.kv_heads * c.seq_k, 0.0);  // E + fixed, largest
  for (std::size_t b = 0; b < c.batch; ++b) {
    for (std::size_t h = 0; h < c.heads; ++h) {
      const std::size_t g = x.group(h);
      for (std::size_t i = 0; i < c.seq_q; ++i) {
        const std::size_t row = x.row(b, h, i);
        if (lse[row] == -inf) continue;
        const row_scores r = x.scores(b, h, i);
        const double factor = r.e + fixed;
        const double* const d_o_i = &d_o[row * c.dim];
        // a_j = sum_d |do_d v_jd|, the magnitude of dp_ij, and A = sum_j p_ij a_j, that of D_i
        // (o's own error included).
        std::vector<double> p(r.s.size()), a(r.s.size());
        double a_row = 0;
        for (std::size_t j = 0; j < r.s.size(); ++j) {
          const std::size_t key = (b * c.kv_heads + g) * c.seq_k + j;
          p[j] = std::exp(r.s[j] - lse[row]);
          for (std::size_t d = 0; d < c.dim; ++d) {
            a[j] += std::abs(d_o_i[d] * x.v[key * c.dim + d]);
          }
          a_row += p[j] * a[j];
        }
        for (std::size_t j = 0; j < r.s.size(); ++j) {
          const std::size_t key = (b * c.kv_heads + g) * c.seq_k + j;
          const double pij = p[j];
          const double ds = scale * pij * (a[j] + a_row);
          key_factor[key] = std::max(key_factor[key], factor);
          for (std::size_t d = 0; d < c.dim; ++d) {
            e.bound.dq[row * c.dim + d] += 4 * factor * ds * std::abs(x.k[key * c.dim + d]);
            e.bound.dk[key * c.dim + d] += ds * std::abs(x.q[row * c.dim + d]);
            e.bound.dv[key * c.dim + d] += pij * std::abs(d_o_i[d]);
          }
        }
      }
    }
  }
  for (std::size_t i = 0; i < k_size; ++i) {
    e.bound.dk[i] *= 4 * key_factor[i / c.dim];
    e.bound.dv[i] *= 4 * key_factor[i / c.dim];
  }
  return e;
}

template <class D>
void check_gradient(const char* name, const std::vector<D>& got, const std::vector<double>& want,
                    const std::vector<double>& bound, rounding mode, const std::string& what) {
  std::size_t failures = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!agrees(got[i], want[i], bound[i], mode)) {
      if (failures++ == 0) {
        first = "element " + std::to_string(i) + ": " + std::to_string(value_of(got[i])) +
                ", reference " + std::to_string(want[i]) + ", bound " + std::to_string(bound[i]);
      }
    } else if (is_float<D> && bound[i] > 0) {
      worst().gradients =
          std::max(worst().gradients, std::abs(value_of(got[i]) - want[i]) / bound[i]);
    }
  }
  INFO(what, ": ", name, " has ", failures, " elements beyond the bound, the first ", first);
  CHECK(failures == 0);
}

template <class D>
void check_backward(const gradients<D>& got, const expected_backward& want, rounding mode,
                    const std::string& what) {
  check_gradient("dq", got.dq, want.value.dq, want.bound.dq, mode, what);
  check_gradient("dk", got.dk, want.value.dk, want.bound.dk, mode, what);
  check_gradient("dv", got.dv, want.value.dv, want.bound.dv, mode, what);
}

// Gradients in float, then in bf16 with nearest even and stochastic rounding (each also the float
// gradients rounded: streams cast.stream, + 1, + 2).
template <class G, class Q, class K = Q, class V = K>
void backward_case(const config& c, std::uint64_t seed) {
  problem<Q, K, V> p(c, seed);
  backward_problem<G, Q, K, V, float> bp(p, seed + 1000);
  const expected_backward want = expect_backward(bp);
  const gradients<float> fp32 = bp.template run<float>();
  check_backward(fp32, want, rounding::nearest_even, bp.what() + " -> float");
  const std::string what = bp.what() + " -> bf16";
  for (const cast_options cast :
       {cast_options{}, cast_options{.round = rounding::stochastic, .seed = seed, .stream = 5}}) {
    const gradients<bf16> got = bp.template run<bf16>(cast);
    check_backward(got, want, cast.round, what);
    cast_options next = cast;
    check_rounded_from(got.dq, fp32.dq, next, what + ", dq");
    next.stream = cast.stream + 1;
    check_rounded_from(got.dk, fp32.dk, next, what + ", dk");
    next.stream = cast.stream + 2;
    check_rounded_from(got.dv, fp32.dv, next, what + ", dv");
  }
}

TEST_CASE("attention backward against the fp64 reference") {
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t seed = 600;
  const auto run = [&](const config& c) { backward_case<bf16, bf16>(c, seed++); };
  run(shape(1, 2, 2, 17, 197, 64));
  run(shape(1, 2, 2, 197, 197, 64).with_causal());
  run(shape(1, 2, 1, 70, 33, 80).with_causal());  // rows 0 to 36 see no key
  run(shape(2, 4, 2, 70, 150, 64));
  run(shape(1, 4, 1, 150, 150, 128).with_causal());
  // several query tiles and key blocks (kernels/attention.hpp: query_tile, key_block)
  run(shape(1, 2, 1, 300, 600, 64).with_causal().with_key_lengths({560}));
  run(shape(3, 2, 1, 33, 150, 80).with_key_lengths({150, 0, 77}));
  run(shape(2, 2, 2, 17, 197, 16)
          .with_causal()
          .with_key_lengths({197, 1})
          .with_layout(layout::seq_major));
  run(shape(2, 4, 2, 33, 150, 64)
          .with_causal()
          .with_key_lengths({150, 100})
          .with_layout(layout::padded));
  run(shape(2, 2, 2, 1, 1, 256));
  backward_case<float, float>(shape(1, 2, 2, 70, 197, 64).with_causal(), seed++);
  backward_case<bf16, bf16, fp8_e4m3, fp8_e4m3>(
      shape(2, 4, 2, 33, 70, 64).with_key_lengths({70, 40}), seed++);
  // with a bias (the backward's bias overload)
  run(shape(2, 2, 1, 33, 150, 64).with_causal().with_bias(bias_kind::one_batch));
  MESSAGE("float gradients: error at most ", worst().gradients, " of the bound; ",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s");
  check_tightness();
}

TEST_CASE("attention backward: fully masked rows contribute nothing") {
  // Rows 0 to 36 of batch 0 see no key (causal, seq_q > seq_k), nor does batch 1 (key length 0):
  // their dq is 0, and other d_o in them changes no bit of dk and dv.
  problem<bf16> p(shape(2, 2, 1, 70, 33, 64).with_causal().with_key_lengths({33, 0}), 700);
  backward_problem<bf16, bf16, bf16, bf16, float> bp(p, 701);
  const gradients<float> before = bp.template run<float>();
  check_backward(before, expect_backward(bp), rounding::nearest_even, bp.what());
  std::mt19937_64 generator(702);
  std::normal_distribution<double> normal(0.0, 3.0);
  for (std::size_t b = 0; b < 2; ++b) {
    for (std::size_t h = 0; h < 2; ++h) {
      for (std::size_t i = 0; i < (b == 0 ? 37u : 70u); ++i) {
        for (std::size_t d = 0; d < 64; ++d) bp.d_o.at(b, h, i, d) = bf16::from(normal(generator));
      }
    }
  }
  const gradients<float> after = bp.template run<float>();
  CHECK(same_bits(before.dk, after.dk));
  CHECK(same_bits(before.dv, after.dv));
  CHECK(same_bits(before.dq, after.dq));
  for (std::size_t i = 0; i < after.dq.size(); ++i) {
    const std::size_t row = i / 64, b = row / (2 * 70), query = row % 70;
    if (b == 1 || query < 37) {
      INFO("dq element ", i);
      CHECK(after.dq[i] == 0.0f);
      if (after.dq[i] != 0.0f) break;
    }
  }
  for (std::size_t i = 0; i < after.dk.size() / 2; ++i) {  // batch 1 of dk and dv
    CHECK(after.dk[after.dk.size() / 2 + i] == 0.0f);
    CHECK(after.dv[after.dv.size() / 2 + i] == 0.0f);
    if (after.dk[after.dk.size() / 2 + i] != 0.0f || after.dv[after.dv.size() / 2 + i] != 0.0f) {
      break;
    }
  }
}

// ---- threads ----

TEST_CASE("attention: threads 1, 2 and 3 give the same bits, forward and backward") {
  for (const config& c :
       {shape(2, 4, 2, 197, 197, 64).with_causal(), shape(3, 2, 1, 70, 150, 80)
                                                        .with_key_lengths({150, 0, 77})
                                                        .with_bias(bias_kind::full)
                                                        .with_layout(layout::seq_major)}) {
    problem<bf16> p(c, 800);
    backward_problem<bf16, bf16, bf16, bf16, float> bp(p, 801);
    const cast_options stochastic{.round = rounding::stochastic, .seed = 9};
    const forward_result<float> o1 = run_forward<float>(p, {}, 1);
    const forward_result<bf16> r1 = run_forward<bf16>(p, stochastic, 1);
    const gradients<float> g1 = bp.template run<float>({}, 1);
    const gradients<bf16> s1 = bp.template run<bf16>(stochastic, 1);
    for (const int threads : {2, 3}) {
      INFO(p.what(), ", threads ", threads);
      const forward_result<float> o = run_forward<float>(p, {}, threads);
      CHECK(same_bits(o1.o, o.o));
      CHECK(same_bits(o1.lse, o.lse));
      CHECK(same_bits(r1.o, run_forward<bf16>(p, stochastic, threads).o));
      const gradients<float> g = bp.template run<float>({}, threads);
      CHECK(same_bits(g1.dq, g.dq));
      CHECK(same_bits(g1.dk, g.dk));
      CHECK(same_bits(g1.dv, g.dv));
      const gradients<bf16> s = bp.template run<bf16>(stochastic, threads);
      CHECK(same_bits(s1.dq, s.dq));
      CHECK(same_bits(s1.dk, s.dk));
      CHECK(same_bits(s1.dv, s.dv));
    }
  }
}

// ---- special values ----

TEST_CASE("attention: a NaN in q row i makes o row i NaN, and only it") {
  problem<bf16> p(shape(2, 2, 1, 70, 150, 64), 900);
  const forward_result<float> before = run_forward<float>(p);
  p.q.at(1, 1, 5, 3) = std::numeric_limits<bf16>::quiet_NaN();
  const forward_result<float> after = run_forward<float>(p);
  const std::size_t nan_row = (1 * 2 + 1) * 70 + 5;
  std::size_t wrong = 0;
  for (std::size_t row = 0; row < after.lse.size(); ++row) {
    bool ok = row == nan_row ? std::isnan(after.lse[row])
                             : bits_of(after.lse[row]) == bits_of(before.lse[row]);
    for (std::size_t d = 0; d < 64; ++d) {
      const std::size_t i = row * 64 + d;
      ok = ok &&
           (row == nan_row ? std::isnan(after.o[i]) : bits_of(after.o[i]) == bits_of(before.o[i]));
    }
    if (!ok && wrong++ == 0) {
      INFO("row ", row, " (NaN in row ", nan_row, "): lse ", after.lse[row], ", o[0] ",
           after.o[row * 64]);
      CHECK(ok);
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("attention: NaN in k, v and bias beyond key_lengths changes nothing") {
  problem<bf16> p(
      shape(2, 2, 1, 33, 150, 64).with_key_lengths({40, 150}).with_bias(bias_kind::full), 910);
  backward_problem<bf16, bf16, bf16, bf16, float> bp(p, 911);
  const forward_result<float> before = run_forward<float>(p);
  const gradients<float> gradients_before = bp.template run<float>();
  const bf16 nan = std::numeric_limits<bf16>::quiet_NaN();
  p.k.at(0, 0, 40, 0) = nan;
  p.k.at(0, 0, 100, 3) = nan;
  p.k.at(0, 0, 149, 63) = nan;
  p.v.at(0, 0, 41, 7) = nan;
  p.v.at(0, 0, 140, 0) = nan;
  p.bias.at(0, 1, 7, 120) = std::numeric_limits<float>::quiet_NaN();
  p.bias.at(0, 0, 32, 40) = std::numeric_limits<float>::quiet_NaN();
  const forward_result<float> after = run_forward<float>(p);
  CHECK(same_bits(before.o, after.o));
  CHECK(same_bits(before.lse, after.lse));
  bp.forward();  // the same o and lse
  const gradients<float> gradients_after = bp.template run<float>();
  CHECK(same_bits(gradients_before.dq, gradients_after.dq));
  CHECK(same_bits(gradients_before.dk, gradients_after.dk));
  CHECK(same_bits(gradients_before.dv, gradients_after.dv));
}

// The elements of `got` that are finite where `after` (the fp64 reference on the inputs holding
// NaN and inf) is not, or the reverse, or finite and beyond `bound` of `before` (the reference
// without them: the exact value of an element that does not depend on them is the same).
template <class T>
std::size_t misplaced(const std::vector<T>& got, const std::vector<double>& after,
                      const std::vector<double>& before, const std::vector<double>& bound) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool finite = std::isfinite(value_of(got[i]));
    if (finite != std::isfinite(after[i]) ||
        (finite && !agrees(got[i], before[i], bound[i], rounding::nearest_even))) {
      ++wrong;
    }
  }
  return wrong;
}

std::size_t non_finite(const std::vector<double>& x) {
  return static_cast<std::size_t>(
      std::count_if(x.begin(), x.end(), [](double e) { return !std::isfinite(e); }));
}

TEST_CASE("attention: with causal masks, NaN and inf reach only what depends on them") {
  // Three query tiles and two key blocks per head; in the diagonal blocks the first rows do not
  // see some of the keys that the tile multiplies, so the kernel must not let P's zeros meet
  // them. One kind of special value per head, each kv head its own: a row near the top leaves
  // most of dk and dv finite; a key near the bottom, most rows of o and dq.
  problem<bf16> p(shape(2, 2, 2, 300, 300, 64).with_causal(), 920);
  backward_problem<bf16, bf16, bf16, bf16, float> bp(p, 921);
  const expected_forward before = expect_forward(p);
  const expected_backward gradients_before = expect_backward(bp);
  const bf16 nan = std::numeric_limits<bf16>::quiet_NaN();
  p.q.at(0, 0, 20, 0) = nan;     // row 20; backward: dk and dv of keys 0-20
  bp.d_o.at(0, 0, 30, 7) = nan;  // backward: dq row 30, dk of keys 0-30, dv(j, 7) of keys 0-30
  p.v.at(0, 1, 100, 5) = nan;    // o(i, 5) of rows 100 on; rows 0-99 share its tile and block
  p.k.at(1, 0, 270, 3) = nan;    // rows 270 on; rows 256-269 share its tile and block
  p.v.at(1, 1, 200, 9) = std::numeric_limits<bf16>::infinity();  // o(i, 9) of rows 200 on

  // Some of each output finite, some not, and non-finite exactly where the reference is.
  const auto mixed = [](const std::vector<double>& x) {
    return non_finite(x) > 0 && non_finite(x) < x.size();
  };
  const expected_forward after = expect_forward(p);
  const forward_result<float> got = run_forward<float>(p);
  CHECK(mixed(after.o));
  CHECK(mixed(after.lse));
  CHECK(misplaced(got.o, after.o, before.o, before.o_bound) == 0);
  CHECK(misplaced(got.lse, after.lse, before.lse, before.lse_bound) == 0);

  bp.forward();
  const expected_backward gradients_after = expect_backward(bp);
  const gradients<float> g = bp.template run<float>();
  CHECK(mixed(gradients_after.value.dq));
  CHECK(mixed(gradients_after.value.dk));
  CHECK(mixed(gradients_after.value.dv));
  CHECK(misplaced(g.dq, gradients_after.value.dq, gradients_before.value.dq,
                  gradients_before.bound.dq) == 0);
  CHECK(misplaced(g.dk, gradients_after.value.dk, gradients_before.value.dk,
                  gradients_before.bound.dk) == 0);
  CHECK(misplaced(g.dv, gradients_after.value.dv, gradients_before.value.dv,
                  gradients_before.bound.dv) == 0);
}

// ---- shape errors ----

// call() must throw shape_error with `message` and leave every output (filled with 7) untouched.
template <class Call>
void check_shape_error(Call call, const std::string& message,
                       std::vector<guarded_buffer<float>*> outputs) {
  for (guarded_buffer<float>* out : outputs) {
    for (std::size_t i = 0; i < out->size(); ++i) (*out)[i] = 7.0f;
  }
  try {
    call();
    FAIL("no shape_error: ", message);
  } catch (const shape_error& error) {
    CHECK(std::string(error.what()) == message);
  }
  for (guarded_buffer<float>* out : outputs) {
    std::size_t touched = 0;
    for (std::size_t i = 0; i < out->size(); ++i) touched += (*out)[i] != 7.0f ? 1 : 0;
    INFO(message);
    CHECK(touched == 0);
  }
}

TEST_CASE("attention: shape errors name the argument and both sizes, and write nothing") {
  // batch 2, heads 2 (or 3), seq_q 5, seq_k 7, head_dim 8
  guarded_buffer<bf16> in(3 * 3 * 7 * 8);
  guarded_buffer<float> o(2 * 3 * 5 * 8), lse(2 * 3 * 6), bias(3 * 2 * 5 * 7);
  guarded_buffer<float> dq(2 * 3 * 5 * 8), dk(2 * 2 * 7 * 8), dv(2 * 2 * 7 * 8);
  const auto input = [&](std::size_t b, std::size_t h, std::size_t r, std::size_t c) {
    return heads_view<const bf16>(in.data(), b, h, r, c);
  };
  const auto output = [](guarded_buffer<float>& x, std::size_t b, std::size_t h, std::size_t r,
                         std::size_t c) { return heads_view<float>(x.data(), b, h, r, c); };
  const auto bias_view = [&](std::size_t b, std::size_t h, std::size_t r, std::size_t c) {
    return heads_view<const float>(bias.data(), b, h, r, c);
  };
  const auto q = input(2, 2, 5, 8), k = input(2, 2, 7, 8), v = k;
  const auto o_view = output(o, 2, 2, 5, 8), lse_view = output(lse, 2, 2, 5, 1);
  const std::vector<guarded_buffer<float>*> forward_outputs = {&o, &lse};
  const std::string f = "tilekern::attention: ";

  check_shape_error([&] { attention(q, input(2, 2, 7, 4), input(2, 2, 7, 4), o_view, lse_view); },
                    f + "k is 2x2x7x4, expected 2x2x7x8 (q's batch and head_dim)", forward_outputs);
  check_shape_error(
      [&] { attention(input(2, 3, 5, 8), k, v, output(o, 2, 3, 5, 8), output(lse, 2, 3, 5, 1)); },
      f + "k is 2x2x7x8, expected 2x2x7x8 (k's heads must divide q's 3 heads)", forward_outputs);
  check_shape_error([&] { attention(q, k, v, o_view, output(lse, 2, 2, 4, 1)); },
                    f + "lse is 2x2x4x1, expected 2x2x5x1 (one value per query)", forward_outputs);
  check_shape_error([&] { attention(q, k, v, o_view, output(lse, 2, 2, 5, 2)); },
                    f + "lse is 2x2x5x2, expected 2x2x5x1 (one value per query)", forward_outputs);
  check_shape_error([&] { attention(q, k, v, o_view, lse_view, {}, {}, bias_view(2, 2, 5, 6)); },
                    f + "bias is 2x2x5x6, expected 2x2x5x7 (batch and heads may be 1)",
                    forward_outputs);
  check_shape_error([&] { attention(q, k, v, o_view, lse_view, {}, {}, bias_view(3, 1, 5, 7)); },
                    f + "bias is 3x1x5x7, expected 2x2x5x7 (batch and heads may be 1)",
                    forward_outputs);
  const std::vector<std::size_t> three = {7, 7, 7}, one = {7};
  check_shape_error(
      [&] { attention(q, k, v, o_view, lse_view, {.scale = std::nullopt, .key_lengths = three}); },
      f + "key_lengths is 3 values, expected 2 (one per batch)", forward_outputs);
  check_shape_error([&] { attention(q, k, v, output(o, 2, 2, 5, 7), lse_view); },
                    f + "o is 2x2x5x7, expected 2x2x5x8 (the shape of q)", forward_outputs);

  const std::string g = "tilekern::attention_backward: ";
  const std::vector<guarded_buffer<float>*> gradients = {&dq, &dk, &dv};
  const heads_view<const float> o_in = o_view, lse_in = lse_view;
  const auto dq_view = output(dq, 2, 2, 5, 8), dk_view = output(dk, 2, 2, 7, 8),
             dv_view = output(dv, 2, 2, 7, 8);
  check_shape_error(
      [&] {
        attention_backward(q, input(2, 2, 7, 4), input(2, 2, 7, 4), o_in, q, lse_in, dq_view,
                           output(dk, 2, 2, 7, 4), output(dv, 2, 2, 7, 4));
      },
      g + "k is 2x2x7x4, expected 2x2x7x8 (q's batch and head_dim)", gradients);
  check_shape_error(
      [&] {
        attention_backward(q, k, v, o_in, q, lse_in, dq_view, output(dk, 2, 2, 6, 8), dv_view);
      },
      g + "dk is 2x2x6x8, expected 2x2x7x8 (the shape of k)", gradients);
  check_shape_error(
      [&] {
        attention_backward(q, k, v, o_in, q, heads_view<const float>{}, dq_view, dk_view, dv_view);
      },
      g + "lse is empty, expected 2x2x5x1 (the forward's lse)", gradients);
  check_shape_error(
      [&] {
        attention_backward(q, k, v, o_in, q, lse_in, dq_view, dk_view, dv_view,
                           {.scale = std::nullopt, .key_lengths = one});
      },
      g + "key_lengths is 1 values, expected 2 (one per batch)", gradients);
  check_shape_error(
      [&] {
        attention_backward(q, k, v, o_in, input(2, 2, 4, 8), lse_in, dq_view, dk_view, dv_view);
      },
      g + "d_o is 2x2x4x8, expected 2x2x5x8 (the shape of q)", gradients);
  // and the same calls with the right shapes write their outputs
  attention(q, k, v, o_view, lse_view);
  CHECK(o[0] != 7.0f);
  attention_backward(q, k, v, o_in, q, lse_in, dq_view, dk_view, dv_view);
  CHECK(dk[0] != 7.0f);
}

}  // namespace
}  // namespace tilekern
