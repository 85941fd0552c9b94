// reference/attention.hpp: the forward against a composition of the other references head by head
// (reference::matmul for q k^T, reference::softmax with an additive mask built from the causal,
// key-length and bias rules as stated, reference::matmul with v) over odd shapes, grouped-query
// and multi-query heads, both causal alignments, key lengths and broadcast biases, with lse
// against log sum exp computed directly; fully masked queries (o = 0, lse = -inf); GQA as the same
// computation with k and v heads repeated; a [batch, seq, heads, dim] strided layout as the
// contiguous one; masked keys' k, v and bias never read; NaN only in the rows that see it; the
// backward against central finite differences of L = sum(o * d_o), masked queries and keys getting
// zero gradients; shape errors naming the argument before anything is written.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/gradient.hpp"
#include "tilekern/error.hpp"
#include "tilekern/kernels/attention_options.hpp"
#include "tilekern/reference/attention.hpp"
#include "tilekern/reference/matmul.hpp"
#include "tilekern/reference/softmax.hpp"

namespace tilekern {
namespace {

using test::check_gradient;
using test::numerical_gradient;

constexpr double sentinel = 12345.0;
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// batch x heads x rows x cols values, contiguous.
struct tensor {
  std::size_t batch = 0, heads = 0, rows = 0, cols = 0;
  std::vector<double> values;

  tensor() = default;
  tensor(std::size_t batch, std::size_t heads, std::size_t rows, std::size_t cols,
         double fill = sentinel)
      : batch(batch),
        heads(heads),
        rows(rows),
        cols(cols),
        values(batch * heads * rows * cols, fill) {}
  heads_view<double> get() { return {values.data(), batch, heads, rows, cols}; }
  heads_view<const double> get() const { return {values.data(), batch, heads, rows, cols}; }
  double& operator()(std::size_t b, std::size_t h, std::size_t r, std::size_t c) {
    return values[((b * heads + h) * rows + r) * cols + c];
  }
  double operator()(std::size_t b, std::size_t h, std::size_t r, std::size_t c) const {
    return values[((b * heads + h) * rows + r) * cols + c];
  }
};

tensor random_tensor(std::size_t batch, std::size_t heads, std::size_t rows, std::size_t cols,
                     std::mt19937_64& generator, double low = -2.0, double high = 2.0) {
  std::uniform_real_distribution<double> distribution(low, high);
  tensor t(batch, heads, rows, cols);
  for (double& v : t.values) v = distribution(generator);
  return t;
}

enum class bias_kind { none, full, one_batch, one_head, one_both };

struct config {
  std::size_t batch, heads, kv_heads, seq_q, seq_k, dim;
  bool causal = false;
  std::vector<std::size_t> key_lengths = {};
  bias_kind bias = bias_kind::none;
  std::optional<float> scale = {};
};

// One attention problem: the inputs and the options (key_lengths owned here).
struct problem {
  tensor q, k, v, bias;  // bias empty: none
  bool causal = false;
  std::vector<std::size_t> key_lengths;
  std::optional<float> scale;

