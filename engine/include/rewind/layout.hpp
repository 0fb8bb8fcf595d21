// rewind: the buffer layouts that every backend shares. Which buffers a map call keeps (its
// stages), what its backward needs (scratch), and, per update of a block, where its map calls,
// its adjoint's map steps and their results sit: closed forms of the block's types and the width,
// so that a backend's memory plan is exact and the same on the CPU and the GPU.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <rewind/adjoint.hpp>
#include <rewind/budget.hpp>
#include <rewind/engine.hpp>
#include <rewind/map.hpp>
#include <rewind/pointwise.hpp>
#include <rewind/engine/layers/activation.hpp>
#include <rewind/engine/layers/conv.hpp>
#include <rewind/engine/layers/dense.hpp>
#include <rewind/engine/layers/group_norm.hpp>
#include <rewind/engine/layers/resample.hpp>
#include <rewind/engine/parameter_file.hpp>
#include <rewind/engine/safetensors.hpp>

namespace rwd {

template <class M>
struct map_layout {
  static constexpr std::size_t depth = M::depth;
  /// Each layer's needs (its kind's layer_rule<K>::buffers).
  static constexpr std::array<layer_buffers, depth> buffers() {
    return hana::unpack(M::layers(), [](auto... l) { return std::array<layer_buffers, depth>{layer_rule<decltype(l)>::buffers...}; });
  }
  /// Does layer k leave its bias to layer k + 1 and write into its buffer?
  static constexpr bool fused(std::size_t k) {
    constexpr auto b = buffers();
    return b[k].hands_bias_to_next && k + 1 < depth && b[k + 1].takes_bias_of_previous;
  }
  /// Scalars per sample of the stage buffers of one call.
  static constexpr std::size_t stage_size(tensor_shape state) {
    std::size_t n = 0, k = 0;
    for (const auto& s : M::shape(state)) n += fused(k++) ? 0 : s.out;
    return n;
  }
  /// Scalars per sample of the backward scratch (not counting the output cotangent and result):
  /// the input cotangents of the layers that write their own, but the first such layer's.
  static constexpr std::size_t scratch_size(tensor_shape state) {
    constexpr auto b = buffers();
    std::size_t n = 0, k = 0;
    bool first = true;
    for (const auto& s : M::shape(state))
      if (b[k++].own_input_cotangent) {
        if (!first) n += s.in;
        first = false;
      }
    return n;
  }
  /// May the output cotangent overwrite the map's output (its last layer's backward does not
  /// read it)?
  static constexpr bool output_free_in_backward() { return !buffers()[depth - 1].backward_reads_output; }
  /// Scalars per sample of the map's output: its last stage.
  static constexpr std::size_t output_size(tensor_shape state) { return M::shape(state)[depth - 1].out; }

  /// Scalars per sample of the workspace the layers' passes use and do not keep (the largest).
  static constexpr std::size_t work_size(tensor_shape state) {
    std::size_t n = 0, k = 0;
    const auto shape = M::shape(state);
    hana::for_each(M::layers(), [&](auto l) {
      if constexpr (requires { layer_rule<decltype(l)>::workspace(shape[k]); }) n = std::max(n, layer_rule<decltype(l)>::workspace(shape[k]));
      ++k;
    });
    return n;
  }
  /// Why the map's layers cannot take an input of this shape ("" when they can), the layer and
  /// its reason.
  static std::string layer_refusal(tensor_shape input) {
    const auto shape = M::shape(input);
    std::string why;
    std::size_t k = 0;
    hana::for_each(M::layers(), [&](auto l) {
      if constexpr (requires { layer_rule<decltype(l)>::accepts(shape[k].input); })
        if (why.empty() && !layer_rule<decltype(l)>::accepts(shape[k].input))
          why = "its layer " + std::to_string(k) + " (" + layer_kind<decltype(l)>::describe(input) + ") cannot take a " +
                shape[k].input.text() + " input";
      ++k;
    });
    return why;
  }
  /// Why the map cannot run on a state of this shape ("" when it can): a layer that refuses its
  /// input, or an output whose shape is not the state's.
  static std::string refusal(tensor_shape state) {
    std::string why = layer_refusal(state);
    if (why.empty() && !(M::output_shape(state) == state))
      why = "its output is " + M::output_shape(state).text() + ", not the state's " + state.text();
    return why.empty() ? why : "rewind: map " + std::string(M::name) + " (" + M::describe(state) + ") on a " + state.text() + " state: " + why;
  }

