// The counter-based generator of random.hpp: a bijection per block, uniform, independent of
// its neighbours, and stable (the same bits forever, since users rely on reproducible runs).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tilekern/types/random.hpp"

namespace tilekern::test {
namespace {

// The generator rewritten from its published definitions, not from random.hpp: SplitMix64
// (Steele, Lea, Flood 2014; the constants of Vigna's splitmix64.c) and Wellons'
// hash-prospector two-round hash "[16 21f0aaad 15 735a2d97 15]".
namespace independent {

std::uint64_t splitmix64(std::uint64_t state) {
  std::uint64_t z = state + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint32_t hash(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

// A Weyl sequence keyed by (seed, stream), through the hash.
std::uint32_t bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const std::uint64_t key = splitmix64(splitmix64(seed) ^ stream);
  const std::uint32_t step = static_cast<std::uint32_t>(key) | 1u;
  const auto offset = static_cast<std::uint32_t>(key >> 32);
  const std::uint64_t counter = (index & 0xffffffffu) * step + (index >> 32) * 0x9e3779b9u + offset;
  return hash(static_cast<std::uint32_t>(counter));
}

}  // namespace independent

std::uint32_t generated(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return random_bits(random_key::from(seed, stream), index);
}

struct known {
  std::uint64_t seed, stream, index;
  std::uint32_t bits;
};

// Computed once with the independent definition above (in Python, then cross-checked here).
constexpr known stable_values[] = {
    {0, 0, 0, 0x1b45060cu},
    {0, 0, 1, 0x80935fb1u},
    {1, 0, 0, 0xdd2c7992u},
    {0, 1, 0, 0x09d15eb2u},
    {42, 7, 123456789, 0xc3696895u},
    {0xdeadbeefcafef00dull, 3, (5ull << 32) + 17, 0x058db531u},
    {~0ull, ~0ull, ~0ull, 0xcda5c90eu},
};

TEST_CASE("random: the generator is stable") {
  // SplitMix64's published first output for state 0 anchors the reimplementation.
  CHECK(independent::splitmix64(0) == 0xe220a8397b1dcdafull);
  CHECK(random_key::splitmix64(0) == 0xe220a8397b1dcdafull);
  CHECK(random_key::from(0, 0).step == 0x4d197e6fu);
  CHECK(random_key::from(0, 0).offset == 0xa706dd2fu);
  CHECK(random_key::from(42, 7).step == 0x1339e501u);  // made odd
  CHECK(random_key::from(42, 7).offset == 0x16062d6cu);
  CHECK(random_mix(1) == 0x86d2fa73u);
  CHECK(random_mix(0xffffffffu) == 0x99b5e683u);
  for (const known& value : stable_values) {
    CAPTURE(value.seed);
    CAPTURE(value.stream);
    CAPTURE(value.index);
    CHECK(generated(value.seed, value.stream, value.index) == value.bits);
    CHECK(independent::bits(value.seed, value.stream, value.index) == value.bits);
  }
  // And agreement with the independent definition on many points.
  std::size_t differences = 0;
  for (std::uint64_t i = 0; i < 100000; ++i) {
    const std::uint64_t seed = i * 0x9e3779b97f4a7c15ull, stream = i % 7, index = i * i * 977;
    differences += generated(seed, stream, index) != independent::bits(seed, stream, index);
  }
  CHECK(differences == 0);
}

TEST_CASE("random: 2^20 consecutive indices give distinct words (a bijection per block)") {
  for (std::uint64_t first : {0ull, (5ull << 32) + 0x7fff0000u}) {
    std::vector<std::uint32_t> words(std::size_t{1} << 20);
    const random_key key = random_key::from(1234, 5);
    for (std::size_t i = 0; i < words.size(); ++i) words[i] = random_bits(key, first + i);
    std::sort(words.begin(), words.end());
    CHECK(std::adjacent_find(words.begin(), words.end()) == words.end());
  }
}

TEST_CASE("random: the top 8 bits are uniform (chi-square, 255 degrees of freedom)") {
  for (std::uint64_t seed : {0ull, 1ull, 0xfeedfacecafebeefull}) {
    const random_key key = random_key::from(seed, 0);
    constexpr std::size_t n = std::size_t{1} << 20;
    std::vector<double> counts(256, 0.0);
    for (std::size_t i = 0; i < n; ++i) counts[random_bits(key, i) >> 24] += 1;
    double chi_square = 0;
    const double expected = n / 256.0;
    for (double count : counts) chi_square += (count - expected) * (count - expected) / expected;
    // Mean 255, standard deviation sqrt(2 * 255) ~ 22.6: five of them either way. Too small
    // is a failure too: a counter shifted into the top bits would be perfectly even.
    CAPTURE(chi_square);
    CHECK(chi_square > 255 - 5 * 22.6);
    CHECK(chi_square < 255 + 5 * 22.6);
  }
}

double correlation(const std::vector<double>& x, const std::vector<double>& y) {
  const auto n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    syy += y[i] * y[i];
    sxy += x[i] * y[i];
  }
  const double cov = sxy / n - (sx / n) * (sy / n);
  return cov / std::sqrt((sxx / n - (sx / n) * (sx / n)) * (syy / n - (sy / n) * (sy / n)));
}

TEST_CASE("random: neighbouring indices, streams and seeds are uncorrelated") {
  constexpr std::size_t n = std::size_t{1} << 20;
  const random_key key = random_key::from(99, 0);
  std::vector<double> word(n + 1), same_index_other_stream(n), same_index_other_seed(n);
  const random_key other_stream = random_key::from(99, 1), other_seed = random_key::from(100, 0);
  for (std::size_t i = 0; i <= n; ++i) word[i] = random_bits(key, i) / 4294967296.0;
  for (std::size_t i = 0; i < n; ++i) {
    same_index_other_stream[i] = random_bits(other_stream, i) / 4294967296.0;
    same_index_other_seed[i] = random_bits(other_seed, i) / 4294967296.0;
  }
  const std::vector<double> current(word.begin(), word.end() - 1),
      next(word.begin() + 1, word.end());
  // Under independence the sample correlation has standard deviation 1/sqrt(n) ~ 0.001.
  const double bound = 4 / std::sqrt(static_cast<double>(n));
  CHECK(std::fabs(correlation(current, next)) < bound);
  CHECK(std::fabs(correlation(current, same_index_other_stream)) < bound);
  CHECK(std::fabs(correlation(current, same_index_other_seed)) < bound);
  // Every bit is set half the time.
  for (int bit = 0; bit < 32; ++bit) {
    double ones = 0;
    for (std::size_t i = 0; i < n; ++i) ones += (random_bits(key, i) >> bit) & 1;
    CAPTURE(bit);
    CHECK(std::fabs(ones - n / 2.0) < 4 * std::sqrt(n / 4.0));
  }
}

TEST_CASE("random: the key depends on both seed and stream") {
  CHECK(random_key::from(0, 0).offset != random_key::from(0, 1).offset);
  CHECK(random_key::from(0, 0).offset != random_key::from(1, 0).offset);
  // Seed and stream are not interchangeable.
  CHECK(random_bits(random_key::from(1, 2), 0) != random_bits(random_key::from(2, 1), 0));
}

}  // namespace
}  // namespace tilekern::test
