// rewind engine: a staged network, written once for every backend. A stem map reads the input
// (kept: the stem is not inverted) and writes the first stage's input variable, the others
// starting at zero; stage s stacks the block depths[s] times on its state shape; the head pools
// the output variable over its positions (global average) and applies a linear layer to the
// classes, softmax cross-entropy. Between stages, one of two transitions:
//
//   invertible (rwd::squeeze_boundary, the default): space to depth by 2 (c x h x w ->
//     4c x h/2 x w/2, a permutation) of every state variable; nothing is stored for it.
//   kept (a map made by rwd::transition): a map reads the output variable where a stage ends and
//     writes the next stage's input variable, the others restarting at zero; its input is kept,
//     as momentumnet keeps each stage's first, dimension-changing block, and its backward pass
//     recomputes it from there. Its output may have any shape.
//
// The memory of a stage is that of its stack (rewind/engine/step.hpp). In reversible and
// checkpointed mode each boundary also keeps a state, so each stage's rewind starts from exact
// values: after a squeeze, where the next stage starts (every variable); at a kept transition,
// where the stage below ends (every variable: the transition's input and the values its rewind
// starts from). Stored mode keeps every layer's tape, each stage's after the one below, and a
// kept transition's input. So the rewind budget is per stage and the memory a closed form flat in
// depth.
//
// The backward pass is a sequence of parts, each making one range of the arena final: the head,
// then each stage's layers from the top (after a squeeze, the last layer of a stage unsqueezes
// the state and cotangents for the stage below), each kept transition after the stage above it,
// then the stem (recomputed from the kept input). A backend schedules lanes through them as it
// does a single stack's layers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <rewind/budget.hpp>
#include <string>
#include <vector>

#include <rewind/layout.hpp>

#include "layers/image_ops.hpp"
#include "step.hpp"

namespace rwd {

/// The invertible transition between the stages of a staged network (its default): a squeeze of
/// every state variable.
struct squeeze_boundary {};

namespace detail {
/// Is transition D kept (a map, whose input is kept) rather than inverted (a squeeze)?
template <class D>
inline constexpr bool kept_transition = is_map<D>;
}  // namespace detail

/// A staged network's shapes at run time: the input per sample (channels x height x width, stored
/// channels last) and the blocks per stage (each stage after the first starts with a squeeze).
struct stages {
  tensor_shape input;
  std::vector<std::size_t> depths;
};

/// Where a staged network's parameters sit in one flat arena: the stem (map Stem on the input),
/// then each stage's kept transition (map Down, for stages after the first) and stack
/// (rwd::parameter_layout without a head), then the head (classes x channels of the last stage,
/// column-major, then classes biases).
template <class Stem, class Block, class Down = squeeze_boundary>
struct staged_layout {
  static constexpr bool kept = detail::kept_transition<Down>;
  static_assert(kept || std::is_same_v<Down, squeeze_boundary>,
                "rewind: a staged network's transition is rwd::squeeze_boundary or a map made by rwd::transition");
  tensor_shape input;
  std::vector<std::size_t> depths;
  std::vector<tensor_shape> shapes;            // each stage's state shape
  std::vector<parameter_layout<Block>> stage;  // each stage's stack, its parameters from offset[s]
  std::vector<std::size_t> offset;
  std::vector<std::size_t> down, down_count;   // a kept transition's parameters before stage s (s >= 1)
  std::size_t classes = 0, stem = 0, head = 0, total = 0;  // stem: the stem's parameter count

