// rewind cpu: one training step over chunks of the batch on a team of threads, for any network
// whose backward pass is a sequence of parts (a layer of a stack, a stage's stem, the head), each
// writing its own range of the gradient arena.
//
// The forward pass runs every chunk through the whole network; the head runs per chunk and its
// per-sample losses are added in sample order; then per part from the top, chunk 0's backward
// pass writes the part's gradients and every other chunk's a slab of its own, and the slabs are
// added in chunk order into the gradients, `ready` told as each part becomes final. The parts'
// slabs come in two sets, used in turn: a part's slabs are added up while the next part's sweep
// fills the other set, so threads meet once per part, at a barrier that sleeps after a short
// spin (threads.hpp). The result is the same bit for bit on any number of threads. Every buffer
// is taken before the threads start; gradients are written only after the forward pass and the
// loss succeeded (the head's chunk 0 writes a slab too).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <span>
#include <vector>

#include <rewind/engine.hpp>

#include "memory.hpp"
#include "threads.hpp"

namespace rwd::cpu::detail {

/// The sizes of a chunked step: the batch in chunks of `columns` samples, a workspace of
/// `per_thread` scalars per thread, a gradient slab of `slab` scalars per chunk.
struct chunking {
  std::size_t batch = 0, columns = 0, per_thread = 0, slab = 0;
  int most = 1;  // the team's largest size (workspaces are taken for all of it)
  std::size_t chunks() const { return (batch + columns - 1) / columns; }
  /// Slabs a step takes: a set of chunks - 1 per part, two sets; the head's chunks one each.
  std::size_t slabs() const { return std::max(chunks(), 2 * (chunks() - 1)); }
};

/// out[i] += in[i] for i < n, in one vector pass.
template <class T>
void add_into(T* __restrict out, const T* __restrict in, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) out[i] += in[i];
}

