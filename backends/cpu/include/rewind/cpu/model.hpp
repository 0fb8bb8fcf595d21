// rewind cpu: the engine. A block stacked to a depth, parameters in one arena (gradients in a
// twin), the loss head (linear width -> classes, softmax cross-entropy), and the gradient in two
// modes:
//   stored      standard backprop: keeps, per layer and update, the target's old value and the
//               map intermediates of the forward pass;
//   reversible  keeps only the endpoint: per layer from the top, per update in reverse, the
//               update is inverted (recomputing its maps, whose intermediates then serve the
//               adjoint too) and its derived adjoint is applied.
// Nothing here knows momentum, leapfrog or coupling: every block goes through the updates,
// inverses and adjoints the dsl derives. Each update is one fused elementwise pass generated
// from its expression type (rwd::evaluate), after its maps' GEMMs (Eigen).
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <rewind/pointwise.hpp>
#include <rewind/rewind.hpp>

#include "memory.hpp"

namespace rwd::cpu {

enum class mode { stored, reversible };

struct options {
  std::size_t width = 0, batch = 0, classes = 10;
  std::uint64_t seed = 1;
  std::string_view input = "x";   // the state variable that receives the input; the others start at 0
  std::string_view output = "x";  // the state variable the loss head reads
  // The last dense layer of every map starts at this fraction of its Glorot scale, so that the
  // maps start with small slopes (as residual branches usually do): a slope near +1 already
  // divides the budget by ten (see rwd::budget with a declared slope).
  double output_init_scale = 0.02;
};

template <class T, class Block>
class model {
  using State = std::remove_const_t<decltype(Block::state())>;
  using Params = std::remove_const_t<decltype(Block::params())>;
  using Maps = std::remove_const_t<decltype(Block::maps())>;
  static constexpr std::size_t ns = Block::state_size;
  static constexpr std::size_t n_maps = decltype(hana::length(Maps{}))::value;
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using mmap = Eigen::Map<matrix, Eigen::Aligned64>;
  using cmap = Eigen::Map<const matrix>;

 public:
  model(Block, std::size_t depth, const options& o, const env& bindings = {})
      : depth_(depth), o_(o), bindings_(bindings) {
    if (o.width == 0 || o.batch == 0 || o.classes == 0 || depth == 0)
      throw error("rewind: a model needs width, batch, classes and depth of at least 1");
    input_ = state_index(o.input);
    output_ = state_index(o.output);
    detail::check_runtime_coefficients<Block>(bindings);
    std::size_t p = 0;
    hana::for_each(Maps{}, [&](auto t) {
      using M = typename decltype(t)::type;
      map_offset_[index_of_map<M>()] = p;
      p += M::parameter_count(o.width);
    });
    per_layer_ = p;
    head_offset_ = per_layer_ * depth_;
    params_.assign(head_offset_ + o.classes * o.width + o.classes, T(0));
    grads_.assign(params_.size(), T(0));
    std::size_t pi = 0;
    hana::for_each(Params{}, [&](auto t) { scalars_[pi++] = static_cast<T>(scalar_value(typename decltype(t)::type{}, bindings)); });
    initialise(o.seed);
  }

  std::span<T> parameters() { return params_; }
  std::span<const T> parameters() const { return params_; }
  std::span<T> gradients() { return grads_; }
  std::span<const T> input_gradient() const { return {input_grad_.data(), input_grad_.size()}; }
  std::size_t depth() const { return depth_; }
  /// Position of the input variable in the block's state (the order of forward()'s result).
  std::size_t input_index() const { return input_; }
  const options& config() const { return o_; }
  memory_tracker& memory() { return tracker_; }

