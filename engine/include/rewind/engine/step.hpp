// rewind engine: the training algorithm of a block stacked to a depth, written once for every
// backend. Per update of a layer: the maps' forward passes, then the update (s <- alpha*s + g),
// its inverse ((s - g) / alpha, the dsl's expression) or its derived adjoint, each one fused
// elementwise pass instantiated from the expression types; per mode, what a pass keeps:
//   stored        per layer and update, the target's old value and the calls' buffers (the tape)
//   reversible    nothing: per layer from the top, per update in reverse, the update is inverted
//                 (its maps recomputed, their buffers then serving the adjoint too)
//   checkpointed  the whole state every `segment` layers below the top; the rewind restarts from
//                 each stored state, so errors never accumulate over segments
// and the loss head (linear width -> classes, softmax cross-entropy). Nothing here knows
// momentum, leapfrog or coupling, Eigen or CUDA.
//
// The algorithm runs on a lane: columns [first, first + count) of the batch (the state and
// cotangents are width x batch per variable, column-major, so a lane's columns are contiguous),
// a workspace and a gradient buffer. How lanes are scheduled is the backend's: the CPU runs
// chunks of the batch on a team of threads, the GPU the whole batch as one lane on a stream.
//
// The step executor contract (what a backend provides, buffers in its memory):
//   maps()                                        the map primitives (rwd::map_executor)
//   assign<Layout, E>(frame, out, n)              out = E over n elements
//   accumulate<Layout, E>(frame, out, n)          out += E
//   update<Layout, U, Rhs>(frame, target, n, at)  target = Rhs (update U's right-hand side, or
//                                                 its inverse's; Rhs may read the target); where
//                                                 U's alpha reads the data, each element's alpha
//                                                 is checked against alpha_bounds_of<T, U> and a
//                                                 bad one reported for the update at `at` (the
//                                                 CPU throws rewind E002, the GPU counts it for
//                                                 the step's synchronisation)
//   copy(dst, src, n)                             dst = src
//   softmax_cross_entropy(z, labels, loss, classes, count, batch)
//                                                 per column of z: loss = -log softmax(z)[label],
//                                                 z <- (softmax(z) - onehot(label)) / batch
// Implementations: rwd::cpu::executor (Eigen), rwd::cuda::executor (cuBLAS and kernels), and the
// tests' reference executor (plain loops over the dsl's element evaluator, in double).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <rewind/engine.hpp>
#include <rewind/layout.hpp>
#include <rewind/rewind.hpp>

#include "map_runner.hpp"

namespace rwd {

/// The mode a network's policy (rwd::policy, network.hpp) asks of a model's steps: strict and
/// lossy rewind (the network checked strict's depth against the budget; lossy sets
/// options.lossy, policy_options), checkpointed and exact keep their names.
template <class Policy>
constexpr mode mode_of() {
  if constexpr (std::is_same_v<Policy, policy::checkpointed>) return mode::checkpointed;
  else if constexpr (std::is_same_v<Policy, policy::exact>) return mode::exact;
  else return mode::reversible;
}
/// A model's options under a network's policy: policy::lossy allows a reversible step past the
/// budget.
template <class Policy>
options policy_options(options o) {
  o.lossy = o.lossy || std::is_same_v<Policy, policy::lossy>;
  return o;
}

/// Where an update runs: its layer, its position in the block, and whether it is being rewound.
struct update_site {
  std::size_t layer = 0, index = 0;
  bool rewound = false;
};

/// Columns [first, first + count) of the batch: each state variable's and cotangent's first
/// column, the lane's workspace (work_per_sample(m) * count scalars), and the gradient of the
/// part being computed: one layer's parameters laid out as in the arena, or the head's.
template <class T, std::size_t NS>
struct lane {
  struct column {
    T* p = nullptr;
    T* data() const { return p; }
  };
  std::array<column, NS> s, b;
  std::size_t first = 0, count = 0;
  T* work = nullptr;
  T* grads = nullptr;
};

template <class T, class Block, class Exec>
class step_engine {
  using State = std::remove_const_t<decltype(Block::state())>;
  using Params = std::remove_const_t<decltype(Block::params())>;
  using Maps = std::remove_const_t<decltype(Block::maps())>;
  static constexpr std::size_t n_params = decltype(hana::length(Params{}))::value;

