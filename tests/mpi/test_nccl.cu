// Data parallelism of the CUDA engine over NCCL, under mpirun (one GPU per rank; a single GPU
// runs one rank): N ranks over a global batch give the parameters of one CUDA model over the same
// batch, the replicas' checksums agree, and the stats count the buckets. Exit 77 (skipped) where
// no GPU is visible.
#include <rewind/cuda.cuh>
#include <rewind/mpi/nccl.cuh>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace rwd::literals;

namespace {
constexpr std::size_t width = 12, classes = 3, depth = 6, global_batch = 12;

template <class Block>
int run(Block b) {
  const int rank = rwd::mpi::rank_of(MPI_COMM_WORLD), ranks = rwd::mpi::size_of(MPI_COMM_WORLD);
  int devices = 0;
  rwd::cuda::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  rwd::cuda::check(cudaSetDevice(rank % devices), "cudaSetDevice");
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  std::vector<double> batch(width * global_batch);
  std::vector<int> labels(global_batch);
  rwd::cuda::model<double, Block> whole(b, depth, {.width = width, .batch = global_batch, .classes = classes, .seed = 3});
  rwd::cuda::model<double, Block> replica(b, depth, {.width = width, .batch = global_batch / ranks, .classes = classes, .seed = 3});
  rwd::mpi::nccl_data_parallel dp(replica, MPI_COMM_WORLD, {.bucket_bytes = 512, .check_every = 1});
  for (int step = 0; step < 3; ++step) {
    for (auto& e : batch) e = normal(rng);
    for (auto& e : labels) e = static_cast<int>(rng() % classes);
    const auto [first, count] = dp.shard();
    const double a = dp.loss_and_gradient(std::span<const double>(batch.data() + first * width, count * width),
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
    std::printf("nccl: %d rank(s), %zu all-reduces per step, parameters against one model: %.2e\n", ranks, dp.stats().buckets_per_step,
                diff / scale);
  if (!(diff / scale < 1e-13)) throw rwd::error("rewind: test failed: the replicas differ from one model over the global batch");
  if (dp.stats().buckets_per_step < 2) throw rwd::error("rewind: test failed: the gradients went in fewer than two buckets");
  if (rank == 0) std::printf("nccl: ok\n");
  return 0;
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
    return run(rwd::momentum(x, v, 0.9_c, rwd::map<"f">(rwd::dense<8>, rwd::tanh, rwd::dense_same)));
  });
}
