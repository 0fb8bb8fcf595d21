#!/usr/bin/env bash
# The CUDA backend on a lent GPU machine (../shared/device/README.md, tests/cuda/README.md): builds
# with nvcc for sm_90 (no CMake configure: the machine has no Boost, Eigen or doctest packages;
# their headers come in .device-deps/ from ../shared/device/stage-deps.sh), runs the GPU tests and
# the reference benchmark, and writes every log, the timings and the benchmark's JSON under $OUT.
# A short table comes last.
#
#   device run, carry [".device-deps"]:   bash tests/cuda/device-check.sh
#   here, to check that it builds:        OUT=/tmp/out bash tests/cuda/device-check.sh
#
# Exit status: 0 when every GPU test and the benchmark passed on a GPU; 77 when no GPU is listed
# by nvidia-smi (everything is still built, and the host tests run); 1 otherwise: a build or test
# failed, or nvidia-smi lists a GPU that the CUDA runtime cannot use (a driver too old for this
# toolkit, say): on a machine with a GPU, a skipped GPU test is a failure.
#
# Environment: OUT, BUILD (folders), DEPS (headers), DEPTHS (benchmark), NVCC (the compiler),
# BIN (a folder of already built dsl_nvcc, ops_tests, gpu_tests and gpu_benchmark: no build),
# NVIDIA_SMI (the nvidia-smi to ask), STEP_TIMEOUT (seconds for each test binary, default 300).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rewind-device-out}
BUILD=${BUILD:-/tmp/rewind-device-build}
DEPS=${DEPS:-.device-deps/include}
DEPTHS=${DEPTHS:-8,32,128,512}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
mkdir -p "$OUT" "$BUILD"
summary="$OUT/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

# --- the machine: which GPUs the driver lists, and which CUDA version it supports ------------------
gpus=0
driver_cuda=unknown
if command -v "$NVIDIA_SMI" >/dev/null 2>&1; then
  "$NVIDIA_SMI" > "$OUT/nvidia-smi.txt" 2>&1
  gpus=$("$NVIDIA_SMI" -L 2>/dev/null | grep -c '^GPU ')
  driver_cuda=$(grep -o 'CUDA Version: *[0-9.]*' "$OUT/nvidia-smi.txt" | grep -o '[0-9.]*$' || echo unknown)
else
  echo "nvidia-smi: not found" > "$OUT/nvidia-smi.txt"
fi

# --- the build (skipped when BIN names already built binaries) ------------------------------------
NVCC=${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}
toolkit=unknown
[ -x "$NVCC" ] && toolkit=$("$NVCC" --version | grep -o 'release [0-9.]*' | grep -o '[0-9.]*$')
if [ -n "${BIN:-}" ]; then
  BUILD=$BIN
  say "build: skipped, binaries from $BIN"
else
  if [ ! -x "$NVCC" ]; then
    say "device-check: no nvcc (looked on the PATH and in ${CUDA_HOME:-/usr/local/cuda}/bin)"
    exit 1
  fi
  cuda_root=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  libdir=$cuda_root/lib64
  [ -d "$libdir" ] || libdir=$cuda_root/targets/x86_64-linux/lib
  [ -d "$DEPS" ] || DEPS=/usr/include  # on the development machine the packages are installed
  INC="-Idsl/include -Iengine/include -Ibackends/cpu/include -Ibackends/cuda/include -Iexamples -I$DEPS -isystem $DEPS/eigen3 -isystem /usr/include/eigen3"
  NVCCF="$NVCC -std=c++20 --expt-relaxed-constexpr -O3 -gencode arch=compute_90,code=[sm_90,compute_90] $INC"
  CXX="g++ -std=c++20 -O3 -march=native -fopenmp $INC"
  # cuBLAS and the CUDA runtime are found through an rpath to the toolkit's library folder
  LINK="$NVCC -Xcompiler -fopenmp -L$libdir -Xlinker -rpath=$libdir -lcublas"
  { echo "nvcc: $NVCC ($toolkit), libraries $libdir"; g++ --version | head -1; } > "$OUT/toolchain.txt" 2>&1
  rm -f "$BUILD"/{dsl_nvcc,ops_tests,gpu_tests,gpu_benchmark}
  start=$(date +%s)
  ( $NVCCF tests/cuda/dsl_nvcc.cu -o "$BUILD/dsl_nvcc" ) > "$OUT/build_dsl_nvcc.log" 2>&1 &
  ( $CXX tests/dsl/main.cpp tests/cuda/test_ops.cpp -o "$BUILD/ops_tests" ) > "$OUT/build_ops.log" 2>&1 &
  ( $NVCCF -c tests/cuda/bridge.cu -o "$BUILD/bridge.o" ) > "$OUT/build_bridge.log" 2>&1 &
  ( $CXX -c tests/cuda/test_gpu.cpp -o "$BUILD/test_gpu.o" ) > "$OUT/build_test_gpu.log" 2>&1 &
  ( $NVCCF -c examples/cli/gpu.cu -o "$BUILD/gpu.o" ) > "$OUT/build_gpu.log" 2>&1 &
  ( $CXX -c examples/gpu_benchmark.cpp -o "$BUILD/gpu_benchmark.o" ) > "$OUT/build_benchmark.log" 2>&1 &
  wait
  [ -f "$BUILD/bridge.o" ] && [ -f "$BUILD/test_gpu.o" ] &&
    $LINK "$BUILD/bridge.o" "$BUILD/test_gpu.o" -o "$BUILD/gpu_tests" >> "$OUT/build_test_gpu.log" 2>&1
  [ -f "$BUILD/gpu.o" ] && [ -f "$BUILD/gpu_benchmark.o" ] &&
    $LINK "$BUILD/gpu.o" "$BUILD/gpu_benchmark.o" -o "$BUILD/gpu_benchmark" >> "$OUT/build_benchmark.log" 2>&1
  say "build: $(( $(date +%s) - start )) s (nvcc $toolkit)"
