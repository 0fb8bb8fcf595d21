#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "commands.hpp"
#include "report.hpp"
#include "transitions.hpp"

namespace rewind_cli {

namespace {
inline constexpr rwd::var<"x1"> x1;
inline constexpr rwd::var<"x2"> x2;
inline constexpr auto F = rwd::map<"F">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto G = rwd::map<"G">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto leapfrog = rwd::leapfrog(ref::x, ref::v, 1_c, F);
inline constexpr auto coupling = rwd::additive_coupling(x1, x2, F, G);
}  // namespace

std::string explain_text(const explain_options& o) {
  if (!(o.mu > 0 && o.mu <= 1)) throw CLI::ValidationError("--mu", "must be in (0, 1]");
  rwd::env e = rwd::env{}.set("mu", o.mu);
  if (!o.slope.empty()) {
    if (o.slope.size() != 2 || !(o.slope[0] <= o.slope[1]))
      throw CLI::ValidationError("--slope", "takes LO,HI with LO <= HI");
    for (const char* map : {"f", "F", "G"}) e = e.slope(map, o.slope[0], o.slope[1]);
  }
  const bool all = o.block == "all";
  std::string out;
  if (all || o.block == "momentum")
    out += rwd::explain(ref::momentum, e, fmt::format("momentum (mu = {})", o.mu)) + "\n";
  if (all || o.block == "leapfrog") out += rwd::explain(leapfrog, e, "leapfrog (kick, drift, kick; h = 1)") + "\n";
  if (all || o.block == "coupling") out += rwd::explain(coupling, e, "additive coupling") + "\n";
  if (all || o.block == "cnn")
    out += rwd::explain(ref::cnn::momentum, e, fmt::format("cnn: momentum (mu = {}) on a {} state", o.mu, ref::cnn::state.text())) + "\n";
  if (all || o.block == "staged") {
    out += ref::staged::with_transition(o.transition, [&](auto down) {
      const rwd::staged_layout<ref::staged::stem_t, ref::staged::block_t, typename decltype(down)::type> net(ref::staged::stages(o.depth), ref::classes);
      return rwd::explain<float>(net, e) + "\n";
    });
  }
  return out;
}

int run_explain(const explain_options& o) {
  fmt::print("{}", explain_text(o));
  return 0;
}

}  // namespace rewind_cli
