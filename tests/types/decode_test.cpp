// Every code of every tested format decodes as the format's definition says.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "types/reference.hpp"

namespace tilekern::test {
namespace {

// The storage the layout comment promises: the smallest of 8, 16, 32 bits, padding below.
template <class F>
constexpr int expected_storage_bits() {
  constexpr int bits = layout<F>::code_bits;
  return bits <= 8 ? 8 : bits <= 16 ? 16 : 32;
}

template <class F>
void check_every_code() {
  using L = layout<F>;
  constexpr int padding = expected_storage_bits<F>() - L::code_bits;
  static_assert(sizeof(F) * 8 == expected_storage_bits<F>());
  static_assert(sizeof(typename F::storage_type) == sizeof(F));

  mismatches failures;
  for (std::uint32_t code = 0; code < L::code_count; ++code) {
    const decoded expected = decode<F>(code);
    const F value = F::from_code(code);
    const auto bits = static_cast<typename F::storage_type>(code << padding);

    if (value.code() != code) failures.add("code() of ", hex(code), " is ", hex(value.code()));
    if (value.bits() != bits) failures.add("bits() of ", hex(code), " is ", hex(value.bits()));
    if (F::from_bits(bits).code() != code) failures.add("from_bits(", hex(bits), ").code()");
    if (F::from_bits(bits).bits() != bits) failures.add("from_bits(", hex(bits), ").bits()");

    if (value.is_nan() != (expected.what == kind::nan)) failures.add("is_nan of ", hex(code));
    if (value.is_inf() != (expected.what == kind::infinity)) failures.add("is_inf of ", hex(code));
    if (value.is_negative() != expected.negative) failures.add("is_negative of ", hex(code));

    const std::uint32_t float_bits = std::bit_cast<std::uint32_t>(value.to_float());
    if (float_bits != decoded_float_bits<F>(code)) {
      failures.add("to_float of ", hex(code), " is ", hex(float_bits), ", expected ",
                   hex(decoded_float_bits<F>(code)));
    }
    if (std::bit_cast<std::uint32_t>(static_cast<float>(value)) != float_bits) {
      failures.add("operator float of ", hex(code));
    }

    const double as_double = value.to_double();
    if (std::signbit(as_double) != expected.negative) failures.add("to_double sign of ", hex(code));
    if (expected.what == kind::nan) {
      // As to_float, widened: the double NaN carries the same payload bits.
      const std::uint64_t want =
          std::bit_cast<std::uint64_t>(static_cast<double>(std::bit_cast<float>(float_bits)));
      if (!std::isnan(as_double) || std::bit_cast<std::uint64_t>(as_double) != want) {
        failures.add("to_double of NaN ", hex(code));
      }
    } else if (std::bit_cast<std::uint64_t>(as_double) !=
               std::bit_cast<std::uint64_t>(expected.value())) {
      failures.add("to_double of ", hex(code), " is ", as_double, ", expected ", expected.value());
    }
    if (std::bit_cast<std::uint64_t>(static_cast<double>(value)) !=
        std::bit_cast<std::uint64_t>(as_double)) {
      failures.add("operator double of ", hex(code));
    }
  }
  INFO(format_name<F>(), ":\n", failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("decode: every code of every format matches the definition") {
  for_each_tested_format([]<class F>() {
    CAPTURE(format_name<F>());
    check_every_code<F>();
  });
}

TEST_CASE("decode: the storage layouts") {
  CHECK(sizeof(bf16) == 2);
  CHECK(sizeof(fp16) == 2);
  CHECK(sizeof(tf32) == 4);
  CHECK(sizeof(fp8_e4m3) == 1);
  CHECK(sizeof(fp8_e4m3fn) == 1);
  CHECK(sizeof(fp8_e5m2) == 1);
  CHECK(sizeof(fp8_e3m4) == 1);
  CHECK(sizeof(minifloat<3, 2, 3>) == 1);
  CHECK(tf32::padding_bits == 13);
  CHECK(minifloat<2, 1, 1>::padding_bits == 4);
  // Hand-decoded codes, one per kind, as a cross-check on the reference itself.
  CHECK(decode<bf16>(0x3f80).value() == 1.0);
  CHECK(decode<fp16>(0x3c00).value() == 1.0);
  CHECK(decode<fp16>(0x0001).value() == 0x1p-24);
  CHECK(decode<fp8_e4m3>(0x77).value() == 240.0);
  CHECK(decode<fp8_e4m3>(0x78).what == kind::infinity);
  CHECK(decode<fp8_e4m3>(0x79).what == kind::nan);
  CHECK(decode<fp8_e4m3fn>(0x7e).value() == 448.0);
  CHECK(decode<fp8_e4m3fn>(0x78).value() == 256.0);
  CHECK(decode<fp8_e4m3fn>(0xff).what == kind::nan);
  CHECK(decode<fp8_e5m2>(0x7b).value() == 57344.0);
  CHECK(decode<fp8_e3m4>(0x6f).value() == 15.5);
  CHECK(decode<fp8_e3m4>(0x01).value() == 0x1p-6);
  CHECK(decode<minifloat<2, 1, 1>>(0x3).value() ==
        1.5);  // 0.01.1: exponent 1 - bias 1, mantissa 1.1b
}

TEST_CASE("decode: tf32 is fp32 with the low 13 bits zero, and ignores them when set") {
  mismatches failures;
  for (std::uint32_t code = 0; code < layout<tf32>::code_count; ++code) {
    const tf32 value = tf32::from_code(code);
    const std::uint32_t bits = value.bits();
    if ((bits & 0x1fffu) != 0) failures.add("padding of ", hex(code));
    if (!value.is_nan() && std::bit_cast<std::uint32_t>(value.to_float()) != bits) {
      failures.add("bits of ", hex(code), " are not the fp32 pattern");
    }
    // Any padding decodes as none: the same code, kind and value.
    const std::uint32_t padding = ((code * 0x9e3779b9u) & 0x1fffu) | 1u;
    const tf32 padded = tf32::from_bits(bits | padding);
    if (padded.code() != code || padded.is_nan() != value.is_nan() ||
        padded.is_inf() != value.is_inf() || padded.is_negative() != value.is_negative() ||
        std::bit_cast<std::uint32_t>(padded.to_float()) !=
            std::bit_cast<std::uint32_t>(value.to_float())) {
      failures.add("padding ", hex(padding), " changes the decoding of ", hex(code));
    }
  }
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("decode: bf16 is the top half of fp32") {
  mismatches failures;
  for (std::uint32_t code = 0; code < 0x10000; ++code) {
    const bf16 value = bf16::from_bits(static_cast<std::uint16_t>(code));
    if (!value.is_nan() && std::bit_cast<std::uint32_t>(value.to_float()) != code << 16) {
      failures.add(hex(code));
    }
  }
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("decode: padding bits of a 1-bit mantissa format are ignored") {
  using F = minifloat<2, 1, 1>;
  for (std::uint32_t code = 0; code < 16; ++code) {
    for (std::uint32_t padding = 1; padding < 16; ++padding) {
      const F padded = F::from_bits(static_cast<std::uint8_t>(code << 4 | padding));
      CHECK(padded.code() == code);
      CHECK(std::bit_cast<std::uint32_t>(padded.to_float()) == decoded_float_bits<F>(code));
    }
  }
}

}  // namespace
}  // namespace tilekern::test
