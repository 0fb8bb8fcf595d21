// Optimizers, parameter files and determinism.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <rewind/cpu.hpp>
#include <vector>

using namespace rwd::literals;

namespace {
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr auto f = rwd::map<"f">(rwd::dense<8>, rwd::tanh, rwd::dense_same);
inline constexpr auto momentum = rwd::momentum(x, v, 0.9_c, f);
using model_t = rwd::cpu::model<float, std::remove_cv_t<decltype(momentum)>>;

struct toy {  // a separable 3-class problem: class c has a bump in rows [4c, 4c + 4)
  std::vector<float> batch;
  std::vector<int> labels;
  toy(std::size_t width, std::size_t n) : batch(width * n, 0.f), labels(n) {
    for (std::size_t j = 0; j < n; ++j) {
      labels[j] = static_cast<int>(j % 3);
      for (std::size_t r = 0; r < width; ++r)
        batch[j * width + r] = (r / 4 == j % 3 ? 1.f : 0.f) + 0.01f * static_cast<float>((r * 7 + j) % 5);
    }
  }
};

std::filesystem::path temp_file(const char* name) {
  return std::filesystem::temp_directory_path() / (std::string("rewind_test_") + name + "_" + std::to_string(::getpid()));
}
}  // namespace

TEST_CASE("training: sgd and adam lower the loss, in both modes") {
  const toy data(12, 9);
  for (auto m : {rwd::cpu::mode::stored, rwd::cpu::mode::reversible}) {
    model_t a(momentum, 6, {.width = 12, .batch = 9, .classes = 3, .seed = 5});
    const float first = a.loss_and_gradient(data.batch, data.labels, m);
    for (int i = 0; i < 30; ++i) {
      a.loss_and_gradient(data.batch, data.labels, m);
      a.apply(rwd::sgd{.lr = 0.05, .momentum = 0.9});
    }
    CHECK(a.loss_and_gradient(data.batch, data.labels, m) < 0.5f * first);
    model_t b(momentum, 6, {.width = 12, .batch = 9, .classes = 3, .seed = 5});
    for (int i = 0; i < 30; ++i) {
      b.loss_and_gradient(data.batch, data.labels, m);
      b.apply(rwd::adam{.lr = 0.02});
    }
    CHECK(b.loss_and_gradient(data.batch, data.labels, m) < 0.5f * first);
  }
  CHECK_THROWS_AS(model_t(momentum, 2, {.width = 12, .batch = 9, .classes = 3}).apply(rwd::sgd{.lr = -1}), rwd::error);
}

TEST_CASE("training: switching optimizers starts the new one afresh, exactly as a fresh model would") {
  // SGD's velocity is not Adam's first moment, and Adam has no second moment after SGD steps: a
  // switch must neither crash nor carry the old state over (parameters would jump).
  const toy data(12, 9);
  const auto m = rwd::cpu::mode::reversible;
  const rwd::sgd sgd{.lr = 0.05, .momentum = 0.9};
  const rwd::adam adam{.lr = 0.02};
  model_t switched(momentum, 6, {.width = 12, .batch = 9, .classes = 3, .seed = 5});
  for (int i = 0; i < 3; ++i) {
    switched.loss_and_gradient(data.batch, data.labels, m);
    switched.apply(sgd);
  }
  // the reference: a fresh model on the parameters the SGD steps reached
  model_t fresh(momentum, 6, {.width = 12, .batch = 9, .classes = 3, .seed = 5});
  std::ranges::copy(switched.parameters(), fresh.parameters().begin());
  for (int i = 0; i < 3; ++i) {
    CHECK(switched.loss_and_gradient(data.batch, data.labels, m) == fresh.loss_and_gradient(data.batch, data.labels, m));
    switched.apply(adam);
    fresh.apply(adam);
    CHECK(std::ranges::equal(switched.parameters(), fresh.parameters()));
  }
  // and back: SGD starts with zero velocity again
  model_t fresh_sgd(momentum, 6, {.width = 12, .batch = 9, .classes = 3, .seed = 5});
  std::ranges::copy(switched.parameters(), fresh_sgd.parameters().begin());
  for (int i = 0; i < 2; ++i) {
    switched.loss_and_gradient(data.batch, data.labels, m);
    fresh_sgd.loss_and_gradient(data.batch, data.labels, m);
    switched.apply(sgd);
    fresh_sgd.apply(sgd);
    CHECK(std::ranges::equal(switched.parameters(), fresh_sgd.parameters()));
  }
  // a bad setting is refused before anything changes
  const std::vector<float> before(switched.parameters().begin(), switched.parameters().end());
  CHECK_THROWS_WITH_AS(switched.apply(rwd::adam{.lr = 0.01, .beta2 = 1.0}), doctest::Contains("adam needs"), rwd::error);
  CHECK_THROWS_WITH_AS(switched.apply(rwd::sgd{.lr = 0.01, .weight_decay = -1}), doctest::Contains("sgd needs"), rwd::error);
  CHECK(std::ranges::equal(switched.parameters(), before));
}

