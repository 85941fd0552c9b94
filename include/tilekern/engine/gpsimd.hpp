#pragma once
// engine/gpsimd: operators users write in plain math over xsimd batches, run the way a
// NeuronCore's GPSIMD engine runs them, with the bookkeeping done here.
//
// On the hardware, eight general-purpose 512-bit SIMD cores, each with 64 KiB of local memory,
// stage data from tensors into local memory, compute in fp32 and write results back. Here:
//
//   elementwise(op, inputs(x, ...), outputs(y, ...), options)
//       op(batch x, ...) returns one batch per output (a batch, or a std::tuple of batches).
//   rowwise(op, inputs(...), outputs(...), options)
//       op(row x, ..., row y, ...) gets each row decoded into fp32 local memory; sum(), max()
//       and transform() below do the batch loops over a row, tails included, and stream() writes
//       an output row straight into its tensor (the hardware's write stream). An input given as
//       streamed(x) is not staged: those functions read its rows from the tensor (the read
//       stream).
//   tilewise<Rows, Cols>(op, inputs(...), outputs(...), options)
//       op(const tile<float, Rows, Cols>& x, ..., tile<float, Rows, Cols>& y, ...) per tile.
//   launch(options, body)
//       the hardware's explicit style: body(core&) runs once per logical core, with core_id(),
//       core_count(), its share of the work, its local memory, and load/store between tensors
//       and local fp32.
//
// Tensors are views (tile/view.hpp) or contiguous ranges, of float or of any tilekern format.
// Every output has the shape of the first; an input has that shape, or one row of the same length,
// which is broadcast to every row (a bias, a gamma). Outputs are encoded with options.cast: output
// k uses stream options.cast.stream + k, so that two outputs never share random bits. The random
// bits of an element depend only on its row-major index in its output, so results are
// bit-identical for any number of cores and threads.
//
// Batches: an operator is called with xsimd::batch<float, A>, where A is the widest
// architecture the active ISA path (simd/isa.hpp, TILEKERN_ISA) allows and the operator accepts:
// avx512bw on the avx512 and amx paths (16 lanes), fma3<avx2> on avx2 (8), sse2 on scalar (4
// lanes, with the scalar format conversions; in a build without AVX2, whose only path is scalar,
// the build's default architecture). A generic operator (auto parameters) follows the path; one
// written for xsimd::batch<float> runs at the build's default width whatever the path.
//
// Elementwise operators need no local memory: each batch goes from the tensor into registers,
// through the operator and back (staging whole chunks through memory would only add a pass over
// them). Row-wise and tile-wise operators stage their rows and tiles in a local memory of
// options.local_bytes per core, and throw shape_error if those do not fit. A row-wise operator
// can skip the staging of an output row with stream(): the results are encoded as they are
// computed, instead of stored in local memory and read back (on the AMD EPYC of
// CONTRIBUTING.md, rmsnorm over 1365 x 768 bf16 took about 15% less time); and of an input it
// only reads through those functions, by giving it as streamed(x) (rmsnorm over 1 Mi bf16 then
// ran at 0.91-0.97 of a hand-written loop, from 0.82-0.89).
//
// An operator must treat lanes independently (elementwise) and be safe to call from several
// threads at once, on the batches in any order (elementwise may go backward: detail::backward):
// when every tensor of an elementwise call is bf16, a batch holds every other element (a block's
// even elements, then its odd ones, in two calls), which widens and narrows bf16 without shuffles.
// An exception it throws is rethrown to the caller, after every core has stopped; outputs may then
// be partly written.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <immintrin.h>  // _mm_getcsr, _mm_setcsr: run_cores

// GCC 12 reports xsimd's AVX-512 intrinsics as maybe-uninitialized, or uninitialized where it
// does not inline xsimd's math (GCC bug 105593; the intrinsics start from an "undefined" register).
// GCC checks the pragma at the xsimd lines they are inlined from, so this silences them in user
// code too, if tilekern is included before xsimd.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <xsimd/xsimd.hpp>
#pragma GCC diagnostic pop
#else
#include <xsimd/xsimd.hpp>
#endif

#include "tilekern/error.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/tile/tile.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/minifloat.hpp"
#include "tilekern/types/random.hpp"
#include "tilekern/types/rounding.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace tilekern::gpsimd {

struct options {
  std::size_t cores = 8;  // logical cores the work is split over, as on the hardware
  std::size_t local_bytes = std::size_t{64} << 10;  // local memory of each core: 64 KiB
  cast_options cast = {};                           // rounding and overflow of every output
  // Machine threads the cores run on: 0 for OpenMP's default, 1 for the calling thread only.
  // Without OpenMP every core runs on the calling thread.
  std::size_t threads = 0;
};

// A half-open range of indices (elements, rows or tiles).
struct range {
  std::size_t begin = 0;
  std::size_t end = 0;
  constexpr std::size_t size() const { return end - begin; }
  constexpr bool empty() const { return begin == end; }
  friend bool operator==(const range&, const range&) = default;
};

// The share of [0, n) that core `id` of `count` takes: contiguous, in core order, every index in
// exactly one share. Shares are as even as `grain` allows: their bounds are multiples of `grain`
// (except n), and they differ by at most one grain.
constexpr range share(std::size_t n, std::size_t id, std::size_t count, std::size_t grain = 1) {
  const unsigned __int128 units = n / grain + (n % grain != 0 ? 1 : 0);
  const auto bound = [&](std::size_t core) {
    return std::min(n, static_cast<std::size_t>(units * core / count) * grain);
  };
  return {bound(id), bound(id + 1)};
}

// An input of rowwise() that is read straight from its tensor, never staged: streamed(x).
template <class T>
struct streamed_input {
  view<const T> tensor;
};

// Tensor arguments: inputs(a, b) and outputs(y) bundle views (or ranges, as one-row views, or
// streamed() inputs of rowwise).
template <class... Views>
struct input_list {
  std::tuple<Views...> views;
};
template <class... Views>
struct output_list {
  std::tuple<Views...> views;
};

namespace detail {

template <class T>
struct is_view : std::false_type {};
template <class T>
struct is_view<view<T>> : std::true_type {};

template <class T>
auto as_view(T&& tensor) {
  if constexpr (is_view<std::remove_cvref_t<T>>::value) {
    return tensor;
  } else {
    return view(std::forward<T>(tensor));
  }
}

template <class T>
struct is_streamed_input : std::false_type {};
template <class T>
struct is_streamed_input<streamed_input<T>> : std::true_type {};

template <class... Inputs>
concept any_streamed = (is_streamed_input<Inputs>::value || ...);

template <class T>
constexpr bool is_element =
    std::is_same_v<std::remove_const_t<T>, float> || minifloat_format<std::remove_const_t<T>>;

// An argument of inputs() as it is kept: a view of const, or a streamed_input.
template <class Tensor>
auto as_input(Tensor&& tensor) {
  if constexpr (is_streamed_input<std::remove_cvref_t<Tensor>>::value) {
    return tensor;
  } else {
    using element = typename decltype(as_view(std::declval<Tensor>()))::element_type;
    static_assert(is_element<element>,
                  "tilekern::gpsimd::inputs: tensors hold float or a tilekern format");
    return view<const std::remove_const_t<element>>(as_view(std::forward<Tensor>(tensor)));
  }
}

}  // namespace detail

template <class... Tensors>
auto inputs(Tensors&&... tensors) {
  return input_list<decltype(detail::as_input(std::declval<Tensors>()))...>{
      {detail::as_input(std::forward<Tensors>(tensors))...}};
}

