// rewind budget: the gradient-agreement grid. For each mu and depth, the reversible gradient
// against stored backprop on identical weights and batch, beside the predicted budget L*. Runs
// over-budget networks on purpose: the networks are built under policy::lossy.
#include <fmt/core.h>

#include <cmath>
#include <random>
#include <utility>

#include "commands.hpp"
#include "gpu.hpp"
#include "report.hpp"

namespace rewind_cli {

namespace {
struct cell {
  std::string policy;
  double mu = 0;
  std::size_t depth = 0;
  double cosine = 0, rel_err = 0, budget = 0;
  long long layers = 0;
};

template <class T>
cell measure(const std::string& policy, double mu, std::size_t depth, const budget_options& o) {
  const rwd::env e = rwd::env{}.set("mu", mu);
  const auto net = rwd::network<T, rwd::policy::lossy>(rwd::stack(ref::momentum, depth), e);  // over budget on purpose
  rwd::cpu::model<T, ref::momentum_t> model(ref::momentum, net.depth,
                                            {.width = o.width, .batch = o.batch, .classes = ref::classes, .seed = 1, .lossy = true}, e);
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> pixel(0, 1);
  std::vector<T> data(o.width * o.batch);
  for (auto& p : data) p = static_cast<T>(pixel(rng));
  std::vector<int> labels(o.batch);
  for (std::size_t j = 0; j < o.batch; ++j) labels[j] = static_cast<int>(j % ref::classes);
  if (o.device == "cuda") {  // the same comparison on the GPU, from the same weights
    auto gpu = gpu::make<T>(net.depth, model.config(), mu);
    gpu->set_parameters(model.parameters());
    gpu->loss_and_gradient(data, labels, rwd::mode::stored);
    const std::vector<T> stored = gpu->gradients();
    gpu->loss_and_gradient(data, labels, parse_mode(policy));
    const auto g = rwd::agreement<T>("parameters", stored, gpu->gradients());  // the GPU engine's parameters only
    return {policy, mu, depth, g.cosine, g.max_rel_error, net.budget.depth, net.budget.layers};
  }
  const auto a = model.audit(data, labels, parse_mode(policy));
  return {policy, mu, depth, a.cosine, a.max_rel_error, net.budget.depth, net.budget.layers};
}
}  // namespace

int run_budget(const budget_options& o) {
  if (o.dtype != "float32" && o.dtype != "float64") throw rwd::error("rewind: --dtype is float32 or float64");
  for (double mu : o.mus)
    if (!(mu > 0 && mu < 1)) throw rwd::error("rewind: every mu of --mus must be in (0, 1)");
  for (const auto& p : o.policies)
    if (p != "reversible" && p != "checkpointed" && p != "exact")
      throw rwd::error("rewind: --policies takes reversible, checkpointed and/or exact");
  if (o.device == "cuda") {
    if (const std::string why = gpu::unavailable(); !why.empty()) throw rwd::error("rewind: --device cuda: " + why);
    for (const auto& p : o.policies)
      if (p == "exact") throw rwd::error("rewind: --device cuda: policy exact runs on the CPU backend only");
  }
  fmt::print("rewind budget: momentum, width {}, batch {}, {}, on the {}; each policy's gradient against stored backprop\n", o.width,
             o.batch, o.dtype, o.device == "cuda" ? "GPU" : "CPU");
  fmt::print("('!' marks a depth beyond the predicted budget L*)\n\n{:>13} {:>6} {:>6} {:>8} {:>12} {:>12}\n", "policy", "mu",
             "depth", "L*", "cosine", "rel err");
  std::vector<cell> cells;
  progress bar("cells", o.policies.size() * o.mus.size() * o.depths.size());
  for (const auto& policy : o.policies)
    for (double mu : o.mus)
      for (std::size_t d : o.depths) {
        const cell c = o.dtype == "float32" ? measure<float>(policy, mu, d, o) : measure<double>(policy, mu, d, o);
        cells.push_back(c);
        fmt::print("{:>13} {:>6} {:>5}{} {:>8.1f} {:>12.6f} {:>12.3e}\n", policy, mu, d,
                   static_cast<double>(d) > c.budget ? "!" : " ", c.budget, c.cosine, c.rel_err);
        std::fflush(stdout);
      }
  fmt::print("({:.0f} s)\n", bar.elapsed());
  if (o.json.empty()) return 0;
  std::string json = fmt::format(
      "{{\"config\": {{\"width\": {}, \"batch\": {}, \"dtype\": \"{}\", \"block\": \"momentum\", \"device\": \"{}\"}},\n \"rows\": [\n",
      o.width, o.batch, o.dtype, o.device);
  std::string csv = "policy,mu,depth,cosine,rel_err,budget\n";
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const cell& c = cells[i];
    json += fmt::format("  {{\"policy\": \"{}\", \"mu\": {}, \"depth\": {}, \"cosine\": {}, \"rel_err\": {}, \"budget\": {}, \"over_budget\": {}}}{}\n",
                        c.policy, json_number(c.mu), c.depth, json_number(c.cosine), json_number(c.rel_err), json_number(c.budget),
                        static_cast<double>(c.depth) > c.budget ? "true" : "false", i + 1 < cells.size() ? "," : "");
    csv += fmt::format("{},{},{},{:.9g},{:.6e},{:.3f}\n", c.policy, c.mu, c.depth, c.cosine, c.rel_err, c.budget);
  }
  json += " ]}\n";
  const std::string csv_path = write_json_and_csv(o.json, json, csv);
  // heat map: log10 of the relative error, mu against depth
  std::string grid;
  for (const auto& c : cells)
    if (c.policy == o.policies.front())
      grid += fmt::format("{} {} {:.4f}\n", c.mu, std::log2(static_cast<double>(c.depth)), std::log10(std::max(c.rel_err, 1e-16)));
  const std::string dat = beside(o.json, ".grid");
  write_file(dat, grid);
  plot(beside(o.json, ".png"),
       "set title 'log10 relative error of the " + o.policies.front() + " gradient (" + o.dtype + ")'\n"
       "set offsets 0.08, 0.08, 0.6, 0.6\nset xlabel 'mu'\nset ylabel 'log2 depth'\nset cblabel 'log10 rel err'\nset palette rgbformulae 33,13,10\n"
       "plot '" + dat + "' using 1:2:3 with points pointtype 5 pointsize 6 palette notitle, "
       "'' using 1:2:(sprintf('%.1f', $3)) with labels notitle\n");
  std::filesystem::remove(dat);
  return 0;
}

}  // namespace rewind_cli
