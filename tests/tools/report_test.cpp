#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "report/report.hpp"

namespace report = tilekern::report;

namespace {

std::string printed(const report::table& table) {
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* stream = open_memstream(&buffer, &size);
  table.print(stream);
  std::fclose(stream);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

}  // namespace

TEST_CASE("report: a table aligns its columns") {
  report::table table("title", {{"name", report::align::left}, {"value"}});
  table.add_row({"a", "1.5"});
  table.add_row({"longer", "10"});
  table.add_note("a note");
  CHECK(printed(table) ==
        "\ntitle\nname    value\n------  -----\na         1.5\nlonger     10\n  a note\n");
  CHECK_THROWS_AS(table.add_row({"too few"}), std::logic_error);
}

TEST_CASE("report: error metrics against a reference") {
  const std::vector<double> reference = {1, -2, 0, 4, 5};
  const std::vector<float> result = {1.5f, -2, 0.25f, 4, INFINITY};
  const auto metrics =
      report::measure_error(std::span<const double>(reference), std::span<const float>(result));
  CHECK(metrics.max_relative == 0.5);
  CHECK(metrics.overflows == 1);
  // signal 1 + 4 + 0 + 16 = 21, noise 0.25 + 0.0625
  CHECK(metrics.sqnr_db == doctest::Approx(10 * std::log10(21 / 0.3125)));
  const auto exact =
      report::measure_error(std::span<const double>(reference), std::span<const double>(reference));
  CHECK(exact.max_relative == 0);
  CHECK(std::isinf(exact.sqnr_db));
}

TEST_CASE("report: the normal inputs are deterministic and N(0, 1)") {
  const std::vector<float> samples = report::normal_inputs(1 << 16);
  CHECK(samples == report::normal_inputs(1 << 16));
  CHECK(report::normal_inputs(3) == std::vector<float>(samples.begin(), samples.begin() + 3));
  CHECK(samples != report::normal_inputs(1 << 16, 1));
  double sum = 0, squares = 0;
  for (float x : samples) {
    sum += x;
    squares += double{x} * x;
  }
  const auto count = static_cast<double>(samples.size());
  const double mean = sum / count;
  CHECK(std::abs(mean) < 5 / std::sqrt(count));
  CHECK(squares / count - mean * mean == doctest::Approx(1).epsilon(0.03));
}

TEST_CASE("report: median_seconds warms up, then times every run") {
  int calls = 0;
  const double seconds = report::median_seconds(5, [&] { ++calls; });
  CHECK(calls == 6);
  CHECK(seconds >= 0);
}
