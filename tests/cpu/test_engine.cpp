// The CPU engine against the laws: the rewind returns the input, gradients match central
// differences in float64, and the reversible gradient matches stored backprop in float32.
#include <doctest/doctest.h>

#include <cmath>
#include <rewind/cpu.hpp>
#include <vector>

#include "gradient_checks.hpp"

using namespace rwd::literals;

namespace {
using cpu_tests::check_gradient_fd;
using cpu_tests::labels;
using cpu_tests::random_batch;
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::var<"w"> w;
inline constexpr auto f = rwd::map<"f">(rwd::dense<6>, rwd::tanh, rwd::dense_same);
inline constexpr auto g = rwd::map<"g">(rwd::dense<5>, rwd::sigmoid, rwd::dense_same);
inline constexpr auto momentum = rwd::momentum(x, v, 0.9_c, f);
inline constexpr auto leapfrog = rwd::leapfrog(x, v, 1_c, f);
inline constexpr auto coupling = rwd::additive_coupling(x, v, f, g);
inline constexpr auto h = rwd::map<"h">(rwd::tanh, rwd::dense_same, rwd::relu, rwd::dense<3>, rwd::dense_same);
inline constexpr auto activation_first = rwd::block(v = 0.8_c * v - h(x), x = x + v);
inline constexpr auto twice = rwd::block(v = v + f(x) + 0.5_c * rwd::tanh(f(x)) * v, x = x + v);
// g's output declared in [-2, 2]: alpha = exp(g(v)) in [e^-2, e^2], a budget of 18 layers in float64
inline constexpr auto affine = rwd::block(x = x * rwd::exp(g.range(-2_c, 2_c)(v)) + f(v), v = v + f(x));
inline constexpr auto three = rwd::block(v = 0.5_c * v + f(x), w = w + g(v) * rwd::tanh(x), x = x + v - 0.25_c * w);

template <class T, class Block>
double round_trip_error(Block b, std::size_t depth) {
  rwd::cpu::model<T, Block> m(b, depth, {.width = 12, .batch = 5, .classes = 3, .seed = 7});
  const auto batch = random_batch<T>(12 * 5, 3);
  const auto end = m.forward(batch);
  const auto back = m.rewind(end);
  double num = 0, den = 0;  // the input variable returns to the batch, the others to zero
  for (std::size_t k = 0; k < back.size(); ++k)
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const double want = k == m.input_index() ? static_cast<double>(batch[i]) : 0.0;
      num += std::pow(static_cast<double>(back[k][i]) - want, 2);
      den += want * want;
    }
  return std::sqrt(num / den);
}

template <class Block>
void check_reversible_matches_stored(Block b, std::size_t depth, double min_cosine, double max_rel,
                                     double output_init_scale = 0.02) {
  const std::size_t W = 16, B = 8, C = 5;
  rwd::cpu::model<float, Block> m(b, depth, {.width = W, .batch = B, .classes = C, .seed = 3,
                                             .output_init_scale = output_init_scale});
  const auto batch = random_batch<float>(W * B, 9);
  const auto y = labels(B, C);
  m.loss_and_gradient(batch, y, rwd::cpu::mode::stored);
  const std::vector<float> stored(m.gradients().begin(), m.gradients().end());
  m.loss_and_gradient(batch, y, rwd::cpu::mode::reversible);
  const std::vector<float> rev(m.gradients().begin(), m.gradients().end());
  double dot = 0, ns = 0, nr = 0, worst = 0, scale = 0;
  for (std::size_t i = 0; i < stored.size(); ++i) {
    dot += double(stored[i]) * rev[i], ns += double(stored[i]) * stored[i], nr += double(rev[i]) * rev[i];
    scale = std::max(scale, std::abs(double(stored[i])));
  }
  for (std::size_t i = 0; i < stored.size(); ++i) worst = std::max(worst, std::abs(double(stored[i]) - rev[i]) / scale);
  const double cosine = dot / std::sqrt(ns * nr);
  CAPTURE(cosine);
  CAPTURE(worst);
  CHECK(cosine >= min_cosine);
  CHECK(worst < max_rel);
}
}  // namespace

TEST_CASE("cpu: forward then rewind returns the input (float64, depth 64)") {
  CHECK(round_trip_error<double>(momentum, 64) < 1e-12);
  CHECK(round_trip_error<double>(leapfrog, 64) < 1e-12);
  CHECK(round_trip_error<double>(coupling, 64) < 1e-12);
}

TEST_CASE("cpu: float32 round trip inside the budget") {
  CHECK(round_trip_error<float>(momentum, 32) < 1e-5);
  CHECK(round_trip_error<float>(leapfrog, 32) < 1e-5);
}

TEST_CASE("cpu: gradients against central differences in float64, both modes") {
  check_gradient_fd(momentum, 4);
  check_gradient_fd(leapfrog, 3);
  check_gradient_fd(coupling, 3);
  check_gradient_fd(three, 3);
  check_gradient_fd(twice, 3);
  check_gradient_fd(affine, 3);
  check_gradient_fd(activation_first, 3);  // a map that starts with an activation, dense after dense
}

TEST_CASE("cpu: reversible equals stored in float32 inside the budget") {
  check_reversible_matches_stored(momentum, 64, 0.9999995, 1e-4);
  // Leapfrog is conservative only for maps with slopes <= 0: a slope s > 0 makes the rewind
  // amplify by about 1 + sqrt(s) per layer (rwd::budget with a declared slope says so). Inside
  // the budget at depth 512 means maps with slopes of order 1e-6 here.
  check_reversible_matches_stored(leapfrog, 512, 0.9999995, 1e-4, 0.002);
}

TEST_CASE("cpu: bad input is refused with a clear error") {
  rwd::cpu::model<float, std::remove_cv_t<decltype(momentum)>> m(momentum, 2, {.width = 4, .batch = 2, .classes = 3});
  std::vector<float> batch(8, 0.5f);
  const std::vector<int> y{0, 1};
  CHECK_THROWS_WITH_AS(m.loss_and_gradient(std::vector<float>(7), y, rwd::cpu::mode::stored), doctest::Contains("width x batch"), rwd::error);
  batch[3] = NAN;
  CHECK_THROWS_WITH_AS(m.loss_and_gradient(batch, y, rwd::cpu::mode::stored), doctest::Contains("non-finite"), rwd::error);
  batch[3] = 0;
  CHECK_THROWS_WITH_AS(m.loss_and_gradient(batch, std::vector<int>{0, 7}, rwd::cpu::mode::stored), doctest::Contains("label 7"), rwd::error);
  CHECK_THROWS_WITH_AS((rwd::cpu::model<float, std::remove_cv_t<decltype(momentum)>>(momentum, 2, {.width = 4, .batch = 2, .input = "q"})),
                       doctest::Contains("'q' is not a state variable"), rwd::error);
}