  /// Output k's buffer in a call's stages, laid out one after the other (a fused dense layer
  /// writes into its activation's buffer).
  template <class T>
  static std::array<T*, depth> outputs(T* stages, tensor_shape state, std::size_t batch) {
    std::array<T*, depth> out{};
    const auto shape = M::shape(state);
    for (std::size_t k = 0; k < depth; ++k) {
      if (fused(k)) continue;
      out[k] = stages;
      stages += shape[k].out * batch;
    }
    for (std::size_t k = 0; k + 1 < depth; ++k)  // the last layer is never fused
      if (fused(k)) out[k] = out[k + 1];
    return out;
  }
  /// Where layer k's parameters start in the map's block of the arena.
  static std::array<std::size_t, depth> offsets(tensor_shape state) {
    std::array<std::size_t, depth> at{};
    const auto shape = M::shape(state);
    for (std::size_t k = 0, off = 0; k < depth; ++k) {
      at[k] = off;
      off += shape[k].parameters;
    }
    return at;
  }
  /// Where layer k writes its input cotangent in the backward pass, for the layers that write
  /// their own: the first such layer straight into vjp, the others one after the other in scratch.
  template <class T>
  static std::array<T*, depth> cotangent_targets(T* scratch, T* vjp, tensor_shape state, std::size_t batch) {
    constexpr auto b = buffers();
    std::array<T*, depth> at{};
    const auto shape = M::shape(state);
    bool first = true;
    for (std::size_t k = 0; k < depth; ++k)
      if (b[k].own_input_cotangent) {
        at[k] = first ? vjp : scratch;
        if (!first) scratch += shape[k].in * batch;
        first = false;
      }
    return at;
  }
};

/// The buffers of one update U of a block with state State and runtime scalars Params: its map
/// calls, the map steps of its adjoint, their pointwise layout, and their sizes per sample.
template <class State, class Params, class U>
struct update_plan {
  using Calls = std::remove_const_t<decltype(calls_of(typename U::rhs{}))>;
  using Adjoint = decltype(adjoint(U{}));
  using Steps = std::remove_const_t<decltype(Adjoint::map_steps())>;
  using Layout = pointwise_layout<State, Calls, Params, Steps>;
  static constexpr std::size_t n_calls = Layout::n_calls, n_steps = Layout::n_steps;

  /// Does the backward pass leave call C's output unread: its map's backward does not read it
  /// and no expression of the adjoint does?
  template <class C>
  static constexpr bool output_unread() {
    if constexpr (!map_layout<typename C::map_type>::output_free_in_backward()) return false;
    else
      return !hana::unpack(Adjoint::steps(), [](auto... s) {
        return (step_reads_call<C>(s) || ... || false);
      });
  }
  /// May the cotangent of this step overwrite the call's output? Only when the backward pass
  /// leaves the output unread.
  template <class Step>
  static constexpr bool cotangent_in_output() {
    return output_unread<typename Step::call_type>();
  }
  template <class C, class S>
  static constexpr bool step_reads_call(S) {
    if constexpr (detail::is_map_step<S>) return reads_call<C>(typename S::cotangent{});
    else return reads_call<C>(typename S::value{});
  }
  /// Per sample: each call's input (when its argument is an expression) and stage buffers.
  static constexpr std::size_t calls_size(tensor_shape state) {
    std::size_t n = 0;
    hana::for_each(Calls{}, [&](auto t) {
      using C = typename decltype(t)::type;
      n += (state_variable<typename C::argument> ? 0 : state.size()) + map_layout<typename C::map_type>::stage_size(state);
    });
    return n;
  }
  /// Per sample: the end of the calls' buffers that the backward pass never reads, the last
  /// call's output where it is unread (output_unread): a stored tape lets the next entry
  /// overwrite it once the update has used it.
  static constexpr std::size_t calls_free_tail(tensor_shape state) {
    std::size_t n = 0;
    hana::for_each(Calls{}, [&](auto t) {
      using C = typename decltype(t)::type;
      n = output_unread<C>() ? map_layout<typename C::map_type>::output_size(state) : 0;
    });
    return n;
  }
  /// Per sample: each map step's cotangent (unless it reuses the output), scratch and result.
  static constexpr std::size_t steps_size(tensor_shape state) {
    std::size_t n = 0;
    hana::for_each(Steps{}, [&](auto s) {
      using S = typename decltype(s)::type;
      n += (cotangent_in_output<S>() ? 0 : state.size()) + map_layout<typename S::call_type::map_type>::scratch_size(state) + state.size();
    });
    return n;
  }
};

/// Where one update's call and step buffers sit (pointers of type T, host or device), and its
/// pointwise frame.
template <class T, class State, class Params, class U>
struct update_frame {
  using P = update_plan<State, Params, U>;
  using Layout = typename P::Layout;
  typename Layout::template frame<T> f{};
  std::array<const T*, P::n_calls == 0 ? 1 : P::n_calls> call_in{};
  std::array<T*, P::n_calls == 0 ? 1 : P::n_calls> call_input{}, call_stages{}, call_out{};
  std::array<T*, P::n_steps == 0 ? 1 : P::n_steps> cot{}, scratch{}, vjp{};