/// One step (see the top of this file). lane_of(c, work, slab) makes chunk c's lane with its
/// thread's workspace and its slab; forward(lane), after_forward(), head(lane, losses) (each
/// sample's loss into losses[sample], the head's gradient into the slab; the head is part
/// `head_part`), backward(p, lane) for part p of `parts` (from the top, below the head). Returns
/// the mean loss.
template <class T, class LaneOf, class Forward, class AfterForward, class Head, class Backward>
double chunked_step(memory_tracker& tracker, team_choice& team_state, const chunking& k, std::span<T> grads, const gradient_listener& ready,
                    const LaneOf& lane_of, const Forward& forward, const AfterForward& after_forward, gradient_part head_part,
                    const Head& head, std::span<const gradient_part> parts, const Backward& backward) {
  const std::size_t nc = k.chunks(), slab = k.slab;
  const int team = team_state.next(k.most);
  buffer<T> work(tracker, static_cast<std::size_t>(k.most) * k.per_thread), slabs(tracker, k.slabs() * slab);
  const one_gemm_thread alone(team == 1);
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> losses(k.batch, 0.0);  // per sample, added in sample order
  first_error failed(nc);
  double loss = 0;
  team_barrier barrier;
  // The last sweep that took each chunk (sweeps count from 1 on every thread alike).
  std::vector<std::atomic<std::size_t>> taken(nc);
  // Every thread goes through every sweep and barrier; after an error the work inside them is
  // skipped (first_error), never the meeting points.
#pragma omp parallel num_threads(team) if (team > 1)
  {
    const auto t = static_cast<std::size_t>(thread_number()), threads = static_cast<std::size_t>(team_threads());
    barrier.join(static_cast<int>(threads));
    std::size_t sweeps = 0;
    // Each chunk once, with the gradient slab slab_of(c): first this thread's own, t, t + threads,
    // ... (the chunks it ran in the sweep before, whose state is in its core's cache), in the
    // order opposite to that sweep's (the chunk it ran last first: a thread's chunks together
    // need not fit in its cache, the last one mostly does); then any that another thread has
    // not started (a partner slow or descheduled).
    const auto sweep = [&](std::size_t phase, const auto& slab_of, const auto& body) {
      const std::size_t now = ++sweeps;
      const auto run = [&](std::size_t c) {
        if (taken[c].load(std::memory_order_relaxed) == now || taken[c].exchange(now, std::memory_order_relaxed) == now) return;
        failed.guard(phase, c, [&] {
          auto ln = lane_of(c, work.data() + t * k.per_thread, slab_of(c));
          body(ln);
        });
      };
      const std::size_t mine = t < nc ? (nc - 1 - t) / threads + 1 : 0;  // chunks t, t + threads, ...
      for (std::size_t j = 0; j < mine; ++j) run(t + (now % 2 ? j : mine - 1 - j) * threads);
      for (std::size_t c = 0; c < nc; ++c) run(c);
      barrier.arrive_and_wait();
    };
    // The head's chunk c writes slab c; part p's chunk 0 the gradients, chunk c > 0 slab c - 1 of
    // set p % 2.
    const auto head_slab = [&](std::size_t c) { return slabs.data() + c * slab; };
    const auto part_slab = [&](std::size_t p) {
      return [&, p](std::size_t c) { return c == 0 ? grads.data() + parts[p].offset : slabs.data() + ((p % 2) * (nc - 1) + c - 1) * slab; };
    };
    // This thread's share of a part, in chunk order for every element, whatever the threads; by
    // pieces that stay in L1: chunks from `first` on (the head: a copy of chunk 0's slab first).
    const auto add_slabs = [&](bool go, gradient_part part, std::size_t first, const auto& slab_of) {
      constexpr std::size_t piece = 2048;
      const std::size_t share = (part.count + threads - 1) / threads, end = std::min(part.count, (t + 1) * share);
      T* const out = grads.data() + part.offset;
      for (std::size_t i = t * share; go && i < end; i += piece) {
        const std::size_t n = std::min(piece, end - i);
        if (first == 0) std::copy_n(slab_of(0) + i, n, out + i);
        for (std::size_t c = 1; c < nc; ++c) add_into(out + i, slab_of(c) + i, n);
      }
    };
    const auto tell = [&](std::size_t phase, std::size_t first_final) {  // one thread; the others go on
      if (t == 0 && ready) failed.guard(phase, 0, [&] { ready(first_final); });
    };
    sweep(0, [](std::size_t) { return static_cast<T*>(nullptr); }, forward);
    if (t == 0) failed.guard(1, 0, after_forward);  // before the head's sweep ends: it reads no ledger
    sweep(2, head_slab, [&](auto& ln) {
      std::fill_n(ln.grads, head_part.count, T(0));
      head(ln, losses.data());
    });
    const double sum = std::accumulate(losses.begin(), losses.end(), 0.0);  // every thread alike
    if (t == 0) {
      loss = sum;
      failed.guard(3, 0, [&] {
        if (!std::isfinite(sum)) throw error("rewind: the loss is not finite (check the parameters and the learning rate)");
      });
    }
    add_slabs(std::isfinite(sum) && failed.ok(4), head_part, 0, head_slab);
    barrier.arrive_and_wait();  // the head's slabs overlap the parts' first set
    tell(5, head_part.offset);
    for (std::size_t p = 0; p < parts.size(); ++p) {
      const std::size_t phase = 6 + 3 * p;
      sweep(phase, part_slab(p), [&](auto& ln) {
        std::fill_n(ln.grads, parts[p].count, T(0));
        backward(p, ln);
      });
      if (p > 0) tell(phase - 1, parts[p - 1].offset);  // its slabs were added before this sweep's barrier
      add_slabs(failed.ok(phase + 1), parts[p], 1, part_slab(p));
    }
    barrier.arrive_and_wait();
    if (!parts.empty()) tell(6 + 3 * parts.size() - 1, parts.back().offset);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  team_state.ran(team);
  team_state.judge(team, k.most, barrier.slept() / std::max(1e-9, wall * team));
  failed.rethrow();
  return loss / static_cast<double>(k.batch);
}

}  // namespace rwd::cpu::detail
