// NodeArena: the storage a Graph's nodes live in. Nodes are carved out of chunks that hold
// many nodes side by side, in creation order, so a walk over the graph reads mostly
// contiguous memory. Allocated one by one, nodes end up scattered between their names, use
// lists and the modules built alongside them (about 1 KB apart in a loaded model), and a
// walk over 10^6 of them pays several cache misses per node.
//
// Addresses are stable: a slot keeps its node until the Graph destroys it; the slot is then
// reused by a later node. The arena only hands out and takes back raw slots: the Graph
// constructs and destroys the nodes in them.
//
// Every slot has a number, dense from 0 in the order slots are first handed out, that goes
// with the slot when it is reused: Node::index() (a pass keeps per-node state in a vector
// indexed by it). The numbers handed out so far are all below slots_used().
#ifndef FUSELAGE_GRAPH_NODE_ARENA_H_
#define FUSELAGE_GRAPH_NODE_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace fuselage {

class NodeArena {
 public:
  // Slots of `slot_size` bytes aligned to `slot_align` (a power of two, at most
  // max_align_t's alignment): sizeof and alignof the node type, so slots are packed.
  NodeArena(size_t slot_size, size_t slot_align);
  NodeArena(const NodeArena&) = delete;
  NodeArena& operator=(const NodeArena&) = delete;

  // Uninitialized storage for one node: a freed slot if there is one, else the next slot of
  // the newest chunk (a new chunk when it is full). `*index` receives the slot's number.
  void* Allocate(uint32_t* index);
  // Takes back a slot from Allocate() whose node has been destroyed, with its number.
  void Free(void* slot, uint32_t index);
  // How many slots were ever handed out: every slot number is below it. Never decreases.
  size_t slots_used() const { return total_slots_ - left_; }
  // The slot numbered `index` (handed out by Allocate, live or free): two loads, no search,
  // so a table may hold 4-byte slot numbers instead of 8-byte node pointers.
  void* SlotAt(uint32_t index) const {
    return blocks_[index >> kBlockShift] + (index & (kBlockSlots - 1)) * slot_size_;
  }

 private:
  // What a freed slot holds until it is reused: the free list's link and its number.
  struct FreeSlot {
    FreeSlot* next;
    uint32_t index;
  };
  // Chunks grow with the arena (a quarter of the slots so far, 32 to 4096 slots), so small
  // graphs waste little and large ones add a chunk every few thousand nodes.
  static constexpr size_t kMinChunkSlots = 32;
  static constexpr size_t kMaxChunkSlots = 4096;
  // Chunk sizes are multiples of kBlockSlots, so every block of kBlockSlots consecutive
  // slot numbers lies in one chunk: SlotAt finds it in blocks_ (8 bytes per 32 slots).
  static constexpr size_t kBlockShift = 5;
  static constexpr size_t kBlockSlots = size_t{1} << kBlockShift;
  static_assert(kMinChunkSlots % kBlockSlots == 0, "chunks hold whole blocks");

  size_t slot_size_;
  std::vector<std::unique_ptr<unsigned char[]>> chunks_;
  std::vector<unsigned char*> blocks_;  // the first slot of each block, by slot number / 32
  size_t total_slots_ = 0;
  unsigned char* next_ = nullptr;  // next never-used slot of the newest chunk
  size_t left_ = 0;                // never-used slots left in the newest chunk
  FreeSlot* free_ = nullptr;       // freed slots, most recently freed first
};

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_NODE_ARENA_H_
