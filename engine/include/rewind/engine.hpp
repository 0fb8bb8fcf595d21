// rewind: what every backend's engine shares: the gradient modes, the model's options, the
// memory plan, the audit's report, and the listener told of finished gradients.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <rewind/diagnostics.hpp>
#include <rewind/tensor_shape.hpp>

namespace rwd {

/// How the gradient is computed.
///   stored        standard backprop: keeps every layer's buffers
///   reversible    keeps the endpoint only and rewinds; exact within the budget L*
///   checkpointed  keeps the state every k layers (k <= L*/2) and rewinds inside each segment
///                 from its stored top: exact to float precision at any depth, O(depth/k) memory
///   exact         holds the state in fixed point and multiplies by each rational alpha = n/d
///                 through an information ledger (the CPU backend's ledger.hpp): the rewind reconstructs every bit
///                 at any depth; the gradient is exact to the precision of T
enum class mode { stored, reversible, checkpointed, exact };

inline std::string_view to_string(mode m) {
  switch (m) {
    case mode::stored: return "stored";
    case mode::reversible: return "reversible";
    case mode::checkpointed: return "checkpointed";
    case mode::exact: return "exact";
  }
  return "?";
}

/// What the last exact-mode step saw: whether the rewind gave back the input bit for bit, and the
/// ledger's size at its largest.
struct exact_report {
  bool bit_exact = false;
  std::size_t ledger_planes = 0;      // 16-bit stack words per element at the peak (planes allocated)
  std::size_t ledger_bytes_peak = 0;  // elements * (8-byte head + 2 bytes per plane)
  double ledger_bits_per_element = 0; // bits held at the top of the network, per element of a scaled variable
};

struct options {
  std::size_t width = 0, batch = 0, classes = 10;
  // Each state variable's shape per sample (channels x height x width, stored channels last: the
  // input batch holds the c values of each position together), for maps with convolutions or
  // normalizations; unset (c = 0): a flat vector of `width` values. When set, width may be left
  // 0 (it becomes c h w) or must equal c h w.
  tensor_shape shape{};
  std::uint64_t seed = 1;
  std::string_view input = "x";   // the state variable that receives the input; the others start at 0
  std::string_view output = "x";  // the state variable the loss head reads
  // The last dense layer of every map starts at this fraction of its Glorot scale, so that the
  // maps start with small slopes (as residual branches usually do): a slope near +1 already
  // divides the budget by ten (see rwd::budget with a declared slope).
  double output_init_scale = 0.02;
  // mode::checkpointed stores the state every this many layers; 0 chooses floor(L*/2) from the
  // block's budget in the model's scalar type (16 when the block's budget is unknown).
  std::size_t checkpoint_every = 0;
  // mode::exact: fractional bits F of the fixed-point state; values must stay within +-2^(51 - F)
  // (checked: a value outside is an error, never a wrong gradient). Per state variable, by name,
  // where the variables live on different scales: {{"v", 24}} gives v 24 bits, the others F.
  int exact_fraction_bits = 32;
  std::vector<std::pair<std::string_view, int>> exact_fraction_bits_of{};
  // mode::reversible deeper than the budget L* of T (rewind E007), or of a block whose budget is
  // unknown (E014: an alpha from the data that may come near zero), is refused unless this says
  // the garbage is wanted on purpose: to measure the cliff, or time a step regardless of its
  // gradient. Elements of alpha that are zero, denormal or not finite are refused even then.
  bool lossy = false;
  // CPU: a step splits the batch into chunks of this many samples, each run through every layer
  // by one thread (0: the whole batch in one chunk). The chunks, not the threads, fix the order
  // of every sum, so the gradient is the same bit for bit on any number of threads.
  std::size_t grain = 32;
};

/// The state's shape of options o: o.shape, or a flat vector of o.width.
inline tensor_shape state_shape(const options& o) { return o.shape.c ? o.shape : tensor_shape{o.width}; }
/// o with its width made the size of its shape, where a shape is set; a width that disagrees
/// with it is an error.
inline options with_shape_width(options o) {
  if (o.shape.c == 0) return o;
  if (o.width != 0 && o.width != o.shape.size())
    throw error("rewind: options.width " + std::to_string(o.width) + " is not the size of options.shape " + o.shape.text() + " (" +
                std::to_string(o.shape.size()) + ")");
  o.width = o.shape.size();
  return o;
}

/// Bytes of a training step's activations and workspaces, besides parameters, their gradients
/// and the input batch: measured (tracked peak) or planned (closed form).
struct memory_plan {
  std::size_t state_bytes = 0;      // state and cotangents: 2 * (state variables) * width * batch
  std::size_t tape_bytes = 0;       // stored mode: depth * per-layer tape
  std::size_t workspace_bytes = 0;  // the largest of the head and any update's workspace
  std::size_t total() const { return state_bytes + tape_bytes + workspace_bytes; }
};

/// How close one gradient of the audited mode is to stored backprop's.
struct gradient_agreement {
  std::string name;          // "parameters", or "input x" (dloss/d of the input variable)
  double cosine = 0;         // NaN when the audited gradient is not finite
  double max_rel_error = 0;  // max |audited - stored| / max |stored|; infinite when not finite
};

/// What the audit reports: how well the rewind reconstructs and how close every gradient the
/// step produces is to stored backprop's. A rewind error concentrated in the bottom layers barely
/// moves the parameters' cosine but wrecks the input gradient, so each is compared on its own and
/// the summary is the worst of them.
struct audit_report {
  std::vector<double> layer_error;         // relative error of the reconstructed input of each layer
  std::vector<gradient_agreement> gradients;  // parameters, then the input variable's cotangent
  double cosine = 0;                       // the lowest cosine of any of them
  double max_rel_error = 0;                // the largest max_rel_error of any of them
  double loss = 0;
};

/// Cosine and max relative error of `audited` against `reference`, in double.
template <class T>
gradient_agreement agreement(std::string name, std::span<const T> reference, std::span<const T> audited) {
  double dot = 0, nr = 0, na = 0, scale = 0, worst = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const double r = reference[i], a = audited[i];
    dot += r * a, nr += r * r, na += a * a;
    scale = std::max(scale, std::abs(r));
    worst = std::max(worst, std::abs(r - a));
  }
  gradient_agreement g{std::move(name), nr > 0 && na > 0 ? dot / std::sqrt(nr * na) : (nr == na ? 1.0 : 0.0),
                       scale > 0 ? worst / scale : worst};
  if (!std::isfinite(na) || !std::isfinite(worst)) {  // the rewind overflowed: say so
    g.cosine = std::numeric_limits<double>::quiet_NaN();
    g.max_rel_error = std::numeric_limits<double>::infinity();
  }
  return g;
}

