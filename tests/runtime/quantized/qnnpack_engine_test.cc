// QuantizedEngine::kQnnpack: nnq.Conv2d / nniq.ConvReLU2d / nnq.Linear / nniq.LinearReLU
// against PyTorch 1.13's qnnpack engine at requantization ties
// (tests/runtime/gen_qnnpack_goldens.py -> qnnpack_conv_ties.txt, qnnpack_linear_ties.txt):
// bit for bit with the qnnpack arithmetic, and the cases tell it apart from onednn's.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/quantized/conv.h"
#include "runtime/quantized/linear.h"
#include "runtime/quantized/output_requantizer.h"
#include "runtime/quantized_engine.h"
#include "tests/runtime/quantized/golden_reader.h"

namespace fuselage {
namespace quantized {
namespace {

Conv2dParams ParamsOf(const GoldenCase& c) {
  Conv2dParams p;
  const int64_t stride = static_cast<int64_t>(c.number("stride"));
  const int64_t padding = static_cast<int64_t>(c.number("padding"));
  p.stride = {stride, stride};
  p.padding = {padding, padding};
  p.groups = static_cast<int64_t>(c.number("groups"));
  return p;
}

int64_t Differing(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += IntAt(a, i) != IntAt(b, i);
  return n;
}

absl::StatusOr<Tensor> RunConv(const GoldenCase& c, QuantizedEngine engine) {
  return QuantizedConv2d(c.tensor("x"), c.tensor("weight"), c.find_tensor("bias"), ParamsOf(c),
                         c.number("scale"), static_cast<int64_t>(c.number("zero_point")),
                         c.number("relu") != 0, engine);
}

absl::StatusOr<Tensor> RunLinear(const GoldenCase& c, QuantizedEngine engine) {
  return QuantizedLinear(c.tensor("x"), c.tensor("weight"), c.find_tensor("bias"),
                         c.number("scale"), static_cast<int64_t>(c.number("zero_point")),
                         c.number("relu") != 0, engine);
}

template <typename RunFn>
void CheckFile(const std::string& file, size_t expected_cases, RunFn run) {
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/" + file);
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), expected_cases);
  int64_t onednn_differs = 0, onednn_differs_recorded = 0;
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    auto qnnpack = run(c, QuantizedEngine::kQnnpack);
    ASSERT_TRUE(qnnpack.ok()) << qnnpack.status();
    EXPECT_TRUE(SameQuantized(*qnnpack, c.tensor("y")));  // exact, ties included
    auto onednn = run(c, QuantizedEngine::kOnednn);
    ASSERT_TRUE(onednn.ok()) << onednn.status();
    onednn_differs += Differing(*onednn, c.tensor("y"));
    onednn_differs_recorded += static_cast<int64_t>(c.number("onednn_differs"));
  }
  // The cases sit on ties where the engines round apart: onednn's arithmetic (computed
  // by fuselage) misses exactly as many outputs as the generator's numpy formula said.
  EXPECT_GT(onednn_differs, 0);
  EXPECT_EQ(onednn_differs, onednn_differs_recorded);
}

TEST(QnnpackEngineTest, ConvMatchesPyTorchsQnnpackEngineAtTies) {
  CheckFile("qnnpack_conv_ties.txt", 8, RunConv);
}

TEST(QnnpackEngineTest, LinearMatchesPyTorchsQnnpackEngineAtTies) {
  CheckFile("qnnpack_linear_ties.txt", 4, RunLinear);
}

TEST(QnnpackEngineTest, EngineNames) {
  EXPECT_EQ(QuantizedEngineFromName("qnnpack"), QuantizedEngine::kQnnpack);
  EXPECT_EQ(QuantizedEngineFromName("onednn"), QuantizedEngine::kOnednn);
  EXPECT_EQ(QuantizedEngineFromName("fbgemm"), std::nullopt);
  EXPECT_EQ(QuantizedEngineName(QuantizedEngine::kQnnpack), "qnnpack");
  EXPECT_EQ(QuantizedEngineFromName("onnxruntime"), QuantizedEngine::kOnnxruntime);
  EXPECT_EQ(QuantizedEngineName(QuantizedEngine::kOnnxruntime), "onnxruntime");
  EXPECT_EQ(EngineForBackend("qnnpack"), QuantizedEngine::kQnnpack);
  EXPECT_EQ(EngineForBackend("x86"), QuantizedEngine::kOnednn);
}

// ONNX Runtime's QLinearConv multiplies by (x_scale * w_scale) / y_scale, QNNPACK by
// (w_scale * x_scale) * (1 / y_scale): where the two float32 multipliers differ, an
// accumulator whose product lands between them on a half rounds apart, and the engine
// onnxruntime rounds as ORT's quotient says.
TEST(QnnpackEngineTest, OnnxruntimeMultipliesByOrtsQuotient) {
  const float x = 0.0173f;
  int found = 0;
  for (int i = 1; i < 2000 && found < 2; ++i) {
    const float w = 0.0001f * static_cast<float>(i);
    const float y = 0.0511f;
    const float quotient = (x * w) / y;
    const float reciprocal = (w * x) * (1.0f / y);
    if (quotient == reciprocal) continue;
    // An accumulator whose two products straddle or touch a half: near (n + 0.5) / scale.
    bool done = false;
    for (int n = 0; n < 5000 && !done; ++n) {
      const int32_t center = static_cast<int32_t>((n + 0.5) / quotient);
      for (int32_t acc = center - 2; acc <= center + 2 && !done; ++acc) {
        const float a = static_cast<float>(acc) * quotient;
        const float b = static_cast<float>(acc) * reciprocal;
        if (std::nearbyint(a) == std::nearbyint(b) || a > 200.0f) continue;
        SCOPED_TRACE(testing::Message() << "w " << w << " acc " << acc);
        const OutputRequantizer ort(x, {w}, true, nullptr, y, 10, false, DType::kQUInt8,
                                    QuantizedEngine::kOnnxruntime);
        const OutputRequantizer qnnpack(x, {w}, true, nullptr, y, 10, false, DType::kQUInt8,
                                        QuantizedEngine::kQnnpack);
        EXPECT_EQ(ort.Apply(acc, 0), static_cast<int32_t>(std::nearbyint(a)) + 10);
        EXPECT_EQ(qnnpack.Apply(acc, 0), static_cast<int32_t>(std::nearbyint(b)) + 10);
        EXPECT_NE(ort.Apply(acc, 0), qnnpack.Apply(acc, 0));
        ++found;
        done = true;
      }
    }
  }
  EXPECT_EQ(found, 2);
}

TEST(QnnpackEngineTest, OnnxruntimeBiasIsTheInt32TheQdqFileHolds) {
  // fuselage.to_onnx writes rint(bias / (float32(x_scale) * float32(w_scale))) in double.
  const float x = 0.02f, w = 0.003f, bias = 0.0009f;  // bias / (x * w) is 15 (+ rounding)
  const OutputRequantizer ort(x, {w}, true, &bias, 1.0, 0, false, DType::kQInt8,
                              QuantizedEngine::kOnnxruntime);
  ASSERT_EQ(ort.qnnpack_bias().size(), 1u);
  EXPECT_EQ(ort.qnnpack_bias()[0],
            static_cast<int32_t>(std::nearbyint(static_cast<double>(bias) /
                                                static_cast<double>(x * w))));
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
