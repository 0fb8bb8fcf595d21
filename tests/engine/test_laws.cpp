// The laws of a step (laws.hpp) for every block of tests/dsl/blocks.hpp and more (14 blocks).
#include "laws.hpp"

#include "../dsl/blocks.hpp"

using namespace test_blocks;
using laws::check_laws;
using laws::held;
namespace hana = boost::hana;

TEST_CASE("step laws: momentum") { check_laws(momentum); }
TEST_CASE("step laws: leapfrog") { check_laws(leapfrog); }
TEST_CASE("step laws: additive coupling") { check_laws(coupling); }
TEST_CASE("step laws: three state variables") { check_laws(three); }
TEST_CASE("step laws: runtime mu") { check_laws(runtime_mu, rwd::env{}.set("mu", 0.7)); }
TEST_CASE("step laws: two maps") { check_laws(two_maps); }
TEST_CASE("step laws: expansive") { check_laws(expansive); }
TEST_CASE("step laws: long sum") { check_laws(long_sum); }
TEST_CASE("step laws: affine coupling (data-dependent alpha)") { check_laws(affine); }
TEST_CASE("step laws: a gate exp(v) (data-dependent alpha)") { check_laws(gated); }
TEST_CASE("step laws: a gate bounded away from zero") { check_laws(half_gate); }
TEST_CASE("step laws: the same call twice in one update (two map steps, one call)") {
  check_laws(rwd::block(v = v + f(x) + 0.5_c * rwd::tanh(f(x)) * v, x = x + v));
}
TEST_CASE("step laws: nested maps and elementwise products") {
  check_laws(rwd::block(x = x + f(g(v) + 0.5_c * v) * rwd::sigmoid(v), v = 0.8_c * v - w * f(x), w = w + x * v));
}
TEST_CASE("step laws: a runtime step size in both updates (leapfrog with h)") {
  constexpr rwd::param<"h"> step;
  check_laws(rwd::block(v = v + step * F(x), x = x + step * v), rwd::env{}.set("h", 0.3));
}

// a state with a shape (3 channels of 4 x 5 positions) and maps of convolutions and group norms:
// the bottleneck of a convolutional momentum block, and a coupling whose halves are images
inline constexpr auto conv_f = rwd::map<"cf">(rwd::conv<4, 3>, rwd::group_norm<2>, rwd::relu, rwd::conv_same<3>);
inline constexpr auto conv_g = rwd::map<"cg">(rwd::layer_norm, rwd::conv_same<1>, rwd::tanh);
inline constexpr auto conv_s = rwd::map<"cs">(rwd::conv<2, 3>, rwd::tanh, rwd::conv_same<3>, rwd::tanh);
TEST_CASE("step laws: momentum with a convolutional map on a 3x4x5 state") {
  check_laws(rwd::momentum(x, v, 0.9_c, conv_f), {}, rwd::tensor_shape{3, 4, 5});
}
TEST_CASE("step laws: coupling of convolutional maps, and an affine coupling with a convolutional scale") {
  check_laws(rwd::additive_coupling(x1, x2, conv_f, conv_g), {}, rwd::tensor_shape{3, 4, 5});
  check_laws(rwd::block(x1 = x1 * rwd::exp(conv_s(x2)) + conv_g(x2), x2 = x2 + conv_f(x1)), {}, rwd::tensor_shape{3, 4, 5});
}

// dropout inside the maps: the step's masks drawn again by the rewind and the backward pass
TEST_CASE("step laws: dropout in a dense map and in a convolutional map") {
  check_laws(rwd::momentum(x, v, 0.9_c, rwd::map<"fd">(rwd::dense<16>, rwd::tanh, rwd::dropout(0.5_c), rwd::dense_same)));
  check_laws(rwd::additive_coupling(x1, x2, rwd::map<"cd">(rwd::conv<4, 3>, rwd::relu, rwd::dropout(0.25_c), rwd::conv_same<3>), conv_g), {},
             rwd::tensor_shape{3, 4, 5});
}

