#include <doctest/doctest.h>

#include "tilekern/types/formats.hpp"

TEST_CASE("smoke: e4m3fn rounds first, then checks overflow") {
  using tilekern::fp8_e4m3fn;
  CHECK(fp8_e4m3fn(464.0f).to_float() == 448.0f);
  CHECK(fp8_e4m3fn(465.0f).is_nan());
}
