// The vector and scalar engines' kernels: layernorm, rmsnorm, softmax and activations, in each
// format and rounding mode, with throughput and error against the fp64 references.
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "report/sections.hpp"
#include "tilekern/kernels/activation.hpp"
#include "tilekern/kernels/layernorm.hpp"
#include "tilekern/kernels/rmsnorm.hpp"
#include "tilekern/kernels/softmax.hpp"
#include "tilekern/reference/activation.hpp"
#include "tilekern/reference/layernorm.hpp"
#include "tilekern/reference/rmsnorm.hpp"
#include "tilekern/reference/softmax.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern::report {
namespace {

constexpr std::size_t cols = 768;  // the row length of ViT-B/16
constexpr float eps = 1e-6f;

template <class T>
std::string name_of() {
  if constexpr (std::is_same_v<T, float>) {
    return "float";
  } else {
    return format_name<T>();
  }
}

// values * scale + shift, rounded to T (nearest even), and the values T holds, in double.
template <class T>
struct tensor {
  std::vector<T> values;
  std::vector<double> exact;

  explicit tensor(std::vector<float> samples, float scale = 1, float shift = 0) {
    for (float& v : samples) v = v * scale + shift;
    if constexpr (std::is_same_v<T, float>) {
      values = samples;
    } else {
      values.resize(samples.size());
      convert(std::span<const float>(samples), std::span<T>(values));
    }
    for (const T& v : values) exact.push_back(static_cast<double>(v));
  }
};

template <class T>
void add_rows(const settings& options, table& result) {
  const std::size_t rows = options.elements() / cols, n = rows * cols;
  const tensor<T> x(normal_inputs(n), 2.0f);
  const tensor<T> gamma(normal_inputs(cols, 1), 0.1f, 1.0f), beta(normal_inputs(cols, 2), 0.1f);
  const view<const double> xd(x.exact.data(), rows, cols);
  const std::span<const double> gd(gamma.exact), bd(beta.exact);

  std::vector<double> layernorm_ref(n), rmsnorm_ref(n), softmax_ref(n);
  reference::layernorm(xd, gd, bd, eps, view<double>(layernorm_ref.data(), rows, cols));
  reference::rmsnorm(xd, gd, eps, view<double>(rmsnorm_ref.data(), rows, cols));
  reference::softmax(xd, 1.0, view<double>(softmax_ref.data(), rows, cols));

  std::vector<T> y(n);
  const view<const T> in(x.values.data(), rows, cols);
  const view<T> out(y.data(), rows, cols);
  std::vector<rounding> modes = {rounding::nearest_even};
  if constexpr (!std::is_same_v<T, float>) modes.push_back(rounding::stochastic);
  for (rounding mode : modes) {
    const cast_options cast{.round = mode};
    const std::string rounding_name = std::is_same_v<T, float> ? "-" : std::string(name(mode));
    // bytes read + written: x and y (gamma and beta, once per call, are left out)
    const double bytes = 2.0 * static_cast<double>(n * sizeof(T));
    const auto add = [&](const std::string& kernel, const std::vector<double>& reference,
                         auto&& run) {
      const double seconds = median_seconds(options.runs(), [&] {
        run();
        keep(y.data());
      });
      const error_metrics error =
          measure_error(std::span<const double>(reference), std::span<const T>(y));
      result.add_row({kernel, name_of<T>(), rounding_name, cell("%.1f", bytes / seconds * 1e-9),
                      cell("%.3g", error.max_relative), cell("%.2f", error.sqnr_db)});
    };
    add("layernorm", layernorm_ref, [&] {
      layernorm(in, std::span<const T>(gamma.values), std::span<const T>(beta.values), out, eps,
                cast);
    });
    add("rmsnorm", rmsnorm_ref,
        [&] { rmsnorm(in, std::span<const T>(gamma.values), out, eps, cast); });
    add("softmax", softmax_ref, [&] { softmax(in, out, {}, cast); });
    for (act f : {act::gelu_tanh, act::silu, act::exp}) {
      std::vector<double> reference(n);
      for (std::size_t i = 0; i < n; ++i) reference[i] = reference::activation(f, x.exact[i]);
      add(std::string("activation ") + std::string(name(f)), reference,
          [&] { activation(in, out, f, cast); });
    }
  }
}

}  // namespace

table normalization_section(const settings& options) {
  table result("normalization, softmax and activations (vector and scalar engines)",
               {{"kernel", align::left},
                {"format", align::left},
                {"rounding", align::left},
                {"GB/s"},
                {"max rel err"},
                {"SQNR dB"}});
  const auto rows_for = [&]<class T>() {
    if (options.wants(name_of<T>())) add_rows<T>(options, result);
  };
  rows_for.template operator()<float>();
  rows_for.template operator()<bf16>();
  rows_for.template operator()<fp16>();
  rows_for.template operator()<fp8_e4m3>();
  result.add_note(cell("%zu x %zu, x ~ N(0, 4) rounded to the format (gamma ~ 1 + N(0, 0.01), ",
                       options.elements() / cols, cols) +
                  "beta ~ N(0, 0.01), eps 1e-6); x, gamma, beta and y in the format; one thread.");
  result.add_note(
      "GB/s: bytes of x read + bytes of y written, over the median of the runs. Errors against "
      "the fp64 references (reference/) on the values the kernel reads: the format's rounding "
      "of y and the fp32 arithmetic inside. A max rel err of 1 or more comes from results below "
      "the format's smallest subnormal (flushed to 0, or stochastically rounded up to it): see "
      "SQNR for those formats.");
  return result;
}

}  // namespace tilekern::report
