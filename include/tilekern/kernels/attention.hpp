#pragma once
// Scaled dot-product attention, fused (flash attention): the S x S score matrix never exists; a
// loop over tiles of queries and blocks of keys, written in engine operations. And its backward.
//
//   attention(q, k, v, o, lse, options, cast [, bias])
//   attention_backward(q, k, v, o, d_o, lse, dq, dk, dv, options, cast [, bias])
//
// What is computed, the shapes, the masks and grouped-query attention are in
// kernels/attention_options.hpp; reference/attention.hpp is the same in plain fp64. q, k, v, o,
// d_o and the gradients are heads_views (tile/view.hpp) of float or any tilekern format, mixed
// (bf16 queries with fp8 keys and values, say); lse is float.
//
// Forward, for each query tile Q_i (query_tile rows of one head) and the key blocks K_j, V_j
// (key_block keys) that any of its rows sees:
//   S = scale Q_i K_j^T (+ bias), -inf where masked     tensor::matmul_ABt, vector::map,
//                                                       vector::affine_select (causal)
//   m' = max(m, row max S)                              vector::row_max
//   P = exp(S - m'), rowsum P                           scalar::activation_sum
//   c = exp(m - m'),  l = c l + rowsum P,  m = m'       (one value per row)
//   O_acc = c O_acc + P V_j                             vector::mul, tensor::matmul
// then o = O_acc / l (rounded with `cast`) and lse = m + log l. The rows' statistics and O_acc
// are fp32 (the NeuronCore keeps them in SBUF and PSUM). Keys past the last one that a tile's
// last row sees are never read: with key_lengths, k, v and bias beyond the length are not read.
// Threads take (batch, head, query tile) tasks; each task's arithmetic is the same whatever
// thread runs it, so results are identical for any thread count.
//
// Backward (FlashAttention-2), for each (batch, kv head): with D_i = rowsum(dO_i * O_i), for
// each key block j, each query head of the group and each query tile i:
//   P = exp(S - lse_i)                                   scores recomputed as above
//   dV_j += P^T dO_i,  dP = dO_i V_j^T,  dS = P (dP - D_i)
//   dK_j += dS^T Q_i,  dQ_i += dS K_j                     all fp32 accumulators
// then dq = scale dQ, dk = scale dK, dv = dV, rounded with `cast` (streams cast.stream,
// cast.stream + 1 and cast.stream + 2). A task owns its kv head's dK, dV and its query heads' dQ,
// so results are identical for any thread count.
//
// Numerics. Let u = 2^-24. A score is a dot product of head_dim decoded terms (each product exact
// unless an operand is float), accumulated in fp32, then scaled (and biased): its absolute error
// is at most
//   e_s = |scale| gamma(head_dim) sum_k |q_k k_k| + 2 u |s|,    gamma(n) = n u / (1 - n u).
// Every weight p_ij = exp(s_ij - lse_i) then has relative error at most 2 E + (n_b + 6) u, E the
// largest e_s of the row, n_b the number of key blocks (one rescaling each), and the fp32 sum of
// P V adds gamma(seq_k) of sum_j p_ij |v_j|. So, with w_i = sum_j p_ij |v_j| <= max_j |v_j|,
//   |o_i - o_i,exact| <= (2 E + (n_b + 8) u + gamma(seq_k)) w_i
// before o's own rounding (half an ulp of its format with nearest even). lse has absolute error at
// most E + (n_b + 8) u + u |lse|.
// The backward's gradients are sums of such terms; each is within 4 (E + (n_b + 8) u +
// gamma(max(seq_q, seq_k, head_dim))) of the sum of the magnitudes of its terms: for dv_j,
// sum_i p_ij |do_i|; for dq_i and dk_j, |scale| sum p_ij (a_ij + A_i) |k_j| or |q_i|, where
// a_ij = sum_c |do_ic v_jc| bounds dp_ij's rounding and A_i = sum_j p_ij a_ij that of D_i (o's
// error included). tests/kernels/attention_test.cpp checks these bounds against fp64; measured,
// the errors stay below 2% of o's bound, 6% of lse's and 1.5% of the gradients' (the test also
// checks those margins, at 10%, 25% and 10%).
// Special values: a query that sees no key, or whose scores are all -inf, gets o = 0 and lse =
// -inf, and contributes nothing to the gradients. A NaN or +inf score makes its row NaN, as in
// softmax (kernels/softmax.hpp). A NaN reaches only what depends on it in exact arithmetic:
// a NaN in q makes its row NaN; in k, the rows of the queries that see that key; in v, their
// column of those rows. Where causality hides part of a key block from some rows of a tile and
// an operand of that tile and block holds a NaN or inf, the block is taken row by row, each row
// over the keys it sees, since P's zeros would not cancel it (checked per block, on the blocks
// that cross the diagonal only). Keys that no row of a tile sees are never read.
//
// Shapes that do not fit throw shape_error naming the kernel and the argument, before anything
// is written.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "tilekern/engine/scalar.hpp"
#include "tilekern/engine/tensor.hpp"
#include "tilekern/engine/vector.hpp"
#include "tilekern/error.hpp"
#include "tilekern/kernels/attention_options.hpp"
#include "tilekern/kernels/matmul.hpp"  // detail::default_threads
#include "tilekern/tile/view.hpp"
#include "tilekern/types/rounding.hpp"

