// tilekern-fmt: inspect a number format, encode values into it and decode its codes.
#include <iostream>
#include <string>
#include <vector>

#include "fmt_tool/commands.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string> arguments(argv + 1, argv + argc);
  return tilekern::fmt_tool::run(arguments, std::cin, std::cout, std::cerr);
}
