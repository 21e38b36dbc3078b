// Tensor, Shape and TensorBuffer: shapes inline and convertible to / from std::vector,
// bytes in one refcounted block shared by copies and detached on write, the factories'
// errors. Expected values are hand-computed.
#include "graph/tensor.h"

#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Takes a std::vector, as callers that predate Shape do.
int64_t SumOfVector(const std::vector<int64_t>& v) {
  int64_t sum = 0;
  for (int64_t d : v) sum += d;
  return sum;
}

// --- Shape -------------------------------------------------------------------------

TEST(ShapeTest, ConstructsFromEachForm) {
  const Shape from_list = {1, 3, 224, 224};
  const std::vector<int64_t> vector = {1, 3, 224, 224};
  const Shape from_vector = vector;
  const int64_t array[] = {1, 3, 224, 224};
  const Shape from_span = absl::Span<const int64_t>(array);
  const Shape from_range(vector.begin() + 1, vector.end());
  const Shape empty;

  EXPECT_THAT(from_list, ElementsAre(1, 3, 224, 224));
  EXPECT_THAT(from_vector, ElementsAre(1, 3, 224, 224));
  EXPECT_THAT(from_span, ElementsAre(1, 3, 224, 224));
  EXPECT_THAT(from_range, ElementsAre(3, 224, 224));
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.size(), 0u);
}

TEST(ShapeTest, ComparesWithShapesAndVectors) {
  const Shape a = {2, 3};
  EXPECT_TRUE(a == Shape({2, 3}));
  EXPECT_TRUE(a != Shape({3, 2}));
  EXPECT_TRUE(a != Shape({2, 3, 1}));
  EXPECT_TRUE(a == std::vector<int64_t>({2, 3}));
  EXPECT_TRUE(std::vector<int64_t>({2, 3}) == a);
  EXPECT_TRUE(a != std::vector<int64_t>({2}));
  EXPECT_TRUE(std::vector<int64_t>({2, 4}) != a);
  EXPECT_EQ(a, (std::vector<int64_t>{2, 3}));  // gtest: both argument orders compile.
  EXPECT_EQ((std::vector<int64_t>{2, 3}), a);
}

TEST(ShapeTest, ConvertsToVectorAndSpan) {
  const Shape shape = {4, 5, 6};
  const std::vector<int64_t> v = shape;
  EXPECT_EQ(v, (std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(SumOfVector(shape), 15);
  EXPECT_EQ(shape.ToVector(), (std::vector<int64_t>{4, 5, 6}));
  const absl::Span<const int64_t> span = shape;
  ASSERT_EQ(span.size(), 3u);
  EXPECT_EQ(span.data(), shape.data());  // a view, not a copy
}

TEST(ShapeTest, AccessAndEdit) {
  Shape shape = {7, 8};
  EXPECT_EQ(shape[0], 7);
  EXPECT_EQ(shape.front(), 7);
  EXPECT_EQ(shape.back(), 8);
  shape[1] = 9;
  shape.push_back(10);
  EXPECT_THAT(shape, ElementsAre(7, 9, 10));
  shape.resize(2);
  EXPECT_THAT(shape, ElementsAre(7, 9));
  shape.clear();
  EXPECT_TRUE(shape.empty());
}

TEST(ShapeTest, MoreDimensionsThanInlineStillWork) {
  Shape shape;
  for (int64_t d = 1; d <= 9; ++d) shape.push_back(d);
  ASSERT_GT(shape.size(), Shape::kInlineDims);
  EXPECT_THAT(shape, ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9));
  const Shape copy = shape;
  EXPECT_EQ(copy, shape);
}

TEST(ShapeTest, CopiesAndMovesInlineAndHeapShapes) {
  const Shape small = {2, 3};
  const Shape big = {1, 2, 3, 4, 5, 6, 7, 8};  // past kInlineDims: on the heap

  Shape a = big;  // heap copy is independent
  a[0] = 100;
  EXPECT_EQ(big[0], 1);
  EXPECT_THAT(a, ElementsAre(100, 2, 3, 4, 5, 6, 7, 8));

  Shape moved = std::move(a);  // takes the heap array; the source is left empty
  EXPECT_THAT(moved, ElementsAre(100, 2, 3, 4, 5, 6, 7, 8));
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): documented state

  moved = small;  // heap -> inline contents
  EXPECT_THAT(moved, ElementsAre(2, 3));
  moved = big;
  EXPECT_EQ(moved, big);
  Shape c = small;
  c = std::move(moved);
  EXPECT_EQ(c, big);
  Shape& alias = c;
  c = alias;  // self-assignment keeps the values
  EXPECT_EQ(c, big);
  c = std::move(alias);  // NOLINT: self-move keeps them too
  EXPECT_EQ(c, big);

  Shape d = small;
  Shape e = std::move(d);
  EXPECT_THAT(e, ElementsAre(2, 3));
  EXPECT_TRUE(d.empty());  // NOLINT(bugprone-use-after-move)
  d.push_back(9);  // a moved-from shape is usable
  EXPECT_THAT(d, ElementsAre(9));
}

