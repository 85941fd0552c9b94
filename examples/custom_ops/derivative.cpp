// An operator with two outputs: tanh(x) and its derivative 1 - tanh(x)^2, as the forward pass of
// a tanh layer computes both for the backward pass, from one read of x.
//
// The operator returns a std::tuple of batches, one per output, in the order of
// gpsimd::outputs(...). Each output has its own format; with stochastic rounding output k uses
// stream options.cast.stream + k, so the two never share random bits.
//
// Checked below against std::tanh in fp64 on every ISA path, for 1, 17 and 1000003 elements and
// a strided 197x768 view, with several format pairs, in nearest-even and stochastic rounding.
#include "check.hpp"

#include <cstring>

using namespace tilekern;

// ---- user code ----
inline constexpr auto tanh_and_derivative = [](auto x) {
  const auto t = xsimd::tanh(x);
  return std::tuple(t, 1 - t * t);
};

template <class In, class Y, class DY>
void tanh_forward(view<const In> x, view<Y> y, view<DY> dy, const gpsimd::options& options = {}) {
  gpsimd::elementwise(tanh_and_derivative, gpsimd::inputs(x), gpsimd::outputs(y, dy), options);
}
// ---- end of user code ----

// ---- checks ----

namespace {

using example::checks;
using example::u;

// Bounds on the fp32 results. xsimd 8.1's tanh is within 1.3 fp32 ulp of tanh (measured over
// every 37th float in [-20, 20] on 16, 8 and 4 lanes); we allow 2. The derivative 1 - t^2
// inherits twice t's error, 2|t| * 2 ulp(t) <= 4 ulp(t), plus at most 2u absolute for t * t and
// the subtraction (t^2 <= 1). Relative to 1 - tanh^2 this is large for |x| > 4, where the
// subtraction cancels: that is tanh's error showing.
double tanh_fp32_bound(double t) {
  return 2 * example::ulp<float>(t);
}
double derivative_fp32_bound(double t) {
  return 4 * example::ulp<float>(t) + 2 * u;
}

// Rounding to the output format: half an ulp (nearest even) or under one (stochastic).
template <class Out>
double rounding_bound(double expected, double got, rounding mode) {
  if constexpr (std::is_same_v<Out, float>) return 0;
  const double gap = example::ulp<Out>(std::max(std::fabs(expected), std::fabs(got)));
  return mode == rounding::nearest_even ? gap / 2 : gap;
}

template <class In, class Y, class DY>
void check_values(checks& check, view<const In> x, view<const Y> y, view<const DY> dy,
                  rounding mode) {
  for (std::size_t r = 0; r < x.rows(); ++r) {
    for (std::size_t c = 0; c < x.cols(); ++c) {
      const double t = std::tanh(example::to_double(x(r, c)));
      const double derivative = 1 - t * t;
      const double got_t = example::to_double(y(r, c)), got_d = example::to_double(dy(r, c));
      check.near(got_t, t, tanh_fp32_bound(t) + rounding_bound<Y>(t, got_t, mode),
                 r * x.cols() + c);
      check.near(got_d, derivative,
                 derivative_fp32_bound(t) + rounding_bound<DY>(derivative, got_d, mode),
                 r * x.cols() + c);
    }
  }
}

template <class T>
std::vector<T> filled(std::size_t n) {
  return std::vector<T>(n, example::from_double<T>(0.25));
}

template <class In, class Y, class DY>
void check_streams(checks& check, view<const In> x, view<const Y> y, view<const DY> dy,
                   const cast_options& cast);

template <class In, class Y, class DY>
void check_formats(checks& check, isa path, const cast_options& cast) {
  const gpsimd::options options{.cast = cast};
  const std::string where =
      example::name_of<In>() + " -> " + example::name_of<Y>() + ", " + example::name_of<DY>() +
      (cast.round == rounding::stochastic ? " stochastic" : "") + " on " + std::string(name(path));
  for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{1000003}}) {
    check.context(where + ", " + std::to_string(n) + " elements");
    std::vector<In> x = example::normal_values<In>(n, 2.0, n + 3);
    const std::vector<In> specials = example::special_values<In>();
    std::copy_n(specials.begin(), std::min(n, specials.size()), x.begin());
    std::vector<Y> y(n);
    std::vector<DY> dy(n);
    tanh_forward<In, Y, DY>(x, y, dy, options);
    check_values<In, Y, DY>(check, view<const In>(x), view<const Y>(y), view<const DY>(dy),
                            cast.round);
  }

  check.context(where + ", 197x768 in rows of 777");
  const std::size_t rows = 197, cols = 768, stride = 777;
  const std::vector<In> x_data = example::normal_values<In>(rows * stride, 2.0, 5);
  const view<const In> x(x_data.data(), rows, cols, stride);
  std::vector<Y> y_data = filled<Y>(rows * stride);
  std::vector<DY> dy_data = filled<DY>(rows * stride);
  const view<Y> y(y_data.data(), rows, cols, stride);
  const view<DY> dy(dy_data.data(), rows, cols, stride);
  tanh_forward<In, Y, DY>(x, y, dy, options);
  check_values<In, Y, DY>(check, x, y, dy, cast.round);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = cols; c < stride; ++c) {
      if (example::to_double(y_data[r * stride + c]) != 0.25 ||
          example::to_double(dy_data[r * stride + c]) != 0.25) {
        check.fail("row %zu: gap written", r);
      }
    }
  }
  if constexpr (!std::is_same_v<Y, float> && !std::is_same_v<DY, float>) {
    if (cast.round == rounding::stochastic) check_streams<In, Y, DY>(check, x, y, dy, cast);
  }
}

// Output k is rounded with stream cast.stream + k and index r * cols + c: converting the
// operator's fp32 results (its float outputs) that way gives the same bits.
template <class In, class Y, class DY>
void check_streams(checks& check, view<const In> x, view<const Y> y, view<const DY> dy,
                   const cast_options& cast) {
  const std::size_t rows = x.rows(), cols = x.cols();
  std::vector<float> t32(rows * cols), d32(rows * cols);
  tanh_forward<In, float, float>(x, view<float>(t32.data(), rows, cols),
                                 view<float>(d32.data(), rows, cols));
  std::vector<Y> want_y(rows * cols);
  std::vector<DY> want_dy(rows * cols);
  cast_options second = cast;
  second.stream = cast.stream + 1;
  convert(std::span<const float>(t32), std::span<Y>(want_y), cast);
  convert(std::span<const float>(d32), std::span<DY>(want_dy), second);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      if (std::memcmp(&y(r, c), &want_y[r * cols + c], sizeof(Y)) != 0 ||
          std::memcmp(&dy(r, c), &want_dy[r * cols + c], sizeof(DY)) != 0) {
        check.fail("element (%zu, %zu) is not rounded with streams %llu and %llu", r, c,
                   static_cast<unsigned long long>(cast.stream),
                   static_cast<unsigned long long>(second.stream));
        return;
      }
    }
  }
}

}  // namespace

int main() {
  checks check("derivative");
  const cast_options nearest{};
  const cast_options stochastic{.round = rounding::stochastic, .seed = 2024, .stream = 10};
  example::for_each_isa([&](isa path) {
    check_formats<float, float, float>(check, path, nearest);
    check_formats<bf16, bf16, bf16>(check, path, nearest);
    check_formats<fp16, fp16, bf16>(check, path, nearest);
    check_formats<float, bf16, bf16>(check, path, stochastic);
    check_formats<bf16, fp16, fp8_e5m2>(check, path, stochastic);
  });
  return check.finish();
}