  attention_options options() const {
    attention_options options;
    options.scale = scale;
    options.causal = causal;
    options.key_lengths = key_lengths;
    return options;
  }
  // The fp32 scale, default 1 / sqrt(head_dim), as a double.
  double expected_scale() const {
    return scale ? *scale : static_cast<double>(1.0f / std::sqrt(static_cast<float>(q.cols)));
  }
};

// Whether query i of batch b sees key j, by the rules as stated (not detail::visible_keys):
// j < key_lengths[b], and j <= i + seq_k - seq_q if causal.
bool sees(const problem& x, std::size_t b, std::size_t i, std::size_t j) {
  if (!x.key_lengths.empty() && j >= x.key_lengths[b]) return false;
  const auto signed_size = [](std::size_t n) { return static_cast<std::ptrdiff_t>(n); };
  return !x.causal ||
         signed_size(j) <= signed_size(i) + signed_size(x.k.rows) - signed_size(x.q.rows);
}

double bias_at(const problem& x, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
  if (x.bias.values.empty()) return 0.0;
  return x.bias(x.bias.batch == 1 ? 0 : b, x.bias.heads == 1 ? 0 : h, i, j);
}

// Random q, k, v and bias; the bias is -inf on a pattern, and NaN where no query using it sees the
// key (it must not be read there).
problem make_problem(const config& c, std::mt19937_64& generator) {
  problem x;
  x.q = random_tensor(c.batch, c.heads, c.seq_q, c.dim, generator);
  x.k = random_tensor(c.batch, c.kv_heads, c.seq_k, c.dim, generator);
  x.v = random_tensor(c.batch, c.kv_heads, c.seq_k, c.dim, generator);
  x.causal = c.causal;
  x.key_lengths = c.key_lengths;
  x.scale = c.scale;
  if (c.bias == bias_kind::none) return x;
  const bool one_batch = c.bias == bias_kind::one_batch || c.bias == bias_kind::one_both;
  const bool one_head = c.bias == bias_kind::one_head || c.bias == bias_kind::one_both;
  x.bias = random_tensor(one_batch ? 1 : c.batch, one_head ? 1 : c.heads, c.seq_q, c.seq_k,
                         generator, -1.0, 1.0);
  for (std::size_t bb = 0; bb < x.bias.batch; ++bb) {
    for (std::size_t bh = 0; bh < x.bias.heads; ++bh) {
      for (std::size_t i = 0; i < c.seq_q; ++i) {
        for (std::size_t j = 0; j < c.seq_k; ++j) {
          bool seen = false;
          for (std::size_t b = 0; b < c.batch; ++b) {
            if ((one_batch || b == bb) && sees(x, b, i, j)) seen = true;
          }
          if (!seen) {
            x.bias(bb, bh, i, j) = nan;
          } else if ((i + 2 * j + bh) % 7 == 3) {
            x.bias(bb, bh, i, j) = -inf;
          }
        }
      }
    }
  }
  return x;
}

struct result {
  tensor o, lse;
};

result run(const problem& x) {
  result r{tensor(x.q.batch, x.q.heads, x.q.rows, x.q.cols),
           tensor(x.q.batch, x.q.heads, x.q.rows, 1)};
  reference::attention(x.q.get(), x.k.get(), x.v.get(), r.o.get(), r.lse.get(), x.options(),
                       x.bias.get());
  return r;
}

// o and lse the other way, head by head: s = q k^T by reference::matmul, p = softmax(scale s +
// mask) by reference::softmax with mask = the bias where the query sees the key and -inf
// elsewhere, o = p v by reference::matmul; lse = log sum_j exp(scale s + mask) directly.
result compose(const problem& x) {
  const std::size_t batch = x.q.batch, heads = x.q.heads, seq_q = x.q.rows, seq_k = x.k.rows;
  const std::size_t dim = x.q.cols, group = heads / x.k.heads;
  const double scale = x.expected_scale();
  result r{tensor(batch, heads, seq_q, dim), tensor(batch, heads, seq_q, 1)};
  std::vector<double> k_t(dim * seq_k), s(seq_q * seq_k), mask(seq_q * seq_k), p(seq_q * seq_k);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t g = h / group;
      for (std::size_t j = 0; j < seq_k; ++j) {
        for (std::size_t d = 0; d < dim; ++d) k_t[d * seq_k + j] = x.k(b, g, j, d);
      }
      reference::matmul(x.q.get()(b, h), view<const double>(k_t.data(), dim, seq_k),
                        view<double>(s.data(), seq_q, seq_k));
      for (std::size_t i = 0; i < seq_q; ++i) {
        for (std::size_t j = 0; j < seq_k; ++j) {
          mask[i * seq_k + j] = sees(x, b, i, j) ? bias_at(x, b, h, i, j) : -inf;
        }
      }
      reference::softmax(view<const double>(s.data(), seq_q, seq_k), scale,
                         view<const double>(mask.data(), seq_q, seq_k),
                         view<double>(p.data(), seq_q, seq_k));
      reference::matmul(view<const double>(p.data(), seq_q, seq_k), x.v.get()(b, g),
                        r.o.get()(b, h));
      for (std::size_t i = 0; i < seq_q; ++i) {
        double sum = 0.0;
        for (std::size_t j = 0; j < seq_k; ++j) {
          sum += std::exp(scale * s[i * seq_k + j] + mask[i * seq_k + j]);
        }
        r.lse(b, h, i, 0) = std::log(sum);
      }
    }
  }
  return r;
}

