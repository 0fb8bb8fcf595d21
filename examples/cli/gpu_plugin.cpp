// rewind cli: the GPU side, opened on first use from librewind_gpu.so (gpu.cu built as a plugin)
// beside the program, or from the file $REWIND_GPU_PLUGIN names. A CPU run never calls this
// file's functions, so it never loads CUDA; a missing or broken plugin is an error that says why.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <type_traits>

#include "gpu.hpp"

#include <rewind/diagnostics.hpp>

namespace rewind_cli::gpu {
namespace {

/// The plugin, or why there is none (opened once; never closed: its code may be running).
struct loaded {
  const plugin* p = nullptr;
  std::string why;
};

std::filesystem::path plugin_path() {
  if (const char* env = std::getenv("REWIND_GPU_PLUGIN"); env && *env) return env;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path(".") : self.parent_path()) / "librewind_gpu.so";
}

loaded open_plugin() {
#ifndef REWIND_GPU_PLUGIN_BUILT
  if (!std::getenv("REWIND_GPU_PLUGIN"))
    return {nullptr, "this build has no CUDA backend (nvcc was not found when it was configured)"};
#endif
  const std::string path = plugin_path().string();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    return {nullptr, "the GPU plugin could not be loaded (" + std::string(e ? e : path) + ")"};
  }
  using entry = const plugin* (*)();
  const auto get = reinterpret_cast<entry>(dlsym(handle, "rewind_gpu_plugin"));
  if (!get) return {nullptr, "the GPU plugin " + path + " has no rewind_gpu_plugin entry point"};
  const plugin* p = get();
  if (!p || p->abi != plugin::current_abi)
    return {nullptr, "the GPU plugin " + path + " was built for another version of this program (interface " +
                         std::to_string(p ? p->abi : 0) + ", expected " + std::to_string(plugin::current_abi) + ")"};
  return {p, ""};
}

const loaded& the_plugin() {
  static const loaded l = open_plugin();
  return l;
}

}  // namespace

std::string unavailable() {
  const loaded& l = the_plugin();
  return l.p ? l.p->unavailable() : l.why;
}

template <class T>
std::unique_ptr<engine<T>> make(std::size_t depth, const rwd::options& o, double mu, network net) {
  const loaded& l = the_plugin();
  if (!l.p) throw rwd::error("rewind: --device cuda: " + l.why);
  if constexpr (std::is_same_v<T, float>) return l.p->make_float(depth, o, mu, net);
  else return l.p->make_double(depth, o, mu, net);
}
template std::unique_ptr<engine<float>> make<float>(std::size_t, const rwd::options&, double, network);
template std::unique_ptr<engine<double>> make<double>(std::size_t, const rwd::options&, double, network);

}  // namespace rewind_cli::gpu
