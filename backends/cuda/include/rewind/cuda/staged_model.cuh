// rewind cuda: a staged network on the GPU (rewind/engine/staged.hpp), with the CPU staged
// model's API, parameter layout and buffer layout: a stem map on the kept input, stages of a
// block with a squeeze or a kept transition between them, a pooled head. The step's algorithm is
// the engine's staged_step, run on the whole batch as one lane through the CUDA executor
// (executor.cuh): the convolutions as patch kernels and cuBLAS GEMMs, every update, inverse and
// adjoint step one fused kernel.
//
// Memory: activations and workspaces come from the model's tracker over cudaMalloc, sized by
// closed forms (plan(): staged_step::whole_batch_plan): the input batch (the stem's backward
// pass reads it again), the state and cotangents at the widest stage's width, the tape, one
// workspace. loss_and_gradient synchronises once, at its end, to read its loss and the parameter
// check queued at its start; apply() does not synchronise.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <rewind/engine.hpp>
#include <rewind/engine/staged.hpp>
#include <rewind/rewind.hpp>

#include "executor.cuh"
#include "parameters.cuh"
#include "runtime.cuh"

namespace rwd::cuda {

template <class T, class Stem, class Block, class Down = squeeze_boundary>
class staged_model : public parameter_owner<T, staged_layout<Stem, Block, Down>> {
  using owner = parameter_owner<T, staged_layout<Stem, Block, Down>>;
  using owner::ctx_, owner::layout_, owner::fixed_, owner::params_, owner::grads_, owner::queue_parameter_check, owner::check_parameters;

  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "rewind: cuda models are float or double");
  static_assert(rwd::detail::usable_block<Block>(), "rewind: cuda::staged_model takes a block made by rwd::block(...)");
  static_assert(!has_data_dependent_coefficient<Block>(),
                "rewind: cuda::staged_model takes blocks whose alphas do not read the data (cpu::staged_model, or cuda::model for one stack)");
  static constexpr std::size_t ns = Block::state_size;
  using step_type = staged_step<T, Stem, Block, executor<T>, Down>;
  using lane = typename step_type::lane_type;

 public:
  using scalar = T;
  using block_type = Block;
  using layout_type = staged_layout<Stem, Block, Down>;

  /// A network of stem `Stem` on inputs of shape net.input, then net.depths[s] blocks per stage
  /// (a squeeze before each stage after the first), then the pooled head; the options as
  /// cpu::staged_model takes them (grain is the CPU's and is ignored: the batch is one lane).
  staged_model(Stem stem, Block block, const stages& net, const options& o, const env& bindings = {})
    requires std::is_same_v<Down, squeeze_boundary>
      : staged_model(stem, Down{}, block, net, o, bindings) {}
  /// The same with the kept transition `Down` (a map made by rwd::transition) before each stage
  /// after the first.
  staged_model(Stem, Down, Block, const stages& net, const options& o, const env& bindings = {})
      : owner(layout_type(net, o.classes), o.seed), s_(net, o, bindings), bindings_(bindings) {
    scalars_ = step_type::engine_type::scalars(bindings);
    labels_ = device_buffer<int>(fixed_, s_.o.batch);
    losses_ = device_buffer<double>(fixed_, s_.o.batch);
    initialise(o.seed);
  }

  const options& config() const { return s_.o; }
  const layout_type& layout() const { return layout_; }
  /// Blocks over all stages.
  std::size_t depth() const { return std::accumulate(layout_.depths.begin(), layout_.depths.end(), std::size_t{0}); }
  /// Activations and workspaces (the plan's bytes).
  device_tracker& memory() { return tracker_; }
  const device_tracker& memory() const { return tracker_; }
  /// The block's rewind budget in T: each stage's depth is checked against it.
  const budget_report& budget() const { return s_.budget; }
  std::size_t checkpoint_every() const { return s_.segment; }

  /// Starting values from `seed`: the CPU staged model's for the same seed.
  void initialise(std::uint64_t seed) { owner::initialise(seed, s_.o.output_init_scale); }

