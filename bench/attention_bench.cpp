// attention (kernels/attention.hpp), forward and backward, against oneDNN, one thread, in the same
// run:
//
//   attention/<format>/<heads>x<seq>x<head_dim>[/causal]       forward: o and lse from q, k, v
//   attention_bwd/<format>/<heads>x<seq>x<head_dim>[/causal]   backward: dq, dk, dv from q, k, v,
//                                                              o, d_o and lse
//   attention/onednn_<f32|bf16>/<heads>x<seq>x<head_dim>[/causal]
//                                   the same forward composed from oneDNN primitives (below)
// (Google Benchmark appends /manual_time.)
//
// Shapes (batch 1, heads x seq x head_dim, seq_q = seq_k, kv_heads = heads): 12x197x64 (a
// ViT-B/16 image), 12x1024x64, 12x4096x64, and 32x2048x128 causal. <format> is that of q, k and v,
// or <q>x<k and v> (bf16xfp8_e4m3: q bf16, k and v fp8_e4m3). bf16 at every shape, forward and
// backward; fp16, fp8_e4m3 and bf16xfp8_e4m3 at 12x1024x64. Inputs: q, k, v (and d_o, in q's
// format) N(0, 1) (mt19937, seeds 42, 43, 44, 45), rounded to their formats (nearest even). Outputs
// in fp32: o and lse (forward), and dq, dk, dv (backward; o and lse from one untimed forward call).
// Default scale 1 / sqrt(head_dim); options.threads = 1. The 12x4096x64 and causal rows run 2
// iterations (each call takes a second or more on the 2-core AVX2 machine).
//
// Counters (the benchmark's own time, UseManualTime, is the call's alone):
//   TFLOPS      forward: 4 seq_q seq_k head_dim flops per head (two products of 2 seq^2 head_dim),
//               half of that for causal (the visible half of the scores), / time; backward: 2.5x
//               the forward's flops (five products of that size: s again, d_o v^T, ds k, ds^T q,
//               p^T d_o), / time. The oneDNN rows count the same flops (on causal rows oneDNN
//               computes every score and masks: its TFLOPS is useful work, not what it executes)
//   peak_frac   TFLOPS / the peak of the tensor engine paths the kernel's products take
//               (tensor::choose_path of their operands' formats; q k^T may take bf16 pairs, p v is
//               float x v's format: fp32): the vdpbf16ps loop for pairs on hardware, else the
//               vfmadd231ps loop of the path's width (support/peak.hpp, measured once per
//               process), combined over the products (two in the forward, five in the backward,
//               of equal flops) as the harmonic mean. On an AVX2 machine every product takes the
//               fma_ymm path: peak_frac is TFLOPS / that loop's peak. oneDNN rows: the widest fma
//               loop this build runs
//   ref_err     max |x - x_ref| / max |x_ref| over sampled query rows (0, 1, seq / 3, seq / 2 and
//               seq - 1 of every head), x_ref in fp64 on the decoded inputs: o in the forward and
//               oneDNN rows, dq in the backward ones
//   onednn_err  forward rows: max |o - o_onednn| / max |o_onednn| over the whole output, o_onednn
//               from the oneDNN f32 composition on fp32 copies of the same values
//   dk_err      backward: identities of the exact gradients, checked on the whole output:
//   dv_err      every row of ds sums to 0 (softmax's gradient), so sum_j dk_j = 0, and every row
//               of p sums to 1, so sum_j dv_j = sum_i d_o_i; max over (head, column) of
//               |sum_j dk_j| (|sum_j dv_j - sum_i d_o_i|) / the largest sum_j |dk_j| (|dv_j|)
// The checks run once per row and process (at its first run, outside the timing); a row whose
// error passes 0.05 is skipped with an error instead of timed: the benchmark cannot time a broken
// kernel.
//
// oneDNN baseline (when the build found it, TILEKERN_HAVE_ONEDNN; one thread, as
// support/baselines.hpp runs it), per head: a matmul q k^T with the scale as output scale (and, on
// causal rows, a binary-add post-op of a seq x seq mask of 0 and the lowest float) into fp32
// scores, softmax_v2 (softmax_accurate) into p, a matmul p v into fp32 o. k is read in place as
// the transposed weights (format_tag::ba: no reorder, as k is an activation), one set of
// primitives and buffers serves every head. bf16 primitives (bf16 q, k, v and p) when oneDNN has a
// bf16 matmul for this CPU (oneDNN 2.6: AVX-512 and up; the benchmark tries to create them once),
// else f32 on fp32 copies; the name says which, the label names the implementations. Inputs are
// those of the bf16 row of the shape.
//
// Timing (support/timing.hpp): the calling thread's CPU time, as the other benchmarks (on this
// shared machine the wall clock mostly measures waiting to be scheduled), after one untimed call.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "support/baselines.hpp"
#include "support/peak.hpp"
#include "support/tensors.hpp"
#include "support/timing.hpp"
#include "tilekern/engine/tensor.hpp"
#include "tilekern/kernels/attention.hpp"
#include "tilekern/kernels/attention_options.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

