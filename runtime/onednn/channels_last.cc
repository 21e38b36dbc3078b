#include "runtime/onednn/channels_last.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>  // SSE2: part of baseline x86-64, no target flags needed
#endif

#include "graph/parallel_for.h"

// GCC at -O2 keeps the tile's rounds as loops over arrays on the stack; unrolled, the
// rows stay in registers. Clang unrolls such fixed-count loops by itself.
#if defined(__GNUC__) && !defined(__clang__)
#define FUSELAGE_UNROLL _Pragma("GCC unroll 16")
#else
#define FUSELAGE_UNROLL
#endif

namespace fuselage {
namespace onednn {
namespace {

// Transposes the kTile x kTile tile at `src` (rows `src_stride` elements apart) into
// `dst`: the portable form, and what the SSE2 specializations below compute.
template <typename T, int kTile>
inline void TransposeTileScalar(const T* src, int64_t src_stride, T* dst, int64_t dst_stride) {
  for (int64_t i = 0; i < kTile; ++i) {
    for (int64_t j = 0; j < kTile; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
  }
}

// 16 x 16 bytes. Four rounds of interleaving row i with row i + 8: each round rotates
// the 8 bits of a byte's (row, column) address right by one, so four swap the row and
// column nibbles.
inline void TransposeTile(const uint8_t* src, int64_t src_stride, uint8_t* dst,
                          int64_t dst_stride) {
#if defined(__SSE2__)
  constexpr int kTile = 16;
  __m128i r[kTile], t[kTile];
  for (int i = 0; i < kTile; ++i) {
    r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_stride));
  }
  FUSELAGE_UNROLL
  for (int round = 0; round < 4; ++round) {
    FUSELAGE_UNROLL
    for (int i = 0; i < kTile / 2; ++i) {
      t[2 * i] = _mm_unpacklo_epi8(r[i], r[i + kTile / 2]);
      t[2 * i + 1] = _mm_unpackhi_epi8(r[i], r[i + kTile / 2]);
    }
    FUSELAGE_UNROLL
    for (int i = 0; i < kTile; ++i) r[i] = t[i];
  }
  for (int i = 0; i < kTile; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i * dst_stride), r[i]);
  }
#else
  TransposeTileScalar<uint8_t, 16>(src, src_stride, dst, dst_stride);
#endif
}

// 4 x 4 words: the same two rounds on 32-bit lanes.
inline void TransposeTile(const uint32_t* src, int64_t src_stride, uint32_t* dst,
                          int64_t dst_stride) {
#if defined(__SSE2__)
  constexpr int kTile = 4;
  __m128i r[kTile], t[kTile];
  for (int i = 0; i < kTile; ++i) {
    r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_stride));
  }
  FUSELAGE_UNROLL
  for (int round = 0; round < 2; ++round) {
    FUSELAGE_UNROLL
    for (int i = 0; i < kTile / 2; ++i) {
      t[2 * i] = _mm_unpacklo_epi32(r[i], r[i + kTile / 2]);
      t[2 * i + 1] = _mm_unpackhi_epi32(r[i], r[i + kTile / 2]);
    }
    FUSELAGE_UNROLL
    for (int i = 0; i < kTile; ++i) r[i] = t[i];
  }
  for (int i = 0; i < kTile; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i * dst_stride), r[i]);
  }
#else
  TransposeTileScalar<uint32_t, 4>(src, src_stride, dst, dst_stride);
#endif
}

// `src` [rows, cols] -> `dst` [cols, rows]: whole tiles, then the ragged edges one by one.
// The tiles sweep the shorter side in the inner loop, so the cache lines the short side
// spans (a tile row each) stay cached until all their bytes are used, and the long side
// is read or written in whole contiguous rows: sweeping the long side inside would evict
// each line of the short side before its next tile, re-reading it once per tile. The
// bands of the long side go to OpenMP's threads; each band writes its own elements.
template <typename T, int kTile>
void Transpose(const T* src, int64_t rows, int64_t cols, T* dst) {
  const int64_t full_rows = rows - rows % kTile, full_cols = cols - cols % kTile;
  const bool bands_of_columns = rows <= cols;
  const int64_t bands = (bands_of_columns ? full_cols : full_rows) / kTile;
  const int64_t band_elements = kTile * (bands_of_columns ? full_rows : full_cols);
  const int chunks = ParallelChunkCount(bands, band_elements);
  ParallelForChunks(bands, chunks, [&](int, int64_t first_band, int64_t end_band) {
    for (int64_t band = first_band; band < end_band; ++band) {
      if (bands_of_columns) {
        const int64_t c = band * kTile;
        for (int64_t r = 0; r < full_rows; r += kTile) {
          TransposeTile(src + r * cols + c, cols, dst + c * rows + r, rows);
        }
      } else {
        const int64_t r = band * kTile;
        for (int64_t c = 0; c < full_cols; c += kTile) {
          TransposeTile(src + r * cols + c, cols, dst + c * rows + r, rows);
        }
      }
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    // Rows of whole tiles lack only the ragged columns; the last rows lack every column.
    for (int64_t c = r < full_rows ? full_cols : 0; c < cols; ++c) {
      dst[c * rows + r] = src[r * cols + c];
    }
  }
}

// Each image of `batch` [rows, cols] -> [cols, rows].
void TransposeImages(const void* src, int64_t element_bytes, int64_t batch, int64_t rows,
                     int64_t cols, void* dst) {
  const int64_t image = rows * cols;
  for (int64_t n = 0; n < batch; ++n) {
    if (element_bytes == 1) {
      Transpose<uint8_t, 16>(static_cast<const uint8_t*>(src) + n * image, rows, cols,
                             static_cast<uint8_t*>(dst) + n * image);
    } else if (element_bytes == 4) {
      Transpose<uint32_t, 4>(static_cast<const uint32_t*>(src) + n * image, rows, cols,
                             static_cast<uint32_t*>(dst) + n * image);
    }
  }
}

}  // namespace

bool ChannelsLastMoves(int64_t element_bytes) {
  return element_bytes == 1 || element_bytes == 4;
}

void ToChannelsLast(const void* src, int64_t element_bytes, int64_t batch, int64_t channels,
                    int64_t pixels, void* dst) {
  TransposeImages(src, element_bytes, batch, channels, pixels, dst);
}

void FromChannelsLast(const void* src, int64_t element_bytes, int64_t batch, int64_t channels,
                      int64_t pixels, void* dst) {
  TransposeImages(src, element_bytes, batch, pixels, channels, dst);
}

}  // namespace onednn
}  // namespace fuselage
