// A fused bias + gelu with stochastically rounded bf16 output, as a GPSIMD custom operator:
// y[r][c] = gelu(x[r][c] + bias[c]).
//
// bias is one row, which the library broadcasts to every row of x. Stochastic rounding is
// seeded: an element's random bits depend only on (seed, stream, its row-major index in y), so
// the same seed gives the same bits for any number of cores and threads, and a different seed
// gives different bits. Rounding up with probability equal to the distance from the lower
// neighbour leaves no bias: the mean rounding error tends to zero.
//
// Checked below against std::erf in fp64 on every ISA path, for x in bf16 and float, bias in
// float and bf16, shapes 1x1, 3x17, 197x768 (also strided) and 1x1000003.
#include "check.hpp"

using namespace tilekern;

// ---- user code ----
inline constexpr auto bias_gelu_operator = [](auto x, auto bias) {
  const auto v = x + bias;
  return 0.5f * v * (1 + xsimd::erf(v * 0.70710678f));
};

template <class In, class Bias>
void bias_gelu(view<const In> x, std::span<const Bias> bias, view<bf16> y, std::uint64_t seed,
               gpsimd::options options = {}) {
  options.cast = {.round = rounding::stochastic, .seed = seed};
  gpsimd::elementwise(bias_gelu_operator, gpsimd::inputs(x, bias), gpsimd::outputs(y), options);
}
// ---- end of user code ----

// ---- checks ----

namespace {

using example::checks;
using example::u;

double gelu_reference(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

// The bound on |y - gelu(x + bias)|: the fp32 error of the operator (gelu.cpp derives
// |v|/2 * 6.75u + u |gelu| for gelu(v); x + bias rounds by u |v|, which gelu' <= 1.13 turns into
// at most 1.13u |v|), plus under one ulp of bf16 for stochastic rounding.
double bias_gelu_bound(double v, double expected, double got) {
  return std::fabs(v) * 4.5 * u + std::fabs(expected) * u +
         example::ulp<bf16>(std::max(std::fabs(expected), std::fabs(got)));
}

struct shape {
  std::size_t rows, cols, stride;
};

template <class In, class Bias>
void check_formats(checks& check, isa path, shape s, std::uint64_t seed) {
  const std::string where = "x " + example::name_of<In>() + ", bias " + example::name_of<Bias>() +
                            " on " + std::string(name(path)) + ", " + std::to_string(s.rows) + "x" +
                            std::to_string(s.cols) + " in rows of " + std::to_string(s.stride);
  check.context(where);
  const std::vector<In> x_data = example::normal_values<In>(s.rows * s.stride, 2.0, s.cols);
  const std::vector<Bias> bias = example::normal_values<Bias>(s.cols, 0.5, s.cols + 1);
  const view<const In> x(x_data.data(), s.rows, s.cols, s.stride);
  const auto output = [&] { return std::vector<bf16>(s.rows * s.stride, bf16(-3.0f)); };
  const auto y_of = [&](std::vector<bf16>& data) {
    return view<bf16>(data.data(), s.rows, s.cols, s.stride);
  };
  std::vector<bf16> y_data = output();
  const view<bf16> y = y_of(y_data);
  bias_gelu<In, Bias>(x, bias, y, seed);

  // Against fp64.
  for (std::size_t r = 0; r < s.rows; ++r) {
    for (std::size_t c = 0; c < s.cols; ++c) {
      const double v = example::to_double(x(r, c)) + example::to_double(bias[c]);
      const double expected = gelu_reference(v);
      const double got = y(r, c).to_double();
      check.near(got, expected, bias_gelu_bound(v, expected, got), r * s.cols + c);
    }
    for (std::size_t c = s.cols; c < s.stride; ++c) {
      if (y_data[r * s.stride + c].to_float() != -3.0f) check.fail("row %zu: gap written", r);
    }
  }

  // The same bits again, and for other numbers of cores and threads.
  for (const gpsimd::options options :
       {gpsimd::options{}, gpsimd::options{.cores = 1, .threads = 1},
        gpsimd::options{.cores = 7, .threads = 2}, gpsimd::options{.cores = 64}}) {
    std::vector<bf16> again = output();
    bias_gelu<In, Bias>(x, bias, y_of(again), seed, options);
    for (std::size_t i = 0; i < again.size(); ++i) {
      if (again[i].bits() != y_data[i].bits()) {
        check.fail("%zu cores on %zu threads: element %zu differs from the first run",
                   options.cores, options.threads, i);
        break;
      }
    }
  }
  if (s.rows * s.cols < 10000) return;  // the statistics below need many elements

  // Another seed, other bits (for the elements that were not exact already).
  std::vector<bf16> other = output();
  bias_gelu<In, Bias>(x, bias, y_of(other), seed + 1);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < other.size(); ++i) differ += other[i].bits() != y_data[i].bits();
  if (differ < s.rows * s.cols / 10) {
    check.fail("seed %llu and %llu differ in only %zu of %zu elements",
               static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed) + 1,
               differ, s.rows * s.cols);
  }

  // The fp32 values before rounding (a float output is not rounded): y must be one of the two bf16
  // neighbours of each, and the mean rounding error, in ulps, near zero. Rounding up with
  // probability p (the distance from the lower neighbour, in ulps) has error 1 - p with
  // probability p and -p otherwise: mean 0, variance p (1 - p).
  std::vector<float> fp32(s.rows * s.stride);
  gpsimd::elementwise(bias_gelu_operator, gpsimd::inputs(x, bias),
                      gpsimd::outputs(view<float>(fp32.data(), s.rows, s.cols, s.stride)));
  double error_sum = 0, variance_sum = 0;
  std::size_t count = 0;
  for (std::size_t r = 0; r < s.rows; ++r) {
    for (std::size_t c = 0; c < s.cols; ++c) {
      const double value = fp32[r * s.stride + c], got = y(r, c).to_double();
      const double lower = bf16::from(value, {.round = rounding::toward_zero}).to_double();
      const double gap = example::ulp<bf16>(lower);
      const double p = std::fabs(value - lower) / gap;  // the probability of rounding away from 0
      if (got != lower && std::fabs(got - lower) != gap) {
        check.fail("element %zu: %.9g is not a bf16 neighbour of %.9g", r * s.cols + c, got, value);
      }
      error_sum += (got - value) / gap;
      variance_sum += p * (1 - p);
      ++count;
    }
  }
  const double mean = error_sum / static_cast<double>(count);
  const double standard_error = std::sqrt(variance_sum) / static_cast<double>(count);
  std::printf("%s: mean rounding error %+.2e ulp, standard error %.2e\n", where.c_str(), mean,
              standard_error);
  if (std::fabs(mean) > 5 * standard_error) {
    check.fail("the mean rounding error %.3g ulp is %.1f standard errors from 0", mean,
               std::fabs(mean) / standard_error);
  }
}

}  // namespace

int main() {
  checks check("bias_gelu");
  example::for_each_isa([&](isa path) {
    for (const shape s : {shape{1, 1, 1}, shape{3, 17, 17}, shape{197, 768, 768},
                          shape{197, 768, 800}, shape{1, 1000003, 1000003}}) {
      check_formats<bf16, float>(check, path, s, 42);
      check_formats<float, bf16>(check, path, s, 1234);
    }
  });
  return check.finish();
}
