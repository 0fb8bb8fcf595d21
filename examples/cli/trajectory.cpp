// rewind trajectory: the rewind-error panel. Particles with a 2-D state are pushed by momentum
// layers (and by leapfrog, mu = 1) through a fixed smooth force field in float32, then rewound;
// per layer, the error of the rewound state against the float64 forward, beside the predicted
// eps * (1/mu)^(layers rewound).
#include <fmt/core.h>

#include <cmath>
#include <random>

#include "commands.hpp"
#include "report.hpp"

namespace rewind_cli {

namespace {
struct point {
  double mu = 0;
  std::size_t layer = 0;
  double error = 0, predicted = 0;
};

/// The force field F(x) = -c W1^T tanh(W1 x + b1): minus the gradient of the convex potential
/// c * sum log cosh(W1 x + b1), so its Jacobian is negative semi-definite (smooth, slopes <= 0).
template <class Model>
void set_force_field(Model& m, std::size_t depth) {
  constexpr std::size_t W = 2, H = 16;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> W1(H * W), b1(H);
  double norm2 = 0;
  for (auto& w : W1) w = normal(rng), norm2 += w * w;
  for (auto& b : b1) b = 0.5 * normal(rng);
  const double c = 0.01 / norm2;  // slopes in [-0.01, 0]
  auto p = m.parameters();
  using T = typename Model::scalar;
  for (std::size_t l = 0; l < depth; ++l) {
    T* base = p.data() + l * m.parameters_per_layer();
    for (std::size_t i = 0; i < H; ++i)
      for (std::size_t j = 0; j < W; ++j) base[i + j * H] = static_cast<T>(W1[i + j * H]);  // W1: H x W, column-major
    for (std::size_t i = 0; i < H; ++i) base[H * W + i] = static_cast<T>(b1[i]);
    T* w2 = base + H * W + H;  // W2 = -c W1^T: W x H, column-major
    for (std::size_t i = 0; i < W; ++i)
      for (std::size_t j = 0; j < H; ++j) w2[i + j * W] = static_cast<T>(-c * W1[j + i * H]);
    for (std::size_t i = 0; i < W; ++i) w2[W * H + i] = T(0);
  }
}

template <class Block>
std::vector<point> panel(Block b, double mu, const trajectory_options& o) {
  const rwd::env e = rwd::env{}.set("mu", mu);
  const rwd::cpu::options opts{.width = 2, .batch = o.particles, .classes = 2, .seed = 1};
  rwd::cpu::model<double, Block> truth(b, o.depth, opts, e);
  rwd::cpu::model<float, Block> fp32(b, o.depth, opts, e);
  set_force_field(truth, o.depth);
  set_force_field(fp32, o.depth);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> x0(2 * o.particles);
  for (auto& x : x0) x = u(rng);
  const std::vector<float> x0f(x0.begin(), x0.end());
  const auto forward64 = truth.forward_trace(x0);
  const auto forward32 = fp32.forward_trace(x0f);
  const auto rewound = fp32.rewind_trace(forward32.back());
  const double eps = std::numeric_limits<float>::epsilon();
  std::vector<point> out;
  for (std::size_t l = 0; l <= o.depth; ++l) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < forward64[l].size(); ++i) {
      num += std::pow(static_cast<double>(rewound[l][i]) - forward64[l][i], 2);
      den += forward64[l][i] * forward64[l][i];
    }
    out.push_back({mu, l, std::sqrt(num / std::max(den, 1e-300)), eps * std::pow(1 / mu, static_cast<double>(o.depth - l))});
  }
  return out;
}
}  // namespace

int run_trajectory(const trajectory_options& o) {
  if (o.particles == 0 || o.depth == 0) throw rwd::error("rewind: --particles and --depth are at least 1");
  for (double mu : o.mus)
    if (!(mu > 0 && mu < 1)) throw rwd::error("rewind: every mu of --mus must be in (0, 1)");
  std::vector<point> all;
  for (double mu : o.mus) {
    auto p = panel(ref::momentum, mu, o);
    all.insert(all.end(), p.begin(), p.end());
  }
  auto lf = panel(ref::leapfrog, 1.0, o);
  all.insert(all.end(), lf.begin(), lf.end());
  fmt::print("rewind trajectory: {} particles, 2-D state, depth {}, float32 rewound against the float64 forward\n",
             o.particles, o.depth);
  fmt::print("{:>8} {:>14} {:>14} {:>14}\n", "mu", "error@input", "predicted", "error@top/2");
  for (double mu : [&] { auto m = o.mus; m.push_back(1.0); return m; }()) {
    const point* in = nullptr;
    const point* mid = nullptr;
    for (const auto& p : all)
      if (p.mu == mu && p.layer == 0) in = &p;
      else if (p.mu == mu && p.layer == o.depth / 2) mid = &p;
    fmt::print("{:>8} {:>14.3e} {:>14.3e} {:>14.3e}{}\n", mu, in->error, in->predicted, mid->error, mu == 1.0 ? "  (leapfrog)" : "");
  }
  if (o.json.empty()) return 0;
  std::string json = fmt::format("{{\"config\": {{\"particles\": {}, \"depth\": {}, \"dtype\": \"float32\"}},\n \"rows\": [\n",
                                 o.particles, o.depth);
  std::string csv = "mu,layer,error,predicted\n";
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& p = all[i];
    json += fmt::format("  {{\"mu\": {}, \"layer\": {}, \"error\": {}, \"predicted\": {}}}{}\n", json_number(p.mu), p.layer,
                        json_number(p.error), json_number(p.predicted), i + 1 < all.size() ? "," : "");
    csv += fmt::format("{},{},{:.6e},{:.6e}\n", p.mu, p.layer, p.error, p.predicted);
  }
  json += " ]}\n";
  const std::string csv_path = write_json_and_csv(o.json, json, csv);
  std::string plots;
  for (double mu : o.mus)
    plots += fmt::format("'{0}' using (column(1) == {1} ? $2 : 1/0):($3 + 1e-12) every ::1 with lines lw 2 title 'mu = {1}', "
                         "'' using (column(1) == {1} ? $2 : 1/0):4 every ::1 with lines dt 2 title 'eps (1/{1})^(L-l)', ",
                         csv_path, mu);
  plots += fmt::format("'{0}' using (column(1) == 1 ? $2 : 1/0):($3 + 1e-12) every ::1 with lines lw 2 title 'leapfrog'", csv_path);
  plot(beside(o.json, ".png"), "set datafile separator ','\nset logscale y\nset format y '1e%T'\nset grid\nset key outside\n"
                               "set xlabel 'layer l (the rewind runs from l = depth down to 0)'\nset ylabel 'relative error'\nset yrange [1e-9:1e3]\nplot " + plots + "\n");
  return 0;
}

}  // namespace rewind_cli
