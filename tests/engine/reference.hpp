// The tests' reference executor: the engine's step (rewind/engine/step.hpp) in plain loops over
// the dsl's element evaluator (rwd::evaluate), in double, with no Eigen and no CUDA; and a
// reference model that runs a whole step through it. It is the oracle the backends' executors
// are held to: a third executor that shares nothing with them but the engine and the dsl.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <rewind/engine/step.hpp>

namespace reference {

/// rwd::map_executor in loops over column-major buffers.
struct loop_ops {
  using T = double;
  void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, T beta, T* c) const {
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t i = 0; i < m; ++i) {
        T sum = 0;
        for (std::size_t p = 0; p < k; ++p) sum += (ta ? a[p + i * k] : a[i + p * m]) * (tb ? b[j + p * n] : b[p + j * k]);
        c[i + j * m] = (beta == 0 ? 0 : c[i + j * m]) + sum;
      }
  }
  template <class Fn>
  void bias(T* y, const T* b, std::size_t rows, std::size_t cols) const {
    for (std::size_t i = 0; i < rows * cols; ++i) {
      const T u = y[i] + b[i % rows];
      if constexpr (std::is_void_v<Fn>) y[i] = u;
      else y[i] = Fn::value(u);
    }
  }
  template <class Fn>
  void activation(const T* x, T* y, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) y[i] = Fn::value(x[i]);
  }
  void bias_gradient(const T* g, T* gb, std::size_t rows, std::size_t cols) const {
    for (std::size_t i = 0; i < rows * cols; ++i) gb[i % rows] += g[i];
  }
  template <class Fn>
  void activation_backward(T* g, const T* y, T* copy, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) {
      g[i] *= Fn::derivative_from_output(y[i]);
      if (copy) copy[i] = g[i];
    }
  }
  template <class Op>
  void each(const Op& op, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) op(i);
  }
};

/// The step executor (see rewind/engine/step.hpp) element by element.
struct executor {
  using T = double;
  const rwd::env* bindings = nullptr;

  loop_ops maps() const { return {}; }
  template <class Layout, class E, class Frame>
  void assign(const Frame& f, T* out, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) out[i] = rwd::evaluate<Layout, E, T>(f, i);
  }
  template <class Layout, class E, class Frame>
  void accumulate(const Frame& f, T* out, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) out[i] += rwd::evaluate<Layout, E, T>(f, i);
  }
  void copy(T* dst, const T* src, std::size_t n) const { std::copy_n(src, n, dst); }
  template <class Layout, class U, class Rhs, class Frame>
  void update(const Frame& f, T* target, std::size_t n, rwd::update_site at) const {
    std::size_t bad = 0;
    if constexpr (rwd::coefficient_kind_of<U>() == rwd::coefficient_kind::data_dependent) {
      const auto bounds = rwd::alpha_bounds_of<T, U>(*bindings);
      for (std::size_t i = 0; i < n; ++i) bad += !bounds.accepts(rwd::evaluate<Layout, typename U::alpha, T>(f, i));
    }
    for (std::size_t i = 0; i < n; ++i) target[i] = rwd::evaluate<Layout, Rhs, T>(f, i);
    if (bad) throw rwd::error(rwd::e002_elements(U::text(), rwd::to_string(rwd::range_of(typename U::alpha{}, *bindings)), at.layer, bad, n));
  }
  void softmax_cross_entropy(T* z, const int* labels, double* loss, std::size_t classes, std::size_t count, std::size_t batch) const {
    for (std::size_t j = 0; j < count; ++j) {
      T* col = z + j * classes;
      const T top = *std::max_element(col, col + classes);
      T sum = 0;
      for (std::size_t k = 0; k < classes; ++k) sum += col[k] = std::exp(col[k] - top);
      loss[j] = -std::log(col[labels[j]] / sum);
      for (std::size_t k = 0; k < classes; ++k) col[k] = (col[k] / sum - (static_cast<int>(k) == labels[j] ? 1.0 : 0.0)) / static_cast<T>(batch);
    }
  }
};

/// A model of Block stacked `depth` times whose step runs through a host executor (the
/// reference's by default): the whole batch as one lane, host vectors for every buffer.
template <class Block, class Exec = executor>
class model {
  using engine_type = rwd::step_engine<double, Block, Exec>;
  static constexpr std::size_t ns = Block::state_size;

 public:
  model(Block, std::size_t depth, const rwd::options& o, const rwd::env& bindings = {})
      : o_(with_shape_width(o)), bindings_(bindings), arena_(state_shape(o_), depth, o_.classes), params_(arena_.total), grads_(arena_.total) {
    depth_ = depth;
    segment_ = rwd::checkpoint_segment(o.checkpoint_every, rwd::budget<double>(Block{}, bindings), depth);
    input_ = rwd::state_index_of<std::remove_const_t<decltype(Block::state())>>(o.input);
    output_ = rwd::state_index_of<std::remove_const_t<decltype(Block::state())>>(o.output);
    scalars_ = engine_type::scalars(bindings);
    arena_.initialise(std::span<double>(params_), o.seed, o.output_init_scale);
  }