TEST(ShapeTest, Prints) {
  std::ostringstream os;
  os << Shape({1, 3, 224, 224});
  EXPECT_EQ(os.str(), "[1, 3, 224, 224]");
  EXPECT_EQ(::testing::PrintToString(Shape({2})), "[2]");
}

TEST(ShapeTest, TensorShapeNeedsNoHeapForUpToSixDims) {
  // The shape lives inside the tensor: its data pointer points into the Tensor object.
  const Tensor t = *Tensor::Zeros(DType::kFloat32, {1, 2, 3, 4, 5, 6});
  const char* begin = reinterpret_cast<const char*>(&t);
  const char* dims = reinterpret_cast<const char*>(t.shape().data());
  EXPECT_GE(dims, begin);
  EXPECT_LT(dims, begin + sizeof(Tensor));
}

// --- QuantParams ---------------------------------------------------------------------

// True if `p` points into the object at `object` of `size` bytes (no heap block).
bool PointsInto(const void* p, const void* object, size_t size) {
  const char* c = static_cast<const char*>(p);
  const char* begin = static_cast<const char*>(object);
  return c >= begin && c < begin + size;
}

TEST(QuantParamsTest, PerTensorParamsAreInline) {
  const QuantParams q = QuantParams::PerTensor(0.25, -3);
  EXPECT_EQ(q.scheme, QScheme::kPerTensorAffine);
  EXPECT_THAT(q.scales, ElementsAre(0.25));
  EXPECT_THAT(q.zero_points, ElementsAre(-3));
  EXPECT_TRUE(PointsInto(q.scales.data(), &q, sizeof(q)));
  EXPECT_TRUE(PointsInto(q.zero_points.data(), &q, sizeof(q)));
  const QuantParams copy = q;
  EXPECT_TRUE(PointsInto(copy.scales.data(), &copy, sizeof(copy)));
  EXPECT_EQ(copy, q);
}

TEST(QuantParamsTest, PerChannelParamsKeepEveryChannel) {
  const QuantParams q = QuantParams::PerChannel({0.5, 0.25, 0.125}, {0, 1, -1}, 1);
  EXPECT_THAT(q.scales, ElementsAre(0.5, 0.25, 0.125));
  EXPECT_THAT(q.zero_points, ElementsAre(0, 1, -1));
  EXPECT_EQ(q.axis, 1);
  EXPECT_EQ(q, QuantParams::PerChannel({0.5, 0.25, 0.125}, {0, 1, -1}, 1));
  EXPECT_FALSE(q == QuantParams::PerChannel({0.5, 0.25, 0.125}, {0, 1, -1}, 0));
  EXPECT_FALSE(q == QuantParams::PerChannel({0.5, 0.25, 0.125}, {0, 1, 1}, 1));
}

