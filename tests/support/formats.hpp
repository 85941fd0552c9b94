#pragma once
// The formats the tests instantiate their kernels for.
//
// Every named format (types/formats.hpp), or, when TILEKERN_TEST_FEWER_FORMATS is defined, three
// whose conversions take different code paths: bf16 (a shift in, vcvtneps2bf16 or the integer
// encoder out), fp16 (F16C both ways) and fp8_e4m3 (the general encoder). The sanitize and avx2
// presets define it (CMakePresets.json): they rebuild every test, and the engines' templates
// instantiated for every format make that build take most of CI's time. The engine tests define
// it in every build (tests/CMakeLists.txt) and take every named format through one operation
// each; the release preset builds and runs the kernel tests for every format on every ISA path.

#include <tuple>

#include "tilekern/types/formats.hpp"

namespace tilekern::test {

#if defined(TILEKERN_TEST_FEWER_FORMATS)
using test_formats = std::tuple<bf16, fp16, fp8_e4m3>;
#else
using test_formats = named_formats;
#endif

// visitor.template operator()<F>() for each format of test_formats, in order.
template <class Visitor>
void for_each_test_format(Visitor&& visitor) {
  [&]<class... F>(std::tuple<F...>*) {
    (visitor.template operator()<F>(), ...);
  }(static_cast<test_formats*>(nullptr));
}

}  // namespace tilekern::test
