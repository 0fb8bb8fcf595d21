// Memory measured by the tracking allocator against the closed-form plan, and the audit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <rewind/cpu.hpp>
#include <vector>

using namespace rwd::literals;

namespace {
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
using momentum_t = std::remove_cv_t<decltype(rwd::momentum(x, v, 0.9_c, f))>;

template <class T, class Block>
std::size_t measured_peak(Block b, std::size_t depth, rwd::cpu::mode m, std::size_t width = 48, std::size_t batch = 8) {
  // lossy: these tests measure bytes, also past the budget (momentum at depth 512)
  rwd::cpu::model<T, Block> model(b, depth, {.width = width, .batch = batch, .classes = 10, .lossy = true});
  std::vector<T> batch_data(width * batch, T(0.25));
  std::vector<int> labels(batch, 1);
  model.memory().reset_peak();
  model.loss_and_gradient(batch_data, labels, m);
  CHECK(model.memory().live() == 0);  // every buffer of the step is released
  const std::size_t peak = model.memory().peak();
  CHECK(peak == model.plan(m).total());  // exact, so also within the 1% of the issue
  return peak;
}
}  // namespace

TEST_CASE("memory: the reversible peak does not depend on depth and equals the plan") {
  const auto b = rwd::momentum(x, v, 0.9_c, f);
  const std::size_t p8 = measured_peak<float>(b, 8, rwd::cpu::mode::reversible);
  const std::size_t p512 = measured_peak<float>(b, 512, rwd::cpu::mode::reversible);
  CHECK(p8 == p512);
}

TEST_CASE("memory: the stored peak grows linearly with depth and equals the plan") {
  const auto b = rwd::momentum(x, v, 0.9_c, f);
  const std::size_t p8 = measured_peak<float>(b, 8, rwd::cpu::mode::stored);
  const std::size_t p64 = measured_peak<float>(b, 64, rwd::cpu::mode::stored);
  const std::size_t p512 = measured_peak<float>(b, 512, rwd::cpu::mode::stored);
  CHECK((p512 - p64) * (64 - 8) == (p64 - p8) * (512 - 64));
  CHECK(p512 > 50 * measured_peak<float>(b, 512, rwd::cpu::mode::reversible));
}

TEST_CASE("memory: the stored tape keeps what the backward pass reads: not v, not f's output") {
  // per layer: x's old value (f's input) and f's hidden layer; not v's (no backward step reads
  // v), and not f's output (its last dense layer's backward does not read it), which the next
  // entry overwrites
  CHECK(rwd::cpu::model<float, momentum_t>(rwd::momentum(x, v, 0.9_c, f), 8, {.width = 48, .batch = 8, .classes = 10})
            .plan(rwd::cpu::mode::stored)
            .tape_bytes == 8 * (48 + 16) * 8 * sizeof(float));
  // with the map's update last in the block, its output runs past each chunk's last entry, into
  // room planned for it: one output per sample more; chunks of 2 samples on every thread, the
  // stored gradient is the reversible one, and the peak is the plan
  constexpr auto late = rwd::block(x = x + v, v = 0.9_c * v + f(x));
  rwd::cpu::model<float, std::remove_cv_t<decltype(late)>> m(late, 8, {.width = 48, .batch = 8, .classes = 10, .grain = 2});
  CHECK(m.plan(rwd::cpu::mode::stored).tape_bytes == (8 * (48 + 16) + 48) * 8 * sizeof(float));
  std::vector<float> batch(48 * 8);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<float>((i * 37) % 101) / 101.0f;
  const std::vector<int> labels{0, 1, 2, 3, 4, 5, 6, 7};
  m.memory().reset_peak();
  m.loss_and_gradient(batch, labels, rwd::cpu::mode::stored);
  CHECK(m.memory().peak() == m.plan(rwd::cpu::mode::stored).total());
  const std::vector<float> stored(m.gradients().begin(), m.gradients().end());
  m.loss_and_gradient(batch, labels, rwd::cpu::mode::reversible);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < stored.size(); ++i) scale = std::max(scale, std::abs(static_cast<double>(stored[i])));
  for (std::size_t i = 0; i < stored.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(stored[i]) - m.gradients()[i]) / scale);
  CHECK(scale > 0);
  CHECK(worst < 1e-5);
}

