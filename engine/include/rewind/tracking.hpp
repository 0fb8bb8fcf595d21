// rewind: a tracking allocator, for every backend. Every activation and workspace buffer of a
// training step is taken from one, so the live and peak bytes of a step are measured exactly, not
// estimated. Where the memory comes from is the backend's Source (host memory, cudaMalloc).
#pragma once

#include <cstddef>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rwd {

/// Live and peak bytes of the buffers taken from a tracker. Released blocks are kept for reuse
/// (a caching allocator, as every training framework has), so that a steady-state step neither
/// allocates nor touches fresh pages; live and peak count the bytes asked for, not the cache.
/// Source provides static `void* get(std::size_t bytes)` (throws when it cannot) and
/// `void put(void*) noexcept`.
template <class Source>
class caching_tracker {
 public:
  caching_tracker() = default;
  caching_tracker(const caching_tracker&) = delete;
  caching_tracker& operator=(const caching_tracker&) = delete;
  ~caching_tracker() { trim(); }

  void* allocate(std::size_t bytes) {
    const std::size_t rounded = round(bytes);
    void* p = nullptr;
    if (auto it = cache_.find(rounded); it != cache_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      p = Source::get(rounded);
    }
    live_ += bytes;
    if (live_ > peak_) peak_ = live_;
    return p;
  }
  void release(void* p, std::size_t bytes) noexcept {
    try {
      cache_[round(bytes)].push_back(p);
    } catch (...) {
      Source::put(p);
    }
    live_ -= bytes;
  }
  /// Returns the cached blocks to the source.
  void trim() noexcept {
    for (auto& [size, blocks] : cache_)
      for (void* p : blocks) Source::put(p);
    cache_.clear();
  }
  std::size_t live() const { return live_; }
  std::size_t peak() const { return peak_; }
  void reset_peak() { peak_ = live_; }

 private:
  static std::size_t round(std::size_t bytes) { return bytes == 0 ? 256 : (bytes + 255) / 256 * 256; }
  std::size_t live_ = 0, peak_ = 0;
  std::unordered_map<std::size_t, std::vector<void*>> cache_;
};

/// A tracked buffer of n scalars, given back on destruction.
template <class T, class Tracker>
class tracked_buffer {
 public:
  tracked_buffer() = default;
  tracked_buffer(Tracker& t, std::size_t n) : tracker_(&t), n_(n) { data_ = static_cast<T*>(t.allocate(n * sizeof(T))); }
  tracked_buffer(tracked_buffer&& o) noexcept { *this = std::move(o); }
  tracked_buffer& operator=(tracked_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      tracker_ = std::exchange(o.tracker_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  tracked_buffer(const tracked_buffer&) = delete;
  tracked_buffer& operator=(const tracked_buffer&) = delete;
  ~tracked_buffer() { reset(); }
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
  Tracker* tracker_ = nullptr;
  T* data_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace rwd