TEST(QuantParamsTest, PerChannelCopiesAreIndependent) {
  QuantParams a = QuantParams::PerChannel({0.5, 0.25}, {1, 2}, 0);
  QuantParams b = a;
  b.scales[0] = 4.0;
  b.zero_points.push_back(3);
  EXPECT_THAT(a.scales, ElementsAre(0.5, 0.25));
  EXPECT_THAT(a.zero_points, ElementsAre(1, 2));
  EXPECT_THAT(b.scales, ElementsAre(4.0, 0.25));
  EXPECT_THAT(b.zero_points, ElementsAre(1, 2, 3));
}

TEST(QuantParamsTest, ParamsConvertToAndFromVectors) {
  QuantParams q;
  q.scales = std::vector<double>{1.5, 2.5};
  const int64_t loaded[] = {4, 5};  // as the loader assigns from a protobuf repeated field
  q.zero_points.assign(std::begin(loaded), std::end(loaded));
  const std::vector<double> scales = q.scales;
  const std::vector<int64_t>& zero_points = q.zero_points;  // a temporary, as old callers bind
  EXPECT_EQ(scales, (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(zero_points, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(q.zero_points, (std::vector<int64_t>{4, 5}));
  q.scales.resize(3, 9.0);
  q.scales[0] = 0.5;
  EXPECT_THAT(q.scales, ElementsAre(0.5, 2.5, 9.0));
}

// --- buffer: sharing, copy-on-write, alignment -------------------------------------

TEST(TensorBufferTest, CopySharesAndWriteDetaches) {
  Tensor a = Tensor::FromFloats({2, 2}, {1, 2, 3, 4});
  Tensor b = a;
  EXPECT_EQ(a.raw_data(), b.raw_data());  // shared, no copy

  b.mutable_data<float>()[0] = 10.0f;
  EXPECT_NE(a.raw_data(), b.raw_data());  // b detached
  EXPECT_EQ(a.data<float>()[0], 1.0f);    // a unchanged
  EXPECT_EQ(b.data<float>()[0], 10.0f);
  EXPECT_EQ(b.data<float>()[3], 4.0f);  // the rest copied

  // Sole owner: writing does not move the data.
  const void* before = a.raw_data();
  a.mutable_data<float>()[1] = 20.0f;
  EXPECT_EQ(a.raw_data(), before);
  EXPECT_EQ(a.data<float>()[1], 20.0f);
}

TEST(TensorBufferTest, OriginalDetachesWhenWrittenWhileShared) {
  Tensor a = Tensor::FromFloats({2}, {1, 2});
  const Tensor b = a;
  a.mutable_data<float>()[0] = 5.0f;
  EXPECT_EQ(b.data<float>()[0], 1.0f);
  EXPECT_EQ(a.data<float>()[0], 5.0f);
}

TEST(TensorBufferTest, BufferOutlivesTheTensorThatCreatedIt) {
  Tensor b;
  {
    const Tensor a = Tensor::FromInt64s({3}, {7, 8, 9});
    b = a;
  }
  EXPECT_THAT(absl::MakeConstSpan(b.data<int64_t>(), 3), ElementsAre(7, 8, 9));
}

// Borrowed bytes (the Python extension's numpy inputs) are read in place, never written,
// and their owner is released with the last tensor reading them.
TEST(TensorBufferTest, BorrowedBytesAreReadInPlaceAndCopiedOnWrite) {
  alignas(std::max_align_t) float owned[4] = {1, 2, 3, 4};
  auto released = std::make_shared<bool>(false);
  std::shared_ptr<const void> owner(owned, [released](const void*) { *released = true; });
  auto t = Tensor::BorrowBytes(
      DType::kFloat32, {2, 2},
      absl::string_view(reinterpret_cast<const char*>(owned), sizeof(owned)), std::move(owner));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->raw_data(), owned);  // no copy
  Tensor reader = *t;
  t->mutable_data<float>()[0] = 10.0f;  // sole holder or not, a write copies
  EXPECT_NE(t->raw_data(), owned);
  EXPECT_EQ(owned[0], 1.0f);
  EXPECT_EQ(t->data<float>()[0], 10.0f);
  EXPECT_EQ(t->data<float>()[3], 4.0f);
  EXPECT_FALSE(*released);  // `reader` still reads the borrowed bytes
  EXPECT_EQ(reader.raw_data(), owned);
  reader = Tensor();
  EXPECT_TRUE(*released);
}

TEST(TensorBufferTest, MisalignedBorrowedBytesAreCopied) {
  alignas(std::max_align_t) char bytes[sizeof(float) * 3] = {};
  auto released = std::make_shared<bool>(false);
  std::shared_ptr<const void> owner(bytes, [released](const void*) { *released = true; });
  auto t = Tensor::BorrowBytes(DType::kFloat32, {2}, absl::string_view(bytes + 4, 8),
                               std::move(owner));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->raw_data(), bytes + 4);
  EXPECT_TRUE(*released);  // nothing borrowed, so nothing kept
  EXPECT_FALSE(Tensor::BorrowBytes(DType::kFloat32, {3}, absl::string_view(bytes, 8), nullptr).ok());
}

TEST(TensorBufferTest, MoveTransfersTheBuffer) {
  Tensor a = Tensor::FromFloats({2}, {1, 2});
  const void* data = a.raw_data();
  Tensor b = std::move(a);
  EXPECT_EQ(b.raw_data(), data);
  Tensor c;
  c = std::move(b);
  EXPECT_EQ(c.raw_data(), data);
  EXPECT_EQ(c.data<float>()[1], 2.0f);
}

TEST(TensorBufferTest, SelfAssignmentKeepsTheData) {
  Tensor a = Tensor::FromFloats({2}, {1, 2});
  Tensor& alias = a;
  a = alias;
  EXPECT_EQ(a.data<float>()[1], 2.0f);
}

TEST(TensorBufferTest, DataIsAlignedForEveryElementType) {
  for (DType dtype : {DType::kInt64, DType::kFloat32, DType::kQInt8, DType::kBool}) {
    for (int64_t n : {1, 3, 17}) {
      const Tensor t = *Tensor::Zeros(dtype, {n});
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % alignof(std::max_align_t), 0u)
          << DTypeName(dtype) << " x " << n;
    }
  }
  // No stored dtype is double today, but kernels may read any 8-byte type through data<T>().
  const Tensor d = *Tensor::Zeros(DType::kQInt8, {24});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d.data<double>()) % alignof(double), 0u);
  const Tensor i = *Tensor::Zeros(DType::kInt64, {3});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(i.data<int64_t>()) % alignof(int64_t), 0u);
}

