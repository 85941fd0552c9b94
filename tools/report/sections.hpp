#pragma once
// The sections of tilekern-report, in the order they print. Adding one (matmul, layernorm,
// softmax, attention, a custom operator) takes a function `table name_section(const settings&)`
// in its own .cpp here, built from report.hpp's pieces, and one line in `sections` below.

#include <string_view>

#include "report/report.hpp"

namespace tilekern::report {

table memory_section(const settings& options);
table conversion_section(const settings& options);
table gpsimd_section(const settings& options);
table normalization_section(const settings& options);
table matmul_section(const settings& options);
table attention_section(const settings& options);

struct section {
  std::string_view name;
  table (*build)(const settings& options);
};

inline constexpr section sections[] = {
    {"memory", memory_section},                // memcpy, for scale
    {"conversion", conversion_section},        // every format and rounding mode
    {"gpsimd", gpsimd_section},                // custom operators
    {"normalization", normalization_section},  // vector and scalar engine kernels
    {"matmul", matmul_section},                // the tensor engine
    {"attention", attention_section},          // flash attention, all three engines
};

}  // namespace tilekern::report
