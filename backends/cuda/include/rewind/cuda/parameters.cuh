// rewind cuda: what every GPU model holds besides its step: the stream and cuBLAS handle, the
// parameters, gradients and optimizer state in one device arena each (laid out by a Layout:
// rwd::parameter_layout, rwd::staged_layout), the parameter check queued before a step, the
// optimizers, and saving and loading. The CPU backend's counterpart is cpu::parameter_owner.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <rewind/engine.hpp>
#include <rewind/engine/optimizer_step.hpp>
#include <rewind/optim.hpp>

#include "kernels.cuh"
#include "runtime.cuh"

namespace rwd::cuda {

template <class T, class Layout>
class parameter_owner {
 public:
  std::vector<T> parameters() const { return download_all(params_); }
  std::vector<T> gradients() const { return download_all(grads_); }
  /// Refuses a wrong count or a value that is not finite, the model unchanged.
  void set_parameters(std::span<const T> values) {
    if (values.size() != layout_.total)
      throw error("rewind: " + std::to_string(values.size()) + " parameters for a model of " + std::to_string(layout_.total));
    for (T v : values)
      if (!std::isfinite(v)) throw error("rewind: set_parameters: a parameter is not finite");
    upload(params_.data(), values.data(), values.size(), ctx_.stream());
    ctx_.synchronize();
  }
  /// The device arenas, for collectives (NCCL) and custom kernels; valid on the model's stream.
  T* device_parameters() { return params_.data(); }
  T* device_gradients() { return grads_.data(); }
  std::size_t parameter_count() const { return layout_.total; }
  /// Parameters, gradients, the optimizer's state, labels and losses.
  const device_tracker& arena_memory() const { return fixed_; }
  const context& device() const { return ctx_; }

  /// Writes the parameters to `path` atomically, as the CPU model does (a safetensors file where
  /// the name ends in .safetensors, else rewind's parameter file; either backend's loads into
  /// the other).
  void save(const std::string& path) const {
    const std::vector<T> values = parameters();
    layout_.save(path, std::span<const T>(values));
  }
  /// Reads parameters written by save() (either backend) for the same network and shapes; on any
  /// error the model is unchanged and the message names the cause.
  void load(const std::string& path) { set_parameters(layout_.template load<T>(path)); }

  /// One optimizer step on the device (sgd or adam settings). Switching optimizers starts the new
  /// one's state afresh (rwd::optimizer_kind), as on the CPU.
  void apply(const sgd& o) {
    check(o);
    begin_optimizer(kind_of(o), 1);
    for_each(sgd_step<T>::of(o, params_.data(), grads_.data(), first_.data()), layout_.total, ctx_.stream());
    ++steps_;
    ++updates_;
  }
  void apply(const adam& o) {
    check(o);
    begin_optimizer(kind_of(o), 2);
    ++steps_;
    for_each(adam_step<T>::of(o, steps_, params_.data(), grads_.data(), first_.data(), second_.data()), layout_.total, ctx_.stream());
    ++updates_;
  }
  /// The dropout key of the next training step, as the CPU model's: the seed and the number of
  /// parameter updates so far.
  std::uint64_t training_noise() const { return noise_key(seed_, updates_); }
  /// Forgets the optimizer's moments and step count.
  void reset_optimizer() {
    first_.reset(), second_.reset();
    steps_ = 0;
    optimizer_ = optimizer_kind::none;
  }

 protected:
  parameter_owner(Layout layout, std::uint64_t seed) : layout_(std::move(layout)), seed_(seed) {
    params_ = device_buffer<T>(fixed_, layout_.total);
    grads_ = device_buffer<T>(fixed_, layout_.total);
    flag_ = device_buffer<int>(fixed_, 1);
  }

  /// Starting values from `seed` (Layout::initialise), the same as the CPU backend's.
  void initialise(std::uint64_t seed, double output_scale) {
    std::vector<T> host(layout_.total);
    layout_.initialise(std::span<T>(host), seed, output_scale);
    set_parameters(host);
  }
  /// Zeroes the gradients on the stream, before a step adds into them.
  void zero_gradients() { REWIND_CUDA(cudaMemsetAsync(grads_.data(), 0, grads_.size() * sizeof(T), ctx_.stream())); }
  /// Queues a check of every parameter into flag_ (read at the step's sync, after the loss: the
  /// host never waits for the previous optimizer step just to look at its parameters).
  void queue_parameter_check() {
    const cudaStream_t s = ctx_.stream();
    REWIND_CUDA(cudaMemsetAsync(flag_.data(), 0, sizeof(int), s));
    for_each(nonfinite_op<T>{params_.data(), flag_.data()}, layout_.total, s);
  }
  /// Waits for the stream, then throws when a parameter was not finite (the flag queued by
  /// queue_parameter_check; the gradients of such a step are garbage, the parameters unchanged).
  void check_parameters() {
    int bad = 0;
    download(&bad, flag_.data(), 1, ctx_.stream());
    if (bad) throw error("rewind: a parameter is not finite (the step's gradients are void)");
  }
  std::vector<T> download_all(const device_buffer<T>& b) const {
    std::vector<T> out(b.size());
    download(out.data(), b.data(), b.size(), ctx_.stream());
    return out;
  }

  context ctx_;  // first: the buffers below are freed before the stream and handle
  Layout layout_;
  std::uint64_t seed_;
  device_tracker fixed_;  // the arenas, flag, labels and losses
  device_buffer<T> params_, grads_, first_, second_;
  device_buffer<int> flag_;

 private:
  /// Zeroed moments (one arena for sgd, two for adam) and step 0, unless they are already k's.
  void begin_optimizer(optimizer_kind k, int moments) {
    if (optimizer_ == k) return;
    reset_optimizer();
    const cudaStream_t s = ctx_.stream();
    first_ = device_buffer<T>(fixed_, layout_.total);
    REWIND_CUDA(cudaMemsetAsync(first_.data(), 0, layout_.total * sizeof(T), s));
    if (moments == 2) {
      second_ = device_buffer<T>(fixed_, layout_.total);
      REWIND_CUDA(cudaMemsetAsync(second_.data(), 0, layout_.total * sizeof(T), s));
    }
    optimizer_ = k;
  }

  long long steps_ = 0;
  std::uint64_t updates_ = 0;  // apply() calls, never reset: the step count of the dropout keys
  optimizer_kind optimizer_ = optimizer_kind::none;
};

}  // namespace rwd::cuda
