// engine/tensor.hpp: tile-level matmul (acc += a b), matmul_AtB (acc += a^T b) and matmul_ABt
// (acc += a b^T), on tiles and on strided views (odd shapes, transposed views), float, fp16, bf16
// and fp8 operands, mixed; the shape errors of views; the path selection (bf16 pairs only with
// AVX512-BF16 and formats exact in bf16); the fp32 paths giving identical bits; the decoding
// atom reading every code of bf16 and the fp8 formats exactly.
//
// Expected values: operands are decoded by tests/types/reference.hpp; the exact product is summed
// in fp64 (reference::matmul) and the accumulation bound is (engine/tensor.hpp, u = 2^-24,
// gamma(n) = n u / (1 - n u)): each term of acc_old + sum_k a_ik b_kj passes through at most K
// roundings (K fused multiply-adds from acc_old, or K additions in bf16 pairs), so
//   |acc_new - (acc_old + sum_k a_ik b_kj)| <= gamma(K) (|acc_old| + sum_k |a_ik b_kj|)
//                                             + K 2^-126 (subnormal sums flushed by vdpbf16ps),
// with operands of normal size (vdpbf16ps also reads subnormal bf16 operands as zero: see the
// last test). On the fp32 compute path the result is moreover exactly the fma chain
// acc = fma(a_ik, b_kj, acc) in k order from acc_old, on the scalar, avx2 and avx512 paths alike.

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "support/elements.hpp"
#include "support/guarded.hpp"
#include "tilekern/engine/tensor.hpp"
#include "tilekern/error.hpp"
#include "tilekern/reference/matmul.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/tile/tile.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/formats.hpp"
#include "types/reference.hpp"

