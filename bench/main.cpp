// tilekern-bench: Google Benchmark's main, with the ISA path and the kernels' blocks of rows
// (row_block_bytes(), from the L2 size) in the report's context.
#include <benchmark/benchmark.h>

#include <string>

#include "tilekern/simd/isa.hpp"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("tilekern_isa", tilekern::describe_isa());
  benchmark::AddCustomContext("tilekern_row_block_bytes",
                              std::to_string(tilekern::row_block_bytes()) + " (L2 " +
                                  std::to_string(tilekern::l2_cache_bytes()) + ")");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
