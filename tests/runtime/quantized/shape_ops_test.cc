// Quantized flatten / reshape / cat: hand-checked values, PyTorch 1.13 goldens (cat.txt:
// torch.cat and torch.ops.quantized.cat on quantized tensors) and errors.
#include "runtime/quantized/shape_ops.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/quantized/quantize.h"
#include "tests/runtime/quantized/golden_reader.h"

namespace fuselage {
namespace quantized {
namespace {

std::vector<int64_t> Ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(IntAt(t, i));
  return out;
}

Tensor Q(std::vector<int64_t> shape, const std::vector<uint8_t>& values, double scale,
         int64_t zp) {
  auto t = Tensor::FromBytes(DType::kQUInt8, std::move(shape),
                             std::string(values.begin(), values.end()),
                             QuantParams::PerTensor(scale, zp));
  EXPECT_TRUE(t.ok());
  return *t;
}

TEST(QuantizedShapeOpsTest, FlattenReshapeKeepValuesAndQParams) {
  const Tensor x = Q({2, 3, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 0.1, 3);
  auto flat = QuantizedFlatten(x, 1, -1);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->shape(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(flat->qparams(), x.qparams());
  EXPECT_EQ(Ints(*flat), Ints(x));
  auto reshaped = QuantizedReshape(x, {-1, 4});
  ASSERT_TRUE(reshaped.ok()) << reshaped.status();
  EXPECT_EQ(reshaped->shape(), (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(QuantizedReshape(x, {5, -1}).ok());
  EXPECT_FALSE(QuantizedFlatten(Tensor::FromFloats({2}, {1.f, 2.f}), 0, -1).ok());
}

TEST(QuantizedShapeOpsTest, CatRequantizesToOutputParams) {
  // a: real 0.2, 0.4 (scale 0.1, zp 0); b: real 1.0 (scale 0.5, zp 2 -> q 4).
  const Tensor a = Q({1, 2}, {2, 4}, 0.1, 0);
  const Tensor b = Q({1, 1}, {4}, 0.5, 2);
  // Default: a's qparams -> 2, 4, 10.
  auto y = QuantizedCat({a, b}, 1);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->qparams(), a.qparams());
  EXPECT_EQ(Ints(*y), (std::vector<int64_t>{2, 4, 10}));
  // Output scale 0.2, zp 1: 0.2 -> 2, 0.4 -> 3, 1.0 -> 6.
  auto z = QuantizedCat({a, b}, -1, OutputQParams{0.2, 1});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Ints(*z), (std::vector<int64_t>{2, 3, 6}));
  auto bad = QuantizedCat({a, Q({2, 1}, {1, 2}, 0.1, 0)}, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tensors[1]"), std::string::npos) << bad.status();
  auto float_input = QuantizedCat({a, Tensor::FromFloats({1, 1}, {1.f})}, 1);
  ASSERT_FALSE(float_input.ok());
  EXPECT_NE(float_input.status().message().find("quantized cat: tensors[1] is a torch.float32"),
            std::string::npos)
      << float_input.status();
}

TEST(QuantizedShapeOpsTest, CatMatchesPyTorchGoldens) {
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/cat.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 2u);
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> inputs = {c.tensor("in0"), c.tensor("in1"), c.tensor("in2")};
    std::optional<OutputQParams> out;
    if (c.number("has_out_qparams") != 0) {
      out = OutputQParams{c.number("scale"), static_cast<int64_t>(c.number("zero_point"))};
    }
    auto y = QuantizedCat(inputs, static_cast<int64_t>(c.number("dim")), out);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(SameQuantized(*y, c.tensor("y")));
  }
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
