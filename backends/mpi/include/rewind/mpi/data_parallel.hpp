// rewind mpi: data parallelism over MPI. Every rank holds a replica of the model and takes an
// equal shard of each global batch; the gradients are averaged with all-reduces over the flat
// gradient arena. The backward pass finishes the gradients from the top of the network down
// (the head, then layer L-1, ..., layer 0), and the model says so as it goes
// (rwd::gradient_listener): each finished stretch of the arena of at least `bucket_bytes` is
// all-reduced with a non-blocking collective while the rewind continues below, so that most of
// the communication hides behind the backward pass.
//
// A job never hangs on a lost rank: every wait is bounded (`timeout_seconds`) and ends in an
// error naming the rank, and run_or_abort() turns an exception on any rank into MPI_Abort, which
// stops the others. Replicas are compared by a checksum of their parameters every `check_every`
// optimizer steps; a difference is an error, never silent drift.
#pragma once

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <rewind/engine/parameter_file.hpp>
#include <rewind/engine.hpp>

#include "runtime.hpp"

namespace rwd::mpi {

/// One model replica per rank; the model's batch is this rank's shard of the global batch.
template <class Model>
class data_parallel {
  using T = typename Model::scalar;

 public:
  /// Checks that every rank built the same model (parameter count, depth, local batch) and gives
  /// every replica rank 0's parameters.
  data_parallel(Model& m, MPI_Comm comm = MPI_COMM_WORLD, parallel_options o = {})
      : model_(m), comm_(comm), o_(o), rank_(rank_of(comm)), size_(size_of(comm)) {
    if (!(o.timeout_seconds > 0)) throw error("rewind: parallel_options::timeout_seconds must be positive");
    check_same_model(comm_, m.parameters().size(), m.depth(), m.config().batch, o_.timeout_seconds);
    broadcast_parameters();
    stats_.bytes_per_step = m.gradients().size_bytes();
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm communicator() const { return comm_; }
  Model& model() { return model_; }
  const parallel_options& options() const { return o_; }
  const parallel_stats& stats() const { return stats_; }
  void reset_stats() { stats_ = {.bytes_per_step = model_.gradients().size_bytes()}; }

  /// The global batch this job trains on per step: the local batch times the ranks.
  std::size_t global_batch() const { return model_.config().batch * static_cast<std::size_t>(size_); }
  /// The samples [first, first + count) of a global batch that are this rank's.
  std::pair<std::size_t, std::size_t> shard() const {
    const std::size_t b = model_.config().batch;
    return {b * static_cast<std::size_t>(rank_), b};
  }

  /// The mean loss over the global batch; the model's gradients() become the global batch's
  /// (the mean over ranks of the local means: shards are of equal size). Gradients are
  /// all-reduced in buckets while the backward pass continues.
  T loss_and_gradient(std::span<const T> local_batch, std::span<const int> local_labels, rwd::mode m) {
    const auto start = std::chrono::steady_clock::now();
    auto grads = model_.gradients();
    std::size_t reduced_from = grads.size(), buckets = 0;  // [reduced_from, end) is posted
    std::vector<MPI_Request> requests;
    const auto post = [&](std::size_t first) {
      for (std::size_t end = reduced_from; end > first;) {  // MPI counts are int
        const std::size_t begin = end - std::min<std::size_t>(end - first, INT_MAX / 2);
        requests.emplace_back();
        check(MPI_Iallreduce(MPI_IN_PLACE, grads.data() + begin, static_cast<int>(end - begin), datatype<T>(), MPI_SUM, comm_,
                             &requests.back()),
              "MPI_Iallreduce");
        ++buckets;
        end = begin;
      }
      reduced_from = first;
    };
    const std::size_t bucket = std::max<std::size_t>(1, o_.bucket_bytes / sizeof(T));
    const gradient_listener ready = [&](std::size_t first_final) {
      if (size_ == 1) return;
      if (reduced_from - first_final >= bucket || first_final == 0) post(first_final);
      // lets MPI move the posted buckets along between layers: a non-blocking collective
      // advances a round per call into MPI, so a few calls per layer
      int done = requests.empty();
      for (int poll = 0; poll < o_.polls_per_layer && !done; ++poll)
        check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    };
    double loss = model_.loss_and_gradient(local_batch, local_labels, m, ready);
    if (size_ > 1) {
      const auto backward_done = std::chrono::steady_clock::now();
      post(0);
      requests.emplace_back();
      check(MPI_Iallreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, comm_, &requests.back()), "MPI_Iallreduce");
      wait_all(requests, o_.timeout_seconds, "the gradient all-reduce");
      const auto reduced = std::chrono::steady_clock::now();
      stats_.exposed_seconds += std::chrono::duration<double>(reduced - backward_done).count();
      stats_.last_backward_end = std::chrono::duration<double>(backward_done.time_since_epoch()).count();
      stats_.last_reduced = std::chrono::duration<double>(reduced.time_since_epoch()).count();
      const T inv = T(1) / static_cast<T>(size_);
      for (T& g : grads) g *= inv;
      loss /= size_;
    }
    stats_.buckets_per_step = buckets;
    stats_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++stats_.steps;
    return static_cast<T>(loss);
  }

