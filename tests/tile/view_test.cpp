// tile/view.hpp: strided views over memory the caller owns; contiguous ranges as one-row views;
// view<T> as view<const T>; stride < cols rejected with a shape_error naming both sizes;
// transposed views (transposed(view), transposed(tile)); heads views (batch x heads matrices,
// contiguous, strided, broadcast by zero strides).

#include <doctest/doctest.h>

#include <array>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "support/guarded.hpp"
#include "tilekern/tile/tile.hpp"
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

// Transposed views: of T converts to of const T, never the reverse; transposed() of a view gives
// a transposed view, of a transposed view the view again; element access follows constness.
static_assert(std::is_convertible_v<transposed_view<float>, transposed_view<const float>>);
static_assert(!std::is_convertible_v<transposed_view<const float>, transposed_view<float>>);
static_assert(!std::is_constructible_v<transposed_view<float>, transposed_view<const float>>);
static_assert(!std::is_convertible_v<view<float>, transposed_view<float>>);  // explicit
static_assert(std::is_same_v<transposed_view<const bf16>::element_type, const bf16>);
static_assert(
    std::is_same_v<decltype(transposed(std::declval<view<fp16>>())), transposed_view<fp16>>);
static_assert(std::is_same_v<decltype(transposed(std::declval<transposed_view<const float>>())),
                             view<const float>>);
static_assert(
    std::is_same_v<decltype(std::declval<transposed_view<const float>>()(0, 0)), const float&>);
static_assert(std::is_same_v<decltype(std::declval<transposed_view<float>>()(0, 0)), float&>);
static_assert(
    std::is_same_v<decltype(transposed(std::declval<tile<bf16, 2, 3>&>())), transposed_view<bf16>>);
static_assert(std::is_same_v<decltype(transposed(std::declval<const tile<bf16, 2, 3>&>())),
                             transposed_view<const bf16>>);

TEST_CASE("transposed_view: rows and columns swap; element (r, c) is (c, r) of the view") {
  // A 3 x 4 view with stride 6, the last element right before a guard page.
  test::guarded_buffer<float> buffer(2 * 6 + 4);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i);
  const view<float> v(buffer.data(), 3, 4, 6);
  const transposed_view<float> t = transposed(v);
  CHECK(t.rows() == 4);
  CHECK(t.cols() == 3);
  CHECK(t.size() == 12);
  CHECK_FALSE(t.empty());
  CHECK(t.stored().data() == v.data());
  CHECK(t.stored().stride() == 6);
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t c = 0; c < 3; ++c) {
      CHECK(&t(r, c) == &v(c, r));
      CHECK(t(r, c) == static_cast<float>(c * 6 + r));
    }
  }
  t(3, 2) = -1.0f;  // writes through: v(2, 3), the last element of the buffer
  CHECK(buffer[15] == -1.0f);

  // transposed(transposed(v)) is v: the same memory, shape and stride.
  const view<float> back = transposed(t);
  CHECK(back.data() == v.data());
  CHECK(back.rows() == v.rows());
  CHECK(back.cols() == v.cols());
  CHECK(back.stride() == v.stride());

  // As a transposed view of const: the same elements.
  const transposed_view<const float> ct = t;
  CHECK(ct.rows() == 4);
  CHECK(ct.cols() == 3);
  CHECK(&ct(1, 2) == &v(2, 1));
  CHECK(ct.stored().stride() == 6);
  const transposed_view<const float> from_const = transposed(view<const float>(v));
  CHECK(&from_const(0, 1) == &v(1, 0));
}

TEST_CASE("transposed_view: of a range (one row) is one column; default and empty ones") {
  std::vector<bf16> x(5);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = bf16::from(static_cast<double>(i));
  const auto column = transposed(view(x));
  CHECK(column.rows() == 5);
  CHECK(column.cols() == 1);
  for (std::size_t r = 0; r < 5; ++r) CHECK(&column(r, 0) == &x[r]);

  const transposed_view<float> none;
  CHECK(none.rows() == 0);
  CHECK(none.cols() == 0);
  CHECK(none.empty());
  CHECK(none.stored().data() == nullptr);

  std::vector<float> y(8);
  const auto wide = transposed(view<float>(y.data(), 0, 8, 8));
  CHECK(wide.rows() == 8);
  CHECK(wide.cols() == 0);
  CHECK(wide.empty());
}

