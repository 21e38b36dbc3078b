// QConfig / QConfigMapping: PyTorch 1.13's defaults (read off qconfig.py,
// qconfig_mapping.py and observer.py) and its precedence rules.
#include "quantize/qconfig.h"

#include "gtest/gtest.h"

namespace fuselage {
namespace {

std::pair<int64_t, int64_t> Range(int64_t lo, int64_t hi) { return {lo, hi}; }

TEST(QConfigTest, DefaultQConfigsPerBackend) {
  auto fbgemm = DefaultQConfig("fbgemm");
  ASSERT_TRUE(fbgemm.ok());
  EXPECT_EQ(fbgemm->activation.kind, ObserverKind::kHistogram);
  EXPECT_EQ(fbgemm->activation.dtype, DType::kQUInt8);
  EXPECT_TRUE(fbgemm->activation.reduce_range);
  EXPECT_EQ(fbgemm->weight.kind, ObserverKind::kPerChannelMinMax);
  EXPECT_EQ(fbgemm->weight.dtype, DType::kQInt8);
  EXPECT_EQ(fbgemm->weight.qscheme, ObserverQScheme::kPerChannelSymmetric);
  EXPECT_EQ(*DefaultQConfig("x86"), *fbgemm);

  auto qnnpack = DefaultQConfig("qnnpack");
  ASSERT_TRUE(qnnpack.ok());
  EXPECT_FALSE(qnnpack->activation.reduce_range);
  EXPECT_EQ(qnnpack->weight.kind, ObserverKind::kMinMax);
  EXPECT_EQ(qnnpack->weight.qscheme, ObserverQScheme::kPerTensorSymmetric);
  EXPECT_EQ(qnnpack->weight.dtype, DType::kQInt8);

  auto onednn = DefaultQConfig("onednn");
  ASSERT_TRUE(onednn.ok());
  EXPECT_FALSE(onednn->activation.reduce_range);
  EXPECT_EQ(onednn->weight.kind, ObserverKind::kPerChannelMinMax);

  auto bad = DefaultQConfig("tensorrt");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tensorrt"), std::string::npos);
}

TEST(QConfigTest, QuantRangesFollowCalculateQminQmax) {
  ObserverSpec s;
  EXPECT_EQ(*s.QuantRange(), Range(0, 255));
  s.reduce_range = true;
  EXPECT_EQ(*s.QuantRange(), Range(0, 127));
  s.dtype = DType::kQInt8;
  EXPECT_EQ(*s.QuantRange(), Range(-64, 63));
  s.reduce_range = false;
  EXPECT_EQ(*s.QuantRange(), Range(-128, 127));
  // A custom range is halved too (floor division): -127 // 2 = -64.
  s.quant_min = -127;
  s.quant_max = 127;
  s.reduce_range = true;
  EXPECT_EQ(*s.QuantRange(), Range(-64, 63));
  s.quant_min = -200;  // 328 values > 256 for qint8
  s.quant_max = 127;
  EXPECT_EQ(s.QuantRange().status().code(), absl::StatusCode::kInvalidArgument);
  // A range PyTorch accepts though its zero points cannot be stored in the dtype (its
  // converted model then fails at run): quint8 [-3, 252].
  s = ObserverSpec();
  s.quant_min = -3;
  s.quant_max = 252;
  EXPECT_EQ(s.QuantRange().status().message(),
            "MinMaxObserver: quant_min/quant_max [-3, 252] lie outside torch.quint8's range "
            "[0, 255]");
}

TEST(QConfigTest, DefaultMappingEntries) {
  auto fbgemm = DefaultQConfigMapping("fbgemm");
  ASSERT_TRUE(fbgemm.ok());
  const QConfig global = *DefaultQConfig("fbgemm");
  EXPECT_EQ(fbgemm->global(), global);
  EXPECT_EQ(fbgemm->QConfigFor("nn.Conv2d", "features.0"), global);
  // Transposed convs get per-tensor weights on fbgemm / x86 but not on qnnpack.
  const OptionalQConfig& transpose = fbgemm->QConfigFor("nn.ConvTranspose2d", "up");
  ASSERT_TRUE(transpose.has_value());
  EXPECT_EQ(transpose->weight, DefaultWeightObserver());
  EXPECT_EQ(transpose->activation, global.activation);
  auto qnnpack = DefaultQConfigMapping("qnnpack");
  ASSERT_TRUE(qnnpack.ok());
  EXPECT_EQ(qnnpack->QConfigFor("nn.ConvTranspose2d", "up"), *DefaultQConfig("qnnpack"));
  // Layer norm: placeholder (float) weights.
  EXPECT_EQ(fbgemm->QConfigFor("nn.LayerNorm", "ln")->weight.kind, ObserverKind::kPlaceholder);
  // Fixed qparams: sigmoid 1/256 zp 0, tanh 2/256 zp 128.
  const OptionalQConfig& sigmoid = fbgemm->QConfigFor("torch.sigmoid", "");
  ASSERT_TRUE(sigmoid.has_value());
  EXPECT_EQ(sigmoid->activation.kind, ObserverKind::kFixedQParams);
  EXPECT_DOUBLE_EQ(sigmoid->activation.fixed_scale, 1.0 / 256.0);
  EXPECT_EQ(sigmoid->activation.fixed_zero_point, 0);
  const OptionalQConfig& tanh = fbgemm->QConfigFor("nn.Tanh", "act");
  EXPECT_DOUBLE_EQ(tanh->activation.fixed_scale, 2.0 / 256.0);
  EXPECT_EQ(tanh->activation.fixed_zero_point, 128);
  EXPECT_EQ(fbgemm->QConfigFor("reshape", "")->activation.kind, ObserverKind::kReuseInput);
}

TEST(QConfigTest, PrecedenceGlobalTypeRegexName) {
  QConfig a = *DefaultQConfig("fbgemm");
  QConfig b = *DefaultQConfig("qnnpack");
  QConfig c = a;
  c.activation.kind = ObserverKind::kMinMax;
  QConfigMapping m;
  m.SetGlobal(a).SetObjectType("nn.Linear", b).SetModuleName("encoder", std::nullopt);
  ASSERT_TRUE(m.SetModuleNameRegex("decoder\\.layers\\.[0-9]+", c).ok());

  EXPECT_EQ(m.QConfigFor("nn.Conv2d", "stem"), a);                // global
  EXPECT_EQ(m.QConfigFor("nn.Linear", "head"), b);                // object type
  EXPECT_EQ(m.QConfigFor("nn.Linear", "decoder.layers.3.fc"), c); // regex beats type
  EXPECT_EQ(m.QConfigFor("nn.Linear", "x.decoder.layers.3"), b);  // re.match anchors
  EXPECT_FALSE(m.QConfigFor("nn.Linear", "encoder.block.fc").has_value());  // parent name
  m.SetModuleName("encoder.block.fc", a);
  EXPECT_EQ(m.QConfigFor("nn.Linear", "encoder.block.fc"), a);    // own name beats parent
  EXPECT_FALSE(m.QConfigFor("nn.Linear", "encoder.block.other").has_value());
  // A function call has no module name: object type, then global.
  m.SetObjectType("operator.add", std::nullopt);
  EXPECT_FALSE(m.QConfigFor("operator.add", "").has_value());
  EXPECT_EQ(m.QConfigFor("operator.mul", ""), a);

  absl::Status bad = m.SetModuleNameRegex("(unclosed", a);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
}

TEST(QConfigTest, RenderingAndNames) {
  EXPECT_EQ(DefaultWeightObserver().ToString(),
            "MinMaxObserver(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric, "
            "reduce_range=False, eps=1.19209e-07)");
  EXPECT_EQ(ObserverQSchemeFromName("per_channel_symmetric"),
            ObserverQScheme::kPerChannelSymmetric);
  EXPECT_EQ(ObserverKindFromName("HistogramObserver"), ObserverKind::kHistogram);
  EXPECT_FALSE(ObserverKindFromName("Histogram").has_value());
}

}  // namespace
}  // namespace fuselage
