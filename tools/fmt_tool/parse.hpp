#pragma once
// Parsing for tilekern-fmt: the command line, input values and codes. Nothing here prints; every
// error is a usage_error whose message names the bad argument.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <variant>
#include <vector>

#include "tilekern/types/formats.hpp"

namespace tilekern::fmt_tool {

class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

inline std::string known_formats() {
  std::string names;
  for_each_format([&]<class F>() { names += (names.empty() ? "" : ", ") + format_name<F>(); });
  return names;
}

inline bool is_known_format(std::string_view name) {
  return visit_format(name, []<class F>() {});
}

inline void check_format(std::string_view name) {
  if (!is_known_format(name)) {
    throw usage_error("unknown format " + quoted(name) + " (known: " + known_formats() + ")");
  }
}

// An unsigned integer written in `base`, all of `digits`; nullopt if malformed or too large.
inline std::optional<std::uint64_t> parse_digits(std::string_view digits, int base) {
  std::uint64_t result = 0;
  const char* end = digits.data() + digits.size();
  const auto [stop, error] = std::from_chars(digits.data(), end, result, base);
  if (digits.empty() || error != std::errc() || stop != end) return std::nullopt;
  return result;
}

inline bool has_hex_prefix(std::string_view text) {
  return text.starts_with("0x") || text.starts_with("0X");
}

// A number to encode: an fp32 bit pattern (float) or a decimal number (double), each converted
// to the format directly, so a decimal is rounded once.
using value = std::variant<float, double>;

// A decimal number as the nearest double (inf, nan and their negatives included), or
// "0x" followed by 1 to 8 hex digits: the bits of an fp32. nullopt if neither.
inline std::optional<value> try_parse_value(std::string_view text) {
  if (has_hex_prefix(text)) {
    const std::string_view digits = text.substr(2);
    if (digits.size() > 8) return std::nullopt;
    const auto bits = parse_digits(digits, 16);
    if (!bits) return std::nullopt;
    return std::bit_cast<float>(static_cast<std::uint32_t>(*bits));
  }
  if (text.starts_with('+') && !text.starts_with("+-")) text.remove_prefix(1);
  double number = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, number);
  if (text.empty() || stop != end || error == std::errc::invalid_argument) return std::nullopt;
  // from_chars leaves a value beyond double's range unset; strtod rounds it (to inf or to a
  // subnormal or zero), which is the double the format would round it through anyway.
  if (error == std::errc::result_out_of_range)
    return std::strtod(std::string(text).c_str(), nullptr);
  return number;
}

inline value parse_value(std::string_view text) {
  if (auto result = try_parse_value(text)) return *result;
  throw usage_error("malformed value " + quoted(text) +
                    " (expected a decimal number, inf, nan, or 0x and 1 to 8 hex digits of an "
                    "fp32)");
}

// A code of F as stored (tf32: the fp32 bit pattern): 0x hex, 0b binary or decimal. It must fit
// the storage, and its padding bits must be zero.
template <minifloat_format F>
typename F::storage_type parse_code(std::string_view text) {
  std::optional<std::uint64_t> code;
  if (has_hex_prefix(text)) {
    code = parse_digits(text.substr(2), 16);
  } else if (text.starts_with("0b") || text.starts_with("0B")) {
    code = parse_digits(text.substr(2), 2);
  } else {
    code = parse_digits(text, 10);
  }
  const std::string name = format_name<F>();
  if (!code) {
    throw usage_error("malformed code " + quoted(text) +
                      " (expected 0x hex, 0b binary or decimal)");
  }
  if ((*code >> F::storage_bits) != 0) {
    throw usage_error("code " + quoted(text) + " is too wide for " + name + " (" +
                      std::to_string(F::storage_bits) + " bits)");
  }
  if ((*code & ((1u << F::padding_bits) - 1)) != 0) {
    throw usage_error("code " + quoted(text) + " has nonzero padding bits (the low " +
                      std::to_string(F::padding_bits) + " bits of " + name + " are zero)");
  }
  return static_cast<typename F::storage_type>(*code);
}

inline rounding parse_rounding(std::string_view text) {
  for (rounding mode : {rounding::nearest_even, rounding::toward_zero, rounding::stochastic}) {
    if (name(mode) == text) return mode;
  }
  throw usage_error("unknown rounding " + quoted(text) + " (known: nearest, zero, stochastic)");
}

