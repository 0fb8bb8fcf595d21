#!/usr/bin/env bash
# The device check's verdicts, on binaries the CMake build already made (no second build):
#   no GPU listed by nvidia-smi                        -> "no GPU", exit 77
#   a GPU listed, but the CUDA runtime cannot use it   -> a message naming the driver's CUDA, exit 1
# Usage: device-check-test.sh SCRIPT DSL_NVCC OPS_TESTS GPU_TESTS GPU_BENCHMARK
# Exit 77 (skipped) where a real GPU is usable: the second verdict cannot be staged there.
set -uo pipefail
script=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/fake"
ln -s "$2" "$work/bin/dsl_nvcc"
ln -s "$3" "$work/bin/ops_tests"
ln -s "$4" "$work/bin/gpu_tests"
ln -s "$5" "$work/bin/gpu_benchmark"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "[SKIP] a GPU is listed here: the device check is the real test"
  exit 77
fi
fail=0

OUT=$work/out1 BIN=$work/bin NVIDIA_SMI=$work/none DEPTHS=4 bash "$script" > "$work/no_gpu.log" 2>&1
r=$?
if [ $r -ne 77 ] || ! grep -q '^no GPU' "$work/no_gpu.log"; then
  echo "FAIL: without a GPU the device check exited $r:"; cat "$work/no_gpu.log"; fail=1
else
  echo "ok: without a GPU: exit 77, $(grep '^no GPU' "$work/no_gpu.log")"
fi

cat > "$work/fake/nvidia-smi" <<'SMI'
#!/bin/sh
# an old driver's nvidia-smi: lists a GPU, supports CUDA 11.4
if [ "${1:-}" = "-L" ]; then echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)"; exit 0; fi
echo "| NVIDIA-SMI 470.256.02   Driver Version: 470.256.02   CUDA Version: 11.4     |"
SMI
chmod +x "$work/fake/nvidia-smi"
OUT=$work/out2 BIN=$work/bin NVIDIA_SMI=$work/fake/nvidia-smi DEPTHS=4 bash "$script" > "$work/old_driver.log" 2>&1
r=$?
if [ $r -ne 1 ] || ! grep -q 'cannot use them' "$work/old_driver.log" || ! grep -q 'driver supports CUDA 11.4' "$work/old_driver.log"; then
  echo "FAIL: with a GPU the runtime cannot use, the device check exited $r:"; cat "$work/old_driver.log"; fail=1
else
  echo "ok: a listed GPU the runtime cannot use: exit 1,"
  grep -A1 'cannot use them' "$work/old_driver.log"
fi
[ $fail -eq 0 ] && echo "device check verdicts: 2 passed, 0 failed"
exit $fail
