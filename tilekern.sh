#!/usr/bin/env bash
# The project's entry points; each installs what is missing, configures, builds and runs.
#   ./tilekern.sh report      the data-type report (the main job)
#   ./tilekern.sh test        build and run every test (the README's test command)
#   ./tilekern.sh sanitize    the tests again under AddressSanitizer + UndefinedBehaviorSanitizer
#   ./tilekern.sh avx2        the tests but the engine's, built for plain AVX2 (x86-64-v3)
#   ./tilekern.sh bench [ARGS...]   the Google Benchmark suite, ARGS passed through
set -euo pipefail
cd "$(dirname "$0")"

# ocl-icd-opencl-dev: Debian's dnnl-config.cmake requires OpenCL, which libdnnl-dev only recommends;
# without it the benchmarks build with no oneDNN baselines (bench/CMakeLists.txt).
packages=(cmake ninja-build g++ libhwy-dev libxsimd-dev doctest-dev libbenchmark-dev
          libdnnl-dev ocl-icd-opencl-dev libopenblas-dev)

install_missing() {
  local missing=()
  for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ]; then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "missing packages; run as root:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
}

# build PRESET [TARGET...]
build() {
  local preset=$1
  shift
  cmake --preset "$preset" >/dev/null
  if [ $# -gt 0 ]; then
    cmake --build --preset "$preset" -j "$compile_jobs" --target "$@"
  else
    cmake --build --preset "$preset" -j "$compile_jobs"
  fi
}

jobs=$(nproc)
# Compile jobs: one a core, within memory. Two compiles may take up to 9.5 GB each (the heavy pool,
# tests/CMakeLists.txt) and the others up to 6 (tools/report's normalization.cpp: 5 GB). Ninja's
# default, two more jobs than cores, ran four on the 2-core, 24 GB machine of stop 68, which
# thrashed with 24 GB in use.
memory_gb=$(awk '/MemTotal/ {print int($2 / 1048576)}' /proc/meminfo)
compile_jobs=$(((memory_gb - 8) / 6))
[ "$compile_jobs" -gt "$jobs" ] && compile_jobs=$jobs
[ "$compile_jobs" -lt 1 ] && compile_jobs=1
command=${1:-}
[ $# -gt 0 ] && shift
case "$command" in
  report)
    install_missing
    build release tilekern-report
    ./build/release/tools/tilekern-report "$@"
    ;;
  test)
    install_missing
    build release
    ctest --preset release -j "$jobs" "$@"
    ;;
  sanitize)
    install_missing
    build sanitize
    ctest --preset sanitize -j "$jobs" "$@"
    ;;
  avx2)
    install_missing
    build avx2
    ctest --preset avx2 -j "$jobs" "$@"
    ;;
  bench)
    install_missing
    build release tilekern-bench
    ./build/release/bench/tilekern-bench "$@"
    ;;
  *)
    sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$command" ] || [ "$command" = help ] || exit 2
    ;;
esac
