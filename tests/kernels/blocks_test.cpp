// The choices the normalisation and softmax kernels make about their rows: the size of their
// blocks of rows (row_block_bytes(), simd/isa.hpp: half of the machine's L2), which rows
// layernorm and rmsnorm take by rows on which processors (norm_row_passes), how far ahead the
// row passes prefetch, and from what size the kernels write with non-temporal stores. The bits
// must not depend on any of these: each kernel's test checks that with same_bits.hpp, where the
// kernels are compiled already.

#include <doctest/doctest.h>

#include <cstddef>
#include <fstream>
#include <string>

#include "kernels/same_bits.hpp"
#include "support/guarded.hpp"
#include "tilekern/engine/lanes.hpp"
#include "tilekern/kernels/rmsnorm.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/types/formats.hpp"

namespace tilekern {
namespace {

using test::row_passes_everywhere;
using test::stream_threshold_of;

// The value of the first line of /proc/cpuinfo that starts with `key`; "" without one.
std::string cpuinfo(const std::string& key) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const std::size_t start = line.find_first_not_of(" \t", line.find(':') + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

// Which rows layernorm and rmsnorm take by rows (norm_row_passes): on AMD processors neither
// layernorm's streamed y nor rows of one chunk of a format narrower than float; everywhere under
// row_passes_everywhere (so that same_bits_row_by_row, same_bits.hpp, compares the row passes there
// too); nowhere with set_row_passes(false).
TEST_CASE("the row passes' choice by vendor") {
  const bool amd = detected_cpu_features().amd;
  CHECK(detail::norm_row_passes(false, sizeof(float), 768, /*centred=*/true));
  CHECK(detail::norm_row_passes(false, sizeof(bf16), 2048, /*centred=*/true));
  CHECK(detail::norm_row_passes(false, sizeof(bf16), 768, /*centred=*/true) == !amd);
  CHECK(detail::norm_row_passes(false, sizeof(fp8_e4m3), 1024, /*centred=*/true) == !amd);
  CHECK(detail::norm_row_passes(true, sizeof(float), 4096, /*centred=*/true) == !amd);
  CHECK(detail::norm_row_passes(true, sizeof(float), 4096, /*centred=*/false));
  CHECK(detail::norm_row_passes(true, sizeof(bf16), 4096, /*centred=*/false));
  CHECK(detail::norm_row_passes(true, sizeof(bf16), 768, /*centred=*/false) == !amd);
  {
    const row_passes_everywhere on_any_vendor;
    CHECK(detail::norm_row_passes(false, sizeof(bf16), 768, /*centred=*/true));
    CHECK(detail::norm_row_passes(true, sizeof(float), 4096, /*centred=*/true));
    const test::row_passes_of off(false);
    CHECK_FALSE(detail::norm_row_passes(false, sizeof(float), 768, /*centred=*/true));
  }
  CHECK(detail::norm_row_passes(false, sizeof(bf16), 768, /*centred=*/true) == !amd);
}

// How far ahead the row passes prefetch (long_row_lead): two steps of rows of 8 KiB or more on AMD
// processors, else one.
TEST_CASE("the row passes' prefetch lead by vendor") {
  const bool amd = detected_cpu_features().amd;
  CHECK(detail::long_row_lead(std::size_t{8} << 10) == (amd ? 2 : 1));
  CHECK(detail::long_row_lead(std::size_t{64} << 10) == (amd ? 2 : 1));
  CHECK(detail::long_row_lead((std::size_t{8} << 10) - 1) == 1);
}

// The vendor and family that the kernels' choices read (detected_cpu_features) are those Linux
// reports, where it does.
TEST_CASE("the processor's vendor and family") {
  const std::string vendor = cpuinfo("vendor_id"), family = cpuinfo("cpu family");
  INFO("vendor_id: ", vendor, ", cpu family: ", family);
  if (!vendor.empty()) CHECK(detected_cpu_features().amd == (vendor == "AuthenticAMD"));
  if (!family.empty()) CHECK(std::to_string(detected_cpu_features().family) == family);
}

TEST_CASE("non-temporal stores by default from 16 MiB") {
  const std::size_t by_default = std::size_t{16} << 20;
  CHECK(stream_threshold() == by_default);
  {
    const stream_threshold_of every(0);
    CHECK(stream_threshold() == 0);
  }
  CHECK(stream_threshold() == by_default);
}

TEST_CASE("the blocks of rows: half of the L2, from 128 KiB to 1 MiB, or as set") {
  INFO("row_block_bytes() is ", row_block_bytes(), " (L2 ", l2_cache_bytes(), " bytes)");
  CHECK(row_block_bytes() >= (std::size_t{128} << 10));
  CHECK(row_block_bytes() <= (std::size_t{1} << 20));
  {
    const test::row_blocks_of blocks(0);
    CHECK(row_block_bytes() == 1);
  }
}

}  // namespace
}  // namespace tilekern
