#pragma once
// Bulk conversion between fp32 and every format, on the best ISA path (simd/isa.hpp).
//
// Every path gives the same bits as the scalar definition in types/minifloat.hpp, in every
// rounding and overflow mode: element i of a call draws its stochastic random bits with index
// first_index + i, so converting a tensor in pieces (passing each piece's offset) gives the
// same bits as converting it whole, whatever the ISA path or thread count.

#include <cstddef>
#include <cstdint>
#include <span>

#include "tilekern/error.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/types/minifloat.hpp"

namespace tilekern {

namespace detail {

template <minifloat_format F>
void encode_scalar(const float* from, F* to, std::size_t n, const cast_options& options,
                   std::uint64_t first_index) {
  const random_key key = random_key::from(options.seed, options.stream);
  const bool stochastic = options.round == rounding::stochastic;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t random = stochastic ? random_bits(key, first_index + i) : 0;
    to[i] = F::from(from[i], options.round, options.on_overflow, random);
  }
}

template <minifloat_format F>
void decode_scalar(const F* from, float* to, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) to[i] = from[i].to_float();
}

}  // namespace detail

// fp32 -> F. Throws shape_error if the spans differ in size.
template <minifloat_format F>
void convert(std::span<const float> from, std::span<F> to, const cast_options& options = {},
             std::uint64_t first_index = 0) {
  detail::check_size("tilekern::convert", "to", to.size(), from.size());
  detail::encode_scalar(from.data(), to.data(), from.size(), options, first_index);
}

// F -> fp32, exact. Throws shape_error if the spans differ in size.
template <minifloat_format F>
void convert(std::span<const F> from, std::span<float> to) {
  detail::check_size("tilekern::convert", "to", to.size(), from.size());
  detail::decode_scalar(from.data(), to.data(), from.size());
}

}  // namespace tilekern
