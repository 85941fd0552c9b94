// relu over bf16 as a GPSIMD custom operator: the smallest operator there is.
//
// The operator is plain math over an xsimd batch of fp32 lanes; gpsimd::elementwise decodes bf16
// into those lanes, calls it, and encodes the result back, tail included. `auto` lets the
// operator take every batch width (16 lanes on AVX-512, 8 on AVX2, 4 on the scalar path).
//
// Checked below against max(x, 0) in fp64: exact, for bf16, fp16, fp8_e4m3 and float, with the
// special values, on every ISA path, for 1, 17 and 1000003 elements and a strided 197x768 view.
#include "check.hpp"

using namespace tilekern;

template <class T>
void relu(view<const T> x, view<T> y, const gpsimd::options& options = {}) {
  // ---- user code ----
  // x < 0 ? 0 : x, lane by lane; NaN stays NaN (NaN < 0 is false) and -0 stays -0.
  const auto relu = [](auto x) { return xsimd::select(x < 0.0f, decltype(x)(0.0f), x); };
  gpsimd::elementwise(relu, gpsimd::inputs(x), gpsimd::outputs(y), options);
  // ---- end of user code ----
}

// ---- checks ----

namespace {

using example::checks;

// relu in fp64: exact for every format, since its result is its input or zero.
double relu_reference(double x) {
  return x < 0 ? 0.0 : x;
}

template <class T>
void check_values(checks& check, view<const T> x, view<const T> y) {
  for (std::size_t r = 0; r < x.rows(); ++r) {
    for (std::size_t c = 0; c < x.cols(); ++c) {
      const double expected = relu_reference(example::to_double(x(r, c)));
      const double got = example::to_double(y(r, c));
      if (!check.near(got, expected, 0.0, r * x.cols() + c)) continue;
      if (std::signbit(got) != std::signbit(expected) && !std::isnan(expected)) {
        check.fail("element %zu: the sign of zero is lost", r * x.cols() + c);
      }
    }
  }
}

template <class T>
void check_format(checks& check, isa path) {
  const std::string where = example::name_of<T>() + " on " + std::string(name(path));
  for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{1000003}}) {
    check.context(where + ", " + std::to_string(n) + " elements");
    std::vector<T> x = example::normal_values<T>(n, 2.0, n);
    const std::vector<T> specials = example::special_values<T>();
    std::copy_n(specials.begin(), std::min(n, specials.size()), x.begin());
    std::vector<T> y(n);  // exactly n: AddressSanitizer sees any write past the end
    relu<T>(x, y);
    check_values<T>(check, view<const T>(x), view<const T>(y));
  }

  // A 197x768 block inside 197x800 arrays: the library must leave the gaps alone. 3 cores on 2
  // threads, to split the rows unevenly.
  check.context(where + ", 197x768 in rows of 800");
  const std::size_t rows = 197, cols = 768, stride = 800;
  const std::vector<T> x = example::normal_values<T>(rows * stride, 1.0, 7);
  const T sentinel = example::from_double<T>(-1.5);
  std::vector<T> y(rows * stride, sentinel);
  relu<T>(view<const T>(x.data(), rows, cols, stride), view<T>(y.data(), rows, cols, stride),
          {.cores = 3, .threads = 2});
  check_values<T>(check, view<const T>(x.data(), rows, cols, stride),
                  view<const T>(y.data(), rows, cols, stride));
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = cols; c < stride; ++c) {
      if (example::to_double(y[r * stride + c]) != -1.5) {
        check.fail("row %zu, column %zu: written outside the view", r, c);
      }
    }
  }
}

}  // namespace

int main() {
  checks check("relu");
  example::for_each_isa([&](isa path) {
    check_format<bf16>(check, path);
    check_format<fp16>(check, path);
    check_format<fp8_e4m3>(check, path);
    check_format<float>(check, path);
  });
  return check.finish();
}
