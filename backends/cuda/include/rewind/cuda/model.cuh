// rewind cuda: the engine on the GPU, with the CPU engine's API, buffer layout and memory plan
// (rwd::update_plan, rwd::step_plan), so that the two agree on every number they share:
//   stored        standard backprop: the tape of every layer on the device
//   reversible    the endpoint only; per layer from the top, each update inverted (its maps
//                 recomputed, their buffers serving the adjoint too) and its adjoint applied
//   checkpointed  the state every k layers (k <= L*/2), rewound inside each segment
// Per update: the maps' GEMMs through cuBLAS (bias and activation fused into one pass over their
// output), then one fused elementwise kernel instantiated from the update's expression type; the
// inverse and every adjoint step likewise. Nothing here knows momentum, leapfrog or coupling.
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
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <rewind/engine.hpp>
#include <rewind/engine/optimizer_step.hpp>
#include <rewind/layout.hpp>
#include <rewind/optim.hpp>
#include <rewind/rewind.hpp>

#include "kernels.cuh"
#include "maps.cuh"
#include "runtime.cuh"

namespace rwd::cuda {

using rwd::memory_plan;
using rwd::mode;
using rwd::options;

template <class T, class Block>
class model {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "rewind: cuda models are float or double");
  static_assert(rwd::detail::usable_block<Block>(), "rewind: cuda::model takes a block made by rwd::block(...)");
  using State = std::remove_const_t<decltype(Block::state())>;
  using Params = std::remove_const_t<decltype(Block::params())>;
  using Maps = std::remove_const_t<decltype(Block::maps())>;
  static constexpr std::size_t ns = Block::state_size;
  static constexpr std::size_t n_params = decltype(hana::length(Params{}))::value;
  static constexpr bool has_data_alpha = has_data_dependent_coefficient<Block>();
  template <class U>
  using update_plan = rwd::update_plan<State, Params, U>;
  template <class U>
  using update_frame = rwd::update_frame<T, State, Params, U>;

 public:
  using scalar = T;
  using block_type = Block;