// Marks an input of rowwise() as streamed: the operator gets its rows as gpsimd::input_stream,
// read by sum(), max(), transform() and stream() straight from the tensor, a batch at a time, as
// the hardware's read stream does, instead of decoded into local memory first. Such a row has no
// memory and no elements to index; it saves, per element, the store and the load of its decoded
// fp32 value, and its local memory. Only rowwise() takes streamed inputs. Its rows are read when
// those functions run: an output in the same memory (in place) must be written after the row's
// last read (staged inputs are read before the operator is called).
template <class Tensor>
auto streamed(Tensor&& tensor) {
  using element = typename decltype(detail::as_view(std::declval<Tensor>()))::element_type;
  static_assert(detail::is_element<element>,
                "tilekern::gpsimd::streamed: tensors hold float or a tilekern format");
  using T = std::remove_const_t<element>;
  return streamed_input<T>{view<const T>(detail::as_view(std::forward<Tensor>(tensor)))};
}

template <class... Tensors>
auto outputs(Tensors&&... tensors) {
  using list = output_list<decltype(detail::as_view(std::declval<Tensors>()))...>;
  static_assert((!std::is_const_v<typename decltype(detail::as_view(
                     std::declval<Tensors>()))::element_type> &&
                 ...),
                "tilekern::gpsimd::outputs: outputs must be writable (not views of const)");
  static_assert((detail::is_element<typename decltype(detail::as_view(
                     std::declval<Tensors>()))::element_type> &&
                 ...),
                "tilekern::gpsimd::outputs: tensors hold float or a tilekern format");
  return list{{detail::as_view(std::forward<Tensors>(tensors))...}};
}

// One row of a row-wise operator: fp32 in local memory, and the batch architecture its loops use.
template <class T, class Arch>
class row : public std::span<T> {
 public:
  using arch = Arch;
  using batch = xsimd::batch<float, Arch>;

  row(T* data, std::size_t size) : std::span<T>(data, size) {}
  // A writable row can be read as an input.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
      row(const row<U, Arch>& other)  // NOLINT(google-explicit-constructor)
      : std::span<T>(other.data(), other.size()) {}
};

// An output row of a row-wise operator: a row of fp32 local memory, zero-filled, which is encoded
// into the output tensor when the operator returns, unless stream() wrote the tensor's row instead.
// It is a row<float, Arch>, so an operator may take it as one (and stream() then writes the memory,
// as transform() does). Sink, an implementation type, says where the row goes.
template <class Arch, class Sink>
class output_row : public row<float, Arch> {
 public:
  output_row(float* data, std::size_t size, Sink& sink)
      : row<float, Arch>(data, size), sink_(&sink) {}
  Sink& sink() const { return *sink_; }

 private:
  Sink* sink_;
};

// An input row of a row-wise operator whose input was given as streamed(x): row r of the tensor
// itself, of format T, which sum(), max(), transform() and stream() read and decode a batch at a
// time. It has a size, but no memory and no elements to index. Path, an implementation type, is
// the ISA path whose batches (of architecture arch) it decodes into.
template <class T, class Path>
class input_stream {
 public:
  using arch = typename Path::arch;
  using batch = xsimd::batch<float, arch>;

  input_stream(const T* source, std::size_t size) : source_(source), size_(size) {}
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T* source() const { return source_; }  // the tensor's row

 private:
  const T* source_;
  std::size_t size_;
};

