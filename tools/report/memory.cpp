// memcpy throughput, the scale against which the other sections' throughputs read.
#include <cstring>
#include <vector>

#include "report/sections.hpp"

namespace tilekern::report {

table memory_section(const settings& options) {
  const std::size_t count = options.elements();
  const std::vector<float> from(count, 1.0f);
  std::vector<float> to(count);
  const double seconds = median_seconds(options.runs(), [&] {
    std::memcpy(to.data(), from.data(), count * sizeof(float));
    keep(to.data());
  });
  table result("memory", {{"operation", align::left}, {"elements"}, {"GB/s"}, {"G floats/s"}});
  result.add_row({"memcpy fp32", std::to_string(count),
                  cell("%.1f", giga_per_second(count * sizeof(float), seconds)),
                  cell("%.2f", giga_per_second(count, seconds))});
  result.add_note("GB/s counts the bytes copied (each is read once and written once).");
  return result;
}

}  // namespace tilekern::report
