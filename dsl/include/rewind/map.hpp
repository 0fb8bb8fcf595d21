// rewind: learned maps, whose architecture is part of their type.
//
//   inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
//
// is width -> 16 -> tanh -> width: dense layers with an output width (a number, or the width of
// the state), elementwise activations between them. `f(x)` is a call node in an expression.
// On a state with a shape (channels x height x width, rwd::tensor_shape) a map may also hold
// convolutions and normalizations:
//
//   rwd::map<"f">(rwd::conv<32, 3>, rwd::group_norm<4>, rwd::relu, rwd::conv_same<3>)
//
// is a 3x3 convolution to 32 channels, group norm, relu, and a 3x3 convolution back to the
// state's channels. A dense layer sees a shaped input flattened (in storage order, channels
// last); a 1x1 convolution is the dense layer applied at every position.
// A map may declare the interval its Jacobian's slope lives in (`.slope(-1_c, 0_c)`, or
// `.lipschitz(1_c)` for [-1, 1]); the budget analysis takes the worst case over it. Without one,
// the analysis assumes slope 0 and says so. A map may also declare the interval its output lies
// in (`.range(-1_c, 1_c)`); a map whose last layer is an activation has that function's range
// without one (tanh: (-1, 1)). The budget of a coefficient computed from the data, such as
// exp(s(w)), follows from these ranges. Two calls of the same map in one layer share its
// parameters (the two kicks of leapfrog use the same force).
//
// Slopes of maps with a normalization: a normalization divides by its input's spread, so no
// slope follows from its type; the analysis knows only what the map declares (slope 0
// otherwise, as for any map), and the declaration is the user's claim about the trained map.
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <string>

#include "diagnostics.hpp"
#include "expr.hpp"
#include "tensor_shape.hpp"

/// What a map's layers may be, for the static_assert that refuses anything else.
#define REWIND_MAP_LAYERS                                                                                   \
  "rewind: the layers of a map are dense<N>, dense_same, conv<N, K>, conv_same<K>, group_norm<G>, "        \
  "layer_norm, dropout(p), squeeze, avg_pool<K>, or activations such as rwd::tanh"

