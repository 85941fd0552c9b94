#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "fmt_tool/commands.hpp"

namespace fmt_tool = tilekern::fmt_tool;
using fmt_tool::usage_error;

namespace {

struct run_result {
  int status;
  std::string output;
  std::string errors;
};

run_result run(const std::vector<std::string>& arguments, const std::string& input = "") {
  std::istringstream in(input);
  std::ostringstream out, error;
  const int status = fmt_tool::run(arguments, in, out, error);
  return {status, out.str(), error.str()};
}

}  // namespace

TEST_CASE("tilekern-fmt: a decimal value is read exactly as a double") {
  CHECK(std::get<double>(fmt_tool::parse_value("0.1")) == 0.1);
  CHECK(std::get<double>(fmt_tool::parse_value("+3")) == 3.0);
  CHECK(std::get<double>(fmt_tool::parse_value("-1e-3")) == -1e-3);
  CHECK(std::get<double>(fmt_tool::parse_value("-inf")) == -INFINITY);
  CHECK(std::isnan(std::get<double>(fmt_tool::parse_value("nan"))));
  CHECK(std::get<double>(fmt_tool::parse_value("1e400")) == INFINITY);
  CHECK(std::get<double>(fmt_tool::parse_value("-1e-400")) == 0.0);
  CHECK(std::signbit(std::get<double>(fmt_tool::parse_value("-1e-400"))));
}

TEST_CASE("tilekern-fmt: 0x and 1 to 8 hex digits are the bits of an fp32") {
  CHECK(std::get<float>(fmt_tool::parse_value("0x3f800000")) == 1.0f);
  CHECK(std::get<float>(fmt_tool::parse_value("0X1")) == 0x1p-149f);
  CHECK(std::isnan(std::get<float>(fmt_tool::parse_value("0xffc00000"))));
  for (const char* text :
       {"0x", "0x123456789", "0x3f80000g", "-0x1", "0x1p3", "", "1.5x", "+-1", "1,5", " 1"}) {
    CAPTURE(text);
    CHECK_THROWS_AS(fmt_tool::parse_value(text), usage_error);
  }
}

TEST_CASE("tilekern-fmt: codes must fit the storage, padding zero") {
  CHECK(fmt_tool::parse_code<tilekern::fp8_e4m3>("0x7e") == 0x7e);
  CHECK(fmt_tool::parse_code<tilekern::fp8_e4m3>("126") == 0x7e);
  CHECK(fmt_tool::parse_code<tilekern::fp8_e4m3>("0b1111110") == 0x7e);
  CHECK(fmt_tool::parse_code<tilekern::tf32>("0x3f802000") == 0x3f802000u);
  CHECK_THROWS_WITH_AS(fmt_tool::parse_code<tilekern::fp8_e4m3>("0x100"),
                       "code '0x100' is too wide for fp8_e4m3 (8 bits)", usage_error);
  CHECK_THROWS_WITH_AS(fmt_tool::parse_code<tilekern::bf16>("0x10000"),
                       "code '0x10000' is too wide for bf16 (16 bits)", usage_error);
  CHECK_THROWS_AS(fmt_tool::parse_code<tilekern::tf32>("0x3f801000"), usage_error);
  CHECK_THROWS_AS(fmt_tool::parse_code<tilekern::tf32>("0x1ffffffff"), usage_error);
  CHECK_THROWS_AS(fmt_tool::parse_code<tilekern::bf16>("-1"), usage_error);
  CHECK_THROWS_AS(fmt_tool::parse_code<tilekern::bf16>("0x"), usage_error);
}

