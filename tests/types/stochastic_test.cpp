// Stochastic rounding: only ever the two neighbours, unbiased, rounding up with probability
// (x - lower) / (upper - lower), reproducible from (seed, stream, index) whatever the split.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "tilekern/simd/convert.hpp"
#include "types/reference.hpp"

namespace tilekern::test {
namespace {

constexpr std::size_t samples = std::size_t{1} << 14;

// Inputs at several fractions of the gap between chosen neighbouring values: subnormals, the
// first normals, around one, and just below max (and between max and the overflow point).
template <class F>
std::vector<std::size_t> lower_indices() {
  const value_grid<F>& g = grid<F>();
  const std::size_t last = g.values.size() - 1;
  const std::size_t per_binade = std::size_t{1} << F::mantissa_bits;
  std::vector<std::size_t> indices = {0,        1,   per_binade - 1, per_binade, per_binade + 1,
                                      last - 1, last};
  const auto one = std::upper_bound(g.values.begin(), g.values.end(), 1.0) - g.values.begin() - 1;
  indices.push_back(static_cast<std::size_t>(one));
  indices.push_back(static_cast<std::size_t>(one) + per_binade / 3);
  std::erase_if(indices, [&](std::size_t i) { return i > last; });
  return indices;
}

template <class F>
void check_distribution(overflow on_overflow) {
  const value_grid<F>& g = grid<F>();
  mismatches failures;
  std::vector<float> input(samples);
  std::vector<F> output(samples);
  std::uint64_t seed = 0;
  for (std::size_t i : lower_indices<F>()) {
    const double lower = g.values[i];
    const bool beyond = i + 1 == g.values.size();
    const double upper = beyond ? g.beyond : g.values[i + 1];
    const double gap = upper - lower;
    for (double fraction : {0.5, 0.25, 0.75, 0.1, 0.9, 1.0 / 3, 0.01, 0.999}) {
      const auto x = static_cast<float>(lower + fraction * gap);
      if (!(x > lower && x < upper)) continue;  // not an fp32 value strictly between them
      const double p = (x - lower) / gap;       // exact
      // The documented quantisation: up with probability floor(p * 2^32) / 2^32.
      const double quantised = std::floor(std::ldexp(p, 32)) / 4294967296.0;
      std::fill(input.begin(), input.end(), x);
      const cast_options options{rounding::stochastic, on_overflow, ++seed, 3};
      convert(std::span<const float>(input), std::span<F>(output), options);

      const std::uint32_t down_code = g.codes[i];
      const std::uint32_t up_code =
          beyond ? encode<F>(HUGE_VAL, rounding::nearest_even, on_overflow) : g.codes[i + 1];
      if (beyond && on_overflow == overflow::saturate) {  // both neighbours are max
        for (const F& result : output) {
          if (result.code() != down_code) failures.add(format_name<F>(), " ", x, " saturates");
        }
        continue;
      }
      double ups = 0;
      for (const F& result : output) {
        if (result.code() == up_code) {
          ups += 1;
        } else if (result.code() != down_code) {
          failures.add(format_name<F>(), " ", x, ": ", hex(result.code()), " is neither ",
                       hex(down_code), " nor ", hex(up_code));
        }
      }
      const double n = samples;
      // Binomial: the count of ups within 4 standard deviations of n * p (plus one for the
      // count being whole).
      const double sigma = std::sqrt(n * quantised * (1 - quantised));
      if (std::fabs(ups - n * quantised) > 4 * sigma + 1) {
        failures.add(format_name<F>(), " ", x, " p ", p, ": ", ups, " ups of ", n);
      }
      // Unbiased: the mean output within 4 standard errors of x (allowing the 2^-32 gap of the
      // quantisation). Skipped beyond max, where rounding up overflows.
      if (!beyond) {
        const double mean = lower + gap * ups / n;
        const double standard_error = gap * std::sqrt(p * (1 - p) / n);
        if (std::fabs(mean - x) > 4 * standard_error + gap * 0x1p-32 + gap / n) {
          failures.add(format_name<F>(), " ", x, ": mean ", mean);
        }
      }
    }
  }
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("stochastic: only the two neighbours, at the rate (x - lower) / gap, unbiased") {
  for_each_tested_format([]<class F>() {
    CAPTURE(format_name<F>());
    check_distribution<F>(overflow::standard);
    check_distribution<F>(overflow::saturate);
  });
}

TEST_CASE("stochastic: exact values are unchanged, in bulk and one by one") {
  for_each_tested_format([]<class F>() {
    CAPTURE(format_name<F>());
    std::vector<float> input;
    std::vector<std::uint32_t> codes;
    for (std::uint32_t code = 0; code < layout<F>::code_count && input.size() < 70000; ++code) {
      const decoded d = decode<F>(code);
      if (d.what != kind::number) continue;
      input.push_back(static_cast<float>(d.value()));
      codes.push_back(code);
    }
    std::vector<F> output(input.size());
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      const cast_options options{rounding::stochastic, overflow::standard, seed, seed};
      convert(std::span<const float>(input), std::span<F>(output), options);
      std::size_t changed = 0;
      for (std::size_t i = 0; i < input.size(); ++i) {
        changed += output[i].code() != codes[i];
        changed += F::from(static_cast<double>(input[i]), options, i * 7919).code() != codes[i];
      }
      CHECK(changed == 0);
    }
  });
}

template <class F>
void check_pieces() {
  // Values strictly between neighbours, so that every element depends on its random bits.
  const value_grid<F>& g = grid<F>();
  std::vector<float> input(10007);
  for (std::size_t i = 0; i < input.size(); ++i) {
    const std::size_t k = (i * 2654435761u) % (g.values.size() - 1);
    const double x = g.values[k] + (g.values[k + 1] - g.values[k]) * ((i % 97) + 1) / 98.0;
    input[i] = static_cast<float>(i % 2 ? -x : x);
  }
  for (overflow on_overflow : {overflow::standard, overflow::saturate}) {
    const cast_options options{rounding::stochastic, on_overflow, 0xabcdef, 42};
    const std::uint64_t first_index = 1000003;
    std::vector<F> whole(input.size()), pieces(input.size());
    convert(std::span<const float>(input), std::span<F>(whole), options, first_index);
    // Irregular pieces: 1, 7, 16, 33, 100, 999, ... each told its offset.
    std::size_t offset = 0;
    for (std::size_t length : {1, 7, 16, 33, 100, 999, 64, 3}) {
      convert(std::span<const float>(input).subspan(offset, length),
              std::span<F>(pieces).subspan(offset, length), options, first_index + offset);
      offset += length;
    }
    convert(std::span<const float>(input).subspan(offset), std::span<F>(pieces).subspan(offset),
            options, first_index + offset);
    std::size_t differences = 0;
    for (std::size_t i = 0; i < input.size(); ++i) {
      differences += whole[i].bits() != pieces[i].bits();
      // Both are the scalar definition with index first_index + i.
      differences += whole[i].bits() != F::from(input[i], options, first_index + i).bits();
      const std::uint32_t word =
          random_bits(random_key::from(options.seed, options.stream), first_index + i);
      differences +=
          whole[i].code() != encode<F>(input[i], rounding::stochastic, on_overflow, word);
    }
    CHECK(differences == 0);
  }
}

TEST_CASE("stochastic: a span converted whole or in pieces via first_index gives the same bits") {
  for_each_tested_format([]<class F>() {
    CAPTURE(format_name<F>());
    check_pieces<F>();
  });
}

TEST_CASE("stochastic: different seeds differ, different streams differ") {
  // x halfway between neighbours: two independent draws differ with probability 1/2.
  constexpr std::size_t n = 4096;
  std::vector<float> input(n, 1.00390625f);  // bf16: halfway between 1 and 1 + 2^-7
  const auto run = [&](std::uint64_t seed, std::uint64_t stream) {
    std::vector<bf16> output(n);
    convert(std::span<const float>(input), std::span<bf16>(output),
            cast_options{rounding::stochastic, overflow::standard, seed, stream});
    return output;
  };
  const auto differences = [&](const std::vector<bf16>& a, const std::vector<bf16>& b) {
    std::size_t count = 0;
    for (std::size_t i = 0; i < n; ++i) count += a[i].bits() != b[i].bits();
    return static_cast<double>(count);
  };
  const auto base = run(1, 0);
  const double expected = n / 2.0, sigma = std::sqrt(n / 4.0);  // 2048 +- 32
  CHECK(differences(base, run(1, 0)) == 0);
  CHECK(std::fabs(differences(base, run(2, 0)) - expected) < 4 * sigma);
  CHECK(std::fabs(differences(base, run(1, 1)) - expected) < 4 * sigma);
  CHECK(std::fabs(differences(run(0, 0), run(0, 1)) - expected) < 4 * sigma);
}

TEST_CASE("stochastic: NeuronCore's example, fp16 1024 plus 0.5, 2048 times") {
  const auto accumulate = [](const cast_options& options) {
    fp16 sum = fp16::from(1024.0f);
    for (std::uint64_t step = 0; step < 2048; ++step) {
      sum = fp16::from(sum.to_float() + 0.5f, options, step);
    }
    return static_cast<double>(sum.to_float());
  };
  CHECK(accumulate(cast_options{}) == 1024.0);  // every step is a tie back to 1024

  // Each step adds 0.5 in expectation: below 2048 it rounds up by 1 with probability 1/2
  // (variance 1/4), from 2048 on by 2 with probability 1/4 (variance 3/4). So the expected
  // final value is 1024 + 2048 * 0.5 = 2048, and its variance (a sum of martingale increments)
  // is at most 2048 * 3/4 = 1536: a standard deviation under 40.
  constexpr int runs = 64;
  double total = 0;
  for (int seed = 1; seed <= runs; ++seed) {
    const double result = accumulate(
        cast_options{rounding::stochastic, overflow::standard, static_cast<std::uint64_t>(seed)});
    CAPTURE(seed);
    CHECK(std::fabs(result - 2048) < 6 * 40);  // far from 1024: it grows
    total += result;
  }
  // The mean of 64 runs: standard error under 40 / 8 = 5.
  CHECK(std::fabs(total / runs - 2048) < 4 * 5);
}

}  // namespace
}  // namespace tilekern::test
