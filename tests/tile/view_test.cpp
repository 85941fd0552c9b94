// tile/view.hpp: strided views over memory the caller owns; contiguous ranges as one-row views;
// view<T> as view<const T>; stride < cols rejected with a shape_error naming both sizes.

#include <doctest/doctest.h>

#include <array>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "support/guarded.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/minifloat.hpp"

namespace tilekern {
namespace {

// Conversions: a view of T is a view of const T, never the reverse; const ranges give views of
// const; a view is not built from a range of another element type.
static_assert(std::is_convertible_v<view<float>, view<const float>>);
static_assert(!std::is_convertible_v<view<const float>, view<float>>);
static_assert(!std::is_constructible_v<view<float>, view<const float>>);
static_assert(std::is_convertible_v<std::vector<float>&, view<float>>);
static_assert(std::is_convertible_v<std::vector<float>&, view<const float>>);
static_assert(std::is_convertible_v<const std::vector<float>&, view<const float>>);
static_assert(!std::is_constructible_v<view<float>, const std::vector<float>&>);
static_assert(!std::is_constructible_v<view<float>, std::vector<double>&>);
static_assert(!std::is_constructible_v<view<bf16>, std::vector<fp16>&>);
static_assert(std::is_same_v<view<const bf16>::element_type, const bf16>);
static_assert(
    std::is_same_v<decltype(std::declval<view<const float>>().row(0)), std::span<const float>>);
static_assert(std::is_same_v<decltype(std::declval<view<float>>()(0, 0)), float&>);
static_assert(std::is_same_v<decltype(std::declval<view<const float>>()(0, 0)), const float&>);
// Deduction from ranges.
static_assert(std::is_same_v<decltype(view(std::declval<std::vector<float>&>())), view<float>>);
static_assert(
    std::is_same_v<decltype(view(std::declval<const std::vector<float>&>())), view<const float>>);
static_assert(
    std::is_same_v<decltype(view(std::declval<std::span<const bf16>>())), view<const bf16>>);
static_assert(std::is_same_v<decltype(view(std::declval<std::array<fp16, 4>&>())), view<fp16>>);

TEST_CASE("view: a default view is empty") {
  const view<float> v;
  CHECK(v.data() == nullptr);
  CHECK(v.rows() == 0);
  CHECK(v.cols() == 0);
  CHECK(v.size() == 0);
  CHECK(v.empty());
}

TEST_CASE("view: a contiguous range is one row") {
  std::vector<float> x(7);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const view<float> v = x;
  CHECK(v.data() == x.data());
  CHECK(v.rows() == 1);
  CHECK(v.cols() == 7);
  CHECK(v.stride() == 7);
  CHECK(v.size() == 7);
  CHECK_FALSE(v.empty());
  CHECK(v.contiguous());
  CHECK(v.row(0).data() == x.data());
  CHECK(v.row(0).size() == 7);
  CHECK(v(0, 3) == 3.0f);

  const std::vector<bf16> c(5, bf16::from(2.0));
  const view cv(c);  // deduces view<const bf16>
  CHECK(cv.data() == c.data());
  CHECK(cv.cols() == 5);
  CHECK(cv(0, 4).bits() == bf16::from(2.0).bits());

  std::array<fp16, 3> a{};
  const view av(a);
  CHECK(av.data() == a.data());
  CHECK(av.cols() == 3);

  std::vector<float> none;
  const view<const float> ev = none;
  CHECK(ev.rows() == 1);
  CHECK(ev.cols() == 0);
  CHECK(ev.empty());
  CHECK(ev.contiguous());
}

TEST_CASE("view: rows, elements and writes through a strided view") {
  // 3 x 4 with stride 6, the last row ending at a guard page.
  test::guarded_buffer<float> buffer(2 * 6 + 4);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i);
  const view<float> v(buffer.data(), 3, 4, 6);
  CHECK(v.rows() == 3);
  CHECK(v.cols() == 4);
  CHECK(v.stride() == 6);
  CHECK(v.size() == 12);
  CHECK_FALSE(v.contiguous());
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(v.row(r).data() == buffer.data() + r * 6);
    CHECK(v.row(r).size() == 4);
    for (std::size_t c = 0; c < 4; ++c) {
      CHECK(&v(r, c) == buffer.data() + r * 6 + c);
      CHECK(v(r, c) == static_cast<float>(r * 6 + c));
    }
  }
  v(2, 3) = -1.0f;  // the last element of the buffer
  CHECK(buffer[15] == -1.0f);
  v.row(1)[0] = -2.0f;
  CHECK(buffer[6] == -2.0f);

  // As a view of const: the same elements.
  const view<const float> cv = v;
  CHECK(cv.data() == v.data());
  CHECK(cv.rows() == 3);
  CHECK(cv.cols() == 4);
  CHECK(cv.stride() == 6);
  CHECK(cv(1, 0) == -2.0f);

  // Without a stride: contiguous rows.
  const view<float> dense(buffer.data(), 4, 4);
  CHECK(dense.stride() == 4);
  CHECK(dense.contiguous());
  CHECK(&dense(3, 3) == buffer.data() + 15);
}

TEST_CASE("view: contiguous() means no gaps between rows") {
  std::vector<float> x(64);
  CHECK(view<float>(x.data(), 4, 8, 8).contiguous());
  CHECK_FALSE(view<float>(x.data(), 4, 8, 9).contiguous());
  CHECK(view<float>(x.data(), 1, 8, 9).contiguous());  // one row: no gap inside it
  CHECK(view<float>(x.data(), 0, 8, 9).contiguous());
  CHECK(view<float>(x.data(), 3, 0, 0).empty());
}

TEST_CASE("view: stride less than the row length is a shape_error") {
  std::vector<float> x(64);
  CHECK_THROWS_WITH_AS(view<float>(x.data(), 2, 5, 3),
                       "tilekern::view: stride 3 is less than the row length 5", shape_error);
  CHECK_THROWS_AS(view<const float>(x.data(), 8, 8, 7), std::invalid_argument);
  CHECK_THROWS_WITH_AS(view<bf16>(nullptr, 3, 9, 0), doctest::Contains("stride 0"), shape_error);
  CHECK_NOTHROW(view<float>(x.data(), 2, 5, 5));
  CHECK_NOTHROW(view<float>(x.data(), 2, 0, 0));
}

}  // namespace
}  // namespace tilekern
