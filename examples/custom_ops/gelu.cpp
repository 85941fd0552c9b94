// gelu with erf as a GPSIMD custom operator: gelu(x) = x/2 * (1 + erf(x / sqrt(2))).
//
// Input and output formats are independent: the library decodes x into fp32 lanes and rounds the
// operator's fp32 result to y's format (nearest even unless options.cast says otherwise).
//
// Checked below against std::erf in fp64, on every ISA path, for 1, 17 and 1000003 elements and
// a strided 197x768 view, with x and y in float, bf16, fp16 and fp8_e4m3.
#include "check.hpp"

using namespace tilekern;

template <class In, class Out>
void gelu(view<const In> x, view<Out> y, const gpsimd::options& options = {}) {
  // ---- user code ----
  const auto gelu = [](auto x) { return 0.5f * x * (1 + xsimd::erf(x * 0.70710678f)); };
  gpsimd::elementwise(gelu, gpsimd::inputs(x), gpsimd::outputs(y), options);
  // ---- end of user code ----
}

// ---- checks ----

namespace {

using example::checks;
using example::u;

double gelu_reference(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

// The bound on |y - gelu(x)|: the fp32 error of the operator, plus the rounding to Out.
//
// fp32 error: xsimd 8.1's erf is within 2.4 fp32 ulp of erf (measured over every 37th float in
// [-10, 10], on 16, 8 and 4 lanes); we allow 4, an absolute error of 4u since |erf| < 1. The
// argument x * 0.70710678f is off by at most 1.5u relative (rounding and the constant), which
// moves erf by at most 1.5u * max(z erf'(z)) < 0.75u. 1 + erf rounds by at most 2u, the last
// product by u relative. So |fp32 - gelu| <= |x|/2 * (4 + 0.75 + 2) u + u |gelu| (to first
// order; x/2 is exact). Relative to gelu the first term is large for x << 0, where 1 + erf
// cancels: that is erf's absolute error showing, not a defect of the operator.
//
// Rounding to Out: half an ulp of Out (nearest even), at the larger of the two magnitudes.
template <class Out>
double gelu_bound(double x, double expected, double got) {
  const double fp32_error = std::fabs(x) * 3.5 * u + std::fabs(expected) * u;
  return fp32_error + 0.5 * example::ulp<Out>(std::max(std::fabs(expected), std::fabs(got)));
}

template <class In, class Out>
void check_values(checks& check, view<const In> x, view<const Out> y) {
  for (std::size_t r = 0; r < x.rows(); ++r) {
    for (std::size_t c = 0; c < x.cols(); ++c) {
      const double value = example::to_double(x(r, c));
      const double expected = gelu_reference(value);
      const double got = example::to_double(y(r, c));
      // Beyond Out's max the result overflows to inf (or NaN for formats without one), as the
      // format's overflow rule says; near the threshold either outcome is within the bound.
      const double bound = gelu_bound<Out>(value, expected, got);
      const double max = example::to_double(std::numeric_limits<Out>::max());
      if (std::fabs(expected) > max && (std::isinf(got) || std::isnan(got))) continue;
      if (std::fabs(expected) > max + bound) {
        check.fail("element %zu: gelu(%g) = %g overflows %s, got %g", r * x.cols() + c, value,
                   expected, example::name_of<Out>().c_str(), got);
        continue;
      }
      check.near(got, expected, bound, r * x.cols() + c);
    }
  }
}

template <class In, class Out>
void check_formats(checks& check, isa path) {
  const std::string where =
      example::name_of<In>() + " -> " + example::name_of<Out>() + " on " + std::string(name(path));
  for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{1000003}}) {
    check.context(where + ", " + std::to_string(n) + " elements");
    std::vector<In> x = example::normal_values<In>(n, 3.0, n);
    const std::vector<In> specials = example::special_values<In>();
    std::copy_n(specials.begin(), std::min(n, specials.size()), x.begin());
    std::vector<Out> y(n);
    gelu<In, Out>(x, y);
    check_values<In, Out>(check, view<const In>(x), view<const Out>(y));
  }

  check.context(where + ", 197x768 in rows of 771, 5 cores");
  const std::size_t rows = 197, cols = 768, stride = 771;
  const std::vector<In> x = example::normal_values<In>(rows * stride, 3.0, 11);
  std::vector<Out> y(rows * stride, example::from_double<Out>(7.0));
  gelu<In, Out>(view<const In>(x.data(), rows, cols, stride),
                view<Out>(y.data(), rows, cols, stride), {.cores = 5});
  check_values<In, Out>(check, view<const In>(x.data(), rows, cols, stride),
                        view<const Out>(y.data(), rows, cols, stride));
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = cols; c < stride; ++c) {
      if (example::to_double(y[r * stride + c]) != 7.0) check.fail("row %zu: gap written", r);
    }
  }
}

}  // namespace

int main() {
  checks check("gelu");
  example::for_each_isa([&](isa path) {
    check_formats<float, float>(check, path);
    check_formats<bf16, bf16>(check, path);
    check_formats<fp16, fp16>(check, path);
    check_formats<bf16, float>(check, path);
    check_formats<float, fp8_e4m3>(check, path);
  });
  return check.finish();
}
