#!/usr/bin/env bash
# Builds everything with AddressSanitizer + UndefinedBehaviorSanitizer into build-asan
# (-DTEDI_SANITIZE=ON) and runs the whole test suite under it (docs/design.md section 6,
# Testing). Any sanitizer report fails the test that triggered it (UBSan does not recover).
#   scripts/sanitize.sh            configure + build + ctest
#   scripts/sanitize.sh -R cli     extra arguments go to ctest
# Environment: JOBS (parallelism, default 2), CC/CXX (compiler, default the system's).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-asan
JOBS=${JOBS:-2}
if [[ ! -f $BUILD/build.ninja ]]; then
  # -O1: sanitizer builds are slow to compile at -O2 and -O1 keeps stacks readable.
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" \
    -DTEDI_SANITIZE=ON
fi
cmake --build "$BUILD" -j "$JOBS"
# detect_leaks=0: LeakSanitizer needs ptrace, which containers often forbid; leaks are not
# what this run is for. halt_on_error: the first report ends the test with a failure.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:halt_on_error=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure --timeout 600 "$@"