  /// Refuses (rwd::error) a stem or a transition that cannot read its input, a squeeze of an odd
  /// height or width, and a block whose maps cannot run on a stage's shape.
  staged_layout(const stages& net, std::size_t classes_)
      : input(net.input), depths(net.depths), down(net.depths.size(), 0), down_count(net.depths.size(), 0), classes(classes_) {
    if (depths.empty()) throw error("rewind: a staged network has at least one stage");
    if (input.size() == 0) throw error("rewind: a staged network's input has no values (its shape is " + input.text() + ")");
    for (std::size_t s = 0; s < depths.size(); ++s)
      if (depths[s] == 0) throw error("rewind: stage " + std::to_string(s + 1) + " has no blocks (depth 0)");
    if (const std::string why = map_layout<Stem>::layer_refusal(input); !why.empty())
      throw error("rewind: stem " + std::string(Stem::name) + " on a " + input.text() + " input: " + why);
    tensor_shape x = Stem::output_shape(input);
    stem = Stem::parameter_count(input);
    std::size_t at = stem;
    for (std::size_t s = 0; s < depths.size(); ++s) {
      if constexpr (kept) {
        if (s > 0) {
          if (const std::string why = map_layout<Down>::layer_refusal(x); !why.empty())
            throw error("rewind: transition " + std::string(Down::name) + " before stage " + std::to_string(s + 1) + ", on stage " +
                        std::to_string(s) + "'s " + x.text() + " state: " + why);
          down[s] = at;
          down_count[s] = Down::parameter_count(x);
          at += down_count[s];
          x = Down::output_shape(x);
        }
      } else if (s > 0) {
        if (x.h % 2 || x.w % 2)
          throw error("rewind: stage " + std::to_string(s + 1) + " starts with a squeeze, which needs an even height and width; stage " +
                      std::to_string(s) + "'s state is " + x.text());
        x = squeezed(x);
      }
      shapes.push_back(x);
      stage.emplace_back(x, depths[s], 0);
      offset.push_back(at);
      at += stage.back().total;
    }
    head = at;
    total = head + classes * pooled() + classes;
  }

  /// Scalars per sample of stage s's state variables.
  std::size_t width(std::size_t s) const { return shapes[s].size(); }
  /// The widest stage's: a lane's state variables are this far apart per sample.
  std::size_t width() const {
    std::size_t n = 0;
    for (const auto& x : shapes) n = std::max(n, x.size());
    return n;
  }
  /// Channels the head reads: the last stage's.
  std::size_t pooled() const { return shapes.back().c; }
  std::size_t stage_count() const { return depths.size(); }
  std::size_t total_depth() const {
    std::size_t n = 0;
    for (std::size_t d : depths) n += d;
    return n;
  }

  /// The backward pass's parts below the head, from the top: each stage's layers from its top
  /// (then its kept transition), from the last stage down, then the stem.
  std::vector<gradient_part> parts() const {
    std::vector<gradient_part> out;
    for (std::size_t s = depths.size(); s-- > 0;) {
      for (std::size_t l = depths[s]; l-- > 0;) out.push_back({offset[s] + l * stage[s].per_layer, stage[s].per_layer});
      if (kept && s > 0) out.push_back({down[s], down_count[s]});
    }
    out.push_back({0, stem});
    return out;
  }
  gradient_part head_part() const { return {head, total - head}; }
  /// The largest part: a gradient slab's size.
  std::size_t largest_part() const {
    std::size_t n = std::max(stem, total - head);
    for (const auto& a : stage) n = std::max(n, a.per_layer);
    for (std::size_t c : down_count) n = std::max(n, c);
    return n;
  }

