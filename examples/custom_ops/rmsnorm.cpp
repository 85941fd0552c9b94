// RMS normalisation as a row-wise GPSIMD custom operator:
//   y[r][c] = x[r][c] / sqrt(mean_c(x[r][c]^2) + eps) * gamma[c]
//
// gpsimd::rowwise hands the operator whole rows, decoded into fp32 local memory (gamma, one row,
// is broadcast to every row); gpsimd::sum and gpsimd::stream do the batch loops, tails included.
// x is given as gpsimd::streamed(x): sum and stream read its rows from the tensor, decoding as
// they go, instead of from a copy decoded into local memory first. stream encodes y's results
// straight into the output tensor instead of storing them in y's local memory for the library to
// encode afterwards (gpsimd::transform). The gamma and y rows must fit in a core's local memory
// (64 KiB by default: rows of up to 8192 fp32 values); options.local_bytes raises it.
//
// Checked below against the library's own tilekern::rmsnorm (kernels/rmsnorm.hpp) and both
// against the fp64 reference::rmsnorm, on every ISA path. The second half checks the library
// kernel itself: formats, odd and strided shapes, rows of 100003, special values, stochastic
// rounding indices, in-place use and its shape errors.
#include "check.hpp"

#include <cstring>

using namespace tilekern;

template <class In, class G, class Out>
void rmsnorm_gpsimd(view<const In> x, std::span<const G> gamma, view<Out> y, float eps,
                    const gpsimd::options& options = {}) {
  // ---- user code ----
  const auto rmsnorm = [eps](auto x, auto gamma, auto y) {
    const float sum_of_squares = gpsimd::sum([](auto v) { return v * v; }, x);
    const float mean_square = sum_of_squares / static_cast<float>(x.size());
    const float inverse_rms = 1.0f / std::sqrt(mean_square + eps);
    const auto normalise = [&](auto v, auto g) { return v * inverse_rms * g; };
    gpsimd::stream(y, normalise, x, gamma);
  };
  gpsimd::rowwise(rmsnorm, gpsimd::inputs(gpsimd::streamed(x), gamma), gpsimd::outputs(y), options);
  // ---- end of user code ----
}

// ---- checks ----

namespace {

using example::checks;
using example::u;

// The bound on the relative error of the library kernel's fp32 results (kernels/rmsnorm.hpp):
// ((k + 6) / 2 + 4) u, k = ceil(min(cols, 1024) / 64) terms per partial sum.
double kernel_bound(std::size_t cols) {
  const std::size_t k = (std::min<std::size_t>(cols, 1024) + 63) / 64;
  return (static_cast<double>(k + 6) / 2 + 4) * u;
}

// The bound on the relative error of the operator's fp32 results. gpsimd::sum adds in 4 * `lanes`
// running sums of up to ceil(cols / (4 lanes)) terms each, then the four sums of each lane in two
// levels, then across the lanes: relative error at most (ceil(cols / (4 lanes)) + 2 + lanes) u
// with the squares' rounding. The square root halves it and the mean and eps; sqrt, the
// reciprocal and the two products add u each.
double operator_bound(std::size_t cols, std::size_t lanes) {
  const std::size_t per_lane = (cols + 4 * lanes - 1) / (4 * lanes);  // ceil(cols / (4 lanes))
  const auto terms = static_cast<double>(per_lane + 2 + lanes);
  return (terms / 2 + 5) * u;
}

std::size_t lanes_of(isa path) {
  return path == isa::scalar ? 4 : path == isa::avx2 ? 8 : 16;  // gpsimd.hpp's batch widths
}

// The rounding of an fp32 result to Out: half an ulp (nearest even) or under one (otherwise).
template <class Out>
double rounding_bound(double expected, double got, rounding mode) {
  const double gap = example::ulp<Out>(std::max(std::fabs(expected), std::fabs(got)));
  // fp32 results are y itself, but products that fall below fp32's normals round to its
  // subnormal grid (2^-149).
  if constexpr (std::is_same_v<Out, float>) return mode == rounding::nearest_even ? 0x1p-149 : gap;
  return mode == rounding::nearest_even ? gap / 2 : gap;
}

// n values of T: N(0, 1), times a power of two from 2^-4 to 2^4 that changes from row to row.
template <class T>
std::vector<T> row_values(std::size_t rows, std::size_t stride, std::uint64_t seed) {
  const std::vector<double> normal = example::normal_values<double>(rows * stride, 1.0, seed);
  std::vector<T> values(rows * stride);
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] =
        example::from_double<T>(std::ldexp(normal[i], static_cast<int>(i / stride % 9) - 4));
  }
  return values;
}

