#!/usr/bin/env bash
# libFuzzer (clang 14, with ASan and UBSan) on what reads outside input: the IDX reader, the
# parameter-file and safetensors loaders and the rewind program's command line, each from its
# committed seed corpus (tests/fuzz/corpus/) for a bounded time. A crash, a leak, a hang, undefined behaviour
# or an exception other than the library's own error fails the run; the input that did it is
# left in build-fuzz/ (crash-*, leak-*, timeout-*): add it to tests/fuzz/corpus/ as a regression.
#   scripts/fuzz.sh [SECONDS per harness, default 60]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
scripts/setup.sh clang-14 libclang-rt-14-dev
dir=build-fuzz
mkdir -p $dir
cxx="clang++-14 -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Idsl/include -Iengine/include -Ibackends/cpu/include -Iexamples"
$cxx tests/fuzz/fuzz_idx.cpp -lz -o $dir/fuzz_idx &
$cxx tests/fuzz/fuzz_params.cpp -o $dir/fuzz_params &
$cxx tests/fuzz/fuzz_safetensors.cpp -o $dir/fuzz_safetensors &
$cxx tests/fuzz/fuzz_command_line.cpp -o $dir/fuzz_command_line &
wait
# two harnesses at a time, one a core (each is one process on one thread)
fuzz() {
  local h=$1
  mkdir -p $dir/corpus_$h
  (cd $dir && ./fuzz_$h -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
     "corpus_$h" "../tests/fuzz/corpus/$h" > "fuzz_$h.log" 2>&1)
}
passed=0 failed=0
for pair in "idx params" "safetensors command_line"; do
  pids=()
  for h in $pair; do
    echo "fuzz: $h for ${seconds} s"
    fuzz $h &
    pids+=($!)
  done
  k=0
  for h in $pair; do
    if wait "${pids[$k]}"; then
      passed=$((passed + 1))
      grep -E "stat::number_of_executed_units|Done" "$dir/fuzz_$h.log" | tail -1
    else
      failed=$((failed + 1))
      echo "fuzz: $h FOUND A PROBLEM:"
      tail -n 40 "$dir/fuzz_$h.log"
    fi
    k=$((k + 1))
  done
done
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