using bench::decoded;
using bench::name_of;
using bench::normal_tensor;

struct shape {
  std::size_t heads, seq, dim;
  bool causal = false;

  std::size_t elements() const { return heads * seq * dim; }
  // Forward flops (see the top).
  double flops() const {
    const double all = 4.0 * static_cast<double>(seq * seq * dim * heads);
    return causal ? all / 2 : all;
  }
  attention_options options() const {
    attention_options result;  // (designated initializers that skip key_lengths trip
    result.causal = causal;    // -Wmissing-field-initializers)
    result.threads = 1;
    return result;
  }
  float scale() const { return detail::attention_scale(options(), dim); }
};

constexpr shape vit{12, 197, 64};
constexpr shape mid{12, 1024, 64};
constexpr shape wide{12, 4096, 64};
constexpr shape causal{32, 2048, 128, true};

constexpr double tolerance = 0.05;
constexpr double backward_factor = 2.5;

// q, k, v (batch 1) in their formats, and fp64 copies of the values they hold.
template <class Q, class KV>
struct inputs {
  shape s;
  std::vector<Q> q;
  std::vector<KV> k, v;

  explicit inputs(shape of)
      : s(of),
        q(normal_tensor<Q>(of.elements(), 42)),
        k(normal_tensor<KV>(of.elements(), 43)),
        v(normal_tensor<KV>(of.elements(), 44)) {}

  template <class T>
  heads_view<const T> tensor(const std::vector<T>& x) const {
    return {x.data(), 1, s.heads, s.seq, s.dim};
  }
};

template <class T>
std::vector<float> widened(const std::vector<T>& values) {
  if constexpr (std::is_same_v<T, float>) {
    return values;
  } else {
    std::vector<float> result(values.size());
    convert(std::span<const T>(values), std::span<float>(result));
    return result;
  }
}

