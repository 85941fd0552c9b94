# What tilekern::tilekern needs, shared by the build and by the installed package config.
include(CMakeFindDependencyMacro)
find_dependency(hwy)
# Debian's xsimd CMake target links a missing xtl; use its include directory directly.
find_path(TILEKERN_XSIMD_INCLUDE_DIR xsimd/xsimd.hpp REQUIRED)
# Optional: the gpsimd engine runs its logical cores on OpenMP threads when it is found, and on
# the calling thread otherwise.
find_package(OpenMP QUIET COMPONENTS CXX)

# -march=VALUE for everything that includes tilekern (and Highway's AVX3_DL target, which
# Highway 1.0.3 requires once -march=native enables it). WHERE is BUILD or INSTALL.
function(tilekern_apply_arch target arch where)
  if(arch STREQUAL "")
    return()
  endif()
  set(options -march=${arch})
  # HWY_DISABLE_PCLMUL_AES: Highway's AVX2 target otherwise also needs AES and PCLMUL, which
  # x86-64-v3 lacks (the build would silently get SSSE3 vectors); tilekern uses neither.
  set(definitions HWY_WANT_AVX3_DL HWY_DISABLE_PCLMUL_AES)
  if(where STREQUAL "BUILD")
    target_compile_options(${target} INTERFACE $<BUILD_INTERFACE:${options}>)
    target_compile_definitions(${target} INTERFACE $<BUILD_INTERFACE:${definitions}>)
  else()
    set_property(TARGET ${target} APPEND PROPERTY INTERFACE_COMPILE_OPTIONS ${options})
    set_property(TARGET ${target} APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS ${definitions})
  endif()
endfunction()
