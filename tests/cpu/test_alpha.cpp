// A coefficient alpha that reads the data (x = exp(v)*x + ..., x = v*x + ...): every element of
// it is checked as the engine computes it, in every float mode, forward and rewound; a zero, a
// denormal or a non-finite element is an error naming the update, the layer and the count.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <rewind/cpu.hpp>

#include "../dsl/blocks.hpp"

namespace {
// alpha = exp(v): v's input values choose alpha exactly (exp(-200) is 0 in float, exp(-100) is
// denormal, exp(100) is infinite)
using test_blocks::gated;
using gated_t = std::remove_cv_t<decltype(gated)>;
// its budget is unknown (exp(v) may be zero): mode::reversible runs it only when lossy, and then
// every element is still checked
const rwd::options options{.width = 6, .batch = 4, .classes = 3, .seed = 3, .input = "v", .output = "x", .lossy = true};

std::vector<float> batch_with(float at_5) {
  std::vector<float> b(24);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  b[5] = at_5;
  return b;
}
const std::vector<int> labels{0, 1, 2, 0};
}  // namespace

TEST_CASE("alpha from the data: a zero, a denormal or an infinite element is an error in every mode") {
  for (auto m : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed})
    for (float value : {-200.f, -100.f, 100.f}) {
      CAPTURE(rwd::to_string(m));
      CAPTURE(value);
      rwd::cpu::model<float, gated_t> model(gated, 6, options);
      const std::vector<float> before(model.parameters().begin(), model.parameters().end());
      CHECK_THROWS_WITH_AS(model.loss_and_gradient(batch_with(value), labels, m),
                           doctest::Contains("at 1 of 24 elements in layer 0, update x <- exp(v)*x + f(v)"),
                           rwd::error);
      CHECK(std::ranges::equal(model.parameters(), before));
      CHECK_THROWS_WITH_AS(model.forward(batch_with(value)), doctest::Contains("rewind E002"), rwd::error);
    }
}

TEST_CASE("alpha from the data: checked on the way back too, and silent when every element is fine") {
  rwd::cpu::model<double, gated_t> model(gated, 6, options);
  const auto good = batch_with(0.25f);
  const std::vector<double> batch(good.begin(), good.end());
  for (auto m : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed})
    CHECK_NOTHROW(model.loss_and_gradient(batch, labels, m));
  // a final state whose v makes alpha zero in the top layer's rewind
  auto state = model.forward(batch);
  const std::size_t iv = model.input_index();
  CHECK_NOTHROW(model.rewind(state));
  state[iv][5] = -800;  // exp(-800) is 0 in double
  CHECK_THROWS_WITH_AS(model.rewind(state), doctest::Contains("1 of 24 elements in layer 5"), rwd::error);
}

TEST_CASE("alpha from the data: no budget, no rewind under the strict policy; a bounded one rewinds within its budget") {
  rwd::options strict = options;
  strict.lossy = false;
  rwd::cpu::model<double, gated_t> model(gated, 6, strict);
  const auto good = batch_with(0.25f);
  const std::vector<double> batch(good.begin(), good.end());
  const std::vector<double> before(model.parameters().begin(), model.parameters().end());
  CHECK_THROWS_WITH_AS(model.loss_and_gradient(batch, labels, rwd::mode::reversible),
                       doctest::Contains("rewind E014 (budget): a coefficient alpha computed from the data"), rwd::error);
  CHECK_THROWS_WITH_AS(model.loss_and_gradient(batch, labels, rwd::mode::reversible),
                       doctest::Contains("(alpha = exp(v) in x <- exp(v)*x + f(v) ranges over [0, inf])"), rwd::error);
  CHECK(std::ranges::equal(model.parameters(), before));
  CHECK_NOTHROW(model.loss_and_gradient(batch, labels, rwd::mode::checkpointed));
  CHECK(model.checkpoint_every() == 16);

  // alpha in [1/2, 1]: 23 layers in float32; reversible equals stored inside, and is refused past
  using half_t = std::remove_cv_t<decltype(test_blocks::half_gate)>;
  rwd::cpu::model<double, half_t> half(test_blocks::half_gate, 20, strict);
  half.loss_and_gradient(batch, labels, rwd::mode::stored);
  const std::vector<double> stored(half.gradients().begin(), half.gradients().end());
  half.loss_and_gradient(batch, labels, rwd::mode::reversible);
  double worst = 0;
  for (std::size_t i = 0; i < stored.size(); ++i) worst = std::max(worst, std::abs(stored[i] - half.gradients()[i]));
  CHECK(worst < 1e-12);
  rwd::cpu::model<float, half_t> deep(test_blocks::half_gate, 24, strict);
  CHECK_THROWS_WITH_AS(deep.loss_and_gradient(good, labels, rwd::mode::reversible), doctest::Contains("rewind E007"), rwd::error);
}

TEST_CASE("alpha from the data: a declared range that does not hold is an error, not a budget on false premises") {
  using namespace rwd::literals;
  using test_blocks::f;
  using test_blocks::g;
  using test_blocks::v;
  using test_blocks::x;
  // the map promises outputs in [1/2, 2], so the budget counts alpha >= 1/2 (23 layers in
  // float32); its outputs start near 0 (small initial weights), so the promise is broken
  constexpr auto promised = rwd::block(x = g.range(0.5_c, 2_c)(v) * x + f(v), v = v + g(x));
  static_assert(rwd::budget<float>(promised).layers == 23);
  rwd::cpu::model<float, std::remove_cv_t<decltype(promised)>> model(promised, 4, options);
  CHECK_THROWS_WITH_AS(model.loss_and_gradient(batch_with(0.25f), labels, rwd::mode::stored),
                       doctest::Contains("outside its range [0.5, 2], at 24 of 24 elements in layer 0"), rwd::error);
}
