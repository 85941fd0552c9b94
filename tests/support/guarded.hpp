#pragma once
// Buffers that end right before an unreadable page, so that any read or write past the end
// crashes the test, helpers to run a check on every ISA path the machine has, and two to set the
// kernels' blocks of rows and row passes.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <vector>

#include "tilekern/simd/isa.hpp"

namespace tilekern::test {

// n elements of T whose last byte is the last byte before a PROT_NONE page. The start is only
// as aligned as that leaves it, which also exercises unaligned access.
template <class T>
class guarded_buffer {
 public:
  explicit guarded_buffer(std::size_t n) : size_(n) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t bytes = n * sizeof(T);
    const std::size_t data_pages = (bytes + page - 1) / page;
    mapped_bytes_ = (data_pages + 1) * page;
    void* base =
        mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<std::byte*>(base);
    std::byte* guard = base_ + data_pages * page;
    if (mprotect(guard, page, PROT_NONE) != 0) throw std::bad_alloc();
    data_ = reinterpret_cast<T*>(guard - bytes);
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  guarded_buffer(const guarded_buffer&) = delete;
  guarded_buffer& operator=(const guarded_buffer&) = delete;
  ~guarded_buffer() { munmap(base_, mapped_bytes_); }

  T* data() { return data_; }
  std::size_t size() const { return size_; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> cspan() const { return {data_, size_}; }
  T& operator[](std::size_t i) { return data_[i]; }

 private:
  std::size_t size_;
  std::size_t mapped_bytes_ = 0;
  std::byte* base_ = nullptr;
  T* data_ = nullptr;
};

// The ISA paths this machine and build can run, lowest first.
inline std::vector<isa> available_isas() {
  std::vector<isa> levels;
  for (isa level : all_isas) {
    if (level <= detected_isa() && level <= compiled_isa()) levels.push_back(level);
  }
  return levels;
}

// Runs body(level) with the process capped at each available path, then restores the cap.
template <class Body>
void for_each_isa(Body&& body) {
  const auto previous = isa_cap();
  for (isa level : available_isas()) {
    set_isa_cap(level);
    body(level);
  }
  set_isa_cap(previous);
}

// Sets row_block_bytes() (simd/isa.hpp: the kernels' blocks of rows) for its lifetime, then
// returns it to the default.
class row_blocks_of {
 public:
  explicit row_blocks_of(std::size_t bytes) { set_row_block_bytes(bytes); }
  ~row_blocks_of() { set_row_block_bytes(std::nullopt); }
  row_blocks_of(const row_blocks_of&) = delete;
  row_blocks_of& operator=(const row_blocks_of&) = delete;
};

// Sets row_passes() (simd/isa.hpp: the kernels' row passes on or off) for its lifetime, then
// returns it to the default.
class row_passes_of {
 public:
  explicit row_passes_of(bool on) { set_row_passes(on); }
  ~row_passes_of() { set_row_passes(std::nullopt); }
  row_passes_of(const row_passes_of&) = delete;
  row_passes_of& operator=(const row_passes_of&) = delete;
};

}  // namespace tilekern::test
