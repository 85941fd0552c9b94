#pragma once
// Counter-based random bits for stochastic rounding.
//
// The bits for element `index` are a pure function of (seed, stream, index): no state, so any
// split of a tensor into tiles, chunks or threads draws exactly the same bits for each element.
//
//   key            = two 32-bit words derived from (seed, stream) by splitmix64, once per cast
//   bits(index)    = mix(mix(lo32(index) ^ key.lo) ^ hi32(index) ^ key.hi)
//
// `mix` is a two-multiply xorshift-multiply integer hash (Wellons' "lowbias32" family, constants
// 0x21f0aaad / 0x735a2d97), a bijection of 32-bit words. So for fixed (seed, stream) the 2^32
// indices of one 4 Gi-element block map to 2^32 distinct words: exactly uniform over a block.
// Only 32-bit multiplies and shifts are used, so SIMD paths compute the same bits lane by lane.

#include <cstdint>

namespace tilekern {

struct random_key {
  std::uint32_t lo = 0;
  std::uint32_t hi = 0;

  static constexpr std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

  static constexpr random_key from(std::uint64_t seed, std::uint64_t stream) {
    const std::uint64_t k = splitmix64(splitmix64(seed) ^ stream);
    return {static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k >> 32)};
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
  const auto lo = static_cast<std::uint32_t>(index);
  const auto hi = static_cast<std::uint32_t>(index >> 32);
  return random_mix(random_mix(lo ^ key.lo) ^ hi ^ key.hi);
}

}  // namespace tilekern