TEST_CASE("transposed_view: of a tile, as a view of its storage") {
  tile<fp16, 2, 3> t;
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t c = 0; c < 3; ++c) t(r, c) = fp16::from(static_cast<double>(10 * r + c));
  const transposed_view<fp16> tt = transposed(t);
  CHECK(tt.rows() == 3);
  CHECK(tt.cols() == 2);
  CHECK(tt.stored().data() == t.data());
  CHECK(tt.stored().stride() == 3);
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t c = 0; c < 2; ++c) CHECK(&tt(r, c) == &t(c, r));
  tt(2, 1) = fp16::from(-1.0);
  CHECK(t(1, 2).bits() == fp16::from(-1.0).bits());

  const tile<fp16, 2, 3>& ct = t;
  const transposed_view<const fp16> ctt = transposed(ct);
  CHECK(ctt.rows() == 3);
  CHECK(&ctt(0, 1) == &t(1, 0));
  const view<const fp16> back = transposed(ctt);
  CHECK(back.data() == t.data());
  CHECK(back.rows() == 2);
  CHECK(back.cols() == 3);
}

// Heads views: of T converts to of const T, never the reverse; matrix (b, h) is a view.
static_assert(std::is_convertible_v<heads_view<float>, heads_view<const float>>);
static_assert(!std::is_convertible_v<heads_view<const float>, heads_view<float>>);
static_assert(!std::is_constructible_v<heads_view<float>, heads_view<const float>>);
static_assert(
    std::is_same_v<decltype(std::declval<heads_view<const bf16>>()(0, 0)), view<const bf16>>);
static_assert(
    std::is_same_v<decltype(std::declval<heads_view<const float>>()(0, 0, 0, 0)), const float&>);

TEST_CASE("heads_view: contiguous [batch, heads, rows, cols], the last element at a guard page") {
  constexpr std::size_t batch = 2, heads = 3, rows = 4, cols = 5;
  test::guarded_buffer<float> buffer(batch * heads * rows * cols);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i);
  const heads_view<float> x(buffer.data(), batch, heads, rows, cols);
  CHECK(x.batch() == batch);
  CHECK(x.heads() == heads);
  CHECK(x.rows() == rows);
  CHECK(x.cols() == cols);
  CHECK(x.batch_stride() == heads * rows * cols);
  CHECK(x.head_stride() == rows * cols);
  CHECK(x.row_stride() == cols);
  CHECK(x.size() == buffer.size());
  CHECK_FALSE(x.empty());
  std::size_t next = 0;  // row-major order over (b, h, r, c) walks the buffer
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      const view<float> m = x(b, h);
      CHECK(m.rows() == rows);
      CHECK(m.cols() == cols);
      CHECK(m.stride() == cols);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c, ++next) {
          CHECK(&x(b, h, r, c) == buffer.data() + next);
          CHECK(&m(r, c) == &x(b, h, r, c));
        }
      }
    }
  }
  x(1, 2)(3, 4) = -1.0f;  // the last element of the buffer, through the (b, h) view
  CHECK(buffer[buffer.size() - 1] == -1.0f);
  x(0, 1, 2, 3) = -2.0f;
  CHECK(buffer[(0 * heads + 1) * rows * cols + 2 * cols + 3] == -2.0f);

  // As a heads view of const: the same memory, shape and strides.
  const heads_view<const float> cx = x;
  CHECK(cx.data() == x.data());
  CHECK(cx.batch() == batch);
  CHECK(cx.heads() == heads);
  CHECK(cx.rows() == rows);
  CHECK(cx.cols() == cols);
  CHECK(cx.batch_stride() == x.batch_stride());
  CHECK(cx.head_stride() == x.head_stride());
  CHECK(cx.row_stride() == x.row_stride());
  CHECK(cx(0, 1, 2, 3) == -2.0f);
}