namespace tilekern {
namespace {

using test::guarded_buffer;
using test::is_float;
using test::name_of;
using test::saturated;
using test::value_of;

constexpr double u = 0x1p-24;

double gamma(std::size_t n) {
  const double nu = static_cast<double>(n) * u;
  return nu / (1 - nu);
}

// Formats, as engine/tensor.hpp decides which run on bf16 pairs.
static_assert(tensor::exact_in_bf16<bf16>);
static_assert(tensor::exact_in_bf16<fp8_e4m3> && tensor::exact_in_bf16<fp8_e4m3fn> &&
              tensor::exact_in_bf16<fp8_e5m2> && tensor::exact_in_bf16<fp8_e3m4>);
static_assert(!tensor::exact_in_bf16<fp16> && !tensor::exact_in_bf16<tf32> &&
              !tensor::exact_in_bf16<float>);

// Checks acc_new (rows x cols, row-major) against acc_old + op(A) op(B), given as fp64 row-major
// values of op(A) (m x k) and op(B) (k x n): within the bound, and on the fp32 path exactly the
// fma chain. One assertion per call (two on the fp32 path).
void check_product(const std::vector<float>& acc_old, const std::vector<float>& acc_new,
                   const std::vector<double>& a, const std::vector<double>& b, std::size_t m,
                   std::size_t k, std::size_t n, bool fp32_path, const std::string& what) {
  std::vector<double> exact(m * n), mag(m * n);
  for (std::size_t i = 0; i < exact.size(); ++i) exact[i] = acc_old[i];
  reference::matmul(view<const double>(a.data(), m, k), view<const double>(b.data(), k, n),
                    view<double>(exact.data(), m, n), 1.0, 1.0);
  reference::magnitude(view<const double>(a.data(), m, k), view<const double>(b.data(), k, n),
                       view<double>(mag.data(), m, n));
  std::size_t beyond = 0, unlike_chain = 0;
  std::string first;
  for (std::size_t r = 0; r < m; ++r) {
    for (std::size_t c = 0; c < n; ++c) {
      const std::size_t i = r * n + c;
      const double bound =
          gamma(k) * (std::abs(acc_old[i]) + mag[i]) + static_cast<double>(k) * 0x1p-126;
      if (!(std::abs(acc_new[i] - exact[i]) <= bound) && beyond++ == 0) {
        first = std::string("(") + std::to_string(r) + ", " + std::to_string(c) +
                ") = " + std::to_string(acc_new[i]) + ", exact " + std::to_string(exact[i]);
      }
      if (fp32_path) {
        float chain = acc_old[i];
        for (std::size_t kk = 0; kk < k; ++kk) {
          chain =
              std::fma(static_cast<float>(a[r * k + kk]), static_cast<float>(b[kk * n + c]), chain);
        }
        if (std::bit_cast<std::uint32_t>(chain) != std::bit_cast<std::uint32_t>(acc_new[i]) &&
            unlike_chain++ == 0) {
          first += std::string(" (") + std::to_string(r) + ", " + std::to_string(c) +
                   ") = " + std::to_string(acc_new[i]) + ", fma chain " + std::to_string(chain);
        }
      }
    }
  }
  INFO(what, ": ", beyond, " beyond the bound, ", unlike_chain, " unlike the fma chain; ", first);
  CHECK(beyond == 0);
  if (fp32_path) CHECK(unlike_chain == 0);
}

// ---- tiles ----

template <class T, std::size_t R, std::size_t C>
void fill(tile<T, R, C>& t, std::mt19937_64& generator, double sigma) {
  std::normal_distribution<double> normal(0.0, sigma);
  for (std::size_t i = 0; i < R * C; ++i) t.values[i] = saturated<T>(normal(generator));
}

// The decoded values of a tile, or of its transpose.
template <class T, std::size_t R, std::size_t C>
std::vector<double> values_of(const tile<T, R, C>& t, bool transpose = false) {
  std::vector<double> out;
  if (transpose) {
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t r = 0; r < R; ++r) out.push_back(value_of(t(r, c)));
  } else {
    for (std::size_t i = 0; i < R * C; ++i) out.push_back(value_of(t.values[i]));
  }
  return out;
}

template <std::size_t R, std::size_t C>
std::vector<float> floats_of(const accum<R, C>& acc) {
  return {acc.values, acc.values + R * C};
}

// acc (M x N, non-zero) += op(a) op(b) for tiles, for the three operations.
template <class A, class B, std::size_t M, std::size_t K, std::size_t N>
void check_tiles(std::uint64_t seed) {
  const bool fp32 = tensor::choose_path<A, B>().kind == tensor::compute::fp32;
  std::mt19937_64 generator(seed);
  const std::string types = name_of<A>() + " x " + name_of<B>() + ", " + std::to_string(M) + "x" +
                            std::to_string(K) + "x" + std::to_string(N) + ", " +
                            std::string(tilekern::name(active_isa()));
  accum<M, N> acc;
  fill(acc, generator, 1.0);
  {
    tile<A, M, K> a;
    tile<B, K, N> b;
    fill(a, generator, 1.0);
    fill(b, generator, 1.0);
    const std::vector<float> old = floats_of(acc);
    tensor::matmul(acc, a, b);
    check_product(old, floats_of(acc), values_of(a), values_of(b), M, K, N, fp32,
                  std::string("matmul ") + types);
  }
  {
    tile<A, K, M> a;
    tile<B, K, N> b;
    fill(a, generator, 1.0);
    fill(b, generator, 1.0);
    const std::vector<float> old = floats_of(acc);
    tensor::matmul_AtB(acc, a, b);
    check_product(old, floats_of(acc), values_of(a, true), values_of(b), M, K, N, fp32,
                  std::string("matmul_AtB ") + types);
  }
  {
    tile<A, M, K> a;
    tile<B, N, K> b;
    fill(a, generator, 1.0);
    fill(b, generator, 1.0);
    const std::vector<float> old = floats_of(acc);
    tensor::matmul_ABt(acc, a, b);
    check_product(old, floats_of(acc), values_of(a), values_of(b, true), M, K, N, fp32,
                  std::string("matmul_ABt ") + types);
    // and a view of the accumulator tile, with const operand tiles
    const tile<A, M, K>& ca = a;
    const tile<B, N, K>& cb = b;
    const std::vector<float> again = floats_of(acc);
    tensor::matmul_ABt(acc.view(), ca, cb);
    check_product(again, floats_of(acc), values_of(a), values_of(b, true), M, K, N, fp32,
                  std::string("matmul_ABt into acc.view() ") + types);
  }
}

TEST_CASE("tensor: tile matmul, matmul_AtB, matmul_ABt accumulate into a non-zero accum") {
  check_tiles<bf16, bf16, 16, 32, 32>(1);
  check_tiles<bf16, fp8_e4m3, 14, 40, 48>(2);
  check_tiles<fp8_e5m2, fp8_e4m3, 3, 7, 5>(3);
  check_tiles<fp16, fp16, 16, 33, 32>(4);
  check_tiles<float, bf16, 13, 31, 33>(5);
  check_tiles<float, float, 1, 64, 1>(6);
  check_tiles<fp8_e3m4, fp16, 29, 17, 64>(7);
}

// ---- views ----

// X: rows x cols in rows of ld >= cols, in a guarded buffer; decoded values row-major.
template <class T>
struct matrix {
  std::size_t rows, cols, ld;
  guarded_buffer<T> data;
  std::vector<double> values;
  matrix(std::size_t rows_, std::size_t cols_, std::size_t pad)
      : rows(rows_),
        cols(cols_),
        ld(cols_ + pad),
        data(rows_ == 0 ? 0 : (rows_ - 1) * (cols_ + pad) + cols_),
        values(rows_ * cols_) {}
  void fill(std::mt19937_64& generator) {
    std::normal_distribution<double> normal;
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = saturated<T>(normal(generator));
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) values[r * cols + c] = value_of(data[r * ld + c]);
  }
  view<T> v() { return {data.data(), rows, cols, ld}; }
  view<const T> cv() { return {data.data(), rows, cols, ld}; }
  std::vector<double> transposed_values() const {
    std::vector<double> out;
    for (std::size_t c = 0; c < cols; ++c)
      for (std::size_t r = 0; r < rows; ++r) out.push_back(values[r * cols + c]);
    return out;
  }
  std::vector<float> floats() {  // for a float matrix: the elements, row-major
    std::vector<float> out;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c)
        out.push_back(static_cast<float>(value_of(data[r * ld + c])));
    return out;
  }
  // Whether the gaps between rows still hold the bits they held in `before` (the whole buffer).
  bool gaps_hold(const std::vector<T>& before) {
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (i % ld >= cols && std::memcmp(&data[i], &before[i], sizeof(T)) != 0) return false;
    }
    return true;
  }
};

