#pragma once
// tile<T, Rows, Cols>: a tile whose shape is fixed at compile time, owning aligned storage, in
// row-major order. The row index plays the part of the NeuronCore partition index.

#include <cstddef>
#include <span>

#include "tilekern/tile/view.hpp"

namespace tilekern {

template <class T, std::size_t Rows, std::size_t Cols>
struct tile {
  static_assert(Rows > 0 && Cols > 0, "tilekern::tile: a tile needs at least one row and column");

  static constexpr std::size_t rows = Rows;
  static constexpr std::size_t cols = Cols;
  static constexpr std::size_t size = Rows * Cols;

  alignas(64) T values[Rows * Cols] = {};

  T* data() { return values; }
  const T* data() const { return values; }
  std::span<T, Cols> row(std::size_t r) { return std::span<T, Cols>(values + r * Cols, Cols); }
  std::span<const T, Cols> row(std::size_t r) const {
    return std::span<const T, Cols>(values + r * Cols, Cols);
  }
  T& operator()(std::size_t r, std::size_t c) { return values[r * Cols + c]; }
  const T& operator()(std::size_t r, std::size_t c) const { return values[r * Cols + c]; }

  tilekern::view<T> view() { return {values, Rows, Cols}; }
  tilekern::view<const T> view() const { return {values, Rows, Cols}; }
};

// The transpose of a tile, as a view of its storage (tile/view.hpp).
template <class T, std::size_t Rows, std::size_t Cols>
transposed_view<T> transposed(tile<T, Rows, Cols>& of) {
  return transposed(of.view());
}
template <class T, std::size_t Rows, std::size_t Cols>
transposed_view<const T> transposed(const tile<T, Rows, Cols>& of) {
  return transposed(of.view());
}

// A row vector and a column vector are tiles of one row and of one column.
template <class T, std::size_t N>
using row_vector = tile<T, 1, N>;
template <class T, std::size_t N>
using column_vector = tile<T, N, 1>;

// The PSUM analogue: fp32 accumulators, never rounded until written out.
template <std::size_t Rows, std::size_t Cols>
using accum = tile<float, Rows, Cols>;

}  // namespace tilekern
