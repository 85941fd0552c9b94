// Custom operators, written over xsimd batches and run by engine/gpsimd: throughput and error
// against an fp64 reference, for each output format and rounding mode.
#include "tilekern/engine/gpsimd.hpp"  // first: it silences GCC 12's xsimd warnings (see there)

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "report/sections.hpp"
#include "support/gpsimd_operators.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern::report {
namespace {

constexpr std::size_t cols = 768;  // row length of bias_gelu and rmsnorm

using namespace gpsimd_operators;  // bench/support/gpsimd_operators.hpp

// ---- the fp64 references, on the values the operators see ----

double gelu_erf(double x) {
  return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
}

// ---- tensors ----

template <class T>
std::string name_of() {
  if constexpr (std::is_same_v<T, float>) {
    return "float";
  } else {
    return format_name<T>();
  }
}

// values * scale + shift, rounded to T (nearest even).
template <class T>
std::vector<T> tensor(std::vector<float> values, float scale = 1, float shift = 0) {
  for (float& v : values) v = v * scale + shift;
  if constexpr (std::is_same_v<T, float>) {
    return values;
  } else {
    std::vector<T> result(values.size());
    convert(std::span<const float>(values), std::span<T>(result));
    return result;
  }
}

template <class T>
std::vector<double> exact(const std::vector<T>& values) {
  std::vector<double> result;
  result.reserve(values.size());
  for (const T& v : values) result.push_back(static_cast<double>(v));
  return result;
}

template <class T>
void add_rows(const settings& options, table& result) {
  const std::size_t n = options.elements();
  const std::size_t rows = n / cols;
  const std::size_t matrix = rows * cols;  // bias_gelu and rmsnorm: rows x cols
  const std::vector<T> x = tensor<T>(normal_inputs(n));
  const std::vector<T> bias = tensor<T>(normal_inputs(cols, 1), 0.1f);
  const std::vector<T> gamma = tensor<T>(normal_inputs(cols, 2), 0.1f, 1.0f);
  const std::vector<double> xd = exact(x), bd = exact(bias), gd = exact(gamma);

  std::vector<double> relu_ref(n), gelu_ref(n), tanh_ref(n), dtanh_ref(n);
  for (std::size_t i = 0; i < n; ++i) {
    relu_ref[i] = std::max(xd[i], 0.0);
    gelu_ref[i] = gelu_erf(xd[i]);
    tanh_ref[i] = std::tanh(xd[i]);
    dtanh_ref[i] = 1 / (std::cosh(xd[i]) * std::cosh(xd[i]));
  }
  std::vector<double> bias_gelu_ref(matrix), rmsnorm_ref(matrix);
  for (std::size_t r = 0; r < rows; ++r) {
    double squares = 0;
    for (std::size_t c = 0; c < cols; ++c) squares += xd[r * cols + c] * xd[r * cols + c];
    const double scale = 1 / std::sqrt(squares / cols + 1e-6);
    for (std::size_t c = 0; c < cols; ++c) {
      bias_gelu_ref[r * cols + c] = gelu_erf(xd[r * cols + c] + bd[c]);
      rmsnorm_ref[r * cols + c] = xd[r * cols + c] * scale * gd[c];
    }
  }

  std::vector<T> y(n), y1(n);
  const std::span<const T> in(x);
  const std::span<const T> out(y), out1(y1), out_matrix(y.data(), matrix);
  std::vector<rounding> modes = {rounding::nearest_even};
  if constexpr (!std::is_same_v<T, float>) modes.push_back(rounding::stochastic);
  for (rounding mode : modes) {
    const gpsimd::options opt{.cast = {.round = mode}, .threads = 1};
    const std::string rounding_name = std::is_same_v<T, float> ? "-" : std::string(name(mode));
    const auto add = [&](const char* op, std::size_t count, double seconds,
                         const std::vector<double>& reference, std::span<const T> output) {
      const error_metrics error = measure_error(std::span<const double>(reference), output);
      result.add_row({op, name_of<T>(), rounding_name,
                      cell("%.2f", giga_per_second(count, seconds)),
                      cell("%.3g", error.max_relative), cell("%.2f", error.sqnr_db)});
    };
    const auto elementwise = [&](auto op, auto inputs, auto outputs) {
      return median_seconds(options.runs(), [&] {
        gpsimd::elementwise(op, inputs, outputs, opt);
        keep(y.data());
      });
    };
    const auto x_view = gpsimd::inputs(in);
    const auto y_view = gpsimd::outputs(std::span<T>(y));
    add("relu", n, elementwise(relu_op(), x_view, y_view), relu_ref, out);
    add("gelu_erf", n, elementwise(gelu_erf_op(), x_view, y_view), gelu_ref, out);
    add("bias_gelu", matrix,
        elementwise(bias_gelu_op(),
                    gpsimd::inputs(view<const T>(x.data(), rows, cols),
                                   view<const T>(bias.data(), 1, cols)),
                    gpsimd::outputs(view<T>(y.data(), rows, cols))),
        bias_gelu_ref, out_matrix);
    const double tanh_seconds = elementwise(tanh_derivative_op(), x_view,
                                            gpsimd::outputs(std::span<T>(y), std::span<T>(y1)));
    add("tanh_derivative: tanh", n, tanh_seconds, tanh_ref, out);
    add("tanh_derivative: 1 - tanh^2", n, tanh_seconds, dtanh_ref, out1);
    const double rmsnorm_seconds = median_seconds(options.runs(), [&] {
      gpsimd::rowwise(rmsnorm_op(),
                      gpsimd::inputs(gpsimd::streamed(view<const T>(x.data(), rows, cols)),
                                     view<const T>(gamma.data(), 1, cols)),
                      gpsimd::outputs(view<T>(y.data(), rows, cols)), opt);
      keep(y.data());
    });
    add("rmsnorm", matrix, rmsnorm_seconds, rmsnorm_ref, out_matrix);
  }
}

}  // namespace