template <class G>
std::vector<G> gamma_values(std::size_t cols, std::uint64_t seed) {
  const std::vector<double> normal = example::normal_values<double>(cols, 0.1, seed);
  std::vector<G> gamma(cols);
  for (std::size_t c = 0; c < cols; ++c) gamma[c] = example::from_double<G>(1.0 + normal[c]);
  return gamma;
}

// reference::rmsnorm on the decoded inputs (to_double is exact).
template <class In, class G>
std::vector<double> reference_of(view<const In> x, std::span<const G> gamma, float eps) {
  std::vector<double> x64(x.size()), gamma64(gamma.size()), y64(x.size());
  for (std::size_t r = 0; r < x.rows(); ++r) {
    for (std::size_t c = 0; c < x.cols(); ++c) x64[r * x.cols() + c] = example::to_double(x(r, c));
  }
  for (std::size_t c = 0; c < gamma.size(); ++c) gamma64[c] = example::to_double(gamma[c]);
  reference::rmsnorm(view<const double>(x64.data(), x.rows(), x.cols()), gamma64, eps,
                     view<double>(y64.data(), x.rows(), x.cols()));
  return y64;
}

struct shape {
  std::size_t rows, cols, stride;
  std::string text() const {
    return std::to_string(rows) + "x" + std::to_string(cols) +
           (stride != cols ? " in rows of " + std::to_string(stride) : "");
  }
};

