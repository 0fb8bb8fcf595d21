// A staged network on the CPU: a stem on the kept input, stages with squeezes between them, a
// pooled head. Gradients against central differences in float64 (every part: stem, each stage's
// layers, head), reversible and checkpointed against stored in float32, the memory plan against
// the tracked peak and flat in depth, threads, refusals and safetensors names.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <rewind/cpu.hpp>

#include "gradient_checks.hpp"

namespace {
using namespace rwd::literals;
constexpr rwd::var<"x"> x;
constexpr rwd::var<"v"> v;
constexpr rwd::param<"mu"> mu;
// a bottleneck whose width follows the stage: conv to 4 channels, group norm, relu, conv back
constexpr auto f = rwd::map<"f">(rwd::conv<4, 3>, rwd::group_norm<2>, rwd::relu, rwd::conv_same<3>);
constexpr auto momentum = rwd::block(v = mu * v + f(x), x = x + v);
constexpr auto stem = rwd::stem<"stem">(rwd::conv<2, 3>, rwd::tanh);
// the same with dropout inside f
constexpr auto fd = rwd::map<"f">(rwd::conv<4, 3>, rwd::group_norm<2>, rwd::relu, rwd::dropout(0.25_c), rwd::conv_same<3>);
constexpr auto momentum_dropout = rwd::block(v = mu * v + fd(x), x = x + v);
using block_t = std::remove_cv_t<decltype(momentum)>;
using stem_t = std::remove_cv_t<decltype(stem)>;

const rwd::stages three{{1, 8, 8}, {1, 2, 1}};  // 2x8x8, 8x4x4, 32x2x2
const rwd::env mu_env = rwd::env{}.set("mu", 0.9);
constexpr std::size_t B = 3, C = 4;

template <class T, class Block = block_t>
rwd::cpu::staged_model<T, stem_t, Block> make(const rwd::stages& net = three, std::size_t batch = B, Block b = Block{}) {
  return {stem_t{}, b, net, {.batch = batch, .classes = C, .seed = 5, .output_init_scale = 0.5, .grain = 2}, mu_env};
}
}  // namespace

TEST_CASE("staged network: the layout of its parameters, names and shapes") {
  const auto m = make<float>();
  const auto& a = m.layout();
  CHECK(a.shapes == std::vector<rwd::tensor_shape>{{2, 8, 8}, {8, 4, 4}, {32, 2, 2}});
  CHECK(a.width() == 128);
  CHECK(a.stem == 2 * 1 * 9 + 2);
  // per layer of stage s: conv c -> 4 (4 c 9 + 4), group norm (8), conv 4 -> c (c 4 9 + c)
  for (std::size_t s = 0; s < 3; ++s) {
    const std::size_t c = a.shapes[s].c;
    CHECK(a.stage[s].per_layer == 4 * c * 9 + 4 + 8 + c * 4 * 9 + c);
  }
  CHECK(a.total == a.head + C * 32 + C);
  const auto t = a.tensors();
  const auto find = [&](const std::string& name) { return std::find_if(t.begin(), t.end(), [&](const auto& n) { return n.name == name; }); };
  REQUIRE(find("stem.0.weight") != t.end());
  CHECK(find("stem.0.weight")->shape == std::vector<std::uint64_t>{2, 1, 3, 3});
  REQUIRE(find("stage2.layer1.f.3.weight") != t.end());
  CHECK(find("stage2.layer1.f.3.weight")->shape == std::vector<std::uint64_t>{8, 4, 3, 3});
  CHECK(find("stage3.layer0.f.1.weight")->shape == std::vector<std::uint64_t>{4});
  CHECK(find("head.weight")->shape == std::vector<std::uint64_t>{C, 32});
  CHECK(find("stage1.head.weight") == t.end());
  // the parts of the backward pass cover the arena once, from the top
  std::vector<int> covered(a.total, 0);
  for (const auto& p : a.parts())
    for (std::size_t i = p.offset; i < p.offset + p.count; ++i) ++covered[i];
  for (std::size_t i = a.head; i < a.total; ++i) ++covered[i];
  CHECK(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }));
  CHECK(a.parts().front().offset == a.offset[2]);
  CHECK(a.parts().back().offset == 0);
}

TEST_CASE("staged network: gradients against central differences in float64, every part, every mode") {
  auto m = make<double>();
  const auto batch = cpu_tests::random_batch<double>(64 * B, 3);
  const auto y = cpu_tests::labels(B, C);
  const auto& a = m.layout();
  // a spread of parameters in each part: the stem, each stage's first and last layer, the head
  std::vector<std::size_t> probe;
  for (std::size_t i = 0; i < a.stem; i += 3) probe.push_back(i);
  for (std::size_t s = 0; s < 3; ++s)
    for (std::size_t i = a.offset[s]; i < a.offset[s] + a.stage[s].total; i += 11) probe.push_back(i);
  for (std::size_t i = a.head; i < a.total; i += 5) probe.push_back(i);
  for (auto md : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed}) {
    m.loss_and_gradient(batch, y, md);
    const std::vector<double> grad(m.gradients().begin(), m.gradients().end());
    CAPTURE(rwd::to_string(md));
    CHECK(cpu_tests::parameter_fd_error(m, batch, y, md, grad, probe) < 1e-6);
  }
}