  /// The arena as named tensors: the stem's layers as `{stem}.{k}.{tensor}`, stage s's (from 1)
  /// as `stage{s}.layer{l}.{map}.{k}.{tensor}`, a kept transition before it as
  /// `stage{s}.{transition}.{k}.{tensor}`, the head as `head.weight` (classes, channels) and
  /// `head.bias`.
  std::vector<named_tensor> tensors() const {
    std::vector<named_tensor> out;
    detail::map_tensors<Stem>(out, std::string(Stem::name) + ".", input, 0);
    for (std::size_t s = 0; s < stage.size(); ++s) {
      if constexpr (kept)
        if (s > 0) detail::map_tensors<Down>(out, "stage" + std::to_string(s + 1) + "." + std::string(Down::name) + ".", shapes[s - 1], down[s]);
      for (named_tensor t : stage[s].tensors()) {
        t.name = "stage" + std::to_string(s + 1) + "." + t.name;
        t.offset += offset[s];
        out.push_back(std::move(t));
      }
    }
    out.push_back({"head.weight", {classes, pooled()}, head, {1, classes}});  // held column-major
    out.push_back({"head.bias", {classes}, head + classes * pooled(), {}});
    return out;
  }
  /// What a file of these parameters is checked against: the stem, the transition, the block's
  /// updates and maps, the input and the stages' depths.
  std::string fingerprint_text() const {
    std::string text = "stem " + Stem::describe(input) + ";";
    if constexpr (kept)
      for (std::size_t s = 1; s < shapes.size(); ++s) text += "transition " + Down::describe(shapes[s - 1]) + ";";
    hana::for_each(Block::updates(), [&](auto u) { text += u.text() + ";"; });
    hana::for_each(Block::maps(), [&](auto t) { text += typename decltype(t)::type{}.describe() + ";"; });
    text += "input " + input.text() + "; depths";
    for (std::size_t d : depths) text.append(" ").append(std::to_string(d));  // not " " + ...: a false -Wrestrict in GCC 12 at -O3
    text += "; classes " + std::to_string(classes);
    return text;
  }
  parameter_file_header file_header() const {
    parameter_file_header h;
    h.width = width();
    h.classes = classes;
    h.depth = total_depth();
    h.count = total;
    const std::string text = fingerprint_text();
    h.block_fingerprint = fnv1a(text.data(), text.size());
    return h;
  }
  /// Writes the arena atomically: safetensors where the name ends in .safetensors, else rewind's
  /// parameter file; either way with a checksum and the network's fingerprint.
  template <class T>
  void save(const std::string& path, std::span<const T> params) const {
    if (path.ends_with(".safetensors")) write_safetensors<T>(path, tensors(), params, {{"rewind.network", metadata()}});
    else write_parameter_file<T>(path, file_header(), params);
  }
  /// Reads what save() writes (or a safetensors file with these names and shapes), validated whole.
  template <class T>
  std::vector<T> load(const std::string& path) const {
    if (path.ends_with(".safetensors")) return read_safetensors<T>(path, tensors(), total, {{"rewind.network", metadata()}});
    auto values = read_parameter_file<T>(path, file_header());
    for (T v : values)
      if (!std::isfinite(v)) throw error("rewind: " + path + ": holds a non-finite parameter");
    return values;
  }

  /// Starting values from `seed`: the stem's and kept transitions' layers Glorot-uniform
  /// (unscaled: they are not residual branches), each stage's stack as rwd::parameter_layout makes it from a seed of its
  /// own, the head Glorot-uniform.
  template <class T>
  void initialise(std::span<T> params, std::uint64_t seed, double output_scale) const {
    std::fill(params.begin(), params.end(), T(0));
    detail::glorot_draws draws{std::mt19937_64(seed)};
    detail::initialise_map<Stem>(params, input, 0, 1.0, draws);
    for (std::size_t s = 0; s < stage.size(); ++s) {
      if constexpr (kept)
        if (s > 0) detail::initialise_map<Down>(params, shapes[s - 1], down[s], 1.0, draws);
      stage[s].initialise(params.subspan(offset[s], stage[s].total), noise_key(seed, s + 1), output_scale);
    }
    draws(&params[head], classes, pooled(), 1.0);
  }