namespace tilekern {

// The kernel's pieces, in their own namespace: their names are short.
namespace detail::flash {

namespace hn = hwy::HWY_NAMESPACE;

inline constexpr std::size_t query_tile = 128;  // rows of q per task
inline constexpr std::size_t key_block = 256;   // keys per step of the online softmax
inline constexpr float minus_infinity = -std::numeric_limits<float>::infinity();

// n floats as an n x 1 view: one value per row, for the engines' column operands.
inline view<float> per_row(float* data, std::size_t n) {
  return {data, n, 1, 1};
}

// max(a, b), NaN if either is.
inline float nan_max(float a, float b) {
  return a != a || b != b ? a + b : std::max(a, b);
}

inline void clear(view<float> x) {
  for (std::size_t r = 0; r < x.rows(); ++r) std::fill(x.row(r).begin(), x.row(r).end(), 0.0f);
}

// Matrix (b, h) of a tensor that may broadcast batch and heads (bias).
template <class T>
view<T> broadcast_head(const heads_view<T>& x, std::size_t b, std::size_t h) {
  return x(x.batch() == 1 ? 0 : b, x.heads() == 1 ? 0 : h);
}

// Where one (batch, head, query tile) is: the tile's rows [first, first + rows) of head (b, h),
// which reads kv head g.
struct attention_tile {
  std::size_t b, h, g, first, rows;
};

// s (rows x keys, the raw products q k^T of keys [j0, j0 + keys)) becomes the scores:
// scale s (+ bias), and -inf where causality hides the key.
template <class B>
void make_scores(view<float> s, const attention_tile& t, std::size_t j0, float scale,
                 const heads_view<B>& bias, const attention_options& options, std::size_t seq_q,
                 std::size_t seq_k) {
  if (bias.empty()) {
    vector::mul(s, s, scale);
  } else {
    const auto b = broadcast_head(bias, t.b, t.h).block(t.first, j0, s.rows(), s.cols());
    vector::map(
        s, [](auto, auto x, auto add, auto by) { return hn::MulAdd(x, by, add); }, s, b, scale);
  }
  // Query first + r sees key j0 + c iff c - r <= first + seq_k - seq_q - j0.
  const auto diagonal = static_cast<float>(t.first + seq_k) - static_cast<float>(seq_q + j0);
  if (options.causal && static_cast<float>(s.cols() - 1) > diagonal) {
    vector::affine_select(s, s, affine{.row = 1.0f, .col = -1.0f, .offset = diagonal},
                          minus_infinity);
  }
}

// The keys [0, end) that some row of the tile sees (the last row sees the most).
inline std::size_t tile_keys(const attention_options& options, const attention_tile& t,
                             std::size_t seq_q, std::size_t seq_k) {
  return visible_keys(options, t.b, t.first + t.rows - 1, seq_q, seq_k);
}

// The keys of block [j0, j0 + keys) that row r of the tile sees: the first `result` of them.
inline std::size_t row_keys(const attention_options& options, const attention_tile& t,
                            std::size_t r, std::size_t j0, std::size_t keys, std::size_t seq_q,
                            std::size_t seq_k) {
  const std::size_t end = visible_keys(options, t.b, t.first + r, seq_q, seq_k);
  return std::min(keys, end > j0 ? end - j0 : 0);
}

// Whether no element of x (at most key_block rows) is NaN or infinite: then every row's sum of
// x * 0 is 0, else NaN. `sums` holds key_block floats.
template <class T>
bool finite(const view<T>& x, std::vector<float>& sums) {
  vector::row_sum_of(
      per_row(sums.data(), x.rows()), [](auto d, auto e) { return e * hn::Zero(d); }, x);
  return std::all_of(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(x.rows()),
                     [](float sum) { return sum == 0.0f; });
}

// Whether no element of x is NaN or +inf (-inf, a row that sees nothing, is fine).
inline bool below_infinity(const float* x, std::size_t n) {
  return std::all_of(x, x + n, [](float e) { return e < std::numeric_limits<float>::infinity(); });
}

// Per-thread work memory of the forward.
struct forward_scratch {
  explicit forward_scratch(std::size_t dim)
      : scores(query_tile * key_block),
        acc(query_tile * dim),
        rows(5 * query_tile),
        sums(key_block) {}
  std::vector<float> scores, acc, rows, sums;
};

// One query tile of the forward (see the top of this header).
template <class Q, class K, class V, class O, class B>
void attention_forward_tile(const attention_tile& t, const heads_view<Q>& q, const heads_view<K>& k,
                            const heads_view<V>& v, const heads_view<O>& o,
                            const heads_view<float>& lse, const heads_view<B>& bias,
                            const attention_options& options, const cast_options& cast,
                            forward_scratch& scratch) {
  const std::size_t n = t.rows, dim = q.cols(), seq_q = q.rows(), seq_k = k.rows();
  const float scale = attention_scale(options, dim);
  const auto q_tile = q(t.b, t.h).block(t.first, 0, n, dim);
  const view<float> acc(scratch.acc.data(), n, dim);
  float* const m = scratch.rows.data();  // running max (-inf until a key is seen)
  float* const l = m + query_tile;       // running sum of exp(s - m)
  float* const block_max = l + query_tile;
  float* const minus_m = block_max + query_tile;  // -m', or 0 while m' is -inf
  float* const sums = minus_m + query_tile;
  clear(acc);
  std::fill_n(m, n, minus_infinity);
  std::fill_n(l, n, 0.0f);

  const std::size_t end = tile_keys(options, t, seq_q, seq_k);
  for (std::size_t j0 = 0; j0 < end; j0 += key_block) {
    const std::size_t keys = std::min(key_block, end - j0);
    const view<float> s(scratch.scores.data(), n, keys);
    clear(s);
    tensor::matmul_ABt(s, q_tile, k(t.b, t.g).block(j0, 0, keys, dim));
    make_scores(s, t, j0, scale, bias, options, seq_q, seq_k);

    // block_max becomes m' = max(m, row max s), then the rescaling exp(m - m').
    vector::row_max(per_row(block_max, n), s);
    for (std::size_t r = 0; r < n; ++r) {
      block_max[r] = nan_max(m[r], block_max[r]);
      minus_m[r] = block_max[r] == minus_infinity ? 0.0f : -block_max[r];
    }
    scalar::activation_sum(s, per_row(sums, n), s, act::exp, 1.0f,
                           vector::column(per_row(minus_m, n)));
    for (std::size_t r = 0; r < n; ++r) {
      const float rescale = std::exp(m[r] + minus_m[r]);  // 0 while m is -inf
      l[r] = rescale * l[r] + sums[r];
      m[r] = block_max[r];
      block_max[r] = rescale;
    }
    vector::mul(acc, acc, vector::column(per_row(block_max, n)));
    const auto v_j = v(t.b, t.g).block(j0, 0, keys, dim);
    if (row_keys(options, t, 0, j0, keys, seq_q, seq_k) == keys || finite(v_j, scratch.sums)) {
      tensor::matmul(acc, s, v_j);
    } else {
      // Causality hides some of these keys from the first rows, and v holds a NaN or inf, which
      // P's zeros would not cancel: each row multiplies only the keys it sees.
      for (std::size_t r = 0; r < n; ++r) {
        const std::size_t seen = row_keys(options, t, r, j0, keys, seq_q, seq_k);
        tensor::matmul(acc.block(r, 0, 1, dim), s.block(r, 0, 1, seen), v_j.block(0, 0, seen, dim));
      }
    }
  }

  // o = acc / l (0 for a row that saw nothing), lse = m + log l.
  for (std::size_t r = 0; r < n; ++r) sums[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
  const auto index = ((t.b * q.heads() + t.h) * seq_q + t.first) * dim;
  vector::mul(vector::rounded(o(t.b, t.h).block(t.first, 0, n, dim), cast, index, dim), acc,
              vector::column(per_row(sums, n)));
  if (!lse.empty()) {
    const auto out = lse(t.b, t.h).block(t.first, 0, n, 1);
    for (std::size_t r = 0; r < n; ++r) {
      out(r, 0) = l[r] > 0.0f ? m[r] + std::log(l[r]) : (l[r] == l[r] ? minus_infinity : l[r]);
    }
  }
}

// Per-thread work memory of the backward, for one (batch, kv head) task.
struct backward_scratch {
  backward_scratch(std::size_t dim, std::size_t group, std::size_t seq_q, std::size_t seq_k)
      : scores(query_tile * key_block),
        d_p(query_tile * key_block),
        d_q(group * seq_q * dim),
        d_k(seq_k * dim),
        d_v(seq_k * dim),
        delta(group * seq_q),
        minus_lse(group * seq_q),
        sums(key_block) {}
  std::vector<float> scores, d_p, d_q, d_k, d_v;
  std::vector<float> delta;      // D_i = rowsum(dO_i * O_i) per query of the group
  std::vector<float> minus_lse;  // -lse, or -inf where lse is -inf (exp(s - lse) = 0)
  std::vector<float> sums;       // finite()'s
};

// The gradients of kv head g of batch b and of its query heads (see the top of this header).
template <class Q, class K, class V, class O, class G, class DQ, class DK, class DV, class B>
void attention_backward_group(std::size_t b, std::size_t g, const heads_view<Q>& q,
                              const heads_view<K>& k, const heads_view<V>& v,
                              const heads_view<O>& o, const heads_view<G>& d_o,
                              const heads_view<const float>& lse, const heads_view<DQ>& dq,
                              const heads_view<DK>& dk, const heads_view<DV>& dv,
                              const heads_view<B>& bias, const attention_options& options,
                              const cast_options& cast, backward_scratch& scratch) {
  const std::size_t dim = q.cols(), seq_q = q.rows(), seq_k = k.rows();
  const std::size_t group = q.heads() / k.heads();
  const float scale = attention_scale(options, dim);
  const view<float> d_k(scratch.d_k.data(), seq_k, dim), d_v(scratch.d_v.data(), seq_k, dim);
  const auto d_q = [&](std::size_t e) {  // dQ of query head e of the group
    return view<float>(scratch.d_q.data() + e * seq_q * dim, seq_q, dim);
  };
  clear(d_k);
  clear(d_v);
  for (std::size_t e = 0; e < group; ++e) {
    const std::size_t h = g * group + e;
    clear(d_q(e));
    float* const delta = scratch.delta.data() + e * seq_q;
    vector::row_sum_of(
        per_row(delta, seq_q), [](auto, auto x, auto y) { return x * y; }, d_o(b, h), o(b, h));
    for (std::size_t i = 0; i < seq_q; ++i) {
      const float x = lse(b, h, i, 0);
      scratch.minus_lse[e * seq_q + i] = x == minus_infinity ? minus_infinity : -x;
    }
  }

  // The gradients' share of rows [t.first, t.first + t.rows) of query head e and the first `keys`
  // keys of block j0.
  const auto step = [&](std::size_t e, const attention_tile& t, std::size_t j0, std::size_t keys) {
    const std::size_t n = t.rows, row = e * seq_q + t.first;
    const auto q_i = q(b, t.h).block(t.first, 0, n, dim);
    const auto d_o_i = d_o(b, t.h).block(t.first, 0, n, dim);
    const auto k_j = k(b, g).block(j0, 0, keys, dim);
    const auto v_j = v(b, g).block(j0, 0, keys, dim);
    const view<float> p(scratch.scores.data(), n, keys), d_s(scratch.d_p.data(), n, keys);

    clear(p);
    tensor::matmul_ABt(p, q_i, k_j);
    make_scores(p, t, j0, scale, bias, options, seq_q, seq_k);
    scalar::exp(p, p, 1.0f, vector::column(per_row(scratch.minus_lse.data() + row, n)));
    tensor::matmul_AtB(d_v.block(j0, 0, keys, dim), p, d_o_i);  // dV_j += P^T dO_i

    clear(d_s);
    tensor::matmul_ABt(d_s, d_o_i, v_j);  // dP = dO_i V_j^T
    vector::map(
        d_s, [](auto, auto p, auto dp, auto delta) { return p * (dp - delta); }, p, d_s,
        vector::column(per_row(scratch.delta.data() + row, n)));
    tensor::matmul_AtB(d_k.block(j0, 0, keys, dim), d_s, q_i);   // dK_j += dS^T Q_i
    tensor::matmul(d_q(e).block(t.first, 0, n, dim), d_s, k_j);  // dQ_i += dS K_j
  };
  // Whether every operand of the step is finite (lse may be -inf).
  const auto finite_step = [&](std::size_t e, const attention_tile& t, std::size_t j0,
                               std::size_t keys) {
    const std::size_t row = e * seq_q + t.first;
    return finite(q(b, t.h).block(t.first, 0, t.rows, dim), scratch.sums) &&
           finite(d_o(b, t.h).block(t.first, 0, t.rows, dim), scratch.sums) &&
           finite(k(b, g).block(j0, 0, keys, dim), scratch.sums) &&
           finite(v(b, g).block(j0, 0, keys, dim), scratch.sums) &&
           finite(per_row(scratch.delta.data() + row, t.rows), scratch.sums) &&
           below_infinity(scratch.minus_lse.data() + row, t.rows);
  };

  for (std::size_t j0 = 0; j0 < seq_k; j0 += key_block) {
    for (std::size_t e = 0; e < group; ++e) {
      for (std::size_t first = 0; first < seq_q; first += query_tile) {
        const attention_tile t{b, g * group + e, g, first, std::min(query_tile, seq_q - first)};
        const std::size_t end = tile_keys(options, t, seq_q, seq_k);
        if (end <= j0) continue;
        const std::size_t keys = std::min(key_block, end - j0);
        if (row_keys(options, t, 0, j0, keys, seq_q, seq_k) == keys ||
            finite_step(e, t, j0, keys)) {
          step(e, t, j0, keys);
        } else {
          // Causality hides some of these keys from the first rows, and an operand holds a NaN
          // or inf, which P's zeros would not cancel: each row takes only the keys it sees.
          for (std::size_t r = 0; r < t.rows; ++r) {
            step(e, {b, t.h, g, first + r, 1}, j0, row_keys(options, t, r, j0, keys, seq_q, seq_k));
          }
        }
      }
    }
  }

  const auto index = [&](std::size_t heads, std::size_t h, std::size_t rows) {
    return (b * heads + h) * rows * dim;
  };
  for (std::size_t e = 0; e < group; ++e) {
    const std::size_t h = g * group + e;
    vector::mul(vector::rounded(dq(b, h), cast, index(q.heads(), h, seq_q), dim), d_q(e), scale);
  }
  cast_options next = cast;
  next.stream = cast.stream + 1;
  vector::mul(vector::rounded(dk(b, g), next, index(k.heads(), g, seq_k), dim), d_k, scale);
  next.stream = cast.stream + 2;
  vector::mul(vector::rounded(dv(b, g), next, index(k.heads(), g, seq_k), dim), d_v, 1.0f);
}

// task(i, scratch) for i in [0, count), on up to `threads` threads, each with its own scratch.
template <class MakeScratch, class Task>
void run_tasks(std::size_t count, int threads, const MakeScratch& make_scratch, const Task& task) {
  if (count == 0) return;
  threads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(threads), count));
#if defined(_OPENMP)
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      auto scratch = make_scratch();
#pragma omp for schedule(dynamic, 1)
      for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(count); ++i) {
        task(static_cast<std::size_t>(i), scratch);
      }
    }
    return;
  }
