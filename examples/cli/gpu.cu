// rewind cli: the networks of the rewind program on the GPU (rwd::cuda::model, rwd::cuda::staged_model),
// behind gpu.hpp.
#include <rewind/cuda.cuh>

#include "gpu.hpp"
#include "reference.hpp"

namespace rewind_cli::gpu {

std::string unavailable() { return rwd::cuda::no_device().value_or(""); }

namespace {
template <class T, class Model>
class engine_of final : public engine<T> {
 public:
  template <class... Args>
  explicit engine_of(Args&&... args) : m_(std::forward<Args>(args)...) {
    rwd::cuda::check(cudaEventCreate(&start_), "cudaEventCreate");
    rwd::cuda::check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~engine_of() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, rwd::mode m) override {
    return m_.loss_and_gradient(batch, labels, m);
  }
  void apply(const rwd::sgd& o) override { m_.apply(o); }
  void apply(const rwd::adam& o) override { m_.apply(o); }
  std::vector<int> predict(std::span<const T> batch) override { return m_.predict(batch); }
  std::vector<T> parameters() const override { return m_.parameters(); }
  std::vector<T> gradients() const override { return m_.gradients(); }
  void set_parameters(std::span<const T> values) override { m_.set_parameters(values); }
  void save(const std::string& path) const override { m_.save(path); }
  std::size_t peak() const override { return m_.memory().peak(); }
  void reset_peak() override { m_.memory().reset_peak(); }
  rwd::memory_plan plan(rwd::mode m) const override { return m_.plan(m); }
  double step_ms(std::span<const T> batch, std::span<const int> labels, rwd::mode m, const rwd::sgd& o) override {
    const cudaStream_t s = m_.device().stream();
    rwd::cuda::check(cudaEventRecord(start_, s), "cudaEventRecord");
    m_.loss_and_gradient(batch, labels, m);
    m_.apply(o);
    rwd::cuda::check(cudaEventRecord(stop_, s), "cudaEventRecord");
    rwd::cuda::check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    rwd::cuda::check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
  }
  std::string device() const override { return rwd::cuda::device_name(); }

 private:
  Model m_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// the block's type is deduced, never written: nvcc's host pass cannot spell it
template <class T, class Block>
std::unique_ptr<engine<T>> make_of(Block b, std::size_t depth, const rwd::options& o, double mu) {
  return std::make_unique<engine_of<T, rwd::cuda::model<T, Block>>>(b, depth, o, rwd::env{}.set("mu", mu));
}
template <class Stem, class Down, class Block>
std::unique_ptr<engine<float>> make_staged(Stem stem, Down down, Block b, std::size_t depth, const rwd::options& o, double mu) {
  return std::make_unique<engine_of<float, rwd::cuda::staged_model<float, Stem, Block, Down>>>(stem, down, b, ref::staged::stages(depth), o,
                                                                                              rwd::env{}.set("mu", mu));
}
}  // namespace

template <class T>
std::unique_ptr<engine<T>> make(std::size_t depth, const rwd::options& o, double mu, network net) {
  if (const std::string why = unavailable(); !why.empty()) throw rwd::error("rewind: --device cuda: " + why);
  if (net == network::cnn) return make_of<T>(ref::cnn::momentum, depth, o, mu);
  if (net == network::staged || net == network::staged_strided) {
    if constexpr (std::is_same_v<T, float>) {
      if (net == network::staged) return make_staged(ref::staged::stem, rwd::squeeze_boundary{}, ref::cnn::momentum, depth, o, mu);
      return make_staged(ref::staged::stem, ref::staged::strided, ref::cnn::momentum, depth, o, mu);
    }
    throw rwd::error("rewind: the staged network runs on the GPU in float32");
  }
  return make_of<T>(ref::momentum, depth, o, mu);
}
template std::unique_ptr<engine<float>> make<float>(std::size_t, const rwd::options&, double, network);
template std::unique_ptr<engine<double>> make<double>(std::size_t, const rwd::options&, double, network);

}  // namespace rewind_cli::gpu

/// The plugin's entry point (the only symbol librewind_gpu.so exports).
extern "C" __attribute__((visibility("default"))) const rewind_cli::gpu::plugin* rewind_gpu_plugin() {
  namespace g = rewind_cli::gpu;
  static const g::plugin p{g::plugin::current_abi, &g::unavailable, &g::make<float>, &g::make<double>};
  return &p;
}
