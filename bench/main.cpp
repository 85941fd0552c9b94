// tilekern-bench: Google Benchmark's main, with the ISA path in the report's context.
#include <benchmark/benchmark.h>

#include "tilekern/simd/isa.hpp"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("tilekern_isa", tilekern::describe_isa());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