#endif
  auto scratch = make_scratch();
  for (std::size_t i = 0; i < count; ++i) task(i, scratch);
}

template <class Q, class K, class V>
void check_attention_inputs() {
  static_assert(tensor::tensor_element<Q> && tensor::tensor_element<K> && tensor::tensor_element<V>,
                "tilekern::attention: q, k and v must hold float or a tilekern format (bf16, "
                "fp16, tf32, fp8_*, any minifloat<...>)");
}

template <class... Out>
void check_attention_outputs() {
  static_assert((engine_element<Out> && ...),
                "tilekern::attention: outputs must hold float or a tilekern format");
  static_assert((!std::is_const_v<Out> && ...),
                "tilekern::attention: outputs must be writable (heads_view of a non-const type)");
}

// The forward: one task per (batch, head, query tile).
template <class Q, class K, class V, class O, class B>
void forward(const heads_view<Q>& q, const heads_view<K>& k, const heads_view<V>& v,
             const heads_view<O>& o, const heads_view<float>& lse, const heads_view<B>& bias,
             const attention_options& options, const cast_options& cast) {
  const std::size_t heads = q.heads(), seq_q = q.rows();
  const std::size_t group = k.heads() == 0 ? 1 : heads / k.heads();
  const std::size_t tiles = (seq_q + query_tile - 1) / query_tile;
  run_tasks(
      q.batch() * heads * tiles, default_threads(options.threads),
      [&] { return forward_scratch(q.cols()); },
      [&](std::size_t task, forward_scratch& scratch) {
        const std::size_t b = task / (heads * tiles), h = task / tiles % heads;
        const std::size_t first = task % tiles * query_tile;
        const attention_tile t{b, h, h / group, first, std::min(query_tile, seq_q - first)};
        attention_forward_tile(t, q, k, v, o, lse, bias, options, cast, scratch);
      });
}

