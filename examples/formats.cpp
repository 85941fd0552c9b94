// The README's examples, compiled and run by the tests.
#include <tilekern/tilekern.hpp>

#include <cstdio>
#include <vector>

using namespace tilekern;

int main() {
  const fp8_e4m3fn a = fp8_e4m3fn::from(465.0f);  // 465 rounds to 480 > 448: NaN, no inf
  const fp8_e4m3fn b = fp8_e4m3fn::from(465.0f, {.on_overflow = overflow::saturate});  // 448
  std::printf("e4m3fn(465) = %g, saturating: %g\n", a.to_double(), b.to_double());

  // Stochastic rounding keeps the sum of many small increments that nearest-even loses:
  // NeuronCore's documented example, 1024 + 0.5 added 2048 times in fp16.
  fp16 nearest(1024.0f), stochastic(1024.0f);
  for (std::uint64_t i = 0; i < 2048; ++i) {
    nearest = fp16::from(nearest.to_float() + 0.5f);
    stochastic = fp16::from(stochastic.to_float() + 0.5f,
                            {.round = rounding::stochastic, .seed = 42}, /*index=*/i);
  }
  std::printf("fp16 1024 + 2048 x 0.5: nearest-even %g, stochastic %g (exact 2048)\n",
              nearest.to_double(), stochastic.to_double());

  std::vector<float> x = {0.1f, 1.0f / 3.0f, 3.14159265f, -2.5e-3f};
  std::vector<bf16> y(x.size());
  convert(std::span<const float>(x), std::span<bf16>(y), {.round = rounding::stochastic, .seed = 7},
          /*first_index=*/0);
  convert(std::span<const bf16>(y), std::span<float>(x));  // exact
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::printf("bf16 0x%04x = %.8g\n", static_cast<unsigned>(y[i].bits()), static_cast<double>(x[i]));
  }
  std::printf("isa: %s\n", describe_isa().c_str());
  return a.is_nan() && b.to_float() == 448.0f && nearest.to_float() == 1024.0f ? 0 : 1;
}
