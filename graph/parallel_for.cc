#include "graph/parallel_for.h"

#include <algorithm>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace fuselage {

int ParallelChunkCount(int64_t items, int64_t elements_per_item) {
#ifdef _OPENMP
  const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  const int64_t threads = 1;
#endif
  // items and elements_per_item are at most Tensor::kMaxElements: no overflow.
  const int64_t by_size = items * std::max<int64_t>(elements_per_item, 1) / kMinElementsPerChunk;
  return static_cast<int>(std::max<int64_t>(1, std::min(threads, by_size)));
}

void ParallelForChunks(int64_t n, int chunks,
                       absl::FunctionRef<void(int chunk, int64_t begin, int64_t end)> body) {
  if (chunks <= 1) {
    body(0, 0, n);
    return;
  }
  const auto bound = [n, chunks](int chunk) { return n * chunk / chunks; };
#ifdef _OPENMP
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
#endif
  for (int chunk = 0; chunk < chunks; ++chunk) body(chunk, bound(chunk), bound(chunk + 1));
}

}  // namespace fuselage