TEST(TensorBufferTest, EmptyTensorsHaveAnAlignedPointerAndNoBytes) {
  const Tensor default_tensor;
  EXPECT_THAT(default_tensor.shape(), ElementsAre(0));
  EXPECT_EQ(default_tensor.numel(), 0);
  EXPECT_EQ(default_tensor.nbytes(), 0u);
  EXPECT_NE(default_tensor.raw_data(), nullptr);
  EXPECT_EQ(default_tensor.bytes(), "");

  Tensor zero = *Tensor::Zeros(DType::kInt64, {4, 0});
  EXPECT_EQ(zero.numel(), 0);
  EXPECT_EQ(zero.nbytes(), 0u);
  EXPECT_NE(zero.mutable_raw_data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(zero.data<int64_t>()) % alignof(int64_t), 0u);
  EXPECT_EQ(zero, *Tensor::FromBytes(DType::kInt64, {4, 0}, ""));
}

TEST(TensorBufferTest, ReshapedSharesTheBuffer) {
  const Tensor t = Tensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor r = *t.Reshaped({3, 2});
  EXPECT_EQ(r.raw_data(), t.raw_data());
  EXPECT_THAT(r.shape(), ElementsAre(3, 2));
  EXPECT_THAT(t.shape(), ElementsAre(2, 3));
  EXPECT_EQ(r.numel(), 6);

  auto bad = t.Reshaped({4, 2});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "cannot reshape [2, 3] (6 elements) to [4, 2]");
}