  model(Block, std::size_t depth, const options& o, const env& bindings = {})
      : depth_(depth), o_(o), bindings_(bindings), arena_(o.width, depth, o.classes) {
    if (o.width == 0 || o.batch == 0 || o.classes == 0 || depth == 0)
      throw error("rewind: a model needs width, batch, classes and depth of at least 1");
    input_ = state_index_of<State>(o.input);
    output_ = state_index_of<State>(o.output);
    rwd::detail::check_runtime_coefficients<Block>(bindings);
    budget_ = rwd::budget<T>(Block{}, bindings);
    segment_ = checkpoint_segment(o.checkpoint_every, budget_, depth);
    std::size_t pi = 0;
    hana::for_each(Params{}, [&](auto t) { scalars_[pi++] = static_cast<T>(scalar_value(typename decltype(t)::type{}, bindings)); });
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
    std::vector<device_buffer<T>> tape;
    if (m == mode::stored) tape.reserve(depth_ * Block::size);
    for (std::size_t l = 0; l < depth_; ++l) {
      if (m == mode::checkpointed && l > 0 && l % segment_ == 0) tape.push_back(st.save(*this));
      forward_layer(l, st, m == mode::stored ? &tape : nullptr);
    }
    head(st);
    if (ready) ready(arena_.head);
    for (std::size_t l = depth_; l-- > 0;) {
      if (m == mode::stored) backward_layer_stored(l, st, tape);
      else {
        if (m == mode::checkpointed && l + 1 < depth_ && (l + 1) % segment_ == 0) {
          st.restore(tape.back(), *this);
          tape.pop_back();
        }
        rewind_layer(l, st, true);
      }
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
    for (std::size_t l = depth_; l-- > 0;) rewind_layer(l, st, false);
    check_alphas();
    return st.copy_out(*this);
  }

  /// The predicted class of every sample of a batch.
  std::vector<int> predict(std::span<const T> batch) {
    states st = run_forward(batch);
    device_buffer<T> z(tracker_, o_.classes * o_.batch);
    logits(st, z.data());
    std::vector<T> host(o_.classes * o_.batch);
    download(host.data(), z.data(), host.size(), ctx_.stream());
    std::vector<int> out(o_.batch);
    for (std::size_t j = 0; j < o_.batch; ++j)
      out[j] = static_cast<int>(std::max_element(host.begin() + j * o_.classes, host.begin() + (j + 1) * o_.classes) -
                                (host.begin() + j * o_.classes));
    return out;
  }

  /// The closed-form device memory of one loss_and_gradient in mode m (the CPU's plan).
  memory_plan plan(mode m) const {
    if (m == mode::exact) throw error("rewind: mode::exact runs on the CPU backend");
    return step_plan<Block>(m, o_.width, o_.batch, o_.classes, depth_, segment_, sizeof(T));
  }

  /// One optimizer step on the device (sgd or adam settings). Switching optimizers starts the new
  /// one's state afresh (rwd::optimizer_kind), as on the CPU.
  void apply(const sgd& o) {
    check(o);
    begin_optimizer(kind_of(o), 1);
    for_each(sgd_step<T>::of(o, params_.data(), grads_.data(), first_.data()), arena_.total, ctx_.stream());
    ++steps_;
  }
  void apply(const adam& o) {
    check(o);
    begin_optimizer(kind_of(o), 2);
    ++steps_;
    for_each(adam_step<T>::of(o, steps_, params_.data(), grads_.data(), first_.data(), second_.data()), arena_.total, ctx_.stream());
  }
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
    explicit states(model& m) {
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
    device_buffer<T> save(model& m) const {
      const std::size_t n = s[0].size();
      device_buffer<T> saved(m.tracker_, ns * n);
      for (std::size_t k = 0; k < ns; ++k)
        REWIND_CUDA(cudaMemcpyAsync(saved.data() + k * n, s[k].data(), n * sizeof(T), cudaMemcpyDeviceToDevice, m.ctx_.stream()));
      return saved;
    }
    void restore(const device_buffer<T>& saved, const model& m) {
      const std::size_t n = s[0].size();
      for (std::size_t k = 0; k < ns; ++k)
        REWIND_CUDA(cudaMemcpyAsync(s[k].data(), saved.data() + k * n, n * sizeof(T), cudaMemcpyDeviceToDevice, m.ctx_.stream()));
    }
  };

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
  /// The counter of bad alpha elements of update ui in layer l, forward or rewound (null when no
  /// alpha of the block reads the data).
  unsigned* alpha_counter(bool rewound, std::size_t l, std::size_t ui) {
    return alpha_bad_.data() + ((rewound ? depth_ : 0) + l) * Block::size + ui;
  }
  /// target <- Rhs (update U's right-hand side or its inverse's, the frame f reading the target in
  /// place) over n elements; an alpha that reads the data is checked into update ui's counter.
  template <class U, class Rhs, class Frame>
  void assign(const Frame& f, T* target, std::size_t n, bool rewound, std::size_t l, std::size_t ui) {
    using Layout = typename update_plan<U>::Layout;
    if constexpr (coefficient_kind_of<U>() == coefficient_kind::data_dependent)
      for_each(checked_assign_op<Layout, U, Rhs, T>{f, target, alpha_counter(rewound, l, ui), alpha_bounds_of<T, U>(bindings_)}, n,
               ctx_.stream());
    else for_each(assign_op<Layout, Rhs, T>{f, target}, n, ctx_.stream());
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

  template <class M>
  map_runner<M, T> runner() const {
    return {o_.width, o_.batch, {ctx_.blas(), ctx_.stream()}};
  }
  template <class U>
  void compute_calls(std::size_t layer, update_frame<U>& uf) const {
    using Layout = typename update_frame<U>::Layout;
    const std::size_t n = o_.width * o_.batch;
    std::size_t c = 0;
    hana::for_each(typename update_plan<U>::Calls{}, [&](auto t) {
      using C = typename decltype(t)::type;
      using M = typename C::map_type;
      if constexpr (state_variable<typename C::argument>) {
        uf.call_in[c] = uf.f.state[Layout::template state_index<typename C::argument>];
      } else {
        for_each(assign_op<Layout, typename C::argument, T>{uf.f, uf.call_input[c]}, n, ctx_.stream());
        uf.call_in[c] = uf.call_input[c];
      }
      uf.f.calls[c] = runner<M>().forward(params_.data() + arena_.template offset<M>(layer), uf.call_in[c], uf.call_stages[c]);
      uf.call_out[c] = const_cast<T*>(uf.f.calls[c]);
      ++c;
    });
  }


  void forward_layer(std::size_t l, states& st, std::vector<device_buffer<T>>* tape) {
    const std::size_t n = o_.width * o_.batch;
    std::size_t ui = 0;  // the update's position in the block
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      using P = update_plan<U>;
      using Layout = typename P::Layout;
      update_frame<U> uf;
      uf.bind(st, scalars_);
      T* target = st.s[Layout::template state_index<typename U::target>].data();
      device_buffer<T> ws(tracker_, ((tape ? o_.width : 0) + P::calls_size(o_.width)) * o_.batch);
      T* base = ws.data();
      if (tape) {
        REWIND_CUDA(cudaMemcpyAsync(base, target, n * sizeof(T), cudaMemcpyDeviceToDevice, ctx_.stream()));
        base += n;
      }
      uf.place_calls(base, o_.width, o_.batch);
      compute_calls(l, uf);
      assign<U, typename U::rhs>(uf.f, target, n, false, l, ui);  // s <- alpha*s + g
      if (tape) tape->push_back(std::move(ws));
      ++ui;
    });
  }