namespace detail {

#define TILEKERN_GPSIMD_INLINE __attribute__((always_inline))

#if defined(TILEKERN_CONVERT_AVX2)
namespace hn = hwy::HWY_NAMESPACE;
#endif

// ---- ISA paths: a batch architecture and the format conversions that go with it ----

template <class Arch, isa Level>
struct path {
  using arch = Arch;
  using batch = xsimd::batch<float, Arch>;
  static constexpr isa level = Level;
  static constexpr std::size_t lanes = batch::size;
};

// The scalar path's batches: sse2 (every x86-64 has it) next to the vector paths, or the build's
// default architecture when it has none of them, so that an operator written for
// xsimd::batch<float> always has a path.
#if defined(TILEKERN_CONVERT_AVX2)
using scalar_path = path<xsimd::sse2, isa::scalar>;
#else
using scalar_path = path<xsimd::default_arch, isa::scalar>;
#endif
#if defined(TILEKERN_CONVERT_AVX2) && XSIMD_WITH_FMA3_AVX2
using avx2_path = path<xsimd::fma3<xsimd::avx2>, isa::avx2>;
#endif
#if defined(TILEKERN_CONVERT_AVX512) && XSIMD_WITH_AVX512BW
using avx512_path = path<xsimd::avx512bw, isa::avx512>;
#endif

// Calls body(paths...), widest first.
template <class Body>
constexpr decltype(auto) visit_paths(Body&& body) {
  return body(
#if defined(TILEKERN_CONVERT_AVX512) && XSIMD_WITH_AVX512BW
      avx512_path(),
#endif
#if defined(TILEKERN_CONVERT_AVX2) && XSIMD_WITH_FMA3_AVX2
      avx2_path(),
#endif
      scalar_path());
}

// Calls body(path) for the first of the widest-first paths that `accepts` allows and the active
// ISA allows, or else for the first that `accepts` allows.
template <template <class> class Accepts, class Body>
void with_path(Body&& body) {
  visit_paths([&](auto... paths) {
    static_assert((Accepts<decltype(paths)>::value || ...));  // checked by each kind first
    const isa level = active_isa();
    bool done = false;
    const auto attempt = [&](auto p, bool allowed) {
      if constexpr (Accepts<decltype(p)>::value) {
        if (!done && allowed) {
          done = true;
          body(p);
        }
      }
    };
    (attempt(paths, decltype(paths)::level <= level), ...);
    (attempt(paths, true), ...);
  });
}

// Whether some path's batches (or rows) are accepted.
template <template <class> class Accepts>
constexpr bool accepted_by_some_path() {
  return visit_paths([](auto... paths) { return (Accepts<decltype(paths)>::value || ...); });
}

// A batch of Path holding the values of `Path::lanes` elements at p. bf16 is widened as it is
// (widen_bf16): a signalling NaN stays signalling (convert() quiets it), which only a float
// output of an operator that returns its argument unchanged can show; arithmetic quiets NaNs, and
// so does every minifloat output.
template <class Path, class T>
TILEKERN_GPSIMD_INLINE inline typename Path::batch load_batch(const T* p) {
  using batch = typename Path::batch;
  if constexpr (std::is_same_v<T, float>) {
    return batch::load_unaligned(p);
  } else if constexpr (std::is_same_v<T, bf16> && Path::level != isa::scalar) {
#if defined(TILEKERN_CONVERT_AVX2)
    return batch(tilekern::detail::widen_bf16(hn::Simd<float, Path::lanes, 0>(),
                                              tilekern::detail::storage_of(p))
                     .raw);
#endif
  } else if constexpr (Path::level == isa::scalar) {
    alignas(64) float values[Path::lanes];
    for (std::size_t j = 0; j < Path::lanes; ++j) values[j] = p[j].to_float();
    return batch::load_aligned(values);
  } else {
#if defined(TILEKERN_CONVERT_AVX2)
    return batch(tilekern::detail::decode_block<T>(hn::Simd<float, Path::lanes, 0>(),
                                                   tilekern::detail::storage_of(p))
                     .raw);
#endif
  }
}

// Two batches of a vector Path holding the 2 * Path::lanes bf16 elements at p interleaved: element
// 2j in lane j of the first, element 2j + 1 in lane j of the second (widen_bf16_interleaved).
template <class Path>
TILEKERN_GPSIMD_INLINE inline std::pair<typename Path::batch, typename Path::batch>
load_interleaved([[maybe_unused]] const bf16* p) {
#if defined(TILEKERN_CONVERT_AVX2)
  const auto [even, odd] = tilekern::detail::widen_bf16_interleaved(
      hn::Simd<float, Path::lanes, 0>(), tilekern::detail::storage_of(p));
  return {typename Path::batch(even.raw), typename Path::batch(odd.raw)};
#endif
}

// Stores batches of Path as T, rounding in Mode: a batch stored with index i gives element j the
// random bits of index i + j.
template <class Path, class T, rounding Mode>
class batch_writer {  // float: nothing to round
 public:
  explicit batch_writer(const cast_options&) {}
  TILEKERN_GPSIMD_INLINE void operator()(typename Path::batch x, float* p, std::uint64_t) const {
    x.store_unaligned(p);
  }
};

template <class Path, class T, rounding Mode>
requires(minifloat_format<T>&& Path::level == isa::scalar) class batch_writer<Path, T, Mode> {
 public:
  explicit batch_writer(const cast_options& cast)
      : key_(random_key::from(cast.seed, cast.stream)), on_overflow_(cast.on_overflow) {}
  void operator()(typename Path::batch x, T* p, std::uint64_t index) const {
    alignas(64) float values[Path::lanes];
    x.store_aligned(values);
    for (std::size_t j = 0; j < Path::lanes; ++j) {
      const std::uint32_t random = Mode == rounding::stochastic ? random_bits(key_, index + j) : 0;
      p[j] = T::from(values[j], Mode, on_overflow_, random);
    }
  }

 private:
  random_key key_;
  overflow on_overflow_;
};

#if defined(TILEKERN_CONVERT_AVX2)
template <class Path, class T, rounding Mode>
requires(minifloat_format<T>&& Path::level != isa::scalar) class batch_writer<Path, T, Mode> {
 public:
  explicit batch_writer(const cast_options& cast) : encode_(lanes(), cast) {}
  TILEKERN_GPSIMD_INLINE void operator()(typename Path::batch x, T* p, std::uint64_t index) const {
    using register_type = typename Path::batch::register_type;
    encode_(hn::Vec<lanes>{static_cast<register_type>(x)}, tilekern::detail::storage_of(p), index);
  }
  // The batches of load_interleaved, stored as 2 * Path::lanes elements from index on (bf16 only).
  TILEKERN_GPSIMD_INLINE void interleaved(typename Path::batch even, typename Path::batch odd, T* p,
                                          std::uint64_t index) const {
    using register_type = typename Path::batch::register_type;
    encode_.interleaved(hn::Vec<lanes>{static_cast<register_type>(even)},
                        hn::Vec<lanes>{static_cast<register_type>(odd)},
                        tilekern::detail::storage_of(p), index);
  }

 private:
  using lanes = hn::Simd<float, Path::lanes, 0>;
  tilekern::detail::vector_encoder<T, lanes, Mode> encode_;
};
#endif

// ---- tensors ----

template <class T>
struct element_of;
template <class T>
struct element_of<view<T>> {
  using type = std::remove_const_t<T>;
};

// Output k's cast: stream + k.
inline cast_options output_cast(const cast_options& cast, std::size_t k) {
  cast_options result = cast;
  result.stream += k;
  return result;
}

inline std::string shape_text(std::size_t rows, std::size_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// The shape of output 0, after checking every tensor against it.
template <class... In, class... Out>
std::pair<std::size_t, std::size_t> check_shapes(const char* function,
                                                 const std::tuple<view<In>...>& in,
                                                 const std::tuple<view<Out>...>& out) {
  const std::size_t rows = std::get<0>(out).rows();
  const std::size_t cols = std::get<0>(out).cols();
  std::size_t k = 0;
  std::apply(
      [&](const auto&... v) {
        ((v.rows() == rows && v.cols() == cols
              ? void(++k)
              : tilekern::detail::throw_shape_error([&] {
                  return std::string(function) + ": output " + std::to_string(k) + " is " +
                         shape_text(v.rows(), v.cols()) + ", expected " + shape_text(rows, cols) +
                         " (the shape of output 0)";
                })),
         ...);
      },
      out);
  k = 0;
  std::apply(
      [&](const auto&... v) {
        (((v.rows() == rows || v.rows() == 1) && v.cols() == cols
              ? void(++k)
              : tilekern::detail::throw_shape_error([&] {
                  return std::string(function) + ": input " + std::to_string(k) + " is " +
                         shape_text(v.rows(), v.cols()) + ", expected " + shape_text(rows, cols) +
                         " or " + shape_text(1, cols) + " (one row, broadcast)";
                })),
         ...);
      },
      in);
  return {rows, cols};
}

// Row r of v, or its only row if it has one (broadcast).
template <class T>
T* row_pointer(const view<T>& v, std::size_t r) {
  return v.data() + (v.rows() == 1 ? 0 : r * v.stride());
}

// Decodes n elements into fp32; encodes n fp32 values with `cast`, the first with index `first`.
template <class T>
void decode(const T* from, float* to, std::size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::copy_n(from, n, to);
  } else {
    convert(std::span<const T>(from, n), std::span<float>(to, n));
  }
}
template <class T>
void encode(const float* from, T* to, std::size_t n, const cast_options& cast,
            std::uint64_t first) {
  if constexpr (std::is_same_v<T, float>) {
    std::copy_n(from, n, to);
  } else {
    convert(std::span<const float>(from, n), std::span<T>(to, n), cast, first);
  }
}

// ---- cores ----

inline void check_options(const char* function, const options& opt) {
  if (opt.cores == 0) {
    tilekern::detail::throw_shape_error(
        [&] { return std::string(function) + ": options.cores is 0; it must be at least 1"; });
  }
}

inline void check_local_memory(const char* function, std::size_t needed, const options& opt,
                               const std::string& what) {
  if (needed > opt.local_bytes) {
    tilekern::detail::throw_shape_error([&] {
      return std::string(function) + ": " + what + " needs " + std::to_string(needed) +
             " bytes of local memory, options.local_bytes is " + std::to_string(opt.local_bytes);
    });
  }
}

// Elements of work below which another thread costs more than it saves.
inline constexpr std::size_t elements_per_thread = std::size_t{1} << 15;

// Runs body(core) for each logical core, spread over the machine's threads: each thread takes the
// next core when it is free (which cores share a thread changes nothing in the results), and
// `elements` of work get a thread per elements_per_thread at most. An exception thrown by a core
// is rethrown here, the lowest core's if several throw. Every core runs under the caller's MXCSR
// (rounding mode, FTZ, DAZ), whatever the thread's own, so that no result depends on which thread
// ran it; the thread's own is restored after.
template <class Body>
void run_cores(const options& opt, std::size_t elements, Body&& body) {
  std::exception_ptr error;
  std::size_t error_core = opt.cores;
  const unsigned caller_mxcsr = _mm_getcsr();
  const auto run = [&](std::size_t core) {
    const unsigned own_mxcsr = _mm_getcsr();
    _mm_setcsr(caller_mxcsr);
    try {
      body(core);
    } catch (...) {
#if defined(_OPENMP)
#pragma omp critical(tilekern_gpsimd_error)
#endif
      if (core < error_core) {
        error_core = core;
        error = std::current_exception();
      }
    }
    _mm_setcsr(own_mxcsr);
  };
#if defined(_OPENMP)
  const auto available =
      opt.threads != 0 ? opt.threads : static_cast<std::size_t>(omp_get_max_threads());
  const auto worth = std::max<std::size_t>(1, elements / elements_per_thread);
  const int threads = static_cast<int>(std::min({opt.cores, available, worth}));
  const auto cores = static_cast<std::ptrdiff_t>(opt.cores);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
  for (std::ptrdiff_t core = 0; core < cores; ++core) run(static_cast<std::size_t>(core));
#else
  (void)elements;
  for (std::size_t core = 0; core < opt.cores; ++core) run(core);
#endif
  if (error) std::rethrow_exception(error);
}

// A core's local memory: 64-byte aligned, allocated once per core per call.
class local_memory {
 public:
  explicit local_memory(std::size_t bytes)
      : data_(static_cast<std::byte*>(
            ::operator new (std::max<std::size_t>(bytes, 64), std::align_val_t{64}))),
        bytes_(bytes) {}
  local_memory(const local_memory&) = delete;
  local_memory& operator=(const local_memory&) = delete;
  ~local_memory() { ::operator delete (data_, std::align_val_t{64}); }

  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::byte* data_;
  std::size_t bytes_;
};

template <std::size_t... K, class Body>
TILEKERN_GPSIMD_INLINE inline void for_indices(std::index_sequence<K...>, Body&& body) {
  (body(std::integral_constant<std::size_t, K>()), ...);
}

// ---- elementwise ----

template <class Op, std::size_t Inputs>
struct elementwise_accepts {
  template <class Path>
  struct test {
    template <std::size_t... I>
    static constexpr bool check(std::index_sequence<I...>) {
      return std::is_invocable_v<Op&, decltype((void(I), std::declval<typename Path::batch>()))...>;
    }
    static constexpr bool value = check(std::make_index_sequence<Inputs>());
  };
};

// The operator's results as a tuple of batches.
template <class Result>
TILEKERN_GPSIMD_INLINE inline auto as_tuple(Result&& result) {
  if constexpr (requires { std::tuple_size<std::remove_cvref_t<Result>>::value; }) {
    return std::forward<Result>(result);
  } else {
    return std::tuple<std::remove_cvref_t<Result>>(std::forward<Result>(result));
  }
}

// Whether elementwise blocks hold their elements interleaved (load_interleaved): when every tensor
// is bf16, on the vector paths (why: widen_bf16_interleaved).
template <class Path, class... T>
constexpr bool interleaved_blocks = Path::level != isa::scalar && (std::is_same_v<T, bf16> && ...);

// Whether elementwise_segment goes from its last block to its first: when the first output starts
// less than 2 KiB after the first input, modulo 4 KiB, and the two do not overlap. Going forward,
// the load of each block would then share the low 12 bits of its address with the store of a
// block or a few before it, and wait for that store (4K aliasing); going backward, those stores
// come after the load. On Zen 4, relu over 1 Mi bf16 ran forward at 0.62 of memcpy with the
// output 64 bytes after the input and at 0.91 with it 1 KiB before; backward, at 0.89 with it 64
// bytes after (CONTRIBUTING.md). glibc's memmove picks its direction for the same reason.
template <class In, class Out>
bool backward(const In* in, const Out* out, std::size_t n) {
  const auto from = reinterpret_cast<std::uintptr_t>(in);
  const auto to = reinterpret_cast<std::uintptr_t>(out);
  const bool overlap = from < to + n * sizeof(Out) && to < from + n * sizeof(In);
  return !overlap && (to - from) % 4096 != 0 && (to - from) % 4096 < 2048;
}

// n elements of each tensor from the pointers on, the first with index `first`: whole blocks (a
// batch, or two interleaved ones), forward or backward (see above; each element's result is the
// same either way), then a last partial block staged through zero-filled buffers, so that nothing
// outside the n elements is touched.
template <class Path, class Op, class... In, class... Out, class Writers>
void elementwise_segment(Op& op, std::tuple<const In*...> in, std::tuple<Out*...> out,
                         const Writers& shared_writers, std::size_t n, std::uint64_t first) {
  constexpr bool interleaved = interleaved_blocks<Path, In..., Out...>;
  constexpr std::size_t lanes = interleaved ? 2 * Path::lanes : Path::lanes;
  const Writers writers = shared_writers;  // a local copy, which the compiler keeps in registers
  const auto call = [&](const auto&... batches) TILEKERN_GPSIMD_INLINE {
    auto results = as_tuple(op(batches...));
    static_assert(std::tuple_size_v<decltype(results)> == sizeof...(Out),
                  "tilekern::gpsimd::elementwise: the operator returns a different number of "
                  "batches than there are outputs (return a std::tuple for several outputs)");
    return results;
  };
  const auto block = [&](std::tuple<const In*...> from, std::tuple<Out*...> to,
                         std::uint64_t index) TILEKERN_GPSIMD_INLINE {
    using batch = typename Path::batch;
    if constexpr (interleaved) {
      const auto pairs = std::apply(
          [](const auto*... p) { return std::make_tuple(load_interleaved<Path>(p)...); }, from);
      auto even = std::apply([&](const auto&... pair) { return call(pair.first...); }, pairs);
      auto odd = std::apply([&](const auto&... pair) { return call(pair.second...); }, pairs);
      for_indices(std::index_sequence_for<Out...>(), [&](auto k) TILEKERN_GPSIMD_INLINE {
        std::get<k>(writers).interleaved(batch(std::get<k>(even)), batch(std::get<k>(odd)),
                                         std::get<k>(to), index);
      });
    } else {
      auto results =
          std::apply([&](const auto*... p) { return call(load_batch<Path>(p)...); }, from);
      for_indices(std::index_sequence_for<Out...>(), [&](auto k) TILEKERN_GPSIMD_INLINE {
        std::get<k>(writers)(batch(std::get<k>(results)), std::get<k>(to), index);
      });
    }
  };
  const auto advance = [](auto pointers, std::ptrdiff_t i) {
    return std::apply([&](auto*... p) { return std::tuple(p + i...); }, pointers);
  };
  const std::size_t blocks = n / lanes, whole = blocks * lanes;
  bool back = false;
  if constexpr (sizeof...(In) != 0) back = backward(std::get<0>(in), std::get<0>(out), n);
  const std::ptrdiff_t step = back ? -std::ptrdiff_t{lanes} : std::ptrdiff_t{lanes};
  // The pointers as locals whose address is never taken, so that they stay in registers: the
  // tail below takes in's and out's, and a vector store may alias anything whose address is taken.
  const auto [from, to] = std::pair(in, out);
  std::ptrdiff_t i = back ? static_cast<std::ptrdiff_t>(whole) + step : 0;
  for (std::size_t b = 0; b != blocks; ++b, i += step) {
    block(advance(from, i), advance(to, i), first + static_cast<std::uint64_t>(i));
  }
  if (whole == n) return;
  const std::size_t rest = n - whole;
  std::tuple<std::array<In, lanes>...> in_tail{};
  std::tuple<std::array<Out, lanes>...> out_tail{};
  for_indices(std::index_sequence_for<In...>(), [&](auto k) {
    std::copy_n(std::get<k>(in) + whole, rest, std::get<k>(in_tail).data());
  });
  block(std::apply([](auto&... a) { return std::tuple<const In*...>(a.data()...); }, in_tail),
        std::apply([](auto&... a) { return std::tuple<Out*...>(a.data()...); }, out_tail),
        first + whole);
  for_indices(std::index_sequence_for<Out...>(), [&](auto k) {
    std::copy_n(std::get<k>(out_tail).data(), rest, std::get<k>(out) + whole);
  });
}

template <class Path, rounding Mode, class Op, class... In, class... Out>
void elementwise_on(Op& op, const std::tuple<view<const In>...>& in,
                    const std::tuple<view<Out>...>& out, std::size_t rows, std::size_t cols,
                    const options& opt) {
  const auto writers = [&]<std::size_t... K>(std::index_sequence<K...>) {
    return std::tuple<batch_writer<Path, Out, Mode>...>(
        batch_writer<Path, Out, Mode>(output_cast(opt.cast, K))...);
  }
  (std::index_sequence_for<Out...>());
  // Without broadcasts or gaps between rows, the tensors are one row of rows * cols elements.
  const bool flat =
      std::apply([&](const auto&... v) { return ((v.contiguous() && v.rows() == rows) && ...); },
                 in) &&
      std::apply([](const auto&... v) { return (v.contiguous() && ...); }, out);
  const std::size_t segment = flat ? rows * cols : cols;
  run_cores(opt, rows * cols, [&](std::size_t core) {
    const range mine = share(rows * cols, core, opt.cores, 4 * Path::lanes);
    for (std::size_t i = mine.begin; i < mine.end;) {
      const std::size_t r = i / segment, c = i % segment;
      const std::size_t end = std::min(mine.end, (r + 1) * segment);
      elementwise_segment<Path>(
          op,
          std::apply([&](const auto&... v) { return std::tuple(row_pointer(v, r) + c...); }, in),
          std::apply([&](const auto&... v) { return std::tuple(row_pointer(v, r) + c...); }, out),
          writers, end - i, i);
      i = end;
    }
  });
}

// ---- row-wise ----

// Where an output row of rowwise_on goes: the row of the output tensor at `to`, whose first element
// has index `first`, encoded by `writer`; `streamed` once stream() has written it. The operator
// gets the sink's type, so it is compiled once per rounding mode; with the mode a value that
// write() switches on, it was compiled once, but rmsnorm (bench/gpsimd_bench.cpp) ran 8% slower.
template <class Path, class Out, rounding Mode>
struct row_sink {
  Out* to;
  std::uint64_t first;
  const batch_writer<Path, Out, Mode>* writer;
  bool streamed = false;