// The reference against the composition; fully masked queries (lse -inf) have o exactly 0.
// Returns the number of fully masked queries.
std::size_t check_forward(const problem& x, const result& actual) {
  const result expected = compose(x);
  std::size_t masked = 0;
  for (std::size_t b = 0; b < x.q.batch; ++b) {
    for (std::size_t h = 0; h < x.q.heads; ++h) {
      for (std::size_t i = 0; i < x.q.rows; ++i) {
        INFO("batch ", b, ", head ", h, ", query ", i);
        const double lse = expected.lse(b, h, i, 0);
        REQUIRE(!std::isnan(lse));
        if (lse == -inf) {
          ++masked;
          CHECK(actual.lse(b, h, i, 0) == -inf);
        } else {
          CHECK(actual.lse(b, h, i, 0) == doctest::Approx(lse).epsilon(1e-12));
        }
        for (std::size_t d = 0; d < x.q.cols; ++d) {
          INFO("dim ", d);
          if (lse == -inf) {
            CHECK(actual.o(b, h, i, d) == 0.0);
          } else {
            CHECK(actual.o(b, h, i, d) == doctest::Approx(expected.o(b, h, i, d)).epsilon(1e-12));
          }
        }
      }
    }
  }
  return masked;
}

TEST_CASE("reference::attention: the composition of matmul, masked softmax and matmul") {
  std::mt19937_64 generator(41);
  const config configs[] = {
      {2, 3, 3, 17, 17, 16},
      {1, 2, 2, 1, 33, 80, false, {}, bias_kind::none, 0.3f},         // one query
      {2, 4, 2, 17, 33, 16, true, {33, 20}, bias_kind::full},         // GQA, causal seq_q < seq_k
      {3, 4, 1, 33, 17, 16, true, {17, 0, 5}, bias_kind::one_batch},  // MQA, causal seq_q > seq_k
      {2, 4, 4, 33, 1, 80, false, {}, bias_kind::one_head},           // one key
      {2, 4, 1, 17, 33, 80, true, {}, bias_kind::one_both, -0.2f},
      {2, 2, 2, 33, 33, 16, false, {9, 33}, bias_kind::full},
  };
  for (const config& c : configs) {
    INFO(c.batch, "x", c.heads, "(", c.kv_heads, ")x", c.seq_q, "x", c.seq_k, "x", c.dim,
         c.causal ? ", causal" : "", ", ", c.key_lengths.size(), " key lengths, bias kind ",
         static_cast<int>(c.bias));
    const problem x = make_problem(c, generator);
    check_forward(x, run(x));
  }
}

