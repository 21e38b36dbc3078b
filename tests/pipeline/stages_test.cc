// The pipeline's stages one at a time (pipeline/stages.h): which backend config a name
// and a config text give, and that fuse, prepare, calibrate, convert and lower called
// separately (the prepared state kept in the modules in between) give the very model
// RunQuantizeFlow gives in one call, keeping the state in memory.
#include "pipeline/stages.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_configs/config_loader.h"
#include "graph/serialization.h"
#include "graph/check.h"
#include "gtest/gtest.h"
#include "pipeline/quantize_flow.h"
#include "quantize/qconfig.h"
#include "runtime/quantized_engine.h"
#include "tools/examples.h"

namespace fuselage {
namespace {

constexpr char kExampleConfig[] = "backend_configs/examples/conv_bn_add_relu.textproto";

std::string ExampleConfigText() {
  auto text = ReadBackendConfigFile(kExampleConfig);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

std::vector<CalibrationSample> RandomSamples(int count) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<CalibrationSample> samples;
  for (int i = 0; i < count; ++i) {
    Tensor t = *Tensor::Zeros(DType::kFloat32, {1, 4, 8, 8});
    for (int64_t k = 0; k < t.numel(); ++k) t.mutable_data<float>()[k] = uniform(rng);
    samples.push_back({t});
  }
  return samples;
}

TEST(ResolveBackendConfigTest, NameTextOrBoth) {
  auto by_name = ResolveBackendConfig("qnnpack", std::nullopt, "");
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ(by_name->name(), "qnnpack");

  const std::string text = ExampleConfigText();
  auto by_text = ResolveBackendConfig("", absl::string_view(text), "example");
  ASSERT_TRUE(by_text.ok()) << by_text.status();
  EXPECT_EQ(by_text->name(), "qnnpack_conv_bn_add_relu");
  EXPECT_TRUE(ResolveBackendConfig("qnnpack", absl::string_view(text), "example").ok());

  auto disagree = ResolveBackendConfig("fbgemm", absl::string_view(text), "example");
  EXPECT_EQ(disagree.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(disagree.status().message(), "example extends backend 'qnnpack', not --backend=fbgemm");
  EXPECT_EQ(ResolveBackendConfig("nope", std::nullopt, "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ResolveBackendConfig("", std::nullopt, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  // An empty text is a text (the loader judges it), not "no text": an empty config with
  // no base, not the backend's. A text with no base goes with any backend, which then
  // names only the default qconfig mapping.
  auto empty = ResolveBackendConfig("qnnpack", absl::string_view(""), "empty");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->name(), "empty");
  EXPECT_EQ(empty->size(), 0u);
  const std::string own_entries = "pattern { pattern: \"(ReLU, Conv2d)\" fuser: WRAP_IN_SEQUENCE "
                                  "fused_module: \"ConvReLU2d\" }";
  auto base_less = ResolveBackendConfig("fbgemm", absl::string_view(own_entries), "own.textproto");
  ASSERT_TRUE(base_less.ok()) << base_less.status();
  EXPECT_EQ(base_less->size(), 1u);
}

TEST(DefaultMappingBackendTest, TheNameOrTheTextsBase) {
  const std::string text = ExampleConfigText();
  EXPECT_EQ(*DefaultMappingBackend("x86", std::nullopt, ""), "x86");
  EXPECT_EQ(*DefaultMappingBackend("", absl::string_view(text), "example"), "qnnpack");
  EXPECT_FALSE(DefaultMappingBackend("", std::nullopt, "").ok());
}

// The staging of a declared type is tests/tools/declared_type_stages_test.cc's. Here:
// what is refused, and a config that declares nothing.
TEST(LoadDeclaringConfigTest, NamesThePathOrTheSourceInErrors) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string missing = dir + "/no_such_config.textproto";
  absl::Status status = LoadDeclaringConfig(missing, "typed/name.textproto").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find(missing), absl::string_view::npos) << status;

  const std::string broken = dir + "/broken_config.textproto";
  {
    std::ofstream out(broken);
    out << "name: \"broken\"\npattern {\n";
  }
  status = LoadDeclaringConfig(broken, "typed/broken.textproto").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("typed/broken.textproto"), absl::string_view::npos) << status;

