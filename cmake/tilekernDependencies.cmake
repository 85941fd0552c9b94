# What tilekern::tilekern needs, shared by the build and by the installed package config.
include(CMakeFindDependencyMacro)
find_dependency(hwy)
# Debian's xsimd CMake target links a missing xtl; use its include directory directly.
find_path(TILEKERN_XSIMD_INCLUDE_DIR xsimd/xsimd.hpp REQUIRED)
# Optional: the gpsimd engine runs its logical cores on OpenMP threads when it is found, and on
# the calling thread otherwise.
find_package(OpenMP QUIET COMPONENTS CXX)

# -march=VALUE for everything that includes tilekern, with the definitions Highway 1.0.3 needs.
# WHERE is BUILD or INSTALL.
function(tilekern_apply_arch target arch where)
  if(arch STREQUAL "")
    return()
  endif()
  set(options -march=${arch})
  # HWY_DISABLE_PCLMUL_AES: Highway's AVX2 target otherwise also needs AES and PCLMUL, which
  # x86-64-v3 lacks (the build would silently get SSSE3 vectors); tilekern uses neither.
  # HWY_DISABLED_TARGETS=HWY_AVX3_DL: Highway 1.0.3's AVX3_DL target (chosen once the flags enable
  # AVX-VNNI and VBMI, as -march=native does on Sapphire Rapids) narrows lanes wrongly: its
  # TruncateTo passes vpermb's operands swapped. Its AVX3 target serves those machines.
  set(definitions HWY_DISABLED_TARGETS=HWY_AVX3_DL HWY_DISABLE_PCLMUL_AES)
  if(where STREQUAL "BUILD")
    target_compile_options(${target} INTERFACE $<BUILD_INTERFACE:${options}>)
    target_compile_definitions(${target} INTERFACE $<BUILD_INTERFACE:${definitions}>)
  else()
    set_property(TARGET ${target} APPEND PROPERTY INTERFACE_COMPILE_OPTIONS ${options})
    set_property(TARGET ${target} APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS ${definitions})
  endif()
endfunction()