// The backward: one task per (batch, kv head).
template <class Q, class K, class V, class O, class G, class DQ, class DK, class DV, class B>
void backward(const heads_view<Q>& q, const heads_view<K>& k, const heads_view<V>& v,
              const heads_view<O>& o, const heads_view<G>& d_o, const heads_view<const float>& lse,
              const heads_view<DQ>& dq, const heads_view<DK>& dk, const heads_view<DV>& dv,
              const heads_view<B>& bias, const attention_options& options,
              const cast_options& cast) {
  const std::size_t group = k.heads() == 0 ? 1 : q.heads() / k.heads();
  run_tasks(
      q.batch() * k.heads(), default_threads(options.threads),
      [&] { return backward_scratch(q.cols(), group, q.rows(), k.rows()); },
      [&](std::size_t task, backward_scratch& scratch) {
        attention_backward_group(task / k.heads(), task % k.heads(), q, k, v, o, d_o, lse, dq, dk,
                                 dv, bias, options, cast, scratch);
      });
}

}  // namespace detail::flash

// o = softmax(scale q k^T + bias, masked) v, and lse (see the top of this header and
// kernels/attention_options.hpp). bias: (batch or 1) x (heads or 1) x seq_q x seq_k, float or any
// format. lse may be empty (not written).
template <class Q, class K, class V, class O, class B>
void attention(heads_view<Q> q, heads_view<K> k, heads_view<V> v, heads_view<O> o,
               heads_view<float> lse, const attention_options& options, const cast_options& cast,
               heads_view<B> bias) {
  detail::flash::check_attention_inputs<std::remove_const_t<Q>, std::remove_const_t<K>,
                                        std::remove_const_t<V>>();
  detail::flash::check_attention_outputs<O>();
  static_assert(engine_element<std::remove_const_t<B>>,
                "tilekern::attention: bias must hold float or a tilekern format");
  detail::check_attention("tilekern::attention", q, k, v, o, "o", lse, bias, options);
  detail::flash::forward(q, k, v, o, lse, bias, options, cast);
}