TEST_CASE("memory: plans of other blocks hold too (expression arguments, two calls, coupling)") {
  constexpr auto g = rwd::map<"g">(rwd::dense<4>, rwd::relu, rwd::dense<6>, rwd::sigmoid, rwd::dense_same);
  constexpr auto block = rwd::block(v = 0.5_c * v + f(0.5_c * x + rwd::tanh(x)) - g(x), x = x + v * rwd::tanh(v));
  constexpr auto h = rwd::map<"h">(rwd::tanh, rwd::dense_same, rwd::relu, rwd::dense<3>, rwd::dense_same);
  constexpr auto activation_first = rwd::block(v = 0.8_c * v - h(x), x = x + v);
  for (auto m : {rwd::cpu::mode::stored, rwd::cpu::mode::reversible}) {
    measured_peak<double>(block, 5, m, 12, 3);
    measured_peak<double>(activation_first, 5, m, 12, 3);
    measured_peak<double>(rwd::additive_coupling(x, v, f, g), 5, m, 12, 3);
  }
}

TEST_CASE("memory: the reference configuration's reversible plan stays within 10% of 2.425 MB") {
  // the state and cotangents, a workspace per thread and the gradient slabs (two sets, so that a
  // layer's gradients are added up while the next layer runs): 2.637 MB on two threads
  const int threads = rwd::cpu::threads();
  rwd::cpu::set_threads(2);  // the plan counts a workspace per thread
  rwd::cpu::model<float, momentum_t> model(rwd::momentum(x, v, 0.9_c, f), 512, {.width = 784, .batch = 128, .classes = 10, .lossy = true});
  const auto rev = model.plan(rwd::cpu::mode::reversible), stored = model.plan(rwd::cpu::mode::stored);
  rwd::cpu::set_threads(threads);
  CHECK(rev.total() <= 2'667'500);
  CHECK(stored.total() >= 80 * rev.total());
}

TEST_CASE("audit: inside the budget the rewind is exact to float precision") {
  rwd::cpu::model<float, momentum_t> model(rwd::momentum(x, v, 0.9_c, f), 16, {.width = 24, .batch = 6, .classes = 4});
  std::vector<float> batch(24 * 6);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<float>((i * 37 % 101) / 101.0);
  const auto r = model.audit(batch, std::vector<int>{0, 1, 2, 3, 0, 1});
  CHECK(r.cosine >= 0.9999995);
  CHECK(r.max_rel_error < 1e-4);
  for (double e : r.layer_error) CHECK(e < 1e-5);
  // every gradient the step produces, each on its own: the parameters and the input's cotangent
  REQUIRE(r.gradients.size() == 2);
  CHECK(r.gradients[0].name == "parameters");
  CHECK(r.gradients[1].name == "input x");
  for (const auto& g : r.gradients) {
    CHECK(g.cosine >= r.cosine);
    CHECK(g.max_rel_error <= r.max_rel_error);
  }
}

