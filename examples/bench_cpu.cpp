// build/bin/rewind-bench-cpu: one training step (forward, backward, optimizer update) of the
// reference configuration of DESIGN.md section 4 in both modes, at several depths:
// median step time, tracked peak activation bytes against the closed-form plan, the process's
// peak RSS (each configuration runs in a child process of its own), and the arithmetic rate of
// the step against the rate Eigen's GEMM reaches on the same shapes in the same run.
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <rewind/cpu.hpp>
#include <vector>

using namespace rwd::literals;

namespace {
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::param<"mu"> mu;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto momentum = rwd::block(v = mu * v + f(x), x = x + v);
using model_t = rwd::cpu::model<float, std::remove_cv_t<decltype(momentum)>>;

constexpr std::size_t width = 784, hidden = 16, classes = 10;

struct row {
  std::size_t depth = 0;
  int mode = 0;
  double step_ms = 0, plan_bytes = 0, peak_bytes = 0, rss_bytes = 0, gflops = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

row measure(std::size_t depth, rwd::cpu::mode m, std::size_t batch, int steps, double mu_value) {
  model_t model(momentum, depth, {.width = width, .batch = batch, .classes = classes, .seed = 1},
                rwd::env{}.set("mu", mu_value));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> pixel(0, 1);
  std::vector<float> data(width * batch);
  for (auto& p : data) p = pixel(rng);
  std::vector<int> labels(batch);
  for (std::size_t j = 0; j < batch; ++j) labels[j] = static_cast<int>(j % classes);
  model.loss_and_gradient(data, labels, m);  // warm-up
  model.apply(rwd::sgd{.lr = 0.01, .momentum = 0.9});
  model.memory().reset_peak();
  std::vector<double> times;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    model.loss_and_gradient(data, labels, m);
    model.apply(rwd::sgd{.lr = 0.01, .momentum = 0.9});
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  row r;
  r.depth = depth;
  r.mode = static_cast<int>(m);
  r.step_ms = times[times.size() / 2] * 1e3;
  r.plan_bytes = static_cast<double>(model.plan(m).total());
  r.peak_bytes = static_cast<double>(model.memory().peak());
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  r.rss_bytes = static_cast<double>(u.ru_maxrss) * 1024;
  // a layer's forward is 4*W*H*B flops, its backward twice that, the rewind one forward more
  const double per_layer = 4.0 * width * hidden * static_cast<double>(batch);
  const double flops = depth * per_layer * (m == rwd::cpu::mode::stored ? 3 : 4);
  r.gflops = flops / (r.step_ms * 1e-3) / 1e9;
  return r;
}

/// The six GEMMs of one layer (two forward, four backward) at the reference shapes, in Eigen.
double gemm_gflops(std::size_t batch) {
  using M = Eigen::MatrixXf;
  const auto B = static_cast<Eigen::Index>(batch);
  M W1 = M::Random(hidden, width), W2 = M::Random(width, hidden), X = M::Random(width, B);
  M H(hidden, B), Y(width, B), dW1(hidden, width), dW2(width, hidden), dH(hidden, B), dX(width, B);
  auto once = [&] {
    H.noalias() = W1 * X;
    Y.noalias() = W2 * H;
    dW2.noalias() = Y * H.transpose();
    dH.noalias() = W2.transpose() * Y;
    dW1.noalias() = dH * X.transpose();
    dX.noalias() = W1.transpose() * dH;
  };
  once();
  std::vector<double> times;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 50; ++i) once();
    times.push_back(seconds_since(t0) / 50);
  }
  std::sort(times.begin(), times.end());
  return 12.0 * width * hidden * static_cast<double>(batch) / times[3] / 1e9;
}