// acc (m x n view, strided, non-zero) += op(A) op(B) through views, for each operation and for
// transposed views in place of the transposing operations.
template <class A, class B>
void check_views(std::size_t m, std::size_t k, std::size_t n, std::uint64_t seed) {
  const bool fp32 = tensor::choose_path<A, B>().kind == tensor::compute::fp32;
  std::mt19937_64 generator(seed);
  const std::string types = name_of<A>() + " x " + name_of<B>() + ", " + std::to_string(m) + "x" +
                            std::to_string(k) + "x" + std::to_string(n) + ", " +
                            std::string(tilekern::name(active_isa()));
  matrix<float> acc(m, n, 3);
  acc.fill(generator);
  const std::vector<float> padding(acc.data.cspan().begin(), acc.data.cspan().end());  // all of it
  matrix<A> a(m, k, 2), at(k, m, 1);  // op(A) stored as it is, and its transpose
  matrix<B> b(k, n, 1), bt(n, k, 5);
  a.fill(generator);
  at.fill(generator);
  b.fill(generator);
  bt.fill(generator);
  const auto step = [&](const std::string& call, auto&& run, const std::vector<double>& av,
                        const std::vector<double>& bv) {
    const std::vector<float> old = acc.floats();
    run();
    check_product(old, acc.floats(), av, bv, m, k, n, fp32, call + " " + types);
    CHECK(acc.gaps_hold(padding));
  };
  step(
      "matmul", [&] { tensor::matmul(acc.v(), a.cv(), b.cv()); }, a.values, b.values);
  step(
      "matmul_AtB", [&] { tensor::matmul_AtB(acc.v(), at.cv(), b.v()); }, at.transposed_values(),
      b.values);
  step(
      "matmul_ABt", [&] { tensor::matmul_ABt(acc.v(), a.v(), bt.cv()); }, a.values,
      bt.transposed_values());
  step(
      "matmul(transposed(at), transposed(bt))",
      [&] { tensor::matmul(acc.v(), transposed(at.cv()), transposed(bt.cv())); },
      at.transposed_values(), bt.transposed_values());
  // A transposed view given to the transposing operations: (X^T)^T = X.
  step(
      "matmul_AtB(transposed(a))", [&] { tensor::matmul_AtB(acc.v(), transposed(a.cv()), b.cv()); },
      a.values, b.values);
  step(
      "matmul_ABt(transposed(b))", [&] { tensor::matmul_ABt(acc.v(), a.cv(), transposed(b.cv())); },
      a.values, b.values);
}

