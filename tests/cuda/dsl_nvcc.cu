// nvcc compiles the dsl: a kernel instantiated from the momentum block's update expression.
// On the host the same functor is checked against the formula; on a GPU (when present) the
// kernel's result is checked against the host's. Exit 77 (skipped) when no GPU is visible.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <rewind/pointwise.hpp>
#include <rewind/rewind.hpp>
#include <vector>

using namespace rwd::literals;
namespace hana = boost::hana;

inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);

// the analysis under nvcc's front end gives what it gives under the host compiler
static_assert(rwd::identically_zero(v - v) && rwd::identically_zero(2_c * v - v - v) && rwd::identically_zero((v - v) * x));
static_assert(!rwd::identically_zero(2_c * v - v) && !rwd::identically_zero(x + f(v) - f(x)));
static_assert(rwd::diagnose<decltype(x = 0_c * x + f(v))>() == rwd::diagnosis::e002_alpha_zero);

template <class Layout, class E, class T>
__global__ void update_kernel(typename Layout::template frame<T> frame, T* out, std::size_t n) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = rwd::evaluate<Layout, E, T>(frame, i);
}

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    const cudaError_t e = (call);                                                          \
    if (e != cudaSuccess) {                                                                \
      std::printf("FAIL %s: %s\n", #call, cudaGetErrorString(e));                          \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

template <class Block>
int run(Block b) {
  using U = std::remove_cvref_t<decltype(hana::front(b.updates()))>;  // v <- 0.9*v + f(x)
  using Layout = rwd::pointwise_layout<decltype(b.state()), decltype(rwd::calls_of(typename U::rhs{})),
                                       decltype(b.params())>;
  using Frame = typename Layout::template frame<float>;
  static_assert(std::is_trivially_copyable_v<Frame>, "rewind: kernel arguments are plain data");
  constexpr std::size_t n = 1000;
  std::vector<float> xs(n), vs(n), fx(n), host(n);
  for (std::size_t i = 0; i < n; ++i) xs[i] = 0.001f * i, vs[i] = 1 - 0.002f * i, fx[i] = std::tanh(xs[i]);
  Frame frame{};
  frame.state[Layout::template state_index<std::remove_cv_t<decltype(v)>>] = vs.data();
  frame.state[Layout::template state_index<std::remove_cv_t<decltype(x)>>] = xs.data();
  frame.calls[0] = fx.data();
  int bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    host[i] = rwd::evaluate<Layout, typename U::rhs, float>(frame, i);
    bad += std::abs(host[i] - (0.9f * vs[i] + fx[i])) > 1e-6f;
  }
  std::printf("host: %d of %zu elements wrong\n", bad, n);
  if (bad) return 1;

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("[SKIP] no CUDA device visible: the kernel compiled and linked; not run\n");
    return 77;
  }
  float *dx, *dv, *df, *dout;
  CHECK_CUDA(cudaMalloc(&dx, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dv, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&df, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dout, n * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(dx, xs.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dv, vs.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(df, fx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  Frame dframe = frame;
  dframe.state[Layout::template state_index<std::remove_cv_t<decltype(v)>>] = dv;
  dframe.state[Layout::template state_index<std::remove_cv_t<decltype(x)>>] = dx;
  dframe.calls[0] = df;
  update_kernel<Layout, typename U::rhs, float><<<(n + 255) / 256, 256>>>(dframe, dout, n);
  CHECK_CUDA(cudaGetLastError());
  std::vector<float> device(n);
  CHECK_CUDA(cudaMemcpy(device.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < n; ++i) bad += std::abs(device[i] - host[i]) > 1e-6f;
  std::printf("device: %d of %zu elements differ from the host\n", bad, n);
  cudaFree(dx), cudaFree(dv), cudaFree(df), cudaFree(dout);
  return bad ? 1 : 0;
}

int main() { return run(rwd::momentum(x, v, 0.9_c, f)); }
