// The CUDA engine's elementwise functors (rewind/cuda/ops.hpp), run on the host against the CPU
// backend: for every update of eight blocks, the update, its inverse and every step of its
// adjoint, as the functor the GPU kernel runs computes it and as the CPU's Eigen lowering does;
// then the map epilogues and the loss head (the optimizers share one functor with the CPU:
// tests/engine/test_optimizer_step.cpp). No GPU and no CUDA needed.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include <rewind/cpu.hpp>
#include <rewind/cuda/ops.hpp>

#include "../dsl/blocks.hpp"

namespace {
namespace tb = test_blocks;
namespace hana = boost::hana;
using array = Eigen::Array<double, Eigen::Dynamic, 1>;
constexpr std::size_t n = 257;

/// E at every element, by the CPU backend's lowering (a scalar expression broadcast).
template <class Layout, class E, class Frame>
array cpu_eval(const Frame& f) {
  auto e = rwd::cpu::lower<Layout, E, double>(f, static_cast<Eigen::Index>(n));
  if constexpr (std::is_arithmetic_v<decltype(e)>) return array::Constant(n, e);
  else return e;
}

/// Runs a functor over [0, n) on the host, as the kernel does on the device.
template <class Op>
void run(const Op& op) {
  for (std::size_t i = 0; i < n; ++i) op(i);
}

double max_diff(const array& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(a[static_cast<Eigen::Index>(i)] - b[i]) / (1 + std::abs(b[i])));
  return worst;
}

template <class Block>
int check_block(Block, double mu = 0.7) {
  using State = std::remove_const_t<decltype(Block::state())>;
  using Params = std::remove_const_t<decltype(Block::params())>;
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  auto random = [&] {
    std::vector<double> v(n);
    for (auto& e : v) e = normal(rng);
    return v;
  };
  std::vector<std::vector<double>> storage;
  int checked = 0;
  hana::for_each(Block::updates(), [&](auto u) {
    using U = std::remove_cvref_t<decltype(u)>;
    using Frame = rwd::update_frame<double, State, Params, U>;
    using Layout = typename Frame::Layout;
    typename Layout::template frame<double> f{};
    for (std::size_t k = 0; k < Layout::n_state; ++k) {
      f.state[k] = storage.emplace_back(random()).data();
      f.bars[k] = storage.emplace_back(random()).data();
    }
    for (std::size_t c = 0; c < Layout::n_calls; ++c) f.calls[c] = storage.emplace_back(random()).data();
    for (std::size_t j = 0; j < Layout::n_steps; ++j) f.vjps[j] = storage.emplace_back(random()).data();
    for (std::size_t p = 0; p < Layout::n_params; ++p) f.params[p] = mu;
    std::vector<double> out(n);
    // the update
    run(rwd::cuda::assign_op<Layout, typename U::rhs, double>{f, out.data()});
    CHECK(max_diff(cpu_eval<Layout, typename U::rhs>(f), out) < 1e-14);
    // its derived inverse, in place on the updated target: the CPU lowering's value, and the
    // target as it was before the update (the maps' outputs are the same: g does not read it)
    using Inverse = typename decltype(rwd::invert(U{}))::rhs;
    const std::size_t t = Layout::template state_index<typename U::target>;
    std::vector<double> target = out;
    auto g = f;
    g.state[t] = target.data();
    const array inverse = cpu_eval<Layout, Inverse>(g);
    run(rwd::cuda::assign_op<Layout, Inverse, double>{g, target.data()});
    CHECK(max_diff(inverse, target) < 1e-14);
    CHECK(max_diff(Eigen::Map<const array>(f.state[t], n), target) < 1e-12);
    if constexpr (rwd::coefficient_kind_of<U>() == rwd::coefficient_kind::data_dependent) {
      // the checked functor the GPU engine runs for such an alpha: the same update and inverse,
      // counting the elements whose alpha cannot be divided by (none here; two below)
      std::vector<double> checked_target(f.state[t], f.state[t] + n);
      auto h = f;
      h.state[t] = checked_target.data();
      unsigned bad = 0;
      run(rwd::cuda::checked_assign_op<Layout, U, typename U::rhs, double>{h, checked_target.data(), &bad, {}});
      CHECK(max_diff(cpu_eval<Layout, typename U::rhs>(f), checked_target) < 1e-14);
      run(rwd::cuda::checked_assign_op<Layout, U, Inverse, double>{h, checked_target.data(), &bad, {}});
      CHECK(max_diff(Eigen::Map<const array>(f.state[t], n), checked_target) < 1e-12);
      CHECK(bad == 0);
      // the alpha's map call (affine: exp(s(x2))): -800 underflows to 0, 800 overflows
      constexpr std::size_t c = Layout::template call_index<decltype(tb::s(tb::x2))>;
      std::vector<double> call(f.calls[c], f.calls[c] + n);
      call[3] = -800, call[100] = 800;
      h.calls[c] = call.data();
      run(rwd::cuda::checked_assign_op<Layout, U, typename U::rhs, double>{h, checked_target.data(), &bad, {}});
      CHECK(bad == 2);
      // and outside the range the budget rests on (affine: s ends in tanh, so exp(s) in [1/e, e]):
      // the engine passes the update's bounds; s = 1 is inside, s = 1.01 and s = -3 are not
      const auto bounds = rwd::alpha_bounds_of<double, U>({});
      CHECK(bounds.lo == doctest::Approx(std::exp(-1.0)).epsilon(1e-12));
      CHECK(bounds.hi == doctest::Approx(std::exp(1.0)).epsilon(1e-12));
      std::fill(call.begin(), call.end(), 1.0);
      call[5] = 1.01, call[9] = -3;
      bad = 0;
      run(rwd::cuda::checked_assign_op<Layout, U, typename U::rhs, double>{h, checked_target.data(), &bad, bounds});
      CHECK(bad == 2);
      ++checked;
    }
    // every step of its adjoint: map cotangents, accumulations, assignments
    hana::for_each(rwd::adjoint(U{}).steps(), [&](auto step) {
      using S = std::remove_cvref_t<decltype(step)>;
      if constexpr (rwd::detail::is_map_step<S>) {
        run(rwd::cuda::assign_op<Layout, typename S::cotangent, double>{f, out.data()});
        CHECK(max_diff(cpu_eval<Layout, typename S::cotangent>(f), out) < 1e-14);
      } else {
        std::vector<double> acc(f.bars[0], f.bars[0] + n);
        run(rwd::cuda::accumulate_op<Layout, typename S::value, double>{f, acc.data()});
        const array want = Eigen::Map<const array>(f.bars[0], n) + cpu_eval<Layout, typename S::value>(f);
        CHECK(max_diff(want, acc) < 1e-14);
      }
      ++checked;
    });
    ++checked;
  });
  return checked;
}
}  // namespace

