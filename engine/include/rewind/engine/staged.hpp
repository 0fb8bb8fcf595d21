// rewind engine: a staged network, written once for every backend. A stem map reads the input
// (kept: the stem is not inverted) and writes the first stage's input variable, the others
// starting at zero; stage s stacks the block depths[s] times on its state shape; between stages a
// squeeze (space to depth by 2: c x h x w -> 4c x h/2 x w/2, a permutation) reorders every state
// variable, so the width per sample is the same in every stage and nothing is stored for it; the
// head pools the output variable over its positions (global average) and applies a linear layer
// to the classes, softmax cross-entropy.
//
// The memory of a stage is that of its stack (rewind/engine/step.hpp). In reversible and
// checkpointed mode each stage boundary also keeps the state (every variable) where the stage
// starts, so each stage's rewind starts from exact values: the rewind budget is per stage, and
// the state kept is a closed form flat in depth. Stored mode keeps every layer's tape, each
// stage's after the one below.
//
// The backward pass is a sequence of parts, each making one range of the arena final: the head,
// then each stage's layers from the top (the last layer of a stage unsqueezes the state and
// cotangents for the stage below), then the stem (recomputed from the kept input). A backend
// schedules lanes through them as it does a single stack's layers.
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

/// A staged network's shapes at run time: the input per sample (channels x height x width, stored
/// channels last) and the blocks per stage (each stage after the first starts with a squeeze).
struct stages {
  tensor_shape input;
  std::vector<std::size_t> depths;
};

/// Where a staged network's parameters sit in one flat arena: the stem (map Stem on the input),
/// then each stage's stack (rwd::parameter_layout without a head), then the head (classes x
/// channels of the last stage, column-major, then classes biases).
template <class Stem, class Block>
struct staged_layout {
  tensor_shape input;
  std::vector<std::size_t> depths;
  std::vector<tensor_shape> shapes;            // each stage's state shape
  std::vector<parameter_layout<Block>> stage;  // each stage's stack, its parameters from offset[s]
  std::vector<std::size_t> offset;
  std::size_t classes = 0, stem = 0, head = 0, total = 0;  // stem: the stem's parameter count

