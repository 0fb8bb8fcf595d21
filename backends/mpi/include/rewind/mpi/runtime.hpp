// rewind mpi: what every data-parallel engine shares: MPI's errors as exceptions, its lifetime,
// a job that stops as a whole when one rank fails, bounded waits, and the checks that every rank
// built the same model and that the replicas have not drifted apart.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <rewind/diagnostics.hpp>

namespace rwd::mpi {

/// Throws rwd::error naming the MPI call and MPI's own words when rc is not MPI_SUCCESS.
inline void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw error(std::string("rewind: ") + call + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

/// Whether a launcher (mpirun, mpiexec, srun) started this process as one rank of a job.
inline bool launched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"})
    if (std::getenv(v)) return true;
  return false;
}

/// MPI for the lifetime of the object: initialised unless it already is (threads: funneled, since
/// only the calling thread talks to MPI while the GEMMs may use OpenMP), finalised at the end if
/// this object initialised it. Errors on MPI_COMM_WORLD come back as codes (then exceptions)
/// instead of aborting inside MPI.
class environment {
 public:
  environment(int* argc = nullptr, char*** argv = nullptr) {
    int ready = 0;
    check(MPI_Initialized(&ready), "MPI_Initialized");
    if (!ready) {
      int provided = 0;
      check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owner_ = true;
    }
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  ~environment() {
    int done = 0;
    MPI_Finalized(&done);
    if (owner_ && !done) MPI_Finalize();
  }

 private:
  bool owner_ = false;
};

inline int rank_of(MPI_Comm comm) {
  int r = 0;
  check(MPI_Comm_rank(comm, &r), "MPI_Comm_rank");
  return r;
}
inline int size_of(MPI_Comm comm) {
  int n = 0;
  check(MPI_Comm_size(comm, &n), "MPI_Comm_size");
  return n;
}

/// Runs f() and returns its exit code. An exception on any rank is printed, prefixed with the
/// rank, and ends the whole job with MPI_Abort: the other ranks stop instead of waiting forever
/// in a collective that will never complete.
template <class F>
int run_or_abort(MPI_Comm comm, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const std::exception& e) {
    int r = -1, n = 0;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    std::string what = e.what();
    if (what.starts_with("rewind: ")) what = what.substr(8);
    std::fprintf(stderr, "rewind: rank %d of %d: %s (stopping every rank)\n", r, n, what.c_str());
    std::fflush(stderr);
    MPI_Abort(comm, 1);
    return 1;
  }
}

/// Waits for requests, bounded: polls (which also drives MPI's progress), and past `timeout`
/// seconds throws an error that says what it waited for (run_or_abort adds the rank).
inline void wait_all(std::vector<MPI_Request>& requests, double timeout, const char* what) {
  if (requests.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  for (long polls = 0;; ++polls) {
    int done = 0;
    check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) break;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout)
      throw error("rewind: waited " + std::to_string(static_cast<int>(waited)) + " s for " + what + ": another rank has stopped or is stuck (parallel_options::timeout_seconds)");
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  requests.clear();
}

template <class T>
MPI_Datatype datatype() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else static_assert(sizeof(T) == 0, "rewind: data_parallel takes float or double models");
}

struct parallel_options {
  std::size_t bucket_bytes = std::size_t{1} << 20;  // all-reduce finished gradients in pieces of at least this
  std::size_t check_every = 100;                    // compare the replicas' checksums every this many steps (0: never)
  double timeout_seconds = 300;                     // the longest wait for any collective
  int polls_per_layer = 8;                          // calls into MPI per finished layer, to progress the buckets
};

/// What the all-reduces cost, summed over the steps since the last reset.
struct parallel_stats {
  std::size_t steps = 0;
  std::size_t bytes_per_step = 0;    // gradient bytes all-reduced per step (the whole arena)
  std::size_t buckets_per_step = 0;  // non-blocking all-reduces per step
  double exposed_seconds = 0;        // time spent waiting for them after the backward pass
  double step_seconds = 0;           // whole loss_and_gradient calls
  // the last step, in seconds of std::chrono::steady_clock (one clock for all the processes of a
  // machine): when this rank's backward pass ended and when its all-reduces completed. With the
  // other ranks' backward ends, this separates waiting for a slower rank from communicating.
  double last_backward_end = 0, last_reduced = 0;
};

/// Throws on every rank unless every rank built a model of the same shapes.
inline void check_same_model(MPI_Comm comm, std::uint64_t parameters, std::uint64_t depth, std::uint64_t local_batch, double timeout) {
  const std::uint64_t mine[3] = {parameters, depth, local_batch};
  const int n = size_of(comm), me = rank_of(comm);
  std::vector<std::uint64_t> all(3 * static_cast<std::size_t>(n));
  std::vector<MPI_Request> req(1);
  check(MPI_Iallgather(mine, 3, MPI_UINT64_T, all.data(), 3, MPI_UINT64_T, comm, &req[0]), "MPI_Iallgather");
  wait_all(req, timeout, "the model shapes of the other ranks");
  for (int r = 0; r < n; ++r)
    if (!std::equal(mine, mine + 3, all.begin() + 3 * r))
      throw error("rewind: rank " + std::to_string(r) + " built a different model (parameters " + std::to_string(all[3 * r]) +
                  ", depth " + std::to_string(all[3 * r + 1]) + ", local batch " + std::to_string(all[3 * r + 2]) + ") than rank " +
                  std::to_string(me) + ": every rank needs the same shapes");
}

/// Throws on every rank when the replicas' parameter checksums differ, naming the ranks.
inline void check_replicas(MPI_Comm comm, std::uint64_t mine, double timeout) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size_of(comm)));
  std::vector<MPI_Request> req(1);
  check(MPI_Iallgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm, &req[0]), "MPI_Iallgather");
  wait_all(req, timeout, "the replica checksums");
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) {
      char text[64];
      std::snprintf(text, sizeof text, "%016llx and %016llx", static_cast<unsigned long long>(all[0]),
                    static_cast<unsigned long long>(all[r]));
      throw error("rewind: replicas drifted apart: the parameters of rank 0 and rank " + std::to_string(r) + " differ (checksums " +
                  text + ")");
    }
}

/// The sum over the ranks of x, bounded like every other wait.
inline double sum_over(MPI_Comm comm, double x, double timeout) {
  std::vector<MPI_Request> req(1);
  check(MPI_Iallreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, comm, &req[0]), "MPI_Iallreduce");
  wait_all(req, timeout, "a sum over the ranks");
  return x;
}

}  // namespace rwd::mpi
