// rewind cpu: a model on the CPU. A block stacked to a depth, parameters in one arena (gradients in
// a twin), the loss head (linear width -> classes, softmax cross-entropy), and the gradient in
// four modes: stored, reversible and checkpointed run the engine's algorithm
// (rewind/engine/step.hpp) through the Eigen executor (executor.hpp: one fused vectorised pass
// per update, inverse and adjoint step; the maps on Eigen's GEMM); exact runs the same algorithm
// in fixed point with an information ledger (ledger.hpp), the part that is the CPU's own.
//
// Threads (threads.hpp): the batch is split into chunks of options.grain samples; each thread
// takes chunks and runs them through every layer (a chunk is one of the engine's lanes), and the
// threads meet once per layer of the backward pass, when its chunks are done; their gradient slabs
// are then added in chunk order while the next layer's chunks run (chunked_step.hpp).
//
// Memory: every buffer of a step comes from the model's tracker and is taken before the threads
// start: the state and cotangents, the tape, one workspace per thread (the largest any update or
// the head needs for one chunk) and gradient slabs (chunking::slabs()). Their sizes are closed forms of
// the block's types, the width, the batch, the grain and the thread count (plan()), so the
// measured peak of a step and the plan agree exactly.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <rewind/engine.hpp>
#include <rewind/pointwise.hpp>
#include <rewind/rewind.hpp>

#include <rewind/engine/audit.hpp>
#include <rewind/engine/parameter_file.hpp>
#include "exact_step.hpp"
#include "executor.hpp"
#include "lower.hpp"
#include "maps.hpp"
#include "memory.hpp"
#include "optim.hpp"
#include "parameters.hpp"
#include "chunked_step.hpp"
#include "threads.hpp"

