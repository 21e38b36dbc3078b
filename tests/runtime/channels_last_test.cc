// The channels-last transposes (runtime/onednn/channels_last.h) against an index-by-index
// reference, on shapes with whole tiles, ragged edges on either side and no whole tile.
#include "runtime/onednn/channels_last.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fuselage {
namespace onednn {
namespace {

struct Shape {
  int64_t batch, channels, pixels;
};

// Shapes seen in mobilenet_v2 (3 input channels, 24 channels = one tile and a half,
// 14 x 14 and 7 x 7 pixels) and edge cases: one element, tiles only, fewer than a tile.
const Shape kShapes[] = {{1, 3, 224 * 224}, {1, 24, 56 * 56}, {1, 192, 14 * 14},
                         {1, 320, 7 * 7},   {2, 16, 16},      {3, 5, 7},
                         {1, 1, 1},         {2, 17, 33},      {1, 64, 4}};

template <typename T>
std::vector<T> RandomValues(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = static_cast<T>(gen());
  return v;
}

// dst[n][p][c] = src[n][c][p], written out.
template <typename T>
std::vector<T> ReferenceToChannelsLast(const std::vector<T>& src, const Shape& s) {
  std::vector<T> dst(src.size());
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t c = 0; c < s.channels; ++c) {
      for (int64_t p = 0; p < s.pixels; ++p) {
        dst[(n * s.pixels + p) * s.channels + c] = src[(n * s.channels + c) * s.pixels + p];
      }
    }
  }
  return dst;
}

template <typename T>
void CheckBothWays(const Shape& s) {
  SCOPED_TRACE(testing::Message() << sizeof(T) << "-byte elements, batch " << s.batch
                                  << ", channels " << s.channels << ", pixels " << s.pixels);
  const int64_t n = s.batch * s.channels * s.pixels;
  const std::vector<T> nchw = RandomValues<T>(n, static_cast<uint32_t>(n));
  const std::vector<T> expected = ReferenceToChannelsLast(nchw, s);
  std::vector<T> nhwc(nchw.size()), back(nchw.size());
  ToChannelsLast(nchw.data(), sizeof(T), s.batch, s.channels, s.pixels, nhwc.data());
  EXPECT_EQ(nhwc, expected);
  FromChannelsLast(expected.data(), sizeof(T), s.batch, s.channels, s.pixels, back.data());
  EXPECT_EQ(back, nchw);
}

TEST(ChannelsLastTest, BytesMatchTheReference) {
  for (const Shape& s : kShapes) CheckBothWays<uint8_t>(s);
}

TEST(ChannelsLastTest, WordsMatchTheReference) {
  for (const Shape& s : kShapes) CheckBothWays<uint32_t>(s);
}

TEST(ChannelsLastTest, MovesOnlyOneAndFourByteElements) {
  EXPECT_TRUE(ChannelsLastMoves(1));
  EXPECT_TRUE(ChannelsLastMoves(4));
  EXPECT_FALSE(ChannelsLastMoves(2));
  EXPECT_FALSE(ChannelsLastMoves(8));
}

}  // namespace
}  // namespace onednn
}  // namespace fuselage