TEST_CASE("tensor: views of odd shapes, strided and transposed, mixed formats") {
  check_views<bf16, fp8_e4m3>(13, 37, 5, 10);
  check_views<fp16, fp8_e5m2>(13, 37, 5, 11);
  check_views<float, float>(13, 37, 5, 12);
  check_views<fp8_e4m3fn, bf16>(31, 129, 70, 13);
  check_views<tf32, float>(1, 300, 33, 14);
  check_views<bf16, bf16>(29, 1, 65, 15);
}

TEST_CASE("tensor: empty products leave acc unchanged") {
  matrix<float> acc(3, 4, 0);
  std::mt19937_64 generator(20);
  acc.fill(generator);
  const std::vector<float> before = acc.floats();
  matrix<bf16> a(3, 0, 0), b(0, 4, 0);
  tensor::matmul(acc.v(), a.cv(), b.cv());  // K = 0
  CHECK(acc.floats() == before);
  matrix<float> none(0, 4, 0);
  matrix<bf16> a0(0, 5, 0), b0(5, 4, 0);
  tensor::matmul(none.v(), a0.cv(), b0.cv());  // M = 0
  CHECK(none.floats().empty());
}

TEST_CASE("tensor: shape errors name the operation, the argument and both sizes") {
  std::vector<float> acc_data(64, 7.0f);
  std::vector<bf16> x(64, bf16::from(1.0));
  const view<float> acc(acc_data.data(), 3, 4);
  const auto a = [&](std::size_t r, std::size_t c) { return view<const bf16>(x.data(), r, c); };
  CHECK_THROWS_WITH_AS(tensor::matmul(acc, a(3, 5), a(6, 4)),
                       "tilekern::tensor::matmul: b has 6 rows (the k of a), expected 5",
                       shape_error);
  CHECK_THROWS_WITH_AS(tensor::matmul(acc, a(2, 5), a(5, 4)),
                       "tilekern::tensor::matmul: acc has 3 rows (the rows of a), expected 2",
                       shape_error);
  CHECK_THROWS_WITH_AS(tensor::matmul(acc, a(3, 5), a(5, 3)),
                       "tilekern::tensor::matmul: acc has 4 columns (the columns of b), expected 3",
                       shape_error);
  CHECK_THROWS_WITH_AS(tensor::matmul_AtB(acc, a(5, 3), a(6, 4)),
                       doctest::Contains("tilekern::tensor::matmul_AtB: b has 6 rows"),
                       shape_error);
  CHECK_THROWS_WITH_AS(tensor::matmul_AtB(acc, a(5, 2), a(5, 4)),
                       doctest::Contains("tilekern::tensor::matmul_AtB: acc has 3 rows"),
                       shape_error);
  CHECK_THROWS_WITH_AS(tensor::matmul_ABt(acc, a(3, 5), a(4, 6)),
                       doctest::Contains("tilekern::tensor::matmul_ABt: b has 6"), shape_error);
  CHECK_THROWS_WITH_AS(tensor::matmul_ABt(acc, a(3, 5), a(3, 5)),
                       doctest::Contains("tilekern::tensor::matmul_ABt: acc has 4 columns"),
                       shape_error);
  CHECK_THROWS_WITH_AS(tensor::matmul(acc, transposed(a(5, 3)), a(4, 4)),
                       "tilekern::tensor::matmul: b has 4 rows (the k of a), expected 5",
                       shape_error);
  for (const float v : acc_data) CHECK(v == 7.0f);
}

// ---- paths ----

