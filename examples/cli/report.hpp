// rewind cli: what every subcommand shares: the reference network, output files (JSON, CSV,
// PNG through gnuplot when installed), progress lines and tables.
#pragma once

#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <rewind/cpu.hpp>

#include "reference.hpp"

namespace rewind_cli {

inline rwd::cpu::mode parse_mode(const std::string& name) {
  if (name == "stored") return rwd::cpu::mode::stored;
  if (name == "reversible") return rwd::cpu::mode::reversible;
  if (name == "checkpointed") return rwd::cpu::mode::checkpointed;
  if (name == "exact") return rwd::cpu::mode::exact;
  throw rwd::error("rewind: unknown mode '" + name + "' (stored, reversible, checkpointed or exact)");
}

// --- files ---------------------------------------------------------------------------------------

/// FILE.json -> FILE.csv / FILE.png beside it.
inline std::string beside(const std::string& json, const std::string& ext) {
  std::filesystem::path p(json);
  p.replace_extension(ext);
  return p.string();
}

/// Whether this process writes files: false on the ranks of an MPI job other than rank 0.
inline bool& writes_files() {
  static bool yes = true;
  return yes;
}

inline void write_file(const std::string& path, const std::string& content) {
  if (path.empty() || !writes_files()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out.flush()) throw rwd::error("rewind: cannot write " + path);
  }
  std::filesystem::rename(tmp, path);
}

/// Writes the JSON and a CSV beside it (FILE.csv), says so, and returns the CSV's path.
inline std::string write_json_and_csv(const std::string& json_path, const std::string& json, const std::string& csv) {
  write_file(json_path, json);
  const std::string csv_path = beside(json_path, ".csv");
  write_file(csv_path, csv);
  fmt::print("wrote {} and {}\n", json_path, csv_path);
  return csv_path;
}

inline std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  return fmt::format("{:.9g}", x);
}

/// "1.5, 2, null": numbers for a JSON array.
inline std::string json_list(const std::vector<double>& xs) {
  std::string out;
  for (std::size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + json_number(xs[i]);
  return out;
}

inline bool gnuplot_available() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

/// Draws a PNG with gnuplot from a script whose `set output` is filled in; says so when skipped.
inline void plot(const std::string& png, const std::string& script) {
  if (png.empty() || !writes_files()) return;
  if (!gnuplot_available()) {
    fmt::print("gnuplot is not installed: the plot {} is skipped (apt-get install gnuplot-nox)\n", png);
    return;
  }
  const std::string gp = beside(png, ".gp");
  write_file(gp, "set terminal pngcairo size 900,600 noenhanced\nset output '" + png + "'\n" + script);
  const int rc = std::system(("gnuplot '" + gp + "' 2>/dev/null").c_str());
  std::filesystem::remove(gp);
  if (rc != 0) fmt::print("gnuplot failed: the plot {} is skipped\n", png);
  else fmt::print("plot: {}\n", png);
}

// --- progress ------------------------------------------------------------------------------------

/// One line per couple of seconds: done/total, rate, ETA.
class progress {
 public:
  progress(std::string what, std::size_t total) : what_(std::move(what)), total_(total) {}
  void tick(std::size_t done) {
    const double t = elapsed();
    if (done < total_ && t - last_ < 2.0) return;
    last_ = t;
    const double rate = done / std::max(t, 1e-9);
    fmt::print("  {} {}/{} ({:.1f}/s, ETA {:.0f} s)\n", what_, done, total_, rate,
               rate > 0 ? (total_ - done) / rate : 0.0);
    std::fflush(stdout);
  }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::string what_;
  std::size_t total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double last_ = -1e9;
};

}  // namespace rewind_cli
