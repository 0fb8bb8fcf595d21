// Staged networks whose stages meet at kept transitions (a map that is not inverted: its input is
// kept, the other state variables restart at zero), with the layers that change resolution
// (squeeze, average pooling): gradients against central differences in float64 in every mode,
// reversible and checkpointed against stored in float32, the memory plan against the tracked
// peak (also when a later stage is wider than the first), threads, names and refusals.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
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
constexpr auto f = rwd::map<"f">(rwd::conv<4, 3>, rwd::group_norm<2>, rwd::relu, rwd::conv_same<3>);
constexpr auto momentum = rwd::block(v = mu * v + f(x), x = x + v);
constexpr auto fd = rwd::map<"f">(rwd::conv<4, 3>, rwd::group_norm<2>, rwd::relu, rwd::dropout(0.25_c), rwd::conv_same<3>);
constexpr auto momentum_dropout = rwd::block(v = mu * v + fd(x), x = x + v);
constexpr auto stem = rwd::stem<"stem">(rwd::conv<2, 3>, rwd::tanh);
// a 2x2 convolution with stride 2 (squeeze, then 1x1) to 4 channels: the width shrinks
constexpr auto down = rwd::transition<"down">(rwd::squeeze, rwd::conv<4, 1>);
// average pooling, then a 3x3 convolution to 8 channels and relu
constexpr auto pool = rwd::transition<"pool">(rwd::avg_pool<2>, rwd::conv<8, 3>, rwd::relu);
// more channels at the same resolution: a later stage wider than the first
constexpr auto wide = rwd::transition<"wide">(rwd::conv<4, 3>);
using block_t = std::remove_cv_t<decltype(momentum)>;
using stem_t = std::remove_cv_t<decltype(stem)>;
using down_t = std::remove_cv_t<decltype(down)>;
using pool_t = std::remove_cv_t<decltype(pool)>;
using wide_t = std::remove_cv_t<decltype(wide)>;

const rwd::stages three{{1, 8, 8}, {1, 2, 1}};
const rwd::env mu_env = rwd::env{}.set("mu", 0.9);
constexpr std::size_t B = 3, C = 4;

template <class T, class Down = down_t, class Block = block_t>
rwd::cpu::staged_model<T, stem_t, Block, Down> make(const rwd::stages& net = three, std::size_t batch = B, Block b = Block{}) {
  return {stem_t{}, Down{}, b, net, {.batch = batch, .classes = C, .seed = 5, .output_init_scale = 0.5, .grain = 2}, mu_env};
}

/// A spread of parameters in every part: the stem, each transition, each stage, the head.
template <class Layout>
std::vector<std::size_t> probes(const Layout& a) {
  std::vector<std::size_t> probe;
  for (std::size_t i = 0; i < a.stem; i += 3) probe.push_back(i);
  for (std::size_t s = 0; s < a.stage_count(); ++s) {
    for (std::size_t i = a.down[s]; i < a.down[s] + a.down_count[s]; i += 3) probe.push_back(i);
    for (std::size_t i = a.offset[s]; i < a.offset[s] + a.stage[s].total; i += 13) probe.push_back(i);
  }
  for (std::size_t i = a.head; i < a.total; i += 5) probe.push_back(i);
  return probe;
}

template <class Down>
void check_gradients(const rwd::stages& net) {
  auto m = make<double, Down>(net);
  const auto batch = cpu_tests::random_batch<double>(net.input.size() * B, 3);
  const auto y = cpu_tests::labels(B, C);
  for (auto md : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed}) {
    m.loss_and_gradient(batch, y, md);
    const std::vector<double> grad(m.gradients().begin(), m.gradients().end());
    CAPTURE(rwd::to_string(md));
    CHECK(cpu_tests::parameter_fd_error(m, batch, y, md, grad, probes(m.layout())) < 1e-6);
  }
}
}  // namespace