TEST_CASE("tensor: bf16 pairs only when asked for, and for operands exact in bf16") {
  const auto kind = [](tensor::path p) { return p.kind; };
  const bool pairs = tensor::bf16_pairs_available();
#if defined(__AVX512BF16__)
  constexpr bool compiled_with_bf16 = true;
#else
  constexpr bool compiled_with_bf16 = false;
#endif
  const bool instruction =
      compiled_with_bf16 && active_isa() >= isa::avx512 && detected_cpu_features().avx512_bf16;
  CHECK(tensor::bf16_instruction_available() == instruction);
  CHECK(tensor::bf16_pairs_emulated() == !instruction);
  const char* setting = std::getenv("TILEKERN_BF16_PAIRS");  // NOLINT(concurrency-mt-unsafe)
  const std::string use = setting == nullptr ? "auto" : setting;
  if (use == "on") {
    CHECK(pairs == (active_isa() >= isa::avx2));
  } else {  // off, auto: the fp32 path, whatever the CPU has
    CHECK_FALSE(pairs);
  }
  CHECK((kind(tensor::choose_path<bf16, fp8_e4m3>()) == tensor::compute::bf16_pairs) == pairs);
  CHECK((kind(tensor::choose_path<bf16, bf16>()) == tensor::compute::bf16_pairs) == pairs);
  CHECK((kind(tensor::choose_path<fp8_e5m2, fp8_e3m4>()) == tensor::compute::bf16_pairs) == pairs);
  CHECK(kind(tensor::choose_path<fp16, fp8_e4m3>()) == tensor::compute::fp32);
  CHECK(kind(tensor::choose_path<bf16, tf32>()) == tensor::compute::fp32);
  CHECK(kind(tensor::choose_path<float, bf16>()) == tensor::compute::fp32);
  CHECK(kind(tensor::choose_path<float, float>()) == tensor::compute::fp32);
  CHECK(tensor::choose_path<fp16, fp8_e4m3>().level == active_isa(isa::avx512));
  // Pairs run at avx512 on the instruction, at avx2 emulated.
  if (pairs) {
    CHECK(tensor::choose_path<bf16, fp8_e4m3>().level == (instruction ? isa::avx512 : isa::avx2));
  }

  // Capped below avx2 there are no pairs, whatever the CPU or the setting; below avx512, only
  // emulated ones when asked for.
  const std::optional<isa> cap = isa_cap();
  for (const isa level : {isa::scalar, isa::avx2}) {
    set_isa_cap(level);
    CHECK_FALSE(tensor::bf16_instruction_available());
    CHECK(tensor::bf16_pairs_available() == (use == "on" && active_isa() >= isa::avx2));
    tensor::set_bf16_pairs(true);
    CHECK(tensor::bf16_pairs_available() == (active_isa() >= isa::avx2));
    tensor::set_bf16_pairs(std::nullopt);
    CHECK(active_isa() <= level);
  }
  set_isa_cap(std::nullopt);
  CHECK(isa_cap() == cap);

  // set_bf16_pairs overrides the environment.
  tensor::set_bf16_pairs(false);
  CHECK_FALSE(tensor::bf16_pairs_available());
  CHECK(kind(tensor::choose_path<bf16, bf16>()) == tensor::compute::fp32);
  tensor::set_bf16_pairs(true);
  CHECK(tensor::bf16_pairs_available() == (active_isa() >= isa::avx2));
  tensor::set_bf16_pairs(std::nullopt);
  CHECK(tensor::bf16_pairs_available() == pairs);
}