  /// Glorot-uniform weights (the maps' last dense layer scaled by output_init_scale) and zero biases from a seeded mt19937_64: the same on every machine.
  void initialise(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto fill = [&](T* w, std::size_t rows, std::size_t cols, double scale) {
      const double a = scale * std::sqrt(6.0 / static_cast<double>(rows + cols));
      for (std::size_t i = 0; i < rows * cols; ++i)
        w[i] = static_cast<T>((static_cast<double>(rng() >> 11) * 0x1.0p-53 * 2 - 1) * a);
    };
    std::fill(params_.begin(), params_.end(), T(0));
    for (std::size_t l = 0; l < depth_; ++l)
      hana::for_each(Maps{}, [&](auto t) {
        using M = typename decltype(t)::type;
        std::size_t off = l * per_layer_ + map_offset_[index_of_map<M>()];
        const auto shape = M::shape(o_.width);
        std::size_t last_dense = 0;
        for (std::size_t k = 0; k < shape.size(); ++k) last_dense = shape[k].dense ? k : last_dense;
        for (std::size_t k = 0; k < shape.size(); ++k)
          if (shape[k].dense) {
            fill(&params_[off], shape[k].out, shape[k].in, k == last_dense ? o_.output_init_scale : 1.0);
            off += shape[k].out * shape[k].in + shape[k].out;
          }
      });
    fill(&params_[head_offset_], o_.classes, o_.width, 1.0);
  }

  /// The state after the whole stack for an input batch (width x batch, column-major).
  std::vector<std::vector<T>> forward(std::span<const T> batch) {
    check_batch(batch);
    states st(*this);
    st.load(batch, input_);
    for (std::size_t l = 0; l < depth_; ++l) forward_layer(l, st, nullptr);
    return st.copy_out();
  }

  /// Runs the stack backward from a final state (width x batch per variable): the rewind alone.
  std::vector<std::vector<T>> rewind(const std::vector<std::vector<T>>& final_state) {
    states st(*this);
    for (std::size_t k = 0; k < ns; ++k) std::copy(final_state[k].begin(), final_state[k].end(), st.s[k].data());
    for (std::size_t l = depth_; l-- > 0;) rewind_layer(l, st, false);
    return st.copy_out();
  }

  /// Mean softmax cross-entropy of the batch; fills gradients() (parameters) and input_gradient().
  T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, mode m) {
    check_batch(batch);
    if (labels.size() != o_.batch) throw error("rewind: " + std::to_string(labels.size()) + " labels for a batch of " + std::to_string(o_.batch));
    for (int y : labels)
      if (y < 0 || static_cast<std::size_t>(y) >= o_.classes) throw error("rewind: label " + std::to_string(y) + " outside [0, classes)");
    std::fill(grads_.begin(), grads_.end(), T(0));
    states st(*this);
    st.load(batch, input_);
    std::vector<stored_update> tape;
    for (std::size_t l = 0; l < depth_; ++l) forward_layer(l, st, m == mode::stored ? &tape : nullptr);
    const T loss = head(st, labels);
    if (m == mode::stored) {
      for (std::size_t l = depth_; l-- > 0;) backward_layer_stored(l, st, tape);
    } else {
      for (std::size_t l = depth_; l-- > 0;) rewind_layer(l, st, true);
    }
    input_grad_.assign(st.b[input_].data(), st.b[input_].data() + st.b[input_].size());
    return loss;
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
    void load(std::span<const T> batch, std::size_t input) {
      std::copy(batch.begin(), batch.end(), s[input].data());
    }
    std::vector<std::vector<T>> copy_out() const {
      std::vector<std::vector<T>> out(ns);
      for (std::size_t k = 0; k < ns; ++k) out[k].assign(s[k].data(), s[k].data() + s[k].size());
      return out;
    }
  };

  // --- one map call: its input, every layer's output ---------------------------------------------
  struct call_workspace {
    buffer<T> input;                 // only when the argument is not a plain state variable
    const T* in = nullptr;
    std::vector<buffer<T>> outs;     // one per layer; the last is the call's output
  };

  template <class U>
  struct update_frame {
    using Calls = std::remove_const_t<decltype(calls_of(typename U::rhs{}))>;
    using Layout = pointwise_layout<State, Calls, Params>;
    static constexpr std::size_t nc = Layout::n_calls;
    typename Layout::template frame<T> f{};
    std::array<call_workspace, nc> calls;
    std::array<buffer<T>, nc> vjps;
  };