TEST_CASE("a model built from a network steps in its policy's mode") {
  using Momentum = std::remove_cv_t<decltype(momentum)>;
  const rwd::options o{.width = 6, .batch = 4, .classes = 3};
  std::vector<float> data(24);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
  const std::vector<int> labels{0, 1, 2, 0};
  rwd::cpu::model<float, Momentum> plain(momentum, 200, o);  // past the float budget of 151 layers

  rwd::cpu::model checkpointed(rwd::network<float, rwd::policy::checkpointed>(rwd::stack(momentum, 200)), o);
  CHECK(checkpointed.policy_mode() == rwd::mode::checkpointed);
  CHECK(checkpointed.depth() == 200);
  CHECK(checkpointed.loss_and_gradient(data, labels) == plain.loss_and_gradient(data, labels, rwd::mode::checkpointed));
  CHECK(held(checkpointed.gradients()) == held(plain.gradients()));

  // lossy: the reversible step past the budget that a plain model refuses
  rwd::cpu::model lossy(rwd::network<float, rwd::policy::lossy>(rwd::stack(momentum, 200)), o);
  CHECK(lossy.policy_mode() == rwd::mode::reversible);
  CHECK_NOTHROW(lossy.loss_and_gradient(data, labels));
  CHECK_THROWS_WITH_AS(plain.loss_and_gradient(data, labels), doctest::Contains("rewind E007"), rwd::error);

  rwd::cpu::model strict(rwd::network<float>(rwd::stack<100>(momentum)), o);  // checked at compile time
  CHECK(strict.policy_mode() == rwd::mode::reversible);
  CHECK(std::isfinite(strict.loss_and_gradient(data, labels)));
  rwd::cpu::model exact(rwd::network<float, rwd::policy::exact>(rwd::stack(momentum, 200)), o);
  CHECK(exact.policy_mode() == rwd::mode::exact);
  CHECK(std::isfinite(exact.loss_and_gradient(data, labels)));
  CHECK(exact.last_exact().bit_exact);
}

TEST_CASE("dropout in a CPU model: masks fixed between updates and new after each, none when predicting, the same on any thread count") {
  constexpr auto block = rwd::momentum(x, v, 0.9_c, rwd::map<"fd">(rwd::dense<16>, rwd::tanh, rwd::dropout(0.5_c), rwd::dense_same));
  using Block = std::remove_cv_t<decltype(block)>;
  const rwd::options o{.width = 6, .batch = 7, .classes = 3, .seed = 5, .grain = 2};
  std::vector<double> data(42);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::sin(0.9 * static_cast<double>(i));
  const std::vector<int> labels{0, 1, 2, 0, 1, 2, 0};
  rwd::cpu::model<double, Block> m(block, 4, o);
  const double first = m.loss_and_gradient(data, labels, rwd::mode::reversible);
  const laws::vec grads = held(m.gradients());
  CHECK(m.loss_and_gradient(data, labels, rwd::mode::stored) == doctest::Approx(first).epsilon(1e-13));  // the same masks
  CHECK(laws::max_diff(held(m.gradients()), grads) < 1e-12);
  for (int threads : {1, 2, 3}) {  // the masks follow the samples, not the chunks or threads
    rwd::cpu::set_threads(threads);
    CHECK(m.loss_and_gradient(data, labels, rwd::mode::reversible) == first);
    CHECK(held(m.gradients()) == grads);
  }
  rwd::cpu::set_threads(0);
  const auto predicted = m.predict(data);
  m.apply(rwd::sgd{.lr = 1e-300});  // the parameters as they were, the step count one further
  CHECK(m.predict(data) == predicted);
  CHECK(std::abs(m.loss_and_gradient(data, labels, rwd::mode::reversible) - first) > 1e-6);  // new masks
}
