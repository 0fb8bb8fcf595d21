// rewind demo: the main job. Runs every subcommand at sizes that finish in a few minutes on two
// cores and writes JSON, CSV, PNG and a summary.md with the tables into a report folder.
#include <fmt/core.h>

#include <cstdio>

#include "commands.hpp"
#include "report.hpp"

namespace rewind_cli {

namespace {
/// Runs `rewind ARGS` as a child, echoing its output; returns the output.
std::string run_step(const std::string& self, const std::string& args) {
  const std::string cmd = "'" + self + "' " + args + " 2>&1";
  fmt::print("\n$ rewind {}\n", args);
  std::fflush(stdout);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw rwd::error("rewind: cannot start " + cmd);
  std::string out;
  char line[4096];
  while (std::fgets(line, sizeof line, p)) {
    out += line;
    std::fputs(line, stdout);
    std::fflush(stdout);
  }
  if (pclose(p) != 0) throw rwd::error("rewind: the step `rewind " + args + "` failed");
  return out;
}
}  // namespace

int run_demo(const demo_options& o, const std::string& self) {
  namespace fs = std::filesystem;
  fs::create_directories(o.out);
  const std::string dir = fs::absolute(o.out).string();
  struct step {
    std::string title, args;
  };
  const std::vector<step> full{
      {"The derivation of the built-in blocks", "explain"},
      {"Memory and time against depth (reference configuration)", fmt::format("memory --depths 8,32,128,512 --steps 3 --modes stored,reversible,checkpointed,exact --json {}/memory.json", dir)},
      {"Gradient agreement against the budget, float32", fmt::format("budget --mus 0.3,0.6,0.9 --depths 8,16,32,64,128 --batch 32 --policies reversible,checkpointed,exact --json {}/budget.json", dir)},
      {"Gradient agreement against the budget, float64", fmt::format("budget --mus 0.3,0.6,0.9 --depths 8,32,128,512 --batch 16 --dtype float64 --json {}/budget64.json", dir)},
      {"Rewind error along the trajectory", fmt::format("trajectory --particles 12 --depth 64 --mus 0.3,0.6,0.9 --json {}/trajectory.json", dir)},
      {"Training, stored against reversible (short run)", fmt::format("train --depth 64 --mu 0.9 --epochs 2 --train-limit 12800 --json {}/train.json", dir)},
      {"Training a convolutional network, stored against reversible (short run)", fmt::format("train --net cnn --depth 8 --lr 1e-3 --epochs 1 --train-limit 12800 --json {}/train_cnn.json", dir)},
      {"A staged network, stage by stage", "explain --block staged --depth 2"},
      {"Training the staged network, stored against reversible (short run)", fmt::format("train --net staged --depth 1 --lr 2e-3 --epochs 1 --train-limit 6400 --test-limit 2000 --json {}/train_staged.json", dir)},
  };
  const std::vector<step> quick{
      {"The derivation of the built-in blocks", "explain --block momentum"},
      {"Memory and time against depth", fmt::format("memory --depths 2,8 --width 32 --batch 4 --steps 1 --modes stored,reversible,exact --json {}/memory.json", dir)},
      {"Gradient agreement against the budget, float32", fmt::format("budget --mus 0.5 --depths 4,64 --width 16 --batch 4 --json {}/budget.json", dir)},
      {"Gradient agreement against the budget, float64", fmt::format("budget --mus 0.5 --depths 4,64 --width 16 --batch 4 --dtype float64 --json {}/budget64.json", dir)},
      {"Rewind error along the trajectory", fmt::format("trajectory --particles 3 --depth 8 --mus 0.5 --json {}/trajectory.json", dir)},
      {"Training, stored against reversible", fmt::format("train --synthetic --depth 2 --batch 32 --epochs 1 --train-limit 256 --test-limit 128 --json {}/train.json", dir)},
      {"Training a convolutional network, stored against reversible", fmt::format("train --net cnn --synthetic --depth 2 --batch 32 --epochs 1 --train-limit 256 --test-limit 128 --json {}/train_cnn.json", dir)},
      {"Training the staged network, stored against reversible", fmt::format("train --net staged --synthetic --depth 1 --batch 16 --epochs 1 --train-limit 64 --test-limit 32 --json {}/train_staged.json", dir)},
  };
  const auto& steps = o.quick ? quick : full;
  progress bar("steps", steps.size());
  std::string summary = "# rewind demo report\n\nEach section is a command of the `rewind` program and what it printed. "
                        "JSON, CSV and PNG files sit beside this file.\n";
  std::size_t done = 0;
  for (const auto& s : steps) {
    const std::string out = run_step(self, s.args);
    if (s.args == "explain") write_file(dir + "/explain.txt", out);
    summary += fmt::format("\n## {}\n\n```\n$ rewind {}\n{}```\n", s.title, s.args, out);
    bar.tick(++done);
  }
  write_file(dir + "/summary.md", summary);
  fmt::print("\nrewind demo: the report is in {} (summary.md, JSON, CSV{}) after {:.0f} s\n", dir,
             gnuplot_available() ? ", PNG" : "; no PNG: gnuplot is not installed", bar.elapsed());
  return 0;
}

}  // namespace rewind_cli
