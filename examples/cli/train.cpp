// rewind train: the reference network on Fashion-MNIST (or the built-in synthetic problem when
// the data is not installed), in stored and reversible mode on one seed and schedule.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "commands.hpp"
#include "gpu.hpp"
#include "idx.hpp"
#include "parallel.hpp"
#include "report.hpp"
#include "transitions.hpp"

namespace rewind_cli {

namespace {
struct epoch_row {
  std::string mode;
  std::size_t epoch = 0;
  double loss = 0, train_acc = 0, test_acc = 0, seconds = 0, step_ms = 0, peak_bytes = 0;
};

/// The fraction of d (its first `limit` samples) that the model classifies right; in a job, the
/// ranks take turns with the model's batches and the counts are summed.
template <class Trainer>
double accuracy(Trainer& m, std::size_t B, const dataset& d, std::size_t limit) {
  const std::size_t W = d.features, n = limit ? std::min(limit, d.count) : d.count;
  const auto rank = static_cast<std::size_t>(current_job().rank), ranks = static_cast<std::size_t>(current_job().ranks);
  std::vector<float> batch(W * B);
  std::size_t correct = 0;
  for (std::size_t start = rank * B; start < n; start += ranks * B) {
    const std::size_t k = std::min(B, n - start);
    std::fill(batch.begin(), batch.end(), 0.f);  // a short last batch is padded, its padding ignored
    std::copy_n(d.images.begin() + static_cast<long>(start * W), k * W, batch.begin());
    const auto pred = m.predict(batch);
    for (std::size_t j = 0; j < k; ++j) correct += pred[j] == d.labels[start + j];
  }
  return sum_over_ranks(static_cast<double>(correct)) / static_cast<double>(n);
}

/// A network (the reference MLP's block or the CNN's) on the CPU: this process alone, or a replica
/// of an MPI job.
template <class Block>
struct cpu_trainer {
  rwd::cpu::model<float, Block> model;
  replica<rwd::cpu::model<float, Block>> parallel{model};
  cpu_trainer(std::size_t depth, const rwd::options& o, double mu) : model(Block{}, depth, o, rwd::env{}.set("mu", mu)) {}
  float loss_and_gradient(std::span<const float> b, std::span<const int> l, rwd::mode m) { return parallel.loss_and_gradient(b, l, m); }
  void apply(const rwd::adam& a) { parallel.apply(a); }
  std::vector<int> predict(std::span<const float> b) { return model.predict(b); }
  void reset_peak() { model.memory().reset_peak(); }
  std::size_t peak() const { return model.memory().peak(); }
  void save(const std::string& path) const { model.save(path); }
};

/// The staged network on the CPU with transition Down: this process alone, or a replica of an MPI
/// job.
template <class Down>
struct staged_trainer {
  rwd::cpu::staged_model<float, ref::staged::stem_t, ref::staged::block_t, Down> model;
  replica<rwd::cpu::staged_model<float, ref::staged::stem_t, ref::staged::block_t, Down>> parallel{model};
  staged_trainer(std::size_t depth, const rwd::options& o, double mu)
      : model(ref::staged::stem, Down{}, ref::staged::block_t{}, ref::staged::stages(depth), o, rwd::env{}.set("mu", mu)) {}
  float loss_and_gradient(std::span<const float> b, std::span<const int> l, rwd::mode m) { return parallel.loss_and_gradient(b, l, m); }
  void apply(const rwd::adam& a) { parallel.apply(a); }
  std::vector<int> predict(std::span<const float> b) { return model.predict(b); }
  void reset_peak() { model.memory().reset_peak(); }
  std::size_t peak() const { return model.memory().peak(); }
  void save(const std::string& path) const { model.save(path); }
};

/// A network of the program on the GPU.
template <gpu::network Net>
struct gpu_trainer {
  std::unique_ptr<gpu::engine<float>> engine;
  gpu_trainer(std::size_t depth, const rwd::options& o, double mu) : engine(gpu::make<float>(depth, o, mu, Net)) {}
  float loss_and_gradient(std::span<const float> b, std::span<const int> l, rwd::mode m) { return engine->loss_and_gradient(b, l, m); }
  void apply(const rwd::adam& a) { engine->apply(a); }
  std::vector<int> predict(std::span<const float> b) { return engine->predict(b); }
  void reset_peak() { engine->reset_peak(); }
  std::size_t peak() const { return engine->peak(); }
  void save(const std::string& path) const { engine->save(path); }
};

/// The learning rate of step t of T: --lr throughout, or with --lr-schedule cosine, --lr decayed
/// along half a cosine to 0 at the last step.
double learning_rate(const train_options& o, std::size_t t, std::size_t T) {
  if (o.lr_schedule != "cosine") return o.lr;
  return 0.5 * o.lr * (1 + std::cos(3.141592653589793 * static_cast<double>(t) / static_cast<double>(T)));
}

/// Where --save writes mode `name`'s weights: the file itself, or with --mode both the file with
/// the mode before its extension (w.safetensors: w.stored.safetensors, w.reversible.safetensors).
std::string save_path(const train_options& o, const std::string& name) {
  if (o.mode != "both") return o.save;
  const std::filesystem::path p(o.save);
  return (p.parent_path() / (p.stem().string() + "." + name + p.extension().string())).string();
}

/// The network of --net (and --transition), in a line.
std::string description(const std::string& net, const std::string& transition) {
  if (net == "cnn")
    return "cnn: image squeezed twice to " + ref::cnn::state.text() + ", momentum blocks, f: " + ref::cnn::f.describe(ref::cnn::state) + ", linear head";
  if (net == "staged") {
    const auto shapes = ref::staged::shapes(transition);
    const std::string between = transition == "strided" ? "transition " + std::string(ref::staged::strided.name) + " (kept): " : "squeeze, ";
    std::string text = "staged: stem " + ref::staged::stem.describe(ref::cnn::image);
    for (std::size_t s = 0; s < shapes.size(); ++s)
      text += fmt::format("; {}stage {}: momentum blocks on {}, f: {}",
                          s == 0 ? "" : transition == "strided" ? between + ref::staged::strided.describe(shapes[s - 1]) + ", " : between, s + 1,
                          shapes[s].text(), ref::cnn::f.describe(shapes[s]));
    return text + "; pool, linear head";
  }
  return "mlp: momentum blocks, f: " + ref::f.describe(ref::width) + ", linear head";
}

/// Whether --augment flip mirrors training image `i` in epoch `e`: a hash of (seed, epoch, image),
/// so both modes, every rank and every run with the seed see the same images.
bool flipped(const train_options& o, std::size_t e, std::size_t i) {
  if (o.augment != "flip") return false;
  std::uint64_t z = (std::uint64_t{o.seed} << 40) ^ (std::uint64_t{e} << 32) ^ i;  // splitmix64's finaliser
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return ((z ^ (z >> 31)) & 1) != 0;
}

/// Copies image `from` (side x side, row-major) to `to`, mirrored left to right.
void mirror(const float* from, float* to, std::size_t side) {
  for (std::size_t r = 0; r < side; ++r) std::reverse_copy(from + r * side, from + (r + 1) * side, to + r * side);
}

template <class Trainer>
std::vector<epoch_row> train_one(const split& data, rwd::cpu::mode mode, const train_options& o) {
  // B is the global batch; this process trains on its shard [first, first + b)
  const std::size_t W = data.train.features, B = o.batch, b = B / static_cast<std::size_t>(current_job().ranks);
  const std::size_t first = b * static_cast<std::size_t>(current_job().rank);
  const rwd::options mlp{.width = W, .batch = b, .classes = ref::classes, .seed = o.seed};
  const rwd::options staged{.width = W, .batch = b, .classes = ref::classes, .seed = o.seed, .grain = ref::cnn::grain};
  Trainer trainer(o.depth, ref::with_grain(o.net == "cnn" ? ref::cnn::options(mlp) : o.net == "staged" ? staged : mlp, o.grain), o.mu);
  const std::size_t n = o.train_limit ? std::min(o.train_limit, data.train.count) : data.train.count;
  const std::size_t steps = n / B;
  if (steps == 0) throw rwd::error("rewind: fewer training samples than one batch");
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 shuffle(o.seed);  // the same order for both modes
  std::vector<float> batch(W * b);
  std::vector<int> labels(b);
  std::vector<epoch_row> rows;
  const std::string name(rwd::cpu::to_string(mode));
  for (std::size_t e = 1; e <= o.epochs; ++e) {
    std::shuffle(order.begin(), order.end(), shuffle);
    progress bar(fmt::format("{} epoch {}/{} steps", name, e, o.epochs), steps);
    trainer.reset_peak();
    double loss = 0;
    for (std::size_t s = 0; s < steps; ++s) {
      for (std::size_t j = 0; j < b; ++j) {
        const std::size_t i = order[s * B + first + j];
        if (flipped(o, e, i)) mirror(data.train.images.data() + i * W, batch.data() + j * W, ref::side);
        else std::copy_n(data.train.images.begin() + static_cast<long>(i * W), W, batch.begin() + static_cast<long>(j * W));
        labels[j] = data.train.labels[i];
      }
      loss += trainer.loss_and_gradient(batch, labels, mode);
      trainer.apply(rwd::adam{.lr = learning_rate(o, (e - 1) * steps + s, o.epochs * steps)});
      bar.tick(s + 1);
    }
    const double seconds = bar.elapsed();
    // train accuracy on (up to) the first 10000 training samples, after the epoch
    dataset head{std::min<std::size_t>(n, 10000), W, {}, {}};
    head.images.resize(head.count * W);
    head.labels.resize(head.count);
    for (std::size_t j = 0; j < head.count; ++j) {
      std::copy_n(data.train.images.begin() + static_cast<long>(order[j] * W), W, head.images.begin() + static_cast<long>(j * W));
      head.labels[j] = data.train.labels[order[j]];
    }
    epoch_row r{name, e, loss / static_cast<double>(steps), accuracy(trainer, b, head, 0), accuracy(trainer, b, data.test, o.test_limit),
                seconds, 1e3 * seconds / static_cast<double>(steps), static_cast<double>(trainer.peak())};
    fmt::print("{:>11} epoch {:>2}: loss {:.4f}  train {:.2f}%  test {:.2f}%  {:.1f} s ({:.1f} ms/step)  peak {:.2f} MB\n", name, e,
               r.loss, 100 * r.train_acc, 100 * r.test_acc, r.seconds, r.step_ms, r.peak_bytes / 1e6);
    std::fflush(stdout);
    rows.push_back(r);
  }
  if (!o.save.empty() && current_job().rank == 0) {  // every replica holds the same weights
    const std::string path = save_path(o, name);
    trainer.save(path);
    fmt::print("{:>11} weights: {}\n", name, path);
  }
  return rows;
}

/// train_one on the GPU with the network of --net and --transition.
std::vector<epoch_row> train_on_gpu(const split& data, rwd::cpu::mode mode, const train_options& o) {
  switch (gpu::network_of(o.net, o.transition)) {
    case gpu::network::cnn: return train_one<gpu_trainer<gpu::network::cnn>>(data, mode, o);
    case gpu::network::staged: return train_one<gpu_trainer<gpu::network::staged>>(data, mode, o);
    case gpu::network::staged_strided: return train_one<gpu_trainer<gpu::network::staged_strided>>(data, mode, o);
    case gpu::network::mlp: break;
  }
  return train_one<gpu_trainer<gpu::network::mlp>>(data, mode, o);
}
}  // namespace

int run_train(const train_options& o) {
  if (o.mode != "stored" && o.mode != "reversible" && o.mode != "checkpointed" && o.mode != "exact" && o.mode != "both")
    throw rwd::error("rewind: --mode is stored, reversible, checkpointed, exact or both");
  if (o.depth == 0 || o.batch == 0 || o.epochs == 0) throw rwd::error("rewind: --depth, --batch and --epochs are at least 1");
  const int ranks = current_job().ranks;
  if (o.device == "cuda") {
    if (const std::string why = gpu::unavailable(); !why.empty()) throw rwd::error("rewind: --device cuda: " + why);
    if (ranks > 1) throw rwd::error("rewind: --device cuda trains on one GPU; under mpirun, train on the CPU (NCCL is not built yet)");
    if (o.mode == "exact") throw rwd::error("rewind: --device cuda: mode exact runs on the CPU backend only");
  }
  if (o.net != "staged" && o.transition != "squeeze") throw rwd::error("rewind: --transition is for --net staged, whose stages it joins");
  if (o.net == "staged" && o.mode == "exact") throw rwd::error("rewind: --net staged has no exact mode (its squeezes would reorder the ledger)");
  if (o.augment == "flip" && o.net == "cnn")
    throw rwd::error("rewind: --augment flip mirrors the image as read; --net cnn squeezes it when it is read (use --net staged)");
  if (o.batch % static_cast<std::size_t>(ranks) != 0)
    throw rwd::error(fmt::format("rewind: --batch {} does not split into {} equal shards (one per rank)", o.batch, ranks));
  if (!(o.mu > 0 && o.mu <= 1)) throw rwd::error("rewind: --mu must be in (0, 1]");
  if (const auto folder = std::filesystem::path(o.save).parent_path(); !o.save.empty() && !folder.empty() && !std::filesystem::is_directory(folder))
    throw rwd::error("rewind: --save " + o.save + ": no such folder");  // said now, not after the training
  split data;
  if (o.synthetic) data = synthetic(12000, 2000);
  else if (std::filesystem::exists(o.data)) data = read_fashion_mnist(o.data);
  else if (o.data_given) throw rwd::error("rewind: --data " + o.data + ": no such folder");
  else data = synthetic(12000, 2000);  // the default folder is absent: dataset-fashion-mnist is not installed
  if (data.train.features != ref::width) throw rwd::error("rewind: the reference network takes 784 features");
  if (o.net == "cnn")  // the images as the CNN's state: squeezed twice to 16 x 7 x 7 (the staged network's stem reads them as they are)
    for (dataset* d : {&data.train, &data.test}) d->images = ref::cnn::input<float>(d->images, d->count);
  const bool is_cnn = o.net == "cnn" || o.net == "staged";
  const auto budget = is_cnn ? rwd::budget<float>(ref::cnn::momentum, rwd::env{}.set("mu", o.mu)) : rwd::budget<float>(ref::momentum, rwd::env{}.set("mu", o.mu));
  fmt::print("rewind train: {}\n  {}\n  {} train / {} test samples{}, depth {}, mu {} (float32 budget L* = {}), batch {}, "
             "adam lr {}{}, {} epoch(s), seed {}{}\n  {}\n",
             data.source,
             description(o.net, o.transition),
             o.train_limit ? std::min(o.train_limit, data.train.count) : data.train.count,
             o.test_limit ? std::min(o.test_limit, data.test.count) : data.test.count, o.train_limit ? " (limited)" : "",
             o.depth, o.mu, budget.unlimited() ? std::string("unlimited") : std::to_string(budget.layers), o.batch, o.lr,
             o.lr_schedule == "cosine" ? " (cosine decay)" : "",
             o.epochs, o.seed, o.augment == "flip" ? ", images mirrored at random (--augment flip)" : "",
             ranks == 1 ? std::string("1 process")
                        : fmt::format("{} ranks (MPI data parallelism): {} samples of each batch per rank, gradients all-reduced "
                                      "while the backward pass runs", ranks, o.batch / static_cast<std::size_t>(ranks)));
  std::vector<epoch_row> rows;
  for (const char* m : {"stored", "reversible", "checkpointed", "exact"})
    if ((o.mode == "both" && (std::string(m) == "stored" || std::string(m) == "reversible")) || o.mode == m) {
      auto r = o.device == "cuda"  ? train_on_gpu(data, parse_mode(m), o)
               : o.net == "staged" ? ref::staged::with_transition(o.transition, [&](auto down) {
                                         return train_one<staged_trainer<typename decltype(down)::type>>(data, parse_mode(m), o);
                                       })
               : is_cnn            ? train_one<cpu_trainer<ref::cnn::momentum_t>>(data, parse_mode(m), o)
                                  : train_one<cpu_trainer<ref::momentum_t>>(data, parse_mode(m), o);
      rows.insert(rows.end(), r.begin(), r.end());
    }
  double final_stored = -1, final_rev = -1, ms_stored = 0, ms_rev = 0;
  for (const auto& r : rows) {
    if (r.mode == "stored") final_stored = r.test_acc, ms_stored = r.step_ms;
    else if (r.mode == "reversible") final_rev = r.test_acc, ms_rev = r.step_ms;
  }
  if (final_stored >= 0 && final_rev >= 0)
    fmt::print("final test accuracy: stored {:.2f}%, reversible {:.2f}% (difference {:+.2f} points); reversible/stored step time {:.3f}\n",
               100 * final_stored, 100 * final_rev, 100 * (final_rev - final_stored), ms_rev / ms_stored);
  if (o.json.empty()) return 0;
  std::string json = fmt::format(
      "{{\"config\": {{\"net\": \"{}\", \"data\": \"{}\", \"depth\": {}, \"mu\": {}, \"batch\": {}, \"epochs\": {}, \"lr\": {}, \"lr_schedule\": \"{}\", \"augment\": \"{}\", \"transition\": \"{}\", \"grain\": {}, \"optimizer\": \"adam\", "
      "\"seed\": {}, \"train_samples\": {}, \"ranks\": {}, \"device\": \"{}\"}},\n \"epochs\": [\n",
      o.net, std::string(data.source.starts_with("Fashion") ? "fashion-mnist" : "synthetic"), o.depth, json_number(o.mu), o.batch, o.epochs,
      json_number(o.lr), o.lr_schedule, o.augment, o.transition, o.grain, o.seed, o.train_limit ? std::min(o.train_limit, data.train.count) : data.train.count, ranks, o.device);
  std::string csv = "mode,epoch,loss,train_acc,test_acc,seconds,step_ms,peak_bytes\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    json += fmt::format(
        "  {{\"mode\": \"{}\", \"epoch\": {}, \"loss\": {}, \"train_acc\": {}, \"test_acc\": {}, \"seconds\": {}, \"step_ms\": {}, "
        "\"peak_bytes\": {:.0f}}}{}\n",
        r.mode, r.epoch, json_number(r.loss), json_number(r.train_acc), json_number(r.test_acc), json_number(r.seconds),
        json_number(r.step_ms), r.peak_bytes, i + 1 < rows.size() ? "," : "");
    csv += fmt::format("{},{},{:.6f},{:.6f},{:.6f},{:.3f},{:.3f},{:.0f}\n", r.mode, r.epoch, r.loss, r.train_acc, r.test_acc, r.seconds,
                       r.step_ms, r.peak_bytes);
  }
  json += " ],\n \"final\": {";
  bool first = true;
  for (const char* m : {"stored", "reversible", "checkpointed", "exact"}) {
    double acc = -1;
    for (const auto& r : rows)
      if (r.mode == m) acc = r.test_acc;
    if (acc < 0) continue;
    json += fmt::format("{}\"{}\": {{\"test_acc\": {}}}", first ? "" : ", ", m, json_number(acc));
    first = false;
  }
  json += "}}\n";
  const std::string csv_path = write_json_and_csv(o.json, json, csv);
  plot(beside(o.json, ".png"),
       "set datafile separator ','\nset grid\nset key bottom right\nset xlabel 'epoch'\nset ylabel 'test accuracy %'\n"
       "plot '" + csv_path + "' using (strcol(1) eq 'stored' ? $2 : 1/0):($5*100) every ::1 with linespoints lw 2 title 'stored', "
       "'' using (strcol(1) eq 'reversible' ? $2 : 1/0):($5*100) every ::1 with linespoints lw 2 dt 2 title 'reversible'\n");
  return 0;
}

}  // namespace rewind_cli
