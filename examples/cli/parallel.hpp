// rewind cli: the job this process belongs to (one process, or one rank of an MPI job started by
// mpirun), and a replica that trains with rwd::mpi::data_parallel when there is a job and with
// the plain model otherwise. Only rank 0 prints and writes files: main() sends the other ranks'
// stdout to /dev/null, and write_file() and plot() do nothing there.
#pragma once

#include <optional>
#include <span>
#include <string>

#include <rewind/cpu.hpp>
#ifdef REWIND_WITH_MPI
#include <rewind/mpi/data_parallel.hpp>
#endif

namespace rewind_cli {

struct job {
  int rank = 0, ranks = 1;
  bool mpi = false;  // started by an MPI launcher, MPI initialised
  bool root() const { return rank == 0; }
};

inline job& current_job() {
  static job j;
  return j;
}

/// The sum of x over the ranks of the job (x itself without one).
inline double sum_over_ranks(double x) {
#ifdef REWIND_WITH_MPI
  if (current_job().mpi) return rwd::mpi::sum_over(MPI_COMM_WORLD, x, rwd::mpi::parallel_options{}.timeout_seconds);
#endif
  return x;
}

/// A model trained by this process alone, or as one replica of a data-parallel job.
template <class Model>
class replica {
  using T = typename Model::scalar;

 public:
  explicit replica(Model& m, [[maybe_unused]] std::size_t bucket_bytes = std::size_t{1} << 20) : model_(m) {
#ifdef REWIND_WITH_MPI
    if (current_job().mpi) parallel_.emplace(m, MPI_COMM_WORLD, rwd::mpi::parallel_options{.bucket_bytes = bucket_bytes});
#endif
  }
  T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, rwd::cpu::mode m) {
#ifdef REWIND_WITH_MPI
    if (parallel_) return parallel_->loss_and_gradient(batch, labels, m);
#endif
    return model_.loss_and_gradient(batch, labels, m);
  }
  template <class Optimizer>
  void apply(const Optimizer& o) {
#ifdef REWIND_WITH_MPI
    if (parallel_) return parallel_->apply(o);
#endif
    model_.apply(o);
  }
  Model& model() { return model_; }
#ifdef REWIND_WITH_MPI
  rwd::mpi::data_parallel<Model>* parallel() { return parallel_ ? &*parallel_ : nullptr; }
#endif

 private:
  Model& model_;
#ifdef REWIND_WITH_MPI
  std::optional<rwd::mpi::data_parallel<Model>> parallel_;
#endif
};

}  // namespace rewind_cli