TEST(TensorBufferTest, TensorBufferCountsReferences) {
  TensorBuffer* buffer = TensorBuffer::Copy("abc");
  EXPECT_EQ(buffer->size(), 3u);
  EXPECT_EQ(std::string(buffer->data(), 3), "abc");
  EXPECT_FALSE(buffer->shared());
  buffer->Ref();
  EXPECT_TRUE(buffer->shared());
  buffer->Unref();
  EXPECT_FALSE(buffer->shared());
  buffer->Unref();  // frees; ASan / LSan runs of this test check it
}

// --- buffer storage: huge-page mappings, shared regions, adopted strings -----------

// Fills `t` with a pattern of its own (by index and `seed`) and checks it reads back.
void FillAndCheck(Tensor& t, uint8_t seed) {
  uint8_t* bytes = static_cast<uint8_t*>(t.mutable_raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + seed);
  const uint8_t* read = static_cast<const uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) {
    ASSERT_EQ(read[i], static_cast<uint8_t>(i * 31 + seed)) << i;
  }
}

TEST(TensorBufferStorageTest, LargeBuffersStartOnAHugePage) {
  const size_t n = TensorBuffer::kHugePageBytes + 12345;  // not a page multiple
  Tensor t = *Tensor::Uninitialized(DType::kQInt8, {static_cast<int64_t>(n)});
  EXPECT_EQ(t.nbytes(), n);
#if defined(__linux__)
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % TensorBuffer::kHugePageBytes, 0u);
#endif
  FillAndCheck(t, 1);
  // Copy-on-write as for any buffer: the copy detaches into a buffer of its own.
  Tensor copy = t;
  EXPECT_EQ(copy.raw_data(), t.raw_data());
  copy.mutable_data<int8_t>()[n - 1] = 0;
  EXPECT_NE(copy.raw_data(), t.raw_data());
  EXPECT_EQ(copy.bytes().substr(0, n - 1), t.bytes().substr(0, n - 1));
  EXPECT_EQ(t.data<uint8_t>()[n - 1], static_cast<uint8_t>((n - 1) * 31 + 1));
  // Zeros zero every byte of a mapping as of a heap block.
  const Tensor zeros = *Tensor::Zeros(DType::kFloat32, {static_cast<int64_t>(n / 4)});
  EXPECT_EQ(zeros.bytes(), std::string(zeros.nbytes(), '\0'));
}

TEST(TensorBufferStorageTest, MediumBuffersAreIndependentAndAligned) {
  // Enough medium buffers to fill more than one region, of sizes that are not cache-line
  // multiples; each keeps its own bytes while the others are written and freed.
  std::vector<Tensor> tensors;
  size_t total = 0;
  for (int i = 0; total < (size_t{40} << 20); ++i) {
    const int64_t n = static_cast<int64_t>(TensorBuffer::kPooledMinBytes) + 1000 * i + 3;
    tensors.push_back(*Tensor::Uninitialized(DType::kQUInt8, {n}));
    total += static_cast<size_t>(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(tensors.back().raw_data()) % alignof(std::max_align_t),
              0u);
    FillAndCheck(tensors.back(), static_cast<uint8_t>(i));
  }
  // Free every other one, allocate again (reusing what was freed where it can), and
  // check everything that lives still holds its own pattern.
  for (size_t i = 0; i < tensors.size(); i += 2) tensors[i] = Tensor();
  for (size_t i = 0; i < tensors.size(); i += 2) {
    tensors[i] = *Tensor::Uninitialized(DType::kQUInt8, {static_cast<int64_t>(
                                                           TensorBuffer::kPooledMinBytes + 77)});
    FillAndCheck(tensors[i], 200);
  }
  for (size_t i = 1; i < tensors.size(); i += 2) {
    const uint8_t* read = tensors[i].data<uint8_t>();
    for (size_t b = 0; b < tensors[i].nbytes(); b += 997) {
      ASSERT_EQ(read[b], static_cast<uint8_t>(b * 31 + i)) << i << " " << b;
    }
  }
  // Just below the pooled size and just below the huge-page size work alike.
  for (size_t n : {TensorBuffer::kPooledMinBytes - 1, TensorBuffer::kHugePageBytes - 1}) {
    Tensor t = *Tensor::Uninitialized(DType::kQInt8, {static_cast<int64_t>(n)});
    FillAndCheck(t, 9);
  }
}