  EXPECT_TRUE(LoadDeclaringConfig(kExampleConfig, kExampleConfig).ok());
}

TEST(StagesTest, OneAtATimeEqualsTheWholeFlow) {
  const std::string text = ExampleConfigText();
  auto config = ResolveBackendConfig("qnnpack", absl::string_view(text), "example");
  ASSERT_TRUE(config.ok()) << config.status();
  auto mapping = DefaultQConfigMapping("qnnpack");
  ASSERT_TRUE(mapping.ok());
  const std::vector<CalibrationSample> samples = RandomSamples(4);

  auto whole = BuildResidualExample(kResidualExampleSeed);
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE(RunQuantizeFlow(**whole, *config, *mapping, samples).ok());

  auto staged = BuildResidualExample(kResidualExampleSeed);
  ASSERT_TRUE(staged.ok());
  GraphModule& gm = **staged;
  auto fused = FuseModel(gm, *config);
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(fused->fused, 1);
  EXPECT_EQ(fused->ToString(),
            "fused 1 match (conv_bn_add_relu: 1) with backend qnnpack_conv_bn_add_relu: 7 -> 4 "
            "nodes");
  auto prepared = PrepareModel(gm, *mapping, *config);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  // The prepared state survives a save and a load: it is in the modules.
  auto reloaded = ParseModel(SerializeModel(gm));
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  auto calibrated = CalibrateModel(**reloaded, samples);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  EXPECT_EQ(calibrated->samples, 4);
  ASSERT_TRUE(ConvertModel(**reloaded).ok());
  auto lowered = LowerModel(**reloaded);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_FALSE(LoweredNothing(*lowered));

  EXPECT_EQ(SerializeModel(**reloaded), SerializeModel(**whole));
}

// FuseModel is its matcher and scan followed by FuseScannedModel (what `fuselage fuse`
// calls to time those steps): the same report, the same fused model.
TEST(StagesTest, FuseScannedModelWithTheConfigsMatcherAndScanIsFuseModel) {
  const std::string text = ExampleConfigText();
  auto config = ResolveBackendConfig("qnnpack", absl::string_view(text), "example");
  ASSERT_TRUE(config.ok()) << config.status();
  auto whole = BuildResidualExample(kResidualExampleSeed);
  auto scanned = BuildResidualExample(kResidualExampleSeed);
  ASSERT_TRUE(whole.ok() && scanned.ok());
  auto fused = FuseModel(**whole, *config);
  ASSERT_TRUE(fused.ok()) << fused.status();

  auto matcher = BuildFusionMatcher(*config);
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  auto by_steps = FuseScannedModel(**scanned, *config, *matcher, matcher->FindMatches(**scanned));
  ASSERT_TRUE(by_steps.ok()) << by_steps.status();
  ASSERT_TRUE((*scanned)->Verify().ok());
  EXPECT_EQ(by_steps->ToString(), fused->ToString());
  EXPECT_EQ(by_steps->ToString(),
            "fused 1 match (conv_bn_add_relu: 1) with backend qnnpack_conv_bn_add_relu: 7 -> 4 "
            "nodes");
  EXPECT_EQ(SerializeModel(**scanned), SerializeModel(**whole));
}

// ToString is the summary line, then one line per overlap (`fuselage fuse` prints the
// summary, "; wrote OUT", then the overlap lines).
TEST(StagesTest, FuseReportIsItsSummaryThenItsOverlapLines) {
  FuseReport report;
  report.backend = "qnnpack";
  report.fused = 2;
  report.per_pattern = {{"conv_bn_relu", 1}, {"conv_bn", 1}};
  report.nodes_before = 9;
  report.nodes_after = 5;
  EXPECT_EQ(report.OverlapLines(), "");
  report.overlaps.push_back({"conv_bn_relu", "relu", "bn_relu", "relu", {"bn", "relu"}});
  EXPECT_EQ(report.Summary(),
            "fused 2 matches (conv_bn_relu: 1, conv_bn: 1) with backend qnnpack: 9 -> 5 nodes");
  EXPECT_EQ(report.OverlapLines(),
            "\n  overlap: conv_bn_relu at relu took bn, relu from bn_relu at relu");
  EXPECT_EQ(report.ToString(), report.Summary() + report.OverlapLines());
}

// The engine a quantized model runs on by default is recorded at prepare: the config's
// (qnnpack -> QNNPACK's arithmetic, the others -> onednn's) unless one is given, and it
// survives calibrate, convert, lower and a save / load.
TEST(StagesTest, PrepareRecordsTheBackendsEngineUnlessOneIsGiven) {
  const std::vector<CalibrationSample> samples = RandomSamples(2);
  auto recorded_after_flow = [&](absl::string_view backend,
                                 std::optional<QuantizedEngine> engine) {
    auto config = ResolveBackendConfig(backend, std::nullopt, "");
    auto mapping = DefaultQConfigMapping(backend);
    auto gm = BuildResidualExample(kResidualExampleSeed);
    FUSELAGE_CHECK(config.ok() && mapping.ok() && gm.ok());
    QuantizeFlowOptions options;
    options.engine = engine;
    auto report = RunQuantizeFlow(**gm, *config, *mapping, samples, options);
    EXPECT_TRUE(report.ok()) << report.status();
    auto reloaded = ParseModel(SerializeModel(**gm));
    FUSELAGE_CHECK(reloaded.ok());
    return *RecordedEngine(**reloaded);
  };
  EXPECT_EQ(recorded_after_flow("qnnpack", std::nullopt), QuantizedEngine::kQnnpack);
  for (absl::string_view backend : {"onednn", "x86", "fbgemm"}) {
    SCOPED_TRACE(backend);
    EXPECT_EQ(recorded_after_flow(backend, std::nullopt), QuantizedEngine::kOnednn);
  }
  EXPECT_EQ(recorded_after_flow("qnnpack", QuantizedEngine::kOnednn), QuantizedEngine::kOnednn);
  EXPECT_EQ(recorded_after_flow("x86", QuantizedEngine::kQnnpack), QuantizedEngine::kQnnpack);

  // A config file extending qnnpack under a name of its own is still qnnpack's family.
  for (const auto& [base, expected] :
       {std::pair{"qnnpack", QuantizedEngine::kQnnpack}, {"fbgemm", QuantizedEngine::kOnednn}}) {
    SCOPED_TRACE(base);
    const std::string text = absl::StrCat("base: \"", base, "\"\nname: \"my_backend\"\n");
    auto renamed = ResolveBackendConfig("", text, "my_backend.textproto");
    ASSERT_TRUE(renamed.ok()) << renamed.status();
    EXPECT_EQ(renamed->name(), "my_backend");
    auto mapping = DefaultQConfigMapping(base);
    auto gm = BuildResidualExample(kResidualExampleSeed);
    ASSERT_TRUE(mapping.ok() && gm.ok());
    ASSERT_TRUE(PrepareModel(**gm, *mapping, *renamed).ok());
    EXPECT_EQ(*RecordedEngine(**gm), expected);
  }

  // One stage at a time: prepare records, calibrate may replace, convert and lower keep.
  auto config = ResolveBackendConfig("qnnpack", std::nullopt, "");
  auto mapping = DefaultQConfigMapping("qnnpack");
  auto gm = BuildResidualExample(kResidualExampleSeed);
  ASSERT_TRUE(config.ok() && mapping.ok() && gm.ok());
  EXPECT_EQ(*RecordedEngine(**gm), std::nullopt);  // a float model records nothing
  ASSERT_TRUE(PrepareModel(**gm, *mapping, *config).ok());
  EXPECT_EQ(*RecordedEngine(**gm), QuantizedEngine::kQnnpack);
  ASSERT_TRUE(CalibrateModel(**gm, samples).ok());
  EXPECT_EQ(*RecordedEngine(**gm), QuantizedEngine::kQnnpack);
  ASSERT_TRUE(CalibrateModel(**gm, samples, 0, QuantizedEngine::kOnednn).ok());
  EXPECT_EQ(*RecordedEngine(**gm), QuantizedEngine::kOnednn);
  ASSERT_TRUE(ConvertModel(**gm).ok());
  ASSERT_TRUE(LowerModel(**gm).ok());
  EXPECT_EQ(*RecordedEngine(**gm), QuantizedEngine::kOnednn);
}

TEST(StagesTest, ConvertAndCalibrateRefuseAModelThatIsNotPrepared) {
  auto gm = BuildResidualExample(kResidualExampleSeed);
  ASSERT_TRUE(gm.ok());
  const std::string before = SerializeModel(**gm);
  EXPECT_EQ(ConvertModel(**gm).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CalibrateModel(**gm, RandomSamples(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto lowered = LowerModel(**gm);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_TRUE(LoweredNothing(*lowered));
  EXPECT_EQ(SerializeModel(**gm), before);
}

}  // namespace
}  // namespace fuselage