TEST_CASE("reference::attention: fully masked queries give o = 0 and lse = -inf") {
  std::mt19937_64 generator(42);
  // batch 0 sees no key; causal with seq_q 7 > seq_k 4 masks queries 0-2; a -inf bias masks query 5
  // of head 1 (every batch)
  problem x = make_problem({2, 2, 2, 7, 4, 8, true, {0, 4}, bias_kind::one_batch}, generator);
  for (double& v : x.bias.values) v = std::isnan(v) ? v : 0.5;
  for (std::size_t j = 0; j < 4; ++j) x.bias(0, 1, 5, j) = -inf;
  const result r = run(x);
  CHECK(check_forward(x, r) == 2 * 7 + 2 * 3 + 1);
  for (std::size_t b = 0; b < 2; ++b) {
    for (std::size_t h = 0; h < 2; ++h) {
      for (std::size_t i = 0; i < 7; ++i) {
        const bool masked = b == 0 || i < 3 || (h == 1 && i == 5);
        INFO(b, ", ", h, ", ", i);
        CHECK((r.lse(b, h, i, 0) == -inf) == masked);
        for (std::size_t d = 0; d < 8; ++d) CHECK((r.o(b, h, i, d) == 0.0) == masked);
      }
    }
  }
  // without lse: the same o, and nothing else written
  tensor o(2, 2, 7, 8);
  reference::attention(x.q.get(), x.k.get(), x.v.get(), o.get(), {}, x.options(), x.bias.get());
  CHECK(o.values == r.o.values);
  // no keys at all
  problem none = make_problem({1, 2, 2, 3, 0, 8}, generator);
  const result empty = run(none);
  CHECK(std::all_of(empty.o.values.begin(), empty.o.values.end(), [](double v) { return v == 0; }));
  CHECK(std::all_of(empty.lse.values.begin(), empty.lse.values.end(),
                    [](double v) { return v == -inf; }));
}

// k and v with each kv head repeated for the query heads of its group.
tensor repeat_heads(const tensor& t, std::size_t heads) {
  const std::size_t group = heads / t.heads;
  tensor repeated(t.batch, heads, t.rows, t.cols);
  for (std::size_t b = 0; b < t.batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      for (std::size_t r = 0; r < t.rows; ++r) {
        for (std::size_t c = 0; c < t.cols; ++c) repeated(b, h, r, c) = t(b, h / group, r, c);
      }
    }
  }
  return repeated;
}

TEST_CASE("reference::attention: GQA is attention with k and v heads repeated, forward and back") {
  std::mt19937_64 generator(43);
  for (const std::size_t kv_heads : {std::size_t{2}, std::size_t{1}}) {
    INFO(kv_heads, " kv heads");
    const problem x =
        make_problem({2, 4, kv_heads, 5, 7, 8, true, {7, 4}, bias_kind::full}, generator);
    problem repeated = x;
    repeated.k = repeat_heads(x.k, 4);
    repeated.v = repeat_heads(x.v, 4);
    const result grouped = run(x), plain = run(repeated);
    CHECK(grouped.o.values == plain.o.values);
    CHECK(grouped.lse.values == plain.lse.values);

    const tensor d_o = random_tensor(2, 4, 5, 8, generator);
    tensor dq(2, 4, 5, 8), dk(2, kv_heads, 7, 8), dv(2, kv_heads, 7, 8);
    tensor dq_plain(2, 4, 5, 8), dk_plain(2, 4, 7, 8), dv_plain(2, 4, 7, 8);
    reference::attention_backward(x.q.get(), x.k.get(), x.v.get(), d_o.get(), dq.get(), dk.get(),
                                  dv.get(), x.options(), x.bias.get());
    reference::attention_backward(repeated.q.get(), repeated.k.get(), repeated.v.get(), d_o.get(),
                                  dq_plain.get(), dk_plain.get(), dv_plain.get(),
                                  repeated.options(), repeated.bias.get());
    CHECK(dq.values == dq_plain.values);
    // a kv head's gradient is the sum over the query heads of its group
    const std::size_t group = 4 / kv_heads;
    for (std::size_t b = 0; b < 2; ++b) {
      for (std::size_t g = 0; g < kv_heads; ++g) {
        for (std::size_t j = 0; j < 7; ++j) {
          for (std::size_t d = 0; d < 8; ++d) {
            double dk_sum = 0.0, dv_sum = 0.0;
            for (std::size_t h = g * group; h < (g + 1) * group; ++h) {
              dk_sum += dk_plain(b, h, j, d);
              dv_sum += dv_plain(b, h, j, d);
            }
            INFO(b, ", ", g, ", ", j, ", ", d);
            CHECK(dk(b, g, j, d) == doctest::Approx(dk_sum).epsilon(1e-13));
            CHECK(dv(b, g, j, d) == doctest::Approx(dv_sum).epsilon(1e-13));
          }
        }
      }
    }
  }
}