TEST_CASE("training: the same seed gives the same weights and the same gradients") {
  const toy data(12, 9);
  model_t a(momentum, 4, {.width = 12, .batch = 9, .classes = 3, .seed = 42});
  model_t b(momentum, 4, {.width = 12, .batch = 9, .classes = 3, .seed = 42});
  model_t c(momentum, 4, {.width = 12, .batch = 9, .classes = 3, .seed = 43});
  CHECK(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));
  CHECK(!std::equal(a.parameters().begin(), a.parameters().end(), c.parameters().begin()));
  a.loss_and_gradient(data.batch, data.labels, rwd::cpu::mode::reversible);
  b.loss_and_gradient(data.batch, data.labels, rwd::cpu::mode::reversible);
  CHECK(std::equal(a.gradients().begin(), a.gradients().end(), b.gradients().begin()));
}

TEST_CASE("parameter files: round trip, and every kind of bad file refused, the model unchanged") {
  const auto path = temp_file("params");
  model_t a(momentum, 3, {.width = 12, .batch = 2, .classes = 3, .seed = 1});
  a.save(path.string());
  CHECK(!std::filesystem::exists(path.string() + ".tmp." + std::to_string(::getpid())));
  model_t b(momentum, 3, {.width = 12, .batch = 2, .classes = 3, .seed = 2});
  b.load(path.string());
  CHECK(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));

  const std::vector<float> before(b.parameters().begin(), b.parameters().end());
  auto unchanged = [&] { return std::equal(before.begin(), before.end(), b.parameters().begin()); };
  std::vector<char> bytes(std::filesystem::file_size(path));
  std::ifstream(path, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto write = [&](const std::vector<char>& content) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(content.data(), static_cast<std::streamsize>(content.size()));
  };

  write(std::vector<char>(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 2)));
  CHECK_THROWS_WITH_AS(b.load(path.string()), doctest::Contains("truncated"), rwd::error);
  auto corrupt = bytes;
  corrupt[100] ^= 0x10;
  write(corrupt);
  CHECK_THROWS_WITH_AS(b.load(path.string()), doctest::Contains("checksum mismatch"), rwd::error);
  auto wrong_magic = bytes;
  wrong_magic[0] = 'X';
  write(wrong_magic);
  CHECK_THROWS_WITH_AS(b.load(path.string()), doctest::Contains("bad magic"), rwd::error);
  write(std::vector<char>(3, 'a'));
  CHECK_THROWS_WITH_AS(b.load(path.string()), doctest::Contains("truncated"), rwd::error);
  CHECK(unchanged());

  write(bytes);
  model_t deeper(momentum, 4, {.width = 12, .batch = 2, .classes = 3});
  CHECK_THROWS_WITH_AS(deeper.load(path.string()), doctest::Contains("made for depth 3"), rwd::error);
  rwd::cpu::model<double, std::remove_cv_t<decltype(momentum)>> wide(momentum, 3, {.width = 12, .batch = 2, .classes = 3});
  CHECK_THROWS_WITH_AS(wide.load(path.string()), doctest::Contains("32-bit scalars"), rwd::error);
  const auto other = rwd::momentum(x, v, 0.5_c, f);
  rwd::cpu::model<float, std::remove_cv_t<decltype(other)>> different(other, 3, {.width = 12, .batch = 2, .classes = 3});
  CHECK_THROWS_WITH_AS(different.load(path.string()), doctest::Contains("different block"), rwd::error);
  CHECK_THROWS_WITH_AS(b.load((path.string() + ".missing")), doctest::Contains("does not exist"), rwd::error);
  CHECK_THROWS_WITH_AS(b.load(std::filesystem::temp_directory_path().string()), doctest::Contains("is not a regular file"), rwd::error);
  CHECK(unchanged());
  CHECK_THROWS_AS(a.save("/nonexistent-folder/x.params"), rwd::error);
  std::filesystem::remove(path);
}

