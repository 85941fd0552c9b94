#pragma once
// What attention computes, shared by the kernel (kernels/attention.hpp) and its fp64 reference
// (reference/attention.hpp): the options, which keys a query sees, and the shape checks.
//
// Tensors are heads_views (tile/view.hpp): q is batch x heads x seq_q x head_dim; k and v are
// batch x kv_heads x seq_k x head_dim, kv_heads dividing heads (query head h reads kv head
// h / (heads / kv_heads): grouped-query attention, multi-query when kv_heads is 1); o is q's shape;
// lse, when not empty, is batch x heads x seq_q x 1; an additive bias is (batch or 1) x (heads or
// 1) x seq_q x seq_k, broadcast over a dimension of 1.
//
//   s[i][j] = scale * q_i . k_j (+ bias[i][j])     where query i sees key j, else -inf
//   o_i = sum_j exp(s[i][j] - lse_i) v_j,   lse_i = log sum_j exp(s[i][j])
//
// Query i of batch b sees key j when j < key_lengths[b] (if key_lengths is given) and, if causal,
// j <= i + seq_k - seq_q (the last query sees every key: aligned at the end, as in decoding).
// A query that sees no key (or only -inf scores) gets o = 0 and lse = -inf.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "tilekern/error.hpp"
#include "tilekern/tile/view.hpp"

namespace tilekern {

struct attention_options {
  std::optional<float> scale{};  // of q . k; default 1 / sqrt(head_dim), in fp32
  bool causal = false;           // key j visible to query i iff j <= i + seq_k - seq_q
  std::span<const std::size_t> key_lengths{};  // empty, or one per batch: keys >= length masked
  int threads = 0;                             // the kernel's threads; 0: OpenMP's default
};

namespace detail {

// The scale the scores are multiplied by, as an fp32 value (the reference uses the same value).
inline float attention_scale(const attention_options& options, std::size_t head_dim) {
  return options.scale ? *options.scale
                       : 1.0f / std::sqrt(static_cast<float>(head_dim == 0 ? 1 : head_dim));
}

// The keys [0, end) that query i of batch b may see; causal and key-length masks are prefixes.
inline std::size_t visible_keys(const attention_options& options, std::size_t b, std::size_t i,
                                std::size_t seq_q, std::size_t seq_k) {
  std::size_t end = seq_k;
  if (!options.key_lengths.empty()) end = std::min(end, options.key_lengths[b]);
  if (options.causal) {
    // j <= i + seq_k - seq_q, i.e. j < i + 1 + seq_k - seq_q (none when seq_q > i + 1 + seq_k).
    const std::size_t limit = i + 1 + seq_k;
    end = std::min(end, limit > seq_q ? limit - seq_q : 0);
  }
  return end;
}

inline std::string attention_dims(std::size_t b, std::size_t h, std::size_t r, std::size_t c) {
  return std::to_string(b) + "x" + std::to_string(h) + "x" + std::to_string(r) + "x" +
         std::to_string(c);
}

template <class T>
std::string attention_dims(const heads_view<T>& x) {
  return attention_dims(x.batch(), x.heads(), x.rows(), x.cols());
}

// Throws shape_error unless x has the dimensions of `like`.
template <class X, class Like>
void check_same_heads(const char* function, const char* argument, const heads_view<X>& x,
                      const heads_view<Like>& like, const char* what) {
  if (x.batch() != like.batch() || x.heads() != like.heads() || x.rows() != like.rows() ||
      x.cols() != like.cols()) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": " + argument + " is " + attention_dims(x) + ", expected " +
             attention_dims(like) + " (" + what + ")";
    });
  }
}

// Throws shape_error, naming the function and the argument, unless the tensors fit together (see
// the top of this header). Sizes only: pass any heads_views; empty lse or bias are not checked.
template <class Q, class K, class V, class O, class L, class B>
void check_attention(const char* function, const heads_view<Q>& q, const heads_view<K>& k,
                     const heads_view<V>& v, const heads_view<O>& o, const char* o_name,
                     const heads_view<L>& lse, const heads_view<B>& bias,
                     const attention_options& options) {
  auto fail = [&](const char* argument, const std::string& actual, const std::string& expected,
                  const char* why) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": " + argument + " is " + actual + ", expected " + expected +
             " (" + why + ")";
    });
  };
  const std::size_t batch = q.batch(), heads = q.heads(), seq_q = q.rows(), dim = q.cols();
  const std::size_t kv_heads = k.heads(), seq_k = k.rows();
  if (k.batch() != batch || k.cols() != dim) {
    fail("k", attention_dims(k), attention_dims(batch, kv_heads, seq_k, dim),
         "q's batch and head_dim");
  }
  if (kv_heads == 0 ? heads != 0 : heads % kv_heads != 0) {
    fail("k", attention_dims(k), attention_dims(batch, kv_heads, seq_k, dim),
         ("k's heads must divide q's " + std::to_string(heads) + " heads").c_str());
  }
  if (v.batch() != batch || v.heads() != kv_heads || v.rows() != seq_k || v.cols() != dim) {
    fail("v", attention_dims(v), attention_dims(batch, kv_heads, seq_k, dim), "the shape of k");
  }
  if (o.batch() != batch || o.heads() != heads || o.rows() != seq_q || o.cols() != dim) {
    fail(o_name, attention_dims(o), attention_dims(q), "the shape of q");
  }
  if (!lse.empty() &&
      (lse.batch() != batch || lse.heads() != heads || lse.rows() != seq_q || lse.cols() != 1)) {
    fail("lse", attention_dims(lse), attention_dims(batch, heads, seq_q, 1), "one value per query");
  }
  if (!bias.empty() && ((bias.batch() != batch && bias.batch() != 1) ||
                        (bias.heads() != heads && bias.heads() != 1) || bias.rows() != seq_q ||
                        bias.cols() != seq_k)) {
    fail("bias", attention_dims(bias), attention_dims(batch, heads, seq_q, seq_k),
         "batch and heads may be 1");
  }
  if (!options.key_lengths.empty() && options.key_lengths.size() != batch) {
    fail("key_lengths", std::to_string(options.key_lengths.size()) + " values",
         std::to_string(batch), "one per batch");
  }
}

}  // namespace detail
}  // namespace tilekern
