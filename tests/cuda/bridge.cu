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

namespace {
// a template: nvcc's host pass cannot spell the block's type where it is written out
template <class Block>
std::string refusals_of(Block b) {
  std::string out;
  auto expect = [&](auto&& f) {
    try {
      f();
      out += "(accepted)\n";
    } catch (const rwd::error& e) {
      out += std::string(e.what()) + "\n";
    }
  };
  rwd::cuda::model<float, Block> m(b, 4, {.width = 8, .batch = 3, .classes = 3});
  const std::vector<float> good(24, 0.5f);
  const std::vector<int> labels{0, 1, 2};
  expect([&] { m.loss_and_gradient(std::vector<float>(23, 0.f), labels, rwd::mode::reversible); });
  std::vector<float> nan = good;
  nan[5] = std::nanf("");
  expect([&] { m.loss_and_gradient(nan, labels, rwd::mode::reversible); });
  expect([&] { m.loss_and_gradient(good, std::vector<int>{0, 1, 3}, rwd::mode::reversible); });
  expect([&] { m.loss_and_gradient(good, labels, rwd::mode::exact); });
  expect([&] { m.set_parameters(std::vector<float>(3, 0.f)); });
  expect([&] { m.apply(rwd::adam{.lr = 0.01, .beta2 = 1.0}); });
  m.loss_and_gradient(good, labels, rwd::mode::reversible);  // a good step, then a parameter spoilt on the device
  const float bad = std::nanf("");
  REWIND_CUDA(cudaMemcpy(m.device_parameters() + 3, &bad, sizeof bad, cudaMemcpyHostToDevice));
  expect([&] { m.loss_and_gradient(good, labels, rwd::mode::stored); });
  rwd::cuda::model<float, Block> deep(b, 200, {.width = 8, .batch = 3, .classes = 3});
  expect([&] { deep.loss_and_gradient(good, labels, rwd::mode::reversible); });
  return out;
}
}  // namespace

std::string refusals() { return refusals_of(tb::momentum); }

}  // namespace gpu_bridge
