// Data parallelism over MPI, run under mpirun by run_mpi.cmake: `test_mpi <case>` on every rank.
//   parity    N ranks over a global batch give the parameters of 1 rank over the same batch, for
//             every mode, SGD and Adam, float64 and float32, small and large buckets; and for a
//             staged network (a stem, a squeeze, two stages of convolutional blocks)
//   checksum  the replicas' checksums agree; a perturbed replica is reported on every rank
//   throw     rank 1 throws in the middle of a step: the job stops with its message
//   exit      rank 1 exits in the middle of a step: the job stops
//   stall     rank 1 stalls: the others give up after the bounded timeout and stop the job
#include <rewind/cpu.hpp>
#include <rewind/mpi/data_parallel.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace rwd::literals;

namespace {
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr auto f = rwd::map<"f">(rwd::dense<8>, rwd::tanh, rwd::dense_same);
inline constexpr auto momentum = rwd::momentum(x, v, 0.9_c, f);
using block_t = std::remove_cv_t<decltype(momentum)>;
// the staged network: 1x4x4 images, a stem to 2 channels, stages at 2x4x4 and 8x2x2
inline constexpr auto stem = rwd::stem<"stem">(rwd::conv<2, 3>, rwd::tanh);
inline constexpr auto c = rwd::map<"c">(rwd::conv<4, 3>, rwd::group_norm<2>, rwd::relu, rwd::conv_same<3>);
inline constexpr auto conv_momentum = rwd::momentum(x, v, 0.9_c, c);
const rwd::stages staged_net{{1, 4, 4}, {2, 1}};

constexpr std::size_t width = 12, classes = 3, depth = 6, global_batch = 12;

void require(bool ok, const std::string& what) {
  if (!ok) throw rwd::error("rewind: test failed: " + what);
}

template <class T>
struct problem {  // the global batches of a few steps, the same on every rank
  std::vector<std::vector<T>> batches;
  std::vector<std::vector<int>> labels;
  explicit problem(int steps, std::size_t features = width) {
    std::mt19937_64 rng(7);
    std::normal_distribution<double> normal;
    for (int s = 0; s < steps; ++s) {
      std::vector<T> b(features * global_batch);
      std::vector<int> l(global_batch);
      for (auto& e : b) e = static_cast<T>(normal(rng));
      for (auto& e : l) e = static_cast<int>(rng() % classes);
      batches.push_back(b);
      labels.push_back(l);
    }
  }
};

/// Steps a data-parallel replica and a 1-rank model over the whole global batch side by side;
/// returns max |difference| / max |reference| of the parameters at the end. make(batch, seed)
/// makes a model of the network under test, whose input has `features` values.
template <class T, class Make, class Optimizer>
double parity_of(const Make& make, std::size_t features, rwd::cpu::mode m, const Optimizer& opt, std::size_t bucket_bytes,
                 std::size_t& buckets) {
  const int ranks = rwd::mpi::size_of(MPI_COMM_WORLD);
  const problem<T> data(4, features);
  auto whole = make(global_batch, 3);
  auto replica = make(global_batch / static_cast<std::size_t>(ranks), 100 + static_cast<std::uint64_t>(rwd::mpi::rank_of(MPI_COMM_WORLD)));
  // a different seed on every rank: the broadcast must give every replica rank 0's weights,
  // which are not the reference's either, so copy the reference's in first on rank 0
  if (rwd::mpi::rank_of(MPI_COMM_WORLD) == 0) std::ranges::copy(whole.parameters(), replica.parameters().begin());
  rwd::mpi::data_parallel dp(replica, MPI_COMM_WORLD, {.bucket_bytes = bucket_bytes, .check_every = 1});
  double worst_loss = 0;
  for (std::size_t s = 0; s < data.batches.size(); ++s) {
    const auto [first, count] = dp.shard();
    const std::span<const T> local(data.batches[s].data() + first * features, count * features);
    const std::span<const int> local_labels(data.labels[s].data() + first, count);
    const double a = dp.loss_and_gradient(local, local_labels, m);
    const double b = whole.loss_and_gradient(data.batches[s], data.labels[s], m);
    worst_loss = std::max(worst_loss, std::abs(a - b) / std::abs(b));
    dp.apply(opt);
    whole.apply(opt);
  }
  buckets = dp.stats().buckets_per_step;
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < whole.parameters().size(); ++i) {
    diff = std::max(diff, std::abs(double(whole.parameters()[i]) - double(replica.parameters()[i])));
    scale = std::max(scale, std::abs(double(whole.parameters()[i])));
  }
  require(worst_loss < (std::is_same_v<T, float> ? 1e-5 : 1e-13), "the global loss differs from the 1-rank loss");
  return diff / scale;
}
/// The networks the parity case runs: the stack of `momentum`, and the staged network.
enum class network { stack, staged };

