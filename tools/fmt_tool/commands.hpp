#pragma once
// tilekern-fmt's commands (info, encode, decode) and its entry point, run(), which takes the
// streams as arguments so that tests can drive it.

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <istream>
#include <iterator>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "fmt_tool/parse.hpp"

namespace tilekern::fmt_tool {

inline constexpr const char* usage_text = R"(usage: tilekern-fmt info FORMAT
       tilekern-fmt encode FORMAT [options] [VALUE...]
       tilekern-fmt decode FORMAT [CODE...]

FORMAT is one of %FORMATS%.

info    prints the format's layout, bias, special values, range and precision.
encode  converts each VALUE to FORMAT: a decimal number (read exactly as a double and rounded
        once), inf, -inf, nan, or the bits of an fp32 written 0x and 1 to 8 hex digits.
decode  prints the value of each CODE (0x hex, 0b binary or decimal, as stored: tf32 codes are
        fp32 bit patterns whose low 13 bits are zero).
With no VALUE or CODE, they are read from standard input, one per line (blank lines skipped).

options (encode only):
  --round nearest|zero|stochastic   rounding (default nearest, ties to even)
  --seed S, --stream T              stochastic rounding's random bits; the i-th value of the
                                    run (from 0, standard input included) uses index i
  --saturate                        overflow to +-max instead of inf (or NaN for fp8_e4m3fn)
  -h, --help                        this text

output: one line per value, columns aligned (values right-aligned, codes in hex as wide as the
storage); numbers print as the shortest decimal that reads back as the same value, and nan,
-nan, inf, -inf as such.
  encode:  VALUE -> CODE DECODED     e.g.  465 -> 0x7f nan
  decode:  CODE = VALUE              e.g.  0x7e = 448
  info:    NAME  VALUE               one property per line
errors: one line on standard error, exit status 2.
)";

inline std::string usage() {
  std::string text = usage_text;
  const std::string placeholder = "%FORMATS%";
  return text.replace(text.find(placeholder), placeholder.size(), known_formats());
}

// The shortest decimal that reads back as x: exact for every value of a format with at most 17
// significant digits, and unambiguous for the rest.
inline std::string number_text(double x) {
  if (std::isnan(x)) return std::signbit(x) ? "-nan" : "nan";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, x);
  return std::string(buffer, result.ptr);
}

// A stored code in hex, as wide as the storage: 0x7e, 0x3f80, 0x3f800000.
inline std::string code_text(std::uint32_t bits, int storage_bits) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%0*x", storage_bits / 4, static_cast<unsigned>(bits));
  return buffer;
}

// The stored form of a code without sign or padding, with the sign `negative`.
template <minifloat_format F>
std::string stored(std::uint32_t magnitude, bool negative = false) {
  return code_text(F::from_code(magnitude | (negative ? F::sign_code : 0)).bits(), F::storage_bits);
}

template <minifloat_format F>
std::string power_of_two_row(F x) {
  const double value = x.to_double();
  return number_text(value) + " = 2^" + std::to_string(std::ilogb(value)) + " (" +
         code_text(x.bits(), F::storage_bits) + ")";
}

template <minifloat_format F>
std::string nan_row() {
  if (!F::has_infinity) return stored<F>(F::nan_code) + ", " + stored<F>(F::nan_code, true);
  const std::string first = stored<F>(F::infinity_code + 1), last = stored<F>(F::magnitude_mask);
  return first + ".." + last + ", " + stored<F>(F::infinity_code + 1, true) + ".." +
         stored<F>(F::magnitude_mask, true) + " (encode gives " + stored<F>(F::nan_code) + ")";
}

