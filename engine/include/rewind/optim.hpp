// rewind: optimizer settings, their checks, and which optimizer a model's state belongs to.
// Backends apply them to their flat parameter arena.
#pragma once

#include <cstdint>

#include <rewind/diagnostics.hpp>

namespace rwd {

/// SGD with (heavy-ball) momentum and decoupled weight decay:
///   u <- momentum*u + g;  theta <- theta - lr*(u + weight_decay*theta)
struct sgd {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
};

/// Adam (Kingma and Ba), with bias correction and decoupled weight decay (AdamW when > 0).
struct adam {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

/// The optimizer a model's optimizer state was built by. SGD's velocity is not Adam's first
/// moment, and Adam's step count is not SGD's: a model whose optimizer changes starts the new
/// one's state afresh (zero moments, step 0), exactly as a new model would.
enum class optimizer_kind : std::uint8_t { none, sgd, adam };
constexpr optimizer_kind kind_of(const sgd&) { return optimizer_kind::sgd; }
constexpr optimizer_kind kind_of(const adam&) { return optimizer_kind::adam; }

/// The settings every backend refuses, by name.
inline void check(const sgd& o) {
  if (!(o.lr > 0) || !(o.momentum >= 0 && o.momentum < 1) || !(o.weight_decay >= 0))
    throw error("rewind: sgd needs lr > 0, momentum in [0, 1) and weight_decay >= 0");
}
inline void check(const adam& o) {
  if (!(o.lr > 0) || !(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1) || !(o.eps > 0) || !(o.weight_decay >= 0))
    throw error("rewind: adam needs lr > 0, beta1 and beta2 in [0, 1), eps > 0 and weight_decay >= 0");
}

}  // namespace rwd
