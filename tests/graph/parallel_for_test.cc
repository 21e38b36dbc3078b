// ParallelForChunks: every index in exactly one chunk, chunks contiguous, near-equal and
// in order, for every thread count OpenMP is given.
#include "graph/parallel_for.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace fuselage {
namespace {

TEST(ParallelForTest, ChunksCoverTheRangeOnceInOrder) {
  const int before = omp_get_max_threads();
  for (int threads : {1, 2, 3, 4}) {
    omp_set_num_threads(threads);
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{100}, int64_t{1000}, int64_t{100003}}) {
      // Items of a tenth of the least chunk: at most one chunk per 10 items.
      const int chunks = ParallelChunkCount(n, kMinElementsPerChunk / 10);
      EXPECT_GE(chunks, 1);
      EXPECT_LE(chunks, threads) << "n=" << n;
      EXPECT_LE(chunks, std::max<int64_t>(1, n / 10)) << "n=" << n;
      std::vector<int64_t> begins(static_cast<size_t>(chunks), -1);
      std::vector<int64_t> ends(static_cast<size_t>(chunks), -1);
      std::vector<int> visits(static_cast<size_t>(n), 0);
      ParallelForChunks(n, chunks, [&](int chunk, int64_t begin, int64_t end) {
        begins[static_cast<size_t>(chunk)] = begin;
        ends[static_cast<size_t>(chunk)] = end;
        for (int64_t i = begin; i < end; ++i) ++visits[static_cast<size_t>(i)];
      });
      EXPECT_EQ(begins.front(), 0);
      EXPECT_EQ(ends.back(), n);
      for (int c = 0; c < chunks; ++c) {
        if (c > 0) {
          EXPECT_EQ(begins[static_cast<size_t>(c)], ends[static_cast<size_t>(c - 1)]);
        }
        const int64_t size = ends[static_cast<size_t>(c)] - begins[static_cast<size_t>(c)];
        EXPECT_GE(size, n / chunks) << "n=" << n << " chunk " << c;
        EXPECT_LE(size, n / chunks + 1) << "n=" << n << " chunk " << c;
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[static_cast<size_t>(i)], 1) << i;
    }
  }
  omp_set_num_threads(before);
}

TEST(ParallelForTest, OneChunkRunsTheWholeRangeOnTheCallingThread) {
  int64_t seen_begin = -1, seen_end = -1;
  ParallelForChunks(5, 1, [&](int chunk, int64_t begin, int64_t end) {
    EXPECT_EQ(chunk, 0);
    seen_begin = begin;
    seen_end = end;
  });
  EXPECT_EQ(seen_begin, 0);
  EXPECT_EQ(seen_end, 5);
}

}  // namespace
}  // namespace fuselage