TEST_CASE("tensor: the fp32 paths (scalar, avx2, avx512) give the same bits") {
  std::mt19937_64 generator(30);
  // 29 rows: groups of 14 + 8 + 4 + 2 + 1 (avx512), 6 * 4 + 4 + 1 (avx2), 4 * 7 + 1 (scalar).
  matrix<float> a(29, 300, 1), b(300, 70, 2), acc0(29, 70, 0);
  matrix<fp16> h(29, 300, 0);
  matrix<bf16> g(300, 70, 3), ga(29, 300, 2);
  ga.fill(generator);
  a.fill(generator);
  b.fill(generator);
  h.fill(generator);
  g.fill(generator);
  acc0.fill(generator);
  std::vector<std::vector<float>> float_results, mixed_results, bf16_results;
  std::vector<isa> levels;
  const std::optional<isa> cap = isa_cap();
  for (const isa level : test::available_isas()) {
    if (level > isa::avx512) continue;  // amx is avx512 for this engine
    set_isa_cap(level);
    levels.push_back(level);
    matrix<float> acc(29, 70, 0);
    const auto run = [&](auto&& call) {
      for (std::size_t i = 0; i < acc.data.size(); ++i) acc.data[i] = acc0.data[i];
      call();
      return acc.floats();
    };
    float_results.push_back(run([&] { tensor::matmul(acc.v(), a.cv(), b.cv()); }));
    mixed_results.push_back(run([&] { tensor::matmul(acc.v(), h.cv(), g.cv()); }));
    if (!tensor::bf16_pairs_available()) {
      bf16_results.push_back(run([&] { tensor::matmul(acc.v(), ga.cv(), g.cv()); }));
      check_product(acc0.floats(), bf16_results.back(), ga.values, g.values, 29, 300, 70, true,
                    std::string("bf16 x bf16 on ") + std::string(tilekern::name(level)));
    }
    const bool fp32 = true;  // float and fp16 operands: the fp32 path at every level
    check_product(acc0.floats(), float_results.back(), a.values, b.values, 29, 300, 70, fp32,
                  std::string("float x float on ") + std::string(tilekern::name(level)));
    check_product(acc0.floats(), mixed_results.back(), h.values, g.values, 29, 300, 70, fp32,
                  std::string("fp16 x bf16 on ") + std::string(tilekern::name(level)));
  }
  set_isa_cap(std::nullopt);
  CHECK(isa_cap() == cap);
  REQUIRE(!levels.empty());
  for (std::size_t i = 1; i < levels.size(); ++i) {
    INFO(tilekern::name(levels[i]), " against ", tilekern::name(levels[0]));
    CHECK(float_results[i] == float_results[0]);
    CHECK(mixed_results[i] == mixed_results[0]);
  }
  for (std::size_t i = 1; i < bf16_results.size(); ++i) CHECK(bf16_results[i] == bf16_results[0]);
  MESSAGE("fp32 paths compared: ", levels.size(), "; bf16 x bf16 on the fp32 path at ",
          bf16_results.size(), " of them");
}

TEST_CASE("tensor: bf16 pairs read subnormal bf16 operands as zero (vdpbf16ps, not emulated)") {
  // a = 2^-130 (a bf16 subnormal) times b = 2^120: the exact product is 2^-10.
  tile<bf16, 1, 2> a;
  tile<bf16, 2, 1> b;
  a(0, 0) = bf16::from(0x1p-130);
  b(0, 0) = bf16::from(0x1p120);
  accum<1, 1> acc;
  tensor::matmul(acc, a, b);
  // vdpbf16ps flushes; its emulation (and the fp32 path) does not.
  const bool flushes = tensor::bf16_pairs_available() && !tensor::bf16_pairs_emulated();
  if (flushes) {
    CHECK(acc(0, 0) == 0.0f);  // documented; beyond the K 2^-126 the header's bound allows
  } else {
    CHECK(acc(0, 0) == 0x1p-10f);
  }
  // Normal operands whose product is an fp32 subnormal: flushed on pairs, exact otherwise.
  tile<bf16, 1, 1> c;
  c(0, 0) = bf16::from(0x1p-70);
  accum<1, 1> tiny;
  tensor::matmul(tiny, c, c);
  CHECK(tiny(0, 0) == (flushes ? 0.0f : 0x1p-140f));
}

