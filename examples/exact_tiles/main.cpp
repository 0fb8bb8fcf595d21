// rewind_exact_tiles: nanoseconds per element of the exact mode's forward and rewind tiles, one
// thread, one chunk (see run.cpp); medians and minima over rounds, and JSON. Built with
// REWIND_TILES_BASE (scripts/exact_tiles_ab.sh) it runs another build's tiles too, alternating
// with this one's in every round, and prints this / base: on a shared machine whose speed
// drifts by tens of percent between runs, only an interleaved ratio resolves a few percent.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "tiles.hpp"

tiles_time run_tiles(const tiles_config& c);
#ifdef REWIND_TILES_BASE
tiles_time run_tiles_base(const tiles_config& c);
#endif

namespace {
struct series {
  std::vector<double> forward, rewind;
  void add(const tiles_time& t, double per) {
    forward.push_back(t.forward * per);
    rewind.push_back(t.rewind * per);
  }
};
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}
double least(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the exact mode's tiles, ns per element, one thread, one chunk"};
  std::size_t samples = 32;
  int layers = 512, rounds = 9;
  std::string loops, json;
  app.add_option("--samples", samples, "samples in the chunk (784 elements each)")->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "layers forward, then back")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "rounds (each build once per round)")->check(CLI::PositiveNumber);
  app.add_option("--exact-loops", loops, "the copy of the loops: avx512, avx2 or portable (default: the widest)");
  app.add_option("--json", json, "write the medians as JSON");
  CLI11_PARSE(app, argc, argv);
  const tiles_config c{samples * 784, layers, loops};
  const double per = 1e9 / (static_cast<double>(c.elements) * layers);
  series here, base;
  std::size_t planes = 0;
  // One build's run, added to its series; false where its rewind did not come back to zero.
  const auto run = [&](tiles_time (*tiles)(const tiles_config&), series& into, const char* which) {
    const tiles_time t = tiles(c);
    if (!t.exact) std::fprintf(stderr, "rewind_exact_tiles: the %s build's rewind did not return to zero\n", which);
    into.add(t, per);
    planes = t.planes;
    return t.exact;
  };
  try {
    for (int r = 0; r < rounds; ++r) {
#ifdef REWIND_TILES_BASE
      // the builds in turns, each first in every other round
      if (r % 2 == 1 && !run(run_tiles_base, base, "base")) return 1;
      if (!run(run_tiles, here, "this")) return 1;
      if (r % 2 == 0 && !run(run_tiles_base, base, "base")) return 1;
#else
      if (!run(run_tiles, here, "this")) return 1;
#endif
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("%zu elements, %d layers, %d rounds, ledger planes %zu: ns per element, median (least)\n", c.elements, layers, rounds, planes);
  std::printf("this build: forward %.3f (%.3f)  rewind %.3f (%.3f)\n", median(here.forward), least(here.forward), median(here.rewind),
              least(here.rewind));
  if (!base.forward.empty()) {
    std::printf("base build: forward %.3f (%.3f)  rewind %.3f (%.3f)\n", median(base.forward), least(base.forward), median(base.rewind),
                least(base.rewind));
    std::vector<double> rf, rr;  // each round's ratio
    for (std::size_t k = 0; k < here.forward.size(); ++k) {
      rf.push_back(here.forward[k] / base.forward[k]);
      rr.push_back(here.rewind[k] / base.rewind[k]);
    }
    std::printf("this / base: forward %.3f (rounds %.3f-%.3f)  rewind %.3f (rounds %.3f-%.3f)\n", median(rf), least(rf),
                *std::max_element(rf.begin(), rf.end()), median(rr), least(rr), *std::max_element(rr.begin(), rr.end()));
  }
  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\"elements\": " << c.elements << ", \"layers\": " << layers << ", \"rounds\": " << rounds << ", \"forward_ns\": " << median(here.forward)
        << ", \"rewind_ns\": " << median(here.rewind);
    if (!base.forward.empty()) out << ", \"base_forward_ns\": " << median(base.forward) << ", \"base_rewind_ns\": " << median(base.rewind);
    out << "}\n";
  }
}
