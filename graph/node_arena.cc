#include "graph/node_arena.h"

#include <algorithm>
#include <cstddef>

#include "graph/check.h"

// Under AddressSanitizer free slots are poisoned, so a use of an erased node is still
// reported (as it was when nodes were freed one by one).
#if defined(__SANITIZE_ADDRESS__)
#define FUSELAGE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUSELAGE_ASAN 1
#endif
#endif
#ifdef FUSELAGE_ASAN
#include <sanitizer/asan_interface.h>
#define FUSELAGE_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define FUSELAGE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define FUSELAGE_POISON(p, n) ((void)(p), (void)(n))
#define FUSELAGE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace fuselage {

NodeArena::NodeArena(size_t slot_size, size_t slot_align) {
  FUSELAGE_CHECK(slot_align != 0 && (slot_align & (slot_align - 1)) == 0 &&
                 slot_align <= alignof(std::max_align_t));
  const size_t align = std::max(slot_align, alignof(FreeSlot));
  slot_size_ = std::max(slot_size, sizeof(FreeSlot));
  slot_size_ = (slot_size_ + align - 1) / align * align;
}

void* NodeArena::Allocate(uint32_t* index) {
  if (free_ != nullptr) {
    FreeSlot* slot = free_;
    FUSELAGE_UNPOISON(slot, slot_size_);
    free_ = slot->next;
    *index = slot->index;
    return slot;
  }
  if (left_ == 0) {
    // A whole number of blocks (SlotAt).
    const size_t slots = std::clamp(total_slots_ / 4, kMinChunkSlots, kMaxChunkSlots) /
                         kBlockSlots * kBlockSlots;
    // operator new[] aligns to max_align_t; slot_size_ is a multiple of the slot alignment.
    chunks_.emplace_back(new unsigned char[slots * slot_size_]);
    next_ = chunks_.back().get();
    for (size_t b = 0; b < slots; b += kBlockSlots) blocks_.push_back(next_ + b * slot_size_);
    left_ = slots;
    total_slots_ += slots;
    FUSELAGE_POISON(next_, slots * slot_size_);
  }
  void* slot = next_;
  FUSELAGE_UNPOISON(slot, slot_size_);
  // Slot numbers are 32-bit: 4 billion nodes alive at once is far beyond any graph.
  FUSELAGE_CHECK(slots_used() < UINT32_MAX);
  *index = static_cast<uint32_t>(slots_used());
  next_ += slot_size_;
  --left_;
  return slot;
}

void NodeArena::Free(void* slot, uint32_t index) {
  FUSELAGE_CHECK(slot != nullptr);
  FreeSlot* freed = static_cast<FreeSlot*>(slot);
  freed->next = free_;
  freed->index = index;
  free_ = freed;
  // The link stays readable; the rest of the slot is poisoned until it is reused.
  FUSELAGE_POISON(static_cast<unsigned char*>(slot) + sizeof(FreeSlot),
                  slot_size_ - sizeof(FreeSlot));
}

}  // namespace fuselage