  /// One optimizer step on every replica (each applies the same averaged gradients); every
  /// check_every steps the replicas' checksums are compared.
  template <class Optimizer>
  void apply(const Optimizer& opt) {
    model_.apply(opt);
    if (o_.check_every && ++applied_ % o_.check_every == 0) check_replicas();
  }

  /// A checksum of this replica's parameters (FNV-1a of their bytes).
  std::uint64_t checksum() const {
    const auto p = model_.parameters();
    return fnv1a(p.data(), p.size_bytes());
  }

  /// Throws on every rank when any two replicas' parameters differ, naming the ranks.
  void check_replicas() const { mpi::check_replicas(comm_, checksum(), o_.timeout_seconds); }

  /// Gives every replica rank 0's parameters (and so the same start whatever each rank's seed).
  void broadcast_parameters() {
    auto p = model_.parameters();
    std::vector<MPI_Request> requests;
    for (std::size_t begin = 0; begin < p.size(); begin += INT_MAX / 2) {
      requests.emplace_back();
      const auto count = static_cast<int>(std::min<std::size_t>(p.size() - begin, INT_MAX / 2));
      check(MPI_Ibcast(p.data() + begin, count, datatype<T>(), 0, comm_, &requests.back()), "MPI_Ibcast");
    }
    wait_all(requests, o_.timeout_seconds, "rank 0's parameters");
  }

  /// Seconds of one blocking all-reduce of the whole gradient arena (median of `repeats`): what
  /// the communication would cost if none of it were hidden.
  double blocking_allreduce_seconds(int repeats = 5) {
    std::vector<T> scratch(model_.gradients().begin(), model_.gradients().end());
    std::vector<double> times;
    for (int i = 0; i < repeats; ++i) {
      std::vector<MPI_Request> req(1);
      check(MPI_Ibarrier(comm_, &req[0]), "MPI_Ibarrier");
      wait_all(req, o_.timeout_seconds, "a barrier");
      const auto start = std::chrono::steady_clock::now();
      for (std::size_t begin = 0; begin < scratch.size(); begin += INT_MAX / 2) {
        req.emplace_back();
        const auto count = static_cast<int>(std::min<std::size_t>(scratch.size() - begin, INT_MAX / 2));
        check(MPI_Iallreduce(MPI_IN_PLACE, scratch.data() + begin, count, datatype<T>(), MPI_SUM, comm_, &req.back()),
              "MPI_Iallreduce");
      }
      wait_all(req, o_.timeout_seconds, "the timing all-reduce");
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
    return times[static_cast<std::size_t>(repeats / 2)];
  }

 private:
  Model& model_;
  MPI_Comm comm_;
  parallel_options o_;
  int rank_ = 0, size_ = 1;
  std::size_t applied_ = 0;
  parallel_stats stats_;
};

}  // namespace rwd::mpi
