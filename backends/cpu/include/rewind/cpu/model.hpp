// rewind cpu: the engine. A block stacked to a depth, parameters in one arena (gradients in a
// twin), the loss head (linear width -> classes, softmax cross-entropy), and the gradient in two
// modes:
//   stored      standard backprop: keeps, per layer and update, the target's old value and the
//               map buffers of the forward pass (the tape);
//   reversible  keeps only the endpoint: per layer from the top, per update in reverse, the
//               update is inverted (recomputing its maps, whose buffers then serve the adjoint
//               too) and its derived adjoint is applied.
// Nothing here knows momentum, leapfrog or coupling: every block goes through the updates,
// inverses and adjoints the dsl derives. Per update: the maps' GEMMs (bias and activation fused
// into their output), then one fused elementwise pass lowered from the update's expression type.
//
// Threads (threads.hpp): the batch is split into chunks of options.grain samples; each thread
// takes chunks and runs them through every layer, and the threads meet twice per layer of the
// backward pass: when its chunks are done, and when their gradient slabs are added in chunk order.
//
// Memory: every buffer of a step comes from the model's tracker and is taken before the threads
// start: the state and cotangents, the tape, one workspace per thread (the largest any update or
// the head needs for one chunk) and one gradient slab per chunk. Their sizes are closed forms of
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