// Whether y's rows hold the reference within relative_bound plus Out's rounding.
template <class Out>
void check_against(checks& check, view<const Out> y, const std::vector<double>& expected,
                   double relative_bound, rounding mode) {
  for (std::size_t r = 0; r < y.rows(); ++r) {
    for (std::size_t c = 0; c < y.cols(); ++c) {
      const double want = expected[r * y.cols() + c], got = example::to_double(y(r, c));
      check.near(got, want, relative_bound * std::fabs(want) + rounding_bound<Out>(want, got, mode),
                 r * y.cols() + c);
    }
  }
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// ---- the custom operator, against the library kernel and the reference ----

template <class In, class G, class Out>
void check_operator(checks& check, isa path, shape s, gpsimd::options options = {}) {
  check.context("operator, " + example::name_of<In>() + " x, " + example::name_of<G>() +
                " gamma, " + example::name_of<Out>() + " y, " + s.text() + " on " +
                std::string(name(path)));
  const float eps = 1e-5f;
  const std::vector<In> x_data = row_values<In>(s.rows, s.stride, s.cols);
  const std::vector<G> gamma = gamma_values<G>(s.cols, s.cols + 1);
  const view<const In> x(x_data.data(), s.rows, s.cols, s.stride);
  std::vector<Out> y_data(s.rows * s.stride, example::from_double<Out>(5.0));
  const view<Out> y(y_data.data(), s.rows, s.cols, s.stride);
  rmsnorm_gpsimd<In, G, Out>(x, gamma, y, eps, options);

  const std::vector<double> expected = reference_of<In, G>(x, gamma, eps);
  const double bound = operator_bound(s.cols, lanes_of(path));
  check_against<Out>(check, y, expected, bound, rounding::nearest_even);
  for (std::size_t r = 0; r < s.rows; ++r) {
    for (std::size_t c = s.cols; c < s.stride; ++c) {
      if (example::to_double(y_data[r * s.stride + c]) != 5.0)
        check.fail("row %zu: gap written", r);
    }
  }

  // Against the library: both are within their bounds of the reference, so within the sum of
  // the bounds of each other, plus a rounding of Out each.
  std::vector<Out> library(s.rows * s.cols);
  rmsnorm(x, gamma, view<Out>(library.data(), s.rows, s.cols), eps);
  for (std::size_t r = 0; r < s.rows; ++r) {
    for (std::size_t c = 0; c < s.cols; ++c) {
      const double want = example::to_double(library[r * s.cols + c]);
      const double got = example::to_double(y(r, c));
      const double scale = std::fabs(expected[r * s.cols + c]);
      check.near(got, want,
                 (bound + kernel_bound(s.cols)) * scale +
                     2 * rounding_bound<Out>(want, got, rounding::nearest_even),
                 r * s.cols + c);
    }
  }

  // The same bits on one core, and on 3 cores over 2 threads.
  for (const gpsimd::options other :
       {gpsimd::options{.cores = 1, .threads = 1}, gpsimd::options{.cores = 3, .threads = 2}}) {
    gpsimd::options changed = options;
    changed.cores = other.cores;
    changed.threads = other.threads;
    std::vector<Out> again(y_data.size(), example::from_double<Out>(5.0));
    rmsnorm_gpsimd<In, G, Out>(x, gamma, view<Out>(again.data(), s.rows, s.cols, s.stride), eps,
                               changed);
    if (!same_bits(again, y_data)) {
      check.fail("%zu cores on %zu threads give other bits", other.cores, other.threads);
    }
  }
}

// A row longer than local memory holds is a shape_error, which names the sizes.
void check_local_memory(checks& check) {
  // gamma and y, staged, need 2 x 36 KB; x, streamed, none.
  check.context("operator, 1x9000 in 64 KiB of local memory");
  const std::vector<float> x(9000, 1.0f), gamma(9000, 1.0f);
  std::vector<float> y(9000, 5.0f);
  try {
    rmsnorm_gpsimd<float, float, float>(x, gamma, y, 1e-5f);
    check.fail("no shape_error");
  } catch (const shape_error& error) {
    if (std::string(error.what()).find("local memory") == std::string::npos) {
      check.fail("the message does not say what does not fit: %s", error.what());
    }
    if (y[0] != 5.0f) check.fail("y was written before the error");
  }
}

// ---- the library kernel, against the reference ----

template <class In, class G, class Out>
void check_kernel(checks& check, shape s, float eps = 1e-5f) {
  const std::string formats = example::name_of<In>() + " x, " + example::name_of<G>() + " gamma, " +
                              example::name_of<Out>() + " y, " + s.text();
  const std::vector<In> x_data = row_values<In>(s.rows, s.stride, s.cols + 2);
  const std::vector<G> gamma = gamma_values<G>(s.cols, s.cols + 3);
  const view<const In> x(x_data.data(), s.rows, s.cols, s.stride);
  const std::vector<double> expected = reference_of<In, G>(x, gamma, eps);

  // y is strided like x; its gaps must stay as they are.
  example::for_each_isa([&](isa path) {
    check.context("kernel, " + formats + " on " + std::string(name(path)));
    std::vector<Out> y_data(s.rows * s.stride, example::from_double<Out>(5.0));
    const view<Out> y(y_data.data(), s.rows, s.cols, s.stride);
    rmsnorm(x, gamma, y, eps);
    check_against<Out>(check, y, expected, kernel_bound(s.cols), rounding::nearest_even);
    for (std::size_t r = 0; r < s.rows; ++r) {
      for (std::size_t c = s.cols; c < s.stride; ++c) {
        if (example::to_double(y_data[r * s.stride + c]) != 5.0) {
          check.fail("row %zu: gap written", r);
        }
      }
    }
  });

  // Stochastic rounding: element (r, c) uses index r * cols + c, whatever y's stride. The kernel's
  // fp32 results are its float output; converting them with the same options must give the same
  // bits as the kernel's own rounding.
  if constexpr (!std::is_same_v<Out, float>) {
    check.context("kernel, " + formats + ", stochastic");
    const cast_options stochastic{.round = rounding::stochastic, .seed = 99, .stream = 3};
    std::vector<float> fp32(s.rows * s.cols);
    rmsnorm(x, gamma, view<float>(fp32.data(), s.rows, s.cols), eps);
    std::vector<Out> want(s.rows * s.cols);
    convert(std::span<const float>(fp32), std::span<Out>(want), stochastic);
    std::vector<Out> y_data(s.rows * s.stride);
    const view<Out> y(y_data.data(), s.rows, s.cols, s.stride);
    rmsnorm(x, gamma, y, eps, stochastic);
    for (std::size_t r = 0; r < s.rows; ++r) {
      for (std::size_t c = 0; c < s.cols; ++c) {
        if (y(r, c).bits() != want[r * s.cols + c].bits()) {
          check.fail("element (%zu, %zu) is not rounded with index %zu", r, c, r * s.cols + c);
          return;
        }
      }
    }
    check_against<Out>(check, view<const Out>(y), expected, kernel_bound(s.cols),
                       rounding::stochastic);
  }
}

// The largest relative error of the kernel's fp32 results, in units of u, on N(0, 1) rows.
double kernel_error_in_u(std::size_t rows, std::size_t cols) {
  const std::vector<float> x = row_values<float>(rows, cols, cols + 5);
  const std::vector<float> gamma = gamma_values<float>(cols, cols + 6);
  std::vector<float> y(rows * cols);
  rmsnorm(view<const float>(x.data(), rows, cols), gamma, view<float>(y.data(), rows, cols), 1e-5f);
  const std::vector<double> expected =
      reference_of<float, float>(view<const float>(x.data(), rows, cols), gamma, 1e-5f);
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (expected[i] != 0)
      worst = std::max(worst, std::fabs(y[i] - expected[i]) / std::fabs(expected[i]));
  }
  return worst / u;
}

