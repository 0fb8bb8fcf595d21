// rewind cpu: a tracking allocator. Every activation and workspace buffer of a training step is
// taken from it, so the live and peak bytes of a step are measured exactly, not estimated.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <unordered_map>
#include <vector>
#include <utility>

namespace rwd::cpu {

/// Live and peak bytes of the buffers taken from a tracker. Released blocks are kept for reuse
/// (a caching allocator, as every training framework has), so that a steady-state step neither
/// calls malloc nor touches fresh pages; live and peak count the bytes asked for, not the cache.
class memory_tracker {
 public:
  memory_tracker() = default;
  memory_tracker(const memory_tracker&) = delete;
  memory_tracker& operator=(const memory_tracker&) = delete;
  ~memory_tracker() { trim(); }

  void* allocate(std::size_t bytes) {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = nullptr;
    if (auto it = cache_.find(rounded); it != cache_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
      if (!p) throw std::bad_alloc();
    }
    live_ += bytes;
    if (live_ > peak_) peak_ = live_;
    return p;
  }
  void release(void* p, std::size_t bytes) noexcept {
    try {
      cache_[(bytes + 63) / 64 * 64].push_back(p);
    } catch (...) {
      std::free(p);
    }
    live_ -= bytes;
  }
  /// Returns the cached blocks to the system.
  void trim() noexcept {
    for (auto& [size, blocks] : cache_)
      for (void* p : blocks) std::free(p);
    cache_.clear();
  }
  std::size_t live() const { return live_; }
  std::size_t peak() const { return peak_; }
  void reset_peak() { peak_ = live_; }

 private:
  std::size_t live_ = 0, peak_ = 0;
  std::unordered_map<std::size_t, std::vector<void*>> cache_;
};

/// A tracked buffer of n scalars (64-byte aligned), freed on destruction.
template <class T>
class buffer {
 public:
  buffer() = default;
  buffer(memory_tracker& t, std::size_t n) : tracker_(&t), n_(n) {
    data_ = static_cast<T*>(t.allocate(n * sizeof(T)));
  }
  buffer(buffer&& o) noexcept { *this = std::move(o); }
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      reset();
      tracker_ = std::exchange(o.tracker_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() { reset(); }
  void reset() {
    if (data_) tracker_->release(data_, n_ * sizeof(T));
    data_ = nullptr;
    n_ = 0;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return n_; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }

 private:
  memory_tracker* tracker_ = nullptr;
  T* data_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace rwd::cpu