  template <class M>
  static constexpr std::size_t index_of_map() {
    return detail::index_in<M>(Maps{});
  }
  std::size_t state_index(std::string_view name) const {
    std::optional<std::size_t> found;
    std::size_t k = 0;
    hana::for_each(State{}, [&](auto t) {
      if (decltype(t)::type::name == name) found = k;
      ++k;
    });
    if (!found) throw error("rewind: '" + std::string(name) + "' is not a state variable of the block");
    return *found;
  }
  void check_batch(std::span<const T> batch) const {
    if (batch.size() != o_.width * o_.batch)
      throw error("rewind: the batch has " + std::to_string(batch.size()) + " values; width x batch is " +
                  std::to_string(o_.width) + " x " + std::to_string(o_.batch));
    for (T v : batch)
      if (!std::isfinite(v)) throw error("rewind: the batch holds a non-finite value");
  }

  template <class U>
  void bind(update_frame<U>& uf, states& st) {
    for (std::size_t k = 0; k < ns; ++k) uf.f.state[k] = st.s[k].data(), uf.f.bars[k] = st.b[k].data();
    for (std::size_t p = 0; p < decltype(hana::length(Params{}))::value; ++p) uf.f.params[p] = scalars_[p];
  }

  /// Evaluates the update's map calls (innermost first) from the current state.
  template <class U>
  void compute_calls(std::size_t layer, update_frame<U>& uf) {
    using Layout = typename update_frame<U>::Layout;
    const std::size_t n = o_.width * o_.batch;
    std::size_t c = 0;
    hana::for_each(typename update_frame<U>::Calls{}, [&](auto t) {
      using C = typename decltype(t)::type;
      using M = typename C::map_type;
      auto& w = uf.calls[c];
      if constexpr (state_variable<typename C::argument>) {
        w.in = uf.f.state[Layout::template state_index<typename C::argument>];
      } else {
        w.input = buffer<T>(tracker_, n);
        for (std::size_t i = 0; i < n; ++i) w.input[i] = evaluate<Layout, typename C::argument, T>(uf.f, i);
        w.in = w.input.data();
      }
      const auto shape = M::shape(o_.width);
      w.outs.clear();
      const T* in = w.in;
      std::size_t off = layer * per_layer_ + map_offset_[index_of_map<M>()];
      std::size_t k = 0;
      hana::for_each(layer_types<M>(), [&](auto lt) {
        using L = typename decltype(lt)::type;
        const auto& s = shape[k++];
        buffer<T> out(tracker_, s.out * o_.batch);
        if constexpr (detail::is_dense<L>) {
          cmap W(&params_[off], s.out, s.in), x(in, s.in, o_.batch);
          Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> bias(&params_[off + s.out * s.in], s.out);
          Eigen::Map<matrix> y(out.data(), s.out, o_.batch);
          y.noalias() = W * x;
          y.colwise() += bias;
          off += s.out * s.in + s.out;
        } else {
          for (std::size_t i = 0; i < out.size(); ++i) out[i] = L::function::value(in[i]);
        }
        in = out.data();
        w.outs.push_back(std::move(out));
      });
      uf.f.calls[c] = w.outs.back().data();
      ++c;
    });
  }

  template <class M>
  static constexpr auto layer_types() {
    return hana::unpack(M::layers(), [](auto... l) { return hana::make_tuple(hana::type_c<decltype(l)>...); });
  }

