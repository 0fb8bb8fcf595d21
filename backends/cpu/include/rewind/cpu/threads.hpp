// rewind cpu: threads. The GEMMs run on Eigen's OpenMP threads when rewind::cpu is built with
// OpenMP, and so do the exact mode's fixed-point loops (their elements are independent); the other
// elementwise passes are single-threaded. For a given thread count the results are
// bit-identical from run to run (Eigen splits a product the same way every time).
#pragma once

#include <Eigen/Core>

namespace rwd::cpu {

/// Sets the number of threads of the GEMMs (0: Eigen's default, the number of cores).
inline void set_threads(int n) { Eigen::setNbThreads(n); }
inline int threads() { return Eigen::nbThreads(); }

}  // namespace rwd::cpu
