// Counts the bytes live on the heap and the blocks allocated, by replacing global operator
// new/delete in the binary that links this library (graph_bench: memory per node;
// tensor_bench: heap blocks per operation). The replacements live in this translation
// unit of their own: where gcc 12 sees a replacement operator delete (std::free) inlined
// after a call to operator new, it cannot see that operator new is std::malloc and reports
// a -Wmismatched-new-delete false positive.
#ifndef FUSELAGE_BENCH_ALLOC_COUNTER_H_
#define FUSELAGE_BENCH_ALLOC_COUNTER_H_

#include <cstdint>

namespace fuselage {

// Bytes currently allocated through operator new (all threads).
int64_t LiveHeapBytes();

// Heap blocks allocated through operator new since the program started (all threads).
int64_t HeapBlocksAllocated();

}  // namespace fuselage

#endif  // FUSELAGE_BENCH_ALLOC_COUNTER_H_