  void rewind_layer(std::size_t l, states& st, bool with_adjoint) {
    std::size_t ui = Block::size;  // the update's position in the block, counted down
    hana::for_each(hana::reverse(Block::updates()), [&](auto u) {
      --ui;
      using U = decltype(u);
      using P = update_plan<U>;
      using Layout = typename P::Layout;
      update_frame<U> uf;
      uf.bind(st, scalars_);
      device_buffer<T> ws(tracker_, (P::calls_size(o_.width) + (with_adjoint ? P::steps_size(o_.width) : 0)) * o_.batch);
      T* steps = uf.place_calls(ws.data(), o_.width, o_.batch);
      compute_calls(l, uf);
      T* target = st.s[Layout::template state_index<typename U::target>].data();
      assign<U, typename decltype(invert(U{}))::rhs>(uf.f, target, o_.width * o_.batch, true, l, ui);
      if (with_adjoint) {
        uf.place_steps(steps, o_.width, o_.batch);
        apply_adjoint<U>(l, uf, st);
      }
    });
  }

  template <class U>
  void apply_adjoint(std::size_t l, update_frame<U>& uf, states& st) {
    using Layout = typename update_frame<U>::Layout;
    const std::size_t n = o_.width * o_.batch;
    const cudaStream_t s = ctx_.stream();
    hana::for_each(adjoint(U{}).steps(), [&](auto step) {
      using S = decltype(step);
      if constexpr (rwd::detail::is_map_step<S>) {
        using C = typename S::call_type;
        using M = typename C::map_type;
        constexpr std::size_t c = Layout::template call_index<C>;
        constexpr std::size_t j = Layout::template vjp_index<map_vjp<C, typename S::cotangent>>;
        for_each(assign_op<Layout, typename S::cotangent, T>{uf.f, uf.cot[j]}, n, s);
        const std::size_t off = arena_.template offset<M>(l);
        runner<M>().backward(params_.data() + off, grads_.data() + off, uf.call_in[c], uf.call_stages[c], uf.cot[j], uf.scratch[j],
                             uf.vjp[j]);
        uf.f.vjps[j] = uf.vjp[j];
      } else {
        T* bar = st.b[Layout::template state_index<typename S::variable>].data();
        if constexpr (rwd::detail::is_accumulate_step<S>) for_each(accumulate_op<Layout, typename S::value, T>{uf.f, bar}, n, s);
        else for_each(assign_op<Layout, typename S::value, T>{uf.f, bar}, n, s);
      }
    });
  }

