#pragma once
// reference::attention: scaled-dot-product attention in plain fp64, materialising each head's
// whole score matrix, what the attention kernel (kernels/attention.hpp) is measured against; and
// its gradients, reference::attention_backward.
//
// Shapes (kernels/attention_options.hpp): q is batch x heads x seq_q x head_dim; k and v are
// batch x kv_heads x seq_k x head_dim, kv_heads dividing heads; o is q's shape; lse is
// batch x heads x seq_q x 1, or empty (not written); bias is (batch or 1) x (heads or 1) x seq_q x
// seq_k, broadcast over a dimension of 1, or empty (none). Query head h reads kv head
// h / (heads / kv_heads) (grouped-query attention; multi-query when kv_heads is 1). For batch b
// and query head h:
//
//   s[i][j] = scale * q_i . k_j + bias[i][j]     for the keys j < end_i that query i sees
//   p[i][j] = exp(s[i][j] - m_i) / sum_j exp(s[i][j] - m_i),   m_i = max_j s[i][j]
//   o_i = sum_j p[i][j] v_j,   lse_i = m_i + log sum_j exp(s[i][j] - m_i) = log sum_j exp(s[i][j])
//
// scale is detail::attention_scale(options, head_dim) (options.scale, default 1 / sqrt(head_dim),
// an fp32 value), converted to double. Query i of batch b sees the keys [0, end_i), end_i =
// detail::visible_keys(options, b, i, seq_q, seq_k): j < key_lengths[b] if key_lengths is given,
// and j <= i + seq_k - seq_q if causal. The other keys are masked: their score is -inf (p = 0),
// and neither their bias nor their rows of k and v are read for that query (padding beyond
// key_lengths may hold anything).
//
// Gradients, for a loss L with dL/do = d_o, recomputed from q, k and v (no o or lse needed):
//
//   dv_j = sum_i p[i][j] d_o_i                   dp[i][j] = d_o_i . v_j
//   ds[i][j] = p[i][j] (dp[i][j] - d_o_i . o_i)  (o recomputed in fp64)
//   dq_i = scale sum_j ds[i][j] k_j              dk_j = scale sum_i ds[i][j] q_i
//
// each sum over the pairs (i, j) where query i sees key j. dk and dv of a kv head add up the
// contributions of all the query heads of its group (in head order). ds is also the gradient
// with respect to the bias (not computed).
//
// Special values (the first two are defined, the rest follow the arithmetic, as in
// reference::softmax):
//   - A query whose scores are all -inf (it sees no key, by key_lengths[b] = 0 or causal with
//     i + seq_k < seq_q, or a -inf bias on every key it sees) gets o = 0, lse = -inf, and zero
//     gradients from its row: p = ds = 0, so dq_i = 0 and nothing is added to dk and dv (for
//     finite d_o and v).
//   - A masked key, or a -inf score in a row that has a finite one, gets p = 0 exactly.
//   - NaN in a score a query sees (from its q, a k it sees, or its bias there) makes that query's
//     p, o and lse NaN, and only that query's; so does a +inf score (inf - inf in s - m). A NaN or
//     inf in v reaches the o of every query that sees that key (0 * inf is NaN, even where p = 0
//     from a -inf bias).
//
// Numerics: every sum is a plain left-to-right fp64 sum (over head_dim for a score, over the keys
// for the softmax and o, ...). A score's absolute error is within about head_dim 2^-53 S, where S
// bounds |scale| sum_d |q_d k_d| + |bias|, and an absolute error e in the scores is a relative
// error of about 2e in p (e in s, e in m); the softmax adds (seq_k + 10) 2^-53 relative
// (reference/softmax.hpp) and o another seq_k 2^-53 relative to sum_j p[i][j] |v_j|; lse is within
// about (head_dim S + seq_k) 2^-53 absolute. For head_dim 128, seq_k 8192 and S = 30: about
// 3e-12, four orders of magnitude below an fp32 ulp. The gradients are within a like multiple of
// (head_dim S + seq_q + seq_k + head_dim) 2^-53 relative to the magnitudes of their sums (for
// instance sum_i |ds[i][j] q_i| for dk_j; ds itself relative to p[i][j] (|dp[i][j]| + |d_o_i .
// o_i|)). Range: finite inputs whose products and scores do not overflow fp64.
//
// Inputs in another format: decode them to double first (to_double() is exact), so that the
// reference sees exactly the values the kernel under test sees. The outputs must not overlap the
// inputs.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "tilekern/error.hpp"
#include "tilekern/kernels/attention_options.hpp"
#include "tilekern/tile/view.hpp"

