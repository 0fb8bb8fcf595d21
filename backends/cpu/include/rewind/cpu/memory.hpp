// rewind cpu: the tracking allocator over host memory (64-byte aligned blocks).
#pragma once

#include <cstdlib>
#include <new>

#include <rewind/tracking.hpp>

namespace rwd::cpu {

struct host_memory {
  static void* get(std::size_t bytes) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
  static void put(void* p) noexcept { std::free(p); }
};

/// A std::allocator over host_memory's 64-byte aligned blocks (untracked): for the gradients,
/// which a step's first chunk writes in place, so that the vectorised loops writing them split
/// the same way in every model (Eigen peels an unaligned head off in scalar code, whose sums
/// round differently).
template <class T>
struct aligned_allocator {
  using value_type = T;
  aligned_allocator() = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(host_memory::get(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { host_memory::put(p); }
  template <class U>
  bool operator==(const aligned_allocator<U>&) const noexcept { return true; }
};

using memory_tracker = caching_tracker<host_memory>;
template <class T>
using buffer = tracked_buffer<T, memory_tracker>;

}  // namespace rwd::cpu
