#!/usr/bin/env bash
# The dsl, engine, cpu and cli tests under AddressSanitizer and UndefinedBehaviorSanitizer (no recovery:
# the first report fails the run), in their own build folder, CUDA and MPI off. .ci/run runs it
# before the tests; by hand:  scripts/sanitize.sh   (build-sanitize/, about 5 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
dir=build-sanitize
# -Og: the sanitizers' instrumentation of Eigen's templates makes -O3 builds several times slower;
# -Og compiles in half the time of -O1 (one heavy test file: 50 s against 87) and the tests
# run as fast (17 s)
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# GCC 12 reports its own AVX-512 intrinsics as uninitialized when optimising (GCC bug 105593, inside Eigen)
warn="-Wno-uninitialized -Wno-maybe-uninitialized"
[ -f $dir/CMakeCache.txt ] || cmake -S . -B $dir -G Ninja -DCMAKE_BUILD_TYPE=None -DREWIND_CUDA=OFF -DREWIND_MPI=OFF \
  -DCMAKE_CXX_FLAGS="-Og $flags $warn" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build $dir --target rewind_dsl_tests rewind_engine_tests rewind_cpu_tests rewind_cli_tests
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in rewind_dsl_tests rewind_engine_tests rewind_cpu_tests rewind_cli_tests; do
  echo "sanitizers: $t"
  $dir/bin/$t --minimal
done
echo "sanitizers: the dsl, engine, cpu and cli tests ran clean under ASan and UBSan"
echo "sanitizers: 4 passed, 0 failed"
