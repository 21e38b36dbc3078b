// ParallelForChunks: runs a loop body over contiguous chunks of [0, n) on OpenMP's
// threads, the threads oneDNN's kernels run on, so the engine's own loops and oneDNN's
// never compete for cores. The thread count is OpenMP's for the calling thread
// (omp_get_max_threads(), which RunOptions::threads sets for the duration of a run).
//
// The result must not depend on how [0, n) was cut: callers combine per-chunk partial
// results (integer counts, minima, maxima) in chunk order, which is what keeps every
// run's result identical for every thread count.
//
//   const int chunks = ParallelChunkCount(n);
//   std::vector<int64_t> partial(chunks);
//   ParallelForChunks(n, chunks, [&](int chunk, int64_t begin, int64_t end) {
//     for (int64_t i = begin; i < end; ++i) partial[chunk] += data[i] > 0;
//   });
//
// In builds without OpenMP (the clang sanitizer builds) the chunks run one after another
// on the calling thread, with the same result.
#ifndef FUSELAGE_GRAPH_PARALLEL_FOR_H_
#define FUSELAGE_GRAPH_PARALLEL_FOR_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace fuselage {

// The least work a chunk is given, in elements: below that, waking OpenMP's threads costs
// more than it saves.
inline constexpr int64_t kMinElementsPerChunk = int64_t{1} << 15;

// How many chunks to cut `items` iterations into, each iteration about
// `elements_per_item` elements of work (a pool's plane, a transpose's band): one per
// available thread, but none with less than kMinElementsPerChunk elements, and at least
// one.
int ParallelChunkCount(int64_t items, int64_t elements_per_item = 1);

// Calls body(chunk, begin, end) once for each of `chunks` contiguous, near-equal ranges
// of [0, n), in order chunk = 0, 1, ..., on up to `chunks` threads. `body` must not
// throw; it may write only to what its chunk owns.
void ParallelForChunks(int64_t n, int chunks,
                       absl::FunctionRef<void(int chunk, int64_t begin, int64_t end)> body);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_PARALLEL_FOR_H_
