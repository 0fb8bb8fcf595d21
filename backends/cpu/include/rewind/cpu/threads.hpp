// rewind cpu: threads. A training step splits the batch into chunks (options::grain samples
// each); a team of OpenMP threads runs each chunk through every layer (chunked_step.hpp), so
// threads meet once per layer of the backward pass (when its chunks are done; their gradients are
// added up while the next layer's chunks run), not once per product. Chunk 0's gradient lands in
// the gradients, every other chunk's in a slab of its own, and the slabs are added in chunk order:
// the result is the same bit for bit on any number of threads. A single chunk (a batch no
// larger than the grain) runs on one thread, its GEMMs too (one_gemm_thread).
//
// The default thread count is OMP_NUM_THREADS where it is set, and otherwise the number of CPUs
// this process may run on: its affinity mask (taskset, cpusets) and its cgroup's CPU quota
// (containers, CI runners), whichever is smaller.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>

#include <sched.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rwd::cpu {

/// CPUs this process may use: the affinity mask, capped by a cgroup v2 quota ("cpu.max") or a
/// cgroup v1 one (cfs_quota_us / cfs_period_us), rounded up; at least 1.
inline int available_cpus() {
  int cpus = 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  const auto cap = [&](double quota, double period) {
    if (quota > 0 && period > 0) cpus = std::min(cpus, std::max(1, static_cast<int>(std::ceil(quota / period))));
  };
  if (std::ifstream v2("/sys/fs/cgroup/cpu.max"); v2) {
    std::string quota;
    double period = 0;
    if (v2 >> quota >> period && quota != "max") cap(std::stod(quota), period);
  } else if (std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p("/sys/fs/cgroup/cpu/cpu.cfs_period_us"); q && p) {
    double quota = 0, period = 0;
    if (q >> quota && p >> period) cap(quota, period);
  }
  return cpus;
}

/// The default thread count: OMP_NUM_THREADS where it is set, available_cpus() otherwise.
inline int default_threads() {
#ifdef _OPENMP
  if (const char* asked = std::getenv("OMP_NUM_THREADS"); asked && *asked) return omp_get_max_threads();
#endif
  return available_cpus();
}

/// Sets the number of threads of a step (0: default_threads()).
inline void set_threads(int n) { Eigen::setNbThreads(n > 0 ? n : default_threads()); }
inline int threads() { return Eigen::nbThreads(); }

