// ParallelForChunks: runs a loop body over contiguous chunks of [0, n) on OpenMP's
// threads, the threads oneDNN's kernels run on, so the engine's own loops and oneDNN's
// never compete for cores. The thread count is OpenMP's for the calling thread
// (omp_get_max_threads(), which RunOptions::threads sets for the duration of a run).
//
// The result must not depend on how [0, n) was cut: callers combine per-chunk partial
// results (integer counts, minima, maxima) in chunk order, which is what keeps every
// run's result identical for every thread count.
//
//   const int chunks = ParallelChunkCount(n, /*min_chunk=*/1 << 16);
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

// How many chunks to cut `n` iterations into: one per available thread, but no chunk
// smaller than `min_chunk` (below that, starting threads costs more than it saves), and
// at least one.
int ParallelChunkCount(int64_t n, int64_t min_chunk);

// Calls body(chunk, begin, end) once for each of `chunks` contiguous, near-equal ranges
// of [0, n), in order chunk = 0, 1, ..., on up to `chunks` threads. `body` must not
// throw; it may write only to what its chunk owns.
void ParallelForChunks(int64_t n, int chunks,
                       absl::FunctionRef<void(int chunk, int64_t begin, int64_t end)> body);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_PARALLEL_FOR_H_
