// The GPU engine against the CPU engine on identical weights and batches: loss, gradients, input
// gradient, forward, rewind, predictions, one SGD step and then one Adam step (a switch of
// optimizer), in float64 (1e-12 relative) and in float32 with tolerances derived from the budget
// analysis (below); tracked device bytes equal to the plan; bad input refused. Without a GPU:
// exit 77 (skipped), saying how many GPU test cases did not run. Built a second time against a
// CPU stand-in (bridge_standin.cpp) that runs everywhere.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include <rewind/cpu.hpp>

#include "../dsl/blocks.hpp"
#include "bridge.hpp"
#include "bridge_steps.hpp"

namespace {
using gpu_bridge::step_result;
using gpu_bridge::with_block;

/// The options of a test case, with the block's own input and output variables (the couplings
/// have x1 and x2, not x).
rwd::options for_block(const std::string& block, rwd::options o) {
  if (block == "coupling" || block == "affine") o.input = "x1", o.output = "x2";
  return o;
}

template <class T, class Block>
step_result cpu_block(Block b, std::size_t depth, const rwd::options& o, const std::vector<T>& params, const std::vector<T>& batch,
                      const std::vector<int>& labels, rwd::mode m) {
  rwd::cpu::model<T, Block> model(b, depth, o, rwd::env{}.set("mu", gpu_bridge::mu));
  std::copy(params.begin(), params.end(), model.parameters().begin());
  return gpu_bridge::record(model, batch, labels, m);
}

/// The plan of a step of the whole batch as one lane (the GPU model's), from the engine's closed
/// forms; the CPU stand-in reports its own model's plan (chunks on threads) instead.
template <class T>
std::size_t expected_plan(const std::string& block, std::size_t depth, const rwd::options& o, rwd::mode m) {
  return with_block(block, [&](auto b) {
    using Block = std::remove_cv_t<decltype(b)>;
    const rwd::cpu::model<T, Block> cpu(b, depth, o, rwd::env{}.set("mu", gpu_bridge::mu));
    if (gpu_bridge::engine() != "cuda") return cpu.plan(m).total();
    using engine = rwd::step_engine<T, Block, rwd::cpu::executor<T>>;
    return engine::whole_batch_plan(m, rwd::state_shape(o), o.batch, o.classes, depth, cpu.checkpoint_every()).total();
  });
}

template <class T>
std::vector<T> initial(const std::string& block, std::size_t depth, const rwd::options& o) {
  return with_block(block, [&](auto b) {
    rwd::cpu::model<T, std::remove_cv_t<decltype(b)>> m(b, depth, o, rwd::env{}.set("mu", gpu_bridge::mu));
    return std::vector<T>(m.parameters().begin(), m.parameters().end());
  });
}

template <class T>
step_result cpu_run(const std::string& block, std::size_t depth, const rwd::options& o, const std::vector<T>& params,
                    const std::vector<T>& batch, const std::vector<int>& labels, rwd::mode m) {
  return with_block(block, [&](auto b) { return cpu_block<T>(b, depth, o, params, batch, labels, m); });
}

/// max |a - b| / max |b|
double rel(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i])), s = std::max(s, std::abs(b[i]));
  return s > 0 ? d / s : d;
}