  /// Points the frame at the state and cotangents (each st.s[k], st.b[k] has data()) and at the
  /// runtime scalars.
  template <class States, class Scalars>
  void bind(const States& st, const Scalars& scalars) {
    for (std::size_t k = 0; k < Layout::n_state; ++k) f.state[k] = st.s[k].data(), f.bars[k] = st.b[k].data();
    if constexpr (Layout::n_params > 0)
      for (std::size_t p = 0; p < Layout::n_params; ++p) f.params[p] = scalars[p];
  }
  /// Places the calls' inputs (for calls on an expression) and stages from `base`; returns the end.
  T* place_calls(T* base, tensor_shape state, std::size_t batch) {
    std::size_t c = 0;
    hana::for_each(typename P::Calls{}, [&](auto t) {
      using C = typename decltype(t)::type;
      if constexpr (!state_variable<typename C::argument>) {
        call_input[c] = base;
        base += state.size() * batch;
      }
      call_stages[c] = base;
      base += map_layout<typename C::map_type>::stage_size(state) * batch;
      ++c;
    });
    return base;
  }
  /// Links the calls' inputs and outputs to buffers already filled (a stored tape entry, after
  /// place_calls on it): the output is the last stage of each call.
  void relink_calls(tensor_shape state, std::size_t batch) {
    std::size_t c = 0;
    hana::for_each(typename P::Calls{}, [&](auto t) {
      using C = typename decltype(t)::type;
      using M = typename C::map_type;
      if constexpr (state_variable<typename C::argument>) call_in[c] = f.state[Layout::template state_index<typename C::argument>];
      else call_in[c] = call_input[c];
      call_out[c] = map_layout<M>::outputs(call_stages[c], state, batch)[M::depth - 1];
      f.calls[c] = call_out[c];
      ++c;
    });
  }
  /// Places each map step's cotangent (or reuses the call's output), scratch and result from
  /// `base`; after place_calls and the calls' forward (call_out).
  void place_steps(T* base, tensor_shape state, std::size_t batch) {
    std::size_t j = 0;
    hana::for_each(typename P::Steps{}, [&](auto s) {
      using S = typename decltype(s)::type;
      using C = typename S::call_type;
      if constexpr (P::template cotangent_in_output<S>()) {
        cot[j] = call_out[Layout::template call_index<C>];
      } else {
        cot[j] = base;
        base += state.size() * batch;
      }
      scratch[j] = base;
      base += map_layout<typename C::map_type>::scratch_size(state) * batch;
      vjp[j] = base;
      base += state.size() * batch;
      ++j;
    });
  }
};

/// The position of the state variable called `name` in State; an error naming it otherwise.
template <class State>
std::size_t state_index_of(std::string_view name) {
  std::size_t k = 0, found = decltype(hana::length(State{}))::value;
  hana::for_each(State{}, [&](auto t) {
    if (decltype(t)::type::name == name) found = k;
    ++k;
  });
  if (found == decltype(hana::length(State{}))::value)
    throw error("rewind: '" + std::string(name) + "' is not a state variable of the block");
  return found;
}

namespace detail {
/// f(k, layer, shape, at) for layer k of map M on a state of shape `state`, `at` its first
/// parameter when the map's start at `base`.
template <class M, class F>
void for_each_map_layer(tensor_shape state, std::size_t base, const F& f) {
  const auto shape = M::shape(state);
  const auto at = map_layout<M>::offsets(state);
  std::size_t k = 0;
  hana::for_each(M::layers(), [&](auto layer) {
    f(k, layer, shape[k], base + at[k]);
    ++k;
  });
}

/// Glorot-uniform draws in order from one generator: rows x cols values in
/// [-a, a], a = scale sqrt(6 / (rows + cols)).
struct glorot_draws {
  std::mt19937_64 rng;
  template <class T>
  void operator()(T* w, std::size_t rows, std::size_t cols, double scale) {
    const double a = scale * std::sqrt(6.0 / static_cast<double>(rows + cols));
    for (std::size_t i = 0; i < rows * cols; ++i) w[i] = static_cast<T>((static_cast<double>(rng() >> 11) * 0x1.0p-53 * 2 - 1) * a);
  }
};

/// Map M's starting values from `base` (layer_rule<K>::initialise: Glorot-uniform weights, zero
/// biases), its last layer with parameters scaled by output_scale.
template <class M, class T>
void initialise_map(std::span<T> params, tensor_shape state, std::size_t base, double output_scale, glorot_draws& draws) {
  const auto shapes = M::shape(state);
  std::size_t last_learned = 0;
  for (std::size_t j = 0; j < shapes.size(); ++j) last_learned = shapes[j].parameters ? j : last_learned;
  for_each_map_layer<M>(state, base, [&](std::size_t k, auto layer, const layer_shape& shape, std::size_t at) {
    if constexpr (requires(T* p, const layer_shape& s) { layer_rule<decltype(layer)>::initialise(p, s, 1.0, draws); })
      layer_rule<decltype(layer)>::initialise(&params[at], shape, k == last_learned ? output_scale : 1.0, draws);
  });
}

/// Tensor x of a layer whose parameters start at `at`, named `name`.
inline named_tensor named(std::string name, const layer_tensor& x, std::size_t at) {
  const auto rank = static_cast<std::ptrdiff_t>(x.rank);
  std::vector<std::uint64_t> strides(x.strides.begin(), x.strides.begin() + rank);
  if (std::count(strides.begin(), strides.end(), 0) == rank) strides.clear();  // row-major
  return {std::move(name), std::vector<std::uint64_t>(x.shape.begin(), x.shape.begin() + rank), at + x.offset, std::move(strides)};
}

/// Map M's tensors from `base` as `{prefix}{k}.{tensor}`, k counting every layer of the map
/// (activations too, as torch.nn.Sequential numbers its modules).
template <class M>
void map_tensors(std::vector<named_tensor>& out, const std::string& prefix, tensor_shape state, std::size_t base) {
  for_each_map_layer<M>(state, base, [&](std::size_t k, auto layer, const layer_shape& shape, std::size_t at) {
    if constexpr (requires { layer_rule<decltype(layer)>::tensors(shape); })
      for (const layer_tensor& x : layer_rule<decltype(layer)>::tensors(shape))
        out.push_back(named(prefix + std::to_string(k) + "." + std::string(x.name), x, at));
  });
}
}  // namespace detail

/// Where the parameters of a block stacked `depth` times, with a linear head, sit in one flat
/// arena: layer l's map M at l * per_layer + map_offset[M], each dense layer as its weights
/// (out x in, column-major) then its biases; the head (classes x width, then classes biases)
/// after the last layer. The same on every backend, so parameters move between them as they are.
template <class Block>
struct parameter_layout {
  using Maps = std::remove_const_t<decltype(Block::maps())>;
  static constexpr std::size_t n_maps = decltype(hana::length(Maps{}))::value;
  tensor_shape state;  // each state variable's shape per sample
  std::size_t width = 0, depth = 0, classes = 0;  // width: state.size()
  std::array<std::size_t, n_maps == 0 ? 1 : n_maps> map_offset{};
  std::size_t per_layer = 0, head = 0, total = 0;

