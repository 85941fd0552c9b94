// tilekern-report: what each number format costs and buys on this machine, section by section.
#include <cstdio>
#include <optional>
#include <string>

#include "report/sections.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/types/formats.hpp"

namespace {

constexpr const char* usage = R"(usage: tilekern-report [--quick] [--format NAME]

Prints the ISA path, then one table per section: memcpy throughput, and for every format and
rounding mode its range, precision, bulk conversion throughput and round-trip error.
  --quick        64 Ki elements and 3 timed runs instead of 1 Mi and 9 (for tests)
  --format NAME  only rows for this format
  -h, --help     this text
)";

std::string known_formats() {
  std::string names;
  tilekern::for_each_format([&]<class F>() { names += " " + tilekern::format_name<F>(); });
  return names;
}

// The settings, or nullopt after printing help or an error; `status` is then the exit status.
std::optional<tilekern::report::settings> parse(int argc, char** argv, int& status) {
  tilekern::report::settings options;
  const auto fail = [&](const std::string& message) {
    std::fprintf(stderr, "tilekern-report: %s (try --help)\n", message.c_str());
    status = 2;
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "-h" || argument == "--help") {
      std::fputs(usage, stdout);
      status = 0;
      return std::nullopt;
    }
    if (argument == "--quick") {
      options.quick = true;
    } else if (argument == "--format") {
      const bool known = i + 1 < argc && tilekern::visit_format(argv[i + 1], []<class F>() {});
      if (!known) return fail("--format needs one of" + known_formats());
      options.format = argv[++i];
    } else {
      return fail("unknown option '" + argument + "'");
    }
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  int status = 0;
  const auto options = parse(argc, argv, status);
  if (!options) return status;
  std::printf("tilekern-report %s\nmachine: %s; blocks of rows: %zu bytes (L2 %zu)\n",
              TILEKERN_VERSION, tilekern::describe_isa().c_str(), tilekern::row_block_bytes(),
              tilekern::l2_cache_bytes());
  std::printf("timing: median of %d runs after a warm-up, %zu elements\n", options->runs(),
              options->elements());
  for (const auto& section : tilekern::report::sections) section.build(*options).print(stdout);
  return 0;
}