table gpsimd_section(const settings& options) {
  table result("custom operators (gpsimd)", {{"operator", align::left},
                                             {"format", align::left},
                                             {"rounding", align::left},
                                             {"G/s"},
                                             {"max rel err"},
                                             {"SQNR dB"}});
  const auto rows_for = [&]<class T>() {
    if (options.wants(name_of<T>())) add_rows<T>(options, result);
  };
  rows_for.template operator()<bf16>();
  rows_for.template operator()<fp16>();
  rows_for.template operator()<fp8_e4m3>();
  rows_for.template operator()<float>();
  const std::size_t rows = options.elements() / cols;
  result.add_note(
      "relu = max(x, 0); gelu_erf = 0.5 x (1 + erf(x / sqrt 2)); bias_gelu = gelu_erf(x + b); "
      "tanh_derivative = tanh x and 1 - tanh^2 x (one call, two outputs); rmsnorm = x / "
      "sqrt(mean(x^2) + 1e-6) * gamma (rowwise).");
  result.add_note(
      "user operators over xsimd batches, inputs and outputs in the format; bias_gelu "
      "and rmsnorm on " +
      std::to_string(rows) + "x" + std::to_string(cols) + ", b and gamma one broadcast row.");
  result.add_note(
      "G/s: output elements per second (of each output), one thread "
      "(gpsimd::options{.threads = 1}).");
  result.add_note(
      "error: against fp64 on the same inputs (N(0, 1), splitmix64 + Box-Muller, seed 0, rounded "
      "to the format; b = 0.1 N(0, 1), gamma = 1 + 0.1 N(0, 1)); stochastic seed 0. gelu_erf's "
      "error peaks at x < -3, where 1 + erf cancels in fp32.");
  return result;
}

}  // namespace tilekern::report