  /// Refuses (rwd::error) a block whose maps cannot run on a state of this shape.
  parameter_layout(tensor_shape state_, std::size_t depth_, std::size_t classes_)
      : state(state_), width(state_.size()), depth(depth_), classes(classes_) {
    hana::for_each(Maps{}, [&](auto t) {
      using M = typename decltype(t)::type;
      if (const std::string why = map_layout<M>::refusal(state); !why.empty()) throw error(why);
      map_offset[index_of<M>()] = per_layer;
      per_layer += M::parameter_count(state);
    });
    head = per_layer * depth;
    total = head + classes * width + classes;
  }
  template <class M>
  static constexpr std::size_t index_of() {
    return detail::index_in<M>(Maps{});
  }
  template <class M>
  std::size_t offset(std::size_t layer) const {
    return layer * per_layer + map_offset[index_of<M>()];
  }

  /// The header of a parameter file holding this arena: the shapes, and a fingerprint of the
  /// block's printed updates and maps, and of the state's shape when it has positions (a file is
  /// read back only into the same block and shapes).
  parameter_file_header file_header() const {
    parameter_file_header h;
    h.width = width;
    h.classes = classes;
    h.depth = depth;
    h.count = total;
    std::string text;
    hana::for_each(Block::updates(), [&](auto u) { text += u.text() + ";"; });
    hana::for_each(Maps{}, [&](auto t) { text += typename decltype(t)::type{}.describe() + ";"; });
    if (!state.flat()) text += "state " + state.text() + ";";
    h.block_fingerprint = fnv1a(text.data(), text.size());
    return h;
  }
  /// The fingerprint with the shapes, as a safetensors file's metadata states it.
  std::string fingerprint_text() const {
    const auto h = file_header();
    return detail::safetensors::hex(h.block_fingerprint) + " width " + state.text() + " depth " + std::to_string(depth) +
           " classes " + std::to_string(classes);
  }