 private:
  std::string metadata() const { return detail::safetensors::hex(file_header().block_fingerprint) + " " + fingerprint_text(); }
};

/// The network stage by stage: the stem, each stage's state, map, parameters, depth against the
/// rewind budget of T (a stage's rewind starts from exact values, so each stage has the whole
/// budget), the transitions, what reversible mode keeps, and the head.
template <class T, class Stem, class Block, class Down>
std::string explain(const staged_layout<Stem, Block, Down>& a, const env& bindings = {}) {
  const budget_report b = budget<T>(Block{}, bindings);
  const std::string budget_text = !b.known() ? "unknown (an alpha from the data may come near zero)"
                                  : b.unlimited() ? "unlimited" : std::to_string(b.layers) + " layers";
  const std::string maps = [] {
    std::string text;
    hana::for_each(Block::maps(), [&](auto t) { text += std::string(text.empty() ? "" : ", ") + std::string(decltype(t)::type::name); });
    return text;
  }();
  std::string out = "staged network: input " + a.input.text() + ", " + std::to_string(a.stage_count()) + " stage(s), " +
                    std::to_string(a.classes) + " classes, " + std::to_string(a.total) + " parameters\n";
  out += "  stem " + std::string(Stem::name) + ": " + Stem::describe(a.input) + " (" + std::to_string(a.stem) +
         " parameters; not inverted: its input is kept, and its backward pass recomputes it)\n";
  for (std::size_t s = 0; s < a.stage_count(); ++s) {
    if constexpr (a.kept) {
      if (s > 0)
        out += "  transition " + std::string(Down::name) + ": " + Down::describe(a.shapes[s - 1]) + " (" + std::to_string(a.down_count[s]) +
             " parameters; not inverted: it reads the output variable and restarts the others at zero; its input is kept, and in "
             "reversible and checkpointed modes the whole state where stage " + std::to_string(s) + " ends, " + std::to_string(Block::state_size) +
             " x " + std::to_string(a.width(s - 1)) + " values per sample)\n";
    } else if (s > 0) {
      out += "  squeeze: " + a.shapes[s - 1].text() + " -> " + a.shapes[s].text() +
             " (space to depth by 2 on every state variable: a permutation, nothing stored)\n";
    }
    out += "  stage " + std::to_string(s + 1) + ": state " + a.shapes[s].text() + " per variable, " + std::to_string(a.depths[s]) +
           " block(s) of " + std::to_string(a.stage[s].per_layer) + " parameters; map(s) " + maps + ":";
    hana::for_each(Block::maps(), [&](auto t) { out += " " + decltype(t)::type::describe(a.shapes[s]); });
    out += "\n    rewind budget in " + std::string(scalar_traits<T>::name) + ": " + budget_text + "; depth " + std::to_string(a.depths[s]) +
           (!b.known() || static_cast<long long>(a.depths[s]) > b.layers ? " is past it: reversible mode refuses this stage (checkpointed does not)"
                                                                         : " is within it");
    if (s > 0 && !a.kept)
      out += "\n    reversible and checkpointed modes keep its starting state (" + std::to_string(Block::state_size) + " x " +
             std::to_string(a.width(s)) + " values per sample), so its rewind starts from exact values";
    out += "\n";
  }
  out += "  head: average pool " + a.shapes.back().text() + " -> " + std::to_string(a.pooled()) + ", linear " + std::to_string(a.pooled()) +
         " -> " + std::to_string(a.classes) + " (" + std::to_string(a.total - a.head) + " parameters)\n";
  return out;
}

/// What a staged model of either backend makes of its options and runtime scalars: the options
/// checked against the network (batch and classes at least 1; width and shape, when set, its
/// input's) and set to its input; the input and output variables; the block's budget in T and the
/// checkpoint segment (for the deepest stage).
template <class T, class Block>
struct staged_settings {
  options o;
  std::size_t input = 0, output = 0, segment = 1;
  budget_report budget;

