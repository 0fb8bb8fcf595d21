// A consumer of rewind::cpu built with its own flags (none: no -march, as most projects build):
// the exact mode's loops and thin_gemm still run the widest copy the CPU has, and an exact step
// rewinds its input bit for bit. Exits non-zero where either is not so.
#include <rewind/cpu.hpp>

#include <cstdio>
#include <string>
#include <vector>

using namespace rwd::literals;

int main() {
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512bw");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool avx512 = false, avx2 = false;
#endif
  const std::string widest = avx512 ? "avx512" : avx2 ? "avx2" : "portable";
  constexpr rwd::var<"x"> x;
  constexpr rwd::var<"v"> v;
  constexpr auto block = rwd::momentum(x, v, 0.9_c, rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same));
  rwd::cpu::model<float, std::remove_cv_t<decltype(block)>> m(block, 200, {.width = 32, .batch = 8, .classes = 4});
  std::vector<float> batch(32 * 8);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
  const std::vector<int> labels{0, 1, 2, 3, 0, 1, 2, 3};
  const float loss = m.loss_and_gradient(batch, labels, rwd::cpu::mode::exact);
  const bool exact = m.last_exact().bit_exact, thin = rwd::cpu::detail::thin_gemm_runs;
  std::printf("exact loops %s (the CPU's widest: %s), thin_gemm %s, loss %.4f, rewound bit for bit: %s\n",
              std::string(rwd::cpu::exact_loops()).c_str(), widest.c_str(), thin ? "yes" : "no", loss, exact ? "yes" : "no");
  return rwd::cpu::exact_loops() == widest && thin == avx512 && exact ? 0 : 1;
}
