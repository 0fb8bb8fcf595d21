// A CPU stand-in for the GPU half of the engine tests, so that test_gpu.cpp runs everywhere: the
// CPU engine in float64 plays the GPU. Against the float32 CPU engine it differs by float32's
// own rounding, as cuBLAS, which sums in another order, does: the float32 tolerances of
// test_gpu.cpp meet real rounding differences here before they meet a GPU. Peak and plan come
// from a model in the bridge's own scalar.
#include <cmath>

#include <rewind/cpu.hpp>

#include "../dsl/blocks.hpp"
#include "bridge.hpp"
#include "bridge_steps.hpp"

namespace gpu_bridge {
namespace {
namespace tb = test_blocks;

template <class T, class Block>
step_result run_block(Block b, std::size_t depth, const rwd::options& o, const std::vector<T>& params, const std::vector<T>& batch,
                      const std::vector<int>& labels, rwd::mode m) {
  const rwd::env bindings = rwd::env{}.set("mu", mu);
  rwd::cpu::model<double, Block> wide(b, depth, o, bindings);
  std::copy(params.begin(), params.end(), wide.parameters().begin());
  step_result r = record(wide, std::vector<double>(batch.begin(), batch.end()), labels, m);
  rwd::cpu::model<T, Block> own(b, depth, o, bindings);
  own.memory().reset_peak();
  own.loss_and_gradient(batch, labels, m);
  r.peak = own.memory().peak();
  r.plan = own.plan(m).total();
  return r;
}
}  // namespace

template <class T>
step_result run_staged(const std::string& net, const rwd::stages& shape, const rwd::options& o, const std::vector<T>& params,
                       const std::vector<T>& batch, const std::vector<int>& labels, rwd::mode m) {
  return with_staged(net, [&](auto stem, auto down, auto block) {
    const rwd::env bindings = rwd::env{}.set("mu", mu);
    rwd::cpu::staged_model<double, decltype(stem), decltype(block), decltype(down)> wide(stem, down, block, shape, o, bindings);
    std::copy(params.begin(), params.end(), wide.parameters().begin());
    step_result r = record(wide, std::vector<double>(batch.begin(), batch.end()), labels, m);
    rwd::cpu::staged_model<T, decltype(stem), decltype(block), decltype(down)> own(stem, down, block, shape, o, bindings);
    own.memory().reset_peak();
    own.loss_and_gradient(batch, labels, m);
    r.peak = own.memory().peak();
    r.plan = own.plan(m).total();
    return r;
  });
}
template step_result run_staged<float>(const std::string&, const rwd::stages&, const rwd::options&, const std::vector<float>&,
                                       const std::vector<float>&, const std::vector<int>&, rwd::mode);
template step_result run_staged<double>(const std::string&, const rwd::stages&, const rwd::options&, const std::vector<double>&,
                                        const std::vector<double>&, const std::vector<int>&, rwd::mode);

std::string engine() { return "cpu stand-in"; }
std::string unavailable() { return ""; }

template <class T>
step_result run(const std::string& block, std::size_t depth, const rwd::options& o, const std::vector<T>& params,
                const std::vector<T>& batch, const std::vector<int>& labels, rwd::mode m) {
  return with_block(block, [&](auto b) { return run_block<T>(b, depth, o, params, batch, labels, m); });
}
template step_result run<float>(const std::string&, std::size_t, const rwd::options&, const std::vector<float>&, const std::vector<float>&,
                                const std::vector<int>&, rwd::mode);
template step_result run<double>(const std::string&, std::size_t, const rwd::options&, const std::vector<double>&,
                                 const std::vector<double>&, const std::vector<int>&, rwd::mode);

std::string refusals() {
  using model_t = rwd::cpu::model<float, std::remove_cv_t<decltype(tb::momentum)>>;
  refusal_log log;
  common_refusals(
      log, [](std::size_t depth) { return model_t(tb::momentum, depth, {.width = 8, .batch = 3, .classes = 3}); },
      [](model_t& m) { m.parameters()[3] = std::nanf(""); });
  alpha_refusals(log, [](const rwd::options& o) { return rwd::cpu::model<float, std::remove_cv_t<decltype(tb::gated)>>(tb::gated, 6, o); });
  staged_refusals(log, [](const rwd::stages& net, const rwd::options& o) {
    using stem_t = std::remove_cv_t<decltype(tb::stem)>;
    using block_t = std::remove_cv_t<decltype(tb::staged_momentum)>;
    return rwd::cpu::staged_model<float, stem_t, block_t>(tb::stem, tb::staged_momentum, net, o, rwd::env{}.set("mu", mu));
  });
  return log.text();
}

}  // namespace gpu_bridge
