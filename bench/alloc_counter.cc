#include "bench/alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include <malloc.h>

namespace fuselage {
namespace {
std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> blocks{0};
}  // namespace

int64_t LiveHeapBytes() { return live_bytes.load(std::memory_order_relaxed); }
int64_t HeapBlocksAllocated() { return blocks.load(std::memory_order_relaxed); }

}  // namespace fuselage

// malloc_usable_size gives the size actually reserved, so freeing needs no size header.
void* operator new(std::size_t size) {
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  fuselage::blocks.fetch_add(1, std::memory_order_relaxed);
  fuselage::live_bytes.fetch_add(static_cast<int64_t>(malloc_usable_size(p)),
                                 std::memory_order_relaxed);
  return p;
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  fuselage::live_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)),
                                 std::memory_order_relaxed);
  std::free(p);
}
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { operator delete(p); }