template <class T, class Optimizer>
double parity(network n, rwd::cpu::mode m, const Optimizer& opt, std::size_t bucket_bytes, std::size_t& buckets) {
  if (n == network::staged) {
    const auto make = [](std::size_t batch, std::uint64_t seed) {
      using stem_t = std::remove_cv_t<decltype(stem)>;
      using staged_block_t = std::remove_cv_t<decltype(conv_momentum)>;
      return rwd::cpu::staged_model<T, stem_t, staged_block_t>(stem, conv_momentum, staged_net, {.batch = batch, .classes = classes, .seed = seed});
    };
    return parity_of<T>(make, staged_net.input.size(), m, opt, bucket_bytes, buckets);
  }
  const auto make = [](std::size_t batch, std::uint64_t seed) {
    return rwd::cpu::model<T, block_t>(momentum, depth, {.width = width, .batch = batch, .classes = classes, .seed = seed});
  };
  return parity_of<T>(make, width, m, opt, bucket_bytes, buckets);
}

int run_parity() {
  const int rank = rwd::mpi::rank_of(MPI_COMM_WORLD), ranks = rwd::mpi::size_of(MPI_COMM_WORLD);
  using rwd::cpu::mode;
  for (network n : {network::stack, network::staged})
    for (mode m : {mode::stored, mode::reversible, mode::checkpointed, mode::exact})
      for (std::size_t bucket : {std::size_t{256}, std::size_t{1} << 24}) {
        if (n == network::staged && m == mode::exact) continue;  // a staged network has no exact mode
        std::size_t buckets = 0;
        const double sgd64 = parity<double>(n, m, rwd::sgd{.lr = 0.1, .momentum = 0.9}, bucket, buckets);
        const double adam64 = parity<double>(n, m, rwd::adam{.lr = 0.01}, bucket, buckets);
        const double sgd32 = parity<float>(n, m, rwd::sgd{.lr = 0.1, .momentum = 0.9}, bucket, buckets);
        if (rank == 0)
          std::printf("parity %d ranks, %-6s %-12s bucket %8zu B (%2zu all-reduces/step): sgd f64 %.2e  adam f64 %.2e  sgd f32 %.2e\n",
                      ranks, n == network::staged ? "staged" : "stack", std::string(rwd::cpu::to_string(m)).c_str(), bucket, buckets, sgd64,
                      adam64, sgd32);
        require(sgd64 < 1e-13 && adam64 < 1e-13, "float64 replicas differ from the 1-rank run");
        require(sgd32 < 1e-5, "float32 replicas differ from the 1-rank run");
        require(ranks == 1 || (bucket == 256 ? buckets > 2 : buckets == 1), "the bucketing posted an unexpected number of all-reduces");
      }
  if (rank == 0) std::printf("parity: ok\n");
  return 0;
}