namespace tilekern::reference {
namespace detail {

// sum of term(i) for i in [0, n), left to right.
template <class Term>
double sum_over(std::size_t n, Term term) {
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) total += term(i);
  return total;
}

// The kv head that query head h reads.
inline std::size_t kv_head(std::size_t h, std::size_t heads, std::size_t kv_heads) {
  return h / (heads / kv_heads);
}

// s becomes softmax(s), in place; returns lse = m + log sum exp(s - m). The operations of
// reference::softmax (detail::softmax_row): a NaN score gives NaN (p and lse), all -inf (or no
// score) gives p = 0 and lse = -inf.
inline double softmax_with_lse(std::span<double> s) {
  constexpr double minus_infinity = -std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  double m = minus_infinity;
  for (const double x : s) {
    if (std::isnan(x)) {
      std::fill(s.begin(), s.end(), nan);
      return nan;
    }
    m = std::max(m, x);
  }
  if (m == minus_infinity) {  // fully masked: zeros, not 0 / 0
    std::fill(s.begin(), s.end(), 0.0);
    return minus_infinity;
  }
  double total = 0.0;
  for (double& x : s) {
    x = std::exp(x - m);
    total += x;
  }
  for (double& x : s) x /= total;
  return m + std::log(total);
}

// The keys [0, end[i]) each query of batch b sees.
inline std::vector<std::size_t> visible_ends(const attention_options& options, std::size_t b,
                                             std::size_t seq_q, std::size_t seq_k) {
  std::vector<std::size_t> end(seq_q);
  for (std::size_t i = 0; i < seq_q; ++i) {
    end[i] = tilekern::detail::visible_keys(options, b, i, seq_q, seq_k);
  }
  return end;
}

// p = softmax(s) of query head (b, h), seq_q x seq_k (0 for masked keys), and each query's lse,
// given the keys each query sees (see the top).
inline void attention_probabilities(heads_view<const double> q, heads_view<const double> k,
                                    heads_view<const double> bias, double scale, std::size_t b,
                                    std::size_t h, std::span<const std::size_t> end, view<double> p,
                                    std::span<double> lse) {
  const view<const double> q_h = q(b, h);
  const view<const double> k_h = k(b, kv_head(h, q.heads(), k.heads()));
  const std::size_t bias_b = bias.batch() == 1 ? 0 : b, bias_h = bias.heads() == 1 ? 0 : h;
  for (std::size_t i = 0; i < p.rows(); ++i) {
    const std::span<double> s = p.row(i).first(end[i]);
    for (std::size_t j = 0; j < s.size(); ++j) {
      s[j] = scale * sum_over(q.cols(), [&](std::size_t d) { return q_h(i, d) * k_h(j, d); });
      if (!bias.empty()) s[j] += bias(bias_b, bias_h, i, j);
    }
    lse[i] = softmax_with_lse(s);
    const std::span<double> hidden = p.row(i).subspan(end[i]);
    std::fill(hidden.begin(), hidden.end(), 0.0);
  }
}

// Throws unless x has the shape of `expected`.
template <class T, class U>
void check_heads_shape(const char* function, const char* argument, const heads_view<T>& x,
                       const heads_view<U>& expected, const char* of_what) {
  if (x.batch() != expected.batch() || x.heads() != expected.heads() ||
      x.rows() != expected.rows() || x.cols() != expected.cols()) {
    throw shape_error(std::string(function) + ": " + argument + " is " +
                      tilekern::detail::attention_dims(x) + ", expected " +
                      tilekern::detail::attention_dims(expected) + " (" + of_what + ")");
  }
}

}  // namespace detail

// o = softmax(scale * q k^T + bias, masked) v for every batch and query head, and lse, when not
// empty, each query's log-sum-exp of its scores (see the top). Throws shape_error, before writing
// anything, if the sizes do not fit.
inline void attention(heads_view<const double> q, heads_view<const double> k,
                      heads_view<const double> v, heads_view<double> o, heads_view<double> lse,
                      const attention_options& options = {}, heads_view<const double> bias = {}) {
  constexpr const char* function = "tilekern::reference::attention";
  tilekern::detail::check_attention(function, q, k, v, o, "o", lse, bias, options);
  const std::size_t seq_q = q.rows(), seq_k = k.rows(), head_dim = q.cols();
  const double scale = tilekern::detail::attention_scale(options, head_dim);
  std::vector<double> p_values(seq_q * seq_k), lse_h(seq_q);
  const view<double> p(p_values.data(), seq_q, seq_k);
  for (std::size_t b = 0; b < q.batch(); ++b) {
    const std::vector<std::size_t> end = detail::visible_ends(options, b, seq_q, seq_k);
    for (std::size_t h = 0; h < q.heads(); ++h) {
      detail::attention_probabilities(q, k, bias, scale, b, h, end, p, lse_h);
      const view<const double> v_h = v(b, detail::kv_head(h, q.heads(), k.heads()));
      const view<double> o_h = o(b, h);
      for (std::size_t i = 0; i < seq_q; ++i) {
        for (std::size_t d = 0; d < head_dim; ++d) {
          o_h(i, d) = detail::sum_over(end[i], [&](std::size_t j) { return p(i, j) * v_h(j, d); });
        }
        if (!lse.empty()) lse(b, h, i, 0) = lse_h[i];
      }
    }
  }
}

