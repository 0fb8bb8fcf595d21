// rewind cli: the subcommands.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace rewind_cli {

struct explain_options {
  std::string block = "all";
  double mu = 0.9;
  std::size_t depth = 4;  // --block staged: blocks per stage
  std::string transition = "squeeze";  // --block staged: squeeze or strided
  std::vector<double> slope;
};
std::string explain_text(const explain_options& o);
int run_explain(const explain_options& o);

struct memory_options {
  std::vector<std::size_t> depths{8, 32, 128, 512};
  std::vector<std::string> modes{"stored", "reversible"};  // and/or "checkpointed"
  std::size_t batch = 128, width = 784, grain = 0;  // grain: samples per chunk (0: the network's own)
  std::string transition = "squeeze";                 // --net staged: squeeze or strided
  std::string exact_loops;                             // the exact mode's loops (empty: the widest the CPU runs)
  double mu = 0.9;
  int steps = 5;
  std::vector<int> threads{0};  // thread counts to measure (0: the CPUs this process may use)
  bool contend = false;         // also measure each configuration beside a busy loop
  int rounds = 1;  // the whole sweep this many times, interleaved; medians over the rounds
  std::string json, device = "cpu", net = "mlp";  // net: mlp, or cnn (train --net cnn's network; width 784)
  bool child = false;  // internal: measure one configuration in this process, print one line
  int child_mode = 0;
};
int run_memory(const memory_options& o, const std::string& self);

struct budget_options {
  std::vector<double> mus{0.3, 0.6, 0.9};
  std::vector<std::size_t> depths{8, 32, 128};
  std::string dtype = "float32";
  std::vector<std::string> policies{"reversible"};  // and/or "checkpointed"
  std::size_t batch = 32, width = 784;
  std::string json, device = "cpu";
};
int run_budget(const budget_options& o);

struct trajectory_options {
  std::size_t particles = 12, depth = 64;
  std::vector<double> mus{0.3, 0.6, 0.9};
  std::string json;
};
int run_trajectory(const trajectory_options& o);

struct train_options {
  std::size_t depth = 64, batch = 128, epochs = 3, train_limit = 0, test_limit = 0, grain = 0;  // grain: 0, the network's own
  double mu = 0.9, lr = 1e-4;
  std::string mode = "both", data = "/usr/share/datasets/fashion-mnist", json, device = "cpu", save, net = "mlp", lr_schedule = "constant", augment = "none",
              transition = "squeeze";
  bool data_given = false, synthetic = false;
  unsigned seed = 1;
};
int run_train(const train_options& o);

struct scaling_options {
  std::vector<int> ranks{1, 2};
  std::size_t depth = 64, batch = 64, bucket_kib = 1024;  // batch: per rank (weak scaling)
  double mu = 0.9;
  int steps = 10;
  std::string mode = "reversible", json;
  bool child = false;  // internal: one rank of a measured job
};
int run_scaling(const scaling_options& o, const std::string& self);

struct demo_options {
  std::string out = "report";
  bool quick = false;  // tiny sizes: a smoke test of the whole report in seconds
};
int run_demo(const demo_options& o, const std::string& self);

}  // namespace rewind_cli
