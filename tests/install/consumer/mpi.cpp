// A consumer of rewind::mpi: one data-parallel step of a small momentum network.
#include <rewind/cpu.hpp>
#include <rewind/mpi/data_parallel.hpp>

#include <cstdio>
#include <vector>

using namespace rwd::literals;

int main(int argc, char** argv) {
  rwd::mpi::environment mpi(&argc, &argv);
  return rwd::mpi::run_or_abort(MPI_COMM_WORLD, [] {
    constexpr rwd::var<"x"> x;
    constexpr rwd::var<"v"> v;
    constexpr auto block = rwd::momentum(x, v, 0.9_c, rwd::map<"f">(rwd::dense<4>, rwd::tanh, rwd::dense_same));
    rwd::cpu::model<float, std::remove_cv_t<decltype(block)>> m(block, 3, {.width = 4, .batch = 2, .classes = 2});
    rwd::mpi::data_parallel dp(m);
    const std::vector<float> batch(8, 0.5f);
    const std::vector<int> labels{0, 1};
    const float loss = dp.loss_and_gradient(batch, labels, rwd::cpu::mode::reversible);
    std::printf("ranks %d, loss %.4f\n", dp.size(), loss);
    return 0;
  });
}
