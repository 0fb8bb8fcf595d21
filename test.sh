#!/usr/bin/env bash
# Installs what is missing, builds everything, runs every test (GPU tests skip visibly without a GPU).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh clang-14  # install.consumer builds a program with clang too (as if without OpenMP)
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)"
