// rewind cli: the reference network on the GPU, behind a plain interface, so that the rest of
// the program (compiled by g++) never sees CUDA. gpu.cu implements it. The `rewind` program
// takes it from a plugin it opens only when --device cuda asks for the GPU (gpu_plugin.cpp:
// librewind_gpu.so beside the program), so a CPU run neither needs nor maps the CUDA libraries
// and a machine without them runs every CPU command; the GPU benchmark links gpu.cu directly.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <rewind/engine.hpp>
#include <rewind/optim.hpp>

namespace rewind_cli::gpu {

/// Why the GPU engine cannot run here (no CUDA backend in this build, no visible device), or
/// empty when it can.
std::string unavailable();

/// The networks the GPU side holds: the reference MLP, the CNN of train --net cnn, and the staged
/// network of --net staged with squeezes or strided transitions (float only; depth: blocks per
/// stage).
enum class network { mlp, cnn, staged, staged_strided };

/// The network of --net and --transition.
inline network network_of(const std::string& net, const std::string& transition) {
  if (net == "cnn") return network::cnn;
  if (net == "staged") return transition == "strided" ? network::staged_strided : network::staged;
  return network::mlp;
}

/// A network (runtime mu) on the GPU: rwd::cuda::model<T, ref::momentum_t>,
/// rwd::cuda::model<T, ref::cnn::momentum_t> or rwd::cuda::staged_model<float, ...>.
template <class T>
class engine {
 public:
  virtual ~engine() = default;
  virtual T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, rwd::mode m) = 0;
  virtual void apply(const rwd::sgd& o) = 0;
  virtual void apply(const rwd::adam& o) = 0;
  virtual std::vector<int> predict(std::span<const T> batch) = 0;
  virtual std::vector<T> parameters() const = 0;
  virtual std::vector<T> gradients() const = 0;
  virtual void set_parameters(std::span<const T> values) = 0;
  /// Tracked device bytes of a step's activations and workspaces, and the closed-form plan.
  virtual std::size_t peak() const = 0;
  virtual void reset_peak() = 0;
  virtual rwd::memory_plan plan(rwd::mode m) const = 0;
  /// One training step (gradient, then the optimizer), timed with CUDA events on the model's stream.
  virtual double step_ms(std::span<const T> batch, std::span<const int> labels, rwd::mode m, const rwd::sgd& o) = 0;
  /// The GPU's name, compute capability and memory.
  virtual std::string device() const = 0;
  /// Writes the parameters as the CPU model does (safetensors where the name ends so).
  virtual void save(const std::string& path) const = 0;
};

/// Throws rwd::error saying why when unavailable() is not empty. The CNN's options give its
/// state's shape (ref::cnn::state); the staged network's, the image's width (784).
template <class T>
std::unique_ptr<engine<T>> make(std::size_t depth, const rwd::options& o, double mu, network net = network::mlp);

/// What the plugin exports, as the one C symbol `rewind_gpu_plugin` returning it. Built by the
/// same compiler as the program, from this header: `abi` guards against a stale plugin.
struct plugin {
  static constexpr int current_abi = 4;
  int abi;
  std::string (*unavailable)();
  std::unique_ptr<engine<float>> (*make_float)(std::size_t depth, const rwd::options& o, double mu, network net);
  std::unique_ptr<engine<double>> (*make_double)(std::size_t depth, const rwd::options& o, double mu, network net);
};

}  // namespace rewind_cli::gpu
