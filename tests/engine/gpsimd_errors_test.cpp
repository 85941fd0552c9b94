// Runtime errors of the gpsimd engine: shapes that do not fit, options.cores == 0, rows and tiles
// larger than options.local_bytes, core::load/store ranges outside the tensor. Each throws
// tilekern::shape_error (a std::invalid_argument) whose message names the function, the argument
// and both sizes, before anything is written to an output.

#include <doctest/doctest.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gpsimd_support.hpp"

namespace tilekern::test {
namespace {

// Runs f, which must throw shape_error (and so std::invalid_argument) whose message starts with
// `function` and contains every one of `parts`.
template <class F>
void check_shape_error(F&& f, const std::string& function,
                       std::initializer_list<std::string_view> parts) {
  CHECK_THROWS_WITH_AS(f(), doctest::Contains(function.c_str()), shape_error);
  CHECK_THROWS_AS(f(), std::invalid_argument);
  try {
    f();
  } catch (const shape_error& e) {
    const std::string_view message = e.what();
    CHECK_MESSAGE(message.rfind(function + ": ", 0) == 0, message);
    for (std::string_view part : parts) {
      CHECK_MESSAGE(message.find(part) != std::string_view::npos, "\"", message, "\" lacks \"",
                    part, "\"");
    }
  }
}

const auto identity = [](auto x) { return x; };
const auto copy_row = [](auto x, auto y) {
  gpsimd::transform(
      y, [](auto v) { return v; }, x);
};
const auto copy_tile = [](const auto& x, auto& y) { y = x; };

TEST_CASE("gpsimd: outputs of different shapes are a shape_error, nothing written") {
  tensor<float> x(3, 4);
  fill_grid(x, 1);
  tensor<float> y(3, 4);
  tensor<bf16> wide(3, 5), short_(2, 4), tall(4, 4);
  check_shape_error(
      [&] {
        gpsimd::elementwise([](auto v) { return std::tuple(v, v); }, gpsimd::inputs(x.cv()),
                            gpsimd::outputs(y.v(), wide.v()));
      },
      "tilekern::gpsimd::elementwise", {"output 1", "3x5", "3x4"});
  check_shape_error(
      [&] {
        gpsimd::rowwise([](auto, auto, auto) {}, gpsimd::inputs(x.cv()),
                        gpsimd::outputs(y.v(), short_.v()));
      },
      "tilekern::gpsimd::rowwise", {"output 1", "2x4", "3x4"});
  check_shape_error(
      [&] {
        gpsimd::tilewise<2, 2>([](const auto&, auto&, auto&) {}, gpsimd::inputs(x.cv()),
                               gpsimd::outputs(y.v(), tall.v()));
      },
      "tilekern::gpsimd::tilewise", {"output 1", "4x4", "3x4"});
  // The first output sets the shape: here it is the odd one.
  check_shape_error(
      [&] { gpsimd::elementwise(identity, gpsimd::inputs(x.cv()), gpsimd::outputs(wide.v())); },
      "tilekern::gpsimd::elementwise", {"input 0", "3x4", "3x5", "1x5"});
  CHECK(y.all_sentinel());
  CHECK(wide.all_sentinel());
  CHECK(short_.all_sentinel());
  CHECK(tall.all_sentinel());
}

TEST_CASE("gpsimd: an input neither of the output's shape nor one row is a shape_error") {
  tensor<float> y(3, 4, 6);
  tensor<float> good(3, 4), row(1, 4);
  fill_grid(good, 2);
  fill_grid(row, 3);
  struct bad_input {
    std::size_t rows, cols;
  };
  for (bad_input b : {bad_input{2, 4}, bad_input{4, 4}, bad_input{3, 5}, bad_input{1, 5},
                      bad_input{1, 3}, bad_input{0, 4}}) {
    tensor<fp16> bad(b.rows, b.cols);
    fill_grid(bad, 4);
    const std::string shape = std::to_string(b.rows) + "x" + std::to_string(b.cols);
    CAPTURE(shape);
    check_shape_error(
        [&] {
          gpsimd::elementwise([](auto p, auto q, auto) { return p + q; },
                              gpsimd::inputs(good.cv(), row.cv(), bad.cv()),
                              gpsimd::outputs(y.v()));
        },
        "tilekern::gpsimd::elementwise", {"input 2", shape, "3x4", "1x4"});
    check_shape_error(
        [&] {
          gpsimd::rowwise([](auto, auto, auto) {}, gpsimd::inputs(bad.cv(), good.cv()),
                          gpsimd::outputs(y.v()));
        },
        "tilekern::gpsimd::rowwise", {"input 0", shape, "3x4", "1x4"});
    check_shape_error(
        [&] {
          gpsimd::tilewise<8, 8>([](const auto&, const auto&, auto&) {},
                                 gpsimd::inputs(row.cv(), bad.cv()), gpsimd::outputs(y.v()));
        },
        "tilekern::gpsimd::tilewise", {"input 1", shape, "3x4", "1x4"});
    CHECK(y.all_sentinel());
  }
}

TEST_CASE("gpsimd: options.cores == 0 is a shape_error") {
  tensor<float> x(2, 3);
  fill_grid(x, 5);
  tensor<fp8_e4m3> y(2, 3);
  const gpsimd::options none{.cores = 0};
  check_shape_error(
      [&] { gpsimd::elementwise(identity, gpsimd::inputs(x.cv()), gpsimd::outputs(y.v()), none); },
      "tilekern::gpsimd::elementwise", {"options.cores is 0", "at least 1"});
  check_shape_error(
      [&] { gpsimd::rowwise(copy_row, gpsimd::inputs(x.cv()), gpsimd::outputs(y.v()), none); },
      "tilekern::gpsimd::rowwise", {"options.cores is 0", "at least 1"});
  check_shape_error(
      [&] {
        gpsimd::tilewise<2, 2>(copy_tile, gpsimd::inputs(x.cv()), gpsimd::outputs(y.v()), none);
      },
      "tilekern::gpsimd::tilewise", {"options.cores is 0", "at least 1"});
  bool ran = false;
  check_shape_error([&] { gpsimd::launch(none, [&](gpsimd::core&) { ran = true; }); },
                    "tilekern::gpsimd::launch", {"options.cores is 0", "at least 1"});
  CHECK_FALSE(ran);
  // Empty tensors too: the options are checked first.
  tensor<float> empty(0, 3), empty_out(0, 3);
  check_shape_error(
      [&] {
        gpsimd::elementwise(identity, gpsimd::inputs(empty.cv()), gpsimd::outputs(empty_out.v()),
                            none);
      },
      "tilekern::gpsimd::elementwise", {"options.cores is 0"});
  CHECK(y.all_sentinel());
}

TEST_CASE("gpsimd: a row or tile larger than options.local_bytes is a shape_error") {
  tensor<float> x(3, 5000), y(3, 5000);
  fill_grid(x, 6);
  // Two arrays of 5000 fp32 need more than 32 KiB.
  check_shape_error(
      [&] {
        gpsimd::rowwise(copy_row, gpsimd::inputs(x.cv()), gpsimd::outputs(y.v()),
                        {.local_bytes = 32768});
      },
      "tilekern::gpsimd::rowwise",
      {"5000 elements", "2 arrays", "needs ", "options.local_bytes is 32768"});
  CHECK(y.all_sentinel());
  // 64 KiB, the default, holds them.
  gpsimd::rowwise(copy_row, gpsimd::inputs(x.cv()), gpsimd::outputs(y.v()));
  check_elements(
      y, [&](std::size_t r, std::size_t c) { return x(r, c); }, "5000 columns in 64 KiB");

  // Exactly full: two rows of 16 fp32 are 128 bytes.
  tensor<float> a(4, 16), b(4, 16);
  fill_grid(a, 7);
  gpsimd::rowwise(copy_row, gpsimd::inputs(a.cv()), gpsimd::outputs(b.v()), {.local_bytes = 128});
  check_elements(
      b, [&](std::size_t r, std::size_t c) { return a(r, c); }, "rows of 16 in 128 bytes");
  tensor<float> c(4, 16);
  check_shape_error(
      [&] {
        gpsimd::rowwise(copy_row, gpsimd::inputs(a.cv()), gpsimd::outputs(c.v()),
                        {.local_bytes = 124});
      },
      "tilekern::gpsimd::rowwise",
      {"16 elements", "needs 128 bytes", "options.local_bytes is 124"});
  CHECK(c.all_sentinel());

  // Tiles: two 128x128 fp32 tiles are 128 KiB; four 64x64 ones exactly the default 64 KiB.
  tensor<bf16> p(200, 300), q(200, 300);
  fill_grid(p, 8);
  check_shape_error(
      [&] {
        gpsimd::tilewise<128, 128>(copy_tile, gpsimd::inputs(p.cv()), gpsimd::outputs(q.v()));
      },
      "tilekern::gpsimd::tilewise",
      {"2 tiles of 128x128", "needs 131072 bytes", "options.local_bytes is 65536"});
  CHECK(q.all_sentinel());
  tensor<bf16> q2(200, 300), q3(200, 300);
  gpsimd::tilewise<64, 64>(
      [](const auto& x, auto& y0, auto& y1, auto& y2) {
        y0 = x;
        y1 = x;
        y2 = x;
      },
      gpsimd::inputs(p.cv()), gpsimd::outputs(q.v(), q2.v(), q3.v()));
  check_elements(
      q3, [&](std::size_t r, std::size_t c) { return p(r, c); }, "four 64x64 tiles in 64 KiB");
}

TEST_CASE("gpsimd: core::load and core::store outside the tensor are a shape_error") {
  std::vector<float> x(10, 1.0f);
  tensor<fp16> y(1, 10);
  const auto run = [&](auto&& body) { gpsimd::launch({.cores = 3}, body); };
  const auto load = [&](gpsimd::range part, std::size_t local) {
    return [&x, part, local] {
      gpsimd::launch({.cores = 3},
                     [&](gpsimd::core& c) { c.load(x, part, c.local().first(local)); });
    };
  };
  const auto store = [&](gpsimd::range part, std::size_t local) {
    return [&y, part, local] {
      gpsimd::launch({.cores = 3}, [&](gpsimd::core& c) {
        std::span<fp16> to = y.v().row(0);
        c.store(c.local().first(local), to, part);
      });
    };
  };
  check_shape_error(load({5, 12}, 16), "tilekern::gpsimd::core::load", {"[5, 12)", "10 elements"});
  check_shape_error(load({11, 11}, 16), "tilekern::gpsimd::core::load",
                    {"[11, 11)", "10 elements"});
  check_shape_error(load({7, 3}, 16), "tilekern::gpsimd::core::load", {"[7, 3)", "10 elements"});
  check_shape_error(load({0, 10}, 4), "tilekern::gpsimd::core::load", {"10 elements", "4"});
  check_shape_error(store({5, 12}, 16), "tilekern::gpsimd::core::store",
                    {"[5, 12)", "10 elements"});
  check_shape_error(store({3, 2}, 16), "tilekern::gpsimd::core::store", {"[3, 2)", "10 elements"});
  check_shape_error(store({0, 10}, 9), "tilekern::gpsimd::core::store", {"10 elements", "9"});
  CHECK(y.all_sentinel());
  // The boundaries themselves are fine.
  run([&](gpsimd::core& c) {
    std::span<fp16> to = y.v().row(0);
    const std::span<float> local = c.local().first(10);
    c.load(x, {0, 10}, local);
    c.load(x, {10, 10}, local);
    c.store(local, to, {0, 10});
  });
  check_elements(
      y, [](std::size_t, std::size_t) { return fp16::from(1.0); }, "load/store [0, 10)");
  check_shape_error(
      [&] {
        run([](gpsimd::core& c) {
          for (gpsimd::range p : c.chunks(10, 0)) (void)p;
        });
      },
      "tilekern::gpsimd::core::chunks", {"piece is 0"});
}

TEST_CASE("gpsimd: runtime shapes are checked for every kind before the operator runs") {
  // Shapes fine, output shorter than the input's row of one: no call at all.
  tensor<float> x(1, 8), y(2, 7);
  bool called = false;
  check_shape_error(
      [&] {
        gpsimd::elementwise(
            [&](auto v) {
              called = true;
              return v;
            },
            gpsimd::inputs(x.cv()), gpsimd::outputs(y.v()));
      },
      "tilekern::gpsimd::elementwise", {"input 0", "1x8", "2x7", "1x7"});
  CHECK_FALSE(called);
  CHECK(y.all_sentinel());
}

}  // namespace
}  // namespace tilekern::test