template <class Q, class K, class V, class O>
void attention(heads_view<Q> q, heads_view<K> k, heads_view<V> v, heads_view<O> o,
               heads_view<float> lse = {}, const attention_options& options = {},
               const cast_options& cast = {}) {
  attention(q, k, v, o, lse, options, cast, heads_view<const float>{});
}

// dq, dk, dv: the gradients of a loss L with dL/do = d_o, from the forward's o and lse (see the
// top of this header). dq is q's shape, dk and dv k's; each float or any format.
template <class Q, class K, class V, class O, class G, class DQ, class DK, class DV, class B>
void attention_backward(heads_view<Q> q, heads_view<K> k, heads_view<V> v, heads_view<O> o,
                        heads_view<G> d_o, heads_view<const float> lse, heads_view<DQ> dq,
                        heads_view<DK> dk, heads_view<DV> dv, const attention_options& options,
                        const cast_options& cast, heads_view<B> bias) {
  constexpr const char* function = "tilekern::attention_backward";
  detail::flash::check_attention_inputs<std::remove_const_t<Q>, std::remove_const_t<K>,
                                        std::remove_const_t<V>>();
  static_assert(engine_element<std::remove_const_t<O>> && engine_element<std::remove_const_t<G>> &&
                    engine_element<std::remove_const_t<B>>,
                "tilekern::attention_backward: o, d_o and bias must hold float or a tilekern "
                "format");
  detail::flash::check_attention_outputs<DQ, DK, DV>();
  detail::check_attention(function, q, k, v, o, "o", lse, bias, options);
  detail::check_same_heads(function, "d_o", d_o, q, "the shape of q");
  detail::check_same_heads(function, "dq", dq, q, "the shape of q");
  detail::check_same_heads(function, "dk", dk, k, "the shape of k");
  detail::check_same_heads(function, "dv", dv, k, "the shape of k");
  if (lse.empty() && !q.empty()) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": lse is empty, expected " +
             detail::attention_dims(q.batch(), q.heads(), q.rows(), 1) + " (the forward's lse)";
    });
  }
  detail::flash::backward(q, k, v, o, d_o, lse, dq, dk, dv, bias, options, cast);
}

template <class Q, class K, class V, class O, class G, class DQ, class DK, class DV>
void attention_backward(heads_view<Q> q, heads_view<K> k, heads_view<V> v, heads_view<O> o,
                        heads_view<G> d_o, heads_view<const float> lse, heads_view<DQ> dq,
                        heads_view<DK> dk, heads_view<DV> dv, const attention_options& options = {},
                        const cast_options& cast = {}) {
  attention_backward(q, k, v, o, d_o, lse, dq, dk, dv, options, cast, heads_view<const float>{});
}

}  // namespace tilekern