TEST_CASE("bad input: non-finite parameters, a runtime alpha of zero") {
  const toy data(12, 3);
  model_t a(momentum, 2, {.width = 12, .batch = 3, .classes = 3});
  a.parameters()[5] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS(a.loss_and_gradient(data.batch, data.labels, rwd::cpu::mode::stored), doctest::Contains("parameter 5 is not finite"),
                       rwd::error);
  constexpr rwd::param<"mu"> mu;
  constexpr auto runtime = rwd::block(v = mu * v + f(x), x = x + v);
  using runtime_t = rwd::cpu::model<float, std::remove_cv_t<decltype(runtime)>>;
  CHECK_THROWS_WITH_AS(runtime_t(runtime, 2, {.width = 12, .batch = 3, .classes = 3}, rwd::env{}.set("mu", 0)),
                       doctest::Contains("rewind E002"), rwd::error);
  CHECK_NOTHROW(runtime_t(runtime, 2, {.width = 12, .batch = 3, .classes = 3}, rwd::env{}.set("mu", 0.5)));
  // a scalar that is not finite is named
  CHECK_THROWS_WITH_AS(runtime_t(runtime, 2, {.width = 12, .batch = 3, .classes = 3}, rwd::env{}.set("mu", std::nan(""))),
                       doctest::Contains("the runtime scalar 'mu' is nan"), rwd::error);
  CHECK_THROWS_WITH_AS(
      runtime_t(runtime, 2, {.width = 12, .batch = 3, .classes = 3}, rwd::env{}.set("mu", std::numeric_limits<double>::infinity())),
      doctest::Contains("the runtime scalar 'mu' is inf"), rwd::error);
  // every entry point that runs the stack refuses non-finite parameters, not only the gradient
  CHECK_THROWS_WITH_AS(a.forward(data.batch), doctest::Contains("parameter 5 is not finite"), rwd::error);
  CHECK_THROWS_WITH_AS(a.predict(data.batch), doctest::Contains("parameter 5 is not finite"), rwd::error);
  CHECK_THROWS_WITH_AS(a.forward_trace(data.batch), doctest::Contains("parameter 5 is not finite"), rwd::error);
  const std::vector<std::vector<float>> state(2, std::vector<float>(36, 0.5f));
  CHECK_THROWS_WITH_AS(a.rewind(state), doctest::Contains("parameter 5 is not finite"), rwd::error);
  a.parameters()[5] = 0;
  auto bad_state = state;
  bad_state[1][7] = std::nanf("");
  CHECK_THROWS_WITH_AS(a.rewind(bad_state), doctest::Contains("non-finite"), rwd::error);
  CHECK_NOTHROW(a.rewind(state));
}

