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
const rwd::options options{.width = 6, .batch = 4, .classes = 3, .seed = 3, .input = "v", .output = "x"};

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
                           doctest::Contains("denormal or not finite at 1 of 24 elements in layer 0, update x <- exp(v)*x + f(v)"),
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
