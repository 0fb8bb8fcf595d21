// build/bin/rewind: the command-line program of the project.
//
//   rewind explain [--block momentum|leapfrog|coupling] [--mu M] [--slope LO,HI]
//
// prints the derivation of the built-in blocks: forward, derived inverse, derived adjoint, class,
// amplification per layer and the budget table.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <rewind/rewind.hpp>
#include <string>
#include <vector>

using namespace rwd::literals;

namespace builtin {
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::var<"x1"> x1;
inline constexpr rwd::var<"x2"> x2;
inline constexpr rwd::param<"mu"> mu;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto F = rwd::map<"F">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto G = rwd::map<"G">(rwd::dense<16>, rwd::tanh, rwd::dense_same);

inline constexpr auto momentum = rwd::block(v = mu * v + f(x), x = x + v);
inline constexpr auto leapfrog = rwd::leapfrog(x, v, 1_c, F);
inline constexpr auto coupling = rwd::additive_coupling(x1, x2, F, G);
}  // namespace builtin

namespace {

struct explain_options {
  std::string block = "all";
  double mu = 0.9;
  std::vector<double> slope;
};

int explain(const explain_options& o) {
  if (!(o.mu > 0 && o.mu <= 1)) throw CLI::ValidationError("--mu", "must be in (0, 1]");
  rwd::env e = rwd::env{}.set("mu", o.mu);
  if (!o.slope.empty()) {
    if (o.slope.size() != 2 || !(o.slope[0] <= o.slope[1]))
      throw CLI::ValidationError("--slope", "takes LO,HI with LO <= HI");
    for (const char* map : {"f", "F", "G"}) e = e.slope(map, o.slope[0], o.slope[1]);
  }
  const bool all = o.block == "all";
  if (all || o.block == "momentum")
    fmt::print("{}\n", rwd::explain(builtin::momentum, e, fmt::format("momentum (mu = {})", o.mu)));
  if (all || o.block == "leapfrog")
    fmt::print("{}\n", rwd::explain(builtin::leapfrog, e, "leapfrog (kick, drift, kick; h = 1)"));
  if (all || o.block == "coupling")
    fmt::print("{}\n", rwd::explain(builtin::coupling, e, "additive coupling"));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rewind: reversible networks with exact gradients and constant activation memory"};
  app.require_subcommand(1);

  explain_options eo;
  auto* ex = app.add_subcommand("explain", "the derivation of a block: inverse, adjoint, budget");
  ex->add_option("--block", eo.block, "momentum, leapfrog, coupling or all")
      ->check(CLI::IsMember({"all", "momentum", "leapfrog", "coupling"}));
  ex->add_option("--mu", eo.mu, "momentum coefficient, in (0, 1]");
  ex->add_option("--slope", eo.slope, "slope interval LO,HI of the maps' Jacobian")->delimiter(',')->expected(2);

  try {
    app.parse(argc, argv);
    if (ex->parsed()) return explain(eo);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const rwd::error& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  return 0;
}