namespace rwd {

/// A dense layer y = W u + b with N outputs; N == 0 means "as wide as the state".
template <std::size_t N>
struct dense_layer {
  static constexpr std::size_t width = N;
};
template <std::size_t N>
inline constexpr dense_layer<N> dense{};
inline constexpr dense_layer<0> dense_same{};

/// No slope interval declared: the analysis assumes slope 0 (the napkin) and says so.
struct undeclared_slope {};
template <long long LN, long long LD, long long HN, long long HD>
struct declared_slope {
  static_assert(rational{LN, LD}.value() <= rational{HN, HD}.value(),
                "rewind: a slope interval needs lo <= hi");
  static constexpr rational lo{LN, LD}, hi{HN, HD};
};

/// No output range declared: the last layer's (an activation's range, or all reals).
struct undeclared_range {};
template <long long LN, long long LD, long long HN, long long HD>
struct declared_range {
  static_assert(rational{LN, LD}.value() <= rational{HN, HD}.value(), "rewind: a range needs lo <= hi");
  static constexpr rational lo{LN, LD}, hi{HN, HD};
};

/// One layer of a map at run time: its input and output shapes per sample (and their sizes, in
/// and out) and its learned scalars.
struct layer_shape {
  std::size_t in = 0, out = 0, parameters = 0;
  tensor_shape input{}, output{};
};

/// What the language knows of a layer kind; how it runs is the engine's (one header per kind
/// under rewind/engine/layers/). A kind specialises layer_kind with
///   out(in, state)              its output shape for an input shape, in a state of that shape
///   parameter_count(in, out)    learned scalars
///   fixed_width                 the output channels it sets (0: the state's), or none (-1: its
///                               input's), for E008
///   keeps_output                whether its backward pass reads its output (explain's count)
///   bound(x)                    its output's limit at x = -inf or +inf (the map's range when it
///                               is the last layer)
///   describe(state)             its part of "784 -> 16 -> tanh -> 784"
template <class L>
struct layer_kind;

/// A dense layer sees its input flattened (all of a sample's values, in storage order); its
/// output is a flat vector, or the state's shape for dense_same.
template <std::size_t N>
struct layer_kind<dense_layer<N>> {
  static constexpr tensor_shape out(tensor_shape, tensor_shape state) { return N == 0 ? state : tensor_shape{N}; }
  static constexpr std::size_t parameter_count(tensor_shape in, tensor_shape out) { return out.size() * in.size() + out.size(); }
  static constexpr long long fixed_width = static_cast<long long>(N);
  static constexpr bool keeps_output = false;
  static constexpr double bound(double x) { return x; }
  static std::string describe(tensor_shape state) { return N == 0 ? state.text() : std::to_string(N); }
};

template <class F>
struct layer_kind<elementwise<F>> {
  static constexpr tensor_shape out(tensor_shape in, tensor_shape) { return in; }
  static constexpr std::size_t parameter_count(tensor_shape, tensor_shape) { return 0; }
  static constexpr long long fixed_width = -1;
  static constexpr bool keeps_output = true;
  static constexpr double bound(double x) { return F::bound(x); }
  static std::string describe(tensor_shape) { return std::string(F::name); }
};

/// A K x K convolution with stride 1 and same (zero) padding, N output channels (0: the state's),
/// and a bias per output channel; positions are kept. K is odd.
template <std::size_t N, std::size_t K>
struct conv_layer {
  static_assert(K % 2 == 1, "rewind: a same-padded convolution has an odd kernel size");
  static constexpr std::size_t channels = N, kernel = K;
};
template <std::size_t N, std::size_t K>
inline constexpr conv_layer<N, K> conv{};
template <std::size_t K>
inline constexpr conv_layer<0, K> conv_same{};

template <std::size_t N, std::size_t K>
struct layer_kind<conv_layer<N, K>> {
  static constexpr tensor_shape out(tensor_shape in, tensor_shape state) { return {N == 0 ? state.c : N, in.h, in.w}; }
  static constexpr std::size_t parameter_count(tensor_shape in, tensor_shape out) { return out.c * in.c * K * K + out.c; }
  static constexpr long long fixed_width = static_cast<long long>(N);
  static constexpr bool keeps_output = false;
  static constexpr double bound(double x) { return x; }
  static std::string describe(tensor_shape) {
    return "conv" + std::to_string(K) + "x" + std::to_string(K) + (N == 0 ? std::string() : " " + std::to_string(N));
  }
};

/// Group normalization: the channels in G groups, each group of each sample normalised over its
/// channels and positions to mean 0 and variance 1 (plus eps = 1e-5), then scaled and shifted per
/// channel (gamma, beta: torch.nn.GroupNorm's affine parameters). group_norm<1> is layer norm over
/// a sample. The channel count must be a multiple of G.
template <std::size_t G>
struct group_norm_layer {
  static_assert(G > 0, "rewind: group norm needs at least one group");
  static constexpr std::size_t groups = G;
};
template <std::size_t G>
inline constexpr group_norm_layer<G> group_norm{};
inline constexpr group_norm_layer<1> layer_norm{};

template <std::size_t G>
struct layer_kind<group_norm_layer<G>> {
  static constexpr tensor_shape out(tensor_shape in, tensor_shape) { return in; }
  static constexpr std::size_t parameter_count(tensor_shape in, tensor_shape) { return 2 * in.c; }
  static constexpr long long fixed_width = -1;
  static constexpr bool keeps_output = false;
  /// Normalised values are bounded by sqrt(group size) but gamma and beta are learned: unbounded.
  static constexpr double bound(double x) { return x; }
  static std::string describe(tensor_shape) { return G == 1 ? std::string("layer norm") : "group norm " + std::to_string(G); }
};

/// Dropout: in a training step each value is kept with probability 1 - p and scaled by 1/(1 - p),
/// or zeroed; the masks come from a counter-based generator keyed by the step, the layer and the
/// element, so the rewind and the backward pass draw the forward's mask again and nothing is
/// stored. Outside a training step (predict, forward, rewind) it passes its input through.
/// Written rwd::dropout(0.1_c): p an exact rational in [0, 1).
template <long long N, long long D>
struct dropout_layer {
  static_assert(N >= 0 && N < D, "rewind: a dropout probability p lies in [0, 1)");
  static constexpr rational p{N, D};
};
template <long long N, long long D>
constexpr dropout_layer<N, D> dropout(constant<N, D>) {
  return {};
}

template <long long N, long long D>
struct layer_kind<dropout_layer<N, D>> {
  static constexpr tensor_shape out(tensor_shape in, tensor_shape) { return in; }
  static constexpr std::size_t parameter_count(tensor_shape, tensor_shape) { return 0; }
  static constexpr long long fixed_width = -1;
  static constexpr bool keeps_output = false;
  /// 0 or x / (1 - p): the limits of x / (1 - p), and 0 inside
  static constexpr double bound(double x) { return x / (1 - dropout_layer<N, D>::p.value()); }
  static std::string describe(tensor_shape) { return "dropout " + detail::format_rational(dropout_layer<N, D>::p); }
};

/// Space to depth by 2 as a layer (Glow's and i-RevNet's squeeze, torch's pixel_unshuffle(x, 2)):
/// c x h x w becomes 4c x h/2 x w/2, nothing learned; h and w must be even. In a stem or a
/// transition map it halves the resolution: rwd::squeeze then rwd::conv<N, 1> is a 2x2
/// convolution with stride 2.
struct squeeze_layer {};
inline constexpr squeeze_layer squeeze{};

template <>
struct layer_kind<squeeze_layer> {
  static constexpr tensor_shape out(tensor_shape in, tensor_shape) { return {4 * in.c, in.h / 2, in.w / 2}; }
  static constexpr std::size_t parameter_count(tensor_shape, tensor_shape) { return 0; }
  static constexpr long long fixed_width = -1;
  static constexpr bool keeps_output = false;
  static constexpr double bound(double x) { return x; }
  static std::string describe(tensor_shape) { return "squeeze"; }
};

/// Average pooling over K x K windows with stride K (torch.nn.AvgPool2d(K)): c x h x w becomes
/// c x h/K x w/K, nothing learned; h and w must be multiples of K.
template <std::size_t K>
struct avg_pool_layer {
  static_assert(K > 0, "rewind: a pooling window has at least one position");
  static constexpr std::size_t window = K;
};
template <std::size_t K>
inline constexpr avg_pool_layer<K> avg_pool{};

template <std::size_t K>
struct layer_kind<avg_pool_layer<K>> {
  static constexpr tensor_shape out(tensor_shape in, tensor_shape) { return {in.c, in.h / K, in.w / K}; }
  static constexpr std::size_t parameter_count(tensor_shape, tensor_shape) { return 0; }
  static constexpr long long fixed_width = -1;
  static constexpr bool keeps_output = false;
  static constexpr double bound(double x) { return x; }
  static std::string describe(tensor_shape) { return "avg pool " + std::to_string(K); }
};

/// A layer of a map: a type with a layer_kind.
template <class L>
concept map_layer = requires { layer_kind<L>::out(tensor_shape{}, tensor_shape{}); };

template <class Name, class Slope, class Range, class... Layers>
struct learned_map : detail::map_tag {
  static constexpr std::string_view name = Name::view();
  static constexpr std::size_t depth = sizeof...(Layers);
  static constexpr std::size_t activation_count = (std::size_t{layer_kind<Layers>::keeps_output} + ... + 0);
  static constexpr bool slope_declared = !std::is_same_v<Slope, undeclared_slope>;
  using slope_type = Slope;
  static constexpr bool range_declared = !std::is_same_v<Range, undeclared_range>;
  using range_type = Range;
  /// The layers, as objects (dense_layer<N>, elementwise<Fn>, ...).
  static constexpr auto layers() { return hana::make_tuple(Layers{}...); }

