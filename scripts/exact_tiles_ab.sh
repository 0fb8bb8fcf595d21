#!/usr/bin/env bash
# The exact mode's tiles of this working tree against revision REV's (default HEAD), in one
# process, alternating every round (rewind_exact_tiles; on a shared machine only an interleaved
# ratio resolves a few percent). Both are compiled here with the same flags: REV's headers under
# a renamed namespace (-Drwd=rwd_base), this tree's as they are.
#   scripts/exact_tiles_ab.sh [REV] [--samples 32 --layers 512 --rounds 9 --exact-loops avx2 ...]
# CXXFLAGS replaces -march=native (e.g. -march=x86-64-v3 to time the AVX2 copy as an AVX2 CPU
# runs it, or -march=x86-64 for a build without -march).
set -euo pipefail
cd "$(dirname "$0")/.."
rev=HEAD
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then rev=$1; shift; fi
work=$(mktemp -d)
trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach "$work/base" "$rev" >/dev/null 2>&1
cxx=${CXX:-g++}
# shellcheck disable=SC2206  # CXXFLAGS: words, as make reads it
flags=(-std=c++20 -O3 ${CXXFLAGS:--march=native} -fopenmp -DNDEBUG -I/usr/include/eigen3 -Iexamples/exact_tiles)
headers() { echo "-I$1/backends/cpu/include -I$1/engine/include -I$1/dsl/include"; }
# shellcheck disable=SC2046
"$cxx" "${flags[@]}" $(headers "$work/base") -Drwd=rwd_base -DREWIND_TILES_RUN=run_tiles_base -c examples/exact_tiles/run.cpp -o "$work/base.o" &
pids=($!)
# shellcheck disable=SC2046
"$cxx" "${flags[@]}" $(headers .) -c examples/exact_tiles/run.cpp -o "$work/here.o" &
pids+=($!)
"$cxx" "${flags[@]}" -DREWIND_TILES_BASE -c examples/exact_tiles/main.cpp -o "$work/main.o" &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
"$cxx" -fopenmp "$work/main.o" "$work/here.o" "$work/base.o" -o "$work/exact_tiles_ab"
echo "this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ', changed')) against $rev ($(git rev-parse --short "$rev"))"
"$work/exact_tiles_ab" "$@"