  // to[i] = f(from[i], ...) for i < n, each batch encoded as it is computed.
  template <class Fn, class... In>
  void write(Fn& f, std::size_t n, const In*... from) {
    elementwise_segment<Path>(f, std::tuple<const In*...>(from...), std::tuple<Out*>(to),
                              std::tuple<batch_writer<Path, Out, Mode>>(*writer), n, first);
    streamed = true;
  }
};

// An input of rowwise as inputs() keeps it (a view of const, or a streamed_input): its tensor,
// and the row the operator gets on Path.
template <class T>
const view<const T>& tensor_of(const view<const T>& tensor) {
  return tensor;
}
template <class T>
const view<const T>& tensor_of(const streamed_input<T>& input) {
  return input.tensor;
}
template <class Path, class Input>
struct input_row_of {
  using type = row<const float, typename Path::arch>;
};
template <class Path, class T>
struct input_row_of<Path, streamed_input<T>> {
  using type = input_stream<T, Path>;
};

// The number of inputs before input k that are staged in local memory (not streamed).
template <class... Inputs>
constexpr std::size_t staged_before(std::size_t k) {
  constexpr bool streamed[] = {is_streamed_input<Inputs>::value..., false};
  std::size_t staged = 0;
  for (std::size_t j = 0; j < k; ++j) staged += streamed[j] ? 0 : 1;
  return staged;
}

template <class Op, class Inputs, class... Out>
struct rowwise_accepts;
template <class Op, class... Inputs, class... Out>
struct rowwise_accepts<Op, std::tuple<Inputs...>, Out...> {
  template <class Path>
  struct test {
    // Output rows of one mode: whether the operator takes them does not depend on it.
    static constexpr bool value = std::is_invocable_v<
        Op&, typename input_row_of<Path, Inputs>::type...,
        output_row<typename Path::arch, row_sink<Path, Out, rounding::nearest_even>>...>;
  };
};

// Throws unless the n floats of output k's local row are all +0: what the operator wrote to a
// row it also streamed would stay there for the next row (see stream()).
inline void check_unwritten(const float* local_row, std::size_t n, std::size_t k) {
  if (std::any_of(local_row, local_row + n,
                  [](float v) { return std::bit_cast<std::uint32_t>(v) != 0; })) {
    tilekern::detail::throw_shape_error([&] {
      return "tilekern::gpsimd::rowwise: output " + std::to_string(k) +
             " was streamed and also written in local memory by the same call of the operator; "
             "write an output row one way";
    });
  }
}

// ---- tile-wise ----

template <class Op, class Tile, std::size_t Inputs, std::size_t Outputs>
struct tilewise_accepts {
  template <std::size_t... I, std::size_t... O>
  static constexpr bool check(std::index_sequence<I...>, std::index_sequence<O...>) {
    return std::is_invocable_v<Op&, decltype((void(I), std::declval<const Tile&>()))...,
                               decltype((void(O), std::declval<Tile&>()))...>;
  }
  static constexpr bool value =
      check(std::make_index_sequence<Inputs>(), std::make_index_sequence<Outputs>());
};

// Rows of the tensors staged through local memory (`stride` floats apart), one core's share at a
// time: inputs decoded (one-row inputs once) unless they are streamed, the operator called,
// outputs encoded unless the operator streamed them. Output rows are zeroed once, and then by the
// pass that encodes them (it writes zeros back as it reads), which costs less than clearing them
// before every row; a streamed row is left as it is (checked on the first row of each share).
template <class Path, rounding Mode, class Op, class... Inputs, class... Out>
void rowwise_on(Op& op, const std::tuple<Inputs...>& in, const std::tuple<view<Out>...>& out,
                std::size_t rows, std::size_t cols, std::size_t stride, const options& opt) {
  using arch = typename Path::arch;
  using batch = typename Path::batch;
  const auto identity = [](auto x) TILEKERN_GPSIMD_INLINE { return x; };
  const auto and_zero = [](batch x) TILEKERN_GPSIMD_INLINE { return std::tuple(x, batch(0.0f)); };
  const batch_writer<Path, float, Mode> to_local(cast_options{});
  const auto writers = [&]<std::size_t... K>(std::index_sequence<K...>) {
    return std::tuple<
        std::tuple<batch_writer<Path, Out, Mode>, batch_writer<Path, float, Mode>>...>(
        {batch_writer<Path, Out, Mode>(output_cast(opt.cast, K)), to_local}...);
  }
  (std::index_sequence_for<Out...>());
  run_cores(opt, rows * cols, [&](std::size_t core) {
    const range mine = share(rows, core, opt.cores);
    if (mine.empty()) return;
    const local_memory local(opt.local_bytes);
    float* const base = reinterpret_cast<float*>(local.data());
    const auto array = [&](std::size_t k) { return base + k * stride; };
    constexpr std::size_t staged = staged_before<Inputs...>(sizeof...(Inputs));
    const auto stage_in = [&](auto k, std::size_t r) {
      if constexpr (!is_streamed_input<std::tuple_element_t<k, std::tuple<Inputs...>>>::value) {
        elementwise_segment<Path>(identity, std::tuple(row_pointer(std::get<k>(in), r)),
                                  std::tuple(array(staged_before<Inputs...>(k))),
                                  std::tuple(to_local), cols, 0);
      }
    };
    // The operator's row of input k: its row in local memory, or its tensor's row if streamed.
    const auto input_row = [&](auto k, std::size_t r) {
      using input = std::tuple_element_t<k, std::tuple<Inputs...>>;
      using type = typename input_row_of<Path, input>::type;
      if constexpr (is_streamed_input<input>::value) {
        return type(row_pointer(tensor_of(std::get<k>(in)), r), cols);
      } else {
        return type(array(staged_before<Inputs...>(k)), cols);
      }
    };
    for_indices(std::index_sequence_for<Inputs...>(), [&](auto k) {
      if (tensor_of(std::get<k>(in)).rows() == 1) stage_in(k, 0);  // broadcast: once
    });
    std::fill(array(staged), array(staged + sizeof...(Out)), 0.0f);
    for (std::size_t r = mine.begin; r < mine.end; ++r) {
      for_indices(std::index_sequence_for<Inputs...>(), [&](auto k) {
        if (tensor_of(std::get<k>(in)).rows() != 1) stage_in(k, r);
      });
      auto sinks = [&]<std::size_t... O>(std::index_sequence<O...>) {
        return std::tuple<row_sink<Path, Out, Mode>...>(
            {row_pointer(std::get<O>(out), r), r * cols, &std::get<0>(std::get<O>(writers))}...);
      }
      (std::index_sequence_for<Out...>());
      [&]<std::size_t... I, std::size_t... O>(std::index_sequence<I...>,
                                              std::index_sequence<O...>) {
        op(input_row(std::integral_constant<std::size_t, I>(), r)...,
           output_row<arch, row_sink<Path, Out, Mode>>(array(staged + O), cols,
                                                       std::get<O>(sinks))...);
      }
      (std::index_sequence_for<Inputs...>(), std::index_sequence_for<Out...>());
      for_indices(std::index_sequence_for<Out...>(), [&](auto k) {
        float* const local_row = array(staged + k);
        if (!std::get<k>(sinks).streamed) {
          elementwise_segment<Path>(and_zero, std::tuple<const float*>(local_row),
                                    std::tuple(row_pointer(std::get<k>(out), r), local_row),
                                    std::get<k>(writers), cols, r * cols);
        } else if (r == mine.begin) {
          check_unwritten(local_row, cols, k);
        }
      });
    }
  });
}

}  // namespace detail