namespace detail {
/// The calling thread's number in its team (0 outside one).
inline int thread_number() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}
/// Threads in the calling thread's team (1 outside one).
inline int team_threads() {
#ifdef _OPENMP
  return omp_get_num_threads();
#else
  return 1;
#endif
}
inline bool in_team() {
#ifdef _OPENMP
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

/// A barrier for a team of n threads that spins for a short while, then sleeps (a futex, through
/// std::atomic::wait). On a busy machine a thread whose partner was descheduled gives its core
/// away after the bound instead of spinning through the time slice its partner is waiting for.
class team_barrier {
 public:
  /// Every thread of the team says how many they are (the team OpenMP gave, which may be smaller
  /// than the one asked for) before it first arrives.
  void join(int n) { n_.store(n, std::memory_order_relaxed); }
  void arrive_and_wait() {
    const int n = n_.load(std::memory_order_relaxed);
    if (n <= 1) return;
    const unsigned generation = generation_.load(std::memory_order_acquire);
    if (waiting_.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {  // the last one in opens it
      waiting_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      generation_.notify_all();
      return;
    }
    const auto until = std::chrono::steady_clock::now() + spin;
    for (unsigned i = 1; generation_.load(std::memory_order_acquire) == generation; ++i) {
      if (i % 64 == 0 && std::chrono::steady_clock::now() > until) {
        generation_.wait(generation, std::memory_order_acquire);
        slept_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - until).count();
        break;  // woken: the generation moved (wait returns only then)
      }
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
  /// How long a thread spins before it sleeps: longer than a balanced layer's skew, far shorter
  /// than a scheduler's time slice.
  static constexpr std::chrono::microseconds spin{500};
  /// Seconds the team's threads spent asleep here, all together.
  double slept() const { return slept_.load(); }

 private:
  std::atomic<double> slept_{0};
  std::atomic<int> n_{1}, waiting_{0};
  std::atomic<unsigned> generation_{0};
};

/// How many threads a model's steps run on. On a quiet machine, every thread it may use. When
/// two steps in a row found the team's threads asleep at the barriers for more than a sixth of
/// their time (a partner was descheduled: another process wants the cores), the next steps run
/// on one thread fewer, and a later step probes the whole team again: the eighth, kept if it no
/// longer sleeps; after each probe that still sleeps, the wait doubles, up to 32 steps (a probe
/// on a busy machine is a slow step: one every eighth step costs the mean step about a tenth).
/// A single slow step (a hiccup of a shared machine) changes nothing. The gradient does not
/// depend on the team, so this changes only the time a step takes.
class team_choice {
 public:
  static constexpr double busy = 1.0 / 6;
  static constexpr int first_probe = 8, last_probe = 32;
  int next(int most) {
    if (most <= 1 || fewer_ == 0) return most;
    if (++since_ % probe_ == 0) return most;
    return std::max(1, most - fewer_);
  }
  void judge(int used, int most, double slept_fraction) {
    if (used <= 1) return;
    const bool slept = slept_fraction > busy;
    if (slept && (strikes_++ > 0 || fewer_ > 0)) {
      if (fewer_ > 0 && used == most) probe_ = std::min(2 * probe_, last_probe);  // a probe found the machine still busy
      fewer_ = std::min(most - 1, most - used + 1), since_ = 0, strikes_ = 0;
    }
    if (!slept) {
      strikes_ = 0;
      if (used == most) fewer_ = 0, probe_ = first_probe;
    }
  }
  int last() const { return last_; }
  void ran(int team) { last_ = team; }
  /// Steps from a shrink to the next probe of the whole team.
  int probe_every() const { return probe_; }

 private:
  int fewer_ = 0, since_ = 0, strikes_ = 0, last_ = 0, probe_ = first_probe;
};

/// Eigen's GEMMs on one thread for a scope: a step that runs on one thread (its batch is one
/// chunk, or its team shrank) must not split its products across other threads. Each split is a
/// join per product, thousands per step: on a quiet machine they gain little, and on a busy one
/// every product waits for a descheduled partner (a one-chunk step of the MLP took over a second
/// instead of milliseconds). Eigen's thread count is global: the scope changes it for the whole
/// process.
class one_gemm_thread {
 public:
  explicit one_gemm_thread(bool on) : was_(on ? Eigen::nbThreads() : 0) {
    if (on) Eigen::setNbThreads(1);
  }
  one_gemm_thread(const one_gemm_thread&) = delete;
  one_gemm_thread& operator=(const one_gemm_thread&) = delete;
  ~one_gemm_thread() {
    if (was_) Eigen::setNbThreads(was_);
  }

 private:
  int was_;
};

/// The first error of a parallel step. Work is numbered (phase * chunks + chunk); every chunk of
/// a phase runs, later phases are skipped after an error, and the error with the lowest number is
/// the one raised: the same message whichever thread met it first.
class first_error {
 public:
  explicit first_error(std::size_t chunks) : chunks_(chunks) {}
  template <class F>
  void guard(std::size_t phase, std::size_t chunk, const F& f) noexcept {
    const std::size_t at = phase * chunks_ + chunk;
    if (!ok(phase)) return;
    try {
      f();
    } catch (...) {
      std::lock_guard lock(m_);
      if (at < first_.load(std::memory_order_relaxed)) {
        first_.store(at, std::memory_order_release);
        error_ = std::current_exception();
      }
    }
  }
  /// No error in a phase before this one.
  bool ok(std::size_t phase) const { return first_.load(std::memory_order_acquire) >= phase * chunks_; }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::size_t chunks_;
  std::atomic<std::size_t> first_{std::numeric_limits<std::size_t>::max()};
  std::mutex m_;
  std::exception_ptr error_;
};
}  // namespace detail

}  // namespace rwd::cpu