// A tensor stored [batch, rows, heads, cols] (e.g. [batch, seq, heads, head_dim]).
struct sequence_major {
  std::size_t batch, heads, rows, cols;
  std::vector<double> values;

  explicit sequence_major(const tensor& t)
      : batch(t.batch), heads(t.heads), rows(t.rows), cols(t.cols), values(t.values.size()) {
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t h = 0; h < heads; ++h) {
        for (std::size_t r = 0; r < rows; ++r) {
          for (std::size_t c = 0; c < cols; ++c) at(b, h, r, c) = t(b, h, r, c);
        }
      }
    }
  }
  double& at(std::size_t b, std::size_t h, std::size_t r, std::size_t c) {
    return values[((b * rows + r) * heads + h) * cols + c];
  }
  heads_view<double> get() {
    return {values.data(), batch, heads, rows, cols, rows * heads * cols, cols, heads * cols};
  }
  tensor contiguous() {
    tensor t(batch, heads, rows, cols);
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t h = 0; h < heads; ++h) {
        for (std::size_t r = 0; r < rows; ++r) {
          for (std::size_t c = 0; c < cols; ++c) t(b, h, r, c) = at(b, h, r, c);
        }
      }
    }
    return t;
  }
};

TEST_CASE("reference::attention: a [batch, seq, heads, dim] layout gives the contiguous result") {
  std::mt19937_64 generator(44);
  const problem x =
      make_problem({2, 4, 2, 6, 9, 8, true, {9, 5}, bias_kind::one_head, 0.4f}, generator);
  const tensor d_o = random_tensor(2, 4, 6, 8, generator);
  const result expected = run(x);
  tensor dq(2, 4, 6, 8), dk(2, 2, 9, 8), dv(2, 2, 9, 8);
  reference::attention_backward(x.q.get(), x.k.get(), x.v.get(), d_o.get(), dq.get(), dk.get(),
                                dv.get(), x.options(), x.bias.get());

  sequence_major q(x.q), k(x.k), v(x.v), d_o_s(d_o);
  sequence_major o(tensor(2, 4, 6, 8)), lse(tensor(2, 4, 6, 1));  // sentinels
  sequence_major dq_s(tensor(2, 4, 6, 8)), dk_s(tensor(2, 2, 9, 8)), dv_s(tensor(2, 2, 9, 8));
  reference::attention(q.get(), k.get(), v.get(), o.get(), lse.get(), x.options(), x.bias.get());
  reference::attention_backward(q.get(), k.get(), v.get(), d_o_s.get(), dq_s.get(), dk_s.get(),
                                dv_s.get(), x.options(), x.bias.get());
  CHECK(o.contiguous().values == expected.o.values);
  CHECK(lse.contiguous().values == expected.lse.values);
  CHECK(dq_s.contiguous().values == dq.values);
  CHECK(dk_s.contiguous().values == dk.values);
  CHECK(dv_s.contiguous().values == dv.values);
}