  /// f(e): a call of this map on an expression.
  template <expression A>
  constexpr call<learned_map, A> operator()(A) const {
    return {};
  }
  /// The same map with its Jacobian slope declared to lie in [lo, hi] (exact rationals).
  template <long long LN, long long LD, long long HN, long long HD>
  constexpr auto slope(constant<LN, LD>, constant<HN, HD>) const {
    return learned_map<Name, declared_slope<LN, LD, HN, HD>, Range, Layers...>{};
  }
  /// The same map with a Lipschitz bound K: slopes in [-K, K].
  template <long long N, long long D>
  constexpr auto lipschitz(constant<N, D>) const {
    static_assert(N >= 0, "rewind: a Lipschitz bound is not negative");
    return learned_map<Name, declared_slope<-N, D, N, D>, Range, Layers...>{};
  }
  /// The same map with its output declared to lie in [lo, hi] (exact rationals).
  template <long long LN, long long LD, long long HN, long long HD>
  constexpr auto range(constant<LN, LD>, constant<HN, HD>) const {
    return learned_map<Name, Slope, declared_range<LN, LD, HN, HD>, Layers...>{};
  }
  /// The slope interval the analysis uses: declared, or [0, 0].
  static constexpr double slope_lo() {
    if constexpr (slope_declared) return Slope::lo.value();
    else return 0.0;
  }
  static constexpr double slope_hi() {
    if constexpr (slope_declared) return Slope::hi.value();
    else return 0.0;
  }

  /// The interval the output lies in, for the analysis: declared, else the last layer's range.
  static constexpr double range_lo() {
    if constexpr (range_declared) return Range::lo.value();
    else return last_layer_bound(-cmath::infinity);
  }
  static constexpr double range_hi() {
    if constexpr (range_declared) return Range::hi.value();
    else return last_layer_bound(cmath::infinity);
  }