TEST_CASE("kept transitions: shapes, parameters, names and the parts of the backward pass") {
  const auto m = make<float>();
  const auto& a = m.layout();
  // 2x8x8 -> squeeze 8x4x4 -> conv1x1 4x4x4 -> squeeze 16x2x2 -> conv1x1 4x2x2
  CHECK(a.shapes == std::vector<rwd::tensor_shape>{{2, 8, 8}, {4, 4, 4}, {4, 2, 2}});
  CHECK(a.width() == 128);
  CHECK(a.width(1) == 64);
  CHECK(a.down_count[1] == 4 * 8 + 4);
  CHECK(a.down_count[2] == 4 * 16 + 4);
  CHECK(a.down[1] == a.offset[0] + a.stage[0].total);
  CHECK(a.offset[1] == a.down[1] + a.down_count[1]);
  const auto t = a.tensors();
  const auto find = [&](const std::string& name) { return std::find_if(t.begin(), t.end(), [&](const auto& n) { return n.name == name; }); };
  REQUIRE(find("stage2.down.1.weight") != t.end());
  CHECK(find("stage2.down.1.weight")->shape == std::vector<std::uint64_t>{4, 8, 1, 1});
  CHECK(find("stage3.down.1.weight")->shape == std::vector<std::uint64_t>{4, 16, 1, 1});
  CHECK(find("stage1.down.1.weight") == t.end());
  CHECK(find("head.weight")->shape == std::vector<std::uint64_t>{C, 4});
  std::vector<int> covered(a.total, 0);
  for (const auto& p : a.parts())
    for (std::size_t i = p.offset; i < p.offset + p.count; ++i) ++covered[i];
  for (std::size_t i = a.head; i < a.total; ++i) ++covered[i];
  CHECK(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }));
  // from the top: stage 3's layer, transition 3, stage 2's two layers, transition 2, stage 1, stem
  const auto parts = a.parts();
  REQUIRE(parts.size() == 7);
  CHECK(parts[1].offset == a.down[2]);
  CHECK(parts[4].offset == a.down[1]);
  const std::string text = rwd::explain<float>(a, mu_env);
  CHECK(text.find("transition down: 2x8x8 -> squeeze -> conv1x1 4 (36 parameters; not inverted") != std::string::npos);
  CHECK(text.find("stage 2: state 4x4x4") != std::string::npos);
  CHECK(text.find("squeeze: ") == std::string::npos);
}

TEST_CASE("kept transitions: gradients against central differences in float64, every part, every mode") {
  SUBCASE("squeeze and a 1x1 convolution (a strided convolution): the width shrinks") { check_gradients<down_t>(three); }
  SUBCASE("average pooling, a 3x3 convolution and relu") { check_gradients<pool_t>(three); }
  SUBCASE("more channels: a later stage wider than the first") { check_gradients<wide_t>({{1, 4, 4}, {1, 2}}); }
}

TEST_CASE("kept transitions: reversible and checkpointed equal stored in float32; dropout replayed") {
  const auto batch = cpu_tests::random_batch<float>(64 * 8, 9);
  const auto y = cpu_tests::labels(8, C);
  const auto compare = [&](auto&& m) { cpu_tests::check_modes_match_stored(m, batch, y); };
  compare(make<float>(three, 8));
  compare(make<float, pool_t>(three, 8));
  compare(make<float, down_t>(three, 8, momentum_dropout));
  compare(make<float, wide_t>({{1, 8, 8}, {2, 3}}, 8, momentum_dropout));
}

