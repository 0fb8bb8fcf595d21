// mode::exact: the rewind in fixed point with the information ledger.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <rewind/cpu.hpp>
#include <vector>

using namespace rwd::literals;

namespace {
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::param<"mu"> mu;
inline constexpr auto f = rwd::map<"f">(rwd::dense<8>, rwd::tanh, rwd::dense_same);
inline constexpr auto momentum = rwd::block(v = mu * v + f(x), x = x + v);
using momentum_t = std::remove_cv_t<decltype(momentum)>;

std::vector<float> batch_of(std::size_t n) {
  std::vector<float> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<float>((i * 37 % 101) / 101.0);
  return b;
}
}  // namespace

TEST_CASE("exact: the rewind gives back the input bit for bit at depth 1024 (mu = 0.9 and 0.3)") {
  for (double m : {0.9, 0.3}) {
    rwd::cpu::model<float, momentum_t> model(momentum, 1024, {.width = 12, .batch = 4, .classes = 3}, rwd::env{}.set("mu", m));
    const auto batch = batch_of(48);
    // the model compares the rewound input with the input, bit for bit, and throws otherwise (the
    // test below shows that it does)
    CHECK_NOTHROW(model.loss_and_gradient(batch, std::vector<int>{0, 1, 2, 0}, rwd::cpu::mode::exact));
    const auto& r = model.last_exact();
    CAPTURE(m);
    // the ledger: about log2(1/mu) bits per element of v per layer, spilled over several words
    const double expected_bits = 1024 * std::log2(1 / m);
    CHECK(r.ledger_bits_per_element >= 0.9 * expected_bits);
    CHECK(r.ledger_bits_per_element <= 1.2 * expected_bits + 64);
    CHECK(r.ledger_planes + 1 >= static_cast<std::size_t>(expected_bits / 16));  // a 16-bit word per 16 bits past the head
    CHECK(model.memory().peak() <= model.plan(rwd::cpu::mode::exact).total());
    CHECK(model.plan(rwd::cpu::mode::exact).tape_bytes <= r.ledger_bytes_peak + 2 * 48);  // the bound is one plane loose at most
  }
  static_assert(rwd::network<float, rwd::policy::exact>(rwd::stack<4096>(rwd::momentum(x, v, 0.9_c, f))).depth == 4096);
  CHECK(rwd::exact_ledger_bits(momentum, rwd::env{}.set("mu", 0.9)) == doctest::Approx(0.152003).epsilon(1e-5));
}

template <class Block>
double exact_vs_stored64(Block b, double m, std::size_t depth) {
  const rwd::env e = rwd::env{}.set("mu", m);
  const rwd::cpu::options o{.width = 12, .batch = 4, .classes = 3, .seed = 5, .lossy = true};  // lossy: for the audit below
  rwd::cpu::model<float, Block> fp32(b, depth, o, e);
  rwd::cpu::model<double, Block> fp64(b, depth, o, e);
  std::copy(fp32.parameters().begin(), fp32.parameters().end(), fp64.parameters().begin());
  const auto batch = batch_of(48);
  const std::vector<double> batch64(batch.begin(), batch.end());
  const std::vector<int> labels{0, 1, 2, 0};
  fp64.loss_and_gradient(batch64, labels, rwd::cpu::mode::stored);
  fp32.loss_and_gradient(batch, labels, rwd::cpu::mode::exact);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < fp64.gradients().size(); ++i) {
    worst = std::max(worst, std::abs(fp64.gradients()[i] - static_cast<double>(fp32.gradients()[i])));
    scale = std::max(scale, std::abs(fp64.gradients()[i]));
  }
  // and float32 reversible on the same network has collapsed
  const auto audit = fp32.audit(batch, labels, rwd::cpu::mode::reversible);
  CHECK((audit.max_rel_error > 1e-2 || !std::isfinite(audit.max_rel_error)));
  return worst / scale;
}

TEST_CASE("exact: a rewind that does not give back the input is an error, not a gradient") {
  // A map that changes between the forward pass and the rewind (here: a parameter of layer 0
  // moved by the gradient listener once the head is done) breaks the rewind; the check must see it.
  rwd::cpu::model<float, momentum_t> model(momentum, 16, {.width = 12, .batch = 4, .classes = 3}, rwd::env{}.set("mu", 0.9));
  const auto batch = batch_of(48);
  const std::vector<int> labels{0, 1, 2, 0};
  bool moved = false;
  const auto move_a_weight = [&](std::size_t) {
    if (!moved) model.parameters()[0] += 0.25f, moved = true;
  };
  CHECK_THROWS_WITH_AS(model.loss_and_gradient(batch, labels, rwd::cpu::mode::exact, move_a_weight),
                       doctest::Contains("did not return the input bit for bit"), rwd::error);
  CHECK(moved);
  CHECK(!model.last_exact().bit_exact);
  CHECK_NOTHROW(model.loss_and_gradient(batch, labels, rwd::cpu::mode::exact));  // the same model, left alone, rewinds exactly
  CHECK(model.last_exact().bit_exact);
}

TEST_CASE("exact: gradients at float32 level where float32 reversible has collapsed") {
  CHECK(exact_vs_stored64(momentum, 0.6, 128) < 1e-4);
  CHECK(exact_vs_stored64(momentum, 0.9, 512) < 1e-4);
}

