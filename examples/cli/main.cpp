// build/bin/rewind: the command-line program of the project.
//
//   rewind explain     the derivation of a block: inverse, adjoint, class, budget
//   rewind memory      activation memory and step time against depth, both modes
//   rewind budget      reversible against stored gradients across mu and depth, beside L*
//   rewind trajectory  the rewind error along a trajectory, against eps * (1/mu)^l
//   rewind train       training on Fashion-MNIST, both modes on one schedule (under mpirun: data parallel)
//   rewind scaling     data-parallel weak scaling over MPI: step time, bytes reduced, overlap
//   rewind demo        all of the above at small sizes, into a report folder
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "commands.hpp"
#include "parallel.hpp"
#include "report.hpp"

int main(int argc, char** argv) {
  using namespace rewind_cli;
  CLI::App app{"rewind: reversible networks with exact gradients and constant activation memory"};
  app.require_subcommand(1);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();

  explain_options eo;
  auto* ex = app.add_subcommand("explain", "the derivation of a block: inverse, adjoint, budget");
  ex->add_option("--block", eo.block, "momentum, leapfrog, coupling or all")->check(CLI::IsMember({"all", "momentum", "leapfrog", "coupling"}));
  ex->add_option("--mu", eo.mu, "momentum coefficient, in (0, 1]");
  ex->add_option("--slope", eo.slope, "slope interval LO,HI of the maps' Jacobian")->delimiter(',')->expected(2);

  memory_options mo;
  auto* me = app.add_subcommand("memory", "activation memory and step time against depth, stored and reversible");
  me->add_option("--depths", mo.depths, "depths, comma-separated")->delimiter(',')->check(CLI::PositiveNumber);
  me->add_option("--modes", mo.modes, "stored, reversible, checkpointed and/or exact, comma-separated")
      ->delimiter(',')->check(CLI::IsMember({"stored", "reversible", "checkpointed", "exact"}));
  me->add_option("--batch", mo.batch, "batch size")->check(CLI::PositiveNumber);
  me->add_option("--width", mo.width, "state width")->check(CLI::PositiveNumber);
  me->add_option("--mu", mo.mu, "momentum coefficient")->check(CLI::Range(0.01, 1.0));
  me->add_option("--steps", mo.steps, "measured steps per configuration (median)")->check(CLI::PositiveNumber);
  me->add_option("--threads", mo.threads, "GEMM threads (0: all cores)")->check(CLI::NonNegativeNumber);
  me->add_option("--json", mo.json, "write the results as JSON (CSV and PNG beside it)");
  me->add_option("--device", mo.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  me->add_flag("--child", mo.child)->group("");
  me->add_option("--child-mode", mo.child_mode)->group("");

  budget_options bo;
  auto* bu = app.add_subcommand("budget", "the gradient-agreement grid: reversible against stored, beside L*");
  bu->add_option("--mus", bo.mus, "momentum coefficients, comma-separated")->delimiter(',');
  bu->add_option("--depths", bo.depths, "depths, comma-separated")->delimiter(',')->check(CLI::PositiveNumber);
  bu->add_option("--dtype", bo.dtype, "float32 or float64")->check(CLI::IsMember({"float32", "float64"}));
  bu->add_option("--policies", bo.policies, "reversible and/or checkpointed, comma-separated")
      ->delimiter(',')->check(CLI::IsMember({"reversible", "checkpointed", "exact"}));
  bu->add_option("--batch", bo.batch, "batch size")->check(CLI::PositiveNumber);
  bu->add_option("--width", bo.width, "state width")->check(CLI::PositiveNumber);
  bu->add_option("--json", bo.json, "write the results as JSON (CSV and PNG beside it)");
  bu->add_option("--device", bo.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));

  trajectory_options to;
  auto* tr = app.add_subcommand("trajectory", "the rewind error along a trajectory of 2-D particles");
  tr->add_option("--particles", to.particles, "number of particles")->check(CLI::PositiveNumber);
  tr->add_option("--depth", to.depth, "layers")->check(CLI::PositiveNumber);
  tr->add_option("--mus", to.mus, "momentum coefficients, comma-separated (leapfrog is added as mu = 1)")->delimiter(',');
  tr->add_option("--json", to.json, "write the results as JSON (CSV and PNG beside it)");

  train_options trn;
  auto* ta = app.add_subcommand("train", "train on Fashion-MNIST (or a built-in synthetic problem), both modes on one schedule");
  ta->add_option("--depth", trn.depth, "layers")->check(CLI::PositiveNumber);
  ta->add_option("--mu", trn.mu, "momentum coefficient")->check(CLI::Range(0.01, 1.0));
  ta->add_option("--mode", trn.mode, "stored, reversible, checkpointed, exact or both (stored and reversible)")
      ->check(CLI::IsMember({"stored", "reversible", "checkpointed", "exact", "both"}));
  ta->add_option("--epochs", trn.epochs, "epochs")->check(CLI::PositiveNumber);
  ta->add_option("--batch", trn.batch, "batch size")->check(CLI::PositiveNumber);
  ta->add_option("--lr", trn.lr, "Adam learning rate")->check(CLI::PositiveNumber);
  auto* data_opt = ta->add_option("--data", trn.data, "folder of the Fashion-MNIST IDX files (gzip or not)");
  ta->add_flag("--synthetic", trn.synthetic, "train on the built-in synthetic 10-class problem");
  ta->add_option("--train-limit", trn.train_limit, "use only the first N training samples (0: all)");
  ta->add_option("--test-limit", trn.test_limit, "evaluate on the first N test samples (0: all)");
  ta->add_option("--seed", trn.seed, "seed of the weights and of the shuffling");
  ta->add_option("--json", trn.json, "write the results as JSON (CSV and PNG beside it)");
  ta->add_option("--device", trn.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));

  scaling_options so;
  auto* sc = app.add_subcommand("scaling", "data-parallel weak scaling over MPI: step time, bytes all-reduced, overlap");
  sc->add_option("--ranks", so.ranks, "rank counts, comma-separated (each a job started with mpirun)")->delimiter(',')->check(CLI::PositiveNumber);
  sc->add_option("--depth", so.depth, "layers")->check(CLI::PositiveNumber);
  sc->add_option("--batch", so.batch, "samples per rank")->check(CLI::PositiveNumber);
  sc->add_option("--mu", so.mu, "momentum coefficient")->check(CLI::Range(0.01, 1.0));
  sc->add_option("--steps", so.steps, "measured steps per job (median)")->check(CLI::PositiveNumber);
  sc->add_option("--mode", so.mode, "stored, reversible, checkpointed or exact")
      ->check(CLI::IsMember({"stored", "reversible", "checkpointed", "exact"}));
  sc->add_option("--bucket-kib", so.bucket_kib, "all-reduce gradients in buckets of at least this many KiB")->check(CLI::PositiveNumber);
  sc->add_option("--json", so.json, "write the results as JSON (CSV beside it)");
  sc->add_flag("--child", so.child)->group("");

  demo_options dmo;
  auto* de = app.add_subcommand("demo", "the main job: every subcommand at small sizes, into a report folder");
  de->add_option("--out", dmo.out, "report folder");
  de->add_flag("--quick", dmo.quick, "tiny sizes: the whole report in seconds");

  // one rank of an MPI job: only rank 0 prints (errors still reach stderr, with the rank)
  job& j = current_job();