int run_checksum() {
  const int rank = rwd::mpi::rank_of(MPI_COMM_WORLD), ranks = rwd::mpi::size_of(MPI_COMM_WORLD);
  const problem<float> data(3);
  rwd::cpu::model<float, block_t> replica(momentum, depth, {.width = width, .batch = global_batch / static_cast<std::size_t>(ranks), .classes = classes});
  rwd::mpi::data_parallel dp(replica, MPI_COMM_WORLD, {.check_every = 1});
  for (std::size_t s = 0; s < data.batches.size(); ++s) {
    const auto [first, count] = dp.shard();
    dp.loss_and_gradient(std::span<const float>(data.batches[s].data() + first * width, count * width),
                         std::span<const int>(data.labels[s].data() + first, count), rwd::cpu::mode::reversible);
    dp.apply(rwd::adam{.lr = 0.01});  // checks the replicas every step
  }
  if (ranks > 1) {
    if (rank == ranks - 1) replica.parameters()[5] = std::nextafter(replica.parameters()[5], 1.f);  // one ulp
    std::string message;
    try {
      dp.check_replicas();
    } catch (const rwd::error& e) {
      message = e.what();
    }
    require(message.find("replicas drifted apart") != std::string::npos &&
                message.find("rank " + std::to_string(ranks - 1)) != std::string::npos,
            "a one-ulp difference on the last rank was not reported on rank " + std::to_string(rank) + ": '" + message + "'");
  }
  // shapes that differ between ranks are refused on every rank
  if (ranks > 1) {
    rwd::cpu::model<float, block_t> odd(momentum, rank == 1 ? depth + 1 : depth, {.width = width, .batch = 4, .classes = classes});
    std::string message;
    try {
      rwd::mpi::data_parallel bad(odd, MPI_COMM_WORLD);
    } catch (const rwd::error& e) {
      message = e.what();
    }
    require(message.find("built a different model") != std::string::npos, "different shapes were not refused: '" + message + "'");
  }
  if (rank == 0) std::printf("checksum: ok (%d ranks agree after %zu steps; a one-ulp difference is reported)\n", ranks, data.batches.size());
  return 0;
}

/// Trains until step 2, where rank 1 fails as `how` says.
int run_failure(const std::string& how) {
  const int rank = rwd::mpi::rank_of(MPI_COMM_WORLD), ranks = rwd::mpi::size_of(MPI_COMM_WORLD);
  const problem<float> data(4);
  rwd::cpu::model<float, block_t> replica(momentum, depth, {.width = width, .batch = global_batch / static_cast<std::size_t>(ranks), .classes = classes});
  rwd::mpi::data_parallel dp(replica, MPI_COMM_WORLD, {.timeout_seconds = 3});
  for (std::size_t s = 0; s < data.batches.size(); ++s) {
    if (rank == 1 && s == 2) {
      if (how == "throw") throw rwd::error("rewind: injected failure at step 2");
      if (how == "exit") std::_Exit(3);
      if (how == "stall") std::this_thread::sleep_for(std::chrono::seconds(60));
    }
    const auto [first, count] = dp.shard();
    dp.loss_and_gradient(std::span<const float>(data.batches[s].data() + first * width, count * width),
                         std::span<const int>(data.labels[s].data() + first, count), rwd::cpu::mode::reversible);
    dp.apply(rwd::sgd{.lr = 0.1});
  }
  return 0;  // not reached on a job of 2 ranks or more
}
}  // namespace

int main(int argc, char** argv) {
  rwd::mpi::environment mpi(&argc, &argv);
  const std::string which = argc > 1 ? argv[1] : "";
  return rwd::mpi::run_or_abort(MPI_COMM_WORLD, [&] {
    if (which == "parity") return run_parity();
    if (which == "checksum") return run_checksum();
    if (which == "throw" || which == "exit" || which == "stall") return run_failure(which);
    throw rwd::error("rewind: test_mpi takes parity, checksum, throw, exit or stall");
  });
}