TEST_CASE("exact: a value outside the fixed-point range is an error, not a wrong gradient") {
  rwd::cpu::model<float, momentum_t> model(momentum, 4, {.width = 12, .batch = 4, .classes = 3, .exact_fraction_bits = 48},
                                           rwd::env{}.set("mu", 0.9));
  auto batch = batch_of(48);
  CHECK_NOTHROW(model.loss_and_gradient(batch, std::vector<int>{0, 1, 2, 0}, rwd::cpu::mode::exact));
  const std::vector<float> gradients(model.gradients().begin(), model.gradients().end()),
      input_gradient(model.input_gradient().begin(), model.input_gradient().end());
  batch[5] = 100.f;  // 100 > 2^(51 - 48) = 8
  CHECK_THROWS_WITH_AS(model.loss_and_gradient(batch, std::vector<int>{0, 1, 2, 0}, rwd::cpu::mode::exact),
                       doctest::Contains("a value of x (100.000000) leaves the fixed-point range +-2^3"), rwd::error);
  // the model is left as it was: the last step's gradients, not zeros
  CHECK(std::ranges::equal(model.gradients(), gradients));
  CHECK(std::ranges::equal(model.input_gradient(), input_gradient));
  CHECK_NOTHROW(model.loss_and_gradient(batch, std::vector<int>{0, 1, 2, 0}, rwd::cpu::mode::stored));
}

TEST_CASE("exact: x <- x + v leaving the fixed-point range is an error that names x") {
  // every input is inside the range (+-2^3 with 48 fractional bits) but at its edge: the first
  // layer's v = f(x) pushes x out wherever it has x's sign (x <- x + v runs in v's pass)
  rwd::cpu::model<float, momentum_t> model(momentum, 4, {.width = 12, .batch = 4, .classes = 3, .exact_fraction_bits = 48},
                                           rwd::env{}.set("mu", 0.9));
  std::vector<float> batch(48);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = i % 2 ? 7.9999f : -7.9999f;
  CHECK_THROWS_WITH_AS(model.loss_and_gradient(batch, std::vector<int>{0, 1, 2, 0}, rwd::cpu::mode::exact),
                       doctest::Contains("a value of x ("), rwd::error);
  CHECK(model.memory().live() == 0);
}

TEST_CASE("exact: a radix per state variable") {
  const rwd::env e = rwd::env{}.set("mu", 0.9);
  const auto batch = batch_of(48);
  const std::vector<int> labels{0, 1, 2, 0};
  // v on 20 fractional bits, x on 40: still a bit-exact rewind, and the gradient of stored backprop
  rwd::cpu::model<float, momentum_t> mixed(momentum, 64,
                                           {.width = 12, .batch = 4, .classes = 3, .exact_fraction_bits = 40,
                                            .exact_fraction_bits_of = {{"v", 20}}},
                                           e);
  CHECK_NOTHROW(mixed.loss_and_gradient(batch, labels, rwd::cpu::mode::exact));  // bit-exact, or it throws
  const std::vector<float> exact(mixed.gradients().begin(), mixed.gradients().end());
  mixed.loss_and_gradient(batch, labels, rwd::cpu::mode::stored);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    worst = std::max(worst, std::abs(double(exact[i]) - mixed.gradients()[i]));
    scale = std::max(scale, std::abs(double(mixed.gradients()[i])));
  }
  CHECK(worst / scale < 1e-3);  // v rounded to 2^-20 at every layer
  // a value that leaves its own variable's range is named
  rwd::cpu::model<float, momentum_t> narrow(momentum, 4, {.width = 12, .batch = 4, .classes = 3, .exact_fraction_bits_of = {{"x", 51}}}, e);
  auto big = batch;
  big[3] = 2.f;  // 2 > 2^(51 - 51)
  CHECK_THROWS_WITH_AS(narrow.loss_and_gradient(big, labels, rwd::cpu::mode::exact), doctest::Contains("a value of x"), rwd::error);
  // names and bits are checked when the model is made
  CHECK_THROWS_WITH_AS((rwd::cpu::model<float, momentum_t>(momentum, 4, {.width = 12, .batch = 4, .classes = 3, .exact_fraction_bits_of = {{"w", 20}}}, e)),
                       doctest::Contains("'w' is not a state variable"), rwd::error);
  CHECK_THROWS_WITH_AS((rwd::cpu::model<float, momentum_t>(momentum, 4, {.width = 12, .batch = 4, .classes = 3, .exact_fraction_bits_of = {{"v", 60}}}, e)),
                       doctest::Contains("[0, 51]"), rwd::error);
}

TEST_CASE("exact: a coefficient the ledger cannot hold is refused with the update named") {
  const auto batch = batch_of(48);
  const std::vector<int> labels{0, 1, 2, 0};
  rwd::cpu::model<float, momentum_t> negative(momentum, 4, {.width = 12, .batch = 4, .classes = 3}, rwd::env{}.set("mu", -0.5));
  CHECK_NOTHROW(negative.loss_and_gradient(batch, labels, rwd::cpu::mode::stored));
  CHECK_THROWS_WITH_AS(negative.loss_and_gradient(batch, labels, rwd::cpu::mode::exact),
                       doctest::Contains("alpha = -1/2 must be positive"), rwd::error);
}