// The gradients dq, dk, dv of a loss L with dL/do = d_o, o = attention(q, k, v, options, bias),
// recomputed from q, k and v (see the top). d_o and dq have q's shape, dk and dv k's; all three
// are overwritten. Throws shape_error, before writing anything, if the sizes do not fit.
inline void attention_backward(heads_view<const double> q, heads_view<const double> k,
                               heads_view<const double> v, heads_view<const double> d_o,
                               heads_view<double> dq, heads_view<double> dk, heads_view<double> dv,
                               const attention_options& options = {},
                               heads_view<const double> bias = {}) {
  constexpr const char* function = "tilekern::reference::attention_backward";
  tilekern::detail::check_attention(function, q, k, v, d_o, "d_o", heads_view<const double>{}, bias,
                                    options);
  detail::check_heads_shape(function, "dq", dq, q, "the shape of q");
  detail::check_heads_shape(function, "dk", dk, k, "the shape of k");
  detail::check_heads_shape(function, "dv", dv, k, "the shape of k");
  const std::size_t seq_q = q.rows(), seq_k = k.rows(), head_dim = q.cols();
  const double scale = tilekern::detail::attention_scale(options, head_dim);

  for (std::size_t b = 0; b < k.batch(); ++b) {  // dk and dv are sums over the query heads
    for (std::size_t g = 0; g < k.heads(); ++g) {
      for (std::size_t j = 0; j < seq_k; ++j) {
        std::fill(dk(b, g).row(j).begin(), dk(b, g).row(j).end(), 0.0);
        std::fill(dv(b, g).row(j).begin(), dv(b, g).row(j).end(), 0.0);
      }
    }
  }
  std::vector<double> p_values(seq_q * seq_k), ds_values(seq_q * seq_k), o_values(seq_q * head_dim);
  std::vector<double> lse_h(seq_q);
  const view<double> p(p_values.data(), seq_q, seq_k), ds(ds_values.data(), seq_q, seq_k);
  const view<double> o(o_values.data(), seq_q, head_dim);
  for (std::size_t b = 0; b < q.batch(); ++b) {
    const std::vector<std::size_t> end = detail::visible_ends(options, b, seq_q, seq_k);
    const auto sees = [&](std::size_t i, std::size_t j) { return j < end[i]; };
    for (std::size_t h = 0; h < q.heads(); ++h) {
      detail::attention_probabilities(q, k, bias, scale, b, h, end, p, lse_h);
      const std::size_t g = detail::kv_head(h, q.heads(), k.heads());
      const view<const double> q_h = q(b, h), k_h = k(b, g), v_h = v(b, g), d_o_h = d_o(b, h);
      const view<double> dq_h = dq(b, h), dk_h = dk(b, g), dv_h = dv(b, g);
      // o = p v
      for (std::size_t i = 0; i < seq_q; ++i) {
        for (std::size_t d = 0; d < head_dim; ++d) {
          o(i, d) = detail::sum_over(end[i], [&](std::size_t j) { return p(i, j) * v_h(j, d); });
        }
      }
      // dv += p^T d_o
      for (std::size_t j = 0; j < seq_k; ++j) {
        for (std::size_t d = 0; d < head_dim; ++d) {
          dv_h(j, d) += detail::sum_over(
              seq_q, [&](std::size_t i) { return sees(i, j) ? p(i, j) * d_o_h(i, d) : 0.0; });
        }
      }
      // ds = p * (d_o v^T - rowsum(d_o * o)), 0 where masked
      for (std::size_t i = 0; i < seq_q; ++i) {
        const double d_o_dot_o =
            detail::sum_over(head_dim, [&](std::size_t d) { return d_o_h(i, d) * o(i, d); });
        for (std::size_t j = 0; j < seq_k; ++j) {
          if (!sees(i, j)) {
            ds(i, j) = 0.0;
            continue;
          }
          const double dp =
              detail::sum_over(head_dim, [&](std::size_t d) { return d_o_h(i, d) * v_h(j, d); });
          ds(i, j) = p(i, j) * (dp - d_o_dot_o);
        }
      }
      // dq = scale ds k
      for (std::size_t i = 0; i < seq_q; ++i) {
        for (std::size_t d = 0; d < head_dim; ++d) {
          dq_h(i, d) =
              scale * detail::sum_over(end[i], [&](std::size_t j) { return ds(i, j) * k_h(j, d); });
        }
      }
      // dk += scale ds^T q
      for (std::size_t j = 0; j < seq_k; ++j) {
        for (std::size_t d = 0; d < head_dim; ++d) {
          dk_h(j, d) += scale * detail::sum_over(seq_q, [&](std::size_t i) {
                          return sees(i, j) ? ds(i, j) * q_h(i, d) : 0.0;
                        });
        }
      }
    }
  }
}

}  // namespace tilekern::reference
