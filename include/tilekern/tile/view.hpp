#pragma once
// Strided two-dimensional views over memory the caller owns.
//
// view<T> is rows x cols elements of T in row-major order with a leading dimension: row r starts
// at data + r * stride (stride >= cols). It never owns or allocates. A contiguous range (a span,
// a vector) is a view of one row, so every kernel that takes views takes plain arrays too.

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>

#include "tilekern/error.hpp"

namespace tilekern {

template <class T>
class view {
 public:
  using element_type = T;

  view() = default;
  // Throws shape_error if stride < cols with more than one row (rows would overlap); a view of one
  // row never uses its stride.
  view(T* data, std::size_t rows, std::size_t cols, std::size_t stride)
      : data_(data), rows_(rows), cols_(cols), stride_(stride) {
    if (stride < cols && rows > 1) {
      detail::throw_shape_error([&] {
        return "tilekern::view: stride " + std::to_string(stride) +
               " is less than the row length " + std::to_string(cols);
      });
    }
  }
  view(T* data, std::size_t rows, std::size_t cols) : view(data, rows, cols, cols) {}
  // One row holding a contiguous range; implicit, as arrays are views. The constraint keeps views
  // themselves on the copy constructor.
  template <class Range>
  requires std::is_convertible_v<decltype(std::span(std::declval<Range&>())), std::span<T>>
  // NOLINTNEXTLINE(google-explicit-constructor, bugprone-forwarding-reference-overload)
  view(Range&& range) : view(std::span<T>(range).data(), 1, std::span<T>(range).size()) {}
  // A view of T is a view of const T.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
      view(const view<U>& other)  // NOLINT(google-explicit-constructor)
      : data_(other.data()), rows_(other.rows()), cols_(other.cols()), stride_(other.stride()) {}

  T* data() const { return data_; }
  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }
  std::size_t stride() const { return stride_; }
  std::size_t size() const { return rows_ * cols_; }
  bool empty() const { return size() == 0; }
  // Whether the elements are one run of memory (no gaps between rows).
  bool contiguous() const { return stride_ == cols_ || rows_ <= 1; }

  std::span<T> row(std::size_t r) const { return {data_ + r * stride_, cols_}; }
  // The rows x cols block whose first element is (r, c). Throws shape_error if it does not lie
  // within the view.
  view block(std::size_t r, std::size_t c, std::size_t rows, std::size_t cols) const {
    if (r > rows_ || rows > rows_ - r || c > cols_ || cols > cols_ - c) {
      detail::throw_shape_error([&] {
        return "tilekern::view::block: " + std::to_string(rows) + "x" + std::to_string(cols) +
               " at (" + std::to_string(r) + ", " + std::to_string(c) + ") does not lie within " +
               std::to_string(rows_) + "x" + std::to_string(cols_);
      });
    }
    return view(data_ + r * stride_ + c, rows, cols, stride_);
  }
  T& operator()(std::size_t r, std::size_t c) const { return data_[r * stride_ + c]; }

 private:
  T* data_ = nullptr;
  std::size_t rows_ = 0;
  std::size_t cols_ = 0;
  std::size_t stride_ = 0;
};

template <class Range>
view(Range&& range) -> view<typename decltype(std::span(range))::element_type>;

// The transpose of a view, without moving memory: element (r, c) is element (c, r) of the view
// it was made from (`stored()`). matmul takes it for op(A) = A^T and op(B) = B^T.
template <class T>
class transposed_view {
 public:
  using element_type = T;

  transposed_view() = default;
  explicit transposed_view(view<T> stored) : stored_(stored) {}
  // A transposed view of T is a transposed view of const T.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
      transposed_view(const transposed_view<U>& other)  // NOLINT(google-explicit-constructor)
      : stored_(other.stored()) {}

  std::size_t rows() const { return stored_.cols(); }
  std::size_t cols() const { return stored_.rows(); }
  std::size_t size() const { return stored_.size(); }
  bool empty() const { return stored_.empty(); }
  view<T> stored() const { return stored_; }
  T& operator()(std::size_t r, std::size_t c) const { return stored_(c, r); }

 private:
  view<T> stored_;
};

template <class T>
transposed_view<T> transposed(view<T> stored) {
  return transposed_view<T>(stored);
}
template <class T>
view<T> transposed(transposed_view<T> of) {
  return of.stored();
}

// batch x heads matrices of rows x cols elements of T, each a view<T>: element (b, h, r, c) is at
// data + b * batch_stride + h * head_stride + r * row_stride + c. Attention takes its tensors so:
// [batch, heads, seq, head_dim] contiguous is heads_view(data, batch, heads, seq, head_dim), and
// [batch, seq, heads, head_dim] is the same memory with strides (seq * heads * head_dim,
// head_dim, heads * head_dim), no copy. Strides may be 0 (one matrix broadcast). Like view, it
// never owns or allocates.
template <class T>
class heads_view {
 public:
  using element_type = T;

  heads_view() = default;
  heads_view(T* data, std::size_t batch, std::size_t heads, std::size_t rows, std::size_t cols,
             std::size_t batch_stride, std::size_t head_stride, std::size_t row_stride)
      : data_(data),
        batch_(batch),
        heads_(heads),
        rows_(rows),
        cols_(cols),
        batch_stride_(batch_stride),
        head_stride_(head_stride),
        row_stride_(row_stride) {
    if (row_stride < cols && rows > 1) {
      detail::throw_shape_error([&] {
        return "tilekern::heads_view: row stride " + std::to_string(row_stride) +
               " is less than the row length " + std::to_string(cols);
      });
    }
  }
  // Contiguous [batch, heads, rows, cols].
  heads_view(T* data, std::size_t batch, std::size_t heads, std::size_t rows, std::size_t cols)
      : heads_view(data, batch, heads, rows, cols, heads * rows * cols, rows * cols, cols) {}
  // A heads view of T is a heads view of const T.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
      heads_view(const heads_view<U>& other)  // NOLINT(google-explicit-constructor)
      : heads_view(other.data(), other.batch(), other.heads(), other.rows(), other.cols(),
                   other.batch_stride(), other.head_stride(), other.row_stride()) {}

  T* data() const { return data_; }
  std::size_t batch() const { return batch_; }
  std::size_t heads() const { return heads_; }
  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }
  std::size_t batch_stride() const { return batch_stride_; }
  std::size_t head_stride() const { return head_stride_; }
  std::size_t row_stride() const { return row_stride_; }
  std::size_t size() const { return batch_ * heads_ * rows_ * cols_; }
  bool empty() const { return size() == 0; }

  // Matrix (b, h), unchecked (b < batch(), h < heads()).
  view<T> operator()(std::size_t b, std::size_t h) const {
    return {data_ + b * batch_stride_ + h * head_stride_, rows_, cols_, row_stride_};
  }
  T& operator()(std::size_t b, std::size_t h, std::size_t r, std::size_t c) const {
    return data_[b * batch_stride_ + h * head_stride_ + r * row_stride_ + c];
  }

 private:
  T* data_ = nullptr;
  std::size_t batch_ = 0;
  std::size_t heads_ = 0;
  std::size_t rows_ = 0;
  std::size_t cols_ = 0;
  std::size_t batch_stride_ = 0;
  std::size_t head_stride_ = 0;
  std::size_t row_stride_ = 0;
};

}  // namespace tilekern