template <minifloat_format F>
std::vector<std::pair<std::string, std::string>> info_rows() {
  using limits = std::numeric_limits<F>;
  const auto text = [](auto number) { return std::to_string(number); };
  const double decimal_digits = (F::mantissa_bits + 1) * std::log10(2.0);
  char digits[64];
  std::snprintf(digits, sizeof digits, "%.2f (digits10 %d, max_digits10 %d)", decimal_digits,
                limits::digits10, limits::max_digits10);
  return {
      {"format", format_name<F>()},
      {"bits", text(F::code_bits) + " = 1 sign + " + text(F::exponent_bits) + " exponent + " +
                   text(F::mantissa_bits) + " mantissa; storage " + text(F::storage_bits) +
                   ", padding " + text(F::padding_bits) +
                   (F::padding_bits > 0 ? " (the low bits, zero)" : "")},
      {"bias", text(F::bias) + " (normal exponents " + text(F::min_exponent) + ".." +
                   text(F::max_exponent) + ")"},
      {"specials", F::has_infinity ? "ieee (all-ones exponent: inf or NaN)"
                                   : "fn (no inf; NaN only with all-ones exponent and mantissa)"},
      {"inf", F::has_infinity
                  ? stored<F>(F::infinity_code) + ", -inf " + stored<F>(F::infinity_code, true)
                  : "none (overflow gives NaN, or max with --saturate)"},
      {"nan", nan_row<F>()},
      {"max", number_text(limits::max().to_double()) + " (" + stored<F>(F::max_code) + ")"},
      {"min normal", power_of_two_row(limits::min())},
      {"min subnormal", power_of_two_row(limits::denorm_min())},
      {"epsilon", power_of_two_row(limits::epsilon())},
      {"decimal digits", digits},
  };
}

// Lines of two columns, the first padded to the widest, or right-aligned to it.
inline void print_columns(std::ostream& out,
                          const std::vector<std::pair<std::string, std::string>>& rows,
                          const std::string& separator, bool right_align) {
  std::size_t width = 0;
  for (const auto& row : rows) width = std::max(width, row.first.size());
  for (const auto& [left, right] : rows) {
    const std::string padding(width - left.size(), ' ');
    out << (right_align ? padding + left : left + padding) << separator << right << '\n';
  }
}

template <minifloat_format F>
void encode(const command_line& line, const std::vector<std::string>& values, std::ostream& out) {
  std::vector<std::pair<std::string, std::string>> rows;
  std::uint64_t index = 0;  // stochastic rounding's element index: the value's position
  for (const std::string& text : values) {
    const F code =
        std::visit([&](auto x) { return F::from(x, line.cast, index); }, parse_value(text));
    ++index;
    rows.emplace_back(
        text, code_text(code.bits(), F::storage_bits) + " " + number_text(code.to_double()));
  }
  print_columns(out, rows, " -> ", true);
}

template <minifloat_format F>
void decode(const std::vector<std::string>& codes, std::ostream& out) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const std::string& text : codes) {
    const F code = F::from_bits(parse_code<F>(text));
    rows.emplace_back(code_text(code.bits(), F::storage_bits), number_text(code.to_double()));
  }
  print_columns(out, rows, " = ", false);
}

// `arguments` excludes the program name. Returns the exit status.
inline int run(const std::vector<std::string>& arguments, std::istream& in, std::ostream& out,
               std::ostream& error) {
  try {
    if (arguments.empty()) throw usage_error("missing command (try --help)");
    const command_line line = parse_command_line(arguments);
    if (line.help) {
      out << usage();
      return 0;
    }
    std::vector<std::string> operands = line.operands;
    if (operands.empty() && line.command != "info") {
      operands = nonblank_lines(std::string(std::istreambuf_iterator<char>(in), {}));
    }
    visit_format(line.format, [&]<class F>() {
      if (line.command == "info") print_columns(out, info_rows<F>(), "  ", false);
      if (line.command == "encode") encode<F>(line, operands, out);
      if (line.command == "decode") decode<F>(operands, out);
    });
    return 0;
  } catch (const usage_error& problem) {
    error << "tilekern-fmt: " << problem.what() << '\n';
    return 2;
  }
}

}  // namespace tilekern::fmt_tool
