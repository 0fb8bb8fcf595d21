// A block with many maps in a model: a chain of eight additive couplings (16 maps, 16 updates)
// trained in reversible mode, its gradients against central differences and stored backprop.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <rewind/cpu.hpp>

#include "../dsl/long_blocks.hpp"
#include "gradient_checks.hpp"

using cpu_tests::labels;
using cpu_tests::random_batch;

TEST_CASE("cpu: a chain of eight couplings (16 maps) trains in reversible mode, gradients against central differences") {
  using long_blocks::eight_couplings;
  cpu_tests::check_gradient_fd(eight_couplings, 3, "x1", "x2");
  // trained: reversible steps lower the loss, and the gradients stay those of stored backprop
  rwd::cpu::model<double, std::remove_cv_t<decltype(eight_couplings)>> m(
      eight_couplings, 4, {.width = 6, .batch = 8, .classes = 3, .seed = 2, .input = "x1", .output = "x2"});
  const auto batch = random_batch<double>(6 * 8, 4);
  const auto y = labels(8, 3);
  const double first = m.loss_and_gradient(batch, y, rwd::cpu::mode::reversible);
  for (int step = 0; step < 30; ++step) {
    m.loss_and_gradient(batch, y, rwd::cpu::mode::reversible);
    m.apply(rwd::sgd{.lr = 0.2});
  }
  const double last = m.loss_and_gradient(batch, y, rwd::cpu::mode::reversible);
  const std::vector<double> reversible(m.gradients().begin(), m.gradients().end());
  m.loss_and_gradient(batch, y, rwd::cpu::mode::stored);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < reversible.size(); ++i)
    worst = std::max(worst, std::abs(reversible[i] - m.gradients()[i])), scale = std::max(scale, std::abs(m.gradients()[i]));
  CAPTURE(first);
  CAPTURE(last);
  CHECK(last < 0.9 * first);
  CHECK(worst <= 1e-12 * scale);
}

