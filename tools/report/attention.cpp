// Flash attention (kernels/attention.hpp), forward: throughput and error against
// reference::attention in fp64 for each input format (q, k and v in one format, or bf16 queries
// with fp8 keys and values), o in float.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "report/sections.hpp"
#include "tilekern/kernels/attention.hpp"
#include "tilekern/reference/attention.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern::report {
namespace {

// batch 1, heads x seq x head_dim, seq_q = seq_k, kv_heads = heads.
struct shape {
  std::size_t heads, seq, dim;
};
shape shape_for(const settings& options) {
  return options.quick ? shape{2, 128, 64} : shape{4, 256, 64};
}

template <class T>
std::string name_of() {
  if constexpr (std::is_same_v<T, float>) {
    return "float";
  } else {
    return format_name<T>();
  }
}

// N(0, 1) samples rounded to T (nearest even), and the values T holds, in double.
template <class T>
struct operand {
  std::vector<T> values;
  std::vector<double> exact;

  explicit operand(const std::vector<float>& samples) {
    if constexpr (std::is_same_v<T, float>) {
      values = samples;
    } else {
      values.resize(samples.size());
      convert(std::span<const float>(samples), std::span<T>(values));
    }
    for (const T& v : values) exact.push_back(static_cast<double>(v));
  }
};

// One row: attention of Q queries with KV keys and values into float o, one thread.
template <class Q, class KV>
void add_row(const settings& options, table& result, bool causal = false) {
  if (!options.wants(name_of<Q>()) && !options.wants(name_of<KV>())) return;
  const auto [heads, seq, dim] = shape_for(options);
  const std::size_t n = heads * seq * dim;
  const operand<Q> q(normal_inputs(n, 21));
  const operand<KV> k(normal_inputs(n, 22)), v(normal_inputs(n, 23));
  std::vector<float> o(n), lse(heads * seq);
  attention_options call;
  call.causal = causal;
  call.threads = 1;
  const auto heads_of = [&](const auto& x) {
    using T = typename std::remove_cvref_t<decltype(x)>::value_type;
    return heads_view<const T>(x.data(), 1, heads, seq, dim);
  };
  const double seconds = median_seconds(options.runs(), [&] {
    attention(heads_of(q.values), heads_of(k.values), heads_of(v.values),
              heads_view<float>(o.data(), 1, heads, seq, dim),
              heads_view<float>(lse.data(), 1, heads, seq, 1), call);
    keep(o.data());
  });

  // Against fp64 on the values the kernel reads.
  std::vector<double> want(n), want_lse(heads * seq);
  reference::attention(heads_of(q.exact), heads_of(k.exact), heads_of(v.exact),
                       heads_view<double>(want.data(), 1, heads, seq, dim),
                       heads_view<double>(want_lse.data(), 1, heads, seq, 1), call);
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    largest = std::max(largest, std::abs(want[i]));
    const double error = std::abs(static_cast<double>(o[i]) - want[i]);
    worst = std::isnan(error) ? error : std::max(worst, error);
  }
  const error_metrics error =
      measure_error(std::span<const double>(want), std::span<const float>(o));
  const double flops = 4.0 * static_cast<double>(seq * seq * dim * heads) / (causal ? 2 : 1);
  result.add_row({name_of<Q>(), name_of<KV>(), causal ? "causal" : "none",
                  cell("%.1f", flops / seconds * 1e-9), cell("%.3g", worst / largest),
                  cell("%.2f", error.sqnr_db)});
}

}  // namespace

table attention_section(const settings& options) {
  table result("attention (flash, forward)", {{"q", align::left},
                                              {"k, v", align::left},
                                              {"mask", align::left},
                                              {"GFLOPS"},
                                              {"err/max|o|"},
                                              {"SQNR dB"}});
  add_row<bf16, bf16>(options, result);
  add_row<bf16, bf16>(options, result, true);
  add_row<fp16, fp16>(options, result);
  add_row<fp8_e4m3, fp8_e4m3>(options, result);
  add_row<fp8_e5m2, fp8_e5m2>(options, result);
  add_row<bf16, fp8_e4m3>(options, result);
  const auto [heads, seq, dim] = shape_for(options);
  result.add_note(cell("%zu heads x %zu queries and keys x head_dim %zu (batch 1), q, k, v ~ ",
                       heads, seq, dim) +
                  "N(0, 1) rounded to their formats; default scale 1 / sqrt(head_dim); o and lse "
                  "in float; one thread.");
  result.add_note(
      "GFLOPS: 4 seq^2 head_dim per head (half for causal) over the median of the runs. "
      "err/max|o|: max |o - ref| / max |ref|, ref from reference::attention in fp64 on the values "
      "the kernel reads (the kernel's fp32 arithmetic alone: o is float); SQNR over every "
      "element.");
  return result;
}

}  // namespace tilekern::report
