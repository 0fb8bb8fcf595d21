// A CPU stand-in behind the GPU interface of the rewind program (examples/cli/gpu.hpp), so that the
// GPU benchmark's own code (its loop, the plan and peak columns, parity, the JSON) runs where no
// GPU is: the reference network on rwd::cpu::model and the staged one on rwd::cpu::staged_model,
// timed with a steady clock.
#include <chrono>
#include <utility>

#include <rewind/cpu.hpp>

#include "cli/gpu.hpp"
#include "cli/reference.hpp"

namespace rewind_cli::gpu {

std::string unavailable() { return ""; }

namespace {
template <class T, class Model>
class standin final : public engine<T> {
 public:
  template <class... Args>
  explicit standin(Args&&... args) : m_(std::forward<Args>(args)...) {}
  T loss_and_gradient(std::span<const T> batch, std::span<const int> labels, rwd::mode m) override {
    return m_.loss_and_gradient(batch, labels, m);
  }
  void apply(const rwd::sgd& o) override { m_.apply(o); }
  void apply(const rwd::adam& o) override { m_.apply(o); }
  std::vector<int> predict(std::span<const T> batch) override { return m_.predict(batch); }
  std::vector<T> parameters() const override { return {m_.parameters().begin(), m_.parameters().end()}; }
  std::vector<T> gradients() const override { return {m_.gradients().begin(), m_.gradients().end()}; }
  void set_parameters(std::span<const T> values) override {
    if (values.size() != m_.parameters().size()) throw rwd::error("rewind: wrong parameter count");
    std::ranges::copy(values, m_.parameters().begin());
  }
  void save(const std::string& path) const override { m_.save(path); }
  std::size_t peak() const override { return m_.memory().peak(); }
  void reset_peak() override { m_.memory().reset_peak(); }
  rwd::memory_plan plan(rwd::mode m) const override { return m_.plan(m); }
  double step_ms(std::span<const T> batch, std::span<const int> labels, rwd::mode m, const rwd::sgd& o) override {
    const auto start = std::chrono::steady_clock::now();
    m_.loss_and_gradient(batch, labels, m);
    m_.apply(o);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  std::string device() const override { return "cpu stand-in (rwd::cpu::model)"; }

 private:
  Model m_;
};
}  // namespace

/// The stand-in holds the MLP and the staged network with squeezes (float32), what the GPU
/// benchmark runs.
template <class T>
std::unique_ptr<engine<T>> make(std::size_t depth, const rwd::options& o, double mu, network net) {
  const rwd::env bindings = rwd::env{}.set("mu", mu);
  if (net == network::mlp) return std::make_unique<standin<T, rwd::cpu::model<T, ref::momentum_t>>>(ref::momentum, depth, o, bindings);
  if constexpr (std::is_same_v<T, float>)
    if (net == network::staged)
      return std::make_unique<standin<T, rwd::cpu::staged_model<T, ref::staged::stem_t, ref::staged::block_t>>>(
          ref::staged::stem, ref::staged::block_t{}, ref::staged::stages(depth), o, bindings);
  throw rwd::error("rewind: the GPU stand-in holds the reference MLP and the staged network with squeezes (float32) only");
}
template std::unique_ptr<engine<float>> make<float>(std::size_t, const rwd::options&, double, network);
template std::unique_ptr<engine<double>> make<double>(std::size_t, const rwd::options&, double, network);

}  // namespace rewind_cli::gpu