TEST_CASE("reference::attention: masked keys' k, v and bias are not read; NaN stays in its rows") {
  std::mt19937_64 generator(45);
  // keys beyond key_lengths and causally masked bias: NaN padding changes nothing
  const problem x = make_problem({2, 2, 1, 5, 6, 4, true, {6, 3}, bias_kind::full}, generator);
  problem padded = x;
  for (std::size_t j = 3; j < 6; ++j) {
    for (std::size_t d = 0; d < 4; ++d) padded.k(1, 0, j, d) = padded.v(1, 0, j, d) = nan;
  }
  const result clean = run(x), with_nan = run(padded);
  CHECK(with_nan.o.values == clean.o.values);
  CHECK(with_nan.lse.values == clean.lse.values);
  const tensor d_o = random_tensor(2, 2, 5, 4, generator);
  tensor dq(2, 2, 5, 4), dk(2, 1, 6, 4), dv(2, 1, 6, 4);
  tensor dq_padded = dq, dk_padded = dk, dv_padded = dv;
  reference::attention_backward(x.q.get(), x.k.get(), x.v.get(), d_o.get(), dq.get(), dk.get(),
                                dv.get(), x.options(), x.bias.get());
  reference::attention_backward(padded.q.get(), padded.k.get(), padded.v.get(), d_o.get(),
                                dq_padded.get(), dk_padded.get(), dv_padded.get(), padded.options(),
                                padded.bias.get());
  CHECK(dq_padded.values == dq.values);
  CHECK(dk_padded.values == dk.values);
  CHECK(dv_padded.values == dv.values);

  // NaN in key 2 of batch 0 (causal, seq_q 5, seq_k 6: query i sees keys <= i + 1): queries 1-4
  // are NaN, query 0 is untouched; a NaN bias a query sees makes only that query NaN.
  problem nan_key = x;
  nan_key.k(0, 0, 2, 1) = nan;
  nan_key.bias(1, 0, 2, 0) = nan;
  const result r = run(nan_key);
  for (std::size_t b = 0; b < 2; ++b) {
    for (std::size_t h = 0; h < 2; ++h) {
      for (std::size_t i = 0; i < 5; ++i) {
        const bool is_nan = (b == 0 && i >= 1) || (b == 1 && h == 0 && i == 2);
        INFO(b, ", ", h, ", ", i);
        CHECK(std::isnan(r.lse(b, h, i, 0)) == is_nan);
        for (std::size_t d = 0; d < 4; ++d) {
          if (is_nan) {
            CHECK(std::isnan(r.o(b, h, i, d)));
          } else {
            CHECK(r.o(b, h, i, d) == clean.o(b, h, i, d));
          }
        }
      }
    }
  }
}

TEST_CASE("reference::attention_backward: the finite differences of sum(o * d_o)") {
  std::mt19937_64 generator(46);
  const config configs[] = {
      {2, 2, 2, 3, 5, 4},
      {2, 4, 2, 6, 4, 8, true, {4, 3}, bias_kind::full},               // GQA, causal seq_q > seq_k
      {1, 4, 1, 3, 7, 5, true, {}, bias_kind::one_head, 0.7f},         // MQA, causal seq_q < seq_k
      {2, 2, 1, 4, 6, 3, false, {0, 6}, bias_kind::one_batch, -0.5f},  // batch 0 sees no key
  };
  for (const config& c : configs) {
    INFO(c.batch, "x", c.heads, "(", c.kv_heads, ")x", c.seq_q, "x", c.seq_k, "x", c.dim,
         c.causal ? ", causal" : "", ", ", c.key_lengths.size(), " key lengths, bias kind ",
         static_cast<int>(c.bias));
    problem x = make_problem(c, generator);
    const tensor d_o = random_tensor(c.batch, c.heads, c.seq_q, c.dim, generator);
    tensor o(c.batch, c.heads, c.seq_q, c.dim);
    const auto loss = [&] {
      reference::attention(x.q.get(), x.k.get(), x.v.get(), o.get(), {}, x.options(), x.bias.get());
      double sum = 0.0;
      for (std::size_t n = 0; n < o.values.size(); ++n) sum += o.values[n] * d_o.values[n];
      return sum;
    };
    loss();
    double loss_scale = 0.0;
    for (std::size_t n = 0; n < o.values.size(); ++n)
      loss_scale += std::abs(o.values[n] * d_o.values[n]);

    tensor dq(c.batch, c.heads, c.seq_q, c.dim), dk(c.batch, c.kv_heads, c.seq_k, c.dim),
        dv(c.batch, c.kv_heads, c.seq_k, c.dim);
    reference::attention_backward(x.q.get(), x.k.get(), x.v.get(), d_o.get(), dq.get(), dk.get(),
                                  dv.get(), x.options(), x.bias.get());
    check_gradient(dq.values, numerical_gradient(x.q.values, loss), "dq", loss_scale);
    check_gradient(dk.values, numerical_gradient(x.k.values, loss), "dk", loss_scale);
    check_gradient(dv.values, numerical_gradient(x.v.values, loss), "dv", loss_scale);

    // exactly 0: dq of a query that sees no key, dk and dv of a key no query sees
    std::size_t masked_queries = 0, unseen_keys = 0;
    for (std::size_t b = 0; b < c.batch; ++b) {
      for (std::size_t i = 0; i < c.seq_q; ++i) {
        bool any = false;
        for (std::size_t j = 0; j < c.seq_k; ++j) any = any || sees(x, b, i, j);
        if (any) continue;
        ++masked_queries;
        for (std::size_t h = 0; h < c.heads; ++h) {
          for (std::size_t d = 0; d < c.dim; ++d) CHECK(dq(b, h, i, d) == 0.0);
        }
      }
      for (std::size_t j = 0; j < c.seq_k; ++j) {
        bool any = false;
        for (std::size_t i = 0; i < c.seq_q; ++i) any = any || sees(x, b, i, j);
        if (any) continue;
        ++unseen_keys;
        for (std::size_t g = 0; g < c.kv_heads; ++g) {
          for (std::size_t d = 0; d < c.dim; ++d) {
            CHECK(dk(b, g, j, d) == 0.0);
            CHECK(dv(b, g, j, d) == 0.0);
          }
        }
      }
    }
    const bool some_masked =
        (c.causal && c.seq_q > c.seq_k) || (!c.key_lengths.empty() && c.key_lengths[0] == 0);
    CHECK((masked_queries > 0) == some_masked);
    if (!c.key_lengths.empty()) CHECK(unseen_keys > 0);
  }
}

