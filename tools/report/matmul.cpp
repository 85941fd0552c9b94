// The tensor engine's matmul (kernels/matmul.hpp): throughput and error against fp64 for each
// pair of operand formats, C in float, and in bf16 with nearest and stochastic rounding; and the
// precision policies (Neuron's --auto-cast) on float operands.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "report/sections.hpp"
#include "tilekern/kernels/matmul.hpp"
#include "tilekern/reference/matmul.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern::report {
namespace {

// M x K x N: the qkv product of a ViT-B/16 encoder at batch 8 (8 x 197 tokens); --quick: a size
// large enough for the blocked kernel's steady state, small enough for a test.
struct shape {
  std::size_t m, k, n;
};
shape shape_for(const settings& options) {
  return options.quick ? shape{256, 512, 256} : shape{1576, 768, 2304};
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

std::string policy_name(auto_cast mode) {
  switch (mode) {
    case auto_cast::none:
      return "none";
    case auto_cast::matmult:
      return "matmult";
    case auto_cast::all:
      return "all";
  }
  return "?";
}

// One row: A x B -> C under Policy, B packed once (pack_b), one thread.
template <class Policy, class A, class B, class C>
void add_row(const settings& options, table& result, rounding round = rounding::nearest_even) {
  if (!options.wants(name_of<A>()) && !options.wants(name_of<B>())) return;
  const auto [m, k, n] = shape_for(options);
  const operand<A> a(normal_inputs(m * k, 11));
  const operand<B> b(normal_inputs(k * n, 12));
  std::vector<C> c(m * n);
  const view<const A> av(a.values.data(), m, k);
  const auto packed = pack_b<Policy>(view<const B>(b.values.data(), k, n));
  const matmul_options call{.cast = {.round = round, .seed = 7}, .threads = 1};
  const double seconds = median_seconds(options.runs(), [&] {
    matmul<Policy>(av, packed, view<C>(c.data(), m, n), call);
    keep(c.data());
  });

  // Against fp64 on the values the caller passed (before any cast of the policy).
  std::vector<double> want(m * n), magnitude(m * n);
  const view<const double> ad(a.exact.data(), m, k), bd(b.exact.data(), k, n);
  reference::matmul(ad, bd, view<double>(want.data(), m, n));
  reference::magnitude(ad, bd, view<double>(magnitude.data(), m, n));
  double bound_ratio = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double error = std::abs(static_cast<double>(c[i]) - want[i]);
    bound_ratio = std::max(bound_ratio, error / (static_cast<double>(k) * 0x1p-24 * magnitude[i]));
  }
  const error_metrics error = measure_error(std::span<const double>(want), std::span<const C>(c));

  using a_operand = policy_operand<Policy, A>;
  using b_operand = typename decltype(packed)::element_type;
  const tensor::path where = tensor::choose_path<a_operand, b_operand>();
  std::string policy = policy_name(Policy::mode);
  if (Policy::mode != auto_cast::none) {
    // Appended piece by piece: " " + name_of<...>() tripped gcc 12's -Wrestrict false positive
    // (GCC bug 105329) once the shape checks were inlined differently.
    policy += ' ';
    policy += name_of<typename Policy::cast_type>();
  }
  result.add_row({name_of<A>() + " x " + name_of<B>(), policy, name_of<C>(),
                  std::is_same_v<C, float> ? "-" : std::string(name(round)),
                  std::string(name(where.level)) +
                      (where.kind == tensor::compute::bf16_pairs ? " bf16 pairs" : " fp32 fma"),
                  cell("%.1f", 2.0 * static_cast<double>(m * k * n) / seconds * 1e-9),
                  cell("%.3g", bound_ratio), cell("%.3g", error.max_relative),
                  cell("%.2f", error.sqnr_db)});
}

}  // namespace

table matmul_section(const settings& options) {
  table result("matmul (tensor engine)", {{"A x B", align::left},
                                          {"auto-cast", align::left},
                                          {"C", align::left},
                                          {"rounding", align::left},
                                          {"path", align::left},
                                          {"GFLOPS"},
                                          {"err/(K u |A||B|)"},
                                          {"max rel err"},
                                          {"SQNR dB"}});
  using none = precision<>;
  const auto [m, k, n] = shape_for(options);
  add_row<none, bf16, bf16, float>(options, result);
  add_row<none, bf16, bf16, bf16>(options, result, rounding::nearest_even);
  add_row<none, bf16, bf16, bf16>(options, result, rounding::stochastic);
  add_row<none, bf16, fp8_e4m3, float>(options, result);
  add_row<none, bf16, fp8_e5m2, float>(options, result);
  add_row<none, bf16, fp8_e3m4, float>(options, result);
  add_row<none, fp16, fp16, float>(options, result);
  add_row<none, tf32, tf32, float>(options, result);
  add_row<none, float, float, float>(options, result);
  add_row<precision<auto_cast::matmult, bf16>, float, float, float>(options, result);
  add_row<precision<auto_cast::all, bf16>, float, float, float>(options, result);
  result.add_note(cell("%zu x %zu x %zu (M x K x N", m, k, n) +
                  (options.quick ? "" : ": ViT-B/16's qkv product at batch 8") +
                  "), A and B ~ N(0, 1) rounded to their formats; " +
                  "B packed once (pack_b); alpha 1, beta 0, no bias; one thread. auto-cast: the "
                  "precision policy (matmult: float operands rounded to the cast type; all: the "
                  "result too).");
  result.add_note(
      "GFLOPS: 2 M N K over the median of the runs. Errors against reference::matmul in fp64 on "
      "the operands as passed (before auto-cast). err/(K u |A||B|): the largest |c - ref| over "
      "K 2^-24 sum_k |a_ik b_kj|, at most 1 for fp32 accumulation (engine/tensor.hpp); C in bf16 "
      "adds its own rounding (about 2^-9 |c| relative), as auto-cast does to the operands.");
  return result;
}

}  // namespace tilekern::report
