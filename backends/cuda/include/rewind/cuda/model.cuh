// rewind cuda: a model on the GPU, with the CPU model's API, parameter layout and buffer layout.
// The step's algorithm is the engine's (rewind/engine/step.hpp: stored, reversible and
// checkpointed), run on the whole batch as one lane through the CUDA executor (executor.cuh):
// the maps' GEMMs through cuBLAS, every update, inverse and adjoint step one fused kernel.
//
// Parameters, gradients and the optimizer's state live in one device arena each; activations and
// workspaces come from a tracking allocator over cudaMalloc, so the peak device bytes of a step
// are measured, and equal the plan. Everything runs on the model's stream; loss_and_gradient
// synchronises once, at its end, to read its loss, its input gradient and the parameter check
// queued at its start; apply() does not synchronise. (Its uploads of the batch and labels come
// from pageable host memory, which the driver may stage behind the stream's earlier work.)
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <rewind/engine.hpp>
#include <rewind/engine/optimizer_step.hpp>
#include <rewind/layout.hpp>
#include <rewind/optim.hpp>
#include <rewind/rewind.hpp>

#include <rewind/engine/audit.hpp>
#include <rewind/engine/parameter_file.hpp>
#include <rewind/engine/step.hpp>

#include "executor.cuh"
#include "kernels.cuh"
#include "runtime.cuh"

namespace rwd::cuda {

using rwd::audit_report;
using rwd::memory_plan;
using rwd::mode;
using rwd::options;

template <class T, class Block>
class model {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "rewind: cuda models are float or double");
  static_assert(rwd::detail::usable_block<Block>(), "rewind: cuda::model takes a block made by rwd::block(...)");
  using State = std::remove_const_t<decltype(Block::state())>;
  static constexpr std::size_t ns = Block::state_size;
  static constexpr bool has_data_alpha = has_data_dependent_coefficient<Block>();
  using engine_type = step_engine<T, Block, executor<T>>;
  using lane = typename engine_type::lane_type;

 public:
  using scalar = T;
  using block_type = Block;

  /// A model of a network (rwd::network: a stack of the block, its runtime scalars and a
  /// policy, checked against the budget where the policy asks): the policy chooses the mode of
  /// loss_and_gradient(batch, labels) (rwd::mode_of), policy::lossy sets options.lossy.
  template <class Policy, std::size_t Depth>
  model(const network_t<T, Policy, Block, Depth>& net, const options& o)
      : model(Block{}, net.depth, policy_options<Policy>(o), net.bindings) {
    mode_ = mode_of<Policy>();
    if (mode_ == mode::exact) throw error("rewind: policy::exact runs on the CPU backend (its GPU half is not built yet)");
  }
  /// A model of the block stacked `depth` times; loss_and_gradient(batch, labels) rewinds
  /// (mode::reversible, checked against the budget unless options.lossy).
  model(Block, std::size_t depth, const options& o, const env& bindings = {})
      : depth_(depth), o_(with_shape_width(o)), bindings_(bindings), arena_(state_shape(o_), depth, o_.classes) {
    if (o_.width == 0 || o_.batch == 0 || o.classes == 0 || depth == 0)
      throw error("rewind: a model needs width, batch, classes and depth of at least 1");
    input_ = state_index_of<State>(o.input);
    output_ = state_index_of<State>(o.output);
    rwd::detail::check_runtime_coefficients<Block>(bindings);
    budget_ = rwd::budget<T>(Block{}, bindings);
    segment_ = checkpoint_segment(o.checkpoint_every, budget_, depth);
    scalars_ = engine_type::scalars(bindings);
    params_ = device_buffer<T>(fixed_, arena_.total);
    grads_ = device_buffer<T>(fixed_, arena_.total);
    labels_ = device_buffer<int>(fixed_, o.batch);
    losses_ = device_buffer<double>(fixed_, o.batch);
    flag_ = device_buffer<int>(fixed_, 1);
    if constexpr (has_data_alpha) alpha_bad_ = device_buffer<unsigned>(fixed_, 2 * depth * Block::size);
    initialise(o.seed);
  }

  /// The same weights as the CPU backend's model for the same seed (rwd::parameter_layout).
  void initialise(std::uint64_t seed) {
    std::vector<T> host(arena_.total);
    arena_.initialise(std::span<T>(host), seed, o_.output_init_scale);
    set_parameters(host);
  }

