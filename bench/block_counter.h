// Counts heap blocks allocated through operator new, by replacing the global operator
// new/delete in the one binary that links this library (tensor_bench). The replacements
// live in their own translation unit: where gcc 12 sees a replacement operator delete
// (std::free) inlined after a call to operator new, it cannot see that operator new is
// std::malloc and reports a -Wmismatched-new-delete false positive.
#ifndef FUSELAGE_BENCH_BLOCK_COUNTER_H_
#define FUSELAGE_BENCH_BLOCK_COUNTER_H_

#include <cstdint>

namespace fuselage {

// Heap blocks allocated through operator new since the program started (all threads).
int64_t HeapBlocksAllocated();

}  // namespace fuselage

#endif  // FUSELAGE_BENCH_BLOCK_COUNTER_H_