TEST_CASE("heads_view: [batch, rows, heads, cols] memory read as heads, no copy") {
  // The layout attention takes from a projection: each row holds every head's cols side by side.
  constexpr std::size_t batch = 2, heads = 3, rows = 5, cols = 4;
  test::guarded_buffer<bf16> buffer(batch * rows * heads * cols);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = bf16::from(static_cast<double>(i));
  const heads_view<const bf16> x(buffer.data(), batch, heads, rows, cols, rows * heads * cols, cols,
                                 heads * cols);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      const view<const bf16> m = x(b, h);
      CHECK(m.data() == buffer.data() + b * rows * heads * cols + h * cols);
      CHECK(m.stride() == heads * cols);
      CHECK_FALSE(m.contiguous());
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c) {
          const std::size_t at = ((b * rows + r) * heads + h) * cols + c;
          CHECK(&x(b, h, r, c) == buffer.data() + at);
          CHECK(m(r, c).bits() == buffer[at].bits());
        }
      }
    }
  }
  CHECK(&x(1, 2, 4, 3) == buffer.data() + buffer.size() - 1);
}

TEST_CASE("heads_view: zero strides broadcast one matrix; default and empty views") {
  // One 2 x 3 matrix seen as 4 batches of 2 heads (an attention bias shared by all of them).
  std::vector<float> m{1, 2, 3, 4, 5, 6};
  const heads_view<const float> x(m.data(), 4, 2, 2, 3, 0, 0, 3);
  CHECK(x.size() == 4 * 2 * 2 * 3);
  for (std::size_t b = 0; b < 4; ++b)
    for (std::size_t h = 0; h < 2; ++h) CHECK(x(b, h).data() == m.data());
  CHECK(x(3, 1, 1, 2) == 6.0f);
  // A per-head bias shared by the batch: batch stride 0.
  std::vector<float> per_head(2 * 6);
  const heads_view<float> y(per_head.data(), 4, 2, 2, 3, 0, 6, 3);
  CHECK(&y(3, 1, 0, 0) == per_head.data() + 6);
  CHECK(&y(0, 1, 0, 0) == &y(2, 1, 0, 0));

  const heads_view<bf16> none;
  CHECK(none.data() == nullptr);
  CHECK(none.batch() == 0);
  CHECK(none.heads() == 0);
  CHECK(none.rows() == 0);
  CHECK(none.cols() == 0);
  CHECK(none.empty());
  CHECK(heads_view<float>(m.data(), 0, 2, 2, 3).empty());
  CHECK(heads_view<float>(m.data(), 2, 0, 2, 3).empty());
  CHECK(heads_view<float>(m.data(), 2, 2, 0, 3).empty());
  CHECK(heads_view<float>(m.data(), 2, 2, 3, 0).empty());
}

TEST_CASE("heads_view: a row stride less than the row length is a shape_error") {
  std::vector<float> x(64);
  CHECK_THROWS_WITH_AS(heads_view<float>(x.data(), 1, 2, 2, 5, 20, 10, 3),
                       "tilekern::heads_view: row stride 3 is less than the row length 5",
                       shape_error);
  CHECK_THROWS_AS(heads_view<const bf16>(nullptr, 2, 2, 3, 9, 0, 0, 0), std::invalid_argument);
  // One row needs no stride; rows exactly as long as the stride are fine.
  CHECK_NOTHROW(heads_view<float>(x.data(), 2, 2, 1, 5, 5, 5, 0));
  CHECK_NOTHROW(heads_view<float>(x.data(), 1, 2, 2, 5, 20, 10, 5));
  CHECK_NOTHROW(heads_view<float>(x.data(), 1, 2, 2, 0, 0, 0, 0));
}

}  // namespace
}  // namespace tilekern
