// The exact-mode tile benchmark's interface between its driver (main.cpp) and the timed runs
// (run.cpp, compiled once per build compared). No rewind types: the two builds' differ.
#pragma once

#include <cstddef>
#include <string>

struct tiles_config {
  std::size_t elements = 0;  // one chunk: samples x 784
  int layers = 0;
  std::string loops;  // the copy of the loops ("avx512", "avx2", "portable"), or empty: the widest
};

struct tiles_time {
  double forward = 0, rewind = 0;  // seconds
  bool exact = false;              // the rewind gave back zero states and an empty ledger
  std::size_t planes = 0;          // the ledger's planes at the end (kept after it emptied)
};