  void backward_layer_stored(std::size_t l, states& st, std::vector<device_buffer<T>>& tape) {
    const std::size_t n = o_.width * o_.batch;
    hana::for_each(hana::reverse(Block::updates()), [&](auto u) {
      using U = decltype(u);
      using P = update_plan<U>;
      using Layout = typename P::Layout;
      device_buffer<T> entry = std::move(tape.back());
      tape.pop_back();
      update_frame<U> uf;
      uf.bind(st, scalars_);
      REWIND_CUDA(cudaMemcpyAsync(st.s[Layout::template state_index<typename U::target>].data(), entry.data(), n * sizeof(T),
                                  cudaMemcpyDeviceToDevice, ctx_.stream()));  // restore
      uf.place_calls(entry.data() + n, o_.width, o_.batch);
      uf.relink_calls(o_.width, o_.batch);
      device_buffer<T> ws(tracker_, P::steps_size(o_.width) * o_.batch);
      uf.place_steps(ws.data(), o_.width, o_.batch);
      apply_adjoint<U>(l, uf, st);
    });
  }

  states run_forward(std::span<const T> batch) {
    rwd::check_batch(batch, o_.width, o_.batch);
    queue_parameter_check();
    check_parameters();
    states st(*this);
    upload(st.s[input_].data(), batch.data(), batch.size(), ctx_.stream());
    queue_alpha_check();
    for (std::size_t l = 0; l < depth_; ++l) forward_layer(l, st, nullptr);
    check_alphas();
    return st;
  }

  /// z = Wh * (output variable) + bh, classes x batch.
  void logits(const states& st, T* z) const {
    const std::size_t C = o_.classes, W = o_.width, B = o_.batch;
    const T* Wh = params_.data() + arena_.head;
    gemm<T>(ctx_.blas(), false, false, C, B, W, T(1), Wh, C, st.s[output_].data(), W, T(0), z, C);
    for_each(bias_activation_op<void, T>{z, Wh + C * W, C}, C * B, ctx_.stream());
  }

  /// Linear head and softmax cross-entropy (per-sample losses into losses_); seeds the output
  /// variable's cotangent.
  void head(states& st) {
    const std::size_t C = o_.classes, B = o_.batch, W = o_.width;
    const cudaStream_t s = ctx_.stream();
    const T* out = st.s[output_].data();
    device_buffer<T> z(tracker_, C * B);
    logits(st, z.data());
    for_each(softmax_xent_op<T>{z.data(), labels_.data(), losses_.data(), C, B}, B, s);
    T* gW = grads_.data() + arena_.head;
    gemm<T>(ctx_.blas(), false, true, C, W, B, T(1), z.data(), C, out, W, T(1), gW, C);  // dWh += dz out^T
    for_each(bias_gradient_op<T>{z.data(), gW + C * W, C, B}, C, s);
    gemm<T>(ctx_.blas(), true, false, W, B, C, T(1), params_.data() + arena_.head, C, z.data(), C, T(0), st.b[output_].data(), W);
  }

  context ctx_;
  std::size_t depth_;
  options o_;
  env bindings_;
  parameter_layout<Block> arena_;
  std::size_t input_ = 0, output_ = 0, segment_ = 1;
  budget_report budget_;
  std::array<T, n_params == 0 ? 1 : n_params> scalars_{};
  device_tracker fixed_, tracker_;  // fixed_: arenas, labels, losses; tracker_: a step's buffers
  device_buffer<T> params_, grads_, first_, second_;
  device_buffer<int> labels_, flag_;
  device_buffer<unsigned> alpha_bad_;  // per pass (forward, rewind), layer and update: bad alpha elements
  device_buffer<double> losses_;
  std::vector<T> input_grad_;
  long long steps_ = 0;
  optimizer_kind optimizer_ = optimizer_kind::none;
};

}  // namespace rwd::cuda
