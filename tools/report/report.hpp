#pragma once
// The pieces every section of tilekern-report is built from: the run settings, a table that
// prints with aligned columns, a timing helper, deterministic inputs and error metrics against
// an fp64 reference. A section is a function from settings to a table (sections.hpp).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numbers>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tilekern/types/random.hpp"

namespace tilekern::report {

struct settings {
  bool quick = false;                 // small sizes and few runs, for tests
  std::optional<std::string> format;  // only rows for this format

  std::size_t elements() const { return quick ? std::size_t{64} << 10 : std::size_t{1} << 20; }
  int runs() const { return quick ? 3 : 9; }
  bool wants(std::string_view format_name) const { return !format || *format == format_name; }
};

enum class align { left, right };

struct column {
  std::string header;
  align alignment = align::right;
};

class table {
 public:
  table(std::string title, std::vector<column> columns)
      : title_(std::move(title)), columns_(std::move(columns)) {}

  void add_row(std::vector<std::string> cells) {
    if (cells.size() != columns_.size()) {
      throw std::logic_error("report table '" + title_ + "': a row of " +
                             std::to_string(cells.size()) + " cells for " +
                             std::to_string(columns_.size()) + " columns");
    }
    rows_.push_back(std::move(cells));
  }

  // A line printed under the table, e.g. how a column is measured.
  void add_note(std::string note) { notes_.push_back(std::move(note)); }

  void print(std::FILE* out) const {
    std::vector<std::size_t> widths;
    for (const column& c : columns_) widths.push_back(c.header.size());
    for (const auto& row : rows_) {
      for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
    }
    std::fprintf(out, "\n%s\n", title_.c_str());
    std::vector<std::string> headers;
    for (const column& c : columns_) headers.push_back(c.header);
    print_line(out, headers, widths);
    std::string rule;
    for (std::size_t i = 0; i < widths.size(); ++i) rule += std::string(widths[i], '-') + "  ";
    std::fprintf(out, "%s\n", rule.substr(0, rule.size() - 2).c_str());
    for (const auto& row : rows_) print_line(out, row, widths);
    for (const std::string& note : notes_) std::fprintf(out, "  %s\n", note.c_str());
  }

 private:
  void print_line(std::FILE* out, const std::vector<std::string>& cells,
                  const std::vector<std::size_t>& widths) const {
    std::string line;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::string padding(widths[i] - cells[i].size(), ' ');
      line += columns_[i].alignment == align::left ? cells[i] + padding : padding + cells[i];
      line += "  ";
    }
    line.erase(line.find_last_not_of(' ') + 1);
    std::fprintf(out, "%s\n", line.c_str());
  }

  std::string title_;
  std::vector<column> columns_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<std::string> notes_;
};

// printf into a string, for cells.
template <class... Arguments>
std::string cell(const char* format, Arguments... arguments) {
  char buffer[128];
  std::snprintf(buffer, sizeof buffer, format, arguments...);
  return buffer;
}

// Makes the compiler assume the memory at `pointer` is read, so timed work is not elided.
inline void keep(const void* pointer) {
  asm volatile("" : : "r"(pointer) : "memory");
}

// The median wall time in seconds of `runs` calls of body(), after one untimed warm-up call.
template <class Body>
double median_seconds(int runs, Body&& body) {
  body();
  std::vector<double> seconds;
  for (int run = 0; run < runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    body();
    const auto stop = std::chrono::steady_clock::now();
    seconds.push_back(std::chrono::duration<double>(stop - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

inline double giga_per_second(std::size_t count, double seconds) {
  return count / seconds * 1e-9;
}

// n samples of N(0, 1) as fp32, the same on every machine for a given seed: splitmix64 words
// through Box-Muller, in double, then rounded to fp32 (which hides any last-bit difference
// between libm implementations of log, cos and sin, short of a tie).
inline std::vector<float> normal_inputs(std::size_t n, std::uint64_t seed = 0) {
  std::vector<float> samples(n);
  std::uint64_t state = seed;
  const auto uniform = [&state] {  // in [0, 1), 53 bits: the splitmix64 sequence from seed
    const std::uint64_t word = random_key::splitmix64(state);
    state += 0x9e3779b97f4a7c15ull;
    return static_cast<double>(word >> 11) * 0x1p-53;
  };
  for (std::size_t i = 0; i < n; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform()));  // 1 - u is in (0, 1]
    const double angle = 2.0 * std::numbers::pi * uniform();
    samples[i] = static_cast<float>(radius * std::cos(angle));
    if (i + 1 < n) samples[i + 1] = static_cast<float>(radius * std::sin(angle));
  }
  return samples;
}

struct error_metrics {
  // max |result - reference| / |reference| over nonzero finite references with finite results.
  double max_relative = 0;
  // 10 log10(sum reference^2 / sum (reference - result)^2) over finite pairs; inf if exact.
  double sqnr_db = std::numeric_limits<double>::infinity();
  std::size_t overflows = 0;  // finite reference, infinite or NaN result
};

// `result` against `reference` (e.g. an fp64 reference kernel, or the inputs of a round trip),
// element by element, in double. Each element type must convert to double with static_cast.
template <class Reference, class Result>
error_metrics measure_error(std::span<const Reference> reference, std::span<const Result> result) {
  if (reference.size() != result.size()) throw std::logic_error("measure_error: sizes differ");
  error_metrics metrics;
  double signal = 0, noise = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const auto expected = static_cast<double>(reference[i]);
    const auto actual = static_cast<double>(result[i]);
    if (!std::isfinite(expected)) continue;
    if (!std::isfinite(actual)) {
      ++metrics.overflows;
      continue;
    }
    const double difference = actual - expected;
    signal += expected * expected;
    noise += difference * difference;
    if (expected != 0) {
      metrics.max_relative = std::max(metrics.max_relative, std::abs(difference / expected));
    }
  }
  if (noise > 0) metrics.sqnr_db = 10 * std::log10(signal / noise);
  return metrics;
}

}  // namespace tilekern::report
