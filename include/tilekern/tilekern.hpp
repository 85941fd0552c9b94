#pragma once
// Everything in tilekern.

#include "tilekern/engine/gpsimd.hpp"
#include "tilekern/error.hpp"
#include "tilekern/kernels/rmsnorm.hpp"
#include "tilekern/reference/rmsnorm.hpp"
#include "tilekern/simd/convert.hpp"
#include "tilekern/simd/isa.hpp"
#include "tilekern/tile/tile.hpp"
#include "tilekern/tile/view.hpp"
#include "tilekern/types/formats.hpp"
#include "tilekern/types/minifloat.hpp"
#include "tilekern/types/random.hpp"
#include "tilekern/types/rounding.hpp"
