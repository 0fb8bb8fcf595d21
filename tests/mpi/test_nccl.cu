// Data parallelism of the CUDA engine over NCCL, under mpirun (one GPU per rank; a single GPU
// runs one rank): N ranks over a global batch give the parameters of one CUDA model over the same
// batch, the replicas' checksums agree, and the stats count the buckets; for a stack and for a
// staged network. Exit 77 (skipped) where no GPU is visible.
#include <rewind/cuda.cuh>
#include <rewind/mpi/nccl.cuh>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace rwd::literals;

namespace {
constexpr std::size_t width = 12, classes = 3, depth = 6, global_batch = 12;
const rwd::stages staged_net{{1, 4, 4}, {2, 1}};  // a stem, then stages at 2x4x4 and 8x2x2

// the models' types are deduced, never written: nvcc's host pass cannot spell them
template <class Block>
auto stack_of(Block b) {
  return [b](std::size_t batch) { return rwd::cuda::model<double, Block>(b, depth, {.width = width, .batch = batch, .classes = classes, .seed = 3}); };
}
template <class Stem, class Block>
auto staged_of(Stem stem, Block b) {
  return [stem, b](std::size_t batch) {
    return rwd::cuda::staged_model<double, Stem, Block>(stem, b, staged_net, {.batch = batch, .classes = classes, .seed = 3});
  };
}

/// One model over the global batch and this rank's replica of it (make(batch)), three steps side
/// by side.
template <class Make>
void run(const char* name, const Make& make, std::size_t features) {
  const int rank = rwd::mpi::rank_of(MPI_COMM_WORLD), ranks = rwd::mpi::size_of(MPI_COMM_WORLD);
  int devices = 0;
  rwd::cuda::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  rwd::cuda::check(cudaSetDevice(rank % devices), "cudaSetDevice");
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  std::vector<double> batch(features * global_batch);
  std::vector<int> labels(global_batch);
  auto whole = make(global_batch);
  auto replica = make(global_batch / static_cast<std::size_t>(ranks));
  rwd::mpi::nccl_data_parallel dp(replica, MPI_COMM_WORLD, {.bucket_bytes = 512, .check_every = 1});
  for (int step = 0; step < 3; ++step) {
    for (auto& e : batch) e = normal(rng);
    for (auto& e : labels) e = static_cast<int>(rng() % classes);
    const auto [first, count] = dp.shard();
    const double a = dp.loss_and_gradient(std::span<const double>(batch.data() + first * features, count * features),
                                          std::span<const int>(labels.data() + first, count), rwd::mode::reversible);
    const double l = whole.loss_and_gradient(batch, labels, rwd::mode::reversible);
    if (std::abs(a - l) > 1e-12 * std::abs(l)) throw rwd::error("rewind: test failed: the global loss differs from one model's");
    dp.apply(rwd::adam{.lr = 0.01});
    whole.apply(rwd::adam{.lr = 0.01});
  }
  const auto p = replica.parameters(), q = whole.parameters();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < p.size(); ++i) diff = std::max(diff, std::abs(p[i] - q[i])), scale = std::max(scale, std::abs(q[i]));
  if (rank == 0)
    std::printf("nccl: %s, %d rank(s), %zu all-reduces per step, parameters against one model: %.2e\n", name, ranks,
                dp.stats().buckets_per_step, diff / scale);
  if (!(diff / scale < 1e-13)) throw rwd::error("rewind: test failed: the replicas differ from one model over the global batch");
  if (dp.stats().buckets_per_step < 2) throw rwd::error("rewind: test failed: the gradients went in fewer than two buckets");
}
}  // namespace

int main(int argc, char** argv) {
  rwd::mpi::environment mpi(&argc, &argv);
  if (auto why = rwd::cuda::no_device()) {
    std::printf("[SKIP] %s: the NCCL test compiled, not run\n", why->c_str());
    return 77;
  }
  return rwd::mpi::run_or_abort(MPI_COMM_WORLD, [] {
    constexpr rwd::var<"x"> x;
    constexpr rwd::var<"v"> v;
    run("stack", stack_of(rwd::momentum(x, v, 0.9_c, rwd::map<"f">(rwd::dense<8>, rwd::tanh, rwd::dense_same))), width);
    run("staged", staged_of(rwd::stem<"stem">(rwd::conv<2, 3>, rwd::tanh),
                            rwd::momentum(x, v, 0.9_c, rwd::map<"c">(rwd::conv<4, 3>, rwd::group_norm<2>, rwd::relu, rwd::conv_same<3>))),
        staged_net.input.size());
    if (rwd::mpi::rank_of(MPI_COMM_WORLD) == 0) std::printf("nccl: ok\n");
    return 0;
  });
}