TEST_CASE("audit: one wrong gradient is enough, however good the others are") {
  // a wrong input gradient beside exact parameter gradients (what a rewind that loses the bottom
  // layers' input does): the summary is the worst of them, not an average that hides it
  std::vector<double> reference(1000), audited(1000);
  for (std::size_t i = 0; i < reference.size(); ++i) reference[i] = audited[i] = std::sin(0.1 * static_cast<double>(i));
  const auto exact = rwd::agreement<double>("parameters", reference, reference);
  audited[3] = 0.41, reference[3] = 0.27;
  const auto wrong = rwd::agreement<double>("input x", reference, audited);
  CHECK(exact.cosine == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(exact.max_rel_error == 0);
  CHECK(wrong.max_rel_error == doctest::Approx(0.14).epsilon(1e-6));
  audited[7] = std::numeric_limits<double>::infinity();
  const auto overflow = rwd::agreement<double>("input x", reference, audited);
  CHECK(std::isnan(overflow.cosine));
  CHECK(std::isinf(overflow.max_rel_error));
}

TEST_CASE("audit: outside the budget (mu = 0.6, depth 128) the collapse is reported, not hidden") {
  const auto b = rwd::momentum(x, v, 0.6_c, f);
  rwd::cpu::model<float, std::remove_cv_t<decltype(b)>> model(b, 128, {.width = 24, .batch = 6, .classes = 4, .lossy = true});
  std::vector<float> batch(24 * 6);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<float>((i * 37 % 101) / 101.0);
  const auto r = model.audit(batch, std::vector<int>{0, 1, 2, 3, 0, 1});
  CAPTURE(r.cosine);
  CAPTURE(r.gradients[0].cosine);
  CAPTURE(r.gradients[1].cosine);
  CAPTURE(r.layer_error.front());
  CHECK(r.layer_error.front() > 1.0);  // the reconstructed input is rubble
  CHECK(r.layer_error.back() < 1e-5);  // the top layer is still fine: the error grows downward
  CHECK((r.cosine < 0.99 || !std::isfinite(r.cosine)));
  // the input's cotangent is compared on its own, and found wrong
  REQUIRE(r.gradients.size() == 2);
  CHECK(r.gradients[1].name == "input x");
  CHECK((r.gradients[1].max_rel_error > 1e-2 || !std::isfinite(r.gradients[1].max_rel_error)));
}

TEST_CASE("audit: an alpha from the data that is tiny but normal at one element is caught through the input gradient") {
  // alpha = exp(v) is exp(-60) ~ 1e-26 at one element of the input: a normal float, so no element
  // check fires, but the rewind divides by it; lossy, since the block's budget is unknown
  const auto b = rwd::block(x = rwd::exp(v) * x + f(v), v = v + f(x));
  rwd::cpu::model<float, std::remove_cv_t<decltype(b)>> model(b, 6, {.width = 24, .batch = 6, .classes = 4, .input = "v", .output = "x", .lossy = true});
  std::vector<float> batch(24 * 6);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<float>((i * 37 % 101) / 101.0);
  const std::vector<int> labels{0, 1, 2, 3, 0, 1};
  const auto fine = model.audit(batch, labels);
  CHECK(fine.gradients[1].max_rel_error < 1e-3);
  batch[30] = -60.f;
  const auto r = model.audit(batch, labels);
  CAPTURE(r.gradients[0].max_rel_error);
  CAPTURE(r.gradients[1].max_rel_error);
  CHECK(r.gradients[1].name == "input v");
  CHECK((r.gradients[1].max_rel_error > 1e-2 || !std::isfinite(r.gradients[1].max_rel_error)));
  CHECK((r.max_rel_error > 1e-2 || !std::isfinite(r.max_rel_error)));
}

TEST_CASE("checkpointed: exact past the budget (mu = 0.6, depth 128), memory as planned") {
  const auto b = rwd::momentum(x, v, 0.6_c, f);
  using model_t = rwd::cpu::model<float, std::remove_cv_t<decltype(b)>>;
  model_t m(b, 128, {.width = 24, .batch = 6, .classes = 4, .lossy = true});  // lossy: for the audit at the end
  CHECK(m.checkpoint_every() == 15);  // floor(L* / 2), L* = 31.2 in float32
  std::vector<float> batch(24 * 6);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<float>((i * 37 % 101) / 101.0);
  const std::vector<int> labels{0, 1, 2, 3, 0, 1};
  m.loss_and_gradient(batch, labels, rwd::cpu::mode::stored);
  const std::vector<float> stored(m.gradients().begin(), m.gradients().end());
  m.memory().reset_peak();
  m.loss_and_gradient(batch, labels, rwd::cpu::mode::checkpointed);
  CHECK(m.memory().peak() == m.plan(rwd::cpu::mode::checkpointed).total());
  CHECK(m.memory().live() == 0);
  double dot = 0, a = 0, c = 0;
  for (std::size_t i = 0; i < stored.size(); ++i)
    dot += double(stored[i]) * m.gradients()[i], a += double(stored[i]) * stored[i], c += double(m.gradients()[i]) * m.gradients()[i];
  CHECK(dot / std::sqrt(a * c) >= 0.9999995);
  // and reversible alone has collapsed on the same network
  const auto audit = m.audit(batch, labels);
  CHECK((audit.cosine < 0.99 || !std::isfinite(audit.cosine)));
  // memory: 8 stored states of 2 x 24 x 6 floats beyond the reversible plan
  CHECK(m.plan(rwd::cpu::mode::checkpointed).total() - m.plan(rwd::cpu::mode::reversible).total() == 8 * 2 * 24 * 6 * 4);
}

TEST_CASE("checkpointed: an explicit segment length and the policy in the network type") {
  const auto b = rwd::momentum(x, v, 0.9_c, f);
  constexpr auto net = rwd::network<float, rwd::policy::checkpointed>(rwd::stack<400>(rwd::momentum(x, v, 0.9_c, f)));
  static_assert(net.depth == 400);
  rwd::cpu::model<float, std::remove_cv_t<decltype(b)>> m(b, 10, {.width = 8, .batch = 2, .classes = 2, .checkpoint_every = 3});
  CHECK(m.checkpoint_every() == 3);
  std::vector<float> batch(16, 0.5f);
  const std::vector<int> labels{0, 1};
  m.memory().reset_peak();
  m.loss_and_gradient(batch, labels, rwd::cpu::mode::checkpointed);
  CHECK(m.memory().peak() == m.plan(rwd::cpu::mode::checkpointed).total());
  CHECK(m.plan(rwd::cpu::mode::checkpointed).tape_bytes == 3 * 2 * 8 * 2 * 4);  // states at layers 3, 6, 9
}

TEST_CASE("over budget: mode::reversible is refused with E007 unless lossy; checkpointed and exact are not") {
  const auto b = rwd::momentum(x, v, 0.6_c, f);  // L* = 31 in float32
  using model_t = rwd::cpu::model<float, std::remove_cv_t<decltype(b)>>;
  std::vector<float> batch(8 * 2, 0.5f);
  const std::vector<int> labels{0, 1};
  model_t strict(b, 40, {.width = 8, .batch = 2, .classes = 2});
  CHECK(strict.budget().layers == 31);
  CHECK_THROWS_WITH_AS(strict.loss_and_gradient(batch, labels, rwd::cpu::mode::reversible), doctest::Contains("rewind E007"), rwd::error);
  CHECK_NOTHROW(strict.loss_and_gradient(batch, labels, rwd::cpu::mode::checkpointed));
  CHECK_NOTHROW(strict.loss_and_gradient(batch, labels, rwd::cpu::mode::exact));
  CHECK_NOTHROW(strict.loss_and_gradient(batch, labels, rwd::cpu::mode::stored));
  model_t inside(b, 31, {.width = 8, .batch = 2, .classes = 2});
  CHECK_NOTHROW(inside.loss_and_gradient(batch, labels, rwd::cpu::mode::reversible));
  model_t lossy(b, 40, {.width = 8, .batch = 2, .classes = 2, .lossy = true});
  CHECK_NOTHROW(lossy.loss_and_gradient(batch, labels, rwd::cpu::mode::reversible));
}