  /// Backward through one map call with output cotangent `cot`: parameter gradients accumulate,
  /// the input cotangent lands in `vjp`.
  template <class C>
  void map_backward(std::size_t layer, const call_workspace& w, buffer<T>& cot, buffer<T>& vjp) {
    using M = typename C::map_type;
    const auto shape = M::shape(o_.width);
    std::array<std::size_t, M::depth> offsets{};
    std::size_t off = layer * per_layer_ + map_offset_[index_of_map<M>()];
    for (std::size_t k = 0; k < M::depth; ++k) {
      offsets[k] = off;
      if (shape[k].dense) off += shape[k].out * shape[k].in + shape[k].out;
    }
    buffer<T> g = std::move(cot);
    std::size_t k = M::depth;
    hana::for_each(hana::reverse(layer_types<M>()), [&](auto lt) {
      using L = typename decltype(lt)::type;
      --k;
      const auto& s = shape[k];
      const T* in = k == 0 ? w.in : w.outs[k - 1].data();
      if constexpr (detail::is_dense<L>) {
        cmap x(in, s.in, o_.batch), W(&params_[offsets[k]], s.out, s.in);
        Eigen::Map<matrix> gW(&grads_[offsets[k]], s.out, s.in);
        Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> gb(&grads_[offsets[k] + s.out * s.in], s.out);
        Eigen::Map<const matrix> G(g.data(), s.out, o_.batch);
        gW.noalias() += G * x.transpose();  // dW += g u^T
        gb += G.rowwise().sum();             // db += sum over the batch of g
        buffer<T> next(tracker_, s.in * o_.batch);
        Eigen::Map<matrix>(next.data(), s.in, o_.batch).noalias() = W.transpose() * G;  // du = W^T g
        g = std::move(next);
      } else {
        const T* y = w.outs[k].data();
        for (std::size_t i = 0; i < g.size(); ++i) g[i] *= L::function::derivative_from_output(y[i]);
      }
    });
    vjp = std::move(g);
  }

  // --- the stored tape ------------------------------------------------------------------------------
  struct stored_update {
    buffer<T> old_target;
    std::vector<call_workspace> calls;
  };

