// rewind cli: the reference network of DESIGN.md section 4, in the dsl alone (no backend), so
// that the CPU code and the CUDA code (compiled by nvcc) share it.
#pragma once

#include <cstddef>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

#include <rewind/engine/staged.hpp>
#include <rewind/layout.hpp>
#include <rewind/rewind.hpp>

namespace rewind_cli {

using namespace rwd::literals;

namespace ref {
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::param<"mu"> mu;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
/// momentum with a runtime mu: v <- mu*v + f(x); x <- x + v
inline constexpr auto momentum = rwd::block(v = mu * v + f(x), x = x + v);
/// leapfrog (kick, drift, kick; h = 1) with the same map
inline constexpr auto leapfrog = rwd::leapfrog(x, v, 1_c, f);
using momentum_t = std::remove_cv_t<decltype(momentum)>;
using leapfrog_t = std::remove_cv_t<decltype(leapfrog)>;
inline constexpr std::size_t side = 28, width = side * side, classes = 10;

/// `o` with `grain` samples per chunk of a CPU step, unless grain is 0 (the network's own).
inline rwd::options with_grain(rwd::options o, std::size_t grain) {
  if (grain != 0) o.grain = grain;
  return o;
}

/// The convolutional network of --net cnn: each 28 x 28 image squeezed twice (space to depth, a
/// permutation: nothing lost) into a 16 x 7 x 7 state, then momentum blocks whose f is a 3x3
/// convolution to 32 channels, group norm (8 groups), relu and a 3x3 convolution back to 16
/// channels; the linear head reads the whole state.
namespace cnn {
inline constexpr auto f = rwd::map<"f">(rwd::conv<32, 3>, rwd::group_norm<8>, rwd::relu, rwd::conv_same<3>);
inline constexpr auto momentum = rwd::block(v = mu * v + f(x), x = x + v);
using momentum_t = std::remove_cv_t<decltype(momentum)>;
inline constexpr rwd::tensor_shape image{1, 28, 28}, state = rwd::squeezed(rwd::squeezed(image));
/// Samples per chunk of a CPU step (rwd::options::grain): 8, so that a chunk's largest patch
/// matrix (8 x 49 columns of 288) stays in a core's L2; measured faster than 16 and 32, and it
/// halves the workspace.
inline constexpr std::size_t grain = 8;
/// The model's options for this network, from the MLP's.
inline rwd::options options(rwd::options o) {
  o.shape = state;
  o.grain = grain;
  return o;
}
/// A batch of n images (28 x 28, row-major) as the network's input: squeezed twice.
template <class T>
std::vector<T> input(std::span<const T> images, std::size_t n) {
  const auto once = rwd::space_to_depth(images, image, n);
  return rwd::space_to_depth(std::span<const T>(once), rwd::squeezed(image), n);
}
}  // namespace cnn

/// The staged network of --net staged: a stem (3x3 convolution 1 -> 16 channels, relu) on the
/// 28 x 28 image, then three stages of momentum blocks with the CNN's f (its bottleneck of 32
/// channels follows the stage: 16x28x28, then squeezed to 64x14x14, then to 256x7x7), and a
/// head that pools the channels over the positions and applies a linear layer.
namespace staged {
inline constexpr auto stem = rwd::stem<"stem">(rwd::conv<16, 3>, rwd::relu);
using stem_t = std::remove_cv_t<decltype(stem)>;
using block_t = cnn::momentum_t;
/// Three stages of `depth` blocks each, on the image.
inline rwd::stages stages(std::size_t depth) { return {cnn::image, {depth, depth, depth}}; }
/// --transition strided: the stages meet at a kept transition instead of a squeeze, a 2x2
/// convolution with stride 2 to 64 channels (squeeze, then 1x1), as a ResNet's downsampling block
/// (its input is kept; the velocity restarts at zero): 16x28x28, 64x14x14, 64x7x7.
inline constexpr auto strided = rwd::transition<"down">(rwd::squeeze, rwd::conv<64, 1>);
using strided_t = std::remove_cv_t<decltype(strided)>;
}  // namespace staged

/// A network's initial parameters for a model's options, as every engine makes them (the
/// reference MLP's by default).
template <class T, class Block = momentum_t>
std::vector<T> initial_parameters(std::size_t depth, const rwd::options& o) {
  const rwd::parameter_layout<Block> layout(rwd::state_shape(o), depth, o.classes);
  std::vector<T> p(layout.total);
  layout.initialise(std::span<T>(p), o.seed, o.output_init_scale);
  return p;
}

/// The benchmarks' batch: uniform pixels in [0, 1) from a fixed seed, labels cycling the classes.
template <class T>
struct benchmark_batch {
  std::vector<T> pixels;
  std::vector<int> labels;
  benchmark_batch(std::size_t width_, std::size_t n) : pixels(width_ * n), labels(n) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> pixel(0, 1);
    for (auto& p : pixels) p = static_cast<T>(pixel(rng));
    for (std::size_t j = 0; j < n; ++j) labels[j] = static_cast<int>(j % classes);
  }
};
}  // namespace ref

}  // namespace rewind_cli
