// Misuse: a tile without rows.
// Expected: "a tile needs at least one row and column".
#include "tilekern/tile/tile.hpp"

int main() {
#if defined(TILEKERN_COMPILE_FAIL_CONTROL)
  tilekern::tile<float, 1, 4> t;
#else
  tilekern::tile<float, 0, 4> t;
#endif
  return static_cast<int>(t.size);
}
