// A Linear layer, y = gelu(x W^T + bias), with bf16 activations and fp8 weights packed once:
// the README's matmul example, compiled and run by the tests. It checks itself against the fp64
// reference and exits non-zero, saying why, if a check fails.
#include <tilekern/tilekern.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace tilekern;

int main() {
  const std::size_t tokens = 37, in = 96, out = 80;
  std::mt19937 generator(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bf16> x(tokens * in);
  std::vector<fp8_e4m3> w(out * in);  // as a Linear holds it: out x in
  std::vector<float> bias(out);
  for (auto& v : x) v = bf16(normal(generator));
  for (auto& v : w) v = fp8_e4m3(0.1f * normal(generator));
  for (auto& v : bias) v = 0.1f * normal(generator);

  // Pack W^T once (it stays fp8: one byte per weight), then run the layer.
  const auto weights = pack_b(transposed(view<const fp8_e4m3>(w.data(), out, in)));
  std::vector<bf16> y(tokens * out);
  matmul(view<const bf16>(x.data(), tokens, in), weights, view<bf16>(y.data(), tokens, out),
         {.activation = act::gelu_tanh}, bias);

  // The fp64 reference, and the worst error in bf16 ulp.
  std::vector<double> xd(x.size()), wt(in * out), bias_d(bias.begin(), bias.end()), yd(y.size());
  for (std::size_t i = 0; i < x.size(); ++i) xd[i] = x[i].to_double();
  for (std::size_t o = 0; o < out; ++o) {
    for (std::size_t i = 0; i < in; ++i) wt[i * out + o] = w[o * in + i].to_double();
  }
  reference::matmul(view<const double>(xd.data(), tokens, in), view<const double>(wt.data(), in, out),
                    view<double>(yd.data(), tokens, out), 1, 0, bias_d, act::gelu_tanh);
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::abs(yd[i]), 1e-30)) - 7);
    worst = std::max(worst, std::abs(y[i].to_double() - yd[i]) / ulp);
  }
  std::printf("linear %zux%zu -> %zu, bf16 x fp8_e4m3 + bias, gelu: worst error %.2f bf16 ulp\n",
              tokens, in, out, worst);
  if (worst > 1.0) {
    std::printf("FAILED: expected the correctly rounded result or its neighbour (<= 1 ulp)\n");
    return 1;
  }
  return 0;
}