// ---- the operator kinds ----

// Calls op(x, ...) on batches of every input, which returns the batches of every output.
template <class Op, class... In, class... Out>
void elementwise(Op op, const input_list<view<const In>...>& in,
                 const output_list<view<Out>...>& out, const options& opt = {}) {
  static_assert(sizeof...(Out) >= 1, "tilekern::gpsimd::elementwise: give at least one output");
  constexpr const char* function = "tilekern::gpsimd::elementwise";
  detail::check_options(function, opt);
  const auto shape = detail::check_shapes(function, in.views, out.views);
  const std::size_t rows = shape.first,
                    cols = shape.second;  // not a structured binding: clang 14 cannot capture one
  if (rows * cols == 0) return;
  using accepts = detail::elementwise_accepts<Op, sizeof...(In)>;
  static_assert(detail::accepted_by_some_path<accepts::template test>(),
                "tilekern::gpsimd::elementwise: the operator must be callable with one "
                "xsimd::batch<float> per input (check the number of parameters; `auto` parameters "
                "take every batch width)");
  detail::with_path<accepts::template test>([&](auto path) {
    tilekern::detail::visit_rounding(opt.cast.round, [&](auto mode) {
      detail::elementwise_on<decltype(path), decltype(mode)::value>(op, in.views, out.views, rows,
                                                                    cols, opt);
    });
  });
}

