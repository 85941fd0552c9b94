#pragma once
// Inputs of the kernel benchmarks, and their values for the fp64 references:
//
//   normal_tensor<T>(n, seed, mean, sigma)   n samples of N(mean, sigma^2) (mt19937 from seed) in
//                                            T, float or a tilekern format (rounded to nearest
//                                            even)
//   decode(x), decoded(values)               the exact values, as double
//   name_of<T>()                             "float" or the format's name, for benchmark names

#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tilekern/simd/convert.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern::bench {

template <class T>
std::vector<T> normal_tensor(std::size_t n, unsigned seed, float mean = 0, float sigma = 1) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> distribution(mean, sigma);
  std::vector<float> values(n);
  for (float& v : values) v = distribution(generator);
  if constexpr (std::is_same_v<T, float>) {
    return values;
  } else {
    std::vector<T> result(n);
    convert(std::span<const float>(values), std::span<T>(result));
    return result;
  }
}

template <class T>
double decode(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return v.to_double();
  }
}

template <class T>
std::vector<double> decoded(const std::vector<T>& values) {
  std::vector<double> result(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) result[i] = decode(values[i]);
  return result;
}

template <class T>
std::string name_of() {
  if constexpr (std::is_same_v<T, float>) {
    return "float";
  } else {
    return format_name<T>();
  }
}

}  // namespace tilekern::bench
