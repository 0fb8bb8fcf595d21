#!/usr/bin/env bash
# Configures (once) and builds rewind into build/ (Release, Ninja). Extra arguments are targets.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f build/CMakeCache.txt ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
if [ $# -gt 0 ]; then
  for t in "$@"; do cmake --build build --target "$t"; done
else
  cmake --build build
fi
