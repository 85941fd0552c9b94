// Misuse: a launch body that does not take the core.
// Expected: "the body must be callable with a gpsimd::core&".
#include "tilekern/engine/gpsimd.hpp"

int main() {
  namespace gpsimd = tilekern::gpsimd;
  int calls = 0;
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  gpsimd::launch({}, [&](gpsimd::core&) { ++calls; });
#else
  gpsimd::launch({}, [&](int) { ++calls; });
#endif
  return calls == 8 ? 0 : 1;
}
