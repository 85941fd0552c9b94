// The explicit style: gpsimd::share, and launch() with a core's identity, its share and chunks,
// its local memory, and load/store between tensors and local fp32 (stochastic rounding by the
// element's index in the tensor, so any core count gives the same bits).

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <immintrin.h>

#include "engine/gpsimd_support.hpp"

namespace tilekern::test {
namespace {

// Worked by hand: 10 items over 3 cores are 3, 3 and 4; with a grain of 4 (3 grains, the last
// clipped at 10), one grain each: 4, 4 and 2.
static_assert(gpsimd::share(10, 0, 3) == gpsimd::range{0, 3});
static_assert(gpsimd::share(10, 1, 3) == gpsimd::range{3, 6});
static_assert(gpsimd::share(10, 2, 3) == gpsimd::range{6, 10});
static_assert(gpsimd::share(10, 0, 3, 4) == gpsimd::range{0, 4});
static_assert(gpsimd::share(10, 1, 3, 4) == gpsimd::range{4, 8});
static_assert(gpsimd::share(10, 2, 3, 4) == gpsimd::range{8, 10});
static_assert(gpsimd::share(5, 0, 8) == gpsimd::range{0, 0});  // more cores than items
static_assert(gpsimd::share(5, 7, 8) == gpsimd::range{4, 5});
static_assert(gpsimd::share(0, 0, 1) == gpsimd::range{0, 0});

TEST_CASE("gpsimd: range") {
  CHECK(gpsimd::range{3, 7}.size() == 4);
  CHECK_FALSE(gpsimd::range{3, 7}.empty());
  CHECK(gpsimd::range{5, 5}.empty());
  CHECK(gpsimd::range{} == gpsimd::range{0, 0});
  CHECK(gpsimd::range{1, 2} != gpsimd::range{1, 3});
}

// Checks that the shares of [0, n) over `count` cores with `grain` tile [0, n) in core order,
// with bounds on multiples of the grain (or n) and sizes within one grain of each other.
void check_shares(std::size_t n, std::size_t count, std::size_t grain, mismatches& failures) {
  std::size_t at = 0, smallest = std::numeric_limits<std::size_t>::max(), largest = 0;
  for (std::size_t id = 0; id < count; ++id) {
    const gpsimd::range s = gpsimd::share(n, id, count, grain);
    if (s.begin != at || s.end < s.begin || s.end > n) {
      failures.add("n ", n, " count ", count, " grain ", grain, ": core ", id, " has [", s.begin,
                   ", ", s.end, "), expected to start at ", at);
      return;
    }
    if ((s.end % grain != 0 && s.end != n) || (s.begin % grain != 0 && s.begin != n)) {
      failures.add("n ", n, " count ", count, " grain ", grain, ": core ", id,
                   " bound off the grain");
    }
    smallest = std::min(smallest, s.size());
    largest = std::max(largest, s.size());
    at = s.end;
  }
  if (at != n) failures.add("n ", n, " count ", count, " grain ", grain, ": shares end at ", at);
  if (largest - smallest > grain) {
    failures.add("n ", n, " count ", count, " grain ", grain, ": sizes from ", smallest, " to ",
                 largest);
  }
}

TEST_CASE("gpsimd: share covers [0, n) exactly once, in order, within a grain") {
  mismatches failures;
  for (std::size_t n = 0; n <= 300; ++n) {
    for (std::size_t count = 1; count <= 17; ++count) {
      for (std::size_t grain : {1u, 2u, 3u, 4u, 7u, 16u, 64u, 1000u})
        check_shares(n, count, grain, failures);
    }
  }
  for (std::size_t n : {std::size_t{65537}, std::size_t{1000003}, std::size_t{1} << 40,
                        (std::size_t{1} << 62) + 12345}) {
    for (std::size_t count : {1u, 3u, 8u, 64u, 1000u}) {
      for (std::size_t grain : {1u, 16u, 64u, 4096u}) check_shares(n, count, grain, failures);
    }
  }
  CHECK_MESSAGE(failures.count() == 0, failures.text());
}

// ---- launch ----

TEST_CASE("gpsimd: launch runs the body once per core, with its id, count and local memory") {
  for (core_config config : core_configs) {
    CAPTURE(config.cores);
    CAPTURE(config.threads);
    gpsimd::options opt = with_cores({.local_bytes = 4096 + 64}, config);
    std::vector<int> calls(config.cores, 0);
    std::vector<int> good(config.cores, 0);
    std::atomic<int> out_of_range{0};
    gpsimd::launch(opt, [&](gpsimd::core& c) {
      const std::size_t id = c.core_id();
      if (id >= config.cores) {
        ++out_of_range;
        return;
      }
      ++calls[id];
      const std::span<float> local = c.local();
      const bool ok =
          c.core_count() == config.cores && c.options().local_bytes == opt.local_bytes &&
          c.options().cores == config.cores && local.size() == (4096 + 64) / sizeof(float) &&
          reinterpret_cast<std::uintptr_t>(local.data()) % 64 == 0;
      std::fill(local.begin(), local.end(), static_cast<float>(id));  // all of it is usable
      good[id] = ok && std::all_of(local.begin(), local.end(),
                                   [&](float v) { return v == static_cast<float>(id); });
    });
    CHECK(out_of_range == 0);
    CHECK(std::all_of(calls.begin(), calls.end(), [](int n) { return n == 1; }));
    CHECK(std::all_of(good.begin(), good.end(), [](int n) { return n == 1; }));
  }
}

// y = 2 x + 1 through local memory in chunks of `piece`: exact on grid values.
template <class In, class Out>
void check_load_store(std::size_t n, std::size_t piece, const gpsimd::options& opt,
                      const std::string& what, std::uint64_t seed) {
  tensor<In> x(1, n);  // guarded: reading past the end crashes
  fill_grid(x, seed);
  tensor<Out> y(1, n);
  std::vector<std::vector<gpsimd::range>> pieces(opt.cores);
  std::vector<gpsimd::range> shares(opt.cores);
  gpsimd::launch(opt, [&](gpsimd::core& c) {
    const std::span<const In> from = x.cv().row(0);
    std::span<Out> to = y.v().row(0);
    const std::span<float> local = c.local();
    shares[c.core_id()] = c.share(n);
    for (gpsimd::range p : c.chunks(n, piece)) {
      pieces[c.core_id()].push_back(p);
      const std::span<float> buffer = local.first(p.size());
      c.load(from, p, buffer);
      for (float& v : buffer) v = 2.0f * v + 1.0f;
      c.store(buffer, to, p);
    }
  });
  check_elements(
      y,
      [&](std::size_t, std::size_t i) {
        return expected_output<Out>(2 * value_of(x(0, i)) + 1, opt.cast, i);
      },
      what);
  // The chunks: each core's share in order, pieces of at most `piece`, the cores in order.
  mismatches failures;
  std::size_t at = 0;
  for (std::size_t id = 0; id < opt.cores; ++id) {
    if (shares[id] != gpsimd::share(n, id, opt.cores))
      failures.add("core ", id, " share differs from gpsimd::share");
    for (const gpsimd::range& p : pieces[id]) {
      if (p.begin != at || p.empty() || p.size() > piece) {
        failures.add("core ", id, " piece [", p.begin, ", ", p.end, ") after ", at);
      }
      at = p.end;
    }
    if (at != shares[id].end)
      failures.add("core ", id, " pieces end at ", at, ", its share at ", shares[id].end);
  }
  if (at != n) failures.add("pieces end at ", at);
  CHECK_MESSAGE(failures.count() == 0, what, "\n", failures.text());
}

// Every format both ways and one mixed pair, over `lengths` and `pieces` (pieces from 1 to more
// than a share), on every path, under `casts` and `configs`.
constexpr std::size_t all_lengths[] = {0, 1, 15, 16, 17, 1000};
constexpr std::size_t all_pieces[] = {1, 7, 4096};

void check_load_store_everywhere(std::span<const cast_options> casts,
                                 std::span<const core_config> configs,
                                 std::span<const std::size_t> lengths = all_lengths,
                                 std::span<const std::size_t> pieces = all_pieces) {
  for_each_isa([&](isa level) {
    for (const cast_options& cast : casts) {
      for (core_config config : configs) {
        const gpsimd::options opt = with_cores({.cast = cast}, config);
        const std::string where = describe(level, config, cast);
        for (std::size_t n : lengths) {
          for (std::size_t piece : pieces) {
            const std::string what =
                where + " n " + std::to_string(n) + " piece " + std::to_string(piece);
            for_each_test_format([&]<class F>() {
              check_load_store<float, F>(n, piece, opt, "float -> " + format_name<F>() + " " + what,
                                         n + piece);
              check_load_store<F, float>(n, piece, opt, format_name<F>() + " -> float " + what,
                                         n + piece);
            });
            check_load_store<bf16, fp8_e4m3>(n, piece, opt, "bf16 -> fp8_e4m3 " + what, n + piece);
          }
        }
      }
    }
  });
}

TEST_CASE("gpsimd: launch with load and store, each test format, every length") {
  check_load_store_everywhere(quick_casts, quick_core_configs);
  constexpr std::size_t one_length[] = {1000}, one_piece[] = {7};
  check_load_store_everywhere(quick_casts.last(1),
                              std::span<const core_config>(&threaded_config, 1), one_length,
                              one_piece);
}

TEST_SUITE("long") {
  TEST_CASE("gpsimd: launch with load and store, every cast and core count") {
    check_load_store_everywhere(all_casts, core_configs);
  }
}

TEST_CASE("gpsimd: launch with load and store over large primes, any cores and threads") {
  // At the path of this CTest run; stochastic, so every element's index matters.
  const cast_options stochastic = test_casts[1];
  for (core_config config : core_configs) {
    const gpsimd::options opt = with_cores({.cast = stochastic}, config);
    check_load_store<fp16, bf16>(
        65537, 1000, opt, "fp16 -> bf16 65537 " + describe(active_isa(), config, stochastic), 1);
  }
  for (core_config config : {core_config{1, 1}, core_config{8, 0}}) {
    const gpsimd::options opt = with_cores({.cast = stochastic}, config);
    check_load_store<float, fp8_e5m2>(
        1000003, 16384, opt,
        "float -> fp8_e5m2 1000003 " + describe(active_isa(), config, stochastic), 2);
  }
}

TEST_CASE("gpsimd: core::store with its own cast, and into a std::vector") {
  for (core_config config : core_configs) {
    constexpr std::size_t n = 3001;
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i)
      x[i] = 1.0f + static_cast<float>(i) * 0x1p-12f;  // bits below bf16's
    std::vector<bf16> y(n), z(n);
    const cast_options own{rounding::stochastic, overflow::standard, 1234, 9};
    gpsimd::launch(with_cores({.cast = {.round = rounding::toward_zero}}, config),
                   [&](gpsimd::core& c) {
                     const std::span<float> local = c.local();
                     for (gpsimd::range p : c.chunks(n, 500)) {
                       c.load(x, p, local);
                       c.store(local.first(p.size()), y, p);       // options().cast: toward zero
                       c.store(local.first(p.size()), z, p, own);  // its own cast
                     }
                   });
    mismatches failures;
    for (std::size_t i = 0; i < n; ++i) {
      if (y[i].bits() != bf16::from(x[i], {.round = rounding::toward_zero}, i).bits())
        failures.add("y ", i);
      if (z[i].bits() != bf16::from(x[i], own, i).bits()) failures.add("z ", i);
    }
    CHECK_MESSAGE(failures.count() == 0, "cores ", config.cores, "\n", failures.text());
  }
}

TEST_CASE("gpsimd: launch rethrows a core's exception after every core has stopped") {
  for (core_config config : core_configs) {
    if (config.cores < 3) continue;
    std::atomic<int> started{0}, finished{0};
    const auto body = [&](gpsimd::core& c) {
      ++started;
      if (c.core_id() >= 2) {
        ++finished;
        throw std::runtime_error("core " + std::to_string(c.core_id()) + " failed");
      }
      ++finished;
    };
    std::string message;
    try {
      gpsimd::launch(with_cores({}, config), body);
    } catch (const std::runtime_error& e) {
      message = e.what();
      CHECK(started.load() == finished.load());
    }
    // One of the failing cores' exceptions (the lowest, in this implementation).
    CHECK_MESSAGE(message.rfind("core ", 0) == 0, message);
    CHECK(message.find(" failed") != std::string::npos);
  }
}

// Every core runs under the caller's MXCSR, whatever its thread's own. The caller sets FTZ and DAZ
// after a first call has started the threads, which keep the default. Under DAZ an operator reads a
// subnormal as 0, so x + x of one is +0 on every core; and a bf16 output of subnormals passed
// through unchanged keeps their codes (the encoder finds them without vfpclassps, which DAZ
// blinds).
TEST_CASE("gpsimd: every core runs under the caller's MXCSR, and encodes exactly under DAZ") {
  const std::size_t n = 100003;
  std::vector<float> x(n);
  std::vector<bf16> x16(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::ldexp(static_cast<float>(i % 1000 + 1), -140);  // subnormals, 2^-140 .. 2^-130
    x16[i] = bf16::from(x[i]);
  }
  const gpsimd::options opt{.cores = 8, .threads = 2};
  const auto twice = [](auto v) { return v + v; };
  const auto same = [](auto v) { return v; };
  std::vector<float> y(n);
  std::vector<bf16> y16(n), z16(n);
  gpsimd::elementwise(twice, gpsimd::inputs(std::span<const float>(x)),
                      gpsimd::outputs(std::span<float>(y)), opt);
  CHECK(std::count(y.begin(), y.end(), 0.0f) == 0);  // without DAZ: 2x, not 0
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ, DAZ
  gpsimd::elementwise(twice, gpsimd::inputs(std::span<const float>(x)),
                      gpsimd::outputs(std::span<float>(y)), opt);
  gpsimd::elementwise(same, gpsimd::inputs(std::span<const float>(x)),
                      gpsimd::outputs(std::span<bf16>(y16)), opt);
  gpsimd::elementwise(same, gpsimd::inputs(std::span<const bf16>(x16)),
                      gpsimd::outputs(std::span<bf16>(z16)), opt);
  _mm_setcsr(saved);
  std::size_t flushed = 0, kept = 0, kept16 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    flushed += std::bit_cast<std::uint32_t>(y[i]) == 0;
    kept += y16[i].bits() == x16[i].bits();
    kept16 += z16[i].bits() == x16[i].bits();
  }
  CHECK(flushed == n);
  CHECK(kept == n);
  CHECK(kept16 == n);
}

}  // namespace
}  // namespace tilekern::test
