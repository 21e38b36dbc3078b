// Moves activations between fuselage's N C [D] H W buffers and the channels-last layout
// (N [D] H W C) that oneDNN 2.6's int8 convolutions take on x86, for 1-byte (u8 / s8)
// and 4-byte (s32 accumulators, f32) elements. oneDNN's own reorders between the two
// ("jit:uni") cost more than the convolution they serve on mobilenet_v2 int8
// (bench/RESULTS.md, issue 20); these are tile transposes in SSE2 (baseline x86-64;
// 16 x 16 bytes or 4 x 4 words a tile), a copy byte for byte.
//
// Example: a [1, 32, 28, 28] u8 activation into the nhwc buffer of a conv plan:
//   ToChannelsLast(x, /*element_bytes=*/1, /*batch=*/1, /*channels=*/32,
//                  /*pixels=*/28 * 28, nhwc);
#ifndef FUSELAGE_RUNTIME_ONEDNN_CHANNELS_LAST_H_
#define FUSELAGE_RUNTIME_ONEDNN_CHANNELS_LAST_H_

#include <cstdint>

namespace fuselage {
namespace onednn {

// Whether the functions below move elements of this size (1 or 4 bytes).
bool ChannelsLastMoves(int64_t element_bytes);

// `src` [batch, channels, pixels] -> `dst` [batch, pixels, channels]. The buffers must not
// overlap; `element_bytes` is 1 or 4 (ChannelsLastMoves), any other size does nothing.
void ToChannelsLast(const void* src, int64_t element_bytes, int64_t batch, int64_t channels,
                    int64_t pixels, void* dst);

// The inverse: `src` [batch, pixels, channels] -> `dst` [batch, channels, pixels].
void FromChannelsLast(const void* src, int64_t element_bytes, int64_t batch, int64_t channels,
                      int64_t pixels, void* dst);

}  // namespace onednn
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_ONEDNN_CHANNELS_LAST_H_
