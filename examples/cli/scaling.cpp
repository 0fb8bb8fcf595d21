// rewind scaling: data-parallel weak scaling over MPI. For each rank count it starts a job with
// mpirun (over loopback), each rank training the reference network on a batch of the same size,
// and reports the step time, the gradient bytes all-reduced per step, what one blocking
// all-reduce of them costs, and how much of that the overlap with the rewind hid.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "commands.hpp"
#include "parallel.hpp"
#include "report.hpp"

namespace rewind_cli {

namespace {
struct row {
  int ranks = 1;
  double step_ms = 0, exposed_ms = 0, blocking_ms = 0, bytes = 0, buckets = 0, imbalance_ms = 0;
};

#ifdef REWIND_WITH_MPI
/// One rank of a measured job: prints one line on rank 0.
int measure(const scaling_options& o) {
  rwd::cpu::set_threads(1);  // one core per rank, whatever the rank count
  using model_t = rwd::cpu::model<float, ref::momentum_t>;
  model_t model(ref::momentum, o.depth, {.width = ref::width, .batch = o.batch, .classes = ref::classes, .seed = 1, .lossy = true},
                rwd::env{}.set("mu", o.mu));
  replica<model_t> trainer(model, o.bucket_kib * 1024);
  auto* dp = trainer.parallel();
  if (!dp) throw rwd::error("rewind: scaling --child runs under mpirun");
  std::mt19937 rng(7 + static_cast<unsigned>(dp->rank()));
  std::uniform_real_distribution<float> pixel(0, 1);
  std::vector<float> data(ref::width * o.batch);
  for (auto& p : data) p = pixel(rng);
  std::vector<int> labels(o.batch);
  for (std::size_t j = 0; j < o.batch; ++j) labels[j] = static_cast<int>(j % ref::classes);
  const auto m = parse_mode(o.mode);
  const rwd::sgd opt{.lr = 1e-3};
  for (int s = 0; s < 2; ++s) trainer.loss_and_gradient(data, labels, m), trainer.apply(opt);  // warm-up
  dp->reset_stats();
  // per step: the time after this rank's backward pass until its gradients were reduced, split
  // into waiting for the last rank to finish its backward (imbalance: noise, not communication)
  // and what remained after that (exposed communication). Medians: the machine is noisy.
  std::vector<double> times, exposed, imbalance;
  for (int s = 0; s < o.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    trainer.loss_and_gradient(data, labels, m);
    trainer.apply(opt);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const auto& st = dp->stats();
    double last_end = st.last_backward_end;
    if (dp->size() > 1)
      rwd::mpi::check(MPI_Allreduce(MPI_IN_PLACE, &last_end, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    exposed.push_back(std::max(0.0, st.last_reduced - std::max(last_end, st.last_backward_end)));
    imbalance.push_back(last_end - st.last_backward_end);
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const auto& st = dp->stats();
  const double blocking = dp->size() > 1 ? dp->blocking_allreduce_seconds(9) : 0;
  if (dp->rank() == 0)
    fmt::print("ROW {} {} {} {} {} {} {}\n", dp->size(), 1e3 * median(times), 1e3 * median(exposed), 1e3 * blocking, st.bytes_per_step,
               st.buckets_per_step, 1e3 * median(imbalance));
  return 0;
}

row job_of(const std::string& self, int ranks, const scaling_options& o) {
  const std::string cmd = fmt::format(
      "mpirun --allow-run-as-root --oversubscribe -np {} --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "
      "-x OMP_NUM_THREADS=1 '{}' scaling --child --depth {} --batch {} --mu {} --steps {} --mode {} --bucket-kib {} 2>&1",
      ranks, self, o.depth, o.batch, o.mu, o.steps, o.mode, o.bucket_kib);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw rwd::error("rewind: cannot start " + cmd);
  row r{};
  std::string output;
  bool got = false;
  char line[4096];
  while (std::fgets(line, sizeof line, p)) {
    output += line;
    got = got || std::sscanf(line, "ROW %d %lf %lf %lf %lf %lf %lf", &r.ranks, &r.step_ms, &r.exposed_ms, &r.blocking_ms, &r.bytes,
                             &r.buckets, &r.imbalance_ms) == 7;
  }
  if (pclose(p) != 0 || !got) throw rwd::error(fmt::format("rewind: the {}-rank job failed:\n{}", ranks, output));
  return r;
}
#endif
}  // namespace

int run_scaling(const scaling_options& o, const std::string& self) {
#ifndef REWIND_WITH_MPI
  (void)o, (void)self;
  throw rwd::error("rewind: this build has no MPI (install libopenmpi-dev and openmpi-bin, then rebuild)");
#else
  if (o.child) return measure(o);
  if (current_job().mpi) throw rwd::error("rewind: run `rewind scaling` itself without mpirun: it starts one job per rank count");
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) throw rwd::error("rewind: scaling needs mpirun (apt-get install openmpi-bin)");
  fmt::print("rewind scaling: weak scaling over MPI (loopback), {} samples per rank, depth {}, mu {}, mode {}, one thread per rank, "
             "buckets of {} KiB, median of {} steps\n\n", o.batch, o.depth, o.mu, o.mode, o.bucket_kib, o.steps);
  fmt::print("{:>6} {:>8} {:>10} {:>11} {:>12} {:>8} {:>13} {:>11} {:>8} {:>14}\n", "ranks", "batch", "step ms", "efficiency",
             "MB reduced", "buckets", "blocking ms", "exposed ms", "hidden", "imbalance ms");
  std::vector<row> rows;
  for (int k : o.ranks) {
    const row r = job_of(self, k, o);
    rows.push_back(r);
    const double hidden = r.blocking_ms > 0 ? std::clamp(1 - r.exposed_ms / r.blocking_ms, 0.0, 1.0) : 0;
    fmt::print("{:>6} {:>8} {:>10.2f} {:>11.3f} {:>12.2f} {:>8.0f} {:>13.3f} {:>11.3f} {:>8} {:>14.3f}\n", k,
               o.batch * static_cast<std::size_t>(k), r.step_ms, rows.front().step_ms / r.step_ms, r.bytes / 1e6, r.buckets, r.blocking_ms,
               r.exposed_ms, k > 1 ? fmt::format("{:.0f}%", 100 * hidden) : std::string("-"), r.imbalance_ms);
    std::fflush(stdout);
  }
  fmt::print("(efficiency: the 1-rank step time over this one; with 2 cores this measures the overhead, not a speed-up.\n"
             " blocking: one all-reduce of the whole gradient; exposed: the communication left after the last rank's backward\n"
             " pass ended; hidden = 1 - exposed / blocking; imbalance: rank 0's wait for the slowest rank, not communication)\n");
  if (o.json.empty()) return 0;
  std::string json = fmt::format(
      "{{\"config\": {{\"depth\": {}, \"batch_per_rank\": {}, \"mu\": {}, \"mode\": \"{}\", \"bucket_bytes\": {}, \"steps\": {}, "
      "\"transport\": \"loopback\"}},\n \"rows\": [\n",
      o.depth, o.batch, json_number(o.mu), o.mode, o.bucket_kib * 1024, o.steps);
  std::string csv = "ranks,step_ms,efficiency,bytes_per_step,buckets,blocking_ms,exposed_ms,hidden,imbalance_ms\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    const double hidden = r.blocking_ms > 0 ? std::clamp(1 - r.exposed_ms / r.blocking_ms, 0.0, 1.0) : 0;
    json += fmt::format(
        "  {{\"ranks\": {}, \"step_ms\": {}, \"efficiency\": {}, \"bytes_per_step\": {:.0f}, \"buckets_per_step\": {:.0f}, "
        "\"blocking_allreduce_ms\": {}, \"exposed_ms\": {}, \"hidden_fraction\": {}, \"imbalance_ms\": {}}}{}\n",
        r.ranks, json_number(r.step_ms), json_number(rows.front().step_ms / r.step_ms), r.bytes, r.buckets, json_number(r.blocking_ms),
        json_number(r.exposed_ms), r.ranks > 1 ? json_number(hidden) : "null", json_number(r.imbalance_ms), i + 1 < rows.size() ? "," : "");
    csv += fmt::format("{},{:.4f},{:.4f},{:.0f},{:.0f},{:.4f},{:.4f},{:.4f},{:.4f}\n", r.ranks, r.step_ms, rows.front().step_ms / r.step_ms,
                       r.bytes, r.buckets, r.blocking_ms, r.exposed_ms, hidden, r.imbalance_ms);
  }
  json += " ]}\n";
  write_json_and_csv(o.json, json, csv);
  return 0;
#endif
}

}  // namespace rewind_cli
