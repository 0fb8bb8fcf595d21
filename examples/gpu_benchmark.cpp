// The reference configuration on the GPU: for each depth, stored and
// reversible training steps timed with CUDA events (median after a warm-up step), tracked peak
// device bytes against the plan, and the GPU's float64 gradients against the CPU backend's on
// the same weights and batch. Then the staged network of train --net staged (float32, squeezes)
// the same way, its float32 gradients against the CPU's. Prints a table and writes JSON.
//
//   gpu_benchmark [--depths 8,32,128,512] [--steps 20] [--parity-depths 8,32] [--staged-depth 2]
//                 [--staged-batch 128] [--json FILE]
// Exit 77 when no GPU is visible.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <rewind/cpu.hpp>

#include "cli/gpu.hpp"
#include "cli/reference.hpp"

namespace {
using namespace rewind_cli;

std::vector<std::size_t> list(const char* s) {
  std::vector<std::size_t> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoul(item));
  return out;
}


/// max |gpu - cpu| / max |cpu| of the float64 gradient in mode m, same weights and batch.
double parity(std::size_t depth, rwd::mode m, double mu) {
  const rwd::options o{.width = ref::width, .batch = 128, .classes = ref::classes, .seed = 1, .lossy = true};
  rwd::cpu::model<double, ref::momentum_t> cpu(ref::momentum, depth, o, rwd::env{}.set("mu", mu));
  auto gpu = gpu::make<double>(depth, o, mu);
  gpu->set_parameters(cpu.parameters());
  const ref::benchmark_batch<double> p(ref::width, 128);
  const double lc = cpu.loss_and_gradient(p.pixels, p.labels, m), lg = gpu->loss_and_gradient(p.pixels, p.labels, m);
  const auto g = gpu->gradients();
  double d = 0, s = 0;
  for (std::size_t i = 0; i < g.size(); ++i) d = std::max(d, std::abs(g[i] - cpu.gradients()[i])), s = std::max(s, std::abs(cpu.gradients()[i]));
  return std::max(d / s, std::abs(lc - lg) / std::abs(lc));
}