TEST_CASE("tilekern-fmt: the command line") {
  const auto line =
      fmt_tool::parse_command_line({"encode", "fp8_e5m2", "-1.5", "--round", "stochastic",
                                    "--seed=0x10", "-inf", "--stream", "3", "--saturate"});
  CHECK(line.command == "encode");
  CHECK(line.format == "fp8_e5m2");
  CHECK(line.operands == std::vector<std::string>{"-1.5", "-inf"});
  CHECK(line.cast.round == tilekern::rounding::stochastic);
  CHECK(line.cast.seed == 16);
  CHECK(line.cast.stream == 3);
  CHECK(line.cast.on_overflow == tilekern::overflow::saturate);
  CHECK(fmt_tool::parse_command_line({"info", "--help"}).help);
  CHECK_THROWS_WITH_AS(fmt_tool::parse_command_line({"encode", "bf16", "-x"}),
                       "unknown option '-x'", usage_error);
  // Looks like a number, so it is a (malformed) value rather than an unknown option.
  CHECK(fmt_tool::parse_command_line({"encode", "bf16", "-1.5.5"}).operands.size() == 1);
  CHECK_THROWS_WITH_AS(fmt_tool::parse_command_line({"decode", "bf16", "--round", "zero"}),
                       "option '--round' applies only to encode", usage_error);
}

TEST_CASE("tilekern-fmt: standard input lines, trimmed, blank ones skipped") {
  CHECK(fmt_tool::nonblank_lines(" 1 \n\n\t\r\n2\r\n3") == std::vector<std::string>{"1", "2", "3"});
  CHECK(fmt_tool::nonblank_lines("").empty());
}

TEST_CASE("tilekern-fmt: numbers print as the shortest decimal that reads back") {
  CHECK(fmt_tool::number_text(448.0) == "448");
  CHECK(fmt_tool::number_text(0x1p-16) == "1.52587890625e-05");
  CHECK(fmt_tool::number_text(-0.0) == "-0");
  CHECK(fmt_tool::number_text(-INFINITY) == "-inf");
  CHECK(fmt_tool::number_text(-NAN) == "-nan");
  CHECK(fmt_tool::code_text(0x7e, 8) == "0x7e");
  CHECK(fmt_tool::code_text(0x80, 16) == "0x0080");
}

TEST_CASE("tilekern-fmt: encode aligns its columns") {
  const run_result result = run({"encode", "fp8_e4m3fn", "464", "465", "0.015625"});
  CHECK(result.status == 0);
  CHECK(result.output == "     464 -> 0x7e 448\n     465 -> 0x7f nan\n0.015625 -> 0x08 0.015625\n");
  CHECK(result.errors.empty());
}

TEST_CASE("tilekern-fmt: stochastic rounding uses each value's position as its index") {
  const std::string values = "1.0625\n1.0625\n1.0625\n1.0625\n1.0625\n1.0625\n1.0625\n1.0625\n";
  const std::vector<std::string> arguments = {"encode",     "fp8_e4m3", "--round",
                                              "stochastic", "--seed",   "5"};
  const run_result from_input = run(arguments, values);
  std::string expected;
  const tilekern::cast_options options{.round = tilekern::rounding::stochastic, .seed = 5};
  for (std::uint64_t i = 0; i < 8; ++i) {
    const auto code = tilekern::fp8_e4m3::from(1.0625, options, i);
    expected += "1.0625 -> " + fmt_tool::code_text(code.bits(), 8) + " " +
                fmt_tool::number_text(code.to_double()) + "\n";
  }
  CHECK(from_input.output == expected);
}

TEST_CASE("tilekern-fmt: an error prints one line and nothing else") {
  const run_result result = run({"encode", "bf16", "1", "x"});
  CHECK(result.status != 0);
  CHECK(result.output.empty());
  CHECK(result.errors ==
        "tilekern-fmt: malformed value 'x' (expected a decimal number, inf, nan, "
        "or 0x and 1 to 8 hex digits of an fp32)\n");
  CHECK(run({"info", "fp8"}).errors.starts_with("tilekern-fmt: unknown format 'fp8' (known: bf16"));
  CHECK(run({}).status != 0);
}

TEST_CASE("tilekern-fmt: info for every format") {
  tilekern::for_each_format([]<class F>() {
    const run_result result = run({"info", tilekern::format_name<F>()});
    CAPTURE(result.output);
    CHECK(result.status == 0);
    CHECK(result.output.starts_with("format          " + tilekern::format_name<F>() + "\n"));
    CHECK(result.output.find("\nmax ") != std::string::npos);
  });
}