TEST_CASE("staged network: reversible and checkpointed equal stored in float32; dropout replayed") {
  const auto batch = cpu_tests::random_batch<float>(64 * 8, 9);
  const auto y = cpu_tests::labels(8, C);
  const auto compare = [&](auto&& m) { cpu_tests::check_modes_match_stored(m, batch, y); };
  compare(make<float>(three, 8));
  compare(make<float>(three, 8, momentum_dropout));
  // dropout is on in training: the loss differs from the same weights without it
  auto with = make<float>(three, 8, momentum_dropout);
  auto without = make<float>(three, 8);
  CHECK(with.loss_and_gradient(batch, y, rwd::mode::stored) != without.loss_and_gradient(batch, y, rwd::mode::stored));
  CHECK(with.predict(batch) == without.predict(batch));  // and off in inference
}

TEST_CASE("staged network: the tracked peak is the plan; reversible memory flat in depth") {
  const auto batch = cpu_tests::random_batch<float>(64 * 8, 2);
  const auto y = cpu_tests::labels(8, C);
  std::size_t reversible_tape = 0;
  for (const auto& depths : {std::vector<std::size_t>{1, 1, 1}, std::vector<std::size_t>{2, 4, 3}}) {
    auto m = make<float>({{1, 8, 8}, depths}, 8);
    for (auto md : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed}) {
      m.memory().reset_peak();
      m.loss_and_gradient(batch, y, md);
      CAPTURE(rwd::to_string(md));
      CHECK(m.memory().peak() == m.plan(md).total());
    }
    const auto p = m.plan(rwd::mode::reversible);
    CHECK(p.tape_bytes == 2 * 2 * 128 * 8 * sizeof(float));  // two later stages' starting states, x and v
    if (reversible_tape) CHECK(p.total() == reversible_tape);
    reversible_tape = p.total();
    CHECK(m.plan(rwd::mode::stored).tape_bytes > 2 * p.tape_bytes);  // every layer's entries, not two states
  }
}

TEST_CASE("staged network: the gradient is the same bits on one and two threads") {
  const auto batch = cpu_tests::random_batch<float>(64 * 8, 4);
  const auto y = cpu_tests::labels(8, C);
  const int was = Eigen::nbThreads();
  std::vector<std::vector<float>> grads;
  for (int t : {1, 2}) {
    Eigen::setNbThreads(t);
    auto m = make<float>(three, 8, momentum_dropout);
    m.loss_and_gradient(batch, y, rwd::mode::reversible);
    grads.emplace_back(m.gradients().begin(), m.gradients().end());
  }
  Eigen::setNbThreads(was);
  CHECK(grads[0] == grads[1]);
}

TEST_CASE("staged network: the budget is per stage") {
  // mu = 0.9 in float32: L* = 151 layers; two stages of 100 rewind, one of 152 does not
  const rwd::stages deep{{1, 4, 4}, {100, 100}};
  auto m = make<float>(deep, 2);
  const auto batch = cpu_tests::random_batch<float>(16 * 2, 1);
  const auto y = cpu_tests::labels(2, C);
  m.loss_and_gradient(batch, y, rwd::mode::reversible);
  auto over = make<float>({{1, 4, 4}, {152, 1}}, 2);
  CHECK_THROWS_WITH_AS(over.loss_and_gradient(batch, y, rwd::mode::reversible), doctest::Contains("rewind E007"), rwd::error);
  over.loss_and_gradient(batch, y, rwd::mode::checkpointed);
}

TEST_CASE("staged network: refusals name the cause and leave the model as it was") {
  CHECK_THROWS_WITH_AS(make<float>({{1, 6, 6}, {1, 1, 1}}), doctest::Contains("stage 3 starts with a squeeze, which needs an even height and width; stage 2's state is 8x3x3"),
                       rwd::error);
  CHECK_THROWS_WITH_AS(make<float>({{1, 8, 8}, {1, 0}}), doctest::Contains("stage 2 has no blocks"), rwd::error);
  CHECK_THROWS_WITH_AS(make<float>({{1, 8, 8}, {}}), doctest::Contains("at least one stage"), rwd::error);
  CHECK_THROWS_WITH_AS((rwd::cpu::staged_model<float, stem_t, block_t>(stem_t{}, block_t{}, three, {.width = 63, .batch = 2}, mu_env)),
                       doctest::Contains("not the network's input 1x8x8"), rwd::error);
  auto m = make<float>(three, 2);
  const std::vector<float> before(m.parameters().begin(), m.parameters().end());
  const auto batch = cpu_tests::random_batch<float>(64 * 2, 1);
  const auto y = cpu_tests::labels(2, C);
  CHECK_THROWS_WITH_AS(m.loss_and_gradient(batch, y, rwd::mode::exact), doctest::Contains("no exact mode"), rwd::error);
  CHECK_THROWS_WITH_AS(m.loss_and_gradient(std::span<const float>(batch).first(100), y, rwd::mode::stored), doctest::Contains("rewind: the batch"),
                       rwd::error);
  const std::string path = (std::filesystem::temp_directory_path() / "rewind_staged_bad.safetensors").string();
  auto other = make<float>({{1, 8, 8}, {1, 1}}, 2);
  other.save(path);
  CHECK_THROWS_AS(m.load(path), rwd::error);  // another network's file
  std::filesystem::remove(path);
  CHECK(std::vector<float>(m.parameters().begin(), m.parameters().end()) == before);
}

TEST_CASE("staged network: safetensors round trip") {
  const std::string path = (std::filesystem::temp_directory_path() / "rewind_staged.safetensors").string();
  auto m = make<float>(three, 2);
  m.save(path);
  auto n = make<float>(three, 2);
  n.initialise(99);
  n.load(path);
  CHECK(std::vector<float>(n.parameters().begin(), n.parameters().end()) == std::vector<float>(m.parameters().begin(), m.parameters().end()));
  std::filesystem::remove(path);
}