/// How far two engines that round differently may drift apart (relative to the largest entry),
/// from the budget analysis. Each engine rounds every operation to eps of T, and the two sum their
/// GEMMs in different orders (two CPU builds that differ only in FMA and vectorisation already
/// disagree by 5.5e-5 on momentum's reversible gradients at depth 64 in float32), so:
///   short   what a forward pass or a stored backward computes (loss, forward state, stored
///           gradients, the SGD step): rounding adds up over the layers, K eps depth;
///   rewound what a rewind computes (the rewound state; the gradients of reversible and
///           checkpointed modes): that, plus each layer's rounding amplified by the block's rate
///           per layer (rwd::budget) over the layers rewound (the whole depth, or one segment for
///           a checkpointed gradient), K eps (depth + rate^span).
/// K = 8 covers both engines. Against the float64 stand-in the float32 CPU engine stays within
/// 0.14 of every bound (leapfrog's rewound state at depth 128; the test prints each ratio). Past
/// the budget the bounds reach order one, as they should.
struct tolerance {
  double short_arithmetic, rewound, rewound_gradient;
};
/// The bounds for `layers` layers of a block with rate `rate` (rwd::budget_report::rate) whose
/// rewinds run over `rewound` layers, and whose gradient rewinds `span` of them in mode m.
template <class T>
tolerance tolerance_for(double layers, double rate, double rewound, double span, rwd::mode m) {
  constexpr double K = 8, eps = std::numeric_limits<T>::epsilon();
  return tolerance{K * eps * layers, K * eps * (layers + std::pow(rate, rewound)),
                   m == rwd::mode::stored ? K * eps * layers : K * eps * (layers + std::pow(rate, span))};
}
template <class T>
tolerance tolerance_of(const std::string& block, std::size_t depth, const rwd::options& o, rwd::mode m) {
  const double d = static_cast<double>(depth);
  return with_block(block, [&](auto b) {
    rwd::cpu::model<T, std::remove_cv_t<decltype(b)>> model(b, depth, o, rwd::env{}.set("mu", gpu_bridge::mu));
    const auto& budget = model.budget();
    const double rate = budget.known() ? budget.rate : 2.0;  // data-dependent: assume a doubling per layer
    const double span = m == rwd::mode::checkpointed ? static_cast<double>(std::min(depth, model.checkpoint_every())) : d;
    return tolerance_for<T>(d, rate, d, span, m);
  });
}

/// The Adam step on both sides, element by element: what the two engines' parameters before it
/// and their gradients let it differ by. Adam's first step moves theta by lr g / (|g| + eps): a
/// gradient difference dg moves that by at most lr min(2, 2 |dg| / (|g| + eps)) (a sign flip
/// where |g| is at the rounding level moves it by 2 lr, rightly); 1 - beta2 rounded in T carries
/// a relative error of eps / (1 - beta2) into the step (6.7e-6 in float32 at beta2 = 0.999).
template <class T>
void check_adam(const step_result& gpu, const step_result& cpu, const rwd::adam& a) {
  REQUIRE(gpu.after_adam.size() == cpu.after_adam.size());
  constexpr double eps = std::numeric_limits<T>::epsilon();
  double worst = 0;  // the largest difference as a fraction of what is allowed
  std::size_t at = 0;
  for (std::size_t i = 0; i < cpu.after_adam.size(); ++i) {
    const double g = cpu.adam_gradients[i], dg = std::abs(gpu.adam_gradients[i] - g);
    const double allowed = std::abs(gpu.after_sgd[i] - cpu.after_sgd[i]) + a.lr * std::min(2.0, 2 * dg / (std::abs(g) + a.eps)) +
                           8 * eps * (std::abs(cpu.after_adam[i]) + a.lr / (1 - a.beta2));
    const double ratio = std::abs(gpu.after_adam[i] - cpu.after_adam[i]) / allowed;
    if (ratio > worst) worst = ratio, at = i;
  }
  CAPTURE(at);
  CHECK(worst <= 1.0);
}

template <class T>
void compare(const std::string& block, std::size_t depth, rwd::options o, rwd::mode m) {
  o = rwd::with_shape_width(for_block(block, o));
  CAPTURE(block);
  CAPTURE(depth);
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
  const tolerance tol = tolerance_of<T>(block, depth, o, m);
  const double gradient_tol = tol.rewound_gradient;
  CAPTURE(tol.short_arithmetic);
  CAPTURE(tol.rewound);
  CAPTURE(tol.rewound_gradient);
  const double loss = std::abs(gpu.loss - cpu.loss) / std::abs(cpu.loss), gradients = rel(gpu.gradients, cpu.gradients),
               input_gradient = rel(gpu.input_gradient, cpu.input_gradient), final_state = rel(gpu.final_state, cpu.final_state),
               rewound = rel(gpu.rewound, cpu.rewound), after_sgd = rel(gpu.after_sgd, cpu.after_sgd);
  MESSAGE(gpu_bridge::engine() << " vs cpu, " << block << " depth " << depth << " " << rwd::to_string(m) << ": loss "
                               << loss / tol.short_arithmetic << ", gradients " << gradients / gradient_tol << ", input gradient "
                               << input_gradient / gradient_tol << ", forward " << final_state / tol.short_arithmetic << ", rewound "
                               << rewound / tol.rewound << ", sgd " << after_sgd / gradient_tol << " of their tolerances");
  CHECK(loss <= tol.short_arithmetic);
  CHECK(gradients <= gradient_tol);
  CHECK(input_gradient <= gradient_tol);
  CHECK(final_state <= tol.short_arithmetic);
  CHECK(rewound <= tol.rewound);
  CHECK(after_sgd <= gradient_tol);
  check_adam<T>(gpu, cpu, gpu_bridge::adam_step);
  CHECK(gpu.predicted == cpu.predicted);
  CHECK(gpu.plan == expected_plan<T>(block, depth, o, m));  // the engine's closed form
  CHECK(gpu.peak == gpu.plan);                               // and the device allocations follow it to the byte
}

