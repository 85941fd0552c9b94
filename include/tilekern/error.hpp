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

// Throws unless `actual == expected`, naming the function, the argument and both sizes.
inline void check_size(const char* function, const char* argument, std::size_t actual,
                       std::size_t expected) {
  if (actual != expected) {
    throw shape_error(std::string(function) + ": " + argument + " has " + std::to_string(actual) +
                      " elements, expected " + std::to_string(expected));
  }
}

}  // namespace detail
}  // namespace tilekern
