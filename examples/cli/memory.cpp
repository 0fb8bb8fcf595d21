// rewind memory: activation memory and step time against depth, stored against reversible.
// Each configuration runs in a fresh process of this program (so its peak RSS is its own; exec,
// not fork, because OpenMP does not survive a fork). With several thread counts it reports how
// the step scales; with --contend, how it degrades while another process spins on one core.
#include <fmt/core.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <random>

#include "commands.hpp"
#include "gpu.hpp"
#include "report.hpp"
#include "transitions.hpp"

namespace rewind_cli {

namespace {
struct row {
  std::size_t depth = 0;
  int mode = 0, threads = 0, team = 0;  // threads asked for; threads the last step ran on
  bool busy = false;
  double step_ms = 0, plan = 0, peak = 0, rss = 0, gflops = 0, ledger = 0;  // ledger: bytes (exact mode)
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

constexpr std::size_t hidden = 16;

/// The model's options for the network measured: the MLP of width o.width, or the CNN on its
/// 16 x 7 x 7 state (28 x 28 inputs squeezed twice).
rwd::options options_of(const memory_options& o) {
  const rwd::options opt{.width = o.width, .batch = o.batch, .classes = ref::classes, .seed = 1, .lossy = true};
  return ref::with_grain(o.net == "staged" ? rwd::options{.width = o.width, .batch = o.batch, .classes = ref::classes, .seed = 1, .lossy = true, .grain = ref::cnn::grain}
                         : o.net == "cnn"  ? ref::cnn::options(opt)
                                           : opt,
                         o.grain);
}
/// Flops of one 3x3 bottleneck layer's forward pass (two convolutions, c -> 32 -> c) on a batch
/// of states of shape s: 2 B positions 9 (c 32 + 32 c).
double conv_layer_flops(rwd::tensor_shape s, std::size_t batch) {
  return 2.0 * static_cast<double>(batch * s.positions()) * 9.0 * static_cast<double>(2 * s.c * 32);
}
/// Flops of one layer's forward pass for the whole batch: the MLP's two dense layers (4 W H B),
/// the CNN's two 3x3 convolutions, or the staged network's in each of its stages (depth counts
/// a layer of every stage; the stem is left out). A backward pass is twice that, a rewind one
/// forward more.
double layer_flops(const memory_options& o) {
  if (o.net == "cnn") return conv_layer_flops(ref::cnn::state, o.batch);
  if (o.net == "staged") {
    double n = 0;
    for (const auto& s : ref::staged::shapes(o.transition)) n += conv_layer_flops(s, o.batch);
    return n;
  }
  return 4.0 * static_cast<double>(o.width) * hidden * static_cast<double>(o.batch);
}

template <class Model>
row measure_model(Model& model, std::size_t depth, rwd::cpu::mode m, const memory_options& o) {
  // lossy: this measures bytes and time; past the budget the reversible gradient is garbage. Every
  // step starts from the initial parameters (put back outside the timing), so every step and
  // every mode measures the same network, and a run past the budget never trains itself into
  // non-finite values, nor the exact mode's state out of its fixed-point range.
  const std::vector<float> initial(model.parameters().begin(), model.parameters().end());
  const ref::benchmark_batch<float> b(o.width, o.batch);
  const auto& data = b.pixels;
  const auto& labels = b.labels;
  const rwd::sgd opt{.lr = 0.01, .momentum = 0.9};
  std::vector<double> times;
  for (int s = -1; s < o.steps; ++s) {  // step -1 warms up caches and the allocator
    std::copy(initial.begin(), initial.end(), model.parameters().begin());
    if (s == 0) model.memory().reset_peak();
    const auto t0 = std::chrono::steady_clock::now();
    model.loss_and_gradient(data, labels, m);
    model.apply(opt);
    if (s >= 0) times.push_back(since(t0));
  }
  std::sort(times.begin(), times.end());
  row r;
  r.depth = depth;
  r.mode = static_cast<int>(m);
  r.step_ms = times[times.size() / 2] * 1e3;
  r.plan = static_cast<double>(model.plan(m).total());
  r.peak = static_cast<double>(model.memory().peak());
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  r.rss = static_cast<double>(u.ru_maxrss) * 1024;
  r.gflops = depth * layer_flops(o) * (m == rwd::cpu::mode::stored ? 3 : 4) / (r.step_ms * 1e-3) / 1e9;
  if constexpr (requires { model.last_exact(); })
    if (m == rwd::cpu::mode::exact) r.ledger = static_cast<double>(model.last_exact().ledger_bytes_peak);
  r.team = model.last_team();
  return r;
}

row measure(std::size_t depth, rwd::cpu::mode m, const memory_options& o) {
  const rwd::env mu = rwd::env{}.set("mu", o.mu);
  if (o.net == "staged")
    return ref::staged::with_transition(o.transition, [&](auto down) {
      using Down = typename decltype(down)::type;
      rwd::cpu::staged_model<float, ref::staged::stem_t, ref::staged::block_t, Down> model(ref::staged::stem, Down{}, ref::staged::block_t{},
                                                                                         ref::staged::stages(depth), options_of(o), mu);
      return measure_model(model, depth, m, o);
    });
  if (o.net == "cnn") {
    rwd::cpu::model<float, ref::cnn::momentum_t> model(ref::cnn::momentum, depth, options_of(o), mu);
    return measure_model(model, depth, m, o);
  }
  rwd::cpu::model<float, ref::momentum_t> model(ref::momentum, depth, options_of(o), mu);
  return measure_model(model, depth, m, o);
}

/// The same measurement on the GPU: step time by CUDA events (median after a warm-up step),
/// tracked device bytes against the plan. Every step starts from the initial parameters (so a
/// lossy run past the budget never trains itself into non-finite values).
row measure_gpu(std::size_t depth, rwd::cpu::mode m, const memory_options& o) {
  const rwd::options opt = options_of(o);
  auto model = gpu::make<float>(depth, opt, o.mu, gpu::network_of(o.net, o.transition));
  const auto initial = model->parameters();
  const ref::benchmark_batch<float> b(o.width, o.batch);
  const auto& data = b.pixels;
  const auto& labels = b.labels;
  const rwd::sgd sgd{.lr = 0.01, .momentum = 0.9};
  model->step_ms(data, labels, m, sgd);  // warm-up: the caching allocator, cuBLAS's kernels
  model->set_parameters(initial);
  model->reset_peak();
  std::vector<double> times;
  for (int s = 0; s < o.steps; ++s) {
    times.push_back(model->step_ms(data, labels, m, sgd));
    model->set_parameters(initial);
  }
  std::sort(times.begin(), times.end());
  row r;
  r.depth = depth;
  r.mode = static_cast<int>(m);
  r.step_ms = times[times.size() / 2];
  r.plan = static_cast<double>(model->plan(m).total());
  r.peak = static_cast<double>(model->peak());
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  r.rss = static_cast<double>(u.ru_maxrss) * 1024;
  r.gflops = depth * layer_flops(o) * (m == rwd::cpu::mode::stored ? 3 : 4) / (r.step_ms * 1e-3) / 1e9;
  return r;
}

/// Seconds per call of f: after a warm-up call, the median of 7 rounds of `reps` calls.
template <class F>
double median_seconds(const F& f, int reps) {
  f();
  std::vector<double> times;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    times.push_back(since(t0) / reps);
  }
  std::sort(times.begin(), times.end());
  return times[3];
}

/// One product C = op(A) op(B) of a layer (op(A) m x k, op(B) k x n), as map_ops::gemm takes it;
/// a convolution's runs in tiles of `tile` columns of its patch matrices, along n or along k.
struct product {
  bool ta, tb;
  std::size_t m, n, k;
  std::size_t tile = 0;
};

/// The six GEMMs of one layer (two forward, four backward) on `samples` samples: the MLP's two
/// dense layers, or a 3x3 bottleneck (c -> 32 -> c) on states of shape s as the conv layer runs
/// them (layers/conv.hpp): the weights against the input's patches, the input cotangent against
/// the output cotangent's patches, the weights' gradient from the narrower side's patches.
std::vector<product> layer_products(const memory_options& o, std::optional<rwd::tensor_shape> s, std::size_t samples) {
  if (!s) {
    const std::size_t w = o.width, h = hidden, b = samples;
    return {{false, false, h, b, w}, {false, false, w, b, h}, {false, true, w, h, b}, {true, false, h, b, w}, {false, true, h, w, b}, {true, false, w, b, h}};
  }
  const std::size_t p = s->positions() * samples;
  std::vector<product> all;
  const auto conv = [&](std::size_t in, std::size_t out, bool forward) {
    const std::size_t tile = rwd::cpu::map_ops<float>{}.patch_tile_columns(9 * (forward ? in : std::max(in, out)));
    if (forward) return all.push_back({true, false, out, p, 9 * in, tile});
    if (in >= out) all.push_back({false, true, in, 9 * out, p, tile});  // dW += u (g's patches)^T
    else all.push_back({false, true, 9 * in, out, p, tile});            // dW^T += patches g^T
    all.push_back({false, false, in, p, 9 * out, tile});               // du = W g's patches
  };
  const std::size_t c = s->c, h = 32;
  conv(c, h, true), conv(h, c, true), conv(h, c, false), conv(c, h, false);
  return all;
}

/// C = op(A) op(B) in tiles of p.tile columns (along n, or along k where B is transposed: a
/// weights' gradient), every tile from the same A and B, which stay in cache as the conv layer's
/// patch workspace does (a yardstick that flatters the GEMM, if anything); at once where p has
/// no tiles.
template <class Gemm>
void run_product(const product& p, const float* a, const float* b, float* c, Gemm gemm) {
  const float beta = p.tb ? 1.0f : 0.0f;  // a weights' gradient adds up
  if (!p.tile) return gemm(p.ta, p.tb, p.m, p.n, p.k, a, b, beta, c);
  if (p.tb)
    for (std::size_t first = 0; first < p.k; first += p.tile) gemm(false, true, p.m, p.n, std::min(p.tile, p.k - first), a, b, beta, c);
  else
    for (std::size_t first = 0; first < p.n; first += p.tile) gemm(p.ta, false, p.m, std::min(p.tile, p.n - first), p.k, a, b, beta, c + first * p.m);
}

/// Seconds of a layer's six products for the whole batch, on every thread: `split`, each thread
/// runs them on its share of the samples through rewind's GEMM (map_ops, as a step's chunks do),
/// else Eigen runs each on the whole batch on its own threads.
double products_seconds(const memory_options& o, std::optional<rwd::tensor_shape> s, bool split) {
  const int threads = split ? rwd::cpu::threads() : 1;
  const std::size_t share = (o.batch + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
  const auto products = layer_products(o, s, split ? share : o.batch);
  std::vector<std::vector<float>> buffers(static_cast<std::size_t>(threads) * products.size() * 3);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const product& p = products[i / 3 % products.size()];
    const std::size_t along = p.tb ? p.k : p.n, span = p.tile ? std::min(p.tile, along) : along;  // A and B: one tile
    buffers[i].resize(i % 3 == 0 ? p.m * (p.tb ? span : p.k) : i % 3 == 1 ? (p.tb ? p.n : p.k) * span : p.m * p.n);
    for (auto& x : buffers[i]) x = d(rng);
  }
  const auto run = [&](std::size_t t) {
    for (std::size_t j = 0; j < products.size(); ++j) {
      const product& p = products[j];
      auto* at = &buffers[(t * products.size() + j) * 3];
      if (split) run_product(p, at[0].data(), at[1].data(), at[2].data(), [](auto... x) { rwd::cpu::map_ops<float>{}.gemm(x...); });
      else run_product(p, at[0].data(), at[1].data(), at[2].data(), [](auto... x) { rwd::cpu::map_ops<float>::eigen_gemm(x...); });
    }
  };
  return median_seconds(
      [&] {
        if (!split) return run(0);
#pragma omp parallel num_threads(threads)
        run(static_cast<std::size_t>(rwd::cpu::detail::thread_number()));
      },
      s ? 1 : 20);
}

/// The GEMM rate a step is held to: the faster of Eigen's on the whole batch and rewind's on each
/// thread's share (a layer's six products: the MLP's, the CNN's convolutions, or a layer of every
/// stage of the staged network), with both rates for the report.
struct gemm_rates {
  double eigen = 0, rewind = 0;
  double best() const { return std::max(eigen, rewind); }
};
gemm_rates gemm_gflops(const memory_options& o) {
  std::vector<std::optional<rwd::tensor_shape>> shapes{std::nullopt};
  if (o.net == "cnn") shapes = {ref::cnn::state};
  if (o.net == "staged") {
    const auto stages = ref::staged::shapes(o.transition);
    shapes.assign(stages.begin(), stages.end());
  }
  gemm_rates r;
  for (bool split : {false, true}) {
    double seconds = 0;
    for (const auto& s : shapes) seconds += products_seconds(o, s, split);
    (split ? r.rewind : r.eigen) = 3 * layer_flops(o) / seconds / 1e9;
  }
  return r;
}

/// A process that spins on one core until it is killed: the busy machine of --contend. Forked
/// from this process, it only loops (no OpenMP, no allocation), which is safe after a fork.
class busy_loop {
 public:
  busy_loop() {
    pid_ = fork();
    if (pid_ == 0)
      for (volatile bool spin = true; spin;) {
      }
    if (pid_ < 0) throw rwd::error("rewind: --contend: cannot start the busy loop");
  }
  busy_loop(const busy_loop&) = delete;
  busy_loop& operator=(const busy_loop&) = delete;
  ~busy_loop() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_;
};

row isolated(const std::string& self, std::size_t depth, rwd::cpu::mode m, int threads, bool busy, const memory_options& o) {
  const std::string cmd = fmt::format("'{}' memory --child --depths {} --child-mode {} --batch {} --width {} --steps {} "
                                      "--mu {} --threads {} --device {} --net {} --grain {} --transition {}{}",
                                      self, depth, static_cast<int>(m), o.batch, o.width, o.steps, o.mu, threads, o.device, o.net, o.grain, o.transition,
                                      o.exact_loops.empty() ? "" : " --exact-loops " + o.exact_loops);
  std::optional<busy_loop> spinner;
  if (busy) spinner.emplace();
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw rwd::error("rewind: cannot start " + cmd);
  row r{};
  const int got = std::fscanf(p, "%zu %d %lf %lf %lf %lf %lf %lf %d %d", &r.depth, &r.mode, &r.step_ms, &r.plan, &r.peak, &r.rss,
                              &r.gflops, &r.ledger, &r.threads, &r.team);
  if (pclose(p) != 0 || got != 10) throw rwd::error(fmt::format("rewind: the measurement at depth {} failed", depth));
  r.busy = busy;
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/// One ratio of step times measured in every round (each round's own ratio), and its spread.
struct ratio {
  std::size_t depth;
  std::string mode, of;  // what is compared: a mode against stored, threads against threads, busy against quiet
  double median, lo, hi;
};
ratio ratio_of(const std::vector<row>& all, std::size_t n, std::size_t rounds, std::size_t num, std::size_t den, std::string mode,
               std::string of) {
  std::vector<double> per_round;
  for (std::size_t r = 0; r < rounds; ++r) per_round.push_back(all[r * n + num].step_ms / all[r * n + den].step_ms);
  return {all[num].depth, std::move(mode), std::move(of), median(per_round), *std::min_element(per_round.begin(), per_round.end()),
          *std::max_element(per_round.begin(), per_round.end())};
}

}  // namespace

int run_memory(const memory_options& o, const std::string& self) {
  if (o.threads.empty()) throw rwd::error("rewind: --threads needs at least one count");
  if (o.net != "mlp" && o.width != ref::width) throw rwd::error("rewind: --net " + o.net + " takes 28 x 28 inputs: --width is 784");
  if (o.net != "staged" && o.transition != "squeeze") throw rwd::error("rewind: --transition is for --net staged, whose stages it joins");
  for (const auto& name : o.modes)
    if (o.net == "staged" && name == "exact") throw rwd::error("rewind: --net staged has no exact mode (its squeezes would reorder the ledger)");
  rwd::cpu::set_threads(o.threads.front());
  if (!o.exact_loops.empty()) rwd::cpu::use_exact_loops(o.exact_loops);
  const bool gpu = o.device == "cuda";
  if (gpu && o.child_mode == static_cast<int>(rwd::cpu::mode::exact))
    throw rwd::error("rewind: --device cuda: mode exact runs on the CPU backend only");
  if (o.child) {
    const auto m = static_cast<rwd::cpu::mode>(o.child_mode);
    const row r = gpu ? measure_gpu(o.depths.at(0), m, o) : measure(o.depths.at(0), m, o);
    fmt::print("{} {} {} {} {} {} {} {} {} {}\n", r.depth, r.mode, r.step_ms, r.plan, r.peak, r.rss, r.gflops, r.ledger, rwd::cpu::threads(),
               gpu ? 1 : r.team);
    return 0;
  }
  for (const auto& name : o.modes)
    if (gpu && name == "exact") throw rwd::error("rewind: --device cuda: mode exact runs on the CPU backend only");
  // the settings each configuration is measured in: thread counts, then each of them busy
  struct setting {
    int threads;
    bool busy;
  };
  std::vector<setting> settings;
  for (bool busy : {false, true})
    for (int t : o.threads)
      if (!busy || o.contend) settings.push_back({t > 0 ? t : rwd::cpu::default_threads(), busy});
  rwd::cpu::set_threads(std::max_element(settings.begin(), settings.end(), [](setting a, setting b) { return a.threads < b.threads; })->threads);
  if (gpu && settings.size() > 1) throw rwd::error("rewind: --device cuda measures one setting: one --threads count, no --contend");
  std::string where = "threads " + fmt::format("{}", settings.front().threads);
  for (std::size_t i = 1; i < settings.size(); ++i) where += fmt::format(", {}{}", settings[i].threads, settings[i].busy ? " busy" : "");
  where += fmt::format(" (of {} CPUs available)", rwd::cpu::available_cpus());
  if (gpu) {
    if (const std::string why = gpu::unavailable(); !why.empty()) throw rwd::error("rewind: --device cuda: " + why);
    where = "GPU " + gpu::make<float>(1, {.width = 8, .batch = 1, .classes = 2}, o.mu)->device() + ", CUDA events";
  }
  const gemm_rates rates = gpu ? gemm_rates{} : gemm_gflops(o);
  const double gemm = rates.best();
  std::string net = o.net == "cnn" ? "cnn, state " + ref::cnn::state.text() + ", map " + ref::cnn::f.describe(ref::cnn::state)
                                    : fmt::format("width {}, map {}", o.width, ref::f.describe(o.width));
  if (o.net == "staged") {
    net = "staged, stem " + ref::staged::stem.describe(ref::cnn::image) + ", three stages of `depth` blocks on";
    for (const auto& s : ref::staged::shapes(o.transition)) net += " " + s.text();
    net += o.transition == "strided" ? ", strided transitions (kept)" : ", squeezes between them";
    net += ", map " + ref::cnn::f.describe();
  }
  fmt::print("rewind memory: {}, batch {}, float32, mu {}, {}, median of {} steps{}\n", net, o.batch, o.mu, where, o.steps,
             o.rounds > 1 ? fmt::format(", {} interleaved rounds", o.rounds) : std::string());
  if (o.contend) fmt::print("busy: another process spins on one core while the step runs\n");
  if (std::find(o.modes.begin(), o.modes.end(), "exact") != o.modes.end()) fmt::print("exact mode's loops: {}\n", rwd::cpu::exact_loops());
  if (gpu) fmt::print("peak MB: tracked device bytes of the step's activations and workspaces\n\n");
  else
    fmt::print("GEMM on one layer's six products, {} thread(s): {:.2f} GFLOP/s (Eigen's, whole batch: {:.2f}; rewind's, each thread's share: {:.2f})\n\n",
               rwd::cpu::threads(), gemm, rates.eigen, rates.rewind);
  const auto label = [&](const row& x) { return fmt::format("{}{}", x.threads, x.busy ? " busy" : ""); };
  const auto ran = [&](const row& x) {  // the setting, and the team the last step ran on where it was smaller
    return x.team > 0 && x.team < x.threads ? fmt::format("{} ({})", label(x), x.team) : label(x);
  };
  fmt::print("{:>6} {:>11} {:>10} {:>10} {:>12} {:>12} {:>10} {:>9} {:>8}{}\n", "depth", "mode", "threads", "step ms", "plan MB", "peak MB",
             "RSS MB", "GFLOP/s", "of GEMM", o.rounds > 1 ? "  round" : "");
  // round r measures every configuration once, in the same order, so that a slow spell of a busy
  // machine falls on every configuration of a round alike; ratios are taken within a round
  const std::size_t k = o.modes.size(), per_depth = k * settings.size(), n = per_depth * o.depths.size();
  const auto rounds = static_cast<std::size_t>(o.rounds);
  std::vector<row> all;  // round-major: all[r * n + i], i = (depth, setting, mode)
  progress bar("configurations", n * rounds);
  for (std::size_t r = 0; r < rounds; ++r)
    for (std::size_t d : o.depths)
      for (const setting& s : settings)
        for (const auto& name : o.modes) {
          const auto m = parse_mode(name);
          const row x = isolated(self, d, m, s.threads, s.busy, o);
          all.push_back(x);
          fmt::print("{:>6} {:>11} {:>10} {:>10.2f} {:>12.3f} {:>12.3f} {:>10.1f} {:>9.2f} {:>8}{}\n", d, rwd::cpu::to_string(m), ran(x),
                     x.step_ms, x.plan / 1e6, x.peak / 1e6, x.rss / 1e6, x.gflops,
                     gpu ? std::string("-") : fmt::format("{:.0f}%", 100 * x.gflops / gemm),
                     rounds > 1 ? fmt::format("  {:>5}", r + 1) : std::string());
          if (m == rwd::cpu::mode::exact) {
            const double elements = 1.0 * o.width * o.batch, ideal = d * std::log2(1 / o.mu) / 8;  // v alone is scaled
            fmt::print("{:>6} {:>11} ledger {:.2f} bytes per element of v (L log2(1/mu) / 8 = {:.2f})\n", "", "", x.ledger / elements,
                       ideal);
          }
          std::fflush(stdout);
        }
  // per configuration: the median over the rounds (bytes are the same every round; RSS the largest)
  std::vector<row> rows(n);
  std::vector<std::vector<double>> times(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t r = 0; r < rounds; ++r) times[i].push_back(all[r * n + i].step_ms);
    rows[i] = all[i];
    rows[i].step_ms = median(times[i]);
    rows[i].gflops = all[i].gflops * all[i].step_ms / rows[i].step_ms;
    for (std::size_t r = 0; r < rounds; ++r) rows[i].rss = std::max(rows[i].rss, all[r * n + i].rss);
  }
  const auto mode_name = [&](std::size_t i) { return std::string(rwd::cpu::to_string(static_cast<rwd::cpu::mode>(rows[i].mode))); };
  // time over stored, per depth and setting; the first setting's time over each other setting's
  // (thread scaling: one thread over two is the speed-up); busy over quiet, per thread count
  std::vector<ratio> ratios, scaling, contention;
  for (std::size_t d = 0; d < o.depths.size(); ++d)
    for (std::size_t s = 0; s < settings.size(); ++s)
      for (std::size_t j = 0; j < k; ++j) {
        const std::size_t i = d * per_depth + s * k + j;
        if (j > 0 && o.modes.front() == "stored") ratios.push_back(ratio_of(all, n, rounds, i, i - j, mode_name(i), label(rows[i])));
        if (s > 0 && !settings[s].busy)
          scaling.push_back(ratio_of(all, n, rounds, d * per_depth + j, i, mode_name(i), fmt::format("{} over {}", label(rows[d * per_depth + j]), label(rows[i]))));
        if (settings[s].busy)
          for (std::size_t q = 0; q < settings.size(); ++q)
            if (!settings[q].busy && settings[q].threads == settings[s].threads)
              contention.push_back(ratio_of(all, n, rounds, i, d * per_depth + q * k + j, mode_name(i), fmt::format("{} threads", settings[s].threads)));
      }
  if (rounds > 1) {
    fmt::print("\nmedian of {} rounds\n{:>6} {:>11} {:>8} {:>10} {:>12} {:>12} {:>10} {:>9}\n", rounds, "depth", "mode", "threads", "step ms",
               "plan MB", "peak MB", "RSS MB", "GFLOP/s");
    for (const row& x : rows)
      fmt::print("{:>6} {:>11} {:>8} {:>10.2f} {:>12.3f} {:>12.3f} {:>10.1f} {:>9.2f}\n", x.depth,
                 rwd::cpu::to_string(static_cast<rwd::cpu::mode>(x.mode)), label(x), x.step_ms, x.plan / 1e6, x.peak / 1e6, x.rss / 1e6,
                 x.gflops);
  }
  const auto table = [&](const std::vector<ratio>& list, const std::string& title) {
    if (list.empty()) return;
    fmt::print("\n{:>6} {:>13} {:>18} {:>12}{}\n", "depth", "mode", title, "setting", rounds > 1 ? "   ratio in each round" : "");
    for (const ratio& x : list)
      fmt::print("{:>6} {:>13} {:>18.3f} {:>12}{}\n", x.depth, x.mode, x.median, x.of,
                 rounds > 1 ? fmt::format("   {:.3f} to {:.3f}", x.lo, x.hi) : std::string());
  };
  table(ratios, "time / stored");
  if (!ratios.empty()) {  // memory: stored's peak over each mode's, per depth (the first setting's)
    fmt::print("\n{:>6} {:>13} {:>18}\n", "depth", "mode", "stored / memory");
    for (std::size_t d = 0; d < o.depths.size(); ++d)
      for (std::size_t j = 1; j < k; ++j)
        fmt::print("{:>6} {:>13} {:>18.1f}\n", o.depths[d], mode_name(d * per_depth + j), rows[d * per_depth].peak / rows[d * per_depth + j].peak);
  }
  table(scaling, "speed-up");
  table(contention, "busy / quiet");
  fmt::print("({:.0f} s)\n", bar.elapsed());
  if (o.json.empty()) return 0;