TEST_CASE("cuda ops: updates, inverses and adjoint steps agree with the CPU lowering, eight blocks") {
  int checked = 0;
  checked += check_block(tb::momentum);
  checked += check_block(tb::leapfrog);
  checked += check_block(tb::coupling);
  checked += check_block(tb::three);
  checked += check_block(tb::runtime_mu, 0.6);
  checked += check_block(tb::two_maps);
  checked += check_block(tb::expansive);
  checked += check_block(tb::long_sum);
  checked += check_block(tb::affine);
  CHECK(checked > 40);
}

TEST_CASE("cuda ops: map epilogues and the loss head agree with the CPU") {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  const std::size_t rows = 7, batch = 5;
  std::vector<double> y(rows * batch), b(rows), g(rows * batch);
  for (auto* v : {&y, &b, &g})
    for (auto& e : *v) e = normal(rng);
  // bias + tanh in one pass, and its backward from the output
  std::vector<double> fused = y;
  for (std::size_t i = 0; i < fused.size(); ++i) rwd::cuda::bias_activation_op<rwd::fn::tanh_fn, double>{fused.data(), b.data(), rows}(i);
  for (std::size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == doctest::Approx(std::tanh(y[i] + b[i % rows])).epsilon(1e-15));
  std::vector<double> back = g, copy(g.size());
  for (std::size_t i = 0; i < back.size(); ++i)
    rwd::cuda::activation_backward_op<rwd::fn::tanh_fn, double>{back.data(), fused.data(), copy.data()}(i);
  for (std::size_t i = 0; i < back.size(); ++i) {
    CHECK(back[i] == doctest::Approx(g[i] * (1 - fused[i] * fused[i])).epsilon(1e-15));
    CHECK(copy[i] == back[i]);
  }
  // bias gradient: row sums over the batch, accumulated
  std::vector<double> gb(rows, 1.0);
  for (std::size_t r = 0; r < rows; ++r) rwd::cuda::bias_gradient_op<double>{g.data(), gb.data(), rows, batch}(r);
  for (std::size_t r = 0; r < rows; ++r) {
    double s = 1;
    for (std::size_t c = 0; c < batch; ++c) s += g[r + c * rows];
    CHECK(gb[r] == doctest::Approx(s).epsilon(1e-15));
  }
  // softmax cross-entropy per column
  const std::size_t classes = 4;
  std::vector<double> z(classes * batch), losses(batch);
  for (auto& e : z) e = 3 * normal(rng);
  const std::vector<double> z0 = z;
  const std::vector<int> labels{0, 3, 1, 2, 3};
  for (std::size_t c = 0; c < batch; ++c) rwd::cuda::softmax_xent_op<double>{z.data(), labels.data(), losses.data(), classes, batch}(c);
  for (std::size_t c = 0; c < batch; ++c) {
    double sum = 0;
    for (std::size_t k = 0; k < classes; ++k) sum += std::exp(z0[c * classes + k]);
    CHECK(losses[c] == doctest::Approx(std::log(sum) - z0[c * classes + labels[c]]).epsilon(1e-13));
    for (std::size_t k = 0; k < classes; ++k)
      CHECK(z[c * classes + k] ==
            doctest::Approx((std::exp(z0[c * classes + k]) / sum - (static_cast<int>(k) == labels[c])) / batch).epsilon(1e-13));
  }
  // a non-finite value raises the flag
  std::vector<double> vals{1, 2, std::nan(""), 4};
  int flag = 0;
  for (std::size_t i = 0; i < vals.size(); ++i) rwd::cuda::nonfinite_op<double>{vals.data(), &flag}(i);
  CHECK(flag == 1);
}