// Inputs given as streamed() are read by rowwise alone: elementwise reads every input straight
// from its tensor already, and tilewise stages whole tiles.
template <class Op, class... Inputs, class... Outputs>
void elementwise(Op, const input_list<Inputs...>&, const output_list<Outputs...>&,
                 const options& = {}) requires detail::any_streamed<Inputs...> {
  static_assert(sizeof(Op) == 0,
                "tilekern::gpsimd::elementwise: an input is streamed, which only rowwise takes; "
                "give the tensor itself (elementwise reads every input from its tensor)");
}
template <std::size_t Rows, std::size_t Cols, class Op, class... Inputs, class... Outputs>
void tilewise(Op, const input_list<Inputs...>&, const output_list<Outputs...>&,
              const options& = {}) requires detail::any_streamed<Inputs...> {
  static_assert(sizeof(Op) == 0,
                "tilekern::gpsimd::tilewise: an input is streamed, which only rowwise takes; "
                "give the tensor itself");
}

// Calls op(x, ..., y, ...) once per row, with rows of every input decoded into fp32 local memory
// (gpsimd::row), or read from the tensor if the input is streamed() (gpsimd::input_stream), and
// rows of every output (gpsimd::output_row, zero-filled) to write, encoded afterwards, or to
// stream().
template <class Op, class... Inputs, class... Out>
void rowwise(Op op, const input_list<Inputs...>& in, const output_list<view<Out>...>& out,
             const options& opt = {}) {
  static_assert(sizeof...(Out) >= 1, "tilekern::gpsimd::rowwise: give at least one output");
  constexpr const char* function = "tilekern::gpsimd::rowwise";
  constexpr std::size_t arrays =
      detail::staged_before<Inputs...>(sizeof...(Inputs)) + sizeof...(Out);
  detail::check_options(function, opt);
  const auto shape = detail::check_shapes(
      function,
      std::apply([](const auto&... v) { return std::tuple(detail::tensor_of(v)...); }, in.views),
      out.views);
  const std::size_t rows = shape.first,
                    cols = shape.second;  // not a structured binding: clang 14 cannot capture one
  const std::size_t stride = (cols + 15) / 16 * 16;  // floats from one local row to the next
  detail::check_local_memory(
      function, arrays * stride * sizeof(float), opt,
      "a row of " + std::to_string(cols) + " elements in " + std::to_string(arrays) + " arrays");
  if (rows * cols == 0) return;
  using accepts = detail::rowwise_accepts<Op, std::tuple<Inputs...>, Out...>;
  static_assert(detail::accepted_by_some_path<accepts::template test>(),
                "tilekern::gpsimd::rowwise: the operator must be callable with one "
                "gpsimd::row<const float, A> per input (a gpsimd::input_stream if it is "
                "streamed), then one gpsimd::row<float, A> per output (an output_row, which "
                "converts to it; check the number of parameters; `auto` parameters take every "
                "batch width)");
  detail::with_path<accepts::template test>([&](auto path) {
    tilekern::detail::visit_rounding(opt.cast.round, [&](auto mode) {
      detail::rowwise_on<decltype(path), decltype(mode)::value>(op, in.views, out.views, rows, cols,
                                                                stride, opt);
    });
  });
}

// Calls op(x, ..., y, ...) once per Rows x Cols tile of the tensors (row-major tile order), with
// tiles of every input decoded into fp32 local memory and zero-filled tiles of every output.
// Tiles at the right and bottom edges are padded with zeros; what an operator writes to an output
// tile's padding is dropped.
template <std::size_t Rows, std::size_t Cols, class Op, class... In, class... Out>
void tilewise(Op op, const input_list<view<const In>...>& in, const output_list<view<Out>...>& out,
              const options& opt = {}) {
  static_assert(sizeof...(Out) >= 1, "tilekern::gpsimd::tilewise: give at least one output");
  using float_tile = tile<float, Rows, Cols>;
  static_assert(detail::tilewise_accepts<Op, float_tile, sizeof...(In), sizeof...(Out)>::value,
                "tilekern::gpsimd::tilewise: the operator must be callable with a const "
                "tile<float, Rows, Cols>& per input and a tile<float, Rows, Cols>& per output");
  constexpr const char* function = "tilekern::gpsimd::tilewise";
  constexpr std::size_t arrays = sizeof...(In) + sizeof...(Out);
  detail::check_options(function, opt);
  const auto shape = detail::check_shapes(function, in.views, out.views);
  const std::size_t rows = shape.first,
                    cols = shape.second;  // not a structured binding: clang 14 cannot capture one
  detail::check_local_memory(function, arrays * sizeof(float_tile), opt,
                             std::to_string(arrays) + " tiles of " + std::to_string(Rows) + "x" +
                                 std::to_string(Cols) + " fp32");
  const std::size_t tile_rows = (rows + Rows - 1) / Rows, tile_cols = (cols + Cols - 1) / Cols;
  if (tile_rows * tile_cols == 0) return;
  detail::run_cores(opt, rows * cols, [&](std::size_t core) {
    const range mine = share(tile_rows * tile_cols, core, opt.cores);
    if (mine.empty()) return;
    const detail::local_memory local(opt.local_bytes);
    float_tile* const tiles = reinterpret_cast<float_tile*>(local.data());
    for (std::size_t k = 0; k < arrays; ++k) std::construct_at(tiles + k);
    for (std::size_t t = mine.begin; t < mine.end; ++t) {
      const std::size_t r0 = t / tile_cols * Rows, c0 = t % tile_cols * Cols;
      const std::size_t height = std::min(Rows, rows - r0), width = std::min(Cols, cols - c0);
      for (std::size_t k = 0; k < arrays; ++k) std::fill_n(tiles[k].values, float_tile::size, 0.0f);
      detail::for_indices(std::index_sequence_for<In...>(), [&](auto k) {
        for (std::size_t r = 0; r < height; ++r) {
          detail::decode(detail::row_pointer(std::get<k>(in.views), r0 + r) + c0,
                         tiles[k].row(r).data(), width);
        }
      });
      [&]<std::size_t... I, std::size_t... O>(std::index_sequence<I...>,
                                              std::index_sequence<O...>) {
        op(std::as_const(tiles[I])..., tiles[sizeof...(In) + O]...);
      }
      (std::index_sequence_for<In...>(), std::index_sequence_for<Out...>());
      detail::for_indices(std::index_sequence_for<Out...>(), [&](auto k) {
        for (std::size_t r = 0; r < height; ++r) {
          detail::encode(tiles[sizeof...(In) + k].row(r).data(),
                         detail::row_pointer(std::get<k>(out.views), r0 + r) + c0, width,
                         detail::output_cast(opt.cast, k), (r0 + r) * cols + c0);
        }
      });
    }
  });
}