  std::string json = fmt::format(
      "{{\"config\": {{\"net\": \"{}\", \"width\": {}, \"hidden\": {}, \"batch\": {}, \"mu\": {}, \"dtype\": \"float32\", \"threads\": {}, \"grain\": {}, \"transition\": \"{}\", "
      "\"available_cpus\": {}, \"contend\": {}, \"steps\": {}, \"rounds\": {}, \"gemm_gflops\": {}, \"gemm_gflops_eigen\": {}, \"gemm_gflops_rewind\": {}, \"device\": \"{}\", \"exact_loops\": \"{}\"}},\n \"rows\": [\n",
      o.net, o.width, o.net != "mlp" ? 32 : hidden, o.batch, json_number(o.mu), settings.front().threads, options_of(o).grain, o.transition, rwd::cpu::available_cpus(), o.contend ? "true" : "false", o.steps,
      rounds, json_number(gemm), json_number(rates.eigen), json_number(rates.rewind), o.device, rwd::cpu::exact_loops());
  std::string csv = "depth,mode,activation_bytes_plan,activation_bytes_peak,rss_peak_bytes,step_ms_median,gflops,threads,busy\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    const auto mode = mode_name(i);
    json += fmt::format(
        "  {{\"depth\": {}, \"mode\": \"{}\", \"threads\": {}, \"team_last_step\": {}, \"busy\": {}, \"activation_bytes_plan\": {:.0f}, "
        "\"activation_bytes_peak\": {:.0f}, \"rss_peak_bytes\": {:.0f}, \"step_ms_median\": {}, \"step_ms_rounds\": [{}], "
        "\"gflops\": {}, \"ledger_bytes\": {:.0f}}}{}\n",
        r.depth, mode, r.threads, r.team, r.busy ? "true" : "false", r.plan, r.peak, r.rss, json_number(r.step_ms), json_list(times[i]),
        json_number(r.gflops), r.ledger, i + 1 < rows.size() ? "," : "");
    csv += fmt::format("{},{},{:.0f},{:.0f},{:.0f},{:.4f},{:.4f},{},{}\n", r.depth, mode, r.plan, r.peak, r.rss, r.step_ms, r.gflops,
                       r.threads, r.busy ? 1 : 0);
  }
  const auto json_ratios = [&](const char* name, const char* key, const std::vector<ratio>& list, bool last) {
    json += fmt::format(" \"{}\": [\n", name);
    for (std::size_t i = 0; i < list.size(); ++i)
      json += fmt::format("  {{\"depth\": {}, \"mode\": \"{}\", \"setting\": \"{}\", \"{}\": {}, \"min\": {}, \"max\": {}}}{}\n",
                          list[i].depth, list[i].mode, list[i].of, key, json_number(list[i].median), json_number(list[i].lo),
                          json_number(list[i].hi), i + 1 < list.size() ? "," : "");
    json += last ? " ]}\n" : " ],\n";
  };
  json += " ],\n";
  json_ratios("ratios", "time_over_stored_median", ratios, false);
  json_ratios("scaling", "speedup_median", scaling, false);
  json_ratios("contention", "busy_over_quiet_median", contention, true);
  const std::string csv_path = write_json_and_csv(o.json, json, csv);
  auto series = [&](const std::string& y) {  // the first setting's rows, one line per mode
    std::string out;
    for (std::size_t j = 0; j < k; ++j)
      out += fmt::format("{}'{}' using 1:{} every {}::{} with linespoints lw 2 title '{}'", j ? ", " : "", csv_path, y, per_depth, j,
                         o.modes[j]);
    return out;
  };
  plot(beside(o.json, ".png"),
       "set datafile separator ','\nset key autotitle columnhead\nset multiplot layout 1,2\nset logscale xy\nset key top left\nset grid\n"
       "set xlabel 'depth'\nset ylabel 'activation MB (tracked peak)'\n"
       "plot " + series("($4/1e6)") + "\n"
       "set ylabel 'step ms (median)'\n"
       "plot " + series("6") + "\n"
       "unset multiplot\n");
  return 0;
}

}  // namespace rewind_cli