  staged_settings(const stages& net, const options& given, const env& bindings) : o(given) {
    using State = std::remove_const_t<decltype(Block::state())>;
    if (o.batch == 0 || o.classes == 0) throw error("rewind: a model needs batch and classes of at least 1");
    if ((o.width != 0 && o.width != net.input.size()) || (o.shape.c != 0 && !(o.shape == net.input)))
      throw error("rewind: options.width/shape (" + std::to_string(o.width) + ", " + o.shape.text() + ") are not the network's input " +
                  net.input.text());
    o.width = net.input.size();
    o.shape = net.input;
    input = state_index_of<State>(o.input);
    output = state_index_of<State>(o.output);
    rwd::detail::check_runtime_coefficients<Block>(bindings);
    budget = rwd::budget<T>(Block{}, bindings);
    segment = checkpoint_segment(o.checkpoint_every, budget, *std::max_element(net.depths.begin(), net.depths.end()));
  }
  /// Refuses what mode m cannot run on stages of these depths: the exact mode, and reversible
  /// mode past the budget in any stage (a stage's rewind starts from its kept input) unless lossy.
  void check_mode(mode m, const std::vector<std::size_t>& depths, const env& bindings) const {
    if (m == mode::exact)
      throw error("rewind: a staged network has no exact mode (its transitions would reorder or drop the fixed-point ledger); use mode::checkpointed");
    if (m == mode::reversible && !o.lossy)
      for (std::size_t d : depths)
        rwd::detail::check_rewind_budget<T, Block>(budget, d, bindings, "use mode::checkpointed, or options.lossy",
                                                      "use mode::checkpointed, or options.lossy");
  }
};

/// A staged network's step over lanes (rwd::lane: columns of the batch, a workspace, a gradient
/// slab) through executor Exec, on parameters laid out by a staged_layout.
template <class T, class Stem, class Block, class Exec, class Down = squeeze_boundary>
class staged_step {
 public:
  using engine_type = step_engine<T, Block, Exec>;
  using lane_type = typename engine_type::lane_type;
  using layout_type = staged_layout<Stem, Block, Down>;
  using scalars_type = typename engine_type::scalars_type;
  static constexpr std::size_t ns = Block::state_size;

  struct shape {
    std::size_t batch = 0, segment = 1, input = 0, output = 0;  // input, output: state variables
    std::uint64_t noise = 0;  // the step's dropout key (0: none); stage s draws from noise_key(noise, s + 1)
  };

  staged_step(const shape& s, const layout_type& layout, const T* params, const scalars_type& scalars, Exec exec)
      : s_(s), a_(layout), params_(params), scalars_(scalars), exec_(exec) {}

  // --- sizes (closed forms of the types and the shapes) -------------------------------------------
  /// The stem's workspace per sample: its stages and layer workspace, and for its backward pass
  /// the output cotangent, scratch and the input cotangent.
  static std::size_t stem_work(const layout_type& a) { return map_work<Stem>(a.input, a.width(0)); }
  /// A lane's workspace per sample in mode m: the largest of any stage's, a transition's (a
  /// squeeze: one variable), the stem's and the head's (pooled channels and logits).
  static std::size_t work_per_sample(mode m, const layout_type& a) {
    std::size_t n = std::max({a.width(), stem_work(a), a.pooled() + a.classes});
    for (std::size_t s = 0; s < a.stage_count(); ++s) {
      n = std::max(n, engine_type::work_per_sample(m, a.shapes[s], 0));
      if constexpr (layout_type::kept)
        if (s > 0) n = std::max(n, map_work<Down>(a.shapes[s - 1], a.width(s)));
    }
    return n;
  }
  /// Scalars per sample kept at the boundary before stage s (s >= 1) in mode m: after a squeeze,
  /// reversible and checkpointed, the state where stage s starts; at a kept transition, its input
  /// (stored) or the whole state where stage s - 1 ends.
  static std::size_t boundary_size(mode m, const layout_type& a, std::size_t s) {
    if constexpr (layout_type::kept) return (m == mode::stored ? 1 : ns) * a.width(s - 1);
    else return m == mode::stored ? 0 : ns * a.width(s);
  }
  /// Scalars of stage s's tape for the whole batch in mode m.
  static std::size_t stage_tape(mode m, const layout_type& a, std::size_t batch, std::size_t segment, std::size_t s) {
    return engine_type::tape_size(m, a.shapes[s], batch, a.depths[s], segment);
  }
  /// Scalars of the whole tape in mode m: every stage's, then what each boundary keeps.
  static std::size_t tape_size(mode m, const layout_type& a, std::size_t batch, std::size_t segment) {
    std::size_t n = 0;
    for (std::size_t s = 0; s < a.stage_count(); ++s) n += stage_tape(m, a, batch, segment, s) + (s > 0 ? boundary_size(m, a, s) * batch : 0);
    return n;
  }
  /// The closed-form memory of a step run as one lane of the whole batch in mode m, its gradients
  /// written in place (the GPU's): the state and cotangents at the widest stage's width and the
  /// input batch (the stem's backward pass reads it again), the tape, one workspace. (The CPU
  /// reads the caller's batch, runs chunks on threads: a workspace per thread and gradient slabs.)
  static memory_plan whole_batch_plan(mode m, const layout_type& a, std::size_t batch, std::size_t segment) {
    memory_plan p;
    p.state_bytes = (2 * ns * a.width() + a.input.size()) * batch * sizeof(T);
    p.tape_bytes = tape_size(m, a, batch, segment) * sizeof(T);
    p.workspace_bytes = work_per_sample(m, a) * batch * sizeof(T);
    return p;
  }

