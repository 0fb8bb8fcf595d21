// rewind: the shape of a state variable per sample, and how it is stored.
#pragma once

#include <cstddef>
#include <string>

namespace rwd {

/// The shape of a state variable (or of a layer's input or output) per sample: c channels of
/// h x w positions; a flat vector of n values is {n, 1, 1} (n channels at one position). Stored
/// channels-last: position-major with the channels of one position contiguous, so that one
/// sample is one column of the batch and a batch of samples is a (c) x (h w batch) matrix.
struct tensor_shape {
  std::size_t c = 0, h = 1, w = 1;
  constexpr tensor_shape() = default;
  constexpr tensor_shape(std::size_t n) : c(n) {}  // a flat vector: the implicit 1-D case
  constexpr tensor_shape(std::size_t c_, std::size_t h_, std::size_t w_) : c(c_), h(h_), w(w_) {}
  constexpr std::size_t size() const { return c * h * w; }
  constexpr std::size_t positions() const { return h * w; }
  constexpr bool flat() const { return h == 1 && w == 1; }
  friend constexpr bool operator==(const tensor_shape&, const tensor_shape&) = default;
  /// "784" (flat) or "16x28x28" (channels x height x width); "W" when unknown (c = 0).
  std::string text() const {
    if (c == 0) return "W";
    return flat() ? std::to_string(c) : std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
  }
};

}  // namespace rwd