  /// The predicted class of every sample of a batch (input size x batch, column-major).
  std::vector<int> predict(std::span<const T> batch) {
    rwd::check_batch(batch, s_.o.width, s_.o.batch);
    queue_parameter_check();
    check_parameters();
    device_buffer<T> input = upload_batch(batch);
    states st(*this);
    device_buffer<T> work(tracker_, step_type::work_per_sample(mode::reversible, layout_) * s_.o.batch), z(tracker_, s_.o.classes * s_.o.batch);
    lane ln = st.whole(work.data());
    const step_type net = network_step();
    net.forward(ln, input.data(), mode::reversible, nullptr);
    net.logits(ln, z.data());
    std::vector<T> host(s_.o.classes * s_.o.batch);
    download(host.data(), z.data(), host.size(), ctx_.stream());
    std::vector<int> classes(s_.o.batch);
    for (std::size_t j = 0; j < s_.o.batch; ++j) {
      const T* v = host.data() + j * s_.o.classes;
      classes[j] = static_cast<int>(std::max_element(v, v + s_.o.classes) - v);
    }
    return classes;
  }

  /// Mean softmax cross-entropy of the batch (host memory) in mode m (stored, reversible or
  /// checkpointed); fills gradients(), telling `ready` (when given) as each part becomes final on
  /// the model's stream (the head, each layer from the top, the stem: suffixes of the arena).
  T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, mode m, const gradient_listener& ready = {}) {
    rwd::check_batch(batch, s_.o.width, s_.o.batch);
    rwd::check_labels(labels, s_.o.batch, s_.o.classes);
    s_.check_mode(m, layout_.depths, bindings_);
    const cudaStream_t s = ctx_.stream();
    queue_parameter_check();
    owner::zero_gradients();
    upload(labels_.data(), labels.data(), labels.size(), s);
    device_buffer<T> input = upload_batch(batch);
    states st(*this);
    const step_type net = network_step(this->training_noise());
    device_buffer<T> tape(tracker_, step_type::tape_size(m, layout_, s_.o.batch, s_.segment));
    device_buffer<T> work(tracker_, step_type::work_per_sample(m, layout_) * s_.o.batch);
    lane ln = st.whole(work.data());
    net.forward(ln, input.data(), m, tape.data());
    const std::size_t head = layout_.head_part().offset;
    ln.grads = grads_.data() + head;
    net.head(ln, labels_.data(), losses_.data());
    if (ready) ready(head);
    const auto parts = layout_.parts();
    for (std::size_t p = 0; p < parts.size(); ++p) {
      ln.grads = grads_.data() + parts[p].offset;
      net.backward(p, ln, input.data(), m, tape.data());
      if (ready) ready(parts[p].offset);
    }
    std::vector<double> losses(s_.o.batch);
    download_async(losses.data(), losses_.data(), losses.size(), s);
    check_parameters();  // the step's one synchronisation
    double loss = 0;
    for (double v : losses) loss += v;  // in a fixed order, as the CPU does
    if (!std::isfinite(loss)) throw error("rewind: the loss is not finite (check the parameters and the learning rate)");
    return static_cast<T>(loss / static_cast<double>(s_.o.batch));
  }

  /// The closed-form device memory of one loss_and_gradient in mode m.
  memory_plan plan(mode m) const {
    if (m == mode::exact) throw error("rewind: a staged network has no exact mode");
    return step_type::whole_batch_plan(m, layout_, s_.o.batch, s_.segment);
  }

 private:
  /// The state and cotangents at the widest stage's width, zeroed.
  struct states : device_states<T, ns> {
    explicit states(staged_model& m) : device_states<T, ns>(m.tracker_, m.layout_.width(), m.s_.o.batch, m.ctx_.stream()) {}
  };
  device_buffer<T> upload_batch(std::span<const T> batch) {
    device_buffer<T> input(tracker_, batch.size());
    upload(input.data(), batch.data(), batch.size(), ctx_.stream());
    return input;
  }
  /// The step over the device arena, on the stream. `noise`: the step's dropout key
  /// (training_noise()), or 0 outside a training step.
  step_type network_step(std::uint64_t noise = 0) const {
    return step_type({s_.o.batch, s_.segment, s_.input, s_.output, noise}, layout_, params_.data(), scalars_,
                     executor<T>{ctx_.blas(), ctx_.stream(), &bindings_, nullptr, 0, 0});
  }

  staged_settings<T, Block> s_;
  env bindings_;
  typename step_type::scalars_type scalars_{};
  device_tracker tracker_;  // a step's buffers (the arenas, labels and losses: fixed_)
  device_buffer<int> labels_;
  device_buffer<double> losses_;
};

}  // namespace rwd::cuda