// The sampled query rows of each head (ref_err).
std::vector<std::size_t> sampled_rows(std::size_t seq) {
  std::vector<std::size_t> rows = {0, 1, seq / 3, seq / 2, seq - 1};
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

// fp64 attention of query i of head h on the decoded values (contiguous, batch 1): p over the
// visible keys [0, p.size()) and o.
struct exact_row {
  std::vector<double> p, o;

  exact_row(const std::vector<double>& q, const std::vector<double>& k,
            const std::vector<double>& v, shape s, std::size_t h, std::size_t i) {
    const std::size_t keys = detail::visible_keys(s.options(), 0, i, s.seq, s.seq);
    const double* qi = q.data() + (h * s.seq + i) * s.dim;
    const double* kh = k.data() + h * s.seq * s.dim;
    const double* vh = v.data() + h * s.seq * s.dim;
    p.resize(keys);
    o.assign(s.dim, 0.0);
    double top = -std::numeric_limits<double>::infinity(), sum = 0;
    for (std::size_t j = 0; j < keys; ++j) {
      double dot = 0;
      for (std::size_t c = 0; c < s.dim; ++c) dot += qi[c] * kh[j * s.dim + c];
      p[j] = static_cast<double>(s.scale()) * dot;
      top = std::max(top, p[j]);
    }
    for (double& x : p) sum += (x = std::exp(x - top));
    for (std::size_t j = 0; j < keys; ++j) {
      p[j] /= sum;
      for (std::size_t c = 0; c < s.dim; ++c) o[c] += p[j] * vh[j * s.dim + c];
    }
  }
};

// max |x - want| / max |want| over pairs of rows (want, x).
struct relative_error {
  double difference = 0, scale = 0;

  void add(std::span<const double> want, std::span<const float> x) {
    for (std::size_t c = 0; c < want.size(); ++c) {
      const double d = std::abs(static_cast<double>(x[c]) - want[c]);
      difference =
          std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(difference, d);
      scale = std::max(scale, std::abs(want[c]));
    }
  }
  double value() const { return scale > 0 ? difference / scale : difference; }
};

// ref_err of a forward output o (contiguous fp32, batch 1).
double forward_error(const std::vector<double>& q, const std::vector<double>& k,
                     const std::vector<double>& v, shape s, const std::vector<float>& o) {
  relative_error error;
  for (std::size_t h = 0; h < s.heads; ++h) {
    for (const std::size_t i : sampled_rows(s.seq)) {
      const exact_row row(q, k, v, s, h, i);
      error.add(row.o, std::span<const float>(o).subspan((h * s.seq + i) * s.dim, s.dim));
    }
  }
  return error.value();
}

// The peak of the tensor engine path a product of A and B takes (tensor::choose_path; 0: none
// measured): the vdpbf16ps loop for bf16 pairs on hardware, else the fma loop of the path's width
// (the emulated pairs are two vfmadd231ps per pair: the fma peak).
template <class A, class B>
double path_peak() {
  const tensor::path where = tensor::choose_path<A, B>();
  if (where.kind == tensor::compute::bf16_pairs && !tensor::bf16_pairs_emulated()) {
    return bench::peak_gflops(bench::peak_loop::bf16_pairs);
  }
  if (where.level >= isa::avx512) return bench::peak_gflops(bench::peak_loop::fma_zmm);
  if (where.level >= isa::avx2) return bench::peak_gflops(bench::peak_loop::fma_ymm);
  return 0;
}

// The peak of products of equal flops run one after the other on their paths: the harmonic mean
// of their peaks (0 if one is unknown).
double combined_peak(std::initializer_list<double> peaks) {
  double seconds_per_flop = 0;
  for (const double peak : peaks) {
    if (peak <= 0) return 0;
    seconds_per_flop += 1 / peak;
  }
  return static_cast<double>(peaks.size()) / seconds_per_flop;
}

// The forward's products: s = q k^T (Q x K), then acc += p v (float x V).
template <class Q, class KV>
double forward_peak() {
  return combined_peak({path_peak<Q, KV>(), path_peak<float, KV>()});
}

// The backward's five: s = q k^T, dv += p^T d_o, dp = d_o v^T, dk += ds^T q, dq += ds k (d_o in
// q's format).
template <class Q, class KV>
double backward_peak() {
  return combined_peak({path_peak<Q, KV>(), path_peak<float, Q>(), path_peak<Q, KV>(),
                        path_peak<float, Q>(), path_peak<float, KV>()});
}

void report_speed(benchmark::State& state, double flops, double seconds, double peak_gflops) {
  const double per_second = flops * static_cast<double>(state.iterations()) / seconds;
  state.counters["TFLOPS"] = per_second * 1e-12;
  if (peak_gflops > 0) state.counters["peak_frac"] = per_second * 1e-9 / peak_gflops;
}

#if TILEKERN_HAVE_ONEDNN

// The widest fma loop this build runs (the oneDNN rows' peak).
double widest_fma_peak() {
  const double zmm = bench::peak_gflops(bench::peak_loop::fma_zmm);
  return zmm > 0 ? zmm : bench::peak_gflops(bench::peak_loop::fma_ymm);
}

// The forward composed from oneDNN 2.6 primitives (see the top): o (fp32) from q, k, v, all
// contiguous [heads, seq, dim] in `type` in the caller's memory, which must outlive this object.
class onednn_attention {
 public:
  onednn_attention(bench::dnnl_type type, shape s, const void* q, const void* k, const void* v,
                   float* o)
      : heads_(s.heads) {
    using dnnl::memory;
    using tag = memory::format_tag;
    const bench::detail::single_thread one;
    const auto seq = static_cast<memory::dim>(s.seq), dim = static_cast<memory::dim>(s.dim);
    const memory::data_type data =
        type == bench::dnnl_type::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::desc q_desc({seq, dim}, data, tag::ab), kt_desc({dim, seq}, data, tag::ba),
        v_desc({seq, dim}, data, tag::ab), p_desc({seq, seq}, data, tag::ab),
        scores_desc({seq, seq}, memory::data_type::f32, tag::ab),
        o_desc({seq, dim}, memory::data_type::f32, tag::ab);

    dnnl::primitive_attr scores_attr;
    scores_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    scores_attr.set_output_scales(0, {s.scale()});
    if (s.causal) {
      mask_.assign(s.seq * s.seq, 0.0f);
      for (std::size_t i = 0; i < s.seq; ++i) {
        for (std::size_t j = i + 1; j < s.seq; ++j) {
          mask_[i * s.seq + j] = std::numeric_limits<float>::lowest();
        }
      }
      dnnl::post_ops add_mask;
      add_mask.append_binary(dnnl::algorithm::binary_add, scores_desc);
      scores_attr.set_post_ops(add_mask);
    }
    const dnnl::matmul::primitive_desc scores(dnnl::matmul::desc(q_desc, kt_desc, scores_desc),
                                              scores_attr, engine_);
    dnnl::primitive_attr user;
    user.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::softmax_v2_forward::primitive_desc softmax(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference,
                                       dnnl::algorithm::softmax_accurate, scores_desc, p_desc,
                                       /*softmax_axis=*/1),
        user, engine_);
    const dnnl::matmul::primitive_desc values(dnnl::matmul::desc(p_desc, v_desc, o_desc), user,
                                              engine_);
    implementation_ = std::string("matmul ") + scores.impl_info_str() + ", softmax " +
                      softmax.impl_info_str() + ", matmul " + values.impl_info_str();

    steps_ = {dnnl::matmul(scores), dnnl::softmax_v2_forward(softmax), dnnl::matmul(values)};
    scores_ = memory(scores_desc, engine_);
    p_ = memory(p_desc, engine_);
    const memory::desc scratch[] = {scores.scratchpad_desc(), softmax.scratchpad_desc(),
                                    values.scratchpad_desc()};
    const std::size_t element = type == bench::dnnl_type::bf16 ? 2 : 4;
    const auto at = [&](const void* base, std::size_t h) {
      return const_cast<std::byte*>(static_cast<const std::byte*>(base)) +
             h * s.seq * s.dim * element;
    };
    for (int step = 0; step < 3; ++step) scratchpads_.emplace_back(scratch[step], engine_);
    for (std::size_t h = 0; h < heads_; ++h) {
      std::unordered_map<int, memory> first = {
          {DNNL_ARG_SRC, memory(q_desc, engine_, at(q, h))},
          {DNNL_ARG_WEIGHTS, memory(kt_desc, engine_, at(k, h))},
          {DNNL_ARG_DST, scores_},
          {DNNL_ARG_SCRATCHPAD, scratchpads_[0]}};
      if (s.causal) {
        first.insert({DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                      memory(scores_desc, engine_, mask_.data())});
      }
      arguments_.push_back(std::move(first));
      arguments_.push_back(
          {{DNNL_ARG_SRC, scores_}, {DNNL_ARG_DST, p_}, {DNNL_ARG_SCRATCHPAD, scratchpads_[1]}});
      arguments_.push_back({{DNNL_ARG_SRC, p_},
                            {DNNL_ARG_WEIGHTS, memory(v_desc, engine_, at(v, h))},
                            {DNNL_ARG_DST, memory(o_desc, engine_, o + h * s.seq * s.dim)},
                            {DNNL_ARG_SCRATCHPAD, scratchpads_[2]}});
    }
  }

  void run() {
    const bench::detail::single_thread one;
    for (std::size_t h = 0; h < heads_; ++h) {
      for (std::size_t step = 0; step < 3; ++step) {
        steps_[step].execute(stream_, arguments_[3 * h + step]);
      }
    }
    stream_.wait();
  }

  // oneDNN's implementations of the three steps, e.g. "matmul gemm:jit, softmax jit:avx2, ...".
  const std::string& implementation() const { return implementation_; }

 private:
  std::size_t heads_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::vector<dnnl::primitive> steps_;
  std::vector<float> mask_;
  dnnl::memory scores_, p_;
  std::vector<dnnl::memory> scratchpads_;
  std::vector<std::unordered_map<int, dnnl::memory>> arguments_;
  std::string implementation_;
};