// ---- helpers for the loops inside a row ----

namespace detail {

template <class T>
struct is_input_stream : std::false_type {};
template <class T, class Path>
struct is_input_stream<input_stream<T, Path>> : std::true_type {};

// A row that sum(), max(), transform() and stream() read: a row<float, A> or row<const float, A>
// (an output_row is one), or an input_stream.
template <class X>
concept local_row = std::is_convertible_v<const X&, row<const float, typename X::arch>>;
template <class X>
concept readable_row = local_row<X> || is_input_stream<X>::value;

// How those read a row, a batch at a time from element i: a row's fp32 local memory, or a
// streamed row's tensor row, decoded as the elementwise operators decode it. `padded` reads the
// count < lanes elements left, zero-filled.
template <class Arch>
struct local_reader {
  using batch = xsimd::batch<float, Arch>;
  const float* from;
  TILEKERN_GPSIMD_INLINE batch at(std::size_t i) const { return batch::load_unaligned(from + i); }
  batch padded(std::size_t i, std::size_t count) const {
    alignas(64) float values[batch::size] = {};
    std::copy_n(from + i, count, values);
    return batch::load_aligned(values);
  }
};
template <class T, class Path>
struct stream_reader {
  using batch = typename Path::batch;
  const T* from;
  TILEKERN_GPSIMD_INLINE batch at(std::size_t i) const { return load_batch<Path>(from + i); }
  batch padded(std::size_t i, std::size_t count) const {
    std::array<T, Path::lanes> values{};
    std::copy_n(from + i, count, values.data());
    return load_batch<Path>(values.data());
  }
};
template <class Arch>
local_reader<Arch> reader_of(std::span<const float> x) {  // a row, or any span of fp32
  return {x.data()};
}
template <class Arch, class T, class Path>
stream_reader<T, Path> reader_of(const input_stream<T, Path>& x) {
  return {x.source()};
}

// Calls body(k, offset, valid, batch...) for each batch of the rows (n elements each), the last one
// zero-padded, with `valid` its number of real lanes and k (a std::integral_constant) its index
// modulo Group: a loop over Group batches at a time, so that a body which keeps Group running
// values, one per k, has Group independent chains of operations. Inlined, and the rows read through
// readers held by value, so that the body's captures and the rows' pointers are locals (else each
// store to a row reloads the pointers).
template <class Arch, std::size_t Group, class Body, class... Rows>
TILEKERN_GPSIMD_INLINE inline void for_each_batch(std::size_t n, Body&& body, const Rows&... rows) {
  constexpr std::size_t lanes = xsimd::batch<float, Arch>::size;
  const std::tuple readers(reader_of<Arch>(rows)...);
  const auto call = [&](auto k, std::size_t i, std::size_t valid,
                        auto load) TILEKERN_GPSIMD_INLINE {
    std::apply([&](const auto&... reader)
                   TILEKERN_GPSIMD_INLINE { body(k, i, valid, load(reader)...); },
               readers);
  };
  std::size_t i = 0;
  for (; i + Group * lanes <= n; i += Group * lanes) {
    for_indices(std::make_index_sequence<Group>(), [&](auto k) {
      const std::size_t at = i + k * lanes;
      call(k, at, lanes, [at](const auto& reader) TILEKERN_GPSIMD_INLINE { return reader.at(at); });
    });
  }
  for_indices(std::make_index_sequence<Group>(), [&](auto k) {  // under Group batches are left
    if (i + lanes <= n) {
      call(k, i, lanes, [i](const auto& reader) TILEKERN_GPSIMD_INLINE { return reader.at(i); });
      i += lanes;
    } else if (i < n) {
      call(k, i, n - i, [i, n](const auto& reader) { return reader.padded(i, n - i); });
      i = n;
    }
  });
}

template <class Arch>
xsimd::batch_bool<float, Arch> first_lanes(std::size_t valid) {
  using batch = xsimd::batch<float, Arch>;
  alignas(64) float index[batch::size];
  for (std::size_t j = 0; j < batch::size; ++j) index[j] = static_cast<float>(j);
  return batch::load_aligned(index) < batch(static_cast<float>(valid));
}

// The length of the rows, which must agree.
template <class... Rows>
std::size_t common_size(const char* function, const Rows&... rows) {
  const std::size_t sizes[] = {rows.size()...};
  for (std::size_t k = 1; k < sizeof...(Rows); ++k) {
    tilekern::detail::check_size(function, ("row " + std::to_string(k)).c_str(), sizes[k],
                                 sizes[0]);
  }
  return sizes[0];
}

}  // namespace detail

// The sum over a row of f(x[i], ...), in fp32: batch j of the row (the last one zero-padded) is
// added lane by lane to running sum j mod 4, then the sums as (s0 + s1) + (s2 + s3), then its lanes
// in xsimd::hadd's order. Four running sums, so that an addition does not wait for the one before
// (one sum made a row of 768 elements a chain of 48 dependent additions). The same row gives the
// same bits on the same ISA path. Rows must have the same length.
template <class Fn, detail::readable_row X, class... More>
float sum(Fn f, const X& x, const More&... more) {
  using arch = typename X::arch;
  using batch = xsimd::batch<float, arch>;
  const std::size_t n = detail::common_size("tilekern::gpsimd::sum", x, more...);
  std::array<batch, 4> partial{batch(0.0f), batch(0.0f), batch(0.0f), batch(0.0f)};
  detail::for_each_batch<arch, 4>(
      n,
      [&](auto k, std::size_t, std::size_t valid, auto... values) {
        const batch term = f(values...);
        std::get<k>(partial) +=
            valid == batch::size
                ? term
                : xsimd::select(detail::first_lanes<arch>(valid), term, batch(0.0f));
      },
      x, more...);
  return xsimd::hadd((partial[0] + partial[1]) + (partial[2] + partial[3]));
}
template <detail::readable_row X>
float sum(const X& x) {
  return sum([](auto v) { return v; }, x);
}