  void forward_layer(std::size_t l, states& st, std::vector<stored_update>* tape) {
    const std::size_t n = o_.width * o_.batch;
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      using Layout = typename update_frame<U>::Layout;
      update_frame<U> uf;
      bind(uf, st);
      compute_calls(l, uf);
      constexpr std::size_t t = Layout::template state_index<typename U::target>;
      T* target = st.s[t].data();
      stored_update su;
      if (tape) {
        su.old_target = buffer<T>(tracker_, n);
        std::copy_n(target, n, su.old_target.data());
      }
      for (std::size_t i = 0; i < n; ++i) target[i] = evaluate<Layout, typename U::rhs, T>(uf.f, i);
      if (tape) {
        for (auto& c : uf.calls) su.calls.push_back(std::move(c));  // buffers move, data stays
        tape->push_back(std::move(su));
      }
    });
  }

  /// Per update from the last: s <- (s - g) / alpha; then, when asked, the update's adjoint,
  /// which reuses the maps' intermediates just recomputed for the inversion.
  void rewind_layer(std::size_t l, states& st, bool with_adjoint) {
    hana::for_each(hana::reverse(Block::updates()), [&](auto u) {
      using U = decltype(u);
      update_frame<U> uf;
      bind(uf, st);
      compute_calls(l, uf);  // g does not read the target: these are the forward's calls
      invert_update<U>(uf, st);
      if (with_adjoint) apply_adjoint<U>(l, uf, st);
    });
  }

  template <class U>
  void invert_update(update_frame<U>& uf, states& st) {
    using Layout = typename update_frame<U>::Layout;
    const std::size_t n = o_.width * o_.batch;
    T* target = st.s[Layout::template state_index<typename U::target>].data();
    for (std::size_t i = 0; i < n; ++i)
      target[i] = (target[i] - evaluate<Layout, typename U::g, T>(uf.f, i)) /
                  evaluate<Layout, typename U::alpha, T>(uf.f, i);
  }

  template <class U>
  void apply_adjoint(std::size_t l, update_frame<U>& uf, states& st) {
    using Layout = typename update_frame<U>::Layout;
    const std::size_t n = o_.width * o_.batch;
    hana::for_each(adjoint(U{}).steps(), [&](auto step) {
      using S = decltype(step);
      if constexpr (detail::is_map_step<S>) {
        using C = typename S::call_type;
        constexpr std::size_t c = Layout::template call_index<C>;
        buffer<T> cot(tracker_, n);
        for (std::size_t i = 0; i < n; ++i) cot[i] = evaluate<Layout, typename S::cotangent, T>(uf.f, i);
        map_backward<C>(l, uf.calls[c], cot, uf.vjps[c]);
        uf.f.vjps[c] = uf.vjps[c].data();
      } else {
        T* bar = st.b[Layout::template state_index<typename S::variable>].data();
        if constexpr (detail::is_accumulate_step<S>) {
          for (std::size_t i = 0; i < n; ++i) bar[i] += evaluate<Layout, typename S::value, T>(uf.f, i);
        } else {  // reads only its own element of the old cotangent: safe in place
          for (std::size_t i = 0; i < n; ++i) bar[i] = evaluate<Layout, typename S::value, T>(uf.f, i);
        }
      }
    });
  }

  void backward_layer_stored(std::size_t l, states& st, std::vector<stored_update>& tape) {
    hana::for_each(hana::reverse(Block::updates()), [&](auto u) {
      using U = decltype(u);
      using Layout = typename update_frame<U>::Layout;
      stored_update su = std::move(tape.back());
      tape.pop_back();
      update_frame<U> uf;
      bind(uf, st);
      std::copy_n(su.old_target.data(), su.old_target.size(), st.s[Layout::template state_index<typename U::target>].data());
      for (std::size_t c = 0; c < update_frame<U>::nc; ++c) {
        uf.calls[c] = std::move(su.calls[c]);
        uf.f.calls[c] = uf.calls[c].outs.back().data();
        if (uf.calls[c].input.data()) uf.calls[c].in = uf.calls[c].input.data();
      }
      apply_adjoint<U>(l, uf, st);
    });
  }

  /// Linear head and mean softmax cross-entropy; seeds the output variable's cotangent.
  T head(states& st, std::span<const int> labels) {
    const std::size_t C = o_.classes, B = o_.batch, W = o_.width;
    cmap Wh(&params_[head_offset_], C, W), out(st.s[output_].data(), W, B);
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> bh(&params_[head_offset_ + C * W], C);
    buffer<T> logits_buf(tracker_, C * B);
    Eigen::Map<matrix> Z(logits_buf.data(), C, B);
    Z.noalias() = Wh * out;
    Z.colwise() += bh;
    double loss = 0;
    for (std::size_t j = 0; j < B; ++j) {  // softmax, then dloss/dz = (p - onehot) / B
      auto z = Z.col(j);
      const T top = z.maxCoeff();
      z = (z.array() - top).exp();
      const T sum = z.sum();
      z /= sum;
      loss -= std::log(std::max(static_cast<double>(z(labels[j])), 1e-300));
      z(labels[j]) -= T(1);
      z /= static_cast<T>(B);
    }
    Eigen::Map<matrix> gW(&grads_[head_offset_], C, W);
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> gb(&grads_[head_offset_ + C * W], C);
    gW.noalias() += Z * out.transpose();
    gb += Z.rowwise().sum();
    Eigen::Map<matrix>(st.b[output_].data(), W, B).noalias() = Wh.transpose() * Z;
    if (!std::isfinite(loss)) throw error("rewind: the loss is not finite (check the parameters and the learning rate)");
    return static_cast<T>(loss / static_cast<double>(B));
  }

  std::size_t depth_;
  options o_;
  env bindings_;
  std::size_t input_ = 0, output_ = 0;
  std::array<std::size_t, n_maps == 0 ? 1 : n_maps> map_offset_{};
  std::size_t per_layer_ = 0, head_offset_ = 0;
  std::vector<T> params_, grads_, input_grad_;
  std::array<T, 8> scalars_{};
  memory_tracker tracker_;
};

}  // namespace rwd::cpu
