// The GPU engine against the CPU engine on identical weights and batches: loss, gradients, input
// gradient, forward, rewind, predictions, one SGD and one Adam step, in float64 (1e-12 relative)
// and in float32 inside the budget (1e-5); tracked device bytes equal to the plan; bad input
// refused. Without a GPU: exit 77 (skipped), saying how many GPU test cases did not run.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <random>

#include <rewind/cpu.hpp>

#include "../dsl/blocks.hpp"
#include "bridge.hpp"

namespace {
namespace tb = test_blocks;
using gpu_bridge::step_result;

template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  return {v.begin(), v.end()};
}

template <class T, class Block>
step_result cpu_block(Block b, std::size_t depth, const rwd::options& o, const std::vector<T>& params, const std::vector<T>& batch,
                      const std::vector<int>& labels, rwd::mode m) {
  rwd::cpu::model<T, Block> model(b, depth, o, rwd::env{}.set("mu", 0.6));
  std::copy(params.begin(), params.end(), model.parameters().begin());
  step_result r;
  r.loss = model.loss_and_gradient(batch, labels, m);
  r.plan = model.plan(m).total();
  r.gradients.assign(model.gradients().begin(), model.gradients().end());
  r.input_gradient.assign(model.input_gradient().begin(), model.input_gradient().end());
  const auto state = model.forward(batch);
  for (const auto& s : state) r.final_state.insert(r.final_state.end(), s.begin(), s.end());
  for (const auto& s : model.rewind(state)) r.rewound.insert(r.rewound.end(), s.begin(), s.end());
  r.predicted = model.predict(batch);
  model.apply(rwd::sgd{.lr = 0.05, .momentum = 0.9});
  r.after_sgd.assign(model.parameters().begin(), model.parameters().end());
  model.loss_and_gradient(batch, labels, m);
  model.apply(rwd::adam{.lr = 0.01});
  r.after_adam.assign(model.parameters().begin(), model.parameters().end());
  return r;
}

template <class T>
std::vector<T> initial(const std::string& block, std::size_t depth, const rwd::options& o) {
  auto of = [&](auto b) {
    rwd::cpu::model<T, std::remove_cv_t<decltype(b)>> m(b, depth, o, rwd::env{}.set("mu", 0.6));
    return std::vector<T>(m.parameters().begin(), m.parameters().end());
  };
  if (block == "momentum") return of(tb::momentum);
  if (block == "leapfrog") return of(tb::leapfrog);
  if (block == "coupling") return of(tb::coupling);
  if (block == "three") return of(tb::three);
  if (block == "runtime_mu") return of(tb::runtime_mu);
  return of(tb::affine);
}

template <class T>
step_result cpu_run(const std::string& block, std::size_t depth, const rwd::options& o, const std::vector<T>& params,
                    const std::vector<T>& batch, const std::vector<int>& labels, rwd::mode m) {
  if (block == "momentum") return cpu_block<T>(tb::momentum, depth, o, params, batch, labels, m);
  if (block == "leapfrog") return cpu_block<T>(tb::leapfrog, depth, o, params, batch, labels, m);
  if (block == "coupling") return cpu_block<T>(tb::coupling, depth, o, params, batch, labels, m);
  if (block == "three") return cpu_block<T>(tb::three, depth, o, params, batch, labels, m);
  if (block == "runtime_mu") return cpu_block<T>(tb::runtime_mu, depth, o, params, batch, labels, m);
  return cpu_block<T>(tb::affine, depth, o, params, batch, labels, m);
}

/// max |a - b| / max |b|
double rel(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i])), s = std::max(s, std::abs(b[i]));
  return s > 0 ? d / s : d;
}