  // --- a lane through the network -----------------------------------------------------------------
  /// The forward pass of a lane from its input columns `in`, keeping what mode m keeps in `tape`
  /// (tape_size scalars); without a tape, nothing is kept (inference). The lane's state variables
  /// other than the input start at zero.
  void forward(lane_type& ln, const T* in, mode m, T* tape) const {
    T* stages = ln.work;
    const T* out = map_runner<Stem, T, maps_type>{a_.input, ln.count, exec_.maps(), work_after<Stem>(ln, a_.input), 0, ln.first}.forward(params_, in, stages);
    exec_.copy(ln.s[s_.input].data(), out, a_.width(0) * ln.count);
    for (std::size_t s = 0; s < a_.stage_count(); ++s) {
      if constexpr (layout_type::kept) {
        if (s > 0) transition_forward(ln, s, m, tape);
      } else if (s > 0) {
        squeeze(ln, s, true, false);
        if (tape && m != mode::stored)
          for (std::size_t k = 0; k < ns; ++k) exec_.copy(boundary(tape, m, s, k, ln), ln.s[k].data(), a_.width(s) * ln.count);
      }
      const engine_type eng = stage_engine(s);
      if (tape) eng.forward(ln, m, tape + tape_offset(m, s));
      else
        for (std::size_t l = 0; l < a_.depths[s]; ++l) eng.forward_layer(l, ln, nullptr);
    }
  }

  /// Part p of the backward pass (layout.parts()) on a lane whose forward pass filled `tape`: a
  /// stage's layer (after a squeeze, the bottom one of a stage above the first then restores the
  /// stage's kept input, reversible and checkpointed, and unsqueezes the state and cotangents), a
  /// kept transition, or the stem.
  void backward(std::size_t p, lane_type& ln, const T* in, mode m, T* tape) const {
    std::size_t s = a_.stage_count(), l = p;
    for (; s > 0; --s) {
      const std::size_t here = a_.depths[s - 1] + (layout_type::kept && s > 1 ? 1 : 0);
      if (l < here) break;
      l -= here;
    }
    if (s == 0) return stem_backward(ln, in);
    --s;
    if constexpr (layout_type::kept)
      if (l == a_.depths[s]) return transition_backward(ln, s, m, tape);
    l = a_.depths[s] - 1 - l;
    stage_engine(s).backward(l, ln, m, tape + tape_offset(m, s));
    if (l > 0 || s == 0 || layout_type::kept) return;
    if (m != mode::stored)
      for (std::size_t k = 0; k < ns; ++k) exec_.copy(ln.s[k].data(), boundary(tape, m, s, k, ln), a_.width(s) * ln.count);
    squeeze(ln, s, false, true);
  }

