#pragma once
// The errors tilekern throws.

#include <cstddef>
#include <stdexcept>
#include <string>

namespace tilekern {

// A runtime shape that does not fit. Thrown before any memory is touched.
class shape_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {

// Throws shape_error(message()). The views, engines and kernels throw through here, with the
// message built in a lambda: the string building then lives in this cold function, not in the
// function that checks, which stays small enough to inline. (view::block, which built its message
// in place, was a call of its own at every block of every kernel: a layernorm of one row of 768
// floats took 400 ns, and 310-320 once every check threw from here.)
template <class Message>
[[noreturn, gnu::cold, gnu::noinline]] void throw_shape_error(const Message& message) {
  throw shape_error(message());
}

// Throws unless `actual == expected`, naming the function, the argument and both sizes.
inline void check_size(const char* function, const char* argument, std::size_t actual,
                       std::size_t expected) {
  if (actual != expected) {
    detail::throw_shape_error([&] {
      return std::string(function) + ": " + argument + " has " + std::to_string(actual) +
             " elements, expected " + std::to_string(expected);
    });
  }
}

}  // namespace detail
}  // namespace tilekern
