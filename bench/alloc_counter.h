// Counts the bytes live on the heap, by replacing global operator new/delete in the one
// binary that links this library. Used to measure memory per node.
#ifndef FUSELAGE_BENCH_ALLOC_COUNTER_H_
#define FUSELAGE_BENCH_ALLOC_COUNTER_H_

#include <cstdint>

namespace fuselage {

// Bytes currently allocated through operator new (all threads).
int64_t LiveHeapBytes();

}  // namespace fuselage

#endif  // FUSELAGE_BENCH_ALLOC_COUNTER_H_