  std::vector<T> parameters() const { return download_all(params_); }
  std::vector<T> gradients() const { return download_all(grads_); }
  /// dloss/dinput of the last loss_and_gradient (width x batch).
  std::vector<T> input_gradient() const { return input_grad_; }
  void set_parameters(std::span<const T> values) {
    if (values.size() != arena_.total)
      throw error("rewind: " + std::to_string(values.size()) + " parameters for a model of " + std::to_string(arena_.total));
    for (T v : values)
      if (!std::isfinite(v)) throw error("rewind: set_parameters: a parameter is not finite");
    upload(params_.data(), values.data(), values.size(), ctx_.stream());
    ctx_.synchronize();
  }
  /// The device arenas, for collectives (NCCL) and custom kernels; valid on the model's stream.
  T* device_parameters() { return params_.data(); }
  T* device_gradients() { return grads_.data(); }
  std::size_t parameter_count() const { return arena_.total; }
  std::size_t parameters_per_layer() const { return arena_.per_layer; }
  std::size_t depth() const { return depth_; }
  const options& config() const { return o_; }
  const env& bindings() const { return bindings_; }
  const budget_report& budget() const { return budget_; }
  std::size_t checkpoint_every() const { return segment_; }
  std::size_t input_index() const { return input_; }
  /// Activations and workspaces (the plan's bytes).
  device_tracker& memory() { return tracker_; }
  const device_tracker& memory() const { return tracker_; }
  /// Parameters, gradients, the optimizer's state, labels and losses.
  const device_tracker& arena_memory() const { return fixed_; }
  const context& device() const { return ctx_; }

