// Stochastic rounding through every kind of operator: the same seed gives the same bits for any
// number of cores and threads; another seed gives other bits; output k draws from stream + k, so
// two outputs of the same value differ; the random bits of an element depend on its row-major
// index in the output, not on its address (strides) nor on the kind of operator.

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <tuple>

#include "engine/gpsimd_support.hpp"

namespace tilekern::test {
namespace {

constexpr std::size_t rows = 23, cols = 181;

enum class kind { elementwise, rowwise, tilewise, launch };
constexpr kind all_kinds[] = {kind::elementwise, kind::rowwise, kind::tilewise, kind::launch};

std::string kind_name(kind k) {
  switch (k) {
    case kind::elementwise:
      return "elementwise";
    case kind::rowwise:
      return "rowwise";
    case kind::tilewise:
      return "tilewise";
    case kind::launch:
      return "launch";
  }
  return "?";
}

// Values in [1, 2) with all 24 bits of the significand random: bf16 drops 16 of them.
void fill_random(tensor<float>& x) {
  std::mt19937 random(2024);
  std::uniform_int_distribution<std::uint32_t> mantissa(0, (1u << 23) - 1);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c)
      x(r, c) = std::bit_cast<float>(0x3f800000u | mantissa(random));
  }
}

// y0 = y1 = x through operator kind `k`; y0 strided, y1 contiguous.
struct results {
  tensor<bf16> y0{rows, cols, cols + 3};
  tensor<bf16> y1{rows, cols};
};

void run(kind k, tensor<float>& x, const gpsimd::options& opt, results& out) {
  switch (k) {
    case kind::elementwise:
      gpsimd::elementwise([](auto v) { return std::tuple(v, v); }, gpsimd::inputs(x.cv()),
                          gpsimd::outputs(out.y0.v(), out.y1.v()), opt);
      break;
    case kind::rowwise:
      gpsimd::rowwise(
          [](auto in, auto a, auto b) {
            gpsimd::transform(
                a, [](auto v) { return v; }, in);
            gpsimd::transform(
                b, [](auto v) { return v; }, in);
          },
          gpsimd::inputs(x.cv()), gpsimd::outputs(out.y0.v(), out.y1.v()), opt);
      break;
    case kind::tilewise:
      gpsimd::tilewise<4, 8>(
          [](const auto& in, auto& a, auto& b) {
            a = in;
            b = in;
          },
          gpsimd::inputs(x.cv()), gpsimd::outputs(out.y0.v(), out.y1.v()), opt);
      break;
    case kind::launch: {
      // Rows shared over the cores; the caller picks the index (the element's place in the
      // contiguous output) and the streams (stream + 1 for the second output), as the other
      // kinds do.
      const view<bf16> y0 = out.y0.v();
      std::span<bf16> y1(out.y1.v().row(0).data(), rows * cols);
      cast_options second = opt.cast;
      second.stream += 1;
      gpsimd::launch(opt, [&](gpsimd::core& c) {
        const std::span<float> local = c.local().first(cols);
        for (std::size_t r = c.share(rows).begin; r < c.share(rows).end; ++r) {
          c.load(x.cv().row(r), {0, cols}, local);
          // y0 is strided: one row at a time, its index offset by the rows before it.
          std::span<bf16> padded_row(y0.row(r).data() - r * cols, (r + 1) * cols);
          c.store(local, padded_row, {r * cols, (r + 1) * cols});
          c.store(local, y1, {r * cols, (r + 1) * cols}, second);
        }
      });
      break;
    }
  }
}

// How many elements of a and b differ.
std::size_t differences(tensor<bf16>& a, tensor<bf16>& b) {
  std::size_t n = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) n += a(r, c).bits() != b(r, c).bits();
  }
  return n;
}

TEST_CASE("gpsimd: stochastic rounding, every kind: definition, reproducibility, seeds, streams") {
  tensor<float> x(rows, cols, cols + 9);
  fill_random(x);
  // With 16 random bits dropped, two independent draws give different results with probability
  // 2 p (1 - p) for the element's fraction p: a third of the elements on average; the checks
  // ask for a tenth.
  const std::size_t enough = rows * cols / 10;
  const cast_options cast{rounding::stochastic, overflow::standard, 31337, 4};
  for_each_isa([&](isa level) {
    for (kind k : all_kinds) {
      const std::string what = kind_name(k) + " " + std::string(name(level));
      results first;
      run(k, x, with_cores({.cast = cast}, {1, 1}), first);
      // The definition: the scalar cast of the fp32 value, at the element's row-major index.
      check_elements(
          first.y0,
          [&](std::size_t r, std::size_t c) { return bf16::from(x(r, c), cast, r * cols + c); },
          what + " y0");
      check_elements(
          first.y1,
          [&](std::size_t r, std::size_t c) {
            return bf16::from(x(r, c), cast_of_output(cast, 1), r * cols + c);
          },
          what + " y1");
      // Reproducible under any cores and threads.
      for (core_config config : core_configs) {
        results again;
        run(k, x, with_cores({.cast = cast}, config), again);
        CHECK_MESSAGE(same_bits(first.y0, again.y0), what, " cores ", config.cores, " threads ",
                      config.threads);
        CHECK_MESSAGE(same_bits(first.y1, again.y1), what, " cores ", config.cores, " threads ",
                      config.threads);
      }
      // The two outputs of the same values draw different bits.
      CHECK_MESSAGE(differences(first.y0, first.y1) > enough, what,
                    ": outputs 0 and 1 share random bits");
      // Another seed: other bits.
      cast_options other_seed = cast;
      other_seed.seed += 1;
      results reseeded;
      run(k, x, with_cores({.cast = other_seed}, {8, 0}), reseeded);
      CHECK_MESSAGE(differences(first.y0, reseeded.y0) > enough, what, ": seeds ", cast.seed,
                    " and ", other_seed.seed, " agree");
      // Output 1 is output 0 of the next stream.
      cast_options next_stream = cast;
      next_stream.stream += 1;
      results shifted;
      run(k, x, with_cores({.cast = next_stream}, {3, 0}), shifted);
      CHECK_MESSAGE(same_bits(first.y1, shifted.y0), what, ": output 1 does not use stream + 1");
    }
  });
}

TEST_CASE("gpsimd: stochastic rounding gives the same bits through every kind") {
  tensor<float> x(rows, cols, cols + 9);
  fill_random(x);
  const cast_options cast{rounding::stochastic, overflow::saturate, 5, 0};
  results reference;
  run(kind::elementwise, x, with_cores({.cast = cast}, {8, 2}), reference);
  for (kind k : all_kinds) {
    results out;
    run(k, x, with_cores({.cast = cast}, {3, 2}), out);
    CHECK_MESSAGE(same_bits(reference.y0, out.y0), kind_name(k));
    CHECK_MESSAGE(same_bits(reference.y1, out.y1), kind_name(k));
  }
}

}  // namespace
}  // namespace tilekern::test
