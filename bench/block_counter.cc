#include "bench/block_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace fuselage {
namespace {
std::atomic<int64_t> blocks{0};
}  // namespace

int64_t HeapBlocksAllocated() { return blocks.load(std::memory_order_relaxed); }

}  // namespace fuselage

// Every form pairs std::malloc with std::free.
void* operator new(std::size_t size) {
  fuselage::blocks.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
