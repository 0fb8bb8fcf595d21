// Between an engine under test and the tests that compare it with the CPU engine (test_gpu.cpp,
// compiled by g++): plain data only, so that neither compiler sees the other's half (nvcc never
// compiles Eigen). bridge.cu implements it with the GPU engine; bridge_standin.cpp with a CPU
// stand-in that rounds differently (float64 arithmetic), so that every check of test_gpu.cpp and
// its tolerances also run where no GPU is.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <rewind/engine.hpp>

namespace gpu_bridge {

/// What one step of the engine produced, in double whatever the model's scalar.
struct step_result {
  double loss = 0;
  std::vector<double> gradients, input_gradient;
  std::vector<double> final_state;  // forward(): the state variables one after the other
  std::vector<double> rewound;      // rewind() of that final state
  std::vector<int> predicted;
  std::size_t peak = 0, plan = 0;   // tracked bytes of the step, and the plan
  std::vector<double> after_sgd;    // parameters after one sgd step on `gradients`
  std::vector<double> adam_gradients, after_adam;  // then a second gradient, and one adam step on it
};

/// The engine behind this bridge, for messages: "cuda" or "cpu stand-in".
std::string engine();

/// Why the engine cannot run here; empty when it can.
std::string unavailable();

/// The runtime scalar every block that has one is bound to.
inline constexpr double mu = 0.6;

/// Blocks the bridge knows: momentum, leapfrog, coupling, three, runtime_mu, affine, conv (tests/dsl/blocks.hpp).
template <class T>
step_result run(const std::string& block, std::size_t depth, const rwd::options& o, const std::vector<T>& params,
                const std::vector<T>& batch, const std::vector<int>& labels, rwd::mode m);

/// Staged networks the bridge knows (tests/dsl/blocks.hpp): "squeeze" (a stem, stages of
/// staged_momentum with squeezes between them) and "pool" (the same with the kept transition
/// pool); the options need batch and classes. No forward state, rewind or input gradient.
template <class T>
step_result run_staged(const std::string& net, const rwd::stages& shape, const rwd::options& o, const std::vector<T>& params,
                       const std::vector<T>& batch, const std::vector<int>& labels, rwd::mode m);

/// The messages of the engine refusing bad input (wrong sizes, non-finite values, bad labels,
/// a setting the engine does not run, reversible past the budget, an alpha from the data that is
/// zero in each float mode), one per line; "(accepted)" for each that was not refused.
std::string refusals();

}  // namespace gpu_bridge
