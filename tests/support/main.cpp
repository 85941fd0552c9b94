#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "tilekern/simd/isa.hpp"

int main(int argc, char** argv) {
  std::printf("tilekern isa: %s\n", tilekern::describe_isa().c_str());
  doctest::Context context(argc, argv);
  return context.run();
}