inline std::uint64_t parse_unsigned(std::string_view option, std::string_view text) {
  const auto number =
      has_hex_prefix(text) ? parse_digits(text.substr(2), 16) : parse_digits(text, 10);
  if (!number) {
    throw usage_error("malformed " + std::string(option) + " " + quoted(text) +
                      " (expected a non-negative integer)");
  }
  return *number;
}

struct command_line {
  bool help = false;
  std::string command;  // info, encode or decode
  std::string format;
  cast_options cast;
  std::vector<std::string> operands;  // values or codes; none: read them from standard input
  std::string encode_option;          // the first option given that only encode takes
};

// An argument that starts with '-' is an option, unless it is a number ("-inf") or looks like one
// ("-1.5", "-.5x": a malformed value).
inline bool is_option(std::string_view argument) {
  if (argument.size() < 2 || argument[0] != '-') return false;
  const char next = argument[1];
  return !(next == '.' || (next >= '0' && next <= '9')) && !try_parse_value(argument);
}

// Applies option `argument` (its value, if it takes one, is `--name=value` or the next argument).
inline void apply_option(command_line& line, std::string_view argument,
                         const std::vector<std::string>& arguments, std::size_t& i) {
  if (argument == "-h" || argument == "--help") {
    line.help = true;
    return;
  }
  std::string_view option = argument;
  std::optional<std::string_view> attached;
  if (const auto equals = argument.find('='); equals != std::string_view::npos) {
    option = argument.substr(0, equals);
    attached = argument.substr(equals + 1);
  }
  const bool takes_value = option == "--round" || option == "--seed" || option == "--stream";
  if (!takes_value && option != "--saturate")
    throw usage_error("unknown option " + quoted(argument));
  if (line.encode_option.empty()) line.encode_option = option;
  if (!takes_value) {
    if (attached) throw usage_error("option " + quoted(option) + " takes no value");
    line.cast.on_overflow = overflow::saturate;
    return;
  }
  if (!attached && i + 1 >= arguments.size()) {
    throw usage_error("option " + quoted(option) + " needs a value");
  }
  const std::string_view text = attached ? *attached : std::string_view(arguments[++i]);
  if (option == "--round") line.cast.round = parse_rounding(text);
  if (option == "--seed") line.cast.seed = parse_unsigned(option, text);
  if (option == "--stream") line.cast.stream = parse_unsigned(option, text);
}

// `arguments` excludes the program name.
inline command_line parse_command_line(const std::vector<std::string>& arguments) {
  command_line line;
  for (std::size_t i = 0; i < arguments.size() && !line.help; ++i) {
    const std::string& argument = arguments[i];
    if (is_option(argument)) {
      apply_option(line, argument, arguments, i);
    } else if (line.command.empty()) {
      if (argument != "info" && argument != "encode" && argument != "decode") {
        throw usage_error("unknown command " + quoted(argument) + " (known: info, encode, decode)");
      }
      line.command = argument;
    } else if (line.format.empty()) {
      check_format(argument);
      line.format = argument;
    } else {
      line.operands.push_back(argument);
    }
  }
  if (line.help) return line;
  if (line.command.empty()) throw usage_error("missing command (info, encode or decode)");
  if (line.format.empty()) throw usage_error("missing FORMAT (one of " + known_formats() + ")");
  if (line.command != "encode" && !line.encode_option.empty()) {
    throw usage_error("option " + quoted(line.encode_option) + " applies only to encode");
  }
  if (line.command == "info" && !line.operands.empty()) {
    throw usage_error("info takes no values, got " + quoted(line.operands.front()));
  }
  return line;
}

// Non-blank lines without surrounding whitespace.
inline std::vector<std::string> nonblank_lines(std::string_view text) {
  std::vector<std::string> lines;
  constexpr std::string_view blanks = " \t\r\f\v";
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    const std::size_t first = line.find_first_not_of(blanks);
    if (first == std::string_view::npos) continue;
    line = line.substr(first, line.find_last_not_of(blanks) - first + 1);
    lines.emplace_back(line);
  }
  return lines;
}

}  // namespace tilekern::fmt_tool
