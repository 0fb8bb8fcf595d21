// rewind cpu: a staged network on the CPU (rewind/engine/staged.hpp): a stem map on the kept
// input, stages of a block stacked on the stages' shapes with a transition between them (a squeeze,
// or a map whose input is kept), a pooled linear head; the gradient in stored, reversible or checkpointed mode through the Eigen executor,
// on a team of threads over chunks of the batch (chunked_step.hpp), the same bit for bit on any
// number of threads.
//
// Memory: every buffer of a step comes from the model's tracker, sized by closed forms (plan()):
// the state and cotangents (at the widest stage's width), the tape (stored: every layer's and each
// kept transition's input; reversible and checkpointed: each boundary's state, and checkpointed
// its segments' states), one workspace per thread
// and the gradient slabs (chunking::slabs()). The input batch is the caller's and is read again by the
// stem's backward pass: nothing is copied of it.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <rewind/engine.hpp>
#include <rewind/engine/staged.hpp>
#include <rewind/rewind.hpp>

#include "chunked_step.hpp"
#include "executor.hpp"
#include "memory.hpp"
#include "optim.hpp"
#include "parameters.hpp"
#include "threads.hpp"

namespace rwd::cpu {

template <class T, class Stem, class Block, class Down = squeeze_boundary>
class staged_model : public parameter_owner<T, staged_layout<Stem, Block, Down>> {
  using owner = parameter_owner<T, staged_layout<Stem, Block, Down>>;
  using owner::layout_, owner::params_, owner::grads_, owner::check_parameters, owner::training_noise, owner::team_;

  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "rewind: cpu models are float or double");
  static_assert(rwd::detail::usable_block<Block>(), "rewind: cpu::staged_model takes a block made by rwd::block(...)");
  static constexpr std::size_t ns = Block::state_size;
  using step_type = staged_step<T, Stem, Block, executor<T>, Down>;
  using lane = typename step_type::lane_type;

 public:
  using scalar = T;
  using block_type = Block;
  using layout_type = staged_layout<Stem, Block, Down>;

  /// A network of stem `Stem` on inputs of shape net.input, then net.depths[s] blocks per stage
  /// (a squeeze before each stage after the first), then the pooled head. From the options: batch,
  /// classes, seed, input and output variables, output_init_scale, checkpoint_every, lossy, grain
  /// (width and shape, when set, must be the input's).
  staged_model(Stem stem, Block block, const stages& net, const options& o, const env& bindings = {})
    requires std::is_same_v<Down, squeeze_boundary>
      : staged_model(stem, Down{}, block, net, o, bindings) {}
  /// The same with the kept transition `Down` (a map made by rwd::transition) before each stage
  /// after the first.
  staged_model(Stem, Down, Block, const stages& net, const options& o, const env& bindings = {})
      : owner(layout_type(net, o.classes), o.seed), s_(net, o, bindings), bindings_(bindings) {
    scalars_ = step_type::engine_type::scalars(bindings);
    initialise(o.seed);
  }

  const options& config() const { return s_.o; }
  const layout_type& layout() const { return layout_; }
  /// Blocks over all stages (what a data-parallel job compares between its replicas, with the
  /// parameter count and the local batch).
  std::size_t depth() const { return std::accumulate(layout_.depths.begin(), layout_.depths.end(), std::size_t{0}); }
  memory_tracker& memory() { return tracker_; }
  const memory_tracker& memory() const { return tracker_; }
  /// The block's rewind budget in T: each stage's depth is checked against it (a stage's rewind
  /// starts from its kept input).
  const budget_report& budget() const { return s_.budget; }
  std::size_t checkpoint_every() const { return s_.segment; }

  /// Starting values from `seed` (staged_layout::initialise).
  void initialise(std::uint64_t seed) { layout_.initialise(std::span<T>(params_), seed, s_.o.output_init_scale); }

  /// The predicted class of every sample of a batch (input size x batch, column-major), its
  /// chunks on the team's threads.
  std::vector<int> predict(std::span<const T> batch) {
    rwd::check_batch(batch, s_.o.width, s_.o.batch);
    check_parameters();
    states st(*this);
    const detail::chunking k = chunks_of(mode::reversible);
    buffer<T> work(tracker_, static_cast<std::size_t>(k.most) * k.per_thread), logits(tracker_, s_.o.classes * s_.o.batch);
    const step_type net = network_step();
    detail::first_error failed(k.chunks());
    const detail::one_gemm_thread alone(k.most == 1);  // see one_gemm_thread
#pragma omp parallel for schedule(dynamic, 1) num_threads(k.most) if (k.most > 1)
    for (std::ptrdiff_t c = 0; c < static_cast<std::ptrdiff_t>(k.chunks()); ++c)
      failed.guard(0, static_cast<std::size_t>(c), [&] {
        const std::size_t first = static_cast<std::size_t>(c) * k.columns;
        lane ln = lane_of(st, first, std::min(k.columns, s_.o.batch - first), work.data() + detail::thread_number() * k.per_thread, nullptr);
        net.forward(ln, batch.data() + first * s_.o.width, mode::reversible, nullptr);
        net.logits(ln, logits.data() + first * s_.o.classes);
      });
    failed.rethrow();
    std::vector<int> classes(s_.o.batch);
    for (std::size_t j = 0; j < s_.o.batch; ++j) {
      const T* z = logits.data() + j * s_.o.classes;
      classes[j] = static_cast<int>(std::max_element(z, z + s_.o.classes) - z);
    }
    return classes;
  }

