// The GPU half of the engine tests: runs rwd::cuda::model on what test_gpu.cpp hands over.
#include <rewind/cuda.cuh>

#include "../dsl/blocks.hpp"
#include "bridge.hpp"
#include "bridge_steps.hpp"

namespace gpu_bridge {
namespace {
namespace tb = test_blocks;

template <class T, class Block>
step_result run_block(Block b, std::size_t depth, const rwd::options& o, const std::vector<T>& params, const std::vector<T>& batch,
                      const std::vector<int>& labels, rwd::mode m) {
  rwd::cuda::model<T, Block> model(b, depth, o, rwd::env{}.set("mu", mu));
  model.set_parameters(params);
  return record(model, batch, labels, m);
}
}  // namespace

std::string engine() { return "cuda"; }
std::string unavailable() { return rwd::cuda::no_device().value_or(""); }

template <class T>
step_result run(const std::string& block, std::size_t depth, const rwd::options& o, const std::vector<T>& params,
                const std::vector<T>& batch, const std::vector<int>& labels, rwd::mode m) {
  return with_block(block, [&](auto b) { return run_block<T>(b, depth, o, params, batch, labels, m); });
}
template step_result run<float>(const std::string&, std::size_t, const rwd::options&, const std::vector<float>&, const std::vector<float>&,
                                const std::vector<int>&, rwd::mode);
template step_result run<double>(const std::string&, std::size_t, const rwd::options&, const std::vector<double>&,
                                 const std::vector<double>&, const std::vector<int>&, rwd::mode);

template <class T>
step_result run_staged(const std::string& net, const rwd::stages& shape, const rwd::options& o, const std::vector<T>& params,
                       const std::vector<T>& batch, const std::vector<int>& labels, rwd::mode m) {
  return with_staged(net, [&](auto stem, auto down, auto block) {
    rwd::cuda::staged_model<T, decltype(stem), decltype(block), decltype(down)> model(stem, down, block, shape, o, rwd::env{}.set("mu", mu));
    model.set_parameters(params);
    return record(model, batch, labels, m);
  });
}
template step_result run_staged<float>(const std::string&, const rwd::stages&, const rwd::options&, const std::vector<float>&,
                                       const std::vector<float>&, const std::vector<int>&, rwd::mode);
template step_result run_staged<double>(const std::string&, const rwd::stages&, const rwd::options&, const std::vector<double>&,
                                        const std::vector<double>&, const std::vector<int>&, rwd::mode);

namespace {
// a template: nvcc's host pass cannot spell the block's type where it is written out
template <class Block>
std::string refusals_of(Block b) {
  refusal_log log;
  const auto make = [&](std::size_t depth) { return rwd::cuda::model<float, Block>(b, depth, {.width = 8, .batch = 3, .classes = 3}); };
  common_refusals(log, make, [](auto& m) {  // a parameter spoilt on the device
    const float bad = std::nanf("");
    REWIND_CUDA(cudaMemcpy(m.device_parameters() + 3, &bad, sizeof bad, cudaMemcpyHostToDevice));
  });
  // and what the GPU engine refuses of its own
  auto m = make(4);
  log.expect([&] { m.loss_and_gradient(std::vector<float>(24, 0.5f), std::vector<int>{0, 1, 2}, rwd::mode::exact); });
  log.expect([&] { m.set_parameters(std::vector<float>(3, 0.f)); });
  return log.text();
}
template <class Block>
std::string alpha_refusals_of(Block b) {
  refusal_log log;
  alpha_refusals(log, [&](const rwd::options& o) { return rwd::cuda::model<float, Block>(b, 6, o); });
  return log.text();
}

template <class Stem, class Block>
std::string staged_refusals_of(Stem stem, Block b) {
  refusal_log log;
  staged_refusals(log, [&](const rwd::stages& net, const rwd::options& o) {
    return rwd::cuda::staged_model<float, Stem, Block>(stem, b, net, o, rwd::env{}.set("mu", mu));
  });
  return log.text();
}
}  // namespace

std::string refusals() { return refusals_of(tb::momentum) + alpha_refusals_of(tb::gated) + staged_refusals_of(tb::stem, tb::staged_momentum); }

}  // namespace gpu_bridge