TEST_CASE("threads: the gradient is the same bit for bit on any number of threads, in every mode") {
  // 3 x 16 + 5 samples: three full chunks and a short one, so a team of two takes uneven shares
  const toy data(40, 53);
  for (auto m : {rwd::cpu::mode::stored, rwd::cpu::mode::reversible, rwd::cpu::mode::checkpointed, rwd::cpu::mode::exact}) {
    CAPTURE(rwd::cpu::to_string(m));
    std::vector<float> first, first_input;
    float first_loss = 0;
    for (int n : {1, 2, 3, 1}) {
      CAPTURE(n);
      rwd::cpu::set_threads(n);
      REQUIRE(rwd::cpu::threads() == n);
      model_t a(momentum, 7, {.width = 40, .batch = 53, .classes = 3, .seed = 9, .checkpoint_every = 3, .grain = 16});
      a.memory().reset_peak();
      const float loss = a.loss_and_gradient(data.batch, data.labels, m);
      // a workspace per thread, a slab per chunk; the exact mode's ledger is planned as a bound
      if (m == rwd::cpu::mode::exact) CHECK(a.memory().peak() <= a.plan(m).total());
      else CHECK(a.memory().peak() == a.plan(m).total());
      if (first.empty()) {
        first.assign(a.gradients().begin(), a.gradients().end());
        first_input.assign(a.input_gradient().begin(), a.input_gradient().end());
        first_loss = loss;
        continue;
      }
      CHECK(loss == first_loss);
      CHECK(std::equal(first.begin(), first.end(), a.gradients().begin()));
      CHECK(std::equal(first_input.begin(), first_input.end(), a.input_gradient().begin()));
    }
  }
  // the chunks fix the sums: another grain is another (equally valid) rounding of the same gradient
  model_t whole(momentum, 7, {.width = 40, .batch = 53, .classes = 3, .seed = 9, .grain = 0});
  model_t split(momentum, 7, {.width = 40, .batch = 53, .classes = 3, .seed = 9, .grain = 16});
  whole.loss_and_gradient(data.batch, data.labels, rwd::cpu::mode::stored);
  split.loss_and_gradient(data.batch, data.labels, rwd::cpu::mode::stored);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < whole.gradients().size(); ++i) {
    worst = std::max(worst, std::abs(double(whole.gradients()[i]) - split.gradients()[i]));
    scale = std::max(scale, std::abs(double(whole.gradients()[i])));
  }
  CHECK(worst <= 1e-5 * scale);
  rwd::cpu::set_threads(0);
  CHECK(rwd::cpu::threads() == rwd::cpu::default_threads());
  if (!std::getenv("OMP_NUM_THREADS")) CHECK(rwd::cpu::threads() == rwd::cpu::available_cpus());
}

TEST_CASE("threads: an update runs on the step's threads and is the same bit for bit on any number of them") {
  // past the size where an update takes more than one thread, and not a multiple of any team
  const std::size_t n = (std::size_t{1} << 16) + 77;
  std::vector<float> theta0(n), g(n);
  for (std::size_t i = 0; i < n; ++i) theta0[i] = std::sin(0.37f * static_cast<float>(i)), g[i] = std::cos(0.11f * static_cast<float>(i));
  for (int which : {0, 1}) {
    CAPTURE(which);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      std::vector<float> theta = theta0;
      rwd::cpu::optimizer_state<float> state;
      for (int step = 0; step < 3; ++step) {
        if (which == 0) rwd::cpu::step(rwd::sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3}, std::span<float>(theta), std::span<const float>(g), state, threads);
        else rwd::cpu::step(rwd::adam{.lr = 0.01, .weight_decay = 1e-3}, std::span<float>(theta), std::span<const float>(g), state, threads);
      }
      CHECK(theta != theta0);
      if (first.empty()) first = theta;
      else CHECK(theta == first);
    }
  }
  // a model's update takes the team its last step ran on (fewer threads on a busy machine)
  rwd::cpu::set_threads(2);
  const toy data(12, 9);
  model_t a(momentum, 3, {.width = 12, .batch = 9, .classes = 3, .seed = 5, .grain = 4});
  CHECK(a.last_team() == 0);
  a.loss_and_gradient(data.batch, data.labels, rwd::cpu::mode::reversible);
  CHECK(a.last_team() >= 1);
  CHECK(a.last_team() <= 2);
  a.apply(rwd::sgd{.lr = 0.05});
  rwd::cpu::set_threads(0);
}

