// rewind cli: a build without the CUDA backend. --device cuda says why it cannot run.
#include "gpu.hpp"

#include <rewind/diagnostics.hpp>

namespace rewind_cli::gpu {

std::string unavailable() { return "this build has no CUDA backend (nvcc was not found when it was configured)"; }

template <class T>
std::unique_ptr<engine<T>> make(std::size_t, const rwd::options&, double) {
  throw rwd::error("rewind: --device cuda: " + unavailable());
}
template std::unique_ptr<engine<float>> make<float>(std::size_t, const rwd::options&, double);
template std::unique_ptr<engine<double>> make<double>(std::size_t, const rwd::options&, double);

}  // namespace rewind_cli::gpu
