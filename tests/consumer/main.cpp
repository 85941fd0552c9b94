#include <tilekern/tilekern.hpp>

#include <cstdio>
#include <vector>

int main() {
  const std::vector<float> input = {1.0f, 3.14159265f, -65504.0f, 1e-8f};
  std::vector<tilekern::bf16> encoded(input.size());
  std::vector<float> decoded(input.size());
  tilekern::convert(std::span<const float>(input), std::span<tilekern::bf16>(encoded));
  tilekern::convert(std::span<const tilekern::bf16>(encoded), std::span<float>(decoded));
  std::printf("isa %s: 3.14159265 -> bf16 0x%04x -> %.8g\n", tilekern::describe_isa().c_str(),
              static_cast<unsigned>(encoded[1].bits()), static_cast<double>(decoded[1]));
  return decoded[1] == 3.140625f ? 0 : 1;
}