TEST(TensorBufferStorageTest, AdoptKeepsALargeStringWithoutCopying) {
  std::string bytes(100000, 'x');
  bytes[99999] = 'y';
  const char* storage = bytes.data();
  TensorBuffer* buffer = TensorBuffer::Adopt(std::move(bytes));
  EXPECT_EQ(buffer->size(), 100000u);
  if (reinterpret_cast<uintptr_t>(storage) % alignof(std::max_align_t) == 0) {
    EXPECT_EQ(buffer->data(), storage);  // the string's block is the data
  }
  EXPECT_EQ(buffer->data()[0], 'x');
  EXPECT_EQ(buffer->data()[99999], 'y');
  buffer->Unref();  // frees the string's block too; ASan / LSan runs check it

  // Short strings (inline in the string object) and loose blocks are copied.
  TensorBuffer* small = TensorBuffer::Adopt("abc");
  EXPECT_EQ(std::string(small->data(), small->size()), "abc");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small->data()) % alignof(std::max_align_t), 0u);
  small->Unref();
  std::string loose;
  loose.reserve(10000);
  loose = "0123456789";
  const char* loose_storage = loose.data();
  TensorBuffer* copied = TensorBuffer::Adopt(std::move(loose));
  EXPECT_NE(copied->data(), loose_storage);
  EXPECT_EQ(std::string(copied->data(), copied->size()), "0123456789");
  copied->Unref();
}

TEST(TensorBufferStorageTest, FromBytesTakesTheStringAndChecksItsSize) {
  std::string bytes(4096 * sizeof(float), '\0');
  const float one = 1.0f;
  std::memcpy(&bytes[4095 * sizeof(float)], &one, sizeof(float));
  Tensor t = *Tensor::FromBytes(DType::kFloat32, {64, 64}, std::move(bytes));
  EXPECT_EQ(t.data<float>()[4095], 1.0f);
  EXPECT_EQ(t.data<float>()[0], 0.0f);
  // Written while shared: detaches as any tensor does.
  Tensor copy = t;
  copy.mutable_data<float>()[0] = 2.0f;
  EXPECT_EQ(t.data<float>()[0], 0.0f);

  auto bad = Tensor::FromBytes(DType::kFloat32, {2, 3}, std::string(23, 'a'));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "tensor data has 23 bytes; expected 24 for torch.float32 shape [2, 3]");
  auto bad_copy = Tensor::CopyFromBytes(DType::kFloat32, {2, 3}, std::string(25, 'a'));
  ASSERT_FALSE(bad_copy.ok());
  EXPECT_EQ(bad_copy.status().message(),
            "tensor data has 25 bytes; expected 24 for torch.float32 shape [2, 3]");
}

// --- factories ---------------------------------------------------------------------

TEST(TensorFactoryTest, ZerosAreZero) {
  const Tensor t = *Tensor::Zeros(DType::kInt32, {2, 3});
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_EQ(t.bytes(), std::string(24, '\0'));
}