  std::vector<double>& parameters() { return params_; }
  const std::vector<double>& gradients() const { return grads_; }
  const std::vector<double>& input_gradient() const { return input_grad_; }
  std::size_t per_layer() const { return arena_.per_layer; }

  /// Mean softmax cross-entropy of the batch in mode m (stored, reversible or checkpointed).
  double loss_and_gradient(std::span<const double> batch, std::span<const int> labels, rwd::mode m) {
    const std::size_t wb = o_.width * o_.batch;
    std::fill(grads_.begin(), grads_.end(), 0.0);
    lanes st(*this, engine_type::work_per_sample(m, rwd::state_shape(o_), o_.classes));
    std::copy(batch.begin(), batch.end(), st.s[input_].begin());
    std::vector<double> tape(engine_type::tape_size(m, rwd::state_shape(o_), o_.batch, depth_, segment_)), losses(o_.batch);
    const engine_type eng = engine();
    eng.forward(st.ln, m, tape.data());
    st.ln.grads = grads_.data() + arena_.head;
    eng.head(st.ln, labels.data(), losses.data());
    for (std::size_t l = depth_; l-- > 0;) {
      st.ln.grads = grads_.data() + l * arena_.per_layer;
      eng.backward(l, st.ln, m, tape.data());
    }
    input_grad_.assign(st.b[input_].begin(), st.b[input_].begin() + static_cast<std::ptrdiff_t>(wb));
    double loss = 0;
    for (double v : losses) loss += v;
    return loss / static_cast<double>(o_.batch);
  }

  /// One layer forward from `state` (variables one after the other); returns the next state.
  std::vector<double> forward_layer(std::size_t l, const std::vector<double>& state) {
    lanes st(*this, engine_type::work_per_sample(rwd::mode::reversible, rwd::state_shape(o_), o_.classes));
    st.load(state);
    engine().forward_layer(l, st.ln, nullptr);
    return st.flat();
  }
  /// One layer rewound from `state`; with a cotangent `bar` of the layer's output, the layer's
  /// adjoint too: bar becomes the input's cotangent and `grads` (one layer's parameters) gets
  /// the parameters'.
  std::vector<double> rewind_layer(std::size_t l, const std::vector<double>& state, std::vector<double>* bar = nullptr,
                                   std::vector<double>* grads = nullptr) {
    lanes st(*this, engine_type::work_per_sample(rwd::mode::reversible, rwd::state_shape(o_), o_.classes));
    st.load(state);
    if (bar) {
      for (std::size_t k = 0; k < ns; ++k) std::copy_n(bar->data() + k * st.wb, st.wb, st.b[k].data());
      grads->assign(arena_.per_layer, 0.0);
      st.ln.grads = grads->data();
    }
    engine().rewind_layer(l, st.ln, bar != nullptr);
    if (bar)
      for (std::size_t k = 0; k < ns; ++k) std::copy_n(st.b[k].data(), st.wb, bar->data() + k * st.wb);
    return st.flat();
  }

 private:
  struct lanes {
    std::size_t wb;
    std::vector<std::vector<double>> s, b;
    std::vector<double> work;
    typename engine_type::lane_type ln;
    lanes(const model& m, std::size_t work_per_sample)
        : wb(m.o_.width * m.o_.batch), s(ns, std::vector<double>(wb)), b(ns, std::vector<double>(wb)), work(work_per_sample * m.o_.batch) {
      for (std::size_t k = 0; k < ns; ++k) ln.s[k].p = s[k].data(), ln.b[k].p = b[k].data();
      ln.count = m.o_.batch;
      ln.work = work.data();
    }
    void load(const std::vector<double>& state) {
      for (std::size_t k = 0; k < ns; ++k) std::copy_n(state.data() + k * wb, wb, s[k].data());
    }
    std::vector<double> flat() const {
      std::vector<double> out;
      for (const auto& v : s) out.insert(out.end(), v.begin(), v.end());
      return out;
    }
  };

  /// Every pass of this model is a training step's (its dropout masks are those of a model's first
  /// step: the seed and no update yet), so the layer laws hold with the masks drawn.
  engine_type engine() const {
    return engine_type({rwd::state_shape(o_), o_.batch, o_.classes, depth_, segment_, input_, output_, rwd::noise_key(o_.seed, 0)}, arena_,
                       params_.data(), scalars_,
                       Exec{&bindings_});
  }

  rwd::options o_;
  rwd::env bindings_;
  rwd::parameter_layout<Block> arena_;
  std::vector<double> params_, grads_, input_grad_;
  std::size_t depth_ = 0, segment_ = 1, input_ = 0, output_ = 0;
  typename engine_type::scalars_type scalars_{};
};

}  // namespace reference
