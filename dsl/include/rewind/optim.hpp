// rewind: optimizer settings. Backends apply them to their flat parameter arena.
#pragma once

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

}  // namespace rwd