/// The median of `steps` timed training steps (forward, backward, SGD) of an engine after a
/// warm-up step, each from the parameters `initial` (past the budget the update is garbage:
/// every step starts afresh); the tracked peak is of the timed steps.
template <class Batch>
double median_step_ms(gpu::engine<float>& model, const Batch& p, rwd::mode m, int steps, const std::vector<float>& initial) {
  const rwd::sgd sgd{.lr = 0.01, .momentum = 0.9};
  model.step_ms(p.pixels, p.labels, m, sgd);  // warm-up
  model.set_parameters(initial);
  model.reset_peak();
  std::vector<double> times;
  for (int s = 0; s < steps; ++s) {
    times.push_back(model.step_ms(p.pixels, p.labels, m, sgd));
    model.set_parameters(initial);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// max |gpu - cpu| / max |cpu| of the staged network's float32 gradient (and loss) in mode m
/// against cpu::staged_model on the engine's initial weights and the same batch.
template <class Batch>
double staged_parity(gpu::engine<float>& model, std::size_t depth, const rwd::options& o, const Batch& p, rwd::mode m, double mu) {
  rwd::cpu::staged_model<float, ref::staged::stem_t, ref::staged::block_t> cpu(ref::staged::stem, ref::staged::block_t{},
                                                                              ref::staged::stages(depth), o, rwd::env{}.set("mu", mu));
  const auto initial = model.parameters();
  std::copy(initial.begin(), initial.end(), cpu.parameters().begin());
  const double lc = cpu.loss_and_gradient(p.pixels, p.labels, m), lg = model.loss_and_gradient(p.pixels, p.labels, m);
  const auto g = model.gradients();
  double d = 0, s = 0;
  for (std::size_t i = 0; i < g.size(); ++i) d = std::max(d, double(std::abs(g[i] - cpu.gradients()[i]))), s = std::max(s, double(std::abs(cpu.gradients()[i])));
  return std::max(d / s, std::abs(lc - lg) / std::abs(lc));
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> depths{8, 32, 128, 512}, parity_depths{8, 32};
  int steps = 20;
  std::size_t staged_depth = 2, staged_batch = 128;
  std::string json;
  const double mu = 0.9;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--depths")) depths = list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--parity-depths")) parity_depths = list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--staged-depth")) staged_depth = std::stoul(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--staged-batch")) staged_batch = std::max<std::size_t>(1, std::stoul(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--json")) json = argv[i + 1];
    else {
      std::fprintf(stderr, "gpu_benchmark: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (const std::string why = gpu::unavailable(); !why.empty()) {
    std::printf("[SKIP] gpu_benchmark: %s\n", why.c_str());
    return 77;
  }
  try {
    const ref::benchmark_batch<float> p(ref::width, 128);
    std::string device;
    std::ostringstream rows;
    std::printf("%6s %11s %10s %12s %12s %14s\n", "depth", "mode", "step ms", "peak MB", "plan MB", "f64 parity");
    double t512[2] = {0, 0}, m512[2] = {0, 0};
    for (std::size_t depth : depths)
      for (auto m : {rwd::mode::stored, rwd::mode::reversible}) {
        const rwd::options o{.width = ref::width, .batch = 128, .classes = ref::classes, .seed = 1, .lossy = true};
        auto model = gpu::make<float>(depth, o, mu);
        device = model->device();
        const double median = median_step_ms(*model, p, m, steps, ref::initial_parameters<float>(depth, o)),
                     peak = static_cast<double>(model->peak()),
                     plan = static_cast<double>(model->plan(m).total());
        const bool check = std::find(parity_depths.begin(), parity_depths.end(), depth) != parity_depths.end();
        const double par = check ? parity(depth, m, mu) : NAN;
        std::printf("%6zu %11s %10.3f %12.3f %12.3f %14s\n", depth, std::string(rwd::to_string(m)).c_str(), median, peak / 1e6, plan / 1e6,
                    check ? (std::to_string(par)).c_str() : "-");
        std::fflush(stdout);
        if (depth == 512) t512[m == rwd::mode::reversible] = median, m512[m == rwd::mode::reversible] = peak;
        rows << (rows.tellp() > 0 ? ",\n" : "") << "  {\"depth\": " << depth << ", \"mode\": \"" << rwd::to_string(m)
             << "\", \"step_ms_median\": " << median << ", \"peak_device_bytes\": " << peak << ", \"plan_bytes\": " << plan
             << ", \"parity_f64\": " << (check ? std::to_string(par) : "null") << "}";
      }
    if (t512[0] > 0) std::printf("depth 512: reversible/stored time %.3f, stored/reversible memory %.1fx\n", t512[1] / t512[0], m512[0] / m512[1]);
    std::ostringstream staged_rows;
    if (staged_depth > 0) {
      std::printf("staged network (--net staged: stem, three stages of %zu blocks, squeezes), batch %zu, float32:\n", staged_depth,
                  staged_batch);
      std::printf("%11s %10s %12s %12s %14s\n", "mode", "step ms", "peak MB", "plan MB", "f32 vs cpu");
      const rwd::options o{.width = ref::width, .batch = staged_batch, .classes = ref::classes, .seed = 1};
      const ref::benchmark_batch<float> p(ref::width, staged_batch);
      for (auto m : {rwd::mode::stored, rwd::mode::reversible}) {
        auto model = gpu::make<float>(staged_depth, o, mu, gpu::network::staged);
        const auto initial = model->parameters();
        const double median = median_step_ms(*model, p, m, steps, initial), peak = static_cast<double>(model->peak()),
                     plan = static_cast<double>(model->plan(m).total());
        model->set_parameters(initial);
        const double par = staged_parity(*model, staged_depth, o, p, m, mu);
        std::printf("%11s %10.3f %12.3f %12.3f %14.2e\n", std::string(rwd::to_string(m)).c_str(), median, peak / 1e6, plan / 1e6, par);
        std::fflush(stdout);
        staged_rows << (staged_rows.tellp() > 0 ? ",\n" : "") << "  {\"depth_per_stage\": " << staged_depth << ", \"batch\": " << staged_batch
                    << ", \"mode\": \""
                    << rwd::to_string(m) << "\", \"step_ms_median\": " << median << ", \"peak_device_bytes\": " << peak
                    << ", \"plan_bytes\": " << plan << ", \"parity_f32\": " << par << "}";
      }
    }
    std::printf("device: %s\n", device.c_str());
    if (!json.empty()) {
      std::ofstream out(json);
      out << "{\"config\": {\"width\": 784, \"hidden\": 16, \"batch\": 128, \"mu\": 0.9, \"dtype\": \"float32\", \"steps\": " << steps
          << ", \"device\": \"" << device << "\"},\n \"rows\": [\n" << rows.str() << "\n ],\n \"staged_rows\": [\n" << staged_rows.str()
          << "\n ]}\n";
      if (!out) throw rwd::error("gpu_benchmark: cannot write " + json);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