// The maximum over a row of f(x[i], ...): NaN if any term is NaN, -inf for an empty row. Four
// running maxima, as sum keeps four running sums.
template <class Fn, detail::readable_row X, class... More>
float max(Fn f, const X& x, const More&... more) {
  using arch = typename X::arch;
  using batch = xsimd::batch<float, arch>;
  const std::size_t n = detail::common_size("tilekern::gpsimd::max", x, more...);
  const batch lowest(-std::numeric_limits<float>::infinity());
  std::array<batch, 4> best{lowest, lowest, lowest, lowest};
  auto nan = batch(0.0f) != batch(0.0f);
  detail::for_each_batch<arch, 4>(
      n,
      [&](auto k, std::size_t, std::size_t valid, auto... values) {
        batch term = f(values...);
        if (valid != batch::size)
          term = xsimd::select(detail::first_lanes<arch>(valid), term, lowest);
        nan = nan || xsimd::isnan(term);  // not term != term: xsimd's != is ordered on AVX
        std::get<k>(best) = xsimd::max(std::get<k>(best), term);
      },
      x, more...);
  if (xsimd::any(nan)) return std::numeric_limits<float>::quiet_NaN();
  alignas(64) float lanes[batch::size];
  xsimd::max(xsimd::max(best[0], best[1]), xsimd::max(best[2], best[3])).store_aligned(lanes);
  return *std::max_element(lanes, lanes + batch::size);
}
template <detail::readable_row X>
float max(const X& x) {
  return max([](auto v) { return v; }, x);
}

// y[i] = f(x[i], ...) over a row.
template <class Fn, class Arch, class... Rows>
void transform(row<float, Arch> y, Fn f, const Rows&... x) {
  using batch = xsimd::batch<float, Arch>;
  const std::size_t n = detail::common_size("tilekern::gpsimd::transform", y, x...);
  detail::for_each_batch<Arch, 1>(
      n,
      [&](auto, std::size_t i, std::size_t valid, auto... values) {
        const batch result = f(values...);
        if (valid == batch::size) {
          result.store_unaligned(y.data() + i);
        } else {
          alignas(64) float lanes[batch::size];
          result.store_aligned(lanes);
          std::copy_n(lanes, valid, y.data() + i);
        }
      },
      x...);
}

// y[i] = f(x[i], ...) over a row, as transform(), except where y is an output row of the operator
// (rowwise): then each batch of results is encoded straight into y's row of the output tensor, as
// the hardware's write stream does, and y's local memory is neither written nor encoded when the
// operator returns. That spares, per fp32 result, its store, its load by the encoding pass and
// the zero that pass writes back.
// Write an output row one way in a call: through its memory, or with stream. A streamed row's
// memory is not cleared for the next row (clearing it would cost what streaming saves), so what the
// operator wrote there would stay; the first row of each core's share is checked, and throws
// shape_error if its memory is not all +0. Streaming a row twice writes the tensor twice.
// On a row<float, Arch> that is not an output row (an operator may take its outputs as such),
// stream is transform.
template <class Fn, class Arch, class... Rows>
void stream(row<float, Arch> y, Fn f, const Rows&... x) {
  transform(y, f, x...);
}
template <class Fn, class Arch, class Sink, class... Rows>
void stream(const output_row<Arch, Sink>& y, Fn f, const Rows&... x) {
  const std::size_t n = detail::common_size("tilekern::gpsimd::stream", y, x...);
  y.sink().write(f, n, detail::reader_of<Arch>(x).from...);
}

// ---- the explicit style ----

// One logical core inside launch(): its identity, its share of the work and its local memory.
class core {
 public:
  std::size_t core_id() const { return id_; }
  std::size_t core_count() const { return options_->cores; }
  const gpsimd::options& options() const { return *options_; }

  // This core's share of n items (see gpsimd::share).
  range share(std::size_t n, std::size_t grain = 1) const {
    return gpsimd::share(n, id_, options_->cores, grain);
  }

  // This core's share of n items in pieces of at most `piece` items: for (range p : chunks(...)).
  class pieces {
   public:
    class iterator {
     public:
      range operator*() const { return {at_, std::min(at_ + piece_, end_)}; }
      iterator& operator++() {
        at_ = std::min(at_ + piece_, end_);
        return *this;
      }
      bool operator==(const iterator&) const = default;

     private:
      friend class pieces;
      iterator(std::size_t at, std::size_t end, std::size_t piece)
          : at_(at), end_(end), piece_(piece) {}
      std::size_t at_, end_, piece_;
    };
    iterator begin() const { return {all_.begin, all_.end, piece_}; }
    iterator end() const { return {all_.end, all_.end, piece_}; }

   private:
    friend class core;
    pieces(range all, std::size_t piece) : all_(all), piece_(piece) {}
    range all_;
    std::size_t piece_;
  };
  pieces chunks(std::size_t n, std::size_t piece) const {
    if (piece == 0) {
      tilekern::detail::throw_shape_error(
          [] { return "tilekern::gpsimd::core::chunks: piece is 0"; });
    }
    return {share(n), piece};
  }

  // The local memory, as fp32.
  std::span<float> local() const {
    return {reinterpret_cast<float*>(local_->data()), local_->bytes() / sizeof(float)};
  }

  // Decodes tensor[part] into to[0, part.size()).
  template <class Tensor>
  void load(const Tensor& tensor, range part, std::span<float> to) const {
    const std::span from(tensor);
    check("load", part, from.size(), to.size());
    detail::decode(from.data() + part.begin, to.data(), part.size());
  }

  // Encodes from[0, part.size()) into tensor[part], with options().cast (or `cast`); the random
  // bits of an element depend on its index in the tensor.
  template <class Tensor>
  void store(std::span<const float> from, Tensor&& tensor, range part) const {
    store(from, std::forward<Tensor>(tensor), part, options_->cast);
  }
  template <class Tensor>
  void store(std::span<const float> from, Tensor&& tensor, range part,
             const cast_options& cast) const {
    const std::span to(tensor);
    check("store", part, to.size(), from.size());
    detail::encode(from.data(), to.data() + part.begin, part.size(), cast, part.begin);
  }

 private:
  template <class Body>
  friend void launch(const gpsimd::options&, Body&&);
  core(std::size_t id, const gpsimd::options& opt, const detail::local_memory& local)
      : id_(id), options_(&opt), local_(&local) {}

  // Every load and store checks its range; the messages are built only when one fails.
  static void check(const char* what, range part, std::size_t tensor, std::size_t local) {
    const auto function = [what] { return std::string("tilekern::gpsimd::core::") + what; };
    if (part.begin > part.end || part.end > tensor) {
      tilekern::detail::throw_shape_error([&] {
        return function() + ": range [" + std::to_string(part.begin) + ", " +
               std::to_string(part.end) + ") is outside the tensor of " + std::to_string(tensor) +
               " elements";
      });
    }
    if (part.size() > local) {
      tilekern::detail::throw_shape_error([&] {
        return function() + ": range has " + std::to_string(part.size()) +
               " elements, more than the local span's " + std::to_string(local);
      });
    }
  }

  std::size_t id_;
  const gpsimd::options* options_;
  const detail::local_memory* local_;
};

// Runs body(core&) once per logical core, as the hardware runs a kernel on each GPSIMD core.
template <class Body>
void launch(const options& opt, Body&& body) {
  static_assert(std::is_invocable_v<Body&, core&>,
                "tilekern::gpsimd::launch: the body must be callable with a gpsimd::core&");
  detail::check_options("tilekern::gpsimd::launch", opt);
  // The work is the body's: as many threads as options allow.
  detail::run_cores(opt, std::numeric_limits<std::size_t>::max(), [&](std::size_t id) {
    const detail::local_memory local(opt.local_bytes);
    core self(id, opt, local);
    body(self);
  });
}

}  // namespace tilekern::gpsimd
