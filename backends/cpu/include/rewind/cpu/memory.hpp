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

using memory_tracker = caching_tracker<host_memory>;
template <class T>
using buffer = tracked_buffer<T, memory_tracker>;

}  // namespace rwd::cpu