/// Runs measure() in a fresh process of this program (exec, not fork: OpenMP does not survive a
/// fork) so that its peak RSS is its own.
row isolated(const std::string& self, std::size_t depth, rwd::cpu::mode m, std::size_t batch, int steps,
             double mu_value, int threads) {
  const std::string cmd = fmt::format("'{}' --child --depths {} --child-mode {} --batch {} --steps {} --mu {} --threads {}",
                                      self, depth, static_cast<int>(m), batch, steps, mu_value, threads);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot start " + cmd);
  row r{};
  const int got = std::fscanf(p, "%zu %d %lf %lf %lf %lf %lf", &r.depth, &r.mode, &r.step_ms, &r.plan_bytes,
                              &r.peak_bytes, &r.rss_bytes, &r.gflops);
  if (pclose(p) != 0 || got != 7) throw std::runtime_error(fmt::format("the measurement at depth {} failed", depth));
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rewind CPU benchmark: the reference configuration, stored against reversible"};
  std::vector<std::size_t> depths{8, 32, 128, 512};
  std::size_t batch = 128;
  int steps = 5, threads = 0;
  double mu_value = 0.9;
  std::string json;
  bool child = false;
  int child_mode = 0;
  app.add_option("--depths", depths, "depths")->delimiter(',');
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "measured steps per configuration (median)")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "GEMM threads (0: all cores)");
  app.add_option("--mu", mu_value, "momentum coefficient")->check(CLI::Range(0.01, 1.0));
  app.add_option("--json", json, "write the results as JSON to this file");
  app.add_flag("--child", child)->group("");  // internal: measure one configuration, print one line
  app.add_option("--child-mode", child_mode)->group("");
  CLI11_PARSE(app, argc, argv);
  rwd::cpu::set_threads(threads);
  if (child) {
    const row r = measure(depths.at(0), static_cast<rwd::cpu::mode>(child_mode), batch, steps, mu_value);
    fmt::print("{} {} {} {} {} {} {}\n", r.depth, r.mode, r.step_ms, r.plan_bytes, r.peak_bytes, r.rss_bytes, r.gflops);
    return 0;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();

  const double gemm = gemm_gflops(batch);
  fmt::print("reference configuration: width {}, map {} -> {} -> tanh -> {}, batch {}, float32, mu {}, {} GEMM thread(s)\n",
             width, width, hidden, width, batch, mu_value, rwd::cpu::threads());
  fmt::print("Eigen GEMM on the layer's six products: {:.2f} GFLOP/s\n\n", gemm);
  fmt::print("{:>6} {:>11} {:>10} {:>13} {:>13} {:>11} {:>9} {:>8}\n", "depth", "mode", "step ms", "plan MB",
             "tracked MB", "RSS MB", "GFLOP/s", "of GEMM");
  std::vector<row> rows;
  for (std::size_t d : depths)
    for (auto m : {rwd::cpu::mode::stored, rwd::cpu::mode::reversible}) {
      const row r = isolated(self, d, m, batch, steps, mu_value, threads);
      rows.push_back(r);
      fmt::print("{:>6} {:>11} {:>10.1f} {:>13.3f} {:>13.3f} {:>11.1f} {:>9.2f} {:>7.0f}%\n", d, rwd::cpu::to_string(m),
                 r.step_ms, r.plan_bytes / 1e6, r.peak_bytes / 1e6, r.rss_bytes / 1e6, r.gflops, 100 * r.gflops / gemm);
      std::fflush(stdout);
    }
  fmt::print("\n{:>6} {:>22} {:>24}\n", "depth", "reversible/stored time", "stored/reversible memory");
  for (std::size_t i = 0; i + 1 < rows.size(); i += 2)
    fmt::print("{:>6} {:>22.3f} {:>24.1f}\n", rows[i].depth, rows[i + 1].step_ms / rows[i].step_ms,
               rows[i].peak_bytes / rows[i + 1].peak_bytes);
  if (!json.empty()) {
    std::ofstream out(json);
    out << fmt::format("{{\"config\": {{\"width\": {}, \"hidden\": {}, \"batch\": {}, \"mu\": {}, \"threads\": {}, \"steps\": {}}},\n",
                       width, hidden, batch, mu_value, rwd::cpu::threads(), steps);
    out << fmt::format(" \"gemm_gflops\": {:.4f},\n \"rows\": [\n", gemm);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const row& r = rows[i];
      out << fmt::format(
          "  {{\"depth\": {}, \"mode\": \"{}\", \"step_ms_median\": {:.4f}, \"activation_bytes_plan\": {:.0f}, "
          "\"activation_bytes_peak\": {:.0f}, \"rss_peak_bytes\": {:.0f}, \"gflops\": {:.4f}}}{}\n",
          r.depth, rwd::cpu::to_string(static_cast<rwd::cpu::mode>(r.mode)), r.step_ms, r.plan_bytes, r.peak_bytes,
          r.rss_bytes, r.gflops, i + 1 < rows.size() ? "," : "");
    }
    out << " ]}\n";
    if (!out) {
      fmt::print(stderr, "rewind: cannot write {}\n", json);
      return 1;
    }
    fmt::print("\nwrote {}\n", json);
  }
  return 0;
}