  /// Refuses (rwd::error) a stem that cannot read the input, a squeeze of an odd height or width,
  /// and a block whose maps cannot run on a stage's shape.
  staged_layout(const stages& net, std::size_t classes_) : input(net.input), depths(net.depths), classes(classes_) {
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
      if (s > 0) {
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

  /// Scalars per sample of every stage's state variables (the same in every stage).
  std::size_t width() const { return shapes.front().size(); }
  /// Channels the head reads: the last stage's.
  std::size_t pooled() const { return shapes.back().c; }
  std::size_t stage_count() const { return depths.size(); }
  std::size_t total_depth() const {
    std::size_t n = 0;
    for (std::size_t d : depths) n += d;
    return n;
  }

  /// The backward pass's parts below the head, from the top: each stage's layers from its top,
  /// from the last stage down, then the stem.
  std::vector<gradient_part> parts() const {
    std::vector<gradient_part> out;
    for (std::size_t s = depths.size(); s-- > 0;)
      for (std::size_t l = depths[s]; l-- > 0;) out.push_back({offset[s] + l * stage[s].per_layer, stage[s].per_layer});
    out.push_back({0, stem});
    return out;
  }
  gradient_part head_part() const { return {head, total - head}; }
  /// The largest part: a gradient slab's size.
  std::size_t largest_part() const {
    std::size_t n = std::max(stem, total - head);
    for (const auto& a : stage) n = std::max(n, a.per_layer);
    return n;
  }

  /// The arena as named tensors: the stem's layers as `{stem}.{k}.{tensor}`, stage s's (from 1)
  /// as `stage{s}.layer{l}.{map}.{k}.{tensor}`, the head as `head.weight` (classes, channels) and
  /// `head.bias`.
  std::vector<named_tensor> tensors() const {
    std::vector<named_tensor> out;
    detail::map_tensors<Stem>(out, std::string(Stem::name) + ".", input, 0);
    for (std::size_t s = 0; s < stage.size(); ++s)
      for (named_tensor t : stage[s].tensors()) {
        t.name = "stage" + std::to_string(s + 1) + "." + t.name;
        t.offset += offset[s];
        out.push_back(std::move(t));
      }
    out.push_back({"head.weight", {classes, pooled()}, head, {1, classes}});  // held column-major
    out.push_back({"head.bias", {classes}, head + classes * pooled(), {}});
    return out;
  }
  /// What a file of these parameters is checked against: the stem, the block's updates and maps,
  /// the input and the stages' depths.
  std::string fingerprint_text() const {
    std::string text = "stem " + Stem::describe(input) + ";";
    hana::for_each(Block::updates(), [&](auto u) { text += u.text() + ";"; });
    hana::for_each(Block::maps(), [&](auto t) { text += typename decltype(t)::type{}.describe() + ";"; });
    text += "input " + input.text() + "; depths";
    for (std::size_t d : depths) text += " " + std::to_string(d);
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

  /// Starting values from `seed`: the stem's layers Glorot-uniform (unscaled: it is not a
  /// residual branch), each stage's stack as rwd::parameter_layout makes it from a seed of its
  /// own, the head Glorot-uniform.
  template <class T>
  void initialise(std::span<T> params, std::uint64_t seed, double output_scale) const {
    std::fill(params.begin(), params.end(), T(0));
    detail::glorot_draws draws{std::mt19937_64(seed)};
    detail::initialise_map<Stem>(params, input, 0, 1.0, draws);
    for (std::size_t s = 0; s < stage.size(); ++s) stage[s].initialise(params.subspan(offset[s], stage[s].total), noise_key(seed, s + 1), output_scale);
    draws(&params[head], classes, pooled(), 1.0);
  }

 private:
  std::string metadata() const { return detail::safetensors::hex(file_header().block_fingerprint) + " " + fingerprint_text(); }
};

/// The network stage by stage: the stem, each stage's state, map, parameters, depth against the
/// rewind budget of T (a stage's rewind starts from its kept input, so each stage has the whole
/// budget), the squeezes, what reversible mode keeps, and the head.
template <class T, class Stem, class Block>
std::string explain(const staged_layout<Stem, Block>& a, const env& bindings = {}) {
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
    if (s > 0)
      out += "  squeeze: " + a.shapes[s - 1].text() + " -> " + a.shapes[s].text() +
             " (space to depth by 2 on every state variable: a permutation, nothing stored)\n";
    out += "  stage " + std::to_string(s + 1) + ": state " + a.shapes[s].text() + " per variable, " + std::to_string(a.depths[s]) +
           " block(s) of " + std::to_string(a.stage[s].per_layer) + " parameters; map(s) " + maps + ":";
    hana::for_each(Block::maps(), [&](auto t) { out += " " + decltype(t)::type::describe(a.shapes[s]); });
    out += "\n    rewind budget in " + std::string(scalar_traits<T>::name) + ": " + budget_text + "; depth " + std::to_string(a.depths[s]) +
           (!b.known() || static_cast<long long>(a.depths[s]) > b.layers ? " is past it: reversible mode refuses this stage (checkpointed does not)"
                                                                         : " is within it");
    if (s > 0)
      out += "\n    reversible and checkpointed modes keep its starting state (" + std::to_string(Block::state_size) + " x " +
             std::to_string(a.width()) + " values per sample), so its rewind starts from exact values";
    out += "\n";
  }
  out += "  head: average pool " + a.shapes.back().text() + " -> " + std::to_string(a.pooled()) + ", linear " + std::to_string(a.pooled()) +
         " -> " + std::to_string(a.classes) + " (" + std::to_string(a.total - a.head) + " parameters)\n";
  return out;
}

/// A staged network's step over lanes (rwd::lane: columns of the batch, a workspace, a gradient
/// slab) through executor Exec, on parameters laid out by a staged_layout.
template <class T, class Stem, class Block, class Exec>
class staged_step {
 public:
  using engine_type = step_engine<T, Block, Exec>;
  using lane_type = typename engine_type::lane_type;
  using layout_type = staged_layout<Stem, Block>;
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
  static std::size_t stem_work(const layout_type& a) {
    using L = map_layout<Stem>;
    return L::stage_size(a.input) + L::work_size(a.input) + a.width() + L::scratch_size(a.input) + a.input.size();
  }
  /// A lane's workspace per sample in mode m: the largest of any stage's, a squeeze's (one
  /// variable), the stem's and the head's (pooled channels and logits).
  static std::size_t work_per_sample(mode m, const layout_type& a) {
    std::size_t n = std::max({a.width(), stem_work(a), a.pooled() + a.classes});
    for (std::size_t s = 0; s < a.stage_count(); ++s) n = std::max(n, engine_type::work_per_sample(m, a.shapes[s], 0));
    return n;
  }
  /// Scalars of stage s's tape for the whole batch in mode m.
  static std::size_t stage_tape(mode m, const layout_type& a, std::size_t batch, std::size_t segment, std::size_t s) {
    return engine_type::tape_size(m, a.shapes[s], batch, a.depths[s], segment);
  }
  /// Scalars of the whole tape in mode m: every stage's, then (reversible and checkpointed) the
  /// state where each stage after the first starts.
  static std::size_t tape_size(mode m, const layout_type& a, std::size_t batch, std::size_t segment) {
    std::size_t n = 0;
    for (std::size_t s = 0; s < a.stage_count(); ++s) n += stage_tape(m, a, batch, segment, s);
    return n + (m == mode::stored ? 0 : (a.stage_count() - 1) * ns * a.width() * batch);
  }

  // --- a lane through the network -----------------------------------------------------------------
  /// The forward pass of a lane from its input columns `in`, keeping what mode m keeps in `tape`
  /// (tape_size scalars); without a tape, nothing is kept (inference). The lane's state variables
  /// other than the input start at zero.
  void forward(lane_type& ln, const T* in, mode m, T* tape) const {
    const std::size_t n = a_.width() * ln.count;
    T* stages = ln.work;
    const T* out = stem_runner(ln, stages).forward(params_, in, stages);
    exec_.copy(ln.s[s_.input].data(), out, n);
    for (std::size_t s = 0; s < a_.stage_count(); ++s) {
      if (s > 0) {
        squeeze(ln, s, true, false);
        if (tape && m != mode::stored)
          for (std::size_t k = 0; k < ns; ++k) exec_.copy(boundary(tape, m, s, k, ln), ln.s[k].data(), n);
      }
      const engine_type eng = stage_engine(s);
      if (tape) eng.forward(ln, m, tape + tape_offset(m, s));
      else
        for (std::size_t l = 0; l < a_.depths[s]; ++l) eng.forward_layer(l, ln, nullptr);
    }
  }

  /// Part p of the backward pass (layout.parts()) on a lane whose forward pass filled `tape`: a
  /// stage's layer (the bottom one of a stage above the first then restores the stage's kept
  /// input, reversible and checkpointed, and unsqueezes the state and cotangents), or the stem.
  void backward(std::size_t p, lane_type& ln, const T* in, mode m, T* tape) const {
    std::size_t s = a_.stage_count(), l = p;
    while (s > 0 && l >= a_.depths[s - 1]) l -= a_.depths[--s];
    if (s == 0) return stem_backward(ln, in);
    --s;
    l = a_.depths[s] - 1 - l;
    stage_engine(s).backward(l, ln, m, tape + tape_offset(m, s));
    if (l > 0 || s == 0) return;
    if (m != mode::stored)
      for (std::size_t k = 0; k < ns; ++k) exec_.copy(ln.s[k].data(), boundary(tape, m, s, k, ln), a_.width() * ln.count);
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
    ops.each(pool_op<T>{ln.b[s_.output].data(), pooled, a_.shapes.back(), false}, a_.width() * nb);
  }

  /// Stage s's stack (its parameters, shape and dropout key).
  engine_type stage_engine(std::size_t s) const {
    return engine_type({a_.shapes[s], s_.batch, 0, a_.depths[s], s_.segment, s_.input, s_.output, s_.noise ? noise_key(s_.noise, s + 1) : 0},
                       a_.stage[s], params_ + a_.offset[s], scalars_, exec_);
  }

 private:
  using maps_type = std::remove_cvref_t<decltype(std::declval<const Exec&>().maps())>;
  map_runner<Stem, T, maps_type> stem_runner(const lane_type& ln, T* stages) const {
    return {a_.input, ln.count, exec_.maps(), stages + map_layout<Stem>::stage_size(a_.input) * ln.count, 0, ln.first};
  }
  /// The stem's backward pass: its forward recomputed from the kept input, then its parameters'
  /// gradient from the input variable's cotangent (the others' are dropped: they started at zero).
  void stem_backward(lane_type& ln, const T* in) const {
    using L = map_layout<Stem>;
    const std::size_t nb = ln.count;
    T* stages = ln.work;
    T* cot = stages + (L::stage_size(a_.input) + L::work_size(a_.input)) * nb;
    T* scratch = cot + a_.width() * nb;
    T* vjp = scratch + L::scratch_size(a_.input) * nb;
    const auto run = stem_runner(ln, stages);
    run.forward(params_, in, stages);
    exec_.copy(cot, ln.b[s_.input].data(), a_.width() * nb);
    run.backward(params_, ln.grads, in, stages, cot, scratch, vjp);
  }
  /// Every state variable (and with `cotangents`, every cotangent) of a lane squeezed from stage
  /// s - 1's shape to stage s's (forward), or back; through the lane's workspace.
  void squeeze(lane_type& ln, std::size_t s, bool forward, bool cotangents) const {
    const tensor_shape from = a_.shapes[s - 1];
    const std::size_t n = a_.width() * ln.count, columns = a_.shapes[s].positions() * ln.count;
    const auto ops = exec_.maps();
    for (std::size_t k = 0; k < ns; ++k)
      for (T* x : {ln.s[k].data(), cotangents ? ln.b[k].data() : nullptr}) {
        if (!x) continue;
        if (forward) ops.each(squeeze_op<T>{x, ln.work, from, true}, columns);
        else ops.each(squeeze_op<T>{ln.work, x, from, false}, columns);
        exec_.copy(x, ln.work, n);
      }
  }
  std::size_t tape_offset(mode m, std::size_t s) const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < s; ++i) n += stage_tape(m, a_, s_.batch, s_.segment, i);
    return n;
  }
  /// Where variable k's state at the start of stage s (s >= 1) is kept, this lane's columns.
  T* boundary(T* tape, mode m, std::size_t s, std::size_t k, const lane_type& ln) const {
    const std::size_t whole = a_.width() * s_.batch;
    return tape + tape_offset(m, a_.stage_count()) + ((s - 1) * ns + k) * whole + ln.first * a_.width();
  }

  shape s_;
  const layout_type& a_;
  const T* params_;
  const scalars_type& scalars_;
  Exec exec_;
};

}  // namespace rwd