// Whether oneDNN has the bf16 primitives of the composition for this CPU (tried once).
bool onednn_has_bf16() {
  static const bool has = [] {
    const shape tiny{1, 16, 16};
    std::vector<bf16> x(tiny.elements());
    std::vector<float> o(tiny.elements());
    try {
      const onednn_attention probe(bench::dnnl_type::bf16, tiny, x.data(), x.data(), x.data(),
                                   o.data());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

// o from the oneDNN f32 composition on fp32 copies of the inputs (the forward rows' onednn_err).
template <class Q, class KV>
std::vector<float> onednn_output(const inputs<Q, KV>& x) {
  const std::vector<float> q = widened(x.q), k = widened(x.k), v = widened(x.v);
  std::vector<float> o(x.s.elements());
  onednn_attention composed(bench::dnnl_type::f32, x.s, q.data(), k.data(), v.data(), o.data());
  composed.run();
  return o;
}

void onednn_row(benchmark::State& state, const std::string& key, shape s) {
  const inputs<bf16, bf16> x(s);
  const bool bf16_primitives = onednn_has_bf16();
  const std::vector<float> q = widened(x.q), k = widened(x.k), v = widened(x.v);
  std::vector<float> o(s.elements());
  std::unique_ptr<onednn_attention> composed;
  if (bf16_primitives) {
    composed = std::make_unique<onednn_attention>(bench::dnnl_type::bf16, s, x.q.data(), x.k.data(),
                                                  x.v.data(), o.data());
  } else {
    composed = std::make_unique<onednn_attention>(bench::dnnl_type::f32, s, q.data(), k.data(),
                                                  v.data(), o.data());
  }
  composed->run();
  static std::map<std::string, double> known;  // the inputs are the same every run
  if (!known.count(key)) known[key] = forward_error(decoded(x.q), decoded(x.k), decoded(x.v), s, o);
  state.counters["ref_err"] = known[key];
  if (!(known[key] <= tolerance)) {
    state.SkipWithError("the oneDNN composition's output is not attention's (ref_err)");
    return;
  }
  state.SetLabel(composed->implementation());
  double seconds = 0;
  bench::time_against(
      state, [&] { composed->run(); }, {}, seconds);
  report_speed(state, s.flops(), seconds, widest_fma_peak());
}

#endif  // TILEKERN_HAVE_ONEDNN

struct forward_checks {
  double reference = 0;
  double onednn = -1;  // -1: no oneDNN in this build
};

template <class Q, class KV>
void forward(benchmark::State& state, const std::string& key, shape s) {
  const inputs<Q, KV> x(s);
  std::vector<float> o(s.elements()), lse(s.heads * s.seq);
  const heads_view<float> ov(o.data(), 1, s.heads, s.seq, s.dim);
  const heads_view<float> lv(lse.data(), 1, s.heads, s.seq, 1);
  const attention_options options = s.options();
  const auto kernel = [&] {
    attention(x.tensor(x.q), x.tensor(x.k), x.tensor(x.v), ov, lv, options);
  };
  kernel();

  static std::map<std::string, forward_checks> known;  // the inputs are the same every run
  if (!known.count(key)) {
    forward_checks checks;
    checks.reference = forward_error(decoded(x.q), decoded(x.k), decoded(x.v), s, o);
#if TILEKERN_HAVE_ONEDNN
    const std::vector<float> want = onednn_output(x);
    relative_error error;
    for (std::size_t i = 0; i < o.size(); i += s.dim) {
      const std::vector<double> row(want.begin() + static_cast<std::ptrdiff_t>(i),
                                    want.begin() + static_cast<std::ptrdiff_t>(i + s.dim));
      error.add(row, std::span<const float>(o).subspan(i, s.dim));
    }
    checks.onednn = error.value();
#endif
    known[key] = checks;
  }
  const forward_checks& checks = known[key];
  state.counters["ref_err"] = checks.reference;
  if (checks.onednn >= 0) state.counters["onednn_err"] = checks.onednn;
  if (!(checks.reference <= tolerance) || checks.onednn > tolerance || std::isnan(checks.onednn)) {
    state.SkipWithError("attention's output differs from fp64 / oneDNN (ref_err, onednn_err)");
    return;
  }
  double seconds = 0;
  bench::time_against(state, kernel, {}, seconds);
  report_speed(state, s.flops(), seconds, forward_peak<Q, KV>());
}

struct backward_checks {
  double dq = 0, dk = 0, dv = 0;
};

// ref_err, dk_err and dv_err of a backward's outputs (see the top), all contiguous, batch 1.
template <class Q, class KV>
backward_checks check_backward(const inputs<Q, KV>& x, const std::vector<Q>& d_o,
                               const std::vector<float>& dq, const std::vector<float>& dk,
                               const std::vector<float>& dv) {
  const shape s = x.s;
  const std::vector<double> q = decoded(x.q), k = decoded(x.k), v = decoded(x.v), g = decoded(d_o);
  const double scale = s.scale();
  backward_checks result;
  relative_error dq_error;
  for (std::size_t h = 0; h < s.heads; ++h) {
    for (const std::size_t i : sampled_rows(s.seq)) {
      // dq_i = scale sum_j p_j (d_o_i . v_j - d_o_i . o_i) k_j
      const exact_row row(q, k, v, s, h, i);
      const double* gi = g.data() + (h * s.seq + i) * s.dim;
      double delta = 0;
      for (std::size_t c = 0; c < s.dim; ++c) delta += gi[c] * row.o[c];
      std::vector<double> want(s.dim, 0.0);
      for (std::size_t j = 0; j < row.p.size(); ++j) {
        const double* vj = v.data() + (h * s.seq + j) * s.dim;
        const double* kj = k.data() + (h * s.seq + j) * s.dim;
        double dp = 0;
        for (std::size_t c = 0; c < s.dim; ++c) dp += gi[c] * vj[c];
        const double ds = row.p[j] * (dp - delta);
        for (std::size_t c = 0; c < s.dim; ++c) want[c] += scale * ds * kj[c];
      }
      dq_error.add(want, std::span<const float>(dq).subspan((h * s.seq + i) * s.dim, s.dim));
    }
  }
  result.dq = dq_error.value();
  double dk_worst = 0, dk_size = 0, dv_worst = 0, dv_size = 0;
  for (std::size_t h = 0; h < s.heads; ++h) {
    for (std::size_t c = 0; c < s.dim; ++c) {
      double dk_sum = 0, dk_abs = 0, dv_sum = 0, dv_abs = 0, g_sum = 0;
      for (std::size_t j = 0; j < s.seq; ++j) {
        const std::size_t at = (h * s.seq + j) * s.dim + c;
        dk_sum += dk[at];
        dk_abs += std::abs(static_cast<double>(dk[at]));
        dv_sum += dv[at];
        dv_abs += std::abs(static_cast<double>(dv[at]));
        g_sum += g[at];
      }
      dk_worst = std::max(dk_worst, std::abs(dk_sum));
      dv_worst = std::max(dv_worst, std::abs(dv_sum - g_sum));
      dk_size = std::max(dk_size, dk_abs);
      dv_size = std::max(dv_size, dv_abs);
      if (std::isnan(dk_sum) || std::isnan(dv_sum)) {
        dk_worst = dv_worst = std::numeric_limits<double>::infinity();
      }
    }
  }
  result.dk = dk_size > 0 ? dk_worst / dk_size : dk_worst;
  result.dv = dv_size > 0 ? dv_worst / dv_size : dv_worst;
  return result;
}

template <class Q, class KV>
void backward(benchmark::State& state, const std::string& key, shape s) {
  const inputs<Q, KV> x(s);
  const std::vector<Q> d_o = normal_tensor<Q>(s.elements(), 45);
  std::vector<float> o(s.elements()), lse(s.heads * s.seq);
  std::vector<float> dq(s.elements()), dk(s.elements()), dv(s.elements());
  const auto tensor = [&](std::vector<float>& t) {
    return heads_view<float>(t.data(), 1, s.heads, s.seq, s.dim);
  };
  const heads_view<float> lv(lse.data(), 1, s.heads, s.seq, 1);
  const attention_options options = s.options();
  attention(x.tensor(x.q), x.tensor(x.k), x.tensor(x.v), tensor(o), lv, options);
  const heads_view<const float> ov = tensor(o), lse_view = lv;
  const auto kernel = [&] {
    attention_backward(x.tensor(x.q), x.tensor(x.k), x.tensor(x.v), ov, x.tensor(d_o), lse_view,
                       tensor(dq), tensor(dk), tensor(dv), options);
  };
  kernel();

  static std::map<std::string, backward_checks> known;  // the inputs are the same every run
  if (!known.count(key)) known[key] = check_backward(x, d_o, dq, dk, dv);
  const backward_checks& checks = known[key];
  state.counters["ref_err"] = checks.dq;
  state.counters["dk_err"] = checks.dk;
  state.counters["dv_err"] = checks.dv;
  if (!(checks.dq <= tolerance && checks.dk <= tolerance && checks.dv <= tolerance)) {
    state.SkipWithError("attention_backward's gradients are wrong (ref_err, dk_err, dv_err)");
    return;
  }
  double seconds = 0;
  bench::time_against(state, kernel, {}, seconds);
  report_speed(state, backward_factor * s.flops(), seconds, backward_peak<Q, KV>());
}

// "<kernel>/<format>/<heads>x<seq>x<dim>[/causal]" (appended piece by piece: "/" +
// std::to_string(...) trips GCC 12's -Wrestrict false positive, GCC bug 105651).
std::string row_name(const std::string& kernel, const std::string& format, shape s) {
  std::string name = kernel;
  name += '/';
  name += format;
  name += '/';
  name += std::to_string(s.heads);
  name += 'x';
  name += std::to_string(s.seq);
  name += 'x';
  name += std::to_string(s.dim);
  if (s.causal) name += "/causal";
  return name;
}

template <class Q, class KV>
std::string format_of() {
  if constexpr (std::is_same_v<Q, KV>) {
    return name_of<Q>();
  } else {
    return name_of<Q>() + "x" + name_of<KV>();
  }
}

void add(const std::string& name, shape s, std::function<void(benchmark::State&)> body) {
  auto* added =
      benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& state) { body(state); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
  if (s.flops() >= 1e10) added->Iterations(2);  // a second or more per call
}

template <class Q, class KV>
void add_rows(shape s) {
  const std::string forward_name = row_name("attention", format_of<Q, KV>(), s);
  add(forward_name, s, [=](benchmark::State& state) { forward<Q, KV>(state, forward_name, s); });
  const std::string backward_name = row_name("attention_bwd", format_of<Q, KV>(), s);
  add(backward_name, s, [=](benchmark::State& state) { backward<Q, KV>(state, backward_name, s); });
}

const bool registered = [] {
  for (const shape& s : {vit, mid, wide, causal}) {
    add_rows<bf16, bf16>(s);
#if TILEKERN_HAVE_ONEDNN
    const std::string name =
        row_name("attention", onednn_has_bf16() ? "onednn_bf16" : "onednn_f32", s);
    add(name, s, [=](benchmark::State& state) { onednn_row(state, name, s); });
#endif
    if (s.seq == mid.seq && s.heads == mid.heads && !s.causal) {
      add_rows<fp16, fp16>(s);
      add_rows<fp8_e4m3, fp8_e4m3>(s);
      add_rows<bf16, fp8_e4m3>(s);
    }
  }
  return true;
}();

}  // namespace
}  // namespace tilekern