TEST_CASE("kept transitions: the tracked peak is the plan; reversible memory flat in depth") {
  const auto batch = cpu_tests::random_batch<float>(64 * 8, 2);
  const auto y = cpu_tests::labels(8, C);
  const auto check = [&](auto&& make_at) {
    std::size_t reversible = 0;
    for (const auto& depths : {std::vector<std::size_t>{1, 1, 1}, std::vector<std::size_t>{2, 4, 3}}) {
      auto m = make_at(depths);
      for (auto md : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed}) {
        m.memory().reset_peak();
        m.loss_and_gradient(batch, y, md);
        CAPTURE(rwd::to_string(md));
        CHECK(m.memory().peak() == m.plan(md).total());
      }
      if (reversible) CHECK(m.plan(rwd::mode::reversible).total() == reversible);
      reversible = m.plan(rwd::mode::reversible).total();
    }
  };
  check([](std::vector<std::size_t> d) { return make<float, down_t>({{1, 8, 8}, d}, 8); });
  check([](std::vector<std::size_t> d) { return make<float, wide_t>({{1, 8, 8}, d}, 8); });
  // what the boundaries keep: reversible, x and v where stages 1 and 2 end (widths 128 and 64);
  // stored, x alone there, beside every layer's tape
  auto m = make<float>({{1, 8, 8}, {1, 1, 1}}, 8);
  const auto& a = m.layout();
  std::size_t stages_stored = 0;
  using step = rwd::staged_step<float, stem_t, block_t, rwd::cpu::executor<float>, down_t>;
  for (std::size_t s = 0; s < 3; ++s) stages_stored += step::stage_tape(rwd::mode::stored, a, 8, 1, s);
  CHECK(m.plan(rwd::mode::reversible).tape_bytes == 2 * (128 + 64) * 8 * sizeof(float));
  CHECK(m.plan(rwd::mode::stored).tape_bytes == (stages_stored + (128 + 64) * 8) * sizeof(float));
  // the state and cotangents at the widest stage's width
  auto w = make<float, wide_t>({{1, 8, 8}, {1, 1}}, 8);
  CHECK(w.layout().width() == 256);
  CHECK(w.plan(rwd::mode::reversible).state_bytes == 2 * 2 * 256 * 8 * sizeof(float));
}

TEST_CASE("kept transitions: the gradient is the same bits on one and two threads") {
  const auto batch = cpu_tests::random_batch<float>(64 * 8, 4);
  const auto y = cpu_tests::labels(8, C);
  const int was = Eigen::nbThreads();
  std::vector<std::vector<float>> grads;
  for (int t : {1, 2}) {
    Eigen::setNbThreads(t);
    auto m = make<float, pool_t>(three, 8, momentum_dropout);
    m.loss_and_gradient(batch, y, rwd::mode::reversible);
    grads.emplace_back(m.gradients().begin(), m.gradients().end());
  }
  Eigen::setNbThreads(was);
  CHECK(grads[0] == grads[1]);
}

TEST_CASE("kept transitions: refusals name the cause; files of another network refused") {
  // 2x6x6 -> squeeze 8x3x3 -> conv 4x3x3: the second squeeze cannot take an odd size
  CHECK_THROWS_WITH_AS(make<float>({{1, 6, 6}, {1, 1, 1}}),
                       doctest::Contains("transition down before stage 3, on stage 2's 4x3x3 state: its layer 0 (squeeze) cannot take a 4x3x3 input"),
                       rwd::error);
  CHECK_THROWS_WITH_AS((make<float, pool_t>({{1, 6, 6}, {1, 1, 1}})), doctest::Contains("(avg pool 2) cannot take a 8x3x3 input"), rwd::error);
  const std::string path = (std::filesystem::temp_directory_path() / "rewind_transition.safetensors").string();
  auto m = make<float>(three, 2);
  m.save(path);
  auto n = make<float>(three, 2);
  n.initialise(99);
  n.load(path);
  CHECK(std::vector<float>(n.parameters().begin(), n.parameters().end()) == std::vector<float>(m.parameters().begin(), m.parameters().end()));
  auto p = make<float, pool_t>(three, 2);
  const std::vector<float> before(p.parameters().begin(), p.parameters().end());
  CHECK_THROWS_AS(p.load(path), rwd::error);  // another transition's file
  CHECK(std::vector<float>(p.parameters().begin(), p.parameters().end()) == before);
  std::filesystem::remove(path);
}
