// The vector engine (engine/vector.hpp) against double-precision computations in the test:
// elementwise operations for float and three formats (every named format through one operation
// each) as destination and as source, every broadcast kind, odd and strided shapes, every
// rounding through vector::rounded; bit-identity across ISA paths; reductions within derived
// bounds; bn_stats / bn_aggr against fp64 two-pass statistics; and the shape errors of every
// operation and argument. Destinations and sources live in guarded buffers whose last row ends
// at an unreadable page (engine_support.hpp).

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <immintrin.h>

#include "engine/engine_support.hpp"
#include "tilekern/engine/scalar.hpp"
#include "tilekern/engine/vector.hpp"

namespace tilekern::test::engine_tests {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Elementwise tensor-tensor and tensor-scalar arithmetic.

enum class binop { add, sub, mul, div, max, min };
constexpr binop all_binops[] = {binop::add, binop::sub, binop::mul,
                                binop::div, binop::max, binop::min};

const char* binop_name(binop op) {
  switch (op) {
    case binop::add:
      return "add";
    case binop::sub:
      return "sub";
    case binop::mul:
      return "mul";
    case binop::div:
      return "div";
    case binop::max:
      return "max";
    case binop::min:
      return "min";
  }
  return "?";
}

// The fp32 result of x op y for fp32 values x and y: the double result rounded once (correct for
// + - * /); max and min as documented (x86's maxps/minps: y unless x is strictly greater/less).
float apply(binop op, double x, double y) {
  switch (op) {
    case binop::add:
      return static_cast<float>(x + y);
    case binop::sub:
      return static_cast<float>(x - y);
    case binop::mul:
      return static_cast<float>(x * y);
    case binop::div:
      return static_cast<float>(x / y);
    case binop::max:
      return static_cast<float>(x > y ? x : y);
    case binop::min:
      return static_cast<float>(x < y ? x : y);
  }
  return 0;
}

// An operation fixed at compile time: code given only<op> instantiates that operation alone.
template <binop Op>
using fixed_binop = std::integral_constant<binop, Op>;
template <binop Op>
constexpr fixed_binop<Op> only{};

template <binop Op, class Dst, class A, class B>
void run(fixed_binop<Op>, Dst&& dst, const A& a, const B& b) {
  if constexpr (Op == binop::add) {
    vector::add(dst, a, b);
  } else if constexpr (Op == binop::sub) {
    vector::sub(dst, a, b);
  } else if constexpr (Op == binop::mul) {
    vector::mul(dst, a, b);
  } else if constexpr (Op == binop::div) {
    vector::div(dst, a, b);
  } else if constexpr (Op == binop::max) {
    vector::max(dst, a, b);
  } else {
    vector::min(dst, a, b);
  }
}

template <class Dst, class A, class B>
void run(binop op, Dst&& dst, const A& a, const B& b) {
  switch (op) {
    case binop::add:
      return run(only<binop::add>, dst, a, b);
    case binop::sub:
      return run(only<binop::sub>, dst, a, b);
    case binop::mul:
      return run(only<binop::mul>, dst, a, b);
    case binop::div:
      return run(only<binop::div>, dst, a, b);
    case binop::max:
      return run(only<binop::max>, dst, a, b);
    case binop::min:
      return run(only<binop::min>, dst, a, b);
  }
}

// dst (D) = a (A, full, strided) op b (B, in the given broadcast shape), rounded with `cast` and
// the given stochastic indices, against the double computation. `op` is a binop, or only<op>.
template <class D, class A, class B, class Op>
void check_binary(Op op, shape s, broadcast kind, const cast_options& cast, index_config indices,
                  std::uint64_t seed) {
  tensor<D> dst(s.rows, s.cols, s.cols + 3);
  tensor<A> a(s.rows, s.cols, s.cols + 2);
  fill_grid(a, seed);
  source<B> b(kind, s.rows, s.cols, seed + 1, op == binop::div ? 0.375f : 1.375f);
  if (op == binop::div) b.avoid_zero();
  const std::uint64_t index_stride = index_stride_of(indices, s.cols);
  b.pass([&](const auto& operand) {
    run(op, vector::rounded(dst.v(), cast, indices.first_index, index_stride), a.cv(), operand);
  });
  const std::uint64_t stride = index_stride != 0 ? index_stride : s.cols;
  check_values(
      dst,
      [&](std::size_t r, std::size_t c) {
        const float x = apply(op, value_of(a(r, c)), b.at(r, c));
        return expected_from_float<D>(x, cast, indices.first_index + r * stride + c);
      },
      std::string(binop_name(op)) + " " + name_of<D>() + " = " + name_of<A>() + " op " +
          name_of<B>() + " (" + broadcast_name(kind) + ") " + shape_name(s.rows, s.cols) + " " +
          describe_cast(cast) + " first index " + std::to_string(indices.first_index));
}

// Every rounding the destination format takes (one for float) and, for stochastic rounding,
// both index configurations.
template <class D, class Body>
void for_each_rounding(Body&& body) {
  for (const cast_options& cast : all_casts) {
    if (is_float<D> && cast.round != rounding::nearest_even) continue;
    for (const index_config& indices : index_configs) {
      if (cast.round != rounding::stochastic && indices.first_index != 0) continue;
      body(cast, indices);
    }
  }
}

TEST_CASE("vector: add sub mul div max min, each test format as destination, every rounding") {
  for_each_element_type([]<class D>() {
    std::uint64_t seed = 1;
    for (binop op : all_binops) {
      for (shape s : odd_shapes) {
        for_each_rounding<D>([&](const cast_options& cast, index_config indices) {
          for (broadcast kind : all_broadcasts) {
            // Every broadcast kind for add and mul; full and column for the others.
            if (op != binop::add && op != binop::mul && kind != broadcast::full &&
                kind != broadcast::column)
              continue;
            check_binary<D, float, float>(op, s, kind, cast, indices, ++seed);
          }
        });
      }
    }
  });
}

TEST_CASE("vector: add sub mul div max min, each test format as source") {
  for_each_element_type([]<class S>() {
    std::uint64_t seed = 100;
    for (binop op : all_binops) {
      for (shape s : odd_shapes) {
        for (broadcast kind : all_broadcasts) {
          check_binary<float, S, S>(op, s, kind, {}, {0, 0}, ++seed);
        }
      }
    }
  });
}

TEST_CASE("vector: bf16 from bf16 and float sources (interleaved blocks), every rounding") {
  // With a bf16 destination and bf16 sources, float rows and float columns, the vector paths
  // convert two blocks at a time, interleaved (engine/lanes.hpp), a float row read from a copy in
  // that order; a float source of the destination's shape keeps the blocks in order (two encoded
  // together on 8 lanes, and on 16 with AVX512-BF16: vector_encoder::in_order). Every element
  // against the definition, with its index. At 8 and 16 lanes, 57 columns end in a pair of blocks,
  // one block in order and a tail.
  std::uint64_t seed = 2000;
  for (binop op : all_binops) {
    for (shape s : {shape{3, 15}, shape{7, 33}, shape{2, 57}, shape{2, 100}, shape{1, 1001}}) {
      for_each_rounding<bf16>([&](const cast_options& cast, index_config indices) {
        for (broadcast kind : all_broadcasts) {
          check_binary<bf16, bf16, bf16>(op, s, kind, cast, indices, ++seed);
          check_binary<bf16, bf16, float>(op, s, kind, cast, indices, ++seed);
          check_binary<bf16, float, bf16>(op, s, kind, cast, indices, ++seed);
        }
      });
    }
  }
}

// Nearest even without saturation, under MXCSR.DAZ clear, is the cast the row loops give a bf16 or
// fp16 destination a plain encoder for (lane_store, engine/lanes.hpp); saturation and DAZ take the
// encoder that tests them. Values that overflow, inf, fp32 subnormals (which vcvtneps2bf16
// flushes, and DAZ hides from vfpclassps) and ordinary values, passed through unchanged (under
// DAZ an arithmetic operation would read the subnormals as 0), from float sources (blocks in
// order) and bf16 ones (interleaved blocks for a bf16 destination), in rows of pairs of blocks, a
// single block and a tail: every element against the scalar encoder, under each cast and MXCSR.
TEST_CASE("vector: bf16 and fp16 destinations saturate, and keep fp32 subnormals under DAZ") {
  const float specials[] = {3.4e38f, -3.4e38f, inf,   -inf, 70000.0f, -65520.0f, 1e-39f,
                            -3e-41f, 1.4e-45f, 6e-8f, 1.5f, -2.75f,   0.0f,      -0.0f};
  const auto check = []<class D, class S>(tensor<S>& source, const cast_options& cast, bool daz) {
    tensor<D> dst(source.rows(), source.cols(), source.cols() + 3);
    const unsigned saved = _mm_getcsr();
    if (daz) _mm_setcsr(saved | 0x40u);
    vector::map(
        vector::rounded(dst.v(), cast), [](auto, auto v) { return v; }, source.cv());
    _mm_setcsr(saved);
    check_values(
        dst,
        [&](std::size_t r, std::size_t c) {
          return expected_from_float<D>(static_cast<float>(value_of(source(r, c))), cast, 0);
        },
        name_of<D>() + " from " + name_of<S>() + " " + describe_cast(cast) +
            (daz ? " under DAZ" : ""));
  };
  std::mt19937_64 random(7);
  tensor<float> values(3, 87);  // on 16 lanes two pairs of blocks, a block, a tail of 7
  for (std::size_t r = 0; r < values.rows(); ++r) {
    for (std::size_t c = 0; c < values.cols(); ++c) {
      values(r, c) = specials[random() % std::size(specials)];
    }
  }
  tensor<bf16> values16(values.rows(), values.cols());
  for (std::size_t r = 0; r < values.rows(); ++r) {
    for (std::size_t c = 0; c < values.cols(); ++c) {
      values16(r, c) = bf16::from(values(r, c));  // 3.4e38 to inf
    }
  }
  for (const overflow on_overflow : {overflow::standard, overflow::saturate}) {
    const cast_options cast{.round = rounding::nearest_even, .on_overflow = on_overflow};
    for (const bool daz : {false, true}) {
      check.operator()<bf16>(values, cast, daz);
      check.operator()<bf16>(values16, cast, daz);
      check.operator()<fp16>(values, cast, daz);
    }
  }
}

// Destination, a and b in three different formats: element K of element_types with K + 1 and
// K + 3 (cyclically).
template <std::size_t K>
void check_mixed() {
  constexpr std::size_t n = std::tuple_size_v<element_types>;
  using D = std::tuple_element_t<K, element_types>;
  using A = std::tuple_element_t<(K + 1) % n, element_types>;
  using B = std::tuple_element_t<(K + 3) % n, element_types>;
  std::uint64_t seed = 1000 + K * 100;
  for (binop op : all_binops) {
    for (shape s : {shape{3, 15}, shape{7, 33}}) {
      for_each_rounding<D>([&](const cast_options& cast, index_config indices) {
        for (broadcast kind : {broadcast::full, broadcast::row, broadcast::column}) {
          check_binary<D, A, B>(op, s, kind, cast, indices, ++seed);
        }
      });
    }
  }
}

template <std::size_t... K>
void check_all_mixed(std::index_sequence<K...>) {
  (check_mixed<K>(), ...);
}

TEST_CASE("vector: mixed formats") {
  check_all_mixed(std::make_index_sequence<std::tuple_size_v<element_types>>());
}

TEST_CASE("vector: long rows (2x65537)") {
  const cast_options stochastic{rounding::stochastic, overflow::standard, 7, 3};
  check_binary<bf16, fp8_e4m3, float>(binop::mul, {2, 65537}, broadcast::column, stochastic,
                                      {977, 5}, 1);
  check_binary<fp8_e5m2, bf16, fp16>(binop::add, {2, 65537}, broadcast::full, {}, {0, 0}, 2);
  check_binary<float, float, bf16>(binop::div, {2, 65537}, broadcast::row, {}, {0, 0}, 3);
}

TEST_CASE("vector: max and min with NaN give b, as documented") {
  tensor<float> a(2, 19), b(2, 19), big(2, 19), small(2, 19);
  for (std::size_t c = 0; c < 19; ++c) {
    a(0, c) = c % 3 == 0 ? nan : static_cast<float>(c);
    b(0, c) = 5.0f;
    a(1, c) = 2.0f;
    b(1, c) = c % 4 == 0 ? nan : static_cast<float>(c) - 9.0f;
  }
  vector::max(big.v(), a.cv(), b.cv());
  vector::min(small.v(), a.cv(), b.cv());
  check_values(
      big, [&](std::size_t r, std::size_t c) { return apply(binop::max, a(r, c), b(r, c)); },
      "max with NaN");
  check_values(
      small, [&](std::size_t r, std::size_t c) { return apply(binop::min, a(r, c), b(r, c)); },
      "min with NaN");
  CHECK(std::isnan(big(1, 0)));  // b is NaN
  CHECK(big(0, 0) == 5.0f);      // a is NaN: b
  CHECK(std::isnan(small(1, 4)));
}

// ---------------------------------------------------------------------------------------------
// map: any expression of up to 8 sources, with broadcasts.

TEST_CASE("vector: map, three sources with broadcasts, each test format as destination") {
  for_each_element_type([]<class D>() {
    for (shape s : odd_shapes) {
      for_each_rounding<D>([&](const cast_options& cast, index_config indices) {
        tensor<D> dst(s.rows, s.cols, s.cols + 1);
        tensor<bf16> x(s.rows, s.cols, s.cols + 4);
        fill_grid(x, 5);
        source<fp8_e4m3> y(broadcast::row, s.rows, s.cols, 6);
        source<float> z(broadcast::column, s.rows, s.cols, 7);
        const std::uint64_t index_stride = index_stride_of(indices, s.cols);
        vector::map(
            vector::rounded(dst.v(), cast, indices.first_index, index_stride),
            [](auto, auto p, auto q, auto t) { return hn::MulAdd(p, q, t); }, x.cv(), y.data().cv(),
            z.data().cv());
        const std::uint64_t stride = index_stride != 0 ? index_stride : s.cols;
        check_values(
            dst,
            [&](std::size_t r, std::size_t c) {
              const float fma =
                  std::fma(static_cast<float>(value_of(x(r, c))), static_cast<float>(y.at(r, c)),
                           static_cast<float>(z.at(r, c)));
              return expected_from_float<D>(fma, cast, indices.first_index + r * stride + c);
            },
            "map fma " + name_of<D>() + " " + shape_name(s.rows, s.cols) + " " +
                describe_cast(cast));
      });
    }
  });
}

// map with no sources does not compile (engine bug: elementwise's resolve_next is set but not
// used for an empty pack, -Werror=unused-but-set-variable); reported, not tested here.
TEST_CASE("vector: map with a float source") {
  tensor<fp16> dst(3, 21, 25);
  vector::map(
      dst.v(), [](auto, auto x) { return x; }, 2.5f);
  check_values(
      dst, [](std::size_t, std::size_t) { return fp16::from(2.5f); }, "map constant");
  tensor<float> out(3, 21);
  vector::map(
      out.v(), [](auto d, auto x, auto y) { return hn::Sqrt(x) + y + hn::Set(d, 1.0f); }, 6.25f,
      dst.cv());
  check_values(
      out, [](std::size_t, std::size_t) { return 6.0f; }, "map sqrt(6.25) + 2.5 + 1");
}

// A float map whose rows start anywhere in a line: where the destination's row and its first
// source's start at the same place, the row loop on 16 lanes computes the elements up to the next
// line as one masked block and the rest from there (engine/lanes.hpp, masked_ends; on 8 lanes
// only the tail is a masked block), so every element must come out as it would from any block,
// here fma(x, the row's value, the column's g), bit for bit: every offset of the rows in a line,
// the source at the same offset, at the next one and in place, contiguous and strided rows,
// lengths around a block, on every path. The buffers have 16 floats to spare and end at an
// unreadable page: the tensors start 0 to 16 floats into them (16: they end at the page), and the
// floats around the destination are checked untouched.
TEST_CASE("vector: a float map gives the same bits wherever its rows start in a line") {
  const std::size_t rows = 3, spare = 16;
  constexpr float untouched = 7.0f;
  for (std::size_t cols : {1, 5, 7, 8, 9, 15, 16, 17, 23, 31, 33, 47, 100, 767}) {
    for (std::size_t stride : {cols, cols + 3}) {
      const std::size_t n = (rows - 1) * stride + cols;
      std::vector<float> x0(n), column(rows), g(cols);
      std::mt19937 random(static_cast<unsigned>(cols * 7 + stride));
      std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
      for (float& v : x0) v = uniform(random);
      for (float& v : column) v = uniform(random);
      for (float& v : g) v = uniform(random);
      for (std::size_t offset = 0; offset <= spare; ++offset) {
        for (const char* source : {"same offset", "next offset", "in place"}) {
          const bool in_place = source[0] == 'i';
          const std::size_t x_offset = source[0] == 'n' ? (offset + 1) % (spare + 1) : offset;
          for_each_isa([&](isa level) {
            guarded_buffer<float> y_buffer(n + spare), x_buffer(n + spare);
            std::fill_n(y_buffer.data(), n + spare, untouched);
            float* const y = y_buffer.data() + offset;
            float* const x = in_place ? y : x_buffer.data() + x_offset;
            for (std::size_t r = 0; r < rows; ++r) {
              std::copy_n(x0.begin() + static_cast<std::ptrdiff_t>(r * stride), cols,
                          x + r * stride);
            }
            vector::map(
                view<float>(y, rows, cols, stride),
                [](auto, auto v, auto c, auto w) { return hn::MulAdd(v, c, w); },
                view<const float>(x, rows, cols, stride),
                vector::column(view<const float>(column.data(), rows, 1, 1)),
                view<const float>(g.data(), 1, cols));
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < n + spare; ++i) {
              const bool inside = i >= offset && i < offset + n && (i - offset) % stride < cols;
              if (inside) {
                const std::size_t r = (i - offset) / stride, c = (i - offset) % stride;
                const float want = std::fma(x0[r * stride + c], column[r], g[c]);
                wrong += bits_of(y_buffer[i]) != bits_of(want);
              } else {
                wrong += y_buffer[i] != untouched;
              }
            }
            CHECK_MESSAGE(wrong == 0, rows, "x", cols, " stride ", stride, ", ", offset,
                          " floats into the buffer, source at the ", std::string(source), ", ",
                          std::string(name(level)), ": ", wrong, " floats wrong");
          });
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// select, affine_select, iota, transpose.

TEST_CASE("vector: select by a bool mask, a float mask and a format mask") {
  for_each_element_type([]<class D>() {
    for (shape s : odd_shapes) {
      for_each_rounding<D>([&](const cast_options& cast, index_config indices) {
        const std::uint64_t index_stride = index_stride_of(indices, s.cols);
        const std::uint64_t stride = index_stride != 0 ? index_stride : s.cols;
        tensor<fp16> a(s.rows, s.cols, s.cols + 2);
        fill_grid(a, 11);
        source<bf16> b(broadcast::column, s.rows, s.cols, 12);
        std::mt19937_64 random(13);
        // A bool mask (full), a float mask with NaN (nonzero) and -0 (zero), an fp8 mask (row).
        guarded_buffer<bool> keep(s.rows * s.cols);
        tensor<float> weights(s.rows, s.cols, s.cols + 1);
        tensor<fp8_e5m2> row_mask(1, s.cols);
        for (std::size_t r = 0; r < s.rows; ++r) {
          for (std::size_t c = 0; c < s.cols; ++c) {
            keep[r * s.cols + c] = random() % 2 == 0;
            const std::uint64_t pick = random() % 5;
            weights(r, c) = pick == 0 ? 0.0f : pick == 1 ? -0.0f : pick == 2 ? nan : 0.5f;
          }
        }
        for (std::size_t c = 0; c < s.cols; ++c)
          row_mask(0, c) = fp8_e5m2::from(c % 3 == 0 ? 0.0f : -2.0f);
        // The expected element for a mask value m: a where m != 0 (NaN counts as nonzero).
        const auto expect = [&](auto mask_at) {
          return [&, mask_at](std::size_t r, std::size_t c) {
            const double m = mask_at(r, c);
            const double v = (m != 0.0 || std::isnan(m)) ? value_of(a(r, c)) : b.at(r, c);
            return expected_from_float<D>(static_cast<float>(v), cast,
                                          indices.first_index + r * stride + c);
          };
        };
        const std::string where =
            " " + name_of<D>() + " " + shape_name(s.rows, s.cols) + " " + describe_cast(cast);
        {
          tensor<D> dst(s.rows, s.cols, s.cols + 3);
          vector::select(vector::rounded(dst.v(), cast, indices.first_index, index_stride),
                         view<const bool>(keep.data(), s.rows, s.cols), a.cv(), b.data().cv());
          check_values(dst, expect([&](std::size_t r, std::size_t c) {
                         return keep[r * s.cols + c] ? 1.0 : 0.0;
                       }),
                       "select bool mask" + where);
        }
        {
          tensor<D> dst(s.rows, s.cols, s.cols + 3);
          vector::select(vector::rounded(dst.v(), cast, indices.first_index, index_stride),
                         weights.cv(), a.cv(), b.data().cv());
          check_values(dst, expect([&](std::size_t r, std::size_t c) {
                         return static_cast<double>(weights(r, c));
                       }),
                       "select float mask" + where);
        }
        {
          tensor<D> dst(s.rows, s.cols, s.cols + 3);
          vector::select(vector::rounded(dst.v(), cast, indices.first_index, index_stride),
                         row_mask.cv(), a.cv(), b.data().cv());
          check_values(dst,
                       expect([&](std::size_t, std::size_t c) { return value_of(row_mask(0, c)); }),
                       "select fp8 row mask" + where);
        }
      });
    }
  });
}

TEST_CASE("vector: affine_select, the causal mask with differing query and key lengths") {
  struct causal_case {
    std::size_t queries, keys;
  };
  for_each_element_type([]<class D>() {
    for (causal_case q : {causal_case{5, 9}, causal_case{9, 5}, causal_case{7, 7},
                          causal_case{1, 17}, causal_case{3, 40}}) {
      for (float fill : {-inf, -3.0f}) {
        for_each_rounding<D>([&](const cast_options& cast, index_config indices) {
          const std::uint64_t index_stride = index_stride_of(indices, q.keys);
          const std::uint64_t stride = index_stride != 0 ? index_stride : q.keys;
          tensor<D> dst(q.queries, q.keys, q.keys + 2);
          tensor<fp16> scores(q.queries, q.keys, q.keys + 1);
          fill_grid(scores, 21);
          const float offset = static_cast<float>(q.keys) - static_cast<float>(q.queries);
          vector::affine_select(vector::rounded(dst.v(), cast, indices.first_index, index_stride),
                                scores.cv(), affine{.row = 1, .col = -1, .offset = offset}, fill);
          check_values(
              dst,
              [&](std::size_t r, std::size_t c) {
                // Query r sees keys 0 .. r + keys - queries (keys aligned at the end).
                const bool visible = static_cast<double>(c) <= static_cast<double>(r) +
                                                                   static_cast<double>(q.keys) -
                                                                   static_cast<double>(q.queries);
                const double v = visible ? value_of(scores(r, c)) : fill;
                return expected_from_float<D>(static_cast<float>(v), cast,
                                              indices.first_index + r * stride + c);
              },
              "causal " + name_of<D>() + " " + shape_name(q.queries, q.keys) + " fill " +
                  std::to_string(fill) + " " + describe_cast(cast));
        });
      }
    }
  });
}

TEST_CASE("vector: affine_select with a general predicate and a row source") {
  tensor<float> dst(6, 37, 40);
  tensor<bf16> row(1, 37);
  fill_grid(row, 3);
  const affine p{.row = 2.0f, .col = -3.0f, .offset = 1.0f};
  vector::affine_select(dst.v(), row.cv(), p, 0.25f);
  check_values(
      dst,
      [&](std::size_t r, std::size_t c) {
        const double predicate = 2.0 * static_cast<double>(r) - 3.0 * static_cast<double>(c) + 1;
        return static_cast<float>(predicate >= 0 ? value_of(row(0, c)) : 0.25);
      },
      "affine_select 2r - 3c + 1 >= 0");
}

TEST_CASE("vector: iota, each test format as destination") {
  for_each_element_type([]<class D>() {
    for (shape s : {shape{1, 1}, shape{3, 15}, shape{7, 33}, shape{4, 300}}) {
      for (affine f : {affine{.row = static_cast<float>(s.cols), .col = 1, .offset = 0},
                       affine{.row = 0.5f, .col = -0.25f, .offset = 3.0f},
                       affine{.row = -1, .col = 1, .offset = -100}}) {
        for_each_rounding<D>([&](const cast_options& cast, index_config indices) {
          const std::uint64_t index_stride = index_stride_of(indices, s.cols);
          const std::uint64_t stride = index_stride != 0 ? index_stride : s.cols;
          tensor<D> dst(s.rows, s.cols, s.cols + 1);
          vector::iota(vector::rounded(dst.v(), cast, indices.first_index, index_stride), f);
          check_values(
              dst,
              [&](std::size_t r, std::size_t c) {
                // Exact: every term is a small multiple of 1/4.
                const double v = double{f.row} * static_cast<double>(r) +
                                 double{f.col} * static_cast<double>(c) + double{f.offset};
                return expected_from_float<D>(static_cast<float>(v), cast,
                                              indices.first_index + r * stride + c);
              },
              "iota " + name_of<D>() + " " + shape_name(s.rows, s.cols) + " " +
                  describe_cast(cast));
        });
      }
    }
  });
}

template <class D, class S>
void check_transpose(shape s, const cast_options& cast, index_config indices) {
  // dst is s.cols x s.rows.
  const std::uint64_t index_stride = index_stride_of(indices, s.rows);
  const std::uint64_t stride = index_stride != 0 ? index_stride : s.rows;
  tensor<S> src(s.rows, s.cols, s.cols + 3);
  fill_grid(src, s.rows * 31 + s.cols);
  tensor<D> dst(s.cols, s.rows, s.rows + 2);
  vector::transpose(vector::rounded(dst.v(), cast, indices.first_index, index_stride), src.cv());
  check_values(
      dst,
      [&](std::size_t r, std::size_t c) {
        return expected_from_float<D>(static_cast<float>(value_of(src(c, r))), cast,
                                      indices.first_index + r * stride + c);
      },
      "transpose " + name_of<D>() + " <- " + name_of<S>() + " " + shape_name(s.rows, s.cols) + " " +
          describe_cast(cast));
}

TEST_CASE("vector: transpose, each test format as destination and source") {
  for_each_element_type([]<class D>() {
    // Source columns longer than the 256-element pieces transpose gathers, and short ones.
    for (shape s : {shape{1, 1}, shape{17, 5}, shape{300, 3}, shape{3, 41}}) {
      for_each_rounding<D>([&](const cast_options& cast, index_config indices) {
        check_transpose<D, float>(s, cast, indices);
        check_transpose<D, bf16>(s, cast, indices);
      });
    }
  });
  for_each_test_format([]<class S>() { check_transpose<float, S>({9, 13}, {}, {0, 0}); });
}

// ---------------------------------------------------------------------------------------------
// The same bits on every ISA path.

TEST_CASE("vector: elementwise results are bit-identical on every ISA path") {
  for_each_element_type([]<class D>() {
    for (shape s : {shape{7, 33}, shape{3, 1001}}) {
      const cast_options cast = is_float<D>
                                    ? cast_options{}
                                    : cast_options{rounding::stochastic, overflow::standard, 5, 1};
      tensor<bf16> x(s.rows, s.cols, s.cols + 1);
      tensor<fp8_e5m2> y(s.rows, s.cols);
      tensor<float> z(s.rows, 1);
      fill_uniform(x, 1, -8, 8);
      fill_uniform(y, 2, -8, 8);
      fill_uniform(z, 3, 0.5, 2);
      std::vector<std::uint32_t> first;
      for_each_isa([&](isa level) {
        tensor<D> dst(s.rows, s.cols, s.cols + 2);
        // Rounded divisions and square roots: every path must round every lane alike.
        vector::map(
            vector::rounded(dst.v(), cast, 3, 0),
            [](auto d, auto p, auto q, auto t) {
              return (p * q - t) / (hn::Sqrt(hn::Abs(p) + t) + hn::Set(d, 0.1f));
            },
            x.cv(), y.cv(), z.cv());
        std::vector<std::uint32_t> bits;
        for (const D& e : dst.elements()) bits.push_back(bits_of(e));
        if (first.empty()) {
          first = bits;
        } else {
          CHECK_MESSAGE(bits == first, name_of<D>(), " ", shape_name(s.rows, s.cols), ": ",
                        std::string(name(level)), " differs from the first path");
        }
      });
    }
  });
}

// A column passed as vector::column (held in a register) and the same column passed as a plain
// view (read from a row of scratch its value is copied into) must give the same bits, for every
// destination format and rounding, in the written tensor, the row sums and column sums.
TEST_CASE("vector: vector::column gives the bits of the same column passed as a view") {
  for_each_element_type([]<class D>() {
    for (shape s : {shape{1, 1}, shape{3, 15}, shape{7, 33}, shape{4, 767}}) {
      for_each_rounding<D>([&](const cast_options& cast, index_config indices) {
        tensor<bf16> x(s.rows, s.cols, s.cols + 1);
        tensor<fp16> column(s.rows, 1, 3);
        tensor<float> one(1, 1), row(1, s.cols);
        fill_uniform(x, 1, -8, 8);
        fill_uniform(column, 2, -2, 2);
        fill_uniform(one, 3, 0.5, 2);
        fill_uniform(row, 4, -1, 1);
        const std::uint64_t index_stride = index_stride_of(indices, s.cols);
        const auto f = [](auto, auto p, auto m, auto t, auto g) { return hn::MulAdd(p - m, t, g); };
        tensor<D> plain(s.rows, s.cols, s.cols + 2), marked(s.rows, s.cols, s.cols + 2);
        std::vector<float> plain_sums(s.rows), marked_sums(s.rows);
        vector::map(vector::rounded(plain.v(), cast, indices.first_index, index_stride), f, x.cv(),
                    column.cv(), one.cv(), row.cv());
        vector::map(vector::rounded(marked.v(), cast, indices.first_index, index_stride), f, x.cv(),
                    vector::column(column.cv()), vector::column(one.cv()), row.cv());
        // silu as an act_constant: its loops alone (with act::silu, those of all 17 functions
        // were a fifth of this file's compile).
        const act_constant<act::silu> silu;
        scalar::activation_sum(vector::rounded(plain.v(), cast, indices.first_index, index_stride),
                               plain_sums, plain.cv(), silu, one.cv(), column.cv());
        scalar::activation_sum(vector::rounded(marked.v(), cast, indices.first_index, index_stride),
                               marked_sums, marked.cv(), silu, vector::column(one.cv()),
                               vector::column(column.cv()));
        std::vector<float> plain_acc(s.cols, 1.0f), marked_acc(s.cols, 1.0f);
        const auto g = [](auto, auto p, auto m) { return p * m; };
        vector::col_sum_of(view<float>(plain_acc.data(), 1, s.cols), g, x.cv(), column.cv());
        vector::col_sum_of(view<float>(marked_acc.data(), 1, s.cols), g, x.cv(),
                           vector::column(column.cv()));
        const std::string what = name_of<D>() + " " + shape_name(s.rows, s.cols) + " " +
                                 describe_cast(cast) + " first index " +
                                 std::to_string(indices.first_index);
        for (std::size_t c = 0; c < s.cols; ++c) {
          REQUIRE_MESSAGE(bits_of(marked_acc[c]) == bits_of(plain_acc[c]), what, " column sum ", c);
        }
        for (std::size_t r = 0; r < s.rows; ++r) {
          for (std::size_t c = 0; c < s.cols; ++c) {
            REQUIRE_MESSAGE(bits_of(marked(r, c)) == bits_of(plain(r, c)), what, " (", r, ", ", c,
                            ")");
          }
          REQUIRE_MESSAGE(bits_of(marked_sums[r]) == bits_of(plain_sums[r]), what, " sum of row ",
                          r);
        }
        CHECK(marked.gaps_untouched());
      });
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Reductions.

constexpr shape reduction_shapes[] = {{1, 1}, {3, 15}, {5, 16}, {7, 33}, {4, 767}, {2, 4097}};

template <class T>
void fill_signed(tensor<T>& t, std::uint64_t seed) {
  fill_uniform(t, seed, -2.0, 3.0);
}

template <class T>
void check_row_reductions(shape s, bool out_as_span) {
  tensor<T> x(s.rows, s.cols, s.cols + 5);
  fill_signed(x, s.rows * 7 + s.cols);
  // Out as a column of a wider tensor (stride 3), or as a contiguous range.
  tensor<float> column(s.rows, 1, 3);
  guarded_buffer<float> range(s.rows);
  const auto reduce = [&](auto operation) -> std::vector<double> {
    std::vector<double> got(s.rows);
    if (out_as_span) {
      operation(range.span(), x.cv());
      for (std::size_t r = 0; r < s.rows; ++r) got[r] = range[r];
    } else {
      operation(column.v(), x.cv());
      for (std::size_t r = 0; r < s.rows; ++r) got[r] = column(r, 0);
      CHECK(column.gaps_untouched());
    }
    return got;
  };
  const auto sums = reduce([](auto&& out, auto in) { vector::row_sum(out, in); });
  const auto means = reduce([](auto&& out, auto in) { vector::row_mean(out, in); });
  const auto maxes = reduce([](auto&& out, auto in) { vector::row_max(out, in); });
  const auto mins = reduce([](auto&& out, auto in) { vector::row_min(out, in); });
  // Sum: each element goes through k roundings (row_sum_roundings), so the error is at most
  // gamma_k times the sum of magnitudes; the mean divides once more (one more rounding).
  const std::size_t k = row_sum_roundings(s.cols);
  for (std::size_t r = 0; r < s.rows; ++r) {
    double sum = 0, magnitude = 0, hi = -INFINITY, lo = INFINITY;
    for (std::size_t c = 0; c < s.cols; ++c) {
      const double v = value_of(x(r, c));
      sum += v;
      magnitude += std::fabs(v);
      hi = std::max(hi, v);
      lo = std::min(lo, v);
    }
    const auto n = static_cast<double>(s.cols);
    INFO(name_of<T>(), " ", shape_name(s.rows, s.cols), " row ", r, " lanes ", active_lanes());
    CHECK(std::fabs(sums[r] - sum) <= gamma(k) * magnitude);
    CHECK(std::fabs(means[r] - sum / n) <= gamma(k + 1) * magnitude / n);
    CHECK(maxes[r] == hi);
    CHECK(mins[r] == lo);
  }
}

TEST_CASE(
    "vector: row_sum row_mean row_max row_min, each test format as source, within the bound") {
  for_each_element_type([]<class T>() {
    for (shape s : reduction_shapes) {
      check_row_reductions<T>(s, false);
      check_row_reductions<T>(s, true);
    }
  });
}

template <class T>
void check_col_reductions(shape s) {
  tensor<T> x(s.rows, s.cols, s.cols + 5);
  fill_signed(x, s.rows * 13 + s.cols);
  tensor<float> sums(1, s.cols), means(1, s.cols), maxes(1, s.cols), mins(1, s.cols);
  vector::col_sum(sums.v(), x.cv());
  vector::col_mean(means.v(), x.cv());
  vector::col_max(maxes.v(), x.cv());
  std::vector<float> mins_range(s.cols);  // out as a range
  vector::col_min(mins_range, x.cv());
  // Rows are added in order to a zero accumulator: rows - 1 roundings per element.
  const std::size_t k = s.rows - 1;
  for (std::size_t c = 0; c < s.cols; ++c) {
    double sum = 0, magnitude = 0, hi = -INFINITY, lo = INFINITY;
    for (std::size_t r = 0; r < s.rows; ++r) {
      const double v = value_of(x(r, c));
      sum += v;
      magnitude += std::fabs(v);
      hi = std::max(hi, v);
      lo = std::min(lo, v);
    }
    const auto n = static_cast<double>(s.rows);
    INFO(name_of<T>(), " ", shape_name(s.rows, s.cols), " column ", c);
    CHECK(std::fabs(sums(0, c) - sum) <= gamma(k) * magnitude);
    CHECK(std::fabs(means(0, c) - sum / n) <= gamma(k + 1) * magnitude / n);
    CHECK(maxes(0, c) == hi);
    CHECK(mins_range[c] == lo);
  }
}

TEST_CASE(
    "vector: col_sum col_mean col_max col_min, each test format as source, within the bound") {
  for_each_element_type([]<class T>() {
    for (shape s : {shape{1, 1}, shape{15, 3}, shape{33, 7}, shape{767, 4}, shape{5, 1001}}) {
      check_col_reductions<T>(s);
    }
  });
}

// The engine tests run every operation for float and three formats, one per conversion path
// (tests/CMakeLists.txt, support/formats.hpp). Every named format goes in and out through the same
// loads and stores: here each one is a destination (every rounding), a source of the same format
// and a reduction input.
TEST_CASE("vector: every named format as destination, source and reduction input") {
  for_each_format([]<class F>() {
    std::uint64_t seed = 300;
    for (shape s : odd_shapes) {
      for_each_rounding<F>([&](const cast_options& cast, index_config indices) {
        check_binary<F, F, F>(only<binop::add>, s, broadcast::full, cast, indices, ++seed);
        check_binary<F, float, float>(only<binop::div>, s, broadcast::column, cast, indices,
                                      ++seed);
      });
    }
    check_row_reductions<F>({7, 33}, false);
    check_col_reductions<F>({33, 7});
  });
}

TEST_CASE("vector: max and min reductions propagate NaN, in that row or column only") {
  for (std::size_t cols : {1u, 7u, 16u, 33u, 100u}) {
    for (std::size_t nan_at : {std::size_t{0}, cols / 2, cols - 1}) {
      tensor<float> x(3, cols, cols + 1);
      tensor<bf16> y(3, cols);
      fill_signed(x, cols);
      fill_signed(y, cols + 1);
      x(1, nan_at) = nan;
      y(2, nan_at) = bf16::from(nan);
      std::vector<float> xmax(3), xmin(3), ymax(3), ymin(3);
      vector::row_max(xmax, x.cv());
      vector::row_min(xmin, x.cv());
      vector::row_max(ymax, y.cv());
      vector::row_min(ymin, y.cv());
      INFO("cols ", cols, " NaN at ", nan_at);
      CHECK(std::isnan(xmax[1]));
      CHECK(std::isnan(xmin[1]));
      CHECK(std::isnan(ymax[2]));
      CHECK(std::isnan(ymin[2]));
      CHECK(!std::isnan(xmax[0]));
      CHECK(!std::isnan(xmin[2]));
      CHECK(!std::isnan(ymax[1]));
      CHECK(!std::isnan(ymin[0]));
      // Columns: NaN in column nan_at only.
      std::vector<float> cmax(cols), cmin(cols);
      vector::col_max(cmax, x.cv());
      vector::col_min(cmin, x.cv());
      for (std::size_t c = 0; c < cols; ++c) {
        CHECK(std::isnan(cmax[c]) == (c == nan_at));
        CHECK(std::isnan(cmin[c]) == (c == nan_at));
      }
      // NaN computed by the expression (0 * inf) in row_max_of.
      tensor<float> z(2, cols);
      z.fill(1.0f);
      z(0, nan_at) = inf;
      std::vector<float> zmax(2);
      vector::row_max_of(
          zmax, [](auto d, auto v) { return v * hn::Zero(d); }, z.cv());
      CHECK(std::isnan(zmax[0]));
      CHECK(zmax[1] == 0.0f);
    }
  }
}

// On the vector paths, rows read only from bf16 go through their whole rounds of 64 elements by
// pairs of blocks, even and odd elements apart (engine/lanes.hpp, map_rows), and the rest in order:
// every element must still count once. Integer values keep every partial sum exact, so that a
// dropped or repeated element shows; the row's largest value and a NaN stand at every position of
// every length up to 200 (three rounds and every tail).
TEST_CASE("vector: row reductions of bf16 count every element once, at every length") {
  const auto value = [](std::size_t r, std::size_t c) {
    return static_cast<float>((c * 37 + r * 11) % 200 + 1);
  };
  for (std::size_t cols = 1; cols <= 200; ++cols) {
    tensor<bf16> x(3, cols, cols + 3);
    for (std::size_t r = 0; r < 3; ++r) {
      for (std::size_t c = 0; c < cols; ++c) x(r, c) = bf16::from(value(r, c));
    }
    for (std::size_t at = 0; at < cols; ++at) {
      x(1, at) = bf16::from(1000.0f);  // row 1's largest element
      x(2, at) = bf16::from(nan);
      // row_max and row_min compare bf16 codes (reduce_codes); row_max_of takes the fp32 path.
      std::vector<float> sums(3), maxes(3), mins(3), firsts(3), squares(3), fp32_maxes(3);
      vector::row_sum(sums, x.cv());
      vector::row_max(maxes, x.cv());
      vector::row_min(mins, x.cv());
      vector::row_max_of(
          fp32_maxes, [](auto, auto v) { return v; }, x.cv());
      vector::row_sums_of(
          firsts, squares, [](auto, auto v) { return std::pair(v, v * v); }, x.cv());
      for (std::size_t r = 0; r < 2; ++r) {
        double sum = 0, square_sum = 0;
        float hi = -inf, lo = inf;
        for (std::size_t c = 0; c < cols; ++c) {
          const float v = static_cast<float>(value_of(x(r, c)));
          sum += v;
          square_sum += static_cast<double>(v) * v;
          hi = std::max(hi, v);
          lo = std::min(lo, v);
        }
        INFO("cols ", cols, ", largest and NaN at ", at, ", row ", r, ", lanes ", active_lanes());
        CHECK(sums[r] == sum);
        CHECK(firsts[r] == sum);
        CHECK(squares[r] == square_sum);
        CHECK(maxes[r] == hi);
        CHECK(fp32_maxes[r] == hi);
        CHECK(mins[r] == lo);
      }
      INFO("cols ", cols, ", NaN at ", at, ", lanes ", active_lanes());
      CHECK(std::isnan(maxes[2]));
      CHECK(std::isnan(fp32_maxes[2]));
      CHECK(std::isnan(mins[2]));
      x(1, at) = bf16::from(value(1, at));
      x(2, at) = bf16::from(value(2, at));
    }
  }
}

// A float row's sum keeps element c in partial c % 64, after the other elements of that partial,
// in element order, on every path (engine/lanes.hpp, reduce_slots): the whole rounds of 64, the
// blocks after them and the tail alike. The partials c % 64 and (c + 32) % 64 are combined first
// on every path. Row c - 64 of the test holds 2^25 at column c - 64, 1 at column c and -2^25 at
// column c - 32: in its partial the 1 meets 2^25 and is lost (2^25 + 1 rounds to 2^25), and the
// partner partial cancels 2^25, so the sum is exactly 0. An element summed into another partial
// leaves a 1 (or 2^25) behind.
TEST_CASE("vector: row_sum sums element c into partial c % 64, at every position") {
  constexpr float big = 0x1p25f;
  for (std::size_t cols : {65, 79, 80, 96, 127, 128, 129, 143, 191, 192, 200, 767, 769}) {
    const std::size_t rows = cols - 64;
    tensor<float> x(rows, cols, cols + 1);
    x.fill(0.0f);
    for (std::size_t c = 64; c < cols; ++c) {
      x(c - 64, c - 64) = big;
      x(c - 64, c - 32) = -big;
      x(c - 64, c) = 1.0f;
    }
    for_each_isa([&](isa level) {
      std::vector<float> sums(rows);
      vector::row_sum(sums, x.cv());
      std::size_t wrong = 0;
      for (const float sum : sums) wrong += sum != 0.0f;
      CHECK_MESSAGE(wrong == 0, cols, " columns, ", std::string(name(level)), ": ", wrong,
                    " rows whose 1 went into another partial");
    });
  }
}

// A product term is added in one fused multiply-add (vector::product), on every path, by the row
// sums (alone, in a pair, in the blocks and in the tail) and by the column sums. Row r holds
// -1 * 1 at column r and a * a at column r + 64, the same partial, zeros elsewhere, a = 1 + 2^-12:
// fused, -1 + a^2 = 2^-11 + 2^-24 exactly; a^2 rounded first (to 1 + 2^-11, its 2^-24 a tie to
// even) and then added gives 2^-11.
TEST_CASE("vector: a product term is one fused multiply-add, at every position and on every path") {
  constexpr float a = 1.0f + 0x1p-12f, fused = 0x1p-11f + 0x1p-24f;
  for (std::size_t cols : {65, 79, 96, 129, 200, 767, 769}) {
    const std::size_t rows = cols - 64;
    tensor<float> x(rows, cols, cols + 1), w(rows, cols), xt(cols, rows), wt(cols, rows);
    x.fill(0.0f);
    w.fill(0.0f);
    for (std::size_t r = 0; r < rows; ++r) {
      x(r, r) = -1.0f;
      w(r, r) = 1.0f;
      x(r, r + 64) = w(r, r + 64) = a;
    }
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) {
        xt(c, r) = x(r, c);
        wt(c, r) = w(r, c);
      }
    }
    const auto term = [](auto, auto v, auto u) { return vector::product(v, u); };
    for_each_isa([&](isa level) {
      std::vector<float> sums(rows), firsts(rows), seconds(rows);
      tensor<float> acc(1, rows);
      acc.fill(0.0f);
      vector::row_sum_of(sums, term, x.cv(), w.cv());
      vector::row_sums_of(
          firsts, seconds, [](auto, auto v, auto u) { return std::pair(v, vector::product(v, u)); },
          x.cv(), w.cv());
      vector::col_sum_of(acc.v(), term, xt.cv(), wt.cv());
      mismatches failures;
      for (std::size_t r = 0; r < rows; ++r) {
        if (sums[r] != fused || seconds[r] != fused || acc(0, r) != fused) {
          failures.add("row ", r, ": row_sum_of ", sums[r], ", row_sums_of ", seconds[r],
                       ", col_sum_of ", acc(0, r));
        }
        if (firsts[r] != a - 1.0f) failures.add("row ", r, ": the pair's first sum ", firsts[r]);
      }
      INFO(cols, " columns, ", std::string(name(level)));
      CHECK_MESSAGE(failures.count() == 0, failures.count(), " rows not fused\n", failures.text());
    });
  }
}

// row_max and row_min of a 16-bit format compare codes as integers (engine/vector.hpp,
// reduce_codes). Every code of the format stands in a row of one background value, at column
// k % cols in row k (so at every position: the vector paths' pairs of blocks, single block and
// tail). The expected max and min compare the decoded values, NaN if either is NaN; of zeros of
// both signs the max is +0 and the min -0, as documented.
template <class T>
void check_code_reductions() {
  constexpr std::size_t codes = std::size_t{1} << T::code_bits, cols = 121;
  std::vector<T> backgrounds = {T::from_code(0),
                                T::from_code(T::sign_code),
                                T::from_code(1),
                                T::from_code(T::sign_code | 1),
                                T::from(1.0f),
                                T::from(-1.5f),
                                T::from_code(T::max_code),
                                T::from_code(T::sign_code | T::max_code),
                                T::from_code(T::nan_code),
                                T::from_code(T::sign_code | T::nan_code)};
  if constexpr (T::has_infinity) {
    backgrounds.push_back(T::from_code(T::infinity_code));
    backgrounds.push_back(T::from_code(T::sign_code | T::infinity_code));
    backgrounds.push_back(T::from_code(T::infinity_code | 1));  // signalling
  }
  tensor<T> x(codes, cols);
  std::vector<float> maxes(codes), mins(codes);
  for (const T background : backgrounds) {
    x.fill(background);
    for (std::size_t k = 0; k < codes; ++k) x(k, k % cols) = T::from_code(k);
    vector::row_max(maxes, x.cv());
    vector::row_min(mins, x.cv());
    const double b = value_of(background);
    mismatches failures;
    for (std::size_t k = 0; k < codes; ++k) {
      const double v = value_of(T::from_code(k));
      double hi = std::max(b, v), lo = std::min(b, v);
      if (hi == 0) hi = std::signbit(b) && std::signbit(v) ? -0.0 : 0.0;
      if (lo == 0) lo = std::signbit(b) || std::signbit(v) ? -0.0 : 0.0;
      if (std::isnan(b) || std::isnan(v)) hi = lo = std::numeric_limits<double>::quiet_NaN();
      const auto same = [](float got, double want) {
        return std::isnan(want) ? std::isnan(got)
                                : std::bit_cast<std::uint32_t>(got) ==
                                      std::bit_cast<std::uint32_t>(static_cast<float>(want));
      };
      if (!same(maxes[k], hi) || !same(mins[k], lo)) {
        failures.add("code ", hex(k), ": max ", maxes[k], " min ", mins[k], ", expected ", hi,
                     " and ", lo);
      }
    }
    INFO(name_of<T>(), " background ", hex(bits_of(background)), " lanes ", active_lanes());
    CHECK_MESSAGE(failures.count() == 0, failures.count(), " mismatches\n", failures.text());
  }
}

TEST_CASE("vector: row_max and row_min of every code of the 16-bit formats, in every position") {
  check_code_reductions<bf16>();
  check_code_reductions<fp16>();
  check_code_reductions<minifloat<4, 6, 7, specials::fn>>();  // 11 bits, padded to 16
}

TEST_CASE("vector: reductions of empty rows and columns") {
  tensor<float> x(3, 4);
  fill_signed(x, 1);
  const view<const float> no_cols(x.cv().data(), 3, 0, 4);
  std::vector<float> out(3, 42.0f);
  vector::row_sum(out, no_cols);
  CHECK(out == std::vector<float>{0, 0, 0});
  vector::row_max(out, no_cols);
  CHECK(out == std::vector<float>{-inf, -inf, -inf});
  vector::row_min(out, no_cols);
  CHECK(out == std::vector<float>{inf, inf, inf});
  vector::row_sum_of(
      out, [](auto, auto v) { return v; }, no_cols);
  CHECK(out == std::vector<float>{0, 0, 0});
  vector::row_max_of(
      out, [](auto, auto v) { return v; }, no_cols);
  CHECK(out == std::vector<float>{-inf, -inf, -inf});

  const view<const float> no_rows(x.cv().data(), 0, 4, 4);
  std::vector<float> cols_out(4, 42.0f);
  vector::col_sum(cols_out, no_rows);
  CHECK(cols_out == std::vector<float>{0, 0, 0, 0});
  vector::col_max(cols_out, no_rows);
  CHECK(cols_out == std::vector<float>{-inf, -inf, -inf, -inf});
  vector::col_min(cols_out, no_rows);
  CHECK(cols_out == std::vector<float>{inf, inf, inf, inf});
  // col_sum_of accumulates: nothing to add keeps what acc held.
  std::vector<float> acc{1, 2, 3, 4};
  vector::col_sum_of(
      acc, [](auto, auto v) { return v; }, no_rows);
  CHECK(acc == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("vector: row_sum_of and row_max_of an expression with broadcasts") {
  for_each_element_type([]<class T>() {
    for (shape s : reduction_shapes) {
      tensor<T> x(s.rows, s.cols, s.cols + 2);
      fill_signed(x, s.cols + 3);
      source<bf16> m(broadcast::column, s.rows, s.cols, 4);
      source<fp16> w(broadcast::row, s.rows, s.cols, 5);
      tensor<float> sums(s.rows, 1, 2);
      std::vector<float> maxes(s.rows);
      // sums[r] = sum_c x * w; maxes[r] = max_c (x - m).
      vector::row_sum_of(
          sums.v(), [](auto, auto a, auto b) { return a * b; }, x.cv(), w.data().cv());
      vector::row_max_of(
          maxes, [](auto, auto a, auto b) { return a - b; }, x.cv(), m.data().cv());
      // Each product rounds once, then k roundings of the sum: gamma_{k + 1}.
      const std::size_t k = row_sum_roundings(s.cols);
      for (std::size_t r = 0; r < s.rows; ++r) {
        double sum = 0, magnitude = 0;
        float hi = -inf;
        for (std::size_t c = 0; c < s.cols; ++c) {
          const double p = value_of(x(r, c)) * w.at(r, c);
          sum += p;
          magnitude += std::fabs(p);
          // fp32 x - m, rounded once (the max of rounded values is the rounded max).
          hi = std::max(hi, static_cast<float>(value_of(x(r, c)) - m.at(r, c)));
        }
        INFO(name_of<T>(), " ", shape_name(s.rows, s.cols), " row ", r);
        CHECK(std::fabs(sums(r, 0) - sum) <= gamma(k + 1) * magnitude);
        CHECK(maxes[r] == hi);
      }
      CHECK(sums.gaps_untouched());
    }
  });
}

TEST_CASE("vector: row_sums_of gives two sums of one pass") {
  for_each_element_type([]<class T>() {
    for (shape s : reduction_shapes) {
      tensor<T> x(s.rows, s.cols, s.cols + 2);
      fill_signed(x, s.cols + 5);
      source<bf16> m(broadcast::column, s.rows, s.cols, 6);
      source<fp16> w(broadcast::row, s.rows, s.cols, 7);
      tensor<float> products(s.rows, 1, 2);
      std::vector<float> squares(s.rows);
      // products[r] = sum_c x * w; squares[r] = sum_c (x - m)^2.
      vector::row_sums_of(
          products.v(), squares,
          [](auto, auto a, auto b, auto c) {
            const auto deviation = a - c;
            return std::pair(a * b, deviation * deviation);
          },
          x.cv(), w.data().cv(), m.data().cv());
      // 32 partials for each sum; a product rounds once, a square of a difference twice.
      const std::size_t k = row_sum_roundings(s.cols, 32);
      for (std::size_t r = 0; r < s.rows; ++r) {
        double product_sum = 0, product_magnitude = 0, square_sum = 0;
        for (std::size_t c = 0; c < s.cols; ++c) {
          const double p = value_of(x(r, c)) * w.at(r, c);
          const double deviation = value_of(x(r, c)) - m.at(r, c);
          product_sum += p;
          product_magnitude += std::fabs(p);
          square_sum += deviation * deviation;
        }
        INFO(name_of<T>(), " ", shape_name(s.rows, s.cols), " row ", r);
        CHECK(std::fabs(products(r, 0) - product_sum) <= gamma(k + 1) * product_magnitude);
        CHECK(std::fabs(squares[r] - square_sum) <= gamma(k + 2) * square_sum);
      }
      CHECK(products.gaps_untouched());
    }
  });
  // An empty row: both sums 0.
  tensor<float> x(3, 4);
  std::vector<float> first(3, 42.0f), second(3, 42.0f);
  vector::row_sums_of(
      first, second, [](auto, auto v) { return std::pair(v, v); },
      view<const float>(x.cv().data(), 3, 0, 4));
  CHECK(first == std::vector<float>{0, 0, 0});
  CHECK(second == std::vector<float>{0, 0, 0});
}

// sums_then_map, row by row: the bits of row_sums_of over the whole tensor, then of map with a
// column keep(r) writes as the row comes; rows keep refuses stay untouched. With q > 1, the reduce
// sources hold each row of x as q rows of cols / q elements (x's rows one after another), and
// keep(r) adds rows q r to q r + q - 1 of the sums. The same into a streamed destination, whose
// rows are a multiple of 64 bytes apart, so that each row's whole lines are streamed and the
// columns before and after them are not (engine/lanes.hpp, split_at_lines), and into one whose rows
// are not (written with plain stores).
template <class X, class D>
void check_sums_then_map(shape s, std::uint64_t seed, std::size_t q = 1) {
  tensor<X> x(s.rows, s.cols, q == 1 ? s.cols + 2 : s.cols);
  tensor<float> w(1, s.cols);
  fill_uniform(x, seed, -8, 8);
  fill_uniform(w, seed + 1, -1, 1);
  const std::size_t part = s.cols / q;
  const view<const X> parts(x.cv().data(), s.rows * q, part, q == 1 ? s.cols + 2 : part);
  const view<const float> part_w = w.cv().block(0, 0, 1, part);
  const auto pair = [](auto, auto a, auto b) { return std::pair(a * b, a * a); };
  const auto f = [](auto, auto a, auto m, auto b) { return hn::MulAdd(a, m, b); };
  const auto factor_of = [q](tensor<float>& first, tensor<float>& second, std::size_t r) {
    float sum = 0, sum2 = 0;
    for (std::size_t i = r * q; i < (r + 1) * q; ++i) {
      sum += first(i, 0);
      sum2 += second(i, 0);
    }
    return sum / (1.0f + sum2);
  };
  const cast_options stochastic{.round = rounding::stochastic, .seed = 5};
  for (const cast_options& cast : {cast_options{}, stochastic}) {
    tensor<float> first(s.rows * q, 1), second(s.rows * q, 1), factor(s.rows, 1);
    vector::row_sums_of(first.v(), second.v(), pair, parts, part_w);
    for (std::size_t r = 0; r < s.rows; ++r) factor(r, 0) = factor_of(first, second, r);
    tensor<D> want(s.rows, s.cols, s.cols + 1), got(s.rows, s.cols, s.cols + 1);
    vector::map(vector::rounded(want.v(), cast, 7, s.cols), f, x.cv(), vector::column(factor.cv()),
                w.cv());
    const std::string what = name_of<X>() + " to " + name_of<D>() + " " +
                             shape_name(s.rows, s.cols) + " in " + std::to_string(q) + " " +
                             describe_cast(cast);
    // sums_then_map into got (a view or a destination), checked against want.
    const auto check = [&](tensor<D>& got, const auto& destination, const std::string& into) {
      tensor<float> got_first(s.rows * q, 1), got_second(s.rows * q, 1), got_factor(s.rows, 1);
      vector::sums_then_map(
          destination, std::array{got_first.v(), got_second.v()}, pair,
          std::forward_as_tuple(parts, part_w),
          [&](std::size_t r) {
            got_factor(r, 0) = factor_of(got_first, got_second, r);
            return r % 3 != 1;
          },
          f, std::forward_as_tuple(x.cv(), vector::column(got_factor.cv()), w.cv()));
      for (std::size_t r = 0; r < s.rows * q; ++r) {
        REQUIRE_MESSAGE(bits_of(got_first(r, 0)) == bits_of(first(r, 0)), what, into, " sum ", r);
        REQUIRE_MESSAGE(bits_of(got_second(r, 0)) == bits_of(second(r, 0)), what, into, " sum ", r);
      }
      for (std::size_t r = 0; r < s.rows; ++r) {
        for (std::size_t c = 0; c < s.cols; ++c) {
          const D expected = r % 3 != 1 ? want(r, c) : sentinel<D>();
          REQUIRE_MESSAGE(bits_of(got(r, c)) == bits_of(expected), what, into, " (", r, ", ", c,
                          ")");
        }
      }
      CHECK_MESSAGE(got.gaps_untouched(), what, into);
    };
    check(got, vector::rounded(got.v(), cast, 7, s.cols), "");
    const std::size_t per_line = 64 / sizeof(D);
    for (const std::size_t stride :
         {(s.cols + 5 + per_line - 1) / per_line * per_line, s.cols + 1}) {
      tensor<D> streamed(s.rows, s.cols, stride);
      check(streamed, vector::streamed(vector::rounded(streamed.v(), cast, 7, s.cols)),
            ", streamed, stride " + std::to_string(stride));
    }
  }
}

TEST_CASE("vector: sums_then_map gives the bits of row_sums_of and map, row by row") {
  for (shape s : {shape{1, 1}, shape{5, 16}, shape{7, 33}, shape{4, 767}, shape{2, 1031}}) {
    check_sums_then_map<bf16, bf16>(s, s.cols);
    check_sums_then_map<float, float>(s, s.cols + 1);
    check_sums_then_map<fp16, fp8_e4m3>(s, s.cols + 2);
  }
  // Each row of dst as q rows of the reduce sources.
  for (const auto& [s, q] :
       {std::pair{shape{3, 4}, std::size_t{4}}, std::pair{shape{5, 66}, std::size_t{2}},
        std::pair{shape{4, 3 * 1031}, std::size_t{3}}}) {
    check_sums_then_map<bf16, bf16>(s, s.cols, q);
    check_sums_then_map<float, float>(s, s.cols + 1, q);
    check_sums_then_map<fp16, fp8_e4m3>(s, s.cols + 2, q);
  }
  // One sum (a column, not an array of two), and the shape errors, before anything is written.
  tensor<float> x(4, 5), sums(4, 1), y(4, 5), wrong(2, 3), short_sums(3, 1);
  fill_uniform(x, 3, -1, 1);
  const auto square = [](auto, auto a) { return a * a; };
  const auto copy = [](auto, auto a) { return a; };
  const auto keep = [](std::size_t) { return true; };
  vector::sums_then_map(y.v(), sums.v(), square, std::forward_as_tuple(x.cv()), keep, copy,
                        std::forward_as_tuple(x.cv()));
  for (std::size_t r = 0; r < 4; ++r) {
    float sum = 0;
    for (std::size_t c = 0; c < 5; ++c) sum += x(r, c) * x(r, c);
    CHECK(sums(r, 0) == doctest::Approx(sum).epsilon(1e-6));
    for (std::size_t c = 0; c < 5; ++c) CHECK(bits_of(y(r, c)) == bits_of(x(r, c)));
  }
  tensor<float> untouched(4, 5);
  const std::string function = "tilekern::vector::sums_then_map";
  check_shape_error(
      [&] {
        vector::sums_then_map(untouched.v(), sums.v(), square, std::forward_as_tuple(wrong.cv()),
                              keep, copy, std::forward_as_tuple(wrong.cv()));
      },
      {function, "dst is 4x5", "expected 2x3 (the first reduce source), or each of its rows q"});
  // 8 x 2 is 4 x 5 in no way (8 = 4 q, q 2, but 2 * 2 != 5); 8 x 3 with sums of 4 rows, not 8.
  tensor<float> eight(8, 2), eight_by_3(8, 3), sums_8(8, 1);
  check_shape_error(
      [&] {
        vector::sums_then_map(untouched.v(), sums_8.v(), square, std::forward_as_tuple(eight.cv()),
                              keep, copy, std::forward_as_tuple(x.cv()));
      },
      {function, "dst is 4x5", "expected 8x2"});
  tensor<float> four_by_6(4, 6);
  check_shape_error(
      [&] {
        vector::sums_then_map(four_by_6.v(), sums.v(), square,
                              std::forward_as_tuple(eight_by_3.cv()), keep, copy,
                              std::forward_as_tuple(four_by_6.cv()));
      },
      {function, "sums is 4x1", "expected 8x1"});
  check_shape_error(
      [&] {
        vector::sums_then_map(untouched.v(), short_sums.v(), square, std::forward_as_tuple(x.cv()),
                              keep, copy, std::forward_as_tuple(x.cv()));
      },
      {function, "sums is 3x1", "expected 4x1"});
  check_shape_error(
      [&] {
        vector::sums_then_map(untouched.v(), sums.v(), square, std::forward_as_tuple(x.cv()), keep,
                              copy, std::forward_as_tuple(wrong.cv()));
      },
      {function, "map source 1 is 2x3", "expected 4x5"});
  CHECK(untouched.all_sentinel());
}

TEST_CASE("vector: col_sum_of accumulates over blocks of rows") {
  for_each_element_type([]<class T>() {
    for (shape s : {shape{2, 1}, shape{9, 17}, shape{40, 33}, shape{6, 1001}}) {
      tensor<T> x(s.rows, s.cols, s.cols + 1);
      fill_signed(x, s.cols + 9);
      source<float> w(broadcast::row, s.rows, s.cols, 10);
      tensor<float> acc(1, s.cols);
      fill_signed(acc, 11);
      std::vector<double> start(s.cols);
      for (std::size_t c = 0; c < s.cols; ++c) start[c] = acc(0, c);
      // Rows [0, half) then [half, rows), into the same accumulator.
      const std::size_t half = s.rows / 2;
      const auto f = [](auto, auto a, auto b) { return a * b; };
      vector::col_sum_of(acc.v(), f, x.cv().block(0, 0, half, s.cols), w.data().cv());
      vector::col_sum_of(acc.v(), f, x.cv().block(half, 0, s.rows - half, s.cols), w.data().cv());
      // Each product rounds once, each of the rows additions once: gamma_{rows + 1}.
      for (std::size_t c = 0; c < s.cols; ++c) {
        double sum = start[c], magnitude = std::fabs(start[c]);
        for (std::size_t r = 0; r < s.rows; ++r) {
          const double p = value_of(x(r, c)) * w.at(r, c);
          sum += p;
          magnitude += std::fabs(p);
        }
        INFO(name_of<T>(), " ", shape_name(s.rows, s.cols), " column ", c);
        CHECK(std::fabs(acc(0, c) - sum) <= gamma(s.rows + 1) * magnitude);
      }
    }
  });
}

TEST_CASE("vector: col_sums_of gives the bits of two col_sum_of, in one pass") {
  for_each_element_type([]<class T>() {
    for (shape s : {shape{2, 1}, shape{9, 17}, shape{40, 33}, shape{6, 1001}}) {
      tensor<T> x(s.rows, s.cols, s.cols + 1);
      fill_signed(x, s.cols + 12);
      source<float> w(broadcast::row, s.rows, s.cols, 13);
      source<bf16> m(broadcast::column, s.rows, s.cols, 14);
      tensor<float> first(1, s.cols), second(1, s.cols);
      fill_signed(first, 15);
      fill_signed(second, 16);
      std::vector<float> first_alone(first.cv().data(), first.cv().data() + s.cols);
      std::vector<float> second_alone(second.cv().data(), second.cv().data() + s.cols);
      const auto product = [](auto, auto a, auto b, auto) { return a * b; };
      const auto difference = [](auto, auto a, auto, auto c) { return a - c; };
      const std::size_t half = s.rows / 2;
      for (const auto& [r0, n] :
           {std::pair{std::size_t{0}, half}, std::pair{half, s.rows - half}}) {
        const auto rows = x.cv().block(r0, 0, n, s.cols);
        const auto w_rows = w.data().cv();
        const auto m_rows = m.data().cv().block(r0, 0, n, 1);
        vector::col_sums_of(
            first.v(), second.v(),
            [&](auto d, auto a, auto b, auto c) {
              return std::pair(product(d, a, b, c), difference(d, a, b, c));
            },
            rows, w_rows, m_rows);
        vector::col_sum_of(first_alone, product, rows, w_rows, m_rows);
        vector::col_sum_of(second_alone, difference, rows, w_rows, m_rows);
      }
      for (std::size_t c = 0; c < s.cols; ++c) {
        INFO(name_of<T>(), " ", shape_name(s.rows, s.cols), " column ", c);
        CHECK(std::bit_cast<std::uint32_t>(first(0, c)) ==
              std::bit_cast<std::uint32_t>(first_alone[c]));
        CHECK(std::bit_cast<std::uint32_t>(second(0, c)) ==
              std::bit_cast<std::uint32_t>(second_alone[c]));
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// bn_stats and bn_aggr.

// Two-pass fp64 mean and (biased) variance of a row's decoded values.
template <class T>
std::pair<double, double> two_pass(tensor<T>& x, std::size_t r, std::size_t c0, std::size_t n) {
  double sum = 0;
  for (std::size_t c = c0; c < c0 + n; ++c) sum += value_of(x(r, c));
  const double mean = sum / static_cast<double>(n);
  double m2 = 0;
  for (std::size_t c = c0; c < c0 + n; ++c) {
    const double d = value_of(x(r, c)) - mean;
    m2 += d * d;
  }
  return {mean, m2 / static_cast<double>(n)};
}

// Bounds for one chunk of n elements of a row (bn_stats, engine/vector.hpp): the mean is an fp32
// row sum (row_sum_roundings(n) roundings) divided once, so |mean - true mean| <= delta =
// gamma_{k + 1} * mean(|x|). Each d = x - mean rounds once, d^2 once, and the squares are summed
// with k roundings, and sum (x - mean~)^2 = sum (x - mean)^2 + n delta^2; so the variance is
// within gamma_{k + 4} (var + delta^2 + ...) + delta^2, bounded here by
// gamma_{k + 4} * var + 2 * delta^2 (delta^2 terms absorb the cross terms with d's rounding).
struct chunk_bound {
  double mean;
  double variance;
};
chunk_bound bn_bound(std::size_t n, double mean_magnitude, double variance) {
  const std::size_t k = row_sum_roundings(n);
  const double delta = gamma(k + 1) * mean_magnitude;
  return {delta,
          gamma(k + 4) * variance + 2 * delta * delta + 2 * gamma(2) * delta * std::sqrt(variance)};
}

template <class T>
void check_bn(std::size_t rows, std::size_t cols, double offset, double sigma) {
  tensor<T> x(rows, cols, cols + 3);
  std::mt19937_64 random(cols);
  std::normal_distribution<double> normal(0.0, sigma);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      x(r, c) = expected_from_float<T>(static_cast<float>(offset + normal(random)), {}, 0);
    }
  }
  tensor<float> stats(rows, vector::bn_stats_cols(cols), vector::bn_stats_cols(cols) + 1);
  tensor<float> mean_var(rows, 2, 3);
  vector::bn_stats(stats.v(), x.cv());
  vector::bn_aggr(mean_var.v(), stats.cv());
  CHECK(stats.gaps_untouched());
  CHECK(mean_var.gaps_untouched());
  for (std::size_t r = 0; r < rows; ++r) {
    INFO(name_of<T>(), " ", shape_name(rows, cols), " offset ", offset, " row ", r, " lanes ",
         active_lanes());
    double max_bound_mean = 0, max_bound_var = 0;
    for (std::size_t c0 = 0, k = 0; c0 < cols; c0 += vector::bn_chunk, k += 3) {
      const std::size_t n = std::min(vector::bn_chunk, cols - c0);
      const auto [mean, variance] = two_pass(x, r, c0, n);
      double magnitude = 0;
      for (std::size_t c = c0; c < c0 + n; ++c) magnitude += std::fabs(value_of(x(r, c)));
      const chunk_bound bound = bn_bound(n, magnitude / static_cast<double>(n), variance);
      CHECK(stats(r, k) == static_cast<float>(n));
      CHECK(std::fabs(stats(r, k + 1) - mean) <= bound.mean);
      CHECK(std::fabs(stats(r, k + 2) / static_cast<double>(n) - variance) <= bound.variance);
      max_bound_mean = std::max(max_bound_mean, bound.mean);
      max_bound_var = std::max(max_bound_var, bound.variance);
    }
    // bn_aggr is exact in fp64 (Chan's formula) apart from the final rounding to fp32: the row's
    // mean is within the chunks' mean bound, its variance within the chunks' variance bound plus
    // the spread of the chunk means' errors (each chunk mean's error delta adds at most delta^2
    // to the between-chunk term), then one fp32 rounding each.
    const auto [mean, variance] = two_pass(x, r, 0, cols);
    CHECK(std::fabs(mean_var(r, 0) - mean) <= max_bound_mean + 0x1p-24 * std::fabs(mean));
    CHECK(std::fabs(mean_var(r, 1) - variance) <=
          max_bound_var + 4 * max_bound_mean * max_bound_mean +
              4 * max_bound_mean * std::sqrt(variance) + 0x1p-24 * variance);
  }
}

TEST_CASE("vector: bn_stats and bn_aggr against fp64 two-pass statistics") {
  for (std::size_t cols : {1u, 511u, 512u, 513u, 1537u, 4097u}) {
    check_bn<float>(3, cols, 0.0, 1.0);
    check_bn<float>(2, cols, 1e4, 1.0);  // E[x^2] - E[x]^2 in fp32 loses everything here
    check_bn<bf16>(2, cols, 0.5, 2.0);
    check_bn<fp8_e4m3>(2, cols, -3.0, 1.0);
  }
}

TEST_CASE("vector: bn_stats with a large offset: variance well inside a naive formula's error") {
  // The rows are 1e4 + N(0, 1): fp32 E[x^2] - E[x]^2 has an error of order 1e8 * 2^-24 = 6
  // against a variance of 1. The engine's variance must be within 5% of the fp64 value.
  tensor<float> x(4, 4097);
  std::mt19937_64 random(9);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t c = 0; c < 4097; ++c) x(r, c) = static_cast<float>(1e4 + normal(random));
  }
  tensor<float> stats(4, vector::bn_stats_cols(4097));
  std::vector<float> mean_var(8);
  vector::bn_stats(stats.v(), x.cv());
  vector::bn_aggr(view<float>(mean_var.data(), 4, 2), stats.cv());
  for (std::size_t r = 0; r < 4; ++r) {
    const auto [mean, variance] = two_pass(x, r, 0, 4097);
    CHECK(std::fabs(mean_var[2 * r + 1] - variance) <= 0.05 * variance);
    CHECK(std::fabs(mean_var[2 * r] - mean) <= 1e-3);
  }
}

TEST_CASE("vector: bn_stats of a constant row, and bn_aggr of no chunks") {
  tensor<bf16> x(2, 1030);
  x.fill(bf16::from(3.25f));
  tensor<float> stats(2, vector::bn_stats_cols(1030));
  tensor<float> mean_var(2, 2);
  vector::bn_stats(stats.v(), x.cv());
  vector::bn_aggr(mean_var.v(), stats.cv());
  CHECK(mean_var(0, 0) == 3.25f);
  CHECK(mean_var(0, 1) == 0.0f);
  CHECK(mean_var(1, 0) == 3.25f);
  CHECK(mean_var(1, 1) == 0.0f);
  // A row of no elements: (NaN, NaN), as documented.
  const view<const float> no_stats(stats.cv().data(), 2, 0, stats.stride());
  vector::bn_aggr(mean_var.v(), no_stats);
  CHECK(std::isnan(mean_var(0, 0)));
  CHECK(std::isnan(mean_var(1, 1)));
}

// ---------------------------------------------------------------------------------------------
// Shape errors: the message names the operation, the argument and the sizes; nothing is written.

TEST_CASE("vector: shape errors name the operation and the argument, and write nothing") {
  tensor<bf16> dst(4, 5, 6);
  tensor<float> full(4, 5), wrong(2, 3), out_column(4, 1), out_wrong(3, 1), row_out(1, 5);
  fill_signed(full, 1);
  fill_signed(wrong, 2);
  const auto f = [](auto, auto a, auto b) { return a + b; };
  const std::string add = "tilekern::vector::add";
  check_shape_error([&] { vector::add(dst.v(), wrong.cv(), full.cv()); },
                    {add, "a is 2x3", "expected 4x5"});
  check_shape_error([&] { vector::add(dst.v(), full.cv(), wrong.cv()); },
                    {add, "b is 2x3", "expected 4x5"});
  check_shape_error([&] { vector::sub(dst.v(), full.cv(), wrong.cv()); },
                    {"tilekern::vector::sub", "b is 2x3"});
  check_shape_error([&] { vector::mul(dst.v(), wrong.cv(), 1.0f); },
                    {"tilekern::vector::mul", "a is 2x3"});
  check_shape_error([&] { vector::div(dst.v(), 1.0f, wrong.cv()); },
                    {"tilekern::vector::div", "b is 2x3"});
  check_shape_error([&] { vector::max(dst.v(), full.cv(), wrong.cv()); },
                    {"tilekern::vector::max", "b is 2x3"});
  check_shape_error([&] { vector::min(dst.v(), wrong.cv(), full.cv()); },
                    {"tilekern::vector::min", "a is 2x3"});
  check_shape_error([&] { vector::map(dst.v(), f, full.cv(), wrong.cv()); },
                    {"tilekern::vector::map", "source 2 is 2x3", "expected 4x5"});
  check_shape_error([&] { vector::map(dst.v(), f, wrong.cv(), full.cv()); },
                    {"tilekern::vector::map", "source 1 is 2x3"});
  check_shape_error([&] { vector::select(dst.v(), wrong.cv(), full.cv(), full.cv()); },
                    {"tilekern::vector::select", "mask is 2x3"});
  check_shape_error([&] { vector::select(dst.v(), full.cv(), wrong.cv(), full.cv()); },
                    {"tilekern::vector::select", "a is 2x3"});
  check_shape_error([&] { vector::select(dst.v(), full.cv(), full.cv(), wrong.cv()); },
                    {"tilekern::vector::select", "b is 2x3"});
  check_shape_error([&] { vector::affine_select(dst.v(), wrong.cv(), affine{}, 0.0f); },
                    {"tilekern::vector::affine_select", "src is 2x3"});
  check_shape_error([&] { vector::add(dst.v(), full.cv(), vector::column(full.cv())); },
                    {add, "b is 4x5", "expected 4x1 (a column) or 1x1"});
  check_shape_error([&] { vector::mul(dst.v(), vector::column(row_out.cv()), 1.0f); },
                    {"tilekern::vector::mul", "a is 1x5", "expected 4x1 (a column) or 1x1"});
  check_shape_error([&] { vector::transpose(dst.v(), full.cv()); },
                    {"tilekern::vector::transpose", "dst is 4x5", "expected 5x4"});
  CHECK(dst.all_sentinel());

  const auto sentinel_kept = [](tensor<float>& t) { return t.all_sentinel(); };
  tensor<float> untouched(3, 1);
  for (const char* name : {"row_sum", "row_max", "row_min", "row_mean"}) {
    const std::string function = std::string("tilekern::vector::") + name;
    check_shape_error(
        [&] {
          if (function.ends_with("row_sum")) vector::row_sum(untouched.v(), full.cv());
          if (function.ends_with("row_max")) vector::row_max(untouched.v(), full.cv());
          if (function.ends_with("row_min")) vector::row_min(untouched.v(), full.cv());
          if (function.ends_with("row_mean")) vector::row_mean(untouched.v(), full.cv());
        },
        {function, "out is 3x1", "expected 4x1"});
  }
  CHECK(sentinel_kept(untouched));
  tensor<float> short_row(1, 4);
  for (const char* name : {"col_sum", "col_max", "col_min", "col_mean"}) {
    const std::string function = std::string("tilekern::vector::") + name;
    check_shape_error(
        [&] {
          if (function.ends_with("col_sum")) vector::col_sum(short_row.v(), full.cv());
          if (function.ends_with("col_max")) vector::col_max(short_row.v(), full.cv());
          if (function.ends_with("col_min")) vector::col_min(short_row.v(), full.cv());
          if (function.ends_with("col_mean")) vector::col_mean(short_row.v(), full.cv());
        },
        {function, "out is 1x4", "expected 1x5"});
  }
  CHECK(sentinel_kept(short_row));
  check_shape_error([&] { vector::row_sum_of(untouched.v(), f, full.cv(), full.cv()); },
                    {"tilekern::vector::row_sum_of", "out is 3x1"});
  check_shape_error([&] { vector::row_sum_of(out_column.v(), f, full.cv(), wrong.cv()); },
                    {"tilekern::vector::row_sum_of", "source 2 is 2x3"});
  const auto pair = [](auto, auto a, auto b) { return std::pair(a, b); };
  check_shape_error(
      [&] { vector::row_sums_of(untouched.v(), out_column.v(), pair, full.cv(), full.cv()); },
      {"tilekern::vector::row_sums_of", "first is 3x1", "expected 4x1"});
  check_shape_error(
      [&] { vector::row_sums_of(out_column.v(), untouched.v(), pair, full.cv(), full.cv()); },
      {"tilekern::vector::row_sums_of", "second is 3x1", "expected 4x1"});
  check_shape_error(
      [&] { vector::row_sums_of(out_column.v(), out_column.v(), pair, full.cv(), wrong.cv()); },
      {"tilekern::vector::row_sums_of", "source 2 is 2x3"});
  check_shape_error([&] { vector::row_max_of(untouched.v(), f, full.cv(), full.cv()); },
                    {"tilekern::vector::row_max_of", "out is 3x1"});
  check_shape_error([&] { vector::row_max_of(out_column.v(), f, full.cv(), wrong.cv()); },
                    {"tilekern::vector::row_max_of", "source 2 is 2x3"});
  CHECK(sentinel_kept(out_column));
  check_shape_error([&] { vector::col_sum_of(short_row.v(), f, full.cv(), full.cv()); },
                    {"tilekern::vector::col_sum_of", "acc is 1x4", "expected 1x5"});
  check_shape_error([&] { vector::col_sum_of(row_out.v(), f, full.cv(), wrong.cv()); },
                    {"tilekern::vector::col_sum_of", "source 2 is 2x3"});
  check_shape_error(
      [&] { vector::col_sums_of(short_row.v(), row_out.v(), pair, full.cv(), full.cv()); },
      {"tilekern::vector::col_sums_of", "first is 1x4", "expected 1x5"});
  check_shape_error(
      [&] { vector::col_sums_of(row_out.v(), short_row.v(), pair, full.cv(), full.cv()); },
      {"tilekern::vector::col_sums_of", "second is 1x4", "expected 1x5"});
  check_shape_error(
      [&] { vector::col_sums_of(row_out.v(), row_out.v(), pair, full.cv(), wrong.cv()); },
      {"tilekern::vector::col_sums_of", "source 2 is 2x3"});
  CHECK(sentinel_kept(short_row));
  CHECK(sentinel_kept(row_out));

  tensor<float> stats(4, 5), stats_ok(4, 3), mean_var(4, 3);
  check_shape_error([&] { vector::bn_stats(stats.v(), full.cv()); },
                    {"tilekern::vector::bn_stats", "stats is 4x5", "expected 4x3"});
  CHECK(sentinel_kept(stats));
  check_shape_error([&] { vector::bn_aggr(mean_var.v(), full.cv()); },
                    {"tilekern::vector::bn_aggr", "stats has 5 columns"});
  stats_ok.fill(1.0f);
  check_shape_error([&] { vector::bn_aggr(mean_var.v(), stats_ok.cv()); },
                    {"tilekern::vector::bn_aggr", "mean_var is 4x3", "expected 4x2"});
  CHECK(sentinel_kept(mean_var));
}

}  // namespace
}  // namespace tilekern::test::engine_tests