#ifdef REWIND_WITH_MPI
  std::optional<rwd::mpi::environment> mpi;
  if (rwd::mpi::launched()) {
    mpi.emplace(&argc, &argv);
    j = {rwd::mpi::rank_of(MPI_COMM_WORLD), rwd::mpi::size_of(MPI_COMM_WORLD), true};
    writes_files() = j.root();
    if (!j.root() && !std::freopen("/dev/null", "w", stdout)) return 1;
  }
#else
  if (const char* n = std::getenv("OMPI_COMM_WORLD_SIZE"); n && std::atoi(n) > 1) {
    fmt::print(stderr, "rewind: started by mpirun, but this build has no MPI (install libopenmpi-dev and openmpi-bin, then rebuild)\n");
    return 1;
  }
#endif
  const auto dispatch = [&]() -> int {
    app.parse(argc, argv);
    if (j.mpi && !ta->parsed() && !sc->parsed())
      throw rwd::error("rewind: under mpirun only `train` runs (data parallel); run the other subcommands as one process");
    if (ex->parsed()) return run_explain(eo);
    if (me->parsed()) return run_memory(mo, self);
    if (bu->parsed()) return run_budget(bo);
    if (tr->parsed()) return run_trajectory(to);
    if (ta->parsed()) {
      trn.data_given = data_opt->count() > 0;
      return run_train(trn);
    }
    if (sc->parsed()) return run_scaling(so, self);
    if (de->parsed()) return run_demo(dmo, self);
    return 0;
  };
  try {
#ifdef REWIND_WITH_MPI
    if (j.mpi) return rwd::mpi::run_or_abort(MPI_COMM_WORLD, dispatch);  // a failed rank stops the job
#endif
    return dispatch();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
}