#if defined(TILEKERN_CONVERT_AVX2)
// A decoding atom (avx2_fp32_decoding, avx512_fp32_decoding) reads every code of every format it
// takes as to_float() does (built from integers), bit for bit (NaN payloads and signed zeros
// included; bf16's signalling NaNs stay signalling), as the even and as the odd k of a pair, and
// its mma is the even k's fma, then the odd k's (which quiets them).
template <template <class> class Atom, class F>
void check_decoding() {
  using atom = Atom<F>;
  constexpr std::uint32_t lanes = atom::lanes;
  const std::uint32_t codes = 1u << (8 * sizeof(F));
  std::size_t wrong = 0;
  for (std::uint32_t first = 0; first < codes; first += lanes) {
    // Column j's even k holds code first + j, its odd k the code `lanes` columns on.
    F pairs[2 * lanes];
    for (std::uint32_t j = 0; j < lanes; ++j) {
      pairs[2 * j] = F::from_code(first + j);
      pairs[2 * j + 1] = F::from_code((first + j + lanes) % codes);
    }
    const auto decoded = atom::load_b(pairs);
    float even[lanes], odd[lanes];
    atom::store(even, decoded.even);
    atom::store(odd, decoded.odd);
    for (std::size_t j = 0; j < 2 * lanes; ++j) {
      std::uint32_t got = std::bit_cast<std::uint32_t>(j % 2 == 0 ? even[j / 2] : odd[j / 2]);
      // bf16 decodes by a shift: a signalling NaN stays one, quieted by the fma that reads it.
      if (std::is_same_v<F, bf16> && std::isnan(std::bit_cast<float>(got))) got |= 0x400000u;
      const float want = pairs[j].to_float();
      if (got != std::bit_cast<std::uint32_t>(want) && wrong++ < 4) {
        INFO(format_name<F>(), " on ", lanes, " lanes: code ", pairs[j].code(), " decodes to ", got,
             ", want ", std::bit_cast<std::uint32_t>(want));
        CHECK(got == std::bit_cast<std::uint32_t>(want));
      }
    }
    // c + a_even b_even + a_odd b_odd as two fmas, the even k's first (where two NaNs meet, the
    // one that propagates depends on the fma's encoding: then any NaN).
    const float a[2] = {0.75f, -1.25f};
    float c[lanes], sums[lanes];
    for (std::size_t j = 0; j < lanes; ++j) c[j] = static_cast<float>(j) - 3.5f;
    atom::store(sums, atom::mma(atom::load(c), atom::broadcast_a(a), decoded));
    for (std::size_t j = 0; j < lanes; ++j) {
      const float want = std::fma(a[1], odd[j], std::fma(a[0], even[j], c[j]));
      const bool two_nans = std::isnan(even[j]) && std::isnan(odd[j]);
      const bool same =
          two_nans ? std::isnan(sums[j])
                   : std::bit_cast<std::uint32_t>(sums[j]) == std::bit_cast<std::uint32_t>(want);
      if (!same && wrong++ < 4) {
        INFO(format_name<F>(), " on ", lanes, " lanes: mma of column ", j, " gives ", sums[j],
             ", want ", want);
        CHECK(same);
      }
    }
  }
  CHECK(wrong == 0);
}

template <template <class> class Atom>
void check_decoding_every_format() {
  check_decoding<Atom, bf16>();
  check_decoding<Atom, fp8_e4m3>();
  check_decoding<Atom, fp8_e4m3fn>();
  check_decoding<Atom, fp8_e5m2>();
  check_decoding<Atom, fp8_e3m4>();
}

TEST_CASE("tensor: the decoding atoms read every code of bf16 and of every fp8 format exactly") {
  static_assert(tensor::atoms::decodable<bf16> && tensor::atoms::decodable<fp8_e4m3> &&
                tensor::atoms::decodable<fp8_e4m3fn> && tensor::atoms::decodable<fp8_e5m2> &&
                tensor::atoms::decodable<fp8_e3m4>);
  static_assert(!tensor::atoms::decodable<float> && !tensor::atoms::decodable<fp16> &&
                !tensor::atoms::decodable<tf32>);
  std::size_t atoms = 0;
  if (active_isa() >= isa::avx2) {
    check_decoding_every_format<tensor::atoms::avx2_fp32_decoding>();
    ++atoms;
  }
#if defined(TILEKERN_CONVERT_AVX512)
  if (active_isa() >= isa::avx512) {
    check_decoding_every_format<tensor::atoms::avx512_fp32_decoding>();
    ++atoms;
  }
#endif
  MESSAGE("decoding atoms checked: ", atoms);
}
#endif

}  // namespace
}  // namespace tilekern
