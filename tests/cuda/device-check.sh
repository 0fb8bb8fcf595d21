#!/usr/bin/env bash
# The CUDA backend on a lent GPU machine (../shared/device/README.md): builds with nvcc for sm_90
# (no CMake configure: the machine has no Boost, Eigen or doctest packages; their headers come in
# .device-deps/ from ../shared/device/stage-deps.sh), runs the GPU tests and the reference
# benchmark, and writes every log and the benchmark's JSON under $OUT. A short table comes last.
#
#   device run, carry [".device-deps"]:   bash tests/cuda/device-check.sh
# Here, to check that it builds (and skips without a GPU):  OUT=/tmp/out bash tests/cuda/device-check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rewind-device-out}
BUILD=${BUILD:-/tmp/rewind-device-build}
DEPS=${DEPS:-.device-deps/include}
DEPTHS=${DEPTHS:-8,32,128,512}
mkdir -p "$OUT" "$BUILD"
[ -d "$DEPS" ] || DEPS=/usr/include  # on the development machine the packages are installed
INC="-Idsl/include -Ibackends/cpu/include -Ibackends/cuda/include -I$DEPS -isystem $DEPS/eigen3 -isystem /usr/include/eigen3"
NVCC="nvcc -std=c++20 --expt-relaxed-constexpr -O3 -gencode arch=compute_90,code=[sm_90,compute_90] $INC"
CXX="g++ -std=c++20 -O3 -march=native -fopenmp $INC"
LINK="nvcc -Xcompiler -fopenmp -lcublas"
{ nvidia-smi || echo "nvidia-smi: not found"; nvcc --version | tail -2; g++ --version | head -1; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

start=$(date +%s)
( $NVCC tests/cuda/dsl_nvcc.cu -o "$BUILD/dsl_nvcc" ) > "$OUT/build_dsl_nvcc.log" 2>&1 &
( $CXX tests/dsl/main.cpp tests/cuda/test_ops.cpp -o "$BUILD/ops_tests" ) > "$OUT/build_ops.log" 2>&1 &
( $NVCC -c tests/cuda/bridge.cu -o "$BUILD/bridge.o" ) > "$OUT/build_bridge.log" 2>&1 &
( $CXX -c tests/cuda/test_gpu.cpp -o "$BUILD/test_gpu.o" ) > "$OUT/build_test_gpu.log" 2>&1 &
( $NVCC -c examples/cli/gpu.cu -o "$BUILD/gpu.o" ) > "$OUT/build_gpu.log" 2>&1 &
( $CXX -Iexamples -c examples/gpu_benchmark.cpp -o "$BUILD/gpu_benchmark.o" ) > "$OUT/build_benchmark.log" 2>&1 &
wait
$LINK "$BUILD/bridge.o" "$BUILD/test_gpu.o" -o "$BUILD/gpu_tests" >> "$OUT/build_test_gpu.log" 2>&1
$LINK "$BUILD/gpu.o" "$BUILD/gpu_benchmark.o" -o "$BUILD/gpu_benchmark" >> "$OUT/build_benchmark.log" 2>&1
echo "build: $(( $(date +%s) - start )) s"
for b in dsl_nvcc ops_tests gpu_tests gpu_benchmark; do
  [ -x "$BUILD/$b" ] || { echo "build of $b FAILED:"; tail -30 "$OUT"/build_*.log; }
done

status() { case $1 in 0) echo passed;; 77) echo skipped;; *) echo "FAILED ($1)";; esac; }
"$BUILD/dsl_nvcc" > "$OUT/dsl_nvcc.log" 2>&1; r_dsl=$?
"$BUILD/ops_tests" > "$OUT/ops_tests.log" 2>&1; r_ops=$?
"$BUILD/gpu_tests" > "$OUT/gpu_tests.log" 2>&1; r_gpu=$?
"$BUILD/gpu_benchmark" --depths "$DEPTHS" --steps 20 --parity-depths 8,32,128 --json "$OUT/benchmark.json" > "$OUT/benchmark.log" 2>&1
r_bench=$?
tail -5 "$OUT/gpu_tests.log"
echo
echo "dsl kernel from a block:      $(status $r_dsl)"
echo "ops on the host vs the CPU:   $(status $r_ops)"
echo "GPU engine vs CPU engine:     $(status $r_gpu)"
echo "benchmark:                    $(status $r_bench)"
echo
cat "$OUT/benchmark.log"
[ $r_dsl -ne 0 ] && [ $r_dsl -ne 77 ] && exit 1
[ $r_ops -ne 0 ] && exit 1
[ $r_gpu -ne 0 ] && [ $r_gpu -ne 77 ] && exit 1
exit 0
