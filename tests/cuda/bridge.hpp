// Between the GPU engine (bridge.cu, compiled by nvcc) and the tests that compare it with the CPU
// engine (test_gpu.cpp, compiled by g++): plain data only, so that neither compiler sees the
// other's half (nvcc never compiles Eigen).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <rewind/engine.hpp>

namespace gpu_bridge {

/// What one GPU step produced, in double whatever the model's scalar.
struct step_result {
  double loss = 0;
  std::vector<double> gradients, input_gradient;
  std::vector<double> final_state;  // forward(): the state variables one after the other
  std::vector<double> rewound;      // rewind() of that final state
  std::vector<int> predicted;
  std::size_t peak = 0, plan = 0;   // tracked device bytes of the step, and the plan
  std::vector<double> after_sgd, after_adam;  // parameters after one sgd, then one adam step
};

/// Why no GPU engine can run here; empty when one can.
std::string unavailable();

/// Blocks the bridge knows: momentum, leapfrog, coupling, three, runtime_mu, affine (tests/dsl/blocks.hpp).
template <class T>
step_result run(const std::string& block, std::size_t depth, const rwd::options& o, const std::vector<T>& params,
                const std::vector<T>& batch, const std::vector<int>& labels, rwd::mode m);

/// The messages of the GPU model refusing bad input (wrong sizes, non-finite values, bad labels,
/// mode::exact, reversible past the budget), one per line.
std::string refusals();

}  // namespace gpu_bridge
