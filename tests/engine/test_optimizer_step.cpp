// The optimizers' update of one parameter (rewind/engine/optimizer_step.hpp), which the CPU loop
// and the CUDA kernel both run, against the textbook formulas written out here: SGD with
// heavy-ball momentum, Adam with bias-corrected moments, both with decoupled weight decay.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include <rewind/engine/optimizer_step.hpp>

TEST_CASE("optimizer steps: sgd and adam against the textbook formulas, three steps") {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> theta(40), grad(40);
  for (auto* v : {&theta, &grad})
    for (auto& e : *v) e = normal(rng);

  const rwd::sgd o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  std::vector<double> t = theta, u(40, 0.0), want = theta, want_u(40, 0.0);
  for (int s = 0; s < 3; ++s) {
    const auto step = rwd::sgd_step<double>::of(o, t.data(), grad.data(), u.data());
    for (std::size_t i = 0; i < t.size(); ++i) step(i);
    for (std::size_t i = 0; i < t.size(); ++i) {
      want_u[i] = o.momentum * want_u[i] + grad[i];
      want[i] = want[i] - o.lr * want_u[i] - o.lr * o.weight_decay * want[i];
    }
  }
  for (std::size_t i = 0; i < t.size(); ++i) CHECK(t[i] == doctest::Approx(want[i]).epsilon(1e-14));

  const rwd::adam a{.lr = 0.01, .weight_decay = 0.1};
  std::vector<double> p = theta, m(40, 0.0), v(40, 0.0), q = theta, mq(40, 0.0), vq(40, 0.0);
  for (long long s = 1; s <= 3; ++s) {
    const auto step = rwd::adam_step<double>::of(a, s, p.data(), grad.data(), m.data(), v.data());
    for (std::size_t i = 0; i < p.size(); ++i) step(i);
    for (std::size_t i = 0; i < q.size(); ++i) {
      mq[i] = a.beta1 * mq[i] + (1 - a.beta1) * grad[i];
      vq[i] = a.beta2 * vq[i] + (1 - a.beta2) * grad[i] * grad[i];
      const double m_hat = mq[i] / (1 - std::pow(a.beta1, s)), v_hat = vq[i] / (1 - std::pow(a.beta2, s));
      q[i] -= a.lr * (m_hat / (std::sqrt(v_hat) + a.eps) + a.weight_decay * q[i]);
    }
  }
  for (std::size_t i = 0; i < p.size(); ++i) {
    CHECK(p[i] == doctest::Approx(q[i]).epsilon(1e-12));
    CHECK(m[i] == doctest::Approx(mq[i]).epsilon(1e-14));
  }
  CHECK(p != theta);  // the steps moved the parameters
}