  /// Mean softmax cross-entropy of the batch in mode m (stored, reversible or checkpointed); fills
  /// gradients(), telling `ready` (when given) as each part becomes final (the head, each layer
  /// from the top, the stem: suffixes of the arena).
  T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, mode m, const gradient_listener& ready = {}) {
    rwd::check_batch(batch, s_.o.width, s_.o.batch);
    rwd::check_labels(labels, s_.o.batch, s_.o.classes);
    check_parameters();
    s_.check_mode(m, layout_.depths, bindings_);
    states st(*this);
    const step_type net = network_step(training_noise());
    buffer<T> tape(tracker_, step_type::tape_size(m, layout_, s_.o.batch, s_.segment));
    const auto parts = layout_.parts();
    const auto lane_at = [&](std::size_t c, T* work, T* slab) {
      const std::size_t first = c * chunk_columns();
      return lane_of(st, first, std::min(chunk_columns(), s_.o.batch - first), work, slab);
    };
    const auto input_of = [&](const lane& ln) { return batch.data() + ln.first * s_.o.width; };
    return static_cast<T>(detail::chunked_step<T>(
        tracker_, team_, chunks_of(m), std::span<T>(grads_), ready, lane_at,
        [&](lane& ln) { net.forward(ln, input_of(ln), m, tape.data()); }, [] {}, layout_.head_part(),
        [&](lane& ln, double* losses) { net.head(ln, labels.data(), losses); }, parts,
        [&](std::size_t p, lane& ln) { net.backward(p, ln, input_of(ln), m, tape.data()); }));
  }

  /// The closed-form memory of one loss_and_gradient in mode m, with the thread count set now:
  /// the state and cotangents; the tape; per thread a workspace; the gradient slabs.
  memory_plan plan(mode m) const {
    const std::size_t bytes = sizeof(T);
    const detail::chunking k = chunks_of(m);
    memory_plan p;
    p.state_bytes = 2 * ns * layout_.width() * s_.o.batch * bytes;
    p.tape_bytes = step_type::tape_size(m, layout_, s_.o.batch, s_.segment) * bytes;
    p.workspace_bytes = (static_cast<std::size_t>(k.most) * k.per_thread + k.slabs() * k.slab) * bytes;
    return p;
  }

 private:
  struct states {
    std::array<buffer<T>, ns> s, b;
    explicit states(staged_model& m) {
      const std::size_t n = m.layout_.width() * m.s_.o.batch;
      for (std::size_t k = 0; k < ns; ++k) {
        s[k] = buffer<T>(m.tracker_, n);
        b[k] = buffer<T>(m.tracker_, n);
        std::fill_n(s[k].data(), n, T(0));
        std::fill_n(b[k].data(), n, T(0));
      }
    }
  };
  lane lane_of(states& st, std::size_t first, std::size_t count, T* work, T* grads) const {
    lane ln;
    for (std::size_t k = 0; k < ns; ++k) {
      ln.s[k].p = st.s[k].data() + first * layout_.width();
      ln.b[k].p = st.b[k].data() + first * layout_.width();
    }
    ln.first = first, ln.count = count, ln.work = work, ln.grads = grads;
    return ln;
  }
  std::size_t chunk_columns() const { return s_.o.grain == 0 ? s_.o.batch : std::min(s_.o.grain, s_.o.batch); }
  detail::chunking chunks_of(mode m) const {
    detail::chunking k{s_.o.batch, chunk_columns(), step_type::work_per_sample(m, layout_) * chunk_columns(), layout_.largest_part(), 1};
    k.most = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(1, threads())), k.chunks()));
    return k;
  }
  step_type network_step(std::uint64_t noise = 0) const {
    return step_type({s_.o.batch, s_.segment, s_.input, s_.output, noise}, layout_, params_.data(), scalars_, executor<T>{&bindings_});
  }

  staged_settings<T, Block> s_;
  env bindings_;
  typename step_type::scalars_type scalars_{};
  memory_tracker tracker_;
};

}  // namespace rwd::cpu