  /// The layers for a state of the given shape (a number: a flat state of that width).
  static constexpr std::array<layer_shape, sizeof...(Layers)> shape(tensor_shape state) {
    std::array<layer_shape, sizeof...(Layers)> out{};
    tensor_shape x = state;
    std::size_t i = 0;
    (
        [&] {
          const tensor_shape y = layer_kind<Layers>::out(x, state);
          out[i++] = {x.size(), y.size(), layer_kind<Layers>::parameter_count(x, y), x, y};
          x = y;
        }(),
        ...);
    return out;
  }
  /// The map's output shape for a state of the given shape (E008 makes its channels the state's;
  /// the positions follow from the layers: a dense layer flattens).
  static constexpr tensor_shape output_shape(tensor_shape state) { return shape(state)[sizeof...(Layers) - 1].output; }
  /// Number of learned scalars (weights and biases) for a state of the given shape.
  static constexpr std::size_t parameter_count(tensor_shape width) {
    std::size_t n = 0;
    for (const auto& l : shape(width)) n += l.parameters;
    return n;
  }
  /// Number of scalars per sample the map keeps for its backward pass (the outputs of the layers
  /// whose backward reads them: activations).
  static constexpr std::size_t intermediate_count(tensor_shape width) {
    constexpr std::array<bool, sizeof...(Layers)> keeps{layer_kind<Layers>::keeps_output...};
    std::size_t n = 0, k = 0;
    for (const auto& l : shape(width)) n += keeps[k++] ? l.out : 0;
    return n;
  }
  /// The limit of the last layer at x = -inf or +inf: an activation's, or x itself (a dense layer).
  static constexpr double last_layer_bound(double x) {
    using last = typename decltype((std::type_identity<Layers>{}, ...))::type;
    return layer_kind<last>::bound(x);
  }

  /// "784 -> 16 -> tanh -> 784" for a state of width 784 ("W" when the shape is unknown: c = 0).
  static std::string describe(tensor_shape state = {}) {
    std::string s = state.text();
    ((s += " -> " + layer_kind<Layers>::describe(state)), ...);
    return s;
  }
};

namespace detail {
/// Does the last layer that sets a width set the state's (or does none set one)?
template <class... Layers>
constexpr bool output_is_state_width() {
  long long last = -1;
  ((last = layer_kind<Layers>::fixed_width < 0 ? last : layer_kind<Layers>::fixed_width), ...);
  return last <= 0;
}
}  // namespace detail

/// A learned map named `Name`, made of dense layers and activations, applied left to right.
template <fixed_string Name, class... Layers>
constexpr auto map(Layers...) {
  static_assert(sizeof...(Layers) > 0, REWIND_E012);
  static_assert((map_layer<Layers> && ...),
                REWIND_MAP_LAYERS);
  static_assert(detail::output_is_state_width<Layers...>(), REWIND_E008);
  return learned_map<name_of<Name>, undeclared_slope, undeclared_range, Layers...>{};
}

namespace detail {
template <class L>
inline constexpr bool is_dropout = false;
template <long long N, long long D>
inline constexpr bool is_dropout<dropout_layer<N, D>> = true;
}  // namespace detail

/// A map that starts a staged network (rwd::staged_layout): it reads the network's input, which
/// is kept (it is not inverted), so its output may have any shape: the first stage's state.
/// Layers as in rwd::map; conv_same<K> keeps the input's channels.
template <fixed_string Name, class... Layers>
constexpr auto stem(Layers...) {
  static_assert(sizeof...(Layers) > 0, REWIND_E012);
  static_assert((map_layer<Layers> && ...),
                REWIND_MAP_LAYERS);
  static_assert(!(detail::is_dropout<Layers> || ...), REWIND_E016);
  return learned_map<name_of<Name>, undeclared_slope, undeclared_range, Layers...>{};
}

/// A map between two stages of a staged network (rwd::staged_layout) that is not inverted: it
/// reads the output variable where a stage ends, which is kept, and writes the next stage's input
/// variable (the others restart at zero, as a stem leaves them), so its output may have any
/// shape: the next stage's state. A ResNet's downsampling block, as momentumnet keeps it:
/// rwd::transition<"down">(rwd::squeeze, rwd::conv<32, 1>) is a 2x2 convolution with stride 2
/// to 32 channels. Layers as in rwd::map.
template <fixed_string Name, class... Layers>
constexpr auto transition(Layers... layers) {
  return stem<Name>(layers...);
}

namespace detail {
template <class T> inline constexpr bool is_map = std::is_base_of_v<map_tag, T>;
}  // namespace detail

}  // namespace rwd