fi
for b in dsl_nvcc ops_tests gpu_tests gpu_benchmark; do
  if [ ! -x "$BUILD/$b" ]; then
    say "device-check: the build of $b FAILED; the logs:"
    tail -n 30 "$OUT"/build_*.log
    exit 1
  fi
done

# --- the runs ------------------------------------------------------------------------------------
timed() {  # name, then the command: runs it under a time limit, logs to $OUT/name.log
  local name=$1
  shift
  local t0
  t0=$(date +%s)
  timeout "$STEP_TIMEOUT" "$@" > "$OUT/$name.log" 2>&1
  local r=$?
  [ $r = 124 ] && echo "device-check: $name ran past ${STEP_TIMEOUT} s and was stopped" >> "$OUT/$name.log"
  say "$name: exit $r in $(( $(date +%s) - t0 )) s"
  return $r
}
timed dsl_nvcc "$BUILD/dsl_nvcc"; r_dsl=$?
timed ops_tests "$BUILD/ops_tests"; r_ops=$?
timed gpu_tests "$BUILD/gpu_tests"; r_gpu=$?
timed benchmark "$BUILD/gpu_benchmark" --depths "$DEPTHS" --steps 20 --parity-depths 8,32,128 --json "$OUT/benchmark.json"; r_bench=$?

status() { case $1 in 0) echo passed;; 77) echo skipped;; 124) echo "FAILED (time limit)";; *) echo "FAILED ($1)";; esac; }
tail -n 5 "$OUT/gpu_tests.log"
echo
say "GPUs listed by nvidia-smi:     $gpus (driver supports CUDA $driver_cuda; toolkit $toolkit)"
say "dsl kernel from a block:       $(status $r_dsl)"
say "ops on the host vs the CPU:    $(status $r_ops)"
say "GPU engine vs CPU engine:      $(status $r_gpu)"
say "benchmark:                     $(status $r_bench)"
echo
cat "$OUT/benchmark.log"

[ $r_ops -ne 0 ] && { say "device-check: the host tests failed (ops_tests.log)"; exit 1; }
if [ "$gpus" -eq 0 ]; then
  for r in $r_dsl $r_gpu $r_bench; do
    [ "$r" -ne 77 ] && [ "$r" -ne 0 ] && { say "device-check: a GPU binary failed without a GPU (see its log)"; exit 1; }
  done
  say "no GPU: nvidia-smi lists none; the GPU tests were built and skipped"
  exit 77
fi
if [ $r_dsl -eq 77 ] || [ $r_gpu -eq 77 ] || [ $r_bench -eq 77 ]; then
  why=$(grep -h -m1 -o '\[SKIP\].*' "$OUT/gpu_tests.log" "$OUT/dsl_nvcc.log" "$OUT/benchmark.log" | head -n 1)
  say "device-check: nvidia-smi lists $gpus GPU(s), but the CUDA runtime cannot use them: ${why:-no reason given}"
  say "  the driver supports CUDA $driver_cuda, the build used toolkit $toolkit: a driver older than the toolkit cannot run"
  say "  its binaries (cudaErrorInsufficientDriver); update the driver or build with an older toolkit (NVCC=...)"
  exit 1
fi
for r in $r_dsl $r_gpu $r_bench; do
  [ "$r" -ne 0 ] && { say "device-check: FAILED; read the logs above (rerun one binary with CUDA_LAUNCH_BLOCKING=1)"; exit 1; }
done
say "device-check: all passed on the GPU"
exit 0