/// A staged network of the bridge (gpu_bridge::with_staged) on both engines: loss, gradients,
/// predictions, the SGD and Adam steps; the plan (the GPU's: staged_step::whole_batch_plan) and
/// the tracked peak equal to it. Returns the engine's result.
template <class T>
step_result compare_staged(const std::string& net, const rwd::stages& shape, rwd::options o, rwd::mode m) {
  CAPTURE(net);
  CAPTURE(rwd::to_string(m));
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  std::vector<T> batch(shape.input.size() * o.batch);
  for (auto& e : batch) e = static_cast<T>(normal(rng));
  std::vector<int> labels(o.batch);
  for (auto& e : labels) e = static_cast<int>(rng() % o.classes);
  std::vector<T> params;
  std::size_t plan = 0, longest = 0, layers = 0;
  double rate = 0, span = 0;
  const step_result cpu = gpu_bridge::with_staged(net, [&](auto stem, auto down, auto block) {
    using Stem = decltype(stem);
    using Block = decltype(block);
    using Down = decltype(down);
    rwd::cpu::staged_model<T, Stem, Block, Down> model(stem, down, block, shape, o, rwd::env{}.set("mu", gpu_bridge::mu));
    params.assign(model.parameters().begin(), model.parameters().end());
    using step = rwd::staged_step<T, Stem, Block, rwd::cpu::executor<T>, Down>;
    plan = gpu_bridge::engine() == "cuda" ? step::whole_batch_plan(m, model.layout(), o.batch, model.checkpoint_every()).total()
                                          : model.plan(m).total();
    rate = model.budget().rate;
    longest = *std::max_element(shape.depths.begin(), shape.depths.end());
    span = static_cast<double>(m == rwd::mode::checkpointed ? std::min(longest, model.checkpoint_every()) : longest);
    return gpu_bridge::record(model, batch, labels, m);
  });
  const step_result gpu = gpu_bridge::run_staged<T>(net, shape, o, params, batch, labels, m);
  // every block, the stem, each transition and the head round; a rewind runs inside one stage
  for (std::size_t d : shape.depths) layers += d + 1;
  const tolerance tol = tolerance_for<T>(static_cast<double>(layers + 1), rate, static_cast<double>(longest), span, m);
  CAPTURE(tol.short_arithmetic);
  CAPTURE(tol.rewound_gradient);
  const double loss = std::abs(gpu.loss - cpu.loss) / std::abs(cpu.loss), gradients = rel(gpu.gradients, cpu.gradients),
               after_sgd = rel(gpu.after_sgd, cpu.after_sgd);
  MESSAGE(gpu_bridge::engine() << " vs cpu, staged " << net << " " << rwd::to_string(m) << ": loss " << loss / tol.short_arithmetic
                               << ", gradients " << gradients / tol.rewound_gradient << ", sgd " << after_sgd / tol.rewound_gradient
                               << " of their tolerances");
  CHECK(loss <= tol.short_arithmetic);
  CHECK(gradients <= tol.rewound_gradient);
  CHECK(after_sgd <= tol.rewound_gradient);
  check_adam<T>(gpu, cpu, gpu_bridge::adam_step);
  CHECK(gpu.predicted == cpu.predicted);
  CHECK(gpu.plan == plan);
  CHECK(gpu.peak == gpu.plan);
  return gpu;
}
}  // namespace

