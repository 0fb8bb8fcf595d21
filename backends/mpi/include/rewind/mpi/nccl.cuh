// rewind mpi: data parallelism for the CUDA engine over NCCL (compile with nvcc; target
// rewind::nccl). MPI starts the job and carries the NCCL id; the gradients never leave the GPU.
// The CUDA model tells its gradient listener as each suffix of the gradient arena is enqueued
// final on the model's stream; each finished bucket is then all-reduced (ncclAvg) on a stream of
// its own that waits for exactly that point of the model's stream, so that communication runs
// while the rewind's kernels continue below. The wait for the last bucket is bounded: past
// `timeout_seconds` the communicator is aborted and the error names what was waited for.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <rewind/engine/parameter_file.hpp>
#include <rewind/cuda/runtime.cuh>
#include <rewind/engine.hpp>

#include "runtime.hpp"

namespace rwd::mpi {

inline void check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw error(std::string("rewind: ") + call + " failed: " + ncclGetErrorString(r));
}

template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else return ncclFloat64;
}

/// One CUDA model replica per rank (one GPU per rank); the model's batch is this rank's shard.
template <class Model>
class nccl_data_parallel {
  using T = typename Model::scalar;

 public:
  /// Checks that every rank built the same model, joins the NCCL communicator, and gives every
  /// replica rank 0's parameters.
  nccl_data_parallel(Model& m, MPI_Comm comm = MPI_COMM_WORLD, parallel_options o = {})
      : model_(m), comm_(comm), o_(o), rank_(rank_of(comm)), size_(size_of(comm)) {
    if (!(o.timeout_seconds > 0)) throw error("rewind: parallel_options::timeout_seconds must be positive");
    check_same_model(comm_, m.parameter_count(), m.depth(), m.config().batch, o_.timeout_seconds);
    ncclUniqueId id{};
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<MPI_Request> req(1);
    check(MPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, comm_, &req[0]), "MPI_Ibcast");
    wait_all(req, o_.timeout_seconds, "rank 0's NCCL id");
    check(ncclCommInitRank(&nccl_, size_, id, rank_), "ncclCommInitRank");
    cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(ncclBroadcast(m.device_parameters(), m.device_parameters(), m.parameter_count(), nccl_type<T>(), 0, nccl_, stream_),
          "ncclBroadcast");
    wait_stream("rank 0's parameters");
    stats_.bytes_per_step = m.parameter_count() * sizeof(T);
  }
  nccl_data_parallel(const nccl_data_parallel&) = delete;
  nccl_data_parallel& operator=(const nccl_data_parallel&) = delete;
  ~nccl_data_parallel() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
    if (nccl_) ncclCommDestroy(nccl_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const parallel_stats& stats() const { return stats_; }
  std::pair<std::size_t, std::size_t> shard() const {
    const std::size_t b = model_.config().batch;
    return {b * static_cast<std::size_t>(rank_), b};
  }

  /// The mean loss over the global batch; the model's gradients become the global batch's.
  T loss_and_gradient(std::span<const T> local_batch, std::span<const int> local_labels, rwd::mode m) {
    const auto start = std::chrono::steady_clock::now();
    T* grads = model_.device_gradients();
    std::size_t reduced_from = model_.parameter_count(), buckets = 0;
    const std::size_t bucket = std::max<std::size_t>(1, o_.bucket_bytes / sizeof(T));
    const gradient_listener ready = [&](std::size_t first_final) {
      if (reduced_from - first_final < bucket && first_final != 0) return;
      if (buckets == events_.size()) {
        events_.emplace_back();
        cuda::check(cudaEventCreateWithFlags(&events_.back(), cudaEventDisableTiming), "cudaEventCreateWithFlags");
      }
      // the bucket is final at this point of the model's stream: the communication stream waits
      // for exactly that point, then reduces while the model's stream runs on
      cuda::check(cudaEventRecord(events_[buckets], model_.device().stream()), "cudaEventRecord");
      cuda::check(cudaStreamWaitEvent(stream_, events_[buckets], 0), "cudaStreamWaitEvent");
      check(ncclAllReduce(grads + first_final, grads + first_final, reduced_from - first_final, nccl_type<T>(), ncclAvg, nccl_, stream_),
            "ncclAllReduce");
      reduced_from = first_final;
      ++buckets;
    };
    const double local = model_.loss_and_gradient(local_batch, local_labels, m, ready);
    const auto backward_done = std::chrono::steady_clock::now();
    wait_stream("the gradient all-reduce");
    const double loss = sum_over(comm_, local, o_.timeout_seconds) / size_;
    const auto reduced = std::chrono::steady_clock::now();
    stats_.exposed_seconds += std::chrono::duration<double>(reduced - backward_done).count();
    stats_.step_seconds += std::chrono::duration<double>(reduced - start).count();
    stats_.buckets_per_step = buckets;
    ++stats_.steps;
    return static_cast<T>(loss);
  }

  template <class Optimizer>
  void apply(const Optimizer& opt) {
    model_.apply(opt);
    if (o_.check_every && ++applied_ % o_.check_every == 0) check_replicas();
  }

  std::uint64_t checksum() const {
    const auto p = model_.parameters();
    return fnv1a(p.data(), p.size() * sizeof(T));
  }
  void check_replicas() const { mpi::check_replicas(comm_, checksum(), o_.timeout_seconds); }

 private:
  /// Waits for the communication stream, bounded; a communicator that fails or hangs is aborted.
  void wait_stream(const char* what) {
    const auto start = std::chrono::steady_clock::now();
    for (long polls = 0;; ++polls) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) cuda::check(e, "cudaStreamQuery");
      ncclResult_t async = ncclSuccess;
      check(ncclCommGetAsyncError(nccl_, &async), "ncclCommGetAsyncError");
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (async != ncclSuccess || waited > o_.timeout_seconds) {
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
        if (async != ncclSuccess) check(async, what);
        throw error("rewind: waited " + std::to_string(static_cast<int>(waited)) + " s for " + what +
                    ": another rank has stopped or is stuck (parallel_options::timeout_seconds)");
      }
      if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  Model& model_;
  MPI_Comm comm_;
  parallel_options o_;
  int rank_ = 0, size_ = 1;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::size_t applied_ = 0;
  parallel_stats stats_;
};

}  // namespace rwd::mpi