// Rows of special values and extreme ranges follow the reference's arithmetic
// (kernels/rmsnorm.hpp lists the rules).
template <class T>
void check_special_rows(checks& check) {
  check.context("kernel, special rows of " + example::name_of<T>());
  using limits = std::numeric_limits<T>;
  const std::size_t cols = 37;
  const std::vector<double> normal = example::normal_values<double>(cols, 1.0, 5);
  const auto scaled = [&](int exponent) {
    std::vector<double> row(cols);
    for (std::size_t c = 0; c < cols; ++c) row[c] = std::ldexp(normal[c], exponent);
    return row;
  };
  std::vector<std::vector<double>> rows = {
      std::vector<double>(cols, 0.0),                                // y = 0
      std::vector<double>(cols, example::to_double(limits::max())),  // y = gamma
      scaled(limits::max_exponent - 5),  // float, bf16: squares beyond fp32, summed rescaled
      scaled(limits::min_exponent + 1),  // float, bf16: squares below fp32's normals
      std::vector<double>(cols, example::to_double(limits::denorm_min())),
      scaled(0),
  };
  rows.push_back(scaled(0));
  rows.back()[5] = std::numeric_limits<double>::quiet_NaN();  // the row is NaN
  if constexpr (limits::has_infinity) {
    rows.push_back(scaled(0));
    rows.back()[3] = std::numeric_limits<double>::infinity();  // NaN there, zeros elsewhere
    rows.push_back(scaled(0));
    rows.back()[0] = -std::numeric_limits<double>::infinity();
  }
  std::vector<T> x(rows.size() * cols);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t c = 0; c < cols; ++c) x[r * cols + c] = example::from_double<T>(rows[r][c]);
  }
  const std::vector<T> gamma = gamma_values<T>(cols, 6);
  const view<const T> x_view(x.data(), rows.size(), cols);
  std::vector<T> y(x.size());
  rmsnorm(x_view, gamma, view<T>(y.data(), rows.size(), cols), 1e-5f);
  check_against<T>(check, view<const T>(y.data(), rows.size(), cols),
                   reference_of<T, T>(x_view, gamma, 1e-5f), kernel_bound(cols),
                   rounding::nearest_even);

  // eps = 0: a row of zeros is 0 / 0.
  check.context("kernel, a row of zeros with eps = 0, " + example::name_of<T>());
  rmsnorm(view<const T>(x.data(), 1, cols), gamma, view<T>(y.data(), 1, cols), 0.0f);
  for (std::size_t c = 0; c < cols; ++c) {
    if (!example::is_nan(y[c])) check.fail("element %zu is not NaN", c);
  }
}

// y may be x itself.
void check_in_place(checks& check) {
  check.context("kernel, in place, bf16 3x100");
  std::vector<bf16> x = row_values<bf16>(3, 100, 8);
  const std::vector<float> gamma = gamma_values<float>(100, 9);
  std::vector<bf16> apart(x.size());
  rmsnorm(view<const bf16>(x.data(), 3, 100), gamma, view<bf16>(apart.data(), 3, 100), 1e-5f);
  const view<bf16> both(x.data(), 3, 100);
  rmsnorm(both, gamma, both, 1e-5f);
  if (!same_bits(x, apart)) check.fail("in place gives other bits");
}