TEST_CASE("gpu: staged networks (a stem, squeezes or kept transitions, a pooled head; dropout) equal the CPU staged model, every float mode") {
  for (const char* net : {"squeeze", "pool"})
    for (auto m : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed}) {
      compare_staged<double>(net, {{1, 8, 8}, {2, 1, 3}}, {.batch = 5, .classes = 4, .seed = 3, .output_init_scale = 0.5, .checkpoint_every = 2}, m);
      compare_staged<float>(net, {{1, 12, 12}, {6, 3, 4}}, {.batch = 8, .classes = 10, .seed = 7, .checkpoint_every = 3}, m);
    }
}

TEST_CASE("gpu: a staged network's reversible memory is flat in the depth of its stages") {
  const rwd::options o{.batch = 4, .classes = 3, .seed = 2};
  const auto shallow = compare_staged<float>("squeeze", {{1, 8, 8}, {1, 1}}, o, rwd::mode::reversible);
  const auto deep = compare_staged<float>("squeeze", {{1, 8, 8}, {5, 7}}, o, rwd::mode::reversible);
  CHECK(shallow.peak == deep.peak);
  CHECK(compare_staged<float>("squeeze", {{1, 8, 8}, {5, 7}}, o, rwd::mode::stored).peak > deep.peak);
}

TEST_CASE("gpu: the engine equals the CPU engine in float64, six blocks, every float mode") {
  for (const char* block : {"momentum", "leapfrog", "coupling", "three", "runtime_mu", "affine"})
    for (auto m : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed})
      compare<double>(block, 12, {.width = 16, .batch = 6, .classes = 4, .seed = 3, .checkpoint_every = 5}, m);
}

TEST_CASE("gpu: convolutions, group norm and dropout on a shaped state equal the CPU engine, float64 and float32, every float mode") {
  for (auto m : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed}) {
    compare<double>("conv", 6, {.batch = 5, .classes = 4, .shape = {3, 5, 6}, .seed = 3, .checkpoint_every = 4}, m);
    compare<float>("conv", 24, {.batch = 8, .classes = 10, .shape = {4, 7, 7}, .seed = 7, .checkpoint_every = 8}, m);
  }
}

TEST_CASE("gpu: the engine equals the CPU engine in float32 inside the budget, to tolerances from the budget") {
  for (auto m : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed})
    compare<float>("momentum", 64, {.width = 32, .batch = 8, .classes = 10, .seed = 7, .checkpoint_every = 16}, m);
  compare<float>("leapfrog", 128, {.width = 32, .batch = 8, .classes = 10, .seed = 7}, rwd::mode::reversible);
  compare<float>("coupling", 48, {.width = 24, .batch = 8, .classes = 10, .seed = 7}, rwd::mode::reversible);
  compare<float>("runtime_mu", 12, {.width = 24, .batch = 8, .classes = 10, .seed = 7}, rwd::mode::reversible);
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
  CHECK(said.find("adam needs") != std::string::npos);
  CHECK(said.find("is not finite") != std::string::npos);
  CHECK(said.find("rewind E007") != std::string::npos);
  // an alpha from the data, zero at one element: stored, reversible and checkpointed all say where
  std::size_t alpha_refusals = 0;
  for (auto at = said.find("at 1 of 24 elements in layer 0, update x <- exp(v)*x + f(v)"); at != std::string::npos;
       at = said.find("at 1 of 24 elements in layer 0, update x <- exp(v)*x + f(v)", at + 1))
    ++alpha_refusals;
  CHECK(alpha_refusals == 3);
  CHECK(said.find("rewind E014") != std::string::npos);
  CHECK(said.find("(alpha = exp(v) in x <- exp(v)*x + f(v) ranges over [0, inf]); in this model: use mode::checkpointed, or options.lossy") !=
        std::string::npos);
  // a staged network: options whose input is not the network's, the exact mode
  CHECK(said.find("are not the network's input 1x4x4") != std::string::npos);
  CHECK(said.find("a staged network has no exact mode") != std::string::npos);
  if (gpu_bridge::engine() == "cuda") {
    CHECK(said.find("mode::exact runs on the CPU backend") != std::string::npos);
    CHECK(said.find("parameters for a model of") != std::string::npos);
  }
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