  /// One step in the mode of the model's policy (see the constructors).
  T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, const gradient_listener& ready = {}) {
    return loss_and_gradient(batch, labels, mode_, ready);
  }
  /// The mode loss_and_gradient(batch, labels) runs in.
  mode policy_mode() const { return mode_; }

  /// Mean softmax cross-entropy of the batch (host memory, width x batch, column-major); fills
  /// gradients() and input_gradient(), telling `ready` as each part of the gradients becomes
  /// final on the model's stream (the head first, then every layer from the top).
  T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, mode m, const gradient_listener& ready = {}) {
    rwd::check_batch(batch, o_.width, o_.batch);
    rwd::check_labels(labels, o_.batch, o_.classes);
    if (m == mode::exact) throw error("rewind: mode::exact runs on the CPU backend (its GPU half is not built yet)");
    if (m == mode::reversible && !o_.lossy)
      rwd::detail::check_rewind_budget<T, Block>(budget_, depth_, bindings_, "use mode::checkpointed, or options.lossy",
                                                    "use mode::checkpointed, or options.lossy");
    const cudaStream_t s = ctx_.stream();
    queue_parameter_check();
    queue_alpha_check();
    REWIND_CUDA(cudaMemsetAsync(grads_.data(), 0, grads_.size() * sizeof(T), s));
    upload(labels_.data(), labels.data(), labels.size(), s);
    states st(*this);
    upload(st.s[input_].data(), batch.data(), batch.size(), s);
    const engine_type eng = engine(training_noise());
    device_buffer<T> tape(tracker_, engine_type::tape_size(m, state_shape(o_), o_.batch, depth_, segment_));
    device_buffer<T> work(tracker_, engine_type::work_per_sample(m, state_shape(o_), o_.classes) * o_.batch);
    lane ln = st.whole(work.data());
    eng.forward(ln, m, tape.data());
    ln.grads = grads_.data() + arena_.head;
    eng.head(ln, labels_.data(), losses_.data());
    if (ready) ready(arena_.head);
    for (std::size_t l = depth_; l-- > 0;) {
      ln.grads = grads_.data() + l * arena_.per_layer;
      eng.backward(l, ln, m, tape.data());
      if (ready) ready(l * arena_.per_layer);
    }
    input_grad_.resize(o_.width * o_.batch);
    std::vector<double> losses(o_.batch);
    download_async(input_grad_.data(), st.b[input_].data(), input_grad_.size(), s);
    download_async(losses.data(), losses_.data(), losses.size(), s);
    check_parameters();  // the step's one synchronisation
    check_alphas();
    double loss = 0;
    for (double v : losses) loss += v;  // in a fixed order, as the CPU does
    if (!std::isfinite(loss)) throw error("rewind: the loss is not finite (check the parameters and the learning rate)");
    return static_cast<T>(loss / static_cast<double>(o_.batch));
  }

  /// The state after the whole stack for an input batch (one width x batch vector per variable).
  std::vector<std::vector<T>> forward(std::span<const T> batch) { return run_forward(batch).copy_out(*this); }

  /// Runs the stack backward from a final state.
  std::vector<std::vector<T>> rewind(const std::vector<std::vector<T>>& final_state) {
    if (final_state.size() != ns) throw error("rewind: rewind() takes one vector per state variable");
    for (const auto& s : final_state) rwd::check_batch(std::span<const T>(s), o_.width, o_.batch);
    queue_parameter_check();
    check_parameters();
    states st(*this);
    for (std::size_t k = 0; k < ns; ++k) upload(st.s[k].data(), final_state[k].data(), final_state[k].size(), ctx_.stream());
    queue_alpha_check();
    device_buffer<T> work(tracker_, engine_type::work_per_sample(mode::reversible, state_shape(o_), o_.classes) * o_.batch);
    lane ln = st.whole(work.data());
    const engine_type eng = engine();
    for (std::size_t l = depth_; l-- > 0;) eng.rewind_layer(l, ln, false);
    check_alphas();
    return st.copy_out(*this);
  }

  /// The whole state (variables one after the other) at the input and after every layer.
  std::vector<std::vector<T>> forward_trace(std::span<const T> batch) {
    std::vector<std::vector<T>> trace;
    run_forward(batch, [&](const states& st) { trace.push_back(st.flat(*this)); });
    return trace;
  }
  /// Rewinds from a whole final state; entry l is the reconstructed input of layer l (entry
  /// depth is the final state itself).
  std::vector<std::vector<T>> rewind_trace(const std::vector<T>& final_state) { return rwd::rewind_trace(*this, final_state); }
  /// Rewinds from a whole final state (variables one after the other), calling visit(l, state)
  /// with the reconstructed input of each layer l from the top.
  template <class Visit>
  void rewind_each(const std::vector<T>& final_state, const Visit& visit) {
    const std::size_t wb = o_.width * o_.batch;
    if (final_state.size() != ns * wb) throw error("rewind: rewind_trace() takes a whole state");
    queue_parameter_check();
    check_parameters();
    states st(*this);
    for (std::size_t k = 0; k < ns; ++k) upload(st.s[k].data(), final_state.data() + k * wb, wb, ctx_.stream());
    queue_alpha_check();
    device_buffer<T> work(tracker_, engine_type::work_per_sample(mode::reversible, state_shape(o_), o_.classes) * o_.batch);
    lane ln = st.whole(work.data());
    const engine_type eng = engine();
    for (std::size_t l = depth_; l-- > 0;) {
      eng.rewind_layer(l, ln, false);
      visit(l, std::span<const T>(st.flat(*this)));
    }
    check_alphas();
  }

  /// Runs stored backprop and mode m (reversible by default) on the same weights and batch,
  /// compares their gradients, and measures the rewind's reconstruction error per layer
  /// (rewind/engine/audit.hpp).
  audit_report audit(std::span<const T> batch, std::span<const int> labels, mode m = mode::reversible) {
    return rwd::audit(*this, batch, labels, m);
  }

  /// The predicted class of every sample of a batch.
  std::vector<int> predict(std::span<const T> batch) {
    states st = run_forward(batch);
    device_buffer<T> z(tracker_, o_.classes * o_.batch);
    engine().logits(st.whole(nullptr), z.data());
    std::vector<T> host(o_.classes * o_.batch);
    download(host.data(), z.data(), host.size(), ctx_.stream());
    std::vector<int> out(o_.batch);
    for (std::size_t j = 0; j < o_.batch; ++j)
      out[j] = static_cast<int>(std::max_element(host.begin() + j * o_.classes, host.begin() + (j + 1) * o_.classes) -
                                (host.begin() + j * o_.classes));
    return out;
  }

  /// The closed-form device memory of one loss_and_gradient in mode m: the state and cotangents,
  /// the tape (rwd::step_engine::tape_size) and one workspace for the whole batch (the CPU plans
  /// one per thread, for its chunks, and gradient slabs).
  memory_plan plan(mode m) const {
    if (m == mode::exact) throw error("rewind: mode::exact runs on the CPU backend");
    return engine_type::whole_batch_plan(m, state_shape(o_), o_.batch, o_.classes, depth_, segment_);
  }

  /// Writes the parameters to `path` atomically, as the CPU model does (a safetensors file where
  /// the name ends in .safetensors, else rewind's parameter file; either backend's loads into
  /// the other).
  void save(const std::string& path) const {
    const std::vector<T> values = parameters();
    arena_.save(path, std::span<const T>(values));
  }
  /// Reads parameters written by save() (either backend) for the same block and shapes; on any
  /// error the model is unchanged and the message names the cause.
  void load(const std::string& path) { set_parameters(arena_.template load<T>(path)); }

  /// One optimizer step on the device (sgd or adam settings). Switching optimizers starts the new
  /// one's state afresh (rwd::optimizer_kind), as on the CPU.
  void apply(const sgd& o) {
    check(o);
    begin_optimizer(kind_of(o), 1);
    for_each(sgd_step<T>::of(o, params_.data(), grads_.data(), first_.data()), arena_.total, ctx_.stream());
    ++steps_;
    ++updates_;
  }
  void apply(const adam& o) {
    check(o);
    begin_optimizer(kind_of(o), 2);
    ++steps_;
    for_each(adam_step<T>::of(o, steps_, params_.data(), grads_.data(), first_.data(), second_.data()), arena_.total, ctx_.stream());
    ++updates_;
  }
  /// The dropout key of the next training step, as the CPU model's: the seed and the number of
  /// parameter updates so far.
  std::uint64_t training_noise() const { return noise_key(o_.seed, updates_); }
  /// Forgets the optimizer's moments and step count.
  void reset_optimizer() {
    first_.reset(), second_.reset();
    steps_ = 0;
    optimizer_ = optimizer_kind::none;
  }

 private:
  // --- state and cotangents (device) -------------------------------------------------------------
  struct states {
    std::array<device_buffer<T>, ns> s, b;
    explicit states(model& m) : width(m.o_.width) {
      for (std::size_t k = 0; k < ns; ++k) {
        s[k] = device_buffer<T>(m.tracker_, m.o_.width * m.o_.batch);
        b[k] = device_buffer<T>(m.tracker_, m.o_.width * m.o_.batch);
        REWIND_CUDA(cudaMemsetAsync(s[k].data(), 0, s[k].size() * sizeof(T), m.ctx_.stream()));
        REWIND_CUDA(cudaMemsetAsync(b[k].data(), 0, b[k].size() * sizeof(T), m.ctx_.stream()));
      }
    }
    std::vector<std::vector<T>> copy_out(const model& m) const {
      std::vector<std::vector<T>> out(ns);
      for (std::size_t k = 0; k < ns; ++k) {
        out[k].resize(s[k].size());
        download(out[k].data(), s[k].data(), s[k].size(), m.ctx_.stream());
      }
      return out;
    }
    std::vector<T> flat(const model& m) const {
      const std::size_t n = s[0].size();
      std::vector<T> out(ns * n);
      for (std::size_t k = 0; k < ns; ++k) download(out.data() + k * n, s[k].data(), n, m.ctx_.stream());
      return out;
    }
    /// The whole batch as one lane (rwd::lane), with the workspace `work`.
    lane whole(T* work) {
      lane ln;
      for (std::size_t k = 0; k < ns; ++k) ln.s[k].p = s[k].data(), ln.b[k].p = b[k].data();
      ln.count = s[0].size() / width;
      ln.work = work;
      return ln;
    }
    std::size_t width = 0;
  };

  /// The algorithm of a step (rewind/engine/step.hpp) over the device arena, on the stream.
  /// `noise`: the step's dropout key (training_noise()), or 0 outside a training step.
  engine_type engine(std::uint64_t noise = 0) {
    return engine_type({state_shape(o_), o_.batch, o_.classes, depth_, segment_, input_, output_, noise}, arena_, params_.data(), scalars_,
                       executor<T>{ctx_.blas(), ctx_.stream(), &bindings_, alpha_bad_.data(), depth_, Block::size});
  }

  std::vector<T> download_all(const device_buffer<T>& b) const {
    std::vector<T> out(b.size());
    download(out.data(), b.data(), b.size(), ctx_.stream());
    return out;
  }
  /// Zeroed moments (one arena for sgd, two for adam) and step 0, unless they are already k's.
  void begin_optimizer(optimizer_kind k, int moments) {
    if (optimizer_ == k) return;
    reset_optimizer();
    const cudaStream_t s = ctx_.stream();
    first_ = device_buffer<T>(fixed_, arena_.total);
    REWIND_CUDA(cudaMemsetAsync(first_.data(), 0, arena_.total * sizeof(T), s));
    if (moments == 2) {
      second_ = device_buffer<T>(fixed_, arena_.total);
      REWIND_CUDA(cudaMemsetAsync(second_.data(), 0, arena_.total * sizeof(T), s));
    }
    optimizer_ = k;
  }

  /// Queues a check of every parameter into flag_ (read at the step's sync, after the loss: the
  /// host never waits for the previous optimizer step just to look at its parameters).
  void queue_parameter_check() {
    const cudaStream_t s = ctx_.stream();
    REWIND_CUDA(cudaMemsetAsync(flag_.data(), 0, sizeof(int), s));
    for_each(nonfinite_op<T>{params_.data(), flag_.data()}, arena_.total, s);
  }
  /// Zeroes the alpha counters before a pass.
  void queue_alpha_check() {
    if constexpr (has_data_alpha)
      REWIND_CUDA(cudaMemsetAsync(alpha_bad_.data(), 0, alpha_bad_.size() * sizeof(unsigned), ctx_.stream()));
  }
  /// Waits for the stream, then throws rewind E002 naming the update and the layer where an alpha
  /// that reads the data was zero, denormal, not finite or out of its range: the lowest such layer of the forward
  /// pass, else the highest of the rewind (where the CPU engine stops).
  void check_alphas() {
    if constexpr (has_data_alpha) {
      std::vector<unsigned> bad(alpha_bad_.size());
      download(bad.data(), alpha_bad_.data(), bad.size(), ctx_.stream());
      std::array<std::string, Block::size> texts, ranges;
      std::size_t k = 0;
      hana::for_each(Block::updates(), [&](auto u) {
        using U = decltype(u);
        ranges[k] = to_string(range_of(typename U::alpha{}, bindings_));
        texts[k++] = U::text();
      });
      const std::size_t per_pass = depth_ * Block::size;
      auto report = [&](std::size_t at) {
        throw error(rwd::e002_elements(texts[at % Block::size], ranges[at % Block::size], (at % per_pass) / Block::size, bad[at],
                                       o_.width * o_.batch));
      };
      for (std::size_t at = 0; at < per_pass; ++at)
        if (bad[at]) report(at);
      for (std::size_t at = 2 * per_pass; at-- > per_pass;)
        if (bad[at]) report(at);
    }
  }
  /// Waits for the stream, then throws when a parameter was not finite (the flag queued by
  /// queue_parameter_check; the gradients of such a step are garbage, the parameters unchanged).
  void check_parameters() {
    int bad = 0;
    download(&bad, flag_.data(), 1, ctx_.stream());
    if (bad) throw error("rewind: a parameter is not finite (the step's gradients are void)");
  }

  /// The whole stack forward from an input batch, nothing kept; `visit(states)`, when given, sees
  /// the input and the state after every layer.
  template <class Visit = std::nullptr_t>
  states run_forward(std::span<const T> batch, const Visit& visit = nullptr) {
    rwd::check_batch(batch, o_.width, o_.batch);
    queue_parameter_check();
    check_parameters();
    states st(*this);
    upload(st.s[input_].data(), batch.data(), batch.size(), ctx_.stream());
    queue_alpha_check();
    device_buffer<T> work(tracker_, engine_type::work_per_sample(mode::reversible, state_shape(o_), o_.classes) * o_.batch);
    lane ln = st.whole(work.data());
    const engine_type eng = engine();
    if constexpr (!std::is_null_pointer_v<Visit>) visit(st);
    for (std::size_t l = 0; l < depth_; ++l) {
      eng.forward_layer(l, ln, nullptr);
      if constexpr (!std::is_null_pointer_v<Visit>) visit(st);
    }
    check_alphas();
    return st;
  }

  context ctx_;
  std::size_t depth_;
  mode mode_ = mode::reversible;
  options o_;
  env bindings_;
  parameter_layout<Block> arena_;
  std::size_t input_ = 0, output_ = 0, segment_ = 1;
  budget_report budget_;
  typename engine_type::scalars_type scalars_{};
  device_tracker fixed_, tracker_;  // fixed_: arenas, labels, losses; tracker_: a step's buffers
  device_buffer<T> params_, grads_, first_, second_;
  device_buffer<int> labels_, flag_;
  device_buffer<unsigned> alpha_bad_;  // per pass (forward, rewind), layer and update: bad alpha elements
  device_buffer<double> losses_;
  std::vector<T> input_grad_;
  long long steps_ = 0;
  std::uint64_t updates_ = 0;  // apply() calls, never reset: the step count of the dropout keys
  optimizer_kind optimizer_ = optimizer_kind::none;
};

}  // namespace rwd::cuda