TEST(TensorFactoryTest, FromBytesAndCopyFromBytesKeepTheBytes) {
  const std::string bytes("\x01\x02\x03\x04", 4);
  const Tensor a = *Tensor::FromBytes(DType::kQUInt8, {4}, bytes,
                                      QuantParams::PerTensor(0.5, 2));
  const Tensor b = *Tensor::CopyFromBytes(DType::kQUInt8, {2, 2}, bytes,
                                          QuantParams::PerTensor(0.5, 2));
  EXPECT_EQ(a.bytes(), bytes);
  EXPECT_EQ(b.bytes(), bytes);
  EXPECT_EQ(a.qparams(), QuantParams::PerTensor(0.5, 2));
  EXPECT_FALSE(a == b);  // shapes differ
  EXPECT_EQ(a, *b.Reshaped({4}));

  auto short_bytes = Tensor::CopyFromBytes(DType::kFloat32, {2}, "abc");
  ASSERT_FALSE(short_bytes.ok());
  EXPECT_EQ(short_bytes.status().message(),
            "tensor data has 3 bytes; expected 8 for torch.float32 shape [2]");
}

TEST(TensorFactoryTest, UninitializedHasTheShapeAndWritableBytes) {
  Tensor t = *Tensor::Uninitialized(DType::kQInt8, {2, 3}, QuantParams::PerTensor(0.1, 0));
  EXPECT_THAT(t.shape(), ElementsAre(2, 3));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 6u);
  EXPECT_EQ(t.dtype(), DType::kQInt8);
  EXPECT_EQ(t.qparams(), QuantParams::PerTensor(0.1, 0));
  const void* data = t.raw_data();
  std::memcpy(t.mutable_raw_data(), "abcdef", 6);
  EXPECT_EQ(t.raw_data(), data);  // sole owner: written in place
  EXPECT_EQ(t.bytes(), "abcdef");

  const Tensor empty = *Tensor::Uninitialized(DType::kFloat32, {0, 5});
  EXPECT_EQ(empty.nbytes(), 0u);
}

TEST(TensorFactoryTest, UninitializedRejectsNegativeDims) {
  auto t = Tensor::Uninitialized(DType::kFloat32, {2, -1});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(), "shape dimension 1 is -1; expected >= 0");
}

TEST(TensorFactoryTest, UninitializedRejectsTooManyElements) {
  // 2^16 * 2^16 = 2^32 elements, past kMaxElements = 2^28. (Checked before allocating.)
  auto t = Tensor::Uninitialized(DType::kQInt8, {int64_t{1} << 16, int64_t{1} << 16});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("shape [65536, 65536] has more than 268435456 elements"));
}

// A dimension past the limit is refused even when another is 0 (no elements): kernels
// do arithmetic on dimensions, which must not overflow.
TEST(TensorFactoryTest, UninitializedRejectsADimensionPastTheLimitEvenWithoutElements) {
  auto t = Tensor::Uninitialized(DType::kFloat32, {0, int64_t{1} << 40});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "shape dimension 1 is 1099511627776; the limit is 268435456");
  EXPECT_TRUE(Tensor::Uninitialized(DType::kFloat32, {0, int64_t{1} << 28}).ok());
  // The limit itself: 2^28 one-byte elements (256 MiB, not touched here).
  auto largest = Tensor::Uninitialized(DType::kQInt8, {int64_t{1} << 28});
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(largest->nbytes(), size_t{1} << 28);
  EXPECT_FALSE(Tensor::Uninitialized(DType::kQInt8, {(int64_t{1} << 28) + 1}).ok());
}

TEST(TensorFactoryTest, UninitializedRejectsDTypesWithoutStorage) {
  auto t = Tensor::Uninitialized(DType::kFloat16, {2});
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("are not supported"));
}

}  // namespace
}  // namespace fuselage