/// A range of a parameter arena that one part of a backward pass makes final (a layer of a
/// stack, a stage's stem, the head).
struct gradient_part {
  std::size_t offset = 0, count = 0;
};

/// Told, during a backward pass, each time a suffix of the gradient arena is final: gradients()
/// from the offset it is given to the end hold their final values. The head comes first (it sits
/// at the end of the arena), then every layer from the top down. Data parallelism all-reduces
/// those suffixes while the rewind goes on below (rwd::mpi::data_parallel).
using gradient_listener = std::function<void(std::size_t first_final)>;

/// The checks every engine makes of a batch (width x batch values, all finite) and its labels.
template <class T>
void check_batch(std::span<const T> batch, std::size_t width, std::size_t n) {
  if (batch.size() != width * n)
    throw error("rewind: the batch has " + std::to_string(batch.size()) + " values; width x batch is " + std::to_string(width) + " x " +
                std::to_string(n));
  for (T v : batch)
    if (!std::isfinite(v)) throw error("rewind: the batch holds a non-finite value");
}
inline void check_labels(std::span<const int> labels, std::size_t n, std::size_t classes) {
  if (labels.size() != n) throw error("rewind: " + std::to_string(labels.size()) + " labels for a batch of " + std::to_string(n));
  for (int y : labels)
    if (y < 0 || static_cast<std::size_t>(y) >= classes)
      throw error("rewind: label " + std::to_string(y) + " outside [0, " + std::to_string(classes) + ")");
}

}  // namespace rwd