template <class T>
void compare(const std::string& block, std::size_t depth, rwd::options o, rwd::mode m, double tol) {
  CAPTURE(block);
  CAPTURE(rwd::to_string(m));
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal;
  std::vector<T> batch(o.width * o.batch);
  for (auto& e : batch) e = static_cast<T>(normal(rng));
  std::vector<int> labels(o.batch);
  for (auto& e : labels) e = static_cast<int>(rng() % o.classes);
  const auto params = initial<T>(block, depth, o);
  const step_result gpu = gpu_bridge::run<T>(block, depth, o, params, batch, labels, m);
  const step_result cpu = cpu_run<T>(block, depth, o, params, batch, labels, m);
  CHECK(std::abs(gpu.loss - cpu.loss) <= tol * std::abs(cpu.loss));
  CHECK(rel(gpu.gradients, cpu.gradients) <= tol);
  CHECK(rel(gpu.input_gradient, cpu.input_gradient) <= tol);
  CHECK(rel(gpu.final_state, cpu.final_state) <= tol);
  CHECK(rel(gpu.rewound, cpu.rewound) <= tol);
  CHECK(rel(gpu.after_sgd, cpu.after_sgd) <= tol);
  CHECK(rel(gpu.after_adam, cpu.after_adam) <= 10 * tol);
  CHECK(gpu.predicted == cpu.predicted);
  CHECK(gpu.plan == cpu.plan);  // one layout, one plan
  CHECK(gpu.peak == gpu.plan);  // and the device allocations follow it to the byte
}
}  // namespace

TEST_CASE("gpu: the CUDA engine equals the CPU engine in float64, six blocks, every float mode") {
  for (const char* block : {"momentum", "leapfrog", "coupling", "three", "runtime_mu", "affine"})
    for (auto m : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed})
      compare<double>(block, 12, {.width = 16, .batch = 6, .classes = 4, .seed = 3, .checkpoint_every = 5}, m, 1e-12);
}

TEST_CASE("gpu: the CUDA engine equals the CPU engine in float32 inside the budget") {
  for (auto m : {rwd::mode::stored, rwd::mode::reversible})
    compare<float>("momentum", 64, {.width = 32, .batch = 8, .classes = 10, .seed = 7}, m, 1e-5);
  compare<float>("leapfrog", 128, {.width = 32, .batch = 8, .classes = 10, .seed = 7}, rwd::mode::reversible, 1e-5);
}

TEST_CASE("gpu: device memory of the reference configuration is the plan, and flat in depth when reversible") {
  std::vector<std::size_t> reversible;
  for (std::size_t depth : {8, 32}) {
    const rwd::options o{.width = 784, .batch = 128, .classes = 10, .seed = 1};
    std::vector<float> batch(784 * 128, 0.25f);
    std::vector<int> labels(128);
    for (std::size_t j = 0; j < 128; ++j) labels[j] = static_cast<int>(j % 10);
    const auto params = initial<float>("momentum", depth, o);
    for (auto m : {rwd::mode::stored, rwd::mode::reversible}) {
      const auto r = gpu_bridge::run<float>("momentum", depth, o, params, batch, labels, m);
      CHECK(r.peak == r.plan);
      if (m == rwd::mode::reversible) reversible.push_back(r.peak);
    }
  }
  CHECK(reversible[0] == reversible[1]);
}

TEST_CASE("gpu: bad input is refused with a clear error") {
  const std::string said = gpu_bridge::refusals();
  MESSAGE(said);
  CHECK(said.find("(accepted)") == std::string::npos);
  CHECK(said.find("values; width x batch is 8 x 3") != std::string::npos);
  CHECK(said.find("non-finite") != std::string::npos);
  CHECK(said.find("label 3 outside [0, 3)") != std::string::npos);
  CHECK(said.find("mode::exact runs on the CPU backend") != std::string::npos);
  CHECK(said.find("rewind E007") != std::string::npos);
}

int main(int argc, char** argv) {
  if (const std::string why = gpu_bridge::unavailable(); !why.empty()) {
    const char* count[] = {argv[0], "--count", "--no-version"};  // says how many GPU cases there are
    doctest::Context counter(3, count);
    counter.run();
    std::printf("[SKIP] %s: the GPU test cases counted above were compiled, not run\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
