#include <doctest/doctest.h>
#include "tilekern/simd/convert.hpp"
TEST_CASE("smoke: bulk bf16") { float x[1] = {1.0f}; tilekern::bf16 y[1]; tilekern::convert(std::span<const float>(x), std::span<tilekern::bf16>(y)); CHECK(y[0].bits() == 0x3f80); }
