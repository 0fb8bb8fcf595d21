// rewind cuda: the runtime around the kernels. Every CUDA and cuBLAS call is checked, and a
// failure becomes an rwd::error that names the call; device memory comes from one tracking
// allocator over cudaMalloc (never managed memory), so peak device bytes are measured exactly.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <optional>
#include <string>

#include <rewind/diagnostics.hpp>
#include <rewind/tracking.hpp>

namespace rwd::cuda {

inline void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw error(std::string("rewind: ") + call + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
inline void check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw error(std::string("rewind: ") + call + " failed: " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
}
#define REWIND_CUDA(call) ::rwd::cuda::check((call), #call)

/// Why no CUDA device can be used, or nothing when one can.
inline std::optional<std::string> no_device() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a failed query
    return std::string("no CUDA device is visible (cudaGetDeviceCount: ") + cudaGetErrorName(e) + ")";
  }
  if (n == 0) return std::string("no CUDA device is visible");
  return std::nullopt;
}

/// The name and memory of the current device, for reports.
inline std::string device_name() {
  int d = 0;
  REWIND_CUDA(cudaGetDevice(&d));
  cudaDeviceProp p{};
  REWIND_CUDA(cudaGetDeviceProperties(&p, d));
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.totalGlobalMem >> 20) + " MiB)";
}

struct device_memory {
  static void* get(std::size_t bytes) {
    void* p = nullptr;
    REWIND_CUDA(cudaMalloc(&p, bytes));
    return p;
  }
  static void put(void* p) noexcept { cudaFree(p); }
};

/// Device memory, tracked: live and peak bytes of every buffer a step takes.
using device_tracker = caching_tracker<device_memory>;
template <class T>
using device_buffer = tracked_buffer<T, device_tracker>;

template <class T>
void upload(T* device, const T* host, std::size_t n, cudaStream_t s) {
  REWIND_CUDA(cudaMemcpyAsync(device, host, n * sizeof(T), cudaMemcpyHostToDevice, s));
}
/// Queues a copy to the host; the host buffer is valid after the stream's next synchronisation.
template <class T>
void download_async(T* host, const T* device, std::size_t n, cudaStream_t s) {
  REWIND_CUDA(cudaMemcpyAsync(host, device, n * sizeof(T), cudaMemcpyDeviceToHost, s));
}
/// A copy to the host, waited for.
template <class T>
void download(T* host, const T* device, std::size_t n, cudaStream_t s) {
  download_async(host, device, n, s);
  REWIND_CUDA(cudaStreamSynchronize(s));
}

/// One stream and one cuBLAS handle bound to it, for the model's lifetime. cuBLAS runs in its
/// default math mode: no TF32 in float32, so results match the CPU to float rounding.
class context {
 public:
  context() {
    if (auto why = no_device()) throw error("rewind: the CUDA backend needs a GPU: " + *why);
    REWIND_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    REWIND_CUDA(cublasCreate(&blas_));
    REWIND_CUDA(cublasSetStream(blas_, stream_));
    REWIND_CUDA(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
  }
  context(const context&) = delete;
  context& operator=(const context&) = delete;
  ~context() {
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas() const { return blas_; }
  void synchronize() const { REWIND_CUDA(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

}  // namespace rwd::cuda
