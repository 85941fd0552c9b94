// Every format in every rounding mode: range, precision, bulk conversion throughput and the
// error of an fp32 -> format -> fp32 round trip of N(0, 1) inputs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "report/sections.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern::report {
namespace {

constexpr rounding rounding_modes[] = {rounding::nearest_even, rounding::toward_zero,
                                       rounding::stochastic};

template <minifloat_format F>
double value_of(F x) {
  return x.to_double();
}

// The format's relative precision where it has one: the largest relative error over inputs in
// its normal range, and how many nonzero inputs fell below it to zero.
struct normal_range_error {
  double max_relative = 0;
  std::size_t underflows = 0;
};

template <minifloat_format F>
normal_range_error measure_normal_range(std::span<const float> inputs,
                                        std::span<const float> decoded) {
  const double min_normal = value_of(std::numeric_limits<F>::min());
  const double max = value_of(std::numeric_limits<F>::max());
  normal_range_error error;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const double x = inputs[i], y = decoded[i];
    if (x != 0 && y == 0) ++error.underflows;
    if (std::abs(x) < min_normal || std::abs(x) > max) continue;
    error.max_relative = std::max(error.max_relative, std::abs((y - x) / x));
  }
  return error;
}

template <minifloat_format F>
void add_rows(const settings& options, std::span<const float> inputs, table& result) {
  using limits = std::numeric_limits<F>;
  std::vector<F> encoded(inputs.size());
  std::vector<float> decoded(inputs.size());
  for (rounding mode : rounding_modes) {
    const cast_options cast{.round = mode};
    const double encode_seconds = median_seconds(options.runs(), [&] {
      convert<F>(inputs, std::span<F>(encoded), cast);
      keep(encoded.data());
    });
    const double decode_seconds = median_seconds(options.runs(), [&] {
      convert<F>(std::span<const F>(encoded), std::span<float>(decoded));
      keep(decoded.data());
    });
    const error_metrics error = measure_error(inputs, std::span<const float>(decoded));
    const normal_range_error normal = measure_normal_range<F>(inputs, decoded);
    result.add_row({format_name<F>(), std::string(name(mode)),
                    cell("%.6g", value_of(limits::max())), cell("%.6g", value_of(limits::min())),
                    cell("%.6g", value_of(limits::denorm_min())), std::to_string(F::mantissa_bits),
                    cell("%.6g", value_of(limits::epsilon())),
                    cell("%.2f", giga_per_second(inputs.size(), encode_seconds)),
                    cell("%.2f", giga_per_second(inputs.size(), decode_seconds)),
                    cell("%.3g", normal.max_relative), cell("%.2f", error.sqnr_db),
                    std::to_string(normal.underflows), std::to_string(error.overflows)});
  }
}

}  // namespace

table conversion_section(const settings& options) {
  const std::vector<float> inputs = normal_inputs(options.elements());
  table result("conversion: fp32 -> format -> fp32", {{"format", align::left},
                                                      {"rounding", align::left},
                                                      {"max"},
                                                      {"min normal"},
                                                      {"min subnormal"},
                                                      {"mantissa bits"},
                                                      {"epsilon"},
                                                      {"encode G/s"},
                                                      {"decode G/s"},
                                                      {"max rel err"},
                                                      {"SQNR dB"},
                                                      {"underflows"},
                                                      {"overflows"}});
  for_each_format([&]<class F>() {
    if (options.wants(format_name<F>())) add_rows<F>(options, inputs, result);
  });
  result.add_note(
      "encode: fp32 -> format, decode: format -> fp32, both through tilekern::convert, "
      "in G elements/s.");
  result.add_note("error: of the round trip, on " + std::to_string(inputs.size()) +
                  " N(0, 1) inputs (splitmix64 + Box-Muller, seed 0); stochastic seed 0, stream "
                  "0; overflow gives inf (or NaN).");
  result.add_note(
      "max rel err: over inputs in the format's normal range (at most epsilon/2 for nearest, "
      "epsilon otherwise); underflows: nonzero inputs that became zero; SQNR = 10 log10(sum x^2 "
      "/ sum (x - y)^2) over all finite results.");
  return result;
}

}  // namespace tilekern::report
