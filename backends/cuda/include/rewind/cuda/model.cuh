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
#include "parameters.cuh"
#include "runtime.cuh"

namespace rwd::cuda {

using rwd::audit_report;
using rwd::memory_plan;
using rwd::mode;
using rwd::options;

template <class T, class Block>
class model : public parameter_owner<T, parameter_layout<Block>> {
  using owner = parameter_owner<T, parameter_layout<Block>>;
  using owner::ctx_, owner::layout_, owner::fixed_, owner::params_, owner::grads_, owner::queue_parameter_check, owner::check_parameters;
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
      : owner(parameter_layout<Block>(state_shape(with_shape_width(o)), depth, o.classes), o.seed),
        depth_(depth),
        o_(with_shape_width(o)),
        bindings_(bindings) {
    if (o_.width == 0 || o_.batch == 0 || o.classes == 0 || depth == 0)
      throw error("rewind: a model needs width, batch, classes and depth of at least 1");
    input_ = state_index_of<State>(o.input);
    output_ = state_index_of<State>(o.output);
    rwd::detail::check_runtime_coefficients<Block>(bindings);
    budget_ = rwd::budget<T>(Block{}, bindings);
    segment_ = checkpoint_segment(o.checkpoint_every, budget_, depth);
    scalars_ = engine_type::scalars(bindings);
    labels_ = device_buffer<int>(fixed_, o.batch);
    losses_ = device_buffer<double>(fixed_, o.batch);
    if constexpr (has_data_alpha) alpha_bad_ = device_buffer<unsigned>(fixed_, 2 * depth * Block::size);
    initialise(o.seed);
  }

  /// The same weights as the CPU backend's model for the same seed (rwd::parameter_layout).
  void initialise(std::uint64_t seed) { owner::initialise(seed, o_.output_init_scale); }

  /// dloss/dinput of the last loss_and_gradient (width x batch).
  std::vector<T> input_gradient() const { return input_grad_; }
  std::size_t parameters_per_layer() const { return layout_.per_layer; }
  std::size_t depth() const { return depth_; }
  const options& config() const { return o_; }
  const env& bindings() const { return bindings_; }
  const budget_report& budget() const { return budget_; }
  std::size_t checkpoint_every() const { return segment_; }
  std::size_t input_index() const { return input_; }
  /// Activations and workspaces (the plan's bytes).
  device_tracker& memory() { return tracker_; }
  const device_tracker& memory() const { return tracker_; }

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
    owner::zero_gradients();
    upload(labels_.data(), labels.data(), labels.size(), s);
    states st(*this);
    upload(st.s[input_].data(), batch.data(), batch.size(), s);
    const engine_type eng = engine(this->training_noise());
    device_buffer<T> tape(tracker_, engine_type::tape_size(m, state_shape(o_), o_.batch, depth_, segment_));
    device_buffer<T> work(tracker_, engine_type::work_per_sample(m, state_shape(o_), o_.classes) * o_.batch);
    lane ln = st.whole(work.data());
    eng.forward(ln, m, tape.data());
    ln.grads = grads_.data() + layout_.head;
    eng.head(ln, labels_.data(), losses_.data());
    if (ready) ready(layout_.head);
    for (std::size_t l = depth_; l-- > 0;) {
      ln.grads = grads_.data() + l * layout_.per_layer;
      eng.backward(l, ln, m, tape.data());
      if (ready) ready(l * layout_.per_layer);
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

 private:
  // --- state and cotangents (device) -------------------------------------------------------------
  struct states : device_states<T, ns> {
    using device_states<T, ns>::s;
    explicit states(model& m) : device_states<T, ns>(m.tracker_, m.o_.width, m.o_.batch, m.ctx_.stream()) {}
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
  };

  /// The algorithm of a step (rewind/engine/step.hpp) over the device arena, on the stream.
  /// `noise`: the step's dropout key (training_noise()), or 0 outside a training step.
  engine_type engine(std::uint64_t noise = 0) {
    return engine_type({state_shape(o_), o_.batch, o_.classes, depth_, segment_, input_, output_, noise}, layout_, params_.data(), scalars_,
                       executor<T>{ctx_.blas(), ctx_.stream(), &bindings_, alpha_bad_.data(), depth_, Block::size});
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

  std::size_t depth_;
  mode mode_ = mode::reversible;
  options o_;
  env bindings_;
  std::size_t input_ = 0, output_ = 0, segment_ = 1;
  budget_report budget_;
  typename engine_type::scalars_type scalars_{};
  device_tracker tracker_;  // a step's buffers (the arenas, labels and losses: fixed_)
  device_buffer<int> labels_;
  device_buffer<unsigned> alpha_bad_;  // per pass (forward, rewind), layer and update: bad alpha elements
  device_buffer<double> losses_;
  std::vector<T> input_grad_;
};

}  // namespace rwd::cuda
