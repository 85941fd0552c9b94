// tile/tile.hpp: tiles with a compile-time shape, zero-initialised, 64-byte aligned wherever they
// live, row-major, with row and column vectors, fp32 accumulators and views of themselves.

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <vector>

#include "tilekern/tile/tile.hpp"
#include "tilekern/types/minifloat.hpp"

namespace tilekern {
namespace {

using t35 = tile<float, 3, 5>;
static_assert(t35::rows == 3 && t35::cols == 5 && t35::size == 15);
static_assert(alignof(t35) == 64);
static_assert(sizeof(t35) % 64 == 0 && sizeof(t35) >= 15 * sizeof(float));
static_assert(alignof(tile<bf16, 1, 1>) == 64);
static_assert(alignof(tile<fp8_e4m3, 7, 3>) == 64);
static_assert(sizeof(tile<float, 16, 16>) == 1024);  // no padding beyond the alignment
static_assert(std::is_same_v<row_vector<float, 8>, tile<float, 1, 8>>);
static_assert(std::is_same_v<column_vector<bf16, 8>, tile<bf16, 8, 1>>);
static_assert(std::is_same_v<accum<4, 16>, tile<float, 4, 16>>);
static_assert(std::is_same_v<decltype(std::declval<t35&>().row(0)), std::span<float, 5>>);
static_assert(
    std::is_same_v<decltype(std::declval<const t35&>().row(0)), std::span<const float, 5>>);
static_assert(std::is_same_v<decltype(std::declval<t35&>().view()), view<float>>);
static_assert(std::is_same_v<decltype(std::declval<const t35&>().view()), view<const float>>);

bool aligned64(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 64 == 0;
}

TEST_CASE("tile: zero-initialised, even over dirty memory") {
  alignas(64) unsigned char storage[sizeof(t35)];
  std::memset(storage, 0xff, sizeof storage);
  const t35* t = new (storage) t35;  // default-initialised: the member initialiser zeroes it
  for (float v : t->values) CHECK(v == 0.0f);
  const tile<bf16, 2, 3> b;
  for (const bf16& v : b.values) CHECK(v.bits() == 0);
}

TEST_CASE("tile: storage is 64-byte aligned on the stack, on the heap and in vectors") {
  const tile<float, 1, 3> a;
  const tile<fp8_e5m2, 3, 1> b;
  CHECK(aligned64(a.data()));
  CHECK(aligned64(b.data()));
  const auto heap = std::make_unique<tile<float, 5, 7>>();
  CHECK(aligned64(heap->data()));
  std::vector<tile<bf16, 3, 3>> many(9);
  for (const auto& t : many) CHECK(aligned64(t.data()));
  struct holder {
    char c;
    accum<2, 2> acc;
  };
  const holder h{};
  CHECK(aligned64(h.acc.data()));
}

TEST_CASE("tile: row-major elements, rows, and a view of itself") {
  t35 t;
  for (std::size_t i = 0; i < t35::size; ++i) t.values[i] = static_cast<float>(i);
  CHECK(t.data() == t.values);
  for (std::size_t r = 0; r < 3; ++r) {
    const std::span<float, 5> row = t.row(r);
    CHECK(row.data() == t.values + r * 5);
    for (std::size_t c = 0; c < 5; ++c) {
      CHECK(t(r, c) == static_cast<float>(r * 5 + c));
      CHECK(&t(r, c) == &row[c]);
    }
  }
  t(2, 4) = -1.0f;
  CHECK(t.values[14] == -1.0f);
  t.row(1)[2] = -2.0f;
  CHECK(t.values[7] == -2.0f);

  const t35& ct = t;
  CHECK(ct(1, 2) == -2.0f);
  CHECK(ct.row(2).data() == t.values + 10);
  CHECK(ct.data() == t.values);

  const view<float> v = t.view();
  CHECK(v.data() == t.values);
  CHECK(v.rows() == 3);
  CHECK(v.cols() == 5);
  CHECK(v.stride() == 5);
  CHECK(v.contiguous());
  CHECK(&v(2, 4) == &t(2, 4));
  const view<const float> cv = ct.view();
  CHECK(cv.data() == t.values);
  CHECK(cv(1, 2) == -2.0f);
}

TEST_CASE("tile: row and column vectors, and accumulators") {
  row_vector<float, 6> r;
  column_vector<float, 6> c;
  for (std::size_t i = 0; i < 6; ++i) {
    r(0, i) = static_cast<float>(i);
    c(i, 0) = static_cast<float>(i);
  }
  CHECK(r.row(0).size() == 6);
  CHECK(r.view().rows() == 1);
  CHECK(r.view().cols() == 6);
  CHECK(c.view().rows() == 6);
  CHECK(c.view().cols() == 1);
  CHECK(c.view().stride() == 1);
  CHECK(c.view().contiguous());
  CHECK(std::memcmp(r.values, c.values, sizeof(float) * 6) == 0);  // both six in a row in memory
  accum<2, 3> acc;
  acc(1, 2) += 0.5f;
  acc(1, 2) += 0.25f;
  CHECK(acc(1, 2) == 0.75f);
  CHECK(acc(0, 0) == 0.0f);
  // Copies are deep.
  accum<2, 3> copy = acc;
  copy(1, 2) = 0.0f;
  CHECK(acc(1, 2) == 0.75f);
}

}  // namespace
}  // namespace tilekern
