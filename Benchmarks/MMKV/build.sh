#!/usr/bin/env bash
# Builds mmkv-bench: MMKV's Core (its own CMakeLists.txt, Release: -O3 -DNDEBUG) and
# mmkv-bench.cpp linked against it, in <build dir>. Prints the binary's path on stdout; the
# build's output goes to stderr.
#
#   Benchmarks/MMKV/build.sh <MMKV checkout at v2.4.2> <build dir>
#
# JOBS=n sets the parallel compile jobs (default 1). Needs cmake (3.10 or later) and a C++20
# compiler (g++ 10 or later); MMKV links the system zlib when it finds it (zlib1g-dev) and
# builds its own crc32 otherwise. The checkout is only read, except that MMKV's Core/CMakeLists.txt
# copies its public headers into <checkout>/Core/include at configure time.

set -euo pipefail

usage() {
    echo "usage: $0 <MMKV checkout at v2.4.2> <build dir>" >&2
    exit 2
}
[[ $# -eq 2 ]] || usage

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mmkv=$(cd "$1" 2>/dev/null && pwd) || { echo "build.sh: no such directory: $1" >&2; exit 1; }
mkdir -p "$2"
build=$(cd "$2" && pwd)
jobs=${JOBS:-1}

if [[ ! -f $mmkv/Core/CMakeLists.txt || ! -f $mmkv/Core/MMKV.h ]]; then
    echo "build.sh: $mmkv is not an MMKV checkout (no Core/CMakeLists.txt, Core/MMKV.h)" >&2
    exit 1
fi
for tool in cmake c++; do
    command -v "$tool" >/dev/null || { echo "build.sh: $tool is not installed" >&2; exit 1; }
done
# The figures are MMKV v2.4.2's; say so when the checkout is another version.
if git -C "$mmkv" rev-parse --git-dir >/dev/null 2>&1; then
    tag=$(git -C "$mmkv" describe --tags --exact-match 2>/dev/null || true)
    if [[ $tag != v2.4.2 ]]; then
        echo "build.sh: warning: $mmkv is at '${tag:-$(git -C "$mmkv" rev-parse --short HEAD)}', not v2.4.2" >&2
    fi
fi

# A small CMake project of our own: MMKV's Core as a subdirectory (so its definitions and its
# zlib link come with it) and the driver.
mkdir -p "$build/project"
cat >"$build/project/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.10)
project(mmkv_bench C CXX)
add_subdirectory("${MMKV_CORE}" core)
add_executable(mmkv-bench "${BENCH_SOURCE}")
target_link_libraries(mmkv-bench PRIVATE core pthread)
set_target_properties(mmkv-bench PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
EOF

started=$SECONDS
cmake -S "$build/project" -B "$build/cmake" \
    -DCMAKE_BUILD_TYPE=Release \
    -DMMKV_CORE="$mmkv/Core" \
    -DBENCH_SOURCE="$here/mmkv-bench.cpp" >&2
cmake --build "$build/cmake" --target mmkv-bench -j "$jobs" >&2
echo "build.sh: built in $((SECONDS - started)) s with $jobs job(s)" >&2

echo "$build/cmake/mmkv-bench"