TEST_CASE("threads: on a busy machine the team shrinks, and grows back when a probe finds it quiet") {
  rwd::cpu::detail::team_choice team;
  CHECK(team.next(2) == 2);
  team.judge(2, 2, 0.02);  // quiet: a few short sleeps
  CHECK(team.next(2) == 2);
  team.judge(2, 2, 0.4);  // the threads slept for 40% of the step: one such step is a hiccup
  CHECK(team.next(2) == 2);
  team.judge(2, 2, 0.05);
  team.judge(2, 2, 0.4);  // two in a row: a partner is descheduled, another process wants the cores
  team.judge(2, 2, 0.4);
  for (int step = 1; step < 8; ++step) {
    CHECK(team.next(2) == 1);
    team.judge(1, 2, 0);  // one thread never sleeps at a barrier: nothing learnt
  }
  CHECK(team.next(2) == 2);  // the eighth step probes the whole team
  // still busy: back to one thread at once, and each probe that finds it so waits twice as long
  // for the next, up to 32 steps
  for (int wait : {16, 32, 32}) {
    team.judge(2, 2, 0.3);
    CHECK(team.probe_every() == wait);
    for (int step = 1; step < wait; ++step) CHECK(team.next(2) == 1);
    CHECK(team.next(2) == 2);
  }
  team.judge(2, 2, 0.01);  // quiet again: the whole team from now on, and the first probe after 8 steps
  CHECK(team.probe_every() == 8);
  CHECK(team.next(2) == 2);
  CHECK(team.next(2) == 2);
  // a team of four that slept on three threads goes down to two, not below what it needs
  rwd::cpu::detail::team_choice four;
  four.judge(4, 4, 0.5);
  four.judge(4, 4, 0.5);
  CHECK(four.next(4) == 3);
  four.judge(3, 4, 0.5);
  CHECK(four.next(4) == 2);
  CHECK(four.probe_every() == 8);  // a smaller team that sleeps is no failed probe
  CHECK(four.next(1) == 1);
}

TEST_CASE("threads: an error in one chunk is raised once, the same on any number of threads") {
  // the last sample sits at the edge of the exact mode's fixed-point range (+-2^19 with 32
  // fractional bits): the first layers push some of its elements out, in the last chunk only
  toy data(40, 53);
  for (std::size_t r = 0; r < 40; ++r) data.batch[40 * 52 + r] = (r % 2 ? 1.f : -1.f) * 524287.97f;
  std::string first;
  for (int n : {1, 2, 3}) {
    rwd::cpu::set_threads(n);
    model_t a(momentum, 4, {.width = 40, .batch = 53, .classes = 3, .seed = 9, .grain = 16});
    a.loss_and_gradient(toy(40, 53).batch, data.labels, rwd::cpu::mode::reversible);
    const std::vector<float> before(a.gradients().begin(), a.gradients().end());
    try {
      a.loss_and_gradient(data.batch, data.labels, rwd::cpu::mode::exact);
      FAIL("the exact step should have left the fixed-point range");
    } catch (const rwd::error& e) {
      CHECK(std::string(e.what()).find("fixed-point range") != std::string::npos);
      if (first.empty()) first = e.what();
      CHECK(e.what() == first);
    }
    CHECK(std::equal(before.begin(), before.end(), a.gradients().begin()));  // the forward pass failed: gradients as they were
    CHECK(a.memory().live() == 0);
  }
  rwd::cpu::set_threads(0);
}

TEST_CASE("training: the gradient listener is told of final gradients, from the head down, in every mode") {
  const toy data(12, 9);
  for (auto m : {rwd::cpu::mode::stored, rwd::cpu::mode::reversible, rwd::cpu::mode::checkpointed, rwd::cpu::mode::exact}) {
    CAPTURE(rwd::cpu::to_string(m));
    model_t a(momentum, 5, {.width = 12, .batch = 9, .classes = 3, .seed = 5, .checkpoint_every = 2});
    std::vector<std::size_t> told;
    std::vector<std::vector<float>> seen;  // the suffix as it was when the listener was told
    a.loss_and_gradient(data.batch, data.labels, m, [&](std::size_t first) {
      told.push_back(first);
      seen.emplace_back(a.gradients().begin() + static_cast<long>(first), a.gradients().end());
    });
    const std::size_t per_layer = a.parameters_per_layer();
    REQUIRE(told.size() == 6);
    CHECK(told[0] == 5 * per_layer);  // the head
    for (std::size_t k = 1; k < told.size(); ++k) CHECK(told[k] == (5 - k) * per_layer);
    for (std::size_t k = 0; k < told.size(); ++k)  // nothing told final changes afterwards
      CHECK(std::equal(seen[k].begin(), seen[k].end(), a.gradients().begin() + static_cast<long>(told[k])));
  }
}