// Sizes that do not fit are a shape_error naming the argument and both sizes, thrown before
// anything is written.
void check_shape_errors(checks& check) {
  check.context("kernel, shape errors");
  const std::vector<bf16> x(std::size_t{3} * 768, bf16(1.0f));
  const view<const bf16> x_view(x.data(), 3, 768);
  const std::vector<float> gamma(768, 1.0f), short_gamma(767, 1.0f);
  const std::vector<float> two_gammas(std::size_t{2} * 768, 1.0f);
  std::vector<bf16> y(std::size_t{4} * 769, bf16(5.0f));
  const auto expect_error = [&](const char* what, auto&& call,
                                const std::vector<std::string>& words) {
    try {
      call();
      check.fail("%s: no shape_error", what);
    } catch (const shape_error& error) {
      for (const std::string& word : words) {
        if (std::string(error.what()).find(word) == std::string::npos) {
          check.fail("%s: \"%s\" does not say \"%s\"", what, error.what(), word.c_str());
        }
      }
    }
    for (bf16 value : y) {
      if (value.to_float() != 5.0f) {
        check.fail("%s: y was written", what);
        break;
      }
    }
  };
  expect_error("gamma of 767",
               [&] { rmsnorm(x_view, short_gamma, view<bf16>(y.data(), 3, 768), 1e-5f); },
               {"tilekern::rmsnorm", "gamma", "767", "768"});
  expect_error("gamma of 2 rows",
               [&] {
                 rmsnorm(x_view, view<const float>(two_gammas.data(), 2, 768),
                         view<bf16>(y.data(), 3, 768), 1e-5f);
               },
               {"gamma", "2x768", "768"});
  expect_error("y of 3x769", [&] { rmsnorm(x_view, gamma, view<bf16>(y.data(), 3, 769), 1e-5f); },
               {"y", "3x769", "3x768"});
  expect_error("y of 4x768", [&] { rmsnorm(x_view, gamma, view<bf16>(y.data(), 4, 768), 1e-5f); },
               {"y", "4x768", "3x768"});

  // Plain ranges are one-row views, and a view of T is a view of const T.
  check.context("kernel, ranges and writable views");
  std::vector<bf16> row(x.begin(), x.begin() + 768), out(768);
  rmsnorm(row, gamma, out, 1e-5f);
  rmsnorm(view<bf16>(row.data(), 1, 768), std::span<const float>(gamma), std::span<bf16>(row),
          1e-5f);
  if (!same_bits(row, out)) check.fail("ranges and views give other bits");
}

}  // namespace

int main() {
  checks check("rmsnorm");

  example::for_each_isa([&](isa path) {
    for (const shape s : {shape{1, 1, 1}, shape{3, 17, 17}, shape{197, 768, 800}}) {
      check_operator<bf16, bf16, bf16>(check, path, s);
      check_operator<fp16, fp16, fp16>(check, path, s);
      check_operator<float, float, float>(check, path, s);
      check_operator<bf16, float, float>(check, path, s);
    }
    // Rows of 100003 need 2 x 400 KB of local memory per core.
    check_operator<bf16, bf16, bf16>(check, path, {2, 100003, 100003},
                                     {.cores = 2, .local_bytes = std::size_t{2} << 20});
  });
  check_local_memory(check);

  for (const shape s : {shape{1, 1, 1}, shape{1, 17, 17}, shape{3, 17, 20}, shape{7, 1000, 1000},
                        shape{197, 768, 800}, shape{2, 100003, 100003}}) {
    check_kernel<float, float, float>(check, s);
    check_kernel<bf16, bf16, bf16>(check, s);
    check_kernel<fp16, fp16, fp16>(check, s);
    check_kernel<bf16, float, float>(check, s);
    check_kernel<float, bf16, fp16>(check, s);
    check_kernel<fp8_e4m3, float, fp8_e4m3>(check, s);
  }
  check_kernel<float, float, bf16>(check, {5, 33, 40}, 0.0f);  // eps = 0
  check_special_rows<float>(check);
  check_special_rows<bf16>(check);
  check_special_rows<fp16>(check);
  check_in_place(check);
  check_shape_errors(check);
  for (std::size_t cols : {768, 8192, 100003}) {
    std::printf("kernel: largest relative error on rows of %zu: %.2f u (bound %.1f u, u = 2^-24)\n",
                cols, kernel_error_in_u(cols == 100003 ? 4 : 64, cols), kernel_bound(cols) / u);
  }
  return check.finish();
}