  /// The pooled head's logits for a lane (classes x count into z; the lane's workspace holds the
  /// pooled channels).
  void logits(const lane_type& ln, T* z) const {
    const std::size_t C = a_.classes, c = a_.pooled(), nb = ln.count;
    const T* Wh = params_ + a_.head;
    const auto ops = exec_.maps();
    ops.each(pool_op<T>{ln.s[s_.output].data(), ln.work, a_.shapes.back(), true}, c * nb);
    ops.gemm(false, false, C, nb, c, Wh, ln.work, T(0), z);
    ops.template bias<void>(z, Wh + C * c, C, nb);
  }
  /// The head and softmax cross-entropy of a lane: each sample's loss into loss[first + j], the
  /// head's gradient into ln.grads (the head's part), the output variable's cotangent seeded.
  void head(lane_type& ln, const int* labels, double* loss) const {
    const std::size_t C = a_.classes, c = a_.pooled(), nb = ln.count;
    const T* Wh = params_ + a_.head;
    T* pooled = ln.work;
    T* z = pooled + c * nb;
    const auto ops = exec_.maps();
    logits(ln, z);
    exec_.softmax_cross_entropy(z, labels + ln.first, loss + ln.first, C, nb, s_.batch);
    ops.gemm(false, true, C, c, nb, z, pooled, T(1), ln.grads);  // dWh += dz pooled^T
    ops.bias_gradient(z, ln.grads + C * c, C, nb);
    ops.gemm(true, false, c, nb, C, Wh, z, T(0), pooled);  // the pooled channels' cotangent, in place
    ops.each(pool_op<T>{ln.b[s_.output].data(), pooled, a_.shapes.back(), false}, a_.width(a_.stage_count() - 1) * nb);
  }

  /// Stage s's stack (its parameters, shape and dropout key).
  engine_type stage_engine(std::size_t s) const {
    return engine_type({a_.shapes[s], s_.batch, 0, a_.depths[s], s_.segment, s_.input, s_.output, s_.noise ? noise_key(s_.noise, s + 1) : 0},
                       a_.stage[s], params_ + a_.offset[s], scalars_, exec_);
  }

 private:
  using maps_type = std::remove_cvref_t<decltype(std::declval<const Exec&>().maps())>;
  /// The workspace per sample of a map M that is not inverted (the stem, a kept transition) on an
  /// input of shape `in`, writing `out` scalars: its stages and layer workspace, and for its
  /// backward pass the output cotangent, scratch and the input cotangent.
  template <class M>
  static std::size_t map_work(tensor_shape in, std::size_t out) {
    using L = map_layout<M>;
    return L::stage_size(in) + L::work_size(in) + out + L::scratch_size(in) + in.size();
  }
  /// Where such a map's layer workspace starts in a lane's workspace (after its stages).
  template <class M>
  static T* work_after(const lane_type& ln, tensor_shape in) {
    return ln.work + map_layout<M>::stage_size(in) * ln.count;
  }
  /// The backward pass of such a map (parameters at `params`, input `in` of shape `shape`): its
  /// forward recomputed from the input, then its parameters' gradient into the lane's slab from
  /// the cotangent `g` of its output (`out` scalars per sample); returns the input's cotangent
  /// (in the lane's workspace).
  template <class M>
  T* map_backward(lane_type& ln, const T* params, const T* in, tensor_shape shape, const T* g, std::size_t out) const {
    using L = map_layout<M>;
    const std::size_t nb = ln.count;
    T* stages = ln.work;
    T* cot = work_after<M>(ln, shape) + L::work_size(shape) * nb;
    T* scratch = cot + out * nb;
    T* vjp = scratch + L::scratch_size(shape) * nb;
    const map_runner<M, T, maps_type> run{shape, nb, exec_.maps(), work_after<M>(ln, shape), 0, ln.first};
    run.forward(params, in, stages);
    exec_.copy(cot, g, out * nb);
    run.backward(params, ln.grads, in, stages, cot, scratch, vjp);
    return vjp;
  }
  /// The stem's backward pass from the input variable's cotangent (the others' are dropped: they
  /// started at zero).
  void stem_backward(lane_type& ln, const T* in) const { map_backward<Stem>(ln, params_, in, a_.input, ln.b[s_.input].data(), a_.width(0)); }

