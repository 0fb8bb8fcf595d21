// Shared by the CPU engine's tests: seeded batches and labels, and the gradients of a model
// against central differences in float64 (parameters and the input), stored and reversible.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include <rewind/cpu.hpp>

namespace cpu_tests {

template <class T>
std::vector<T> random_batch(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<T> b(n);
  for (auto& e : b) e = static_cast<T>(u(rng));
  return b;
}
inline std::vector<int> labels(std::size_t n, std::size_t classes) {
  std::vector<int> y(n);
  for (std::size_t j = 0; j < n; ++j) y[j] = static_cast<int>((j * 7 + 3) % classes);
  return y;
}

/// The worst relative error, over the parameters at `probe`, of the gradient m's last
/// loss_and_gradient(batch, y, md) left (`grad`) against central differences of its loss.
template <class Model, class Mode>
double parameter_fd_error(Model& m, const std::vector<double>& batch, const std::vector<int>& y, Mode md, const std::vector<double>& grad,
                          const std::vector<std::size_t>& probe) {
  auto params = m.parameters();
  const double h = 1e-6;
  double worst = 0;
  for (std::size_t i : probe) {
    const double keep = params[i];
    params[i] = keep + h;
    const double up = m.loss_and_gradient(batch, y, md);
    params[i] = keep - h;
    const double down = m.loss_and_gradient(batch, y, md);
    params[i] = keep;
    const double fd = (up - down) / (2 * h);
    worst = std::max(worst, std::abs(fd - grad[i]) / std::max(1e-3, std::abs(fd)));
  }
  return worst;
}

/// Gradients of a float64 model of `b` against central differences, in stored and reversible mode.
template <class Block>
void check_gradient_fd(Block b, std::size_t depth, std::string_view input = "x", std::string_view output = "x") {
  const std::size_t W = 6, B = 3, C = 4;
  rwd::cpu::model<double, Block> m(b, depth, {.width = W, .batch = B, .classes = C, .seed = 11, .input = input, .output = output});
  const auto batch = random_batch<double>(W * B, 5);
  const auto y = labels(B, C);
  for (auto md : {rwd::cpu::mode::stored, rwd::cpu::mode::reversible}) {
    m.loss_and_gradient(batch, y, md);
    const std::vector<double> grad(m.gradients().begin(), m.gradients().end());
    const std::vector<double> ginput(m.input_gradient().begin(), m.input_gradient().end());
    std::vector<std::size_t> probe;  // a spread of parameters
    for (std::size_t i = 0; i < grad.size(); i += 7) probe.push_back(i);
    double worst = parameter_fd_error(m, batch, y, md, grad, probe);
    const double h = 1e-6;
    for (std::size_t i = 0; i < batch.size(); i += 2) {
      auto moved = batch;
      moved[i] += h;
      const double up = m.loss_and_gradient(moved, y, md);
      moved[i] -= 2 * h;
      const double down = m.loss_and_gradient(moved, y, md);
      const double fd = (up - down) / (2 * h);
      worst = std::max(worst, std::abs(fd - ginput[i]) / std::max(1e-3, std::abs(fd)));
    }
    CAPTURE(static_cast<int>(md));
    CHECK(worst < 1e-6);
  }
}

/// m's loss and gradient in reversible and checkpointed mode against stored mode's (float32:
/// loss to 1e-6, every parameter to 1e-4 relative).
template <class Model, class T>
void check_modes_match_stored(Model&& m, const std::vector<T>& batch, const std::vector<int>& y) {
  const T loss = m.loss_and_gradient(batch, y, rwd::mode::stored);
  const std::vector<T> stored(m.gradients().begin(), m.gradients().end());
  for (auto md : {rwd::mode::reversible, rwd::mode::checkpointed}) {
    CHECK(m.loss_and_gradient(batch, y, md) == doctest::Approx(loss).epsilon(1e-6));
    const auto g = rwd::agreement<T>("parameters", stored, m.gradients());
    CAPTURE(rwd::to_string(md));
    CHECK(g.max_rel_error < 1e-4);
  }
}

}  // namespace cpu_tests
