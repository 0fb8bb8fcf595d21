// build/bin/rewind: the command-line program of the project.
//
//   rewind explain     the derivation of a block: inverse, adjoint, class, budget
//   rewind memory      activation memory and step time against depth, both modes
//   rewind budget      reversible against stored gradients across mu and depth, beside L*
//   rewind trajectory  the rewind error along a trajectory, against eps * (1/mu)^l
//   rewind train       training on Fashion-MNIST, both modes on one schedule (under mpirun: data parallel)
//   rewind scaling     data-parallel weak scaling over MPI: step time, bytes reduced, overlap
//   rewind demo        all of the above at small sizes, into a report folder
#include <fmt/core.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "command_line.hpp"
#include "commands.hpp"
#include "parallel.hpp"
#include "report.hpp"

int main(int argc, char** argv) {
  using namespace rewind_cli;
  command_line cl;
  auto& app = cl.app;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();

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
    cl.parse(argc, argv);
    if (j.mpi && !cl.ta->parsed() && !cl.sc->parsed())
      throw rwd::error("rewind: under mpirun only `train` runs (data parallel); run the other subcommands as one process");
    if (cl.ex->parsed()) return run_explain(cl.explain);
    if (cl.me->parsed()) return run_memory(cl.memory, self);
    if (cl.bu->parsed()) return run_budget(cl.budget);
    if (cl.tr->parsed()) return run_trajectory(cl.trajectory);
    if (cl.ta->parsed()) return run_train(cl.train);
    if (cl.sc->parsed()) return run_scaling(cl.scaling, self);
    if (cl.de->parsed()) return run_demo(cl.demo, self);
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