  /// A kept transition before stage s, forward: keeps its input (with a tape: stored, the output
  /// variable; reversible and checkpointed, every variable), then writes the input variable of
  /// stage s from the output variable of stage s - 1 and zeroes the others.
  void transition_forward(lane_type& ln, std::size_t s, mode m, T* tape) const {
    const std::size_t n = a_.width(s - 1) * ln.count, next = a_.width(s) * ln.count;
    if (tape)
      for (std::size_t k = 0; k < ns; ++k)
        if (m != mode::stored || k == s_.output) exec_.copy(boundary(tape, m, s, k, ln), ln.s[k].data(), n);
    const map_runner<Down, T, maps_type> run{a_.shapes[s - 1], ln.count, exec_.maps(), work_after<Down>(ln, a_.shapes[s - 1]), 0, ln.first};
    const T* out = run.forward(params_ + a_.down[s], ln.s[s_.output].data(), ln.work);
    exec_.copy(ln.s[s_.input].data(), out, next);
    for (std::size_t k = 0; k < ns; ++k)
      if (k != s_.input) exec_.maps().each(fill_op<T>{ln.s[k].data(), T(0)}, next);
  }
  /// A kept transition before stage s, backward (its part): its parameters' gradient from the
  /// cotangent of stage s's input variable; then the cotangents where stage s - 1 ends (its
  /// output variable's through the transition, the others' zero: they were not read) and, in
  /// reversible and checkpointed mode, that state restored from the kept copy.
  void transition_backward(lane_type& ln, std::size_t s, mode m, T* tape) const {
    const std::size_t n = a_.width(s - 1) * ln.count;
    const T* dx = map_backward<Down>(ln, params_ + a_.down[s], boundary(tape, m, s, s_.output, ln), a_.shapes[s - 1], ln.b[s_.input].data(), a_.width(s));
    exec_.copy(ln.b[s_.output].data(), dx, n);
    for (std::size_t k = 0; k < ns; ++k) {
      if (k != s_.output) exec_.maps().each(fill_op<T>{ln.b[k].data(), T(0)}, n);
      if (m != mode::stored) exec_.copy(ln.s[k].data(), boundary(tape, m, s, k, ln), n);
    }
  }
  /// Every state variable (and with `cotangents`, every cotangent) of a lane squeezed from stage
  /// s - 1's shape to stage s's (forward), or back; through the lane's workspace.
  void squeeze(lane_type& ln, std::size_t s, bool forward, bool cotangents) const {
    const tensor_shape from = a_.shapes[s - 1];
    const std::size_t n = a_.width(s) * ln.count, columns = a_.shapes[s].positions() * ln.count;
    const auto ops = exec_.maps();
    for (std::size_t k = 0; k < ns; ++k)
      for (T* x : {ln.s[k].data(), cotangents ? ln.b[k].data() : nullptr}) {
        if (!x) continue;
        if (forward) ops.each(squeeze_op<T>{x, ln.work, from, true}, columns);
        else ops.each(squeeze_op<T>{ln.work, x, from, false}, columns);
        exec_.copy(x, ln.work, n);
      }
  }
  /// Where stage s's tape starts: after every stage below and each boundary up to its own.
  std::size_t tape_offset(mode m, std::size_t s) const {
    std::size_t n = 0;
    for (std::size_t i = 0; i <= s; ++i) n += (i > 0 ? boundary_size(m, a_, i) * s_.batch : 0) + (i < s ? stage_tape(m, a_, s_.batch, s_.segment, i) : 0);
    return n;
  }
  /// Where the boundary before stage s (s >= 1) keeps variable k, this lane's columns: after a
  /// squeeze, its value where stage s starts; at a kept transition, where stage s - 1 ends (in
  /// stored mode only the output variable is kept).
  T* boundary(T* tape, mode m, std::size_t s, std::size_t k, const lane_type& ln) const {
    const std::size_t w = layout_type::kept ? a_.width(s - 1) : a_.width(s), slot = layout_type::kept && m == mode::stored ? 0 : k;
    return tape + tape_offset(m, s) - boundary_size(m, a_, s) * s_.batch + slot * w * s_.batch + ln.first * w;
  }

  shape s_;
  const layout_type& a_;
  const T* params_;
  const scalars_type& scalars_;
  Exec exec_;
};

}  // namespace rwd