 public:
  static constexpr std::size_t ns = Block::state_size;
  using lane_type = lane<T, ns>;
  template <class U>
  using plan = update_plan<State, Params, U>;
  template <class U>
  using frame = update_frame<T, State, Params, U>;
  using scalars_type = std::array<T, n_params == 0 ? 1 : n_params>;

  /// The shapes of a step. `params` is the parameter arena (executor memory) laid out by
  /// `arena`; `scalars` the block's runtime scalars; segment the layers per checkpoint.
  struct shape {
    tensor_shape state;  // each state variable's shape per sample
    std::size_t batch = 0, classes = 0, depth = 0, segment = 1;
    std::size_t input = 0, output = 0;
    std::uint64_t noise = 0;  // this training step's dropout key (noise_key(seed, step)); 0: no dropout
    std::size_t width() const { return state.size(); }
  };

  step_engine(const shape& s, const parameter_layout<Block>& arena, const T* params, const scalars_type& scalars, Exec exec)
      : s_(s), arena_(arena), params_(params), scalars_(scalars), exec_(exec) {}

  const Exec& executor() const { return exec_; }
  const shape& dims() const { return s_; }
  /// Where an update's call and step buffers start in a lane's workspace: after the maps'.
  T* buffers(const lane_type& ln) const { return ln.work + map_work_per_sample(s_.state) * ln.count; }
  /// Update U's frame, pointed at a lane's state and cotangents and at the runtime scalars.
  template <class U>
  frame<U> frame_of(const lane_type& ln) const {
    frame<U> uf;
    uf.bind(ln, scalars_);
    return uf;
  }

  /// The block's runtime scalars in T, in the order of its params(), from the bindings.
  static scalars_type scalars(const env& bindings) {
    scalars_type out{};
    std::size_t i = 0;
    hana::for_each(Params{}, [&](auto t) { out[i++] = static_cast<T>(scalar_value(typename decltype(t)::type{}, bindings)); });
    return out;
  }