  /// The arena as named tensors: layer l's map M's layer k as `layer{l}.{M}.{k}.{tensor}`
  /// (detail::map_tensors), and the head (when there are classes) as `head.weight` (classes,
  /// width) and `head.bias`.
  std::vector<named_tensor> tensors() const {
    std::vector<named_tensor> out;
    for (std::size_t l = 0; l < depth; ++l)
      hana::for_each(Maps{}, [&](auto t) {
        using M = typename decltype(t)::type;
        detail::map_tensors<M>(out, "layer" + std::to_string(l) + "." + std::string(M::name) + ".", state, offset<M>(l));
      });
    if (classes == 0) return out;
    out.push_back({"head.weight", {classes, width}, head, {1, classes}});  // held column-major
    out.push_back({"head.bias", {classes}, head + classes * width, {}});
    return out;
  }

  /// Writes the arena to `path`: a safetensors file where the name ends in .safetensors, else
  /// rewind's own parameter file; either way atomically, with a checksum and the block's
  /// fingerprint.
  template <class T>
  void save(const std::string& path, std::span<const T> params) const {
    if (is_safetensors(path)) write_safetensors<T>(path, tensors(), params, {{"rewind.block", fingerprint_text()}});
    else write_parameter_file<T>(path, file_header(), params);
  }
  /// Reads what save() writes (a safetensors file may also come from elsewhere: it is read by its
  /// tensors' names and shapes); validated whole before it is returned.
  template <class T>
  std::vector<T> load(const std::string& path) const {
    if (is_safetensors(path)) return read_safetensors<T>(path, tensors(), total, {{"rewind.block", fingerprint_text()}});
    auto values = read_parameter_file<T>(path, file_header());
    for (T v : values)
      if (!std::isfinite(v)) throw error("rewind: " + path + ": holds a non-finite parameter");
    return values;
  }
  static bool is_safetensors(const std::string& path) { return path.ends_with(".safetensors"); }

  /// Each layer's starting values (layer_rule<K>::initialise: Glorot-uniform weights, zero
  /// biases; each map's last layer with parameters scaled by output_scale), from
  /// std::mt19937_64(seed) in arena order: the same on every machine and backend.
  template <class T>
  void initialise(std::span<T> params, std::uint64_t seed, double output_scale) const {
    detail::glorot_draws draws{std::mt19937_64(seed)};
    std::fill(params.begin(), params.end(), T(0));
    for (std::size_t l = 0; l < depth; ++l)
      hana::for_each(Maps{}, [&](auto t) {
        using M = typename decltype(t)::type;
        detail::initialise_map<M>(params, state, offset<M>(l), output_scale, draws);
      });
    if (classes) draws(&params[head], classes, width, 1.0);
  }
};

/// Layers per segment of mode::checkpointed: as asked, or (0) floor(L*/2) from the block's budget
/// (16 when the budget is data-dependent, the whole depth when it is unlimited).
inline std::size_t checkpoint_segment(std::size_t asked, const budget_report& b, std::size_t depth) {
  if (asked) return asked;
  return !b.known() ? 16 : b.unlimited() ? depth : std::max<std::size_t>(1, static_cast<std::size_t>(b.layers / 2));
}

}  // namespace rwd