#include <rewind/engine/parameter_file.hpp>
#include "exact.hpp"
#include "lower.hpp"
#include "maps.hpp"
#include "memory.hpp"
#include "optim.hpp"
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
class model {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "rewind: cpu models are float or double");
  static_assert(rwd::detail::usable_block<Block>(), "rewind: cpu::model takes a block made by rwd::block(...)");
  using State = std::remove_const_t<decltype(Block::state())>;
  using Params = std::remove_const_t<decltype(Block::params())>;
  using Maps = std::remove_const_t<decltype(Block::maps())>;
  static constexpr std::size_t ns = Block::state_size;
  static constexpr std::size_t n_maps = decltype(hana::length(Maps{}))::value;
  static constexpr std::size_t n_params = decltype(hana::length(Params{}))::value;
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using array = Eigen::Array<T, Eigen::Dynamic, 1>;
  using cmap = Eigen::Map<const matrix>;

 public:
  using scalar = T;
  using block_type = Block;

  model(Block, std::size_t depth, const options& o, const env& bindings = {})
      : depth_(depth), o_(o), bindings_(bindings) {
    if (o.width == 0 || o.batch == 0 || o.classes == 0 || depth == 0)
      throw error("rewind: a model needs width, batch, classes and depth of at least 1");
    input_ = state_index_of<State>(o.input);
    output_ = state_index_of<State>(o.output);
    rwd::detail::check_runtime_coefficients<Block>(bindings);
    const parameter_layout<Block> arena(o.width, depth, o.classes);
    map_offset_ = arena.map_offset;
    per_layer_ = arena.per_layer;
    head_offset_ = arena.head;
    radix_.fill(fixed_point::of(o.exact_fraction_bits));
    for (const auto& [name, bits] : o.exact_fraction_bits_of) radix_[state_index_of<State>(name)] = fixed_point::of(bits);
    budget_ = rwd::budget<T>(Block{}, bindings);
    ledger_slot_ = compute_ledger_slots();  // skips updates whose alpha is data-dependent
    segment_ = checkpoint_segment(o.checkpoint_every, budget_, depth);
    params_.assign(arena.total, T(0));
    grads_.assign(params_.size(), T(0));
    std::size_t pi = 0;
    hana::for_each(Params{}, [&](auto t) { scalars_[pi++] = static_cast<T>(scalar_value(typename decltype(t)::type{}, bindings)); });
    initialise(o.seed);
  }

  std::span<T> parameters() { return params_; }
  std::span<const T> parameters() const { return params_; }
  std::span<T> gradients() { return grads_; }
  std::span<const T> gradients() const { return grads_; }
  /// dloss/dinput of the last loss_and_gradient (width x batch).
  std::span<const T> input_gradient() const { return input_grad_; }
  std::size_t depth() const { return depth_; }
  const options& config() const { return o_; }
  const env& bindings() const { return bindings_; }
  memory_tracker& memory() { return tracker_; }
  const memory_tracker& memory() const { return tracker_; }
  /// Position of the input variable in the block's state (the order of forward()'s result).
  std::size_t input_index() const { return input_; }
  std::size_t parameters_per_layer() const { return per_layer_; }
  /// The block's rewind budget in T, with this model's runtime scalars.
  const budget_report& budget() const { return budget_; }
  /// Layers per segment of mode::checkpointed.
  std::size_t checkpoint_every() const { return segment_; }
  /// Threads the last training step ran on (threads.hpp: fewer than asked on a busy machine).
  int last_team() const { return team_.last(); }

  /// Glorot-uniform weights (each map's last dense layer scaled by output_init_scale) and zero
  /// biases, from std::mt19937_64(seed) in arena order: the same on every machine and backend.
  void initialise(std::uint64_t seed) {
    parameter_layout<Block>(o_.width, depth_, o_.classes).initialise(std::span<T>(params_), seed, o_.output_init_scale);
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
      for (std::size_t l = depth_; l-- > 0;) rewind_layer(l, ln, false);
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
    for (std::size_t l = 0; l < depth_; ++l) {
      forward_layer(l, ln, nullptr);
      trace.push_back(st.flat());
    }
    return trace;
  }

  /// Rewinds from a whole final state; entry l is the reconstructed input of layer l (entry
  /// depth is the final state itself).
  std::vector<std::vector<T>> rewind_trace(const std::vector<T>& final_state) {
    states st(*this);
    if (final_state.size() != ns * o_.width * o_.batch) throw error("rewind: rewind_trace() takes a whole state");
    check_parameters();
    for (std::size_t k = 0; k < ns; ++k)
      std::copy_n(final_state.data() + k * o_.width * o_.batch, o_.width * o_.batch, st.s[k].data());
    whole_batch whole(*this, st);
    lane& ln = whole.ln;
    std::vector<std::vector<T>> trace(depth_ + 1);
    trace[depth_] = final_state;
    for (std::size_t l = depth_; l-- > 0;) {
      rewind_layer(l, ln, false);
      trace[l] = st.flat();
    }
    return trace;
  }

  /// The predicted class of every sample of a batch (the head's largest logit).
  std::vector<int> predict(std::span<const T> batch) {
    const states st = run_forward(batch);
    matrix Z(o_.classes, o_.batch);
    logits(st.s[output_].data(), o_.batch, Z.data());
    std::vector<int> classes(o_.batch);
    for (std::size_t j = 0; j < o_.batch; ++j) Z.col(static_cast<Eigen::Index>(j)).maxCoeff(&classes[j]);
    return classes;
  }

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
    // stored: per layer and update, per chunk, the target's old value and the call buffers;
    // checkpointed: the whole state at layers k, 2k, ... below the top
    const std::size_t wb = o_.width * o_.batch, per_layer_tape = tape_per_sample();
    buffer<T> tape(tracker_, m == mode::stored ? depth_ * per_layer_tape * o_.batch
                             : m == mode::checkpointed ? (depth_ - 1) / segment_ * ns * wb
                                                       : 0);
    const auto checkpoint = [&](std::size_t l, const lane& ln) {  // the state at layer l, this chunk's columns
      return tape.data() + (l / segment_ - 1) * ns * wb + ln.first * o_.width;
    };
    const auto forward_chunk = [&](lane& ln) {
      T* cursor = tape.data() + depth_ * per_layer_tape * ln.first;
      for (std::size_t l = 0; l < depth_; ++l) {
        if (m == mode::checkpointed && l > 0 && l % segment_ == 0) {
          T* at = checkpoint(l, ln);
          for (std::size_t k = 0; k < ns; ++k) std::copy_n(ln.s[k].data(), o_.width * ln.count, at + k * wb);
        }
        forward_layer(l, ln, m == mode::stored ? &cursor : nullptr);
      }
    };
    const auto backward_chunk = [&](std::size_t l, lane& ln) {
      if (m == mode::stored) return backward_layer_stored(l, ln, tape.data() + per_layer_tape * (depth_ * ln.first + (l + 1) * ln.count));
      if (m == mode::checkpointed && l + 1 < depth_ && (l + 1) % segment_ == 0) {  // a segment's top: the stored
        const T* at = checkpoint(l + 1, ln);  // state replaces the rewound one, so errors never accumulate over segments
        for (std::size_t k = 0; k < ns; ++k) std::copy_n(at + k * wb, o_.width * ln.count, ln.s[k].data());
      }
      rewind_layer(l, ln, true);
    };
    const T loss = run_step(st, labels, m, ready, forward_chunk, [] {}, backward_chunk);
    input_grad_.assign(st.b[input_].data(), st.b[input_].data() + wb);
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
  /// g's where g is an expression), and per chunk a gradient slab (a layer's parameters or the
  /// head's, the larger).
  memory_plan plan(mode m) const {
    const std::size_t wb = o_.width * o_.batch, bytes = sizeof(T);
    memory_plan p;
    p.state_bytes = 2 * ns * wb * bytes;
    p.workspace_bytes = (static_cast<std::size_t>(team_size()) * work_per_sample(m) * chunk_columns() + chunks() * slab_size()) * bytes;
    if (m == mode::stored) p.tape_bytes = depth_ * tape_per_sample() * o_.batch * bytes;
    if (m == mode::checkpointed) p.tape_bytes = (depth_ - 1) / segment_ * ns * wb * bytes;
    if (m == mode::exact) {  // the fixed-point state, and a head per element and a plane of 16-bit
      p.state_bytes += ns * wb * sizeof(std::int64_t);  // stack words per word the ledger may hold
      const std::size_t planes = exact_ledger_words(exact_ledger_bits(Block{}, bindings_), depth_);
      p.tape_bytes = scaled_variables() * wb * (sizeof(std::int64_t) + planes * sizeof(std::uint16_t));
    }
    return p;
  }

  /// One optimizer step on the parameters with the current gradients (sgd or adam settings).
  template <class Optimizer>
  void apply(const Optimizer& o) {
    step(o, std::span<T>(params_), std::span<const T>(grads_), optimizer_);
  }
  /// Forgets the optimizer's momentum and step count.
  void reset_optimizer() { optimizer_ = {}; }

  /// Writes the parameters to `path` atomically (header, values, checksum).
  void save(const std::string& path) const { write_parameter_file<T>(path, header(), params_); }
  /// Reads parameters written by save() for the same block and shapes; on any error the model is
  /// unchanged and the message names the cause.
  void load(const std::string& path) {
    auto values = read_parameter_file<T>(path, header());
    for (T v : values)
      if (!std::isfinite(v)) throw error("rewind: " + path + ": holds a non-finite parameter");
    params_ = std::move(values);
  }

  /// Runs stored backprop and mode m (reversible by default) on the same weights and batch, and
  /// measures the rewind's reconstruction error per layer: the audit that shows the budget's
  /// cliff instead of hiding it.
  audit_report audit(std::span<const T> batch, std::span<const int> labels, mode m = mode::reversible) {
    audit_report r;
    r.loss = loss_and_gradient(batch, labels, mode::stored);
    const std::vector<T> stored(grads_.begin(), grads_.end()), stored_input(input_grad_);
    loss_and_gradient(batch, labels, m);
    r.gradients.push_back(agreement<T>("parameters", stored, grads_));
    r.gradients.push_back(agreement<T>("input " + variable_name(input_), stored_input, input_grad_));
    r.cosine = 1, r.max_rel_error = 0;
    for (const auto& g : r.gradients) {  // the worst of them; NaN (not finite) wins
      r.cosine = std::isnan(g.cosine) || std::isnan(r.cosine) ? std::numeric_limits<double>::quiet_NaN() : std::min(r.cosine, g.cosine);
      r.max_rel_error = std::max(r.max_rel_error, g.max_rel_error);
    }
    // reconstruction: keep every layer's input on the way up, compare on the way down
    states st(*this);
    st.load(batch, input_);
    whole_batch whole(*this, st);
    lane& ln = whole.ln;
    std::vector<std::vector<T>> inputs;
    for (std::size_t l = 0; l < depth_; ++l) {
      inputs.push_back(st.flat());
      forward_layer(l, ln, nullptr);
    }
    r.layer_error.assign(depth_, 0);
    for (std::size_t l = depth_; l-- > 0;) {
      rewind_layer(l, ln, false);
      const auto now = st.flat();
      double num = 0, den = 0;
      for (std::size_t i = 0; i < now.size(); ++i) {
        num += std::pow(double(now[i]) - double(inputs[l][i]), 2);
        den += std::pow(double(inputs[l][i]), 2);
      }
      r.layer_error[l] = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    }
    return r;
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
  struct column {
    T* p = nullptr;
    T* data() const { return p; }
  };
  /// Samples [first, first + count) of the batch: their columns of the state and cotangents (each
  /// variable is width x batch, column-major, so a chunk's columns are contiguous), the workspace
  /// of the thread running the chunk, and the chunk's gradient slab (one layer's parameters, laid
  /// out as in the arena, or the head's).
  struct lane {
    std::array<column, ns> s, b;
    std::size_t first = 0, count = 0;
    T* work = nullptr;
    T* grads = nullptr;
  };
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
  std::size_t slab_size() const { return std::max(per_layer_, o_.classes * o_.width + o_.classes); }
  /// Tape per sample of one layer: each update's target and call buffers.
  std::size_t tape_per_sample() const {
    std::size_t n = 0;
    hana::for_each(Block::updates(), [&](auto u) { n += o_.width + update_plan<decltype(u)>::calls_size(o_.width); });
    return n;
  }
  /// A thread's workspace per sample in mode m: the largest of the head's logits and any update's
  /// buffers (see plan()).
  std::size_t work_per_sample(mode m) const {
    std::size_t n = o_.classes;
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      using P = update_plan<U>;
      const std::size_t calls = m == mode::stored ? 0 : P::calls_size(o_.width), g = m == mode::exact && g_needs_buffer<U>() ? o_.width : 0;
      n = std::max(n, calls + P::steps_size(o_.width) + g);
    });
    return n;
  }

  /// Runs fn(lane&) on every chunk of the batch, on the team's threads (nothing to add up).
  template <class F>
  void each_chunk(states& st, const F& fn) {
    const std::size_t cols = chunk_columns(), nc = chunks(), per_thread = work_per_sample(mode::reversible) * cols;
    const int team = team_size();
    buffer<T> work(tracker_, static_cast<std::size_t>(team) * per_thread);
    detail::first_error failed(nc);
#pragma omp parallel for schedule(dynamic, 1) num_threads(team) if (team > 1)
    for (std::ptrdiff_t c = 0; c < static_cast<std::ptrdiff_t>(nc); ++c)
      failed.guard(0, static_cast<std::size_t>(c), [&] {
        lane ln = chunk_lane(st, static_cast<std::size_t>(c), work.data(), per_thread, nullptr);
        fn(ln);
      });
    failed.rethrow();
  }

  /// One training step over the chunks: forward_chunk(lane) through every layer; after_forward()
  /// once; the head; then per layer from the top, backward_chunk(l, lane) and the chunks' slabs
  /// added in chunk order into the gradients, and `ready` told. Returns the mean loss. Every
  /// buffer is taken before the threads start; gradients are written only after the forward pass
  /// succeeded, so a forward pass that throws leaves them as they were.
  template <class Forward, class AfterForward, class Backward>
  T run_step(states& st, std::span<const int> labels, mode m, const gradient_listener& ready, const Forward& forward_chunk,
             const AfterForward& after_forward, const Backward& backward_chunk) {
    const std::size_t cols = chunk_columns(), nc = chunks(), per_thread = work_per_sample(m) * cols, slab = slab_size();
    const int most = team_size(), team = team_.next(most);  // workspaces for the whole team, whichever runs
    buffer<T> work(tracker_, static_cast<std::size_t>(most) * per_thread), slabs(tracker_, nc * slab);
    const detail::one_gemm_thread alone(team < most);
    const auto start = std::chrono::steady_clock::now();
    std::vector<double> losses(nc, 0.0);
    detail::first_error failed(nc);
    double loss = 0;
    detail::team_barrier barrier;
    std::array<std::atomic<std::size_t>, 2> tickets{};  // the next chunk of a sweep, alternating
    // Inside the team: chunks are handed out by a counter and the threads meet at a barrier that
    // sleeps after a short spin (threads.hpp). Every thread goes through every sweep and barrier;
    // after an error the work inside them is skipped (first_error), never the meeting points.
#pragma omp parallel num_threads(team) if (team > 1)
    {
      const auto t = static_cast<std::size_t>(detail::thread_number()), threads = static_cast<std::size_t>(detail::team_threads());
      barrier.join(static_cast<int>(threads));
      std::size_t sweeps = 0;
      const auto sweep = [&](std::size_t phase, const auto& body) {  // each chunk once, as threads come free
        auto& next = tickets[sweeps % 2];
        for (std::size_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < nc;)
          failed.guard(phase, c, [&] {
            lane ln = chunk_lane(st, c, work.data(), per_thread, slabs.data() + c * slab);
            body(ln);
          });
        if (t == 0) tickets[(sweeps + 1) % 2].store(0, std::memory_order_relaxed);  // the previous sweep's: nobody draws from it now
        ++sweeps;
        barrier.arrive_and_wait();
      };
      const auto sum_slabs = [&](bool go, std::size_t offset, std::size_t count) {  // in chunk order, whatever the threads
        const std::size_t share = (count + threads - 1) / threads;
        for (std::size_t i = t * share; go && i < std::min(count, (t + 1) * share); ++i) {
          T sum = slabs[i];
          for (std::size_t c = 1; c < nc; ++c) sum += slabs[c * slab + i];
          grads_[offset + i] = sum;
        }
        barrier.arrive_and_wait();
      };
      const auto tell = [&](std::size_t phase, std::size_t first_final) {  // one thread; the others go on
        if (t == 0 && ready) failed.guard(phase, 0, [&] { ready(first_final); });
      };
      sweep(0, forward_chunk);
      if (t == 0) failed.guard(1, 0, after_forward);  // before the head's sweep ends: it reads no ledger
      sweep(2, [&](lane& ln) {
        std::fill_n(ln.grads, slab, T(0));
        losses[ln.first / cols] = head(ln, labels);
      });
      const double sum = std::accumulate(losses.begin(), losses.end(), 0.0);  // every thread alike
      if (t == 0) {
        loss = sum;
        failed.guard(3, 0, [&] {
          if (!std::isfinite(sum)) throw error("rewind: the loss is not finite (check the parameters and the learning rate)");
        });
      }
      sum_slabs(std::isfinite(sum) && failed.ok(4), head_offset_, o_.classes * o_.width + o_.classes);
      tell(5, head_offset_);
      for (std::size_t l = depth_; l-- > 0;) {
        const std::size_t phase = 6 + 3 * (depth_ - 1 - l);
        sweep(phase, [&](lane& ln) {
          std::fill_n(ln.grads, per_layer_, T(0));
          backward_chunk(l, ln);
        });
        sum_slabs(failed.ok(phase + 1), l * per_layer_, per_layer_);
        tell(phase + 2, l * per_layer_);
      }
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    team_.ran(team);
    team_.judge(team, most, barrier.slept() / std::max(1e-9, wall * team));
    failed.rethrow();
    return static_cast<T>(loss / static_cast<double>(o_.batch));
  }

  template <class U>
  using update_plan = rwd::update_plan<State, Params, U>;
  template <class U>
  using update_frame = rwd::update_frame<T, State, Params, U>;

  template <class M>
  static constexpr std::size_t index_of_map() {
    return rwd::detail::index_in<M>(Maps{});
  }

  void check_parameters() const {
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (!std::isfinite(params_[i])) throw error("rewind: parameter " + std::to_string(i) + " is not finite");
  }

  template <class M>
  const T* map_params(std::size_t layer) const {
    return params_.data() + layer * per_layer_ + map_offset_[index_of_map<M>()];
  }

  /// Evaluates the update's map calls (innermost first) from the current state, for nb samples.
  template <class U>
  void compute_calls(std::size_t layer, update_frame<U>& uf, std::size_t nb) const {
    using Layout = typename update_frame<U>::Layout;
    const auto n = static_cast<Eigen::Index>(o_.width * nb);
    std::size_t c = 0;
    hana::for_each(typename update_plan<U>::Calls{}, [&](auto t) {
      using C = typename decltype(t)::type;
      using M = typename C::map_type;
      if constexpr (state_variable<typename C::argument>) {
        uf.call_in[c] = uf.f.state[Layout::template state_index<typename C::argument>];
      } else {
        Eigen::Map<array>(uf.call_input[c], n) = lower<Layout, typename C::argument, T>(uf.f, n);
        uf.call_in[c] = uf.call_input[c];
      }
      const map_runner<M, T> run{o_.width, nb};
      uf.f.calls[c] = run.forward(map_params<M>(layer), uf.call_in[c], uf.call_stages[c]);
      uf.call_out[c] = const_cast<T*>(uf.f.calls[c]);  // inside call_stages, which we own
      ++c;
    });
  }

  /// Layer l forward on a chunk. With a tape cursor, each update first writes its target's old
  /// value and its call buffers there (and moves the cursor past them).
  void forward_layer(std::size_t l, lane& ln, T** tape) {
    const std::size_t nb = ln.count;
    const auto n = static_cast<Eigen::Index>(o_.width * nb);
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      using P = update_plan<U>;
      using Layout = typename P::Layout;
      update_frame<U> uf;
      uf.bind(ln, scalars_);
      T* target = ln.s[Layout::template state_index<typename U::target>].data();
      T* base = ln.work;
      if (tape) {
        base = *tape;
        std::copy_n(target, n, base);
        base += n;
        *tape = base + P::calls_size(o_.width) * nb;
      }
      uf.place_calls(base, o_.width, nb);
      compute_calls(l, uf, nb);
      assign<U, typename U::rhs>(uf, target, l, n);  // s <- alpha*s + g
    });
  }

  /// Per update from the last: s <- (s - g) / alpha; then, when asked, the update's adjoint,
  /// which reuses the map buffers just recomputed for the inversion.
  void rewind_layer(std::size_t l, lane& ln, bool with_adjoint) {
    const std::size_t nb = ln.count;
    hana::for_each(hana::reverse(Block::updates()), [&](auto u) {
      using U = decltype(u);
      update_frame<U> uf;
      uf.bind(ln, scalars_);
      T* steps = uf.place_calls(ln.work, o_.width, nb);
      compute_calls(l, uf, nb);  // g does not read the target: these are the forward's calls
      invert_update<U>(l, uf, ln);
      if (with_adjoint) {
        uf.place_steps(steps, o_.width, nb);
        apply_adjoint<U>(l, uf, ln);
      }
    });
  }

  template <class U>
  void invert_update(std::size_t l, update_frame<U>& uf, lane& ln) const {
    using Layout = typename update_frame<U>::Layout;
    T* target = ln.s[Layout::template state_index<typename U::target>].data();
    assign<U, typename decltype(invert(U{}))::rhs>(uf, target, l, static_cast<Eigen::Index>(o_.width * ln.count));
  }

  /// target <- Rhs over n elements: update U's right-hand side or its inverse's. Each element reads
  /// only itself, so the target may be one of Rhs's operands. For an alpha that reads the data,
  /// in chunks that stay in the cache, alpha is evaluated per element first and counted where it
  /// is zero, denormal, not finite or outside its range (alpha_bounds); any such element is an
  /// error naming the update and the layer (the state is then void, as the step that throws).
  template <class U, class Rhs>
  void assign(update_frame<U>& uf, T* target, std::size_t layer, Eigen::Index n) const {
    using Layout = typename update_frame<U>::Layout;
    Eigen::Map<array> s(target, n);
    if constexpr (coefficient_kind_of<U>() != coefficient_kind::data_dependent) {
      s = lower<Layout, Rhs, T>(uf.f, n);
    } else {
      const auto alpha = lower<Layout, typename U::alpha, T>(uf.f, n);
      const auto rhs = lower<Layout, Rhs, T>(uf.f, n);
      const alpha_bounds<T> bounds = alpha_bounds_of<T, U>(bindings_);
      constexpr Eigen::Index chunk = 512;
      Eigen::Array<T, chunk, 1> a;
      Eigen::Index bad = 0;
      for (Eigen::Index i = 0; i < n; i += chunk) {
        const Eigen::Index len = std::min(chunk, n - i);
        auto ai = a.head(len);
        ai = alpha.segment(i, len);
        bad += len - (ai.abs() >= std::numeric_limits<T>::min() && ai.abs() <= std::numeric_limits<T>::max() && ai >= bounds.lo &&
                      ai <= bounds.hi)
                         .count();
        s.segment(i, len) = rhs.segment(i, len);
      }
      if (bad > 0) [[unlikely]]
        throw error(rwd::e002_elements(U::text(), to_string(range_of(typename U::alpha{}, bindings_)), layer, static_cast<std::size_t>(bad),
                                       static_cast<std::size_t>(n)));
    }
  }

  /// The update's derived adjoint on a chunk; its parameter gradients accumulate in the chunk's
  /// slab.
  template <class U>
  void apply_adjoint(std::size_t l, update_frame<U>& uf, lane& ln) {
    using Layout = typename update_frame<U>::Layout;
    const std::size_t nb = ln.count;
    const auto n = static_cast<Eigen::Index>(o_.width * nb);
    hana::for_each(adjoint(U{}).steps(), [&](auto step) {
      using S = decltype(step);
      if constexpr (rwd::detail::is_map_step<S>) {
        using C = typename S::call_type;
        using M = typename C::map_type;
        constexpr std::size_t c = Layout::template call_index<C>;
        constexpr std::size_t j = Layout::template vjp_index<map_vjp<C, typename S::cotangent>>;
        Eigen::Map<array>(uf.cot[j], n) = lower<Layout, typename S::cotangent, T>(uf.f, n);
        map_runner<M, T>{o_.width, nb}.backward(map_params<M>(l), ln.grads + map_offset_[index_of_map<M>()], uf.call_in[c],
                                                uf.call_stages[c], uf.cot[j], uf.scratch[j], uf.vjp[j]);
        uf.f.vjps[j] = uf.vjp[j];
      } else {
        T* bar = ln.b[Layout::template state_index<typename S::variable>].data();
        if constexpr (rwd::detail::is_accumulate_step<S>)
          Eigen::Map<array>(bar, n) += lower<Layout, typename S::value, T>(uf.f, n);
        else  // reads only its own element of the old cotangent: safe in place
          Eigen::Map<array>(bar, n) = lower<Layout, typename S::value, T>(uf.f, n);
      }
    });
  }

  /// Layer l backward on a chunk from its tape, whose entries for this layer end at `end`.
  void backward_layer_stored(std::size_t l, lane& ln, T* end) {
    const std::size_t nb = ln.count, n = o_.width * nb;
    hana::for_each(hana::reverse(Block::updates()), [&](auto u) {
      using U = decltype(u);
      using P = update_plan<U>;
      using Layout = typename P::Layout;
      T* entry = end -= (o_.width + P::calls_size(o_.width)) * nb;
      update_frame<U> uf;
      uf.bind(ln, scalars_);
      std::copy_n(entry, n, ln.s[Layout::template state_index<typename U::target>].data());  // restore
      uf.place_calls(entry + n, o_.width, nb);
      uf.relink_calls(o_.width, nb);
      uf.place_steps(ln.work, o_.width, nb);
      apply_adjoint<U>(l, uf, ln);
    });
  }

  // --- exact mode --------------------------------------------------------------------------------
  struct fixed_state {
    std::array<buffer<std::int64_t>, ns> s;
    ledger book;  // slots only for the state variables some update scales (ledger_slot_)
    fixed_state(model& m) : book(m.tracker_, m.scaled_variables() * m.o_.width * m.o_.batch, m.ledger_ratios()) {
      for (auto& b : s) {
        b = buffer<std::int64_t>(m.tracker_, m.o_.width * m.o_.batch);
        std::fill_n(b.data(), b.size(), std::int64_t{0});
      }
    }
  };

  /// The ledger slot of each state variable: its rank among the variables some update scales
  /// (ns for a variable no update scales). Computed once, when the model is built.
  std::array<std::size_t, ns> compute_ledger_slots() const {
    std::array<bool, ns> scaled{};
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      if constexpr (coefficient_kind_of<U>() != coefficient_kind::data_dependent) {
        const rational a = exact_coefficient<U>();
        if (a.num != a.den) scaled[rwd::detail::index_in<typename U::target>(State{})] = true;
      }
    });
    std::array<std::size_t, ns> slot{};
    std::size_t next = 0;
    for (std::size_t k = 0; k < ns; ++k) slot[k] = scaled[k] ? next++ : ns;
    return slot;
  }
  std::size_t scaled_variables() const {
    std::size_t n = 0;
    for (std::size_t s : ledger_slot_) n += s < ns;
    return n;
  }

  /// Every scaling coefficient of the block, exactly: what the ledger's arithmetic is sized for.
  std::vector<rational> ledger_ratios() const {
    std::vector<rational> ratios;
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      if constexpr (coefficient_kind_of<U>() != coefficient_kind::data_dependent) {
        const rational a = exact_coefficient<U>();
        if (a.num < 1 || a.num > ledger::max_base || a.den > ledger::max_base)
          throw error("rewind: exact mode: " + U::text() + ": alpha = " + std::to_string(a.num) + "/" + std::to_string(a.den) +
                      " must be positive with a numerator and denominator of at most 65536");
        if (a.num != a.den) ratios.push_back(a);
      }
    });
    return ratios;
  }

  /// alpha = n/d of update U, exactly: its rational constant, or its runtime value rationalised.
  template <class U>
  rational exact_coefficient() const {
    if constexpr (constant_expression<typename U::alpha>) return U::alpha::value;
    else if constexpr (coefficient_kind_of<U>() == coefficient_kind::runtime)
      return rationalise(scalar_value(typename U::alpha{}, bindings_), ledger::max_base);
    else throw error("rewind: exact mode needs constant or runtime-scalar coefficients; " + U::text() + " computes alpha from the data");
  }

  std::string variable_name(std::size_t k) const {
    std::string name;
    std::size_t j = 0;
    hana::for_each(State{}, [&](auto t) {
      if (j++ == k) name = std::string(decltype(t)::type::name);
    });
    return name;
  }

  /// x in state variable k's fixed point, or the error that names the value and the variable.
  std::int64_t to_fixed(double x, std::size_t k) const {
    std::int64_t out;
    const std::int64_t v = radix_[k].round(x, out);
    if (out) [[unlikely]]
      throw error("rewind: exact mode: a value of " + variable_name(k) + " (" + std::to_string(x) +
                  ") leaves the fixed-point range +-2^" + std::to_string(51 - radix_[k].bits) + " of " +
                  std::to_string(radix_[k].bits) +
                  " fractional bits (lower options.exact_fraction_bits or its entry in exact_fraction_bits_of, or scale the data)");
    return v;
  }
  T from_fixed(std::int64_t v, std::size_t k) const { return radix_[k].template value<T>(v); }

  /// Does the exact update need a buffer for g, or is g already one (a variable, a map call)?
  template <class U>
  static constexpr bool g_needs_buffer() {
    return !state_variable<typename U::g> && !rwd::detail::is_call<typename U::g>;
  }

  /// One update of a chunk in fixed point, forward (s <- alpha*s + round(g)) or rewound, and
  /// then, when asked, its adjoint.
  template <class U>
  void exact_update(std::size_t l, lane& ln, fixed_state& fx, bool forward, bool with_adjoint) {
    using P = update_plan<U>;
    using Layout = typename P::Layout;
    const std::size_t nb = ln.count, count = o_.width * nb, wb = o_.width * o_.batch;
    const auto n = static_cast<Eigen::Index>(count);
    update_frame<U> uf;
    uf.bind(ln, scalars_);
    constexpr bool own_g = g_needs_buffer<U>();
    T* steps = uf.place_calls(ln.work, o_.width, nb);
    compute_calls(l, uf, nb);  // from the shadow of the state; g does not read the target
    const T* g = nullptr;  // g itself where it is already a buffer: a map call's output, or a variable
    if constexpr (own_g) {
      g = steps;
      steps += count;
      Eigen::Map<array>(const_cast<T*>(g), n) = lower<Layout, typename U::g, T>(uf.f, n);
    } else if constexpr (state_variable<typename U::g>) g = uf.f.state[Layout::template state_index<typename U::g>];
    else g = uf.f.calls[Layout::template call_index<typename U::g>];
    const rational a = exact_coefficient<U>();
    const bool scales = !(a.num == 1 && a.den == 1);
    constexpr std::size_t t = Layout::template state_index<typename U::target>;
    std::int64_t* s = fx.s[t].data() + ln.first * o_.width;
    T* shadow = ln.s[t].data();
    const int threads = detail::in_team() ? 1 : Eigen::nbThreads();  // a team's chunks, or one chunk on every thread
    const bool in_range = scales ? scale_add_exact(s, g, shadow, count, radix_[t], exact_ratio(a.num, a.den, fx.book), fx.book,
                                                   ledger_slot_[t] * wb + ln.first * o_.width, forward, threads)
                                 : add_exact(s, g, shadow, count, radix_[t], forward, threads);
    if (!in_range) [[unlikely]] {  // say which value: a map output, or the state it made
      for (std::size_t i = 0; i < count; ++i) to_fixed(static_cast<double>(g[i]), t);
      for (std::size_t i = 0; i < count; ++i) to_fixed(static_cast<double>(s[i]) * radix_[t].unit, t);
      throw error("rewind: exact mode: a value of " + variable_name(t) + " left the fixed-point range");  // not reached
    }
    if (with_adjoint) {
      uf.place_steps(steps, o_.width, nb);
      apply_adjoint<U>(l, uf, ln);
    }
  }

  T loss_and_gradient_exact(std::span<const T> batch, std::span<const int> labels, const gradient_listener& ready) {
    const std::size_t wb = o_.width * o_.batch;
    states st(*this);
    fixed_state fx(*this);
    for (std::size_t i = 0; i < wb; ++i) {
      fx.s[input_][i] = to_fixed(static_cast<double>(batch[i]), input_);
      st.s[input_][i] = from_fixed(fx.s[input_][i], input_);
    }
    const std::vector<std::int64_t> start(fx.s[input_].data(), fx.s[input_].data() + wb);
    const auto forward_chunk = [&](lane& ln) {
      for (std::size_t l = 0; l < depth_; ++l)
        hana::for_each(Block::updates(), [&](auto u) { exact_update<decltype(u)>(l, ln, fx, true, false); });
    };
    const auto measure = [&] {
      exact_.ledger_planes = fx.book.planes();
      exact_.ledger_bytes_peak = fx.book.bytes();
      exact_.ledger_bits_per_element = fx.book.bits_in_use() / static_cast<double>(std::max<std::size_t>(1, scaled_variables()) * wb);
    };
    const auto backward_chunk = [&](std::size_t l, lane& ln) {
      hana::for_each(hana::reverse(Block::updates()), [&](auto u) { exact_update<decltype(u)>(l, ln, fx, false, true); });
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

  parameter_file_header header() const {
    parameter_file_header h;
    h.width = o_.width;
    h.classes = o_.classes;
    h.depth = depth_;
    h.count = params_.size();
    std::string text;
    hana::for_each(Block::updates(), [&](auto u) { text += u.text() + ";"; });
    hana::for_each(Maps{}, [&](auto t) { text += typename decltype(t)::type{}.describe() + ";"; });
    h.block_fingerprint = fnv1a(text.data(), text.size());
    return h;
  }

  /// The whole stack forward from an input batch, nothing kept.
  states run_forward(std::span<const T> batch) {
    rwd::check_batch(batch, o_.width, o_.batch);
    check_parameters();
    states st(*this);
    st.load(batch, input_);
    each_chunk(st, [&](lane& ln) {
      for (std::size_t l = 0; l < depth_; ++l) forward_layer(l, ln, nullptr);
    });
    return st;
  }

  /// z = Wh * out + bh for nb samples of the output variable (width x nb), classes x nb, into z.
  void logits(const T* out, std::size_t nb, T* z) const {
    const std::size_t C = o_.classes, W = o_.width;
    cmap Wh(&params_[head_offset_], C, W), X(out, W, nb);
    Eigen::Map<const vector> bh(&params_[head_offset_ + C * W], C);
    Eigen::Map<matrix> Z(z, C, nb);
    Z.noalias() = Wh * X;
    Z.colwise() += bh;
  }

  /// Linear head and softmax cross-entropy of a chunk: seeds its output variable's cotangent,
  /// accumulates the head's gradient in its slab, returns the chunk's summed loss.
  double head(lane& ln, std::span<const int> labels) {
    const std::size_t C = o_.classes, B = o_.batch, W = o_.width, nb = ln.count;
    cmap Wh(&params_[head_offset_], C, W), out(ln.s[output_].data(), W, nb);
    logits(ln.s[output_].data(), nb, ln.work);
    Eigen::Map<matrix> Z(ln.work, C, nb);
    double loss = 0;
    for (std::size_t j = 0; j < nb; ++j) {  // softmax, then dloss/dz = (p - onehot) / B
      auto z = Z.col(j);
      const int label = labels[ln.first + j];
      const T top = z.maxCoeff();
      z = (z.array() - top).exp();
      z /= z.sum();
      loss -= std::log(std::max(static_cast<double>(z(label)), 1e-300));
      z(label) -= T(1);
      z /= static_cast<T>(B);
    }
    Eigen::Map<matrix> gW(ln.grads, C, W);
    Eigen::Map<vector> gb(ln.grads + C * W, C);
    gW.noalias() += Z * out.transpose();
    gb += Z.rowwise().sum();
    Eigen::Map<matrix>(ln.b[output_].data(), W, nb).noalias() = Wh.transpose() * Z;
    return loss;
  }

  std::size_t depth_;
  options o_;
  env bindings_;
  std::size_t input_ = 0, output_ = 0;
  std::array<std::size_t, n_maps == 0 ? 1 : n_maps> map_offset_{};
  std::size_t per_layer_ = 0, head_offset_ = 0, segment_ = 1;
  std::array<fixed_point, ns> radix_{};  // mode::exact: each state variable's fixed point
  budget_report budget_;
  std::array<std::size_t, ns> ledger_slot_{};
  std::vector<T> params_, grads_, input_grad_;
  std::array<T, n_params == 0 ? 1 : n_params> scalars_{};
  memory_tracker tracker_;
  optimizer_state<T> optimizer_;
  exact_report exact_;
  detail::team_choice team_;
};

}  // namespace rwd::cpu

