#pragma once
// Counter-based random bits for stochastic rounding.
//
// The bits for element `index` are a pure function of (seed, stream, index): no state, so any
// split of a tensor into tiles, chunks or threads draws exactly the same bits for each element.
//
//   k            = splitmix64(splitmix64(seed) ^ stream), once per cast
//   step, offset = lo32(k) | 1, hi32(k)
//   bits(index)  = mix(lo32(index) * step + hi32(index) * 0x9e3779b9 + offset)   (mod 2^32)
//
// A keyed Weyl sequence (odd step: every 32-bit word once per 2^32 indices) through `mix`, a
// two-multiply xorshift-multiply hash (Wellons' "lowbias32" family, constants 0x21f0aaad /
// 0x735a2d97) that is a bijection of 32-bit words. So for fixed (seed, stream) the 2^32 indices
// of one 4 Gi-element block map to 2^32 distinct words: exactly uniform over a block. In SIMD
// the Weyl step is one add per vector (lane j adds j * step), then two 32-bit multiplies.

#include <cstdint>

namespace tilekern {

struct random_key {
  std::uint32_t step = 1;  // odd
  std::uint32_t offset = 0;

  static constexpr std::uint32_t high_step = 0x9e3779b9u;  // for the index's high word

  static constexpr std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

  static constexpr random_key from(std::uint64_t seed, std::uint64_t stream) {
    const std::uint64_t k = splitmix64(splitmix64(seed) ^ stream);
    return {static_cast<std::uint32_t>(k) | 1u, static_cast<std::uint32_t>(k >> 32)};
  }

  // The Weyl counter of `index`, before mixing.
  constexpr std::uint32_t counter(std::uint64_t index) const {
    return static_cast<std::uint32_t>(index) * step +
           static_cast<std::uint32_t>(index >> 32) * high_step + offset;
  }
};

constexpr std::uint32_t random_mix(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

constexpr std::uint32_t random_bits(random_key key, std::uint64_t index) {
  return random_mix(key.counter(index));
}

}  // namespace tilekern