namespace rwd::cpu {

// mode, options, memory_plan, audit_report, exact_report and gradient_listener are shared with
// the CUDA backend (rewind/engine.hpp); they are rwd::cpu:: names too.
using rwd::audit_report;
using rwd::exact_report;
using rwd::gradient_listener;
using rwd::memory_plan;
using rwd::mode;
using rwd::options;
using rwd::to_string;

template <class T, class Block>
class model : public parameter_owner<T, parameter_layout<Block>> {
  using owner = parameter_owner<T, parameter_layout<Block>>;
  using owner::layout_, owner::params_, owner::grads_, owner::check_parameters, owner::training_noise, owner::team_;

  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "rewind: cpu models are float or double");
  static_assert(rwd::detail::usable_block<Block>(), "rewind: cpu::model takes a block made by rwd::block(...)");
  using State = std::remove_const_t<decltype(Block::state())>;
  static constexpr std::size_t ns = Block::state_size;
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using engine_type = step_engine<T, Block, executor<T>>;
  using lane = typename engine_type::lane_type;
  using exact_type = exact_step<T, Block>;

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
    exact_rules_.emplace(o, bindings);  // after the check: it rationalises the runtime coefficients
    budget_ = rwd::budget<T>(Block{}, bindings);
    segment_ = checkpoint_segment(o.checkpoint_every, budget_, depth);
    scalars_ = engine_type::scalars(bindings);
    initialise(o.seed);
  }

  /// dloss/dinput of the last loss_and_gradient (width x batch).
  std::span<const T> input_gradient() const { return input_grad_; }
  std::size_t depth() const { return depth_; }
  const options& config() const { return o_; }
  const env& bindings() const { return bindings_; }
  memory_tracker& memory() { return tracker_; }
  const memory_tracker& memory() const { return tracker_; }
  /// Position of the input variable in the block's state (the order of forward()'s result).
  std::size_t input_index() const { return input_; }
  std::size_t parameters_per_layer() const { return layout_.per_layer; }
  /// The block's rewind budget in T, with this model's runtime scalars.
  const budget_report& budget() const { return budget_; }
  /// Layers per segment of mode::checkpointed.
  std::size_t checkpoint_every() const { return segment_; }

  /// Glorot-uniform weights (each map's last dense layer scaled by output_init_scale) and zero
  /// biases, from std::mt19937_64(seed) in arena order: the same on every machine and backend.
  void initialise(std::uint64_t seed) {
    layout_.initialise(std::span<T>(params_), seed, o_.output_init_scale);
  }

  /// The state after the whole stack for an input batch (width x batch, column-major).
  std::vector<std::vector<T>> forward(std::span<const T> batch) { return run_forward(batch).copy_out(); }

  /// Runs the stack backward from a final state (one width x batch vector per state variable).
  std::vector<std::vector<T>> rewind(const std::vector<std::vector<T>>& final_state) {
    if (final_state.size() != ns) throw error("rewind: rewind() takes one vector per state variable");
    check_parameters();
    states st(*this);
    for (std::size_t k = 0; k < ns; ++k) {
      rwd::check_batch(std::span<const T>(final_state[k]), o_.width, o_.batch);
      std::copy(final_state[k].begin(), final_state[k].end(), st.s[k].data());
    }
    each_chunk(st, [&](lane& ln) {
      const engine_type eng = engine();
      for (std::size_t l = depth_; l-- > 0;) eng.rewind_layer(l, ln, false);
    });
    return st.copy_out();
  }

  /// The whole state (variables one after the other) at the input and after every layer.
  std::vector<std::vector<T>> forward_trace(std::span<const T> batch) {
    rwd::check_batch(batch, o_.width, o_.batch);
    check_parameters();
    states st(*this);
    st.load(batch, input_);
    whole_batch whole(*this, st);
    lane& ln = whole.ln;
    std::vector<std::vector<T>> trace{st.flat()};
    const engine_type eng = engine();
    for (std::size_t l = 0; l < depth_; ++l) {
      eng.forward_layer(l, ln, nullptr);
      trace.push_back(st.flat());
    }
    return trace;
  }

  /// Rewinds from a whole final state; entry l is the reconstructed input of layer l (entry
  /// depth is the final state itself).
  std::vector<std::vector<T>> rewind_trace(const std::vector<T>& final_state) { return rwd::rewind_trace(*this, final_state); }
  /// Rewinds from a whole final state (variables one after the other), calling visit(l, state)
  /// with the reconstructed input of each layer l from the top.
  template <class Visit>
  void rewind_each(const std::vector<T>& final_state, const Visit& visit) {
    states st(*this);
    if (final_state.size() != ns * o_.width * o_.batch) throw error("rewind: rewind_trace() takes a whole state");
    check_parameters();
    for (std::size_t k = 0; k < ns; ++k)
      std::copy_n(final_state.data() + k * o_.width * o_.batch, o_.width * o_.batch, st.s[k].data());
    whole_batch whole(*this, st);
    const engine_type eng = engine();
    for (std::size_t l = depth_; l-- > 0;) {
      eng.rewind_layer(l, whole.ln, false);
      visit(l, std::span<const T>(st.flat()));
    }
  }

  /// The predicted class of every sample of a batch (the head's largest logit).
  std::vector<int> predict(std::span<const T> batch) {
    states st = run_forward(batch);
    matrix Z(o_.classes, o_.batch);
    engine().logits(lane_of(st, 0, o_.batch, nullptr, nullptr), Z.data());
    std::vector<int> classes(o_.batch);
    for (std::size_t j = 0; j < o_.batch; ++j) Z.col(static_cast<Eigen::Index>(j)).maxCoeff(&classes[j]);
    return classes;
  }

  /// One step in the mode of the model's policy (see the constructors).
  T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, const gradient_listener& ready = {}) {
    return loss_and_gradient(batch, labels, mode_, ready);
  }
  /// The mode loss_and_gradient(batch, labels) runs in.
  mode policy_mode() const { return mode_; }

  /// Mean softmax cross-entropy of the batch; fills gradients() and input_gradient(), telling
  /// `ready` (when given) as each part of the gradients becomes final.
  T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, mode m, const gradient_listener& ready = {}) {
    rwd::check_batch(batch, o_.width, o_.batch);
    rwd::check_labels(labels, o_.batch, o_.classes);
    check_parameters();
    if (m == mode::exact) return loss_and_gradient_exact(batch, labels, ready);
    if (m == mode::reversible && !o_.lossy)
      rwd::detail::check_rewind_budget<T, Block>(budget_, depth_, bindings_, "use mode::checkpointed or mode::exact, or options.lossy",
                                                    "use mode::checkpointed, or options.lossy");
    states st(*this);
    st.load(batch, input_);
    const engine_type eng = engine(training_noise());
    buffer<T> tape(tracker_, engine_type::tape_size(m, state_shape(o_), o_.batch, depth_, segment_));
    const auto forward_chunk = [&](lane& ln) { eng.forward(ln, m, tape.data()); };
    const auto backward_chunk = [&](std::size_t l, lane& ln) { eng.backward(l, ln, m, tape.data()); };
    const T loss = run_step(st, labels, m, ready, forward_chunk, [] {}, backward_chunk);
    input_grad_.assign(st.b[input_].data(), st.b[input_].data() + o_.width * o_.batch);
    return loss;
  }

  /// What the last exact-mode step measured.
  const exact_report& last_exact() const { return exact_; }

  /// The closed-form memory of one loss_and_gradient in mode m (see the top of this file), with
  /// the thread count set now. State: the state and cotangents (exact: and the fixed-point state).
  /// Tape: stored, per layer and update, the target's old value and the calls' buffers;
  /// checkpointed, one state per segment boundary below the top; exact, a bound on the ledger.
  /// Workspace: per thread, one chunk's worth of the largest of the head's logits and any
  /// update's buffers (stored: its map steps'; the others: its calls' and map steps'; exact: and
  /// g's where g is an expression), and the gradient slabs (chunking::slabs(): two sets of one
  /// per chunk but the first; each a layer's parameters or the head's, the larger).
  memory_plan plan(mode m) const {
    const std::size_t wb = o_.width * o_.batch, bytes = sizeof(T);
    memory_plan p;
    p.state_bytes = 2 * ns * wb * bytes;
    const detail::chunking k = chunking_of(m);
    p.workspace_bytes = (static_cast<std::size_t>(k.most) * k.per_thread + k.slabs() * k.slab) * bytes;
    p.tape_bytes = engine_type::tape_size(m, state_shape(o_), o_.batch, depth_, segment_) * bytes;
    if (m == mode::exact) {  // the fixed-point state, and a head per element and a plane of 16-bit
      p.state_bytes += ns * wb * sizeof(std::int64_t);  // stack words per word the ledger may hold
      const std::size_t planes = exact_ledger_words(exact_ledger_bits(Block{}, bindings_), depth_);
      p.tape_bytes = exact_rules_->scaled_variables() * wb * (sizeof(std::int64_t) + planes * sizeof(std::uint16_t));
    }
    return p;
  }

  /// Runs stored backprop and mode m (reversible by default) on the same weights and batch,
  /// compares their gradients, and measures the rewind's reconstruction error per layer
  /// (rewind/engine/audit.hpp).
  audit_report audit(std::span<const T> batch, std::span<const int> labels, mode m = mode::reversible) {
    return rwd::audit(*this, batch, labels, m);
  }

 private:
  // --- state and cotangents ----------------------------------------------------------------------
  struct states {
    std::array<buffer<T>, ns> s, b;
    explicit states(model& m) {
      for (std::size_t k = 0; k < ns; ++k) {
        s[k] = buffer<T>(m.tracker_, m.o_.width * m.o_.batch);
        b[k] = buffer<T>(m.tracker_, m.o_.width * m.o_.batch);
        std::fill_n(s[k].data(), s[k].size(), T(0));
        std::fill_n(b[k].data(), b[k].size(), T(0));
      }
    }
    void load(std::span<const T> batch, std::size_t input) { std::copy(batch.begin(), batch.end(), s[input].data()); }
    std::vector<std::vector<T>> copy_out() const {
      std::vector<std::vector<T>> out(ns);
      for (std::size_t k = 0; k < ns; ++k) out[k].assign(s[k].data(), s[k].data() + s[k].size());
      return out;
    }
    std::vector<T> flat() const {
      std::vector<T> out;
      for (std::size_t k = 0; k < ns; ++k) out.insert(out.end(), s[k].data(), s[k].data() + s[k].size());
      return out;
    }
  };

  // --- chunks of the batch -----------------------------------------------------------------------
  /// Samples [first, first + count) of the batch (rwd::lane), with the workspace of the thread
  /// running the chunk and the chunk's gradient slab (one layer's parameters, laid out as in the
  /// arena, or the head's).
  lane lane_of(states& st, std::size_t first, std::size_t count, T* work, T* grads) const {
    lane ln;
    for (std::size_t k = 0; k < ns; ++k) {
      ln.s[k].p = st.s[k].data() + first * o_.width;
      ln.b[k].p = st.b[k].data() + first * o_.width;
    }
    ln.first = first, ln.count = count, ln.work = work, ln.grads = grads;
    return ln;
  }

  /// The whole batch as one lane, with a workspace of its own: for the traces and the audit,
  /// which look at the state after every layer.
  struct whole_batch {
    buffer<T> work;
    lane ln;
    whole_batch(model& m, states& st)
        : work(m.tracker_, m.work_per_sample(mode::reversible) * m.o_.batch), ln(m.lane_of(st, 0, m.o_.batch, work.data(), nullptr)) {}
  };
  /// Chunk c of the batch, run by the calling thread (its workspace in `work`, per_thread apart).
  lane chunk_lane(states& st, std::size_t c, T* work, std::size_t per_thread, T* grads) const {
    const std::size_t first = c * chunk_columns();
    return lane_of(st, first, std::min(chunk_columns(), o_.batch - first), work + detail::thread_number() * per_thread, grads);
  }

  std::size_t chunk_columns() const { return o_.grain == 0 ? o_.batch : std::min(o_.grain, o_.batch); }
  std::size_t chunks() const { return (o_.batch + chunk_columns() - 1) / chunk_columns(); }
  int team_size() const { return static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(1, threads())), chunks())); }
  std::size_t slab_size() const { return std::max(layout_.per_layer, o_.classes * o_.width + o_.classes); }
  detail::chunking chunking_of(mode m) const {
    return {o_.batch, chunk_columns(), work_per_sample(m) * chunk_columns(), slab_size(), team_size()};
  }
  std::size_t work_per_sample(mode m) const { return engine_type::work_per_sample(m, state_shape(o_), o_.classes); }

  /// Runs fn(lane&) on every chunk of the batch, on the team's threads (nothing to add up).
  template <class F>
  void each_chunk(states& st, const F& fn) {
    const std::size_t cols = chunk_columns(), nc = chunks(), per_thread = work_per_sample(mode::reversible) * cols;
    const int team = team_size();
    buffer<T> work(tracker_, static_cast<std::size_t>(team) * per_thread);
    detail::first_error failed(nc);
    const detail::one_gemm_thread alone(team == 1);  // see one_gemm_thread
#pragma omp parallel for schedule(dynamic, 1) num_threads(team) if (team > 1)
    for (std::ptrdiff_t c = 0; c < static_cast<std::ptrdiff_t>(nc); ++c)
      failed.guard(0, static_cast<std::size_t>(c), [&] {
        lane ln = chunk_lane(st, static_cast<std::size_t>(c), work.data(), per_thread, nullptr);
        fn(ln);
      });
    failed.rethrow();
  }

  /// One training step over the chunks (chunked_step.hpp): forward_chunk(lane) through every
  /// layer; after_forward() once; the head; then per layer from the top, backward_chunk(l, lane).
  /// Returns the mean loss.
  template <class Forward, class AfterForward, class Backward>
  T run_step(states& st, std::span<const int> labels, mode m, const gradient_listener& ready, const Forward& forward_chunk,
             const AfterForward& after_forward, const Backward& backward_chunk) {
    const detail::chunking k = chunking_of(m);
    std::vector<gradient_part> layers(depth_);
    for (std::size_t p = 0; p < depth_; ++p) layers[p] = {(depth_ - 1 - p) * layout_.per_layer, layout_.per_layer};
    const engine_type eng = engine();
    const auto lane_at = [&](std::size_t c, T* work, T* slab) {
      const std::size_t first = c * chunk_columns();
      return lane_of(st, first, std::min(chunk_columns(), o_.batch - first), work, slab);
    };
    return static_cast<T>(detail::chunked_step<T>(
        tracker_, team_, k, std::span<T>(grads_), ready, lane_at, forward_chunk, after_forward,
        {layout_.head, o_.classes * o_.width + o_.classes}, [&](lane& ln, double* losses) { eng.head(ln, labels.data(), losses); }, layers,
        [&](std::size_t p, lane& ln) { backward_chunk(depth_ - 1 - p, ln); }));
  }

  /// The algorithm of a step (rewind/engine/step.hpp) over this model's parameters, on the CPU.
  /// `noise`: the step's dropout key (training_noise()), or 0 outside a training step.
  engine_type engine(std::uint64_t noise = 0) const {
    return engine_type({state_shape(o_), o_.batch, o_.classes, depth_, segment_, input_, output_, noise}, layout_, params_.data(), scalars_,
                       executor<T>{&bindings_});
  }

  // --- exact mode (exact_step.hpp) ----------------------------------------------------------------
  T loss_and_gradient_exact(std::span<const T> batch, std::span<const int> labels, const gradient_listener& ready) {
    const std::size_t wb = o_.width * o_.batch;
    states st(*this);
    typename exact_type::state fx(tracker_, *exact_rules_, wb);
    for (std::size_t i = 0; i < wb; ++i) {
      fx.s[input_][i] = exact_rules_->to_fixed(static_cast<double>(batch[i]), input_);
      st.s[input_][i] = exact_rules_->from_fixed(fx.s[input_][i], input_);
    }
    const engine_type eng = engine(training_noise());
    const std::vector<std::int64_t> start(fx.s[input_].data(), fx.s[input_].data() + wb);
    const auto forward_chunk = [&](lane& ln) {
      for (std::size_t l = 0; l < depth_; ++l) exact_rules_->forward_layer(eng, l, ln, fx);
    };
    const auto measure = [&] {
      exact_.ledger_planes = fx.book.planes();
      exact_.ledger_bytes_peak = fx.book.bytes();
      exact_.ledger_bits_per_element = fx.book.bits_in_use() / static_cast<double>(std::max<std::size_t>(1, exact_rules_->scaled_variables()) * wb);
    };
    const auto backward_chunk = [&](std::size_t l, lane& ln) {
      std::size_t ui = Block::size;
      hana::for_each(hana::reverse(Block::updates()),
                     [&](auto u) { exact_rules_->template update<decltype(u)>(eng, {l, --ui, true}, ln, fx, false, true); });
    };
    const T loss = run_step(st, labels, mode::exact, ready, forward_chunk, measure, backward_chunk);
    bool same = fx.book.empty() && std::equal(start.begin(), start.end(), fx.s[input_].data());
    for (std::size_t k = 0; k < ns; ++k)
      if (k != input_) same = same && std::all_of(fx.s[k].data(), fx.s[k].data() + wb, [](std::int64_t v) { return v == 0; });
    exact_.bit_exact = same;
    if (!same) throw error("rewind: exact mode: the rewind did not return the input bit for bit (a map is not deterministic?)");
    input_grad_.assign(st.b[input_].data(), st.b[input_].data() + wb);
    return loss;
  }

  /// The whole stack forward from an input batch, nothing kept.
  states run_forward(std::span<const T> batch) {
    rwd::check_batch(batch, o_.width, o_.batch);
    check_parameters();
    states st(*this);
    st.load(batch, input_);
    each_chunk(st, [&](lane& ln) {
      const engine_type eng = engine();
      for (std::size_t l = 0; l < depth_; ++l) eng.forward_layer(l, ln, nullptr);
    });
    return st;
  }

  std::size_t depth_;
  mode mode_ = mode::reversible;
  options o_;
  env bindings_;
  std::size_t input_ = 0, output_ = 0;
  std::size_t segment_ = 1;
  budget_report budget_;
  std::optional<exact_type> exact_rules_;  // set by the constructor
  std::vector<T> input_grad_;
  typename engine_type::scalars_type scalars_{};
  memory_tracker tracker_;
  exact_report exact_;
};

}  // namespace rwd::cpu