// Runs call, which must throw a shape_error whose message starts with function, names argument
// and contains both sizes (each of `sizes`).
template <class Call>
void check_shape_error(Call call, const std::string& function, const std::string& argument,
                       const std::vector<std::string>& sizes) {
  try {
    call();
    FAIL("no shape_error for ", argument);
  } catch (const shape_error& error) {
    const std::string message = error.what();
    INFO(message);
    CHECK(message.rfind(function + ": " + argument + " ", 0) == 0);
    for (const std::string& size : sizes) CHECK(message.find(size) != std::string::npos);
  }
}

TEST_CASE("reference::attention: shape errors name the argument; nothing is written") {
  const std::string forward = "tilekern::reference::attention";
  const std::string backward = "tilekern::reference::attention_backward";
  // q 2x4x3x8, k and v 2x2x5x8
  const std::vector<double> input(1024, 1.0);
  std::vector<double> out(1024, sentinel), out2(1024, sentinel), out3(1024, sentinel);
  const auto in = [&](std::size_t b, std::size_t h, std::size_t r, std::size_t c) {
    return heads_view<const double>(input.data(), b, h, r, c);
  };
  const auto to = [](std::vector<double>& values, std::size_t b, std::size_t h, std::size_t r,
                     std::size_t c) { return heads_view<double>(values.data(), b, h, r, c); };
  const auto q = in(2, 4, 3, 8), k = in(2, 2, 5, 8), v = in(2, 2, 5, 8);
  const auto o = to(out, 2, 4, 3, 8), lse = to(out2, 2, 4, 3, 1);
  const auto attend = [&](heads_view<const double> k_, heads_view<const double> v_,
                          heads_view<double> o_, heads_view<double> lse_,
                          heads_view<const double> bias_ = {},
                          const attention_options& options = {}) {
    reference::attention(q, k_, v_, o_, lse_, options, bias_);
  };
  check_shape_error([&] { attend(in(2, 2, 5, 7), v, o, lse); }, forward, "k",
                    {"2x2x5x7", "2x2x5x8"});
  check_shape_error([&] { attend(in(2, 3, 5, 8), in(2, 3, 5, 8), o, lse); }, forward, "k",
                    {"2x3x5x8", "4 heads"});
  check_shape_error([&] { attend(in(1, 2, 5, 8), v, o, lse); }, forward, "k",
                    {"1x2x5x8", "2x2x5x8"});
  check_shape_error([&] { attend(k, in(2, 2, 6, 8), o, lse); }, forward, "v",
                    {"2x2x6x8", "2x2x5x8"});
  check_shape_error([&] { attend(k, v, to(out, 2, 4, 3, 7), lse); }, forward, "o",
                    {"2x4x3x7", "2x4x3x8"});
  check_shape_error([&] { attend(k, v, o, to(out2, 2, 4, 3, 2)); }, forward, "lse",
                    {"2x4x3x2", "2x4x3x1"});
  check_shape_error([&] { attend(k, v, o, lse, in(2, 4, 3, 4)); }, forward, "bias",
                    {"2x4x3x4", "2x4x3x5"});
  check_shape_error([&] { attend(k, v, o, lse, in(3, 1, 3, 5)); }, forward, "bias",
                    {"3x1x3x5", "2x4x3x5"});
  check_shape_error([&] { attend(k, v, o, lse, in(1, 2, 3, 5)); }, forward, "bias",
                    {"1x2x3x5", "2x4x3x5"});
  const std::vector<std::size_t> three_lengths = {5, 5, 5};
  attention_options bad_lengths;
  bad_lengths.key_lengths = three_lengths;
  check_shape_error([&] { attend(k, v, o, lse, {}, bad_lengths); }, forward, "key_lengths",
                    {"3 values", "expected 2"});
  CHECK(std::all_of(out.begin(), out.end(), [](double x) { return x == sentinel; }));
  CHECK(std::all_of(out2.begin(), out2.end(), [](double x) { return x == sentinel; }));

  const auto d_o = in(2, 4, 3, 8);
  const auto dq = to(out, 2, 4, 3, 8), dk = to(out2, 2, 2, 5, 8), dv = to(out3, 2, 2, 5, 8);
  const auto back = [&](heads_view<const double> k_, heads_view<const double> d_o_,
                        heads_view<double> dq_, heads_view<double> dk_, heads_view<double> dv_,
                        heads_view<const double> bias_ = {},
                        const attention_options& options = {}) {
    reference::attention_backward(q, k_, v, d_o_, dq_, dk_, dv_, options, bias_);
  };
  check_shape_error([&] { back(in(2, 2, 5, 9), d_o, dq, dk, dv); }, backward, "k",
                    {"2x2x5x9", "2x2x5x8"});
  check_shape_error([&] { back(k, in(2, 4, 3, 7), dq, dk, dv); }, backward, "d_o",
                    {"2x4x3x7", "2x4x3x8"});
  check_shape_error([&] { back(k, d_o, to(out, 2, 4, 2, 8), dk, dv); }, backward, "dq",
                    {"2x4x2x8", "2x4x3x8"});
  check_shape_error([&] { back(k, d_o, dq, to(out2, 2, 4, 5, 8), dv); }, backward, "dk",
                    {"2x4x5x8", "2x2x5x8"});
  check_shape_error([&] { back(k, d_o, dq, dk, to(out3, 2, 2, 5, 9)); }, backward, "dv",
                    {"2x2x5x9", "2x2x5x8"});
  check_shape_error([&] { back(k, d_o, dq, dk, dv, in(2, 4, 4, 5)); }, backward, "bias",
                    {"2x4x4x5", "2x4x3x5"});
  check_shape_error([&] { back(k, d_o, dq, dk, dv, {}, bad_lengths); }, backward, "key_lengths",
                    {"3 values", "expected 2"});
  for (const auto* values : {&out, &out2, &out3}) {
    CHECK(std::all_of(values->begin(), values->end(), [](double x) { return x == sentinel; }));
  }
}

}  // namespace
}  // namespace tilekern