  // --- sizes (closed forms of the block's types and the shapes) ----------------------------------
  /// Tape per sample of one layer: each update's entry, its target's old value (where the
  /// backward pass reads it) and its call buffers, whose free tail (an output the backward pass
  /// does not read) the next entry overwrites.
  static std::size_t tape_per_sample(tensor_shape state) {
    std::size_t n = 0;
    hana::for_each(Block::updates(), [&](auto u) { n += entry_size<decltype(u)>(state); });
    return n;
  }
  /// Tape per sample that one entry of update U keeps.
  template <class U>
  static std::size_t entry_size(tensor_shape state) {
    return (keeps_target<U>() ? state.size() : 0) + plan<U>::calls_size(state) - plan<U>::calls_free_tail(state);
  }
  /// Does a stored entry of update U keep its target's old value? Only where the backward pass of
  /// some update of the block reads that variable (a map called on it, whose backward reads its
  /// input, or an adjoint expression): no other value of it is read again.
  template <class U>
  static constexpr bool keeps_target() {
    using V = typename U::target;
    return hana::unpack(Block::updates(), [](auto... u) { return (backward_reads<V, decltype(u)>() || ... || false); });
  }
  template <class V, class U>
  static constexpr bool backward_reads() {
    const bool called_on = hana::unpack(typename plan<U>::Calls{}, [](auto... t) {
      return (std::is_same_v<typename decltype(t)::type::argument, V> || ... || false);
    });
    const bool read = hana::unpack(adjoint(U{}).steps(), [](auto... s) {
      return ([](auto step) {
        using S = decltype(step);
        if constexpr (detail::is_map_step<S>) return reads<V>(typename S::cotangent{});
        else return reads<V>(typename S::value{});
      }(s) || ... || false);
    });
    return called_on || read;
  }
  /// A lane's tape per sample: every layer's entries, and past the last one the free tail of its
  /// calls, which no next entry covers.
  static std::size_t lane_tape_per_sample(tensor_shape state, std::size_t depth) {
    using Last = std::remove_cvref_t<decltype(hana::back(Block::updates()))>;
    return depth * tape_per_sample(state) + plan<Last>::calls_free_tail(state);
  }
  /// The maps' workspace per sample (the largest of the block's maps'), at the start of a lane's
  /// workspace; an update's buffers follow it.
  static std::size_t map_work_per_sample(tensor_shape state) {
    std::size_t n = 0;
    hana::for_each(Maps{}, [&](auto t) { n = std::max(n, map_layout<typename decltype(t)::type>::work_size(state)); });
    return n;
  }
  /// A lane's workspace per sample in mode m: the largest of the head's logits and the maps'
  /// workspace with any update's buffers (stored: its map steps'; the others: its calls' and map
  /// steps'; exact: and g's where g is an expression).
  static std::size_t work_per_sample(mode m, tensor_shape state, std::size_t classes) {
    std::size_t n = 0;
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      using P = plan<U>;
      const std::size_t calls = m == mode::stored ? 0 : P::calls_size(state), g = m == mode::exact && g_needs_buffer<U>() ? state.size() : 0;
      n = std::max(n, calls + P::steps_size(state) + g);
    });
    return std::max(classes, map_work_per_sample(state) + n);
  }
  /// Scalars of the whole batch's tape in mode m (stored: every layer's; checkpointed: one state
  /// per segment boundary below the top).
  static std::size_t tape_size(mode m, tensor_shape state, std::size_t batch, std::size_t depth, std::size_t segment) {
    if (m == mode::stored) return lane_tape_per_sample(state, depth) * batch;
    if (m == mode::checkpointed) return (depth - 1) / segment * ns * state.size() * batch;
    return 0;
  }
  /// The closed-form memory of a step run as one lane of the whole batch in mode m (stored,
  /// reversible or checkpointed), its gradients written in place: the state and cotangents, the
  /// tape, one workspace. (The CPU runs chunks on threads: a workspace per thread and gradient
  /// slabs instead.)
  static memory_plan whole_batch_plan(mode m, tensor_shape state, std::size_t batch, std::size_t classes, std::size_t depth,
                                      std::size_t segment) {
    memory_plan p;
    p.state_bytes = 2 * ns * state.size() * batch * sizeof(T);
    p.tape_bytes = tape_size(m, state, batch, depth, segment) * sizeof(T);
    p.workspace_bytes = work_per_sample(m, state, classes) * batch * sizeof(T);
    return p;
  }
  /// Does the exact update need a buffer for g, or is g already one (a variable, a map call)?
  template <class U>
  static constexpr bool g_needs_buffer() {
    return !state_variable<typename U::g> && !detail::is_call<typename U::g>;
  }

  // --- a lane through the stack in each mode -----------------------------------------------------
  /// The forward pass of a lane through every layer in mode m (stored, reversible or
  /// checkpointed), keeping what m keeps in `tape` (tape_size scalars for the whole batch).
  void forward(lane_type& ln, mode m, T* tape) const {
    T* cursor = tape + lane_tape_per_sample(s_.state, s_.depth) * ln.first;
    for (std::size_t l = 0; l < s_.depth; ++l) {
      if (m == mode::checkpointed && l > 0 && l % s_.segment == 0) {
        T* at = checkpoint(tape, l, ln);
        for (std::size_t k = 0; k < ns; ++k) exec_.copy(at + k * whole(), ln.s[k].data(), s_.width() * ln.count);
      }
      forward_layer(l, ln, m == mode::stored ? &cursor : nullptr);
    }
  }
  /// Layer l of a lane's backward pass in mode m, from the tape its forward pass filled: the
  /// layer's input is restored (stored) or rewound, and the cotangents and ln.grads updated.
  void backward(std::size_t l, lane_type& ln, mode m, T* tape) const {
    if (m == mode::stored) {
      T* lane = tape + lane_tape_per_sample(s_.state, s_.depth) * ln.first;
      return backward_layer_stored(l, ln, lane + tape_per_sample(s_.state) * (l + 1) * ln.count);
    }
    if (m == mode::checkpointed && l + 1 < s_.depth && (l + 1) % s_.segment == 0) {  // a segment's top
      const T* at = checkpoint(tape, l + 1, ln);
      for (std::size_t k = 0; k < ns; ++k) exec_.copy(ln.s[k].data(), at + k * whole(), s_.width() * ln.count);
    }
    rewind_layer(l, ln, true);
  }

  // --- one layer ---------------------------------------------------------------------------------
  /// Layer l forward on a lane. With a tape cursor, each update first writes its target's old
  /// value and its call buffers there (and moves the cursor past them, but for their free tail).
  void forward_layer(std::size_t l, lane_type& ln, T** tape) const {
    const std::size_t nb = ln.count, n = s_.width() * nb;
    std::size_t ui = 0;
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      using P = plan<U>;
      using Layout = typename P::Layout;
      auto uf = frame_of<U>(ln);
      T* target = ln.s[Layout::template state_index<typename U::target>].data();
      T* base = buffers(ln);
      if (tape) {
        base = *tape;
        *tape += entry_size<U>(s_.state) * nb;  // the next entry may cover the calls' free tail
        if constexpr (keeps_target<U>()) {
          exec_.copy(base, target, n);
          base += n;
        }
      }
      uf.place_calls(base, s_.state, nb);
      const update_site at{l, ui++, false};
      compute_calls<U>(at, uf, ln);
      exec_.template update<Layout, U, typename U::rhs>(uf.f, target, n, at);
    });
  }

  /// Layer l rewound on a lane, per update from the last: the update's inverse; then, when asked,
  /// its adjoint, which reuses the map buffers just recomputed for the inversion.
  void rewind_layer(std::size_t l, lane_type& ln, bool with_adjoint) const {
    const std::size_t nb = ln.count;
    std::size_t ui = Block::size;
    hana::for_each(hana::reverse(Block::updates()), [&](auto u) {
      using U = decltype(u);
      using Layout = typename plan<U>::Layout;
      auto uf = frame_of<U>(ln);
      T* steps = uf.place_calls(buffers(ln), s_.state, nb);
      const update_site at{l, --ui, true};
      compute_calls<U>(at, uf, ln);  // g does not read the target: these are the forward's calls
      T* target = ln.s[Layout::template state_index<typename U::target>].data();
      exec_.template update<Layout, U, typename decltype(invert(U{}))::rhs>(uf.f, target, s_.width() * nb, at);
      if (with_adjoint) {
        uf.place_steps(steps, s_.state, nb);
        apply_adjoint<U>(at, uf, ln);
      }
    });
  }

  /// Layer l backward on a lane from its tape, whose entries for this layer end at `end`.
  void backward_layer_stored(std::size_t l, lane_type& ln, T* end) const {
    const std::size_t nb = ln.count, n = s_.width() * nb;
    std::size_t ui = Block::size;
    hana::for_each(hana::reverse(Block::updates()), [&](auto u) {
      using U = decltype(u);
      using P = plan<U>;
      using Layout = typename P::Layout;
      T* entry = end -= entry_size<U>(s_.state) * nb;
      auto uf = frame_of<U>(ln);
      if constexpr (keeps_target<U>()) exec_.copy(ln.s[Layout::template state_index<typename U::target>].data(), entry, n);  // restore
      uf.place_calls(entry + (keeps_target<U>() ? n : 0), s_.state, nb);
      uf.relink_calls(s_.state, nb);
      uf.place_steps(buffers(ln), s_.state, nb);
      apply_adjoint<U>(update_site{l, --ui, true}, uf, ln);
    });
  }

  /// Evaluates update U's map calls (innermost first) from the current state of a lane of nb
  /// samples, into the call buffers placed in uf; `at` is the update's place (its layer and its
  /// index in the block), which with the call's index keys the call's dropout masks.
  template <class U>
  void compute_calls(update_site at, frame<U>& uf, const lane_type& ln) const {
    const std::size_t layer = at.layer;
    const std::size_t nb = ln.count;
    using Layout = typename plan<U>::Layout;
    std::size_t c = 0;
    hana::for_each(typename plan<U>::Calls{}, [&](auto t) {
      using C = typename decltype(t)::type;
      using M = typename C::map_type;
      if constexpr (state_variable<typename C::argument>) {
        uf.call_in[c] = uf.f.state[Layout::template state_index<typename C::argument>];
      } else {
        exec_.template assign<Layout, typename C::argument>(uf.f, uf.call_input[c], s_.width() * nb);
        uf.call_in[c] = uf.call_input[c];
      }
      uf.f.calls[c] = runner<M>(ln, call_key(at, c)).forward(params_ + arena_.template offset<M>(layer), uf.call_in[c], uf.call_stages[c]);
      uf.call_out[c] = const_cast<T*>(uf.f.calls[c]);  // inside call_stages, which the caller owns
      ++c;
    });
  }

  /// Update U's derived adjoint on a lane; its parameter gradients accumulate in ln.grads (layer
  /// at.layer's part of the arena's layout). The maps' dropout masks are the forward's (the same
  /// keys).
  template <class U>
  void apply_adjoint(update_site at, frame<U>& uf, lane_type& ln) const {
    using Layout = typename plan<U>::Layout;
    const std::size_t nb = ln.count, n = s_.width() * nb, l = at.layer;
    hana::for_each(adjoint(U{}).steps(), [&](auto step) {
      using S = decltype(step);
      if constexpr (detail::is_map_step<S>) {
        using C = typename S::call_type;
        using M = typename C::map_type;
        constexpr std::size_t c = Layout::template call_index<C>;
        constexpr std::size_t j = Layout::template vjp_index<map_vjp<C, typename S::cotangent>>;
        exec_.template assign<Layout, typename S::cotangent>(uf.f, uf.cot[j], n);
        runner<M>(ln, call_key(at, c))
            .backward(params_ + arena_.template offset<M>(l), ln.grads + arena_.template offset<M>(0), uf.call_in[c], uf.call_stages[c],
                      uf.cot[j], uf.scratch[j], uf.vjp[j]);
        uf.f.vjps[j] = uf.vjp[j];
      } else {
        T* bar = ln.b[Layout::template state_index<typename S::variable>].data();
        if constexpr (detail::is_accumulate_step<S>) exec_.template accumulate<Layout, typename S::value>(uf.f, bar, n);
        else exec_.template assign<Layout, typename S::value>(uf.f, bar, n);  // reads only its own element: safe in place
      }
    });
  }

  // --- the loss head -----------------------------------------------------------------------------
  /// z = Wh * (output variable) + bh for a lane, classes x count, into z.
  void logits(const lane_type& ln, T* z) const {
    const std::size_t C = s_.classes, W = s_.width();
    const T* Wh = params_ + arena_.head;
    const auto ops = exec_.maps();
    ops.gemm(false, false, C, ln.count, W, Wh, ln.s[s_.output].data(), T(0), z);
    ops.template bias<void>(z, Wh + C * W, C, ln.count);
  }
  /// The linear head and softmax cross-entropy of a lane: each sample's loss into
  /// loss[first + j], the head's gradient accumulated into ln.grads, the output variable's
  /// cotangent seeded. `labels` and `loss` are the whole batch's, in executor memory.
  void head(lane_type& ln, const int* labels, double* loss) const {
    const std::size_t C = s_.classes, W = s_.width(), nb = ln.count;
    const T* Wh = params_ + arena_.head;
    const T* out = ln.s[s_.output].data();
    T* z = ln.work;
    const auto ops = exec_.maps();
    logits(ln, z);
    exec_.softmax_cross_entropy(z, labels + ln.first, loss + ln.first, C, nb, s_.batch);
    ops.gemm(false, true, C, W, nb, z, out, T(1), ln.grads);  // dWh += dz out^T
    ops.bias_gradient(z, ln.grads + C * W, C, nb);
    ops.gemm(true, false, W, nb, C, Wh, z, T(0), ln.b[s_.output].data());
  }

 private:
  std::size_t whole() const { return s_.width() * s_.batch; }
  /// The state at layer l in the checkpointed tape, this lane's columns (variable k at + k * whole()).
  T* checkpoint(T* tape, std::size_t l, const lane_type& ln) const {
    return tape + (l / s_.segment - 1) * ns * whole() + ln.first * s_.width();
  }
  /// A runner of map M over a lane: its columns, its workspace, and a call's dropout key.
  template <class M>
  map_runner<M, T, std::remove_cvref_t<decltype(std::declval<const Exec&>().maps())>> runner(const lane_type& ln, std::uint64_t key) const {
    return {s_.state, ln.count, exec_.maps(), ln.work, key, ln.first};
  }
  /// The dropout key of call c of the update at `at` in this step (0, no dropout, when the step's
  /// noise is 0): the same in the forward pass, the rewind and the backward pass.
  std::uint64_t call_key(update_site at, std::size_t c) const {
    return s_.noise == 0 ? 0 : noise_key(noise_key(noise_key(s_.noise, at.layer), at.index), c);
  }

  shape s_;
  const parameter_layout<Block>& arena_;
  const T* params_;
  const scalars_type& scalars_;
  Exec exec_;
};

}  // namespace rwd
