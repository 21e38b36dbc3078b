// A prepared model in a file (quantize/prepared_model.h, quantize/observer_module.h):
//  - prepare → store → save → load → read → calibrate → store → save → load → read →
//    convert gives the same reference model, byte for byte, as prepare → calibrate →
//    convert in memory (residual example; qnnpack's HistogramObservers and fbgemm's
//    reduced-range histograms with per-channel weights; a MinMax mapping);
//  - every observer kind comes back from its module with its spec and statistics: after
//    the same further updates, restored and original compute the same parameters;
//  - malformed or missing state is an InvalidArgument / FailedPrecondition naming it.
#include "quantize/prepared_model.h"

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend_configs/builtin_configs.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "patterns/fuse.h"
#include "quantize/calibrate.h"
#include "quantize/convert.h"
#include "quantize/observer_module.h"
#include "quantize/observers.h"
#include "quantize/prepare.h"
#include "quantize/qconfig.h"
#include "runtime/builtin_kernels.h"
#include "tools/examples.h"

namespace fuselage {
namespace {

Tensor RandomTensor(std::vector<int64_t> shape, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  Tensor t = *Tensor::Zeros(DType::kFloat32, shape);
  for (int64_t k = 0; k < t.numel(); ++k) t.mutable_data<float>()[k] = uniform(rng);
  return t;
}

std::vector<CalibrationSample> Samples(int count, uint32_t seed) {
  std::vector<CalibrationSample> samples;
  for (int i = 0; i < count; ++i) {
    samples.push_back({RandomTensor({1, 4, 8, 8}, seed + i, 1.5f + i)});
  }
  return samples;
}

std::unique_ptr<KernelRegistry> Kernels() {
  auto kernels = BuiltinKernels();
  EXPECT_TRUE(kernels.ok());
  EXPECT_TRUE(RegisterObserverKernels(**kernels).ok());
  return std::move(*kernels);
}

std::unique_ptr<GraphModule> FusedResidual(const BackendConfig& config) {
  auto gm = BuildResidualExample(kResidualExampleSeed);
  EXPECT_TRUE(gm.ok());
  auto matcher = BuildFusionMatcher(config);
  EXPECT_TRUE(matcher.ok());
  EXPECT_TRUE(FusePatterns(**gm, *matcher).ok());
  return std::move(*gm);
}

// Saves and loads through the binary model format.
std::unique_ptr<GraphModule> RoundTrip(const GraphModule& gm) {
  auto loaded = ParseModel(SerializeModel(gm));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return std::move(*loaded);
}

struct FlowCase {
  const char* backend;
  bool minmax;  // MinMax activations instead of the backend's default qconfig mapping
};

class PreparedModelFileTest : public ::testing::TestWithParam<FlowCase> {};

TEST_P(PreparedModelFileTest, FileFlowEqualsInMemoryFlow) {
  const FlowCase c = GetParam();
  const BackendConfig config = *GetBackendConfig(c.backend);
  QConfigMapping mapping = *DefaultQConfigMapping(c.backend);
  if (c.minmax) {
    ObserverSpec activation;
    activation.kind = ObserverKind::kMinMax;
    mapping = QConfigMapping();
    mapping.SetGlobal(QConfig{activation, DefaultPerChannelWeightObserver()});
  }
  const auto samples = Samples(3, 7);
  const auto kernels = Kernels();

  // In memory.
  auto memory = FusedResidual(config);
  auto prepared = Prepare(*memory, mapping, config);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_FALSE(prepared->quantized_ops.empty());
  ASSERT_TRUE(Calibrate(*memory, *prepared, samples, *kernels).ok());
  ASSERT_TRUE(ConvertToReference(*memory, *prepared).ok());
  ASSERT_TRUE(memory->Verify().ok());

  // Through files: each stage starts from a freshly loaded model.
  auto gm = FusedResidual(config);
  auto first = Prepare(*gm, mapping, config);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(StorePreparedModel(*first, *gm).ok());
  ASSERT_TRUE(gm->Verify().ok());
  auto loaded = RoundTrip(*gm);
  auto read = PreparedModelFromGraph(*loaded);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->observers.size(), first->observers.size());
  EXPECT_EQ(read->observer_container, first->observer_container);
  // The weighted ops' plans come back, with the weight observer's spec.
  for (const auto& [node, plan] : first->quantized_ops) {
    if (plan.root_module.empty()) continue;
    ASSERT_TRUE(read->quantized_ops.contains(node)) << node;
    EXPECT_EQ(read->quantized_ops.at(node).root_module, plan.root_module);
    EXPECT_EQ(read->quantized_ops.at(node).reference_module, plan.reference_module);
    ASSERT_NE(read->quantized_ops.at(node).weight_observer, nullptr) << node;
    EXPECT_EQ(*read->quantized_ops.at(node).weight_observer, *plan.weight_observer) << node;
  }
  ASSERT_TRUE(Calibrate(*loaded, *read, samples, *kernels).ok());
  ASSERT_TRUE(StorePreparedModel(*read, *loaded).ok());
  auto calibrated = RoundTrip(*loaded);
  auto read_again = PreparedModelFromGraph(*calibrated);
  ASSERT_TRUE(read_again.ok()) << read_again.status();
  ASSERT_TRUE(ConvertToReference(*calibrated, *read_again).ok());
  ASSERT_TRUE(calibrated->Verify().ok());

  EXPECT_EQ(SerializeModelText(*calibrated), SerializeModelText(*memory));
  // Convert removed the observer container with the plan modules in it.
  EXPECT_EQ(calibrated->FindModule(first->observer_container), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Backends, PreparedModelFileTest,
                         ::testing::Values(FlowCase{"qnnpack", false},
                                           FlowCase{"fbgemm", false},
                                           FlowCase{"qnnpack", true}),
                         [](const auto& info) {
                           return std::string(info.param.backend) +
                                  (info.param.minmax ? "_minmax" : "");
                         });

ObserverSpec Spec(ObserverKind kind, DType dtype, ObserverQScheme qscheme) {
  ObserverSpec spec;
  spec.kind = kind;
  spec.dtype = dtype;
  spec.qscheme = qscheme;
  return spec;
}

class ObserverModuleTest : public ::testing::TestWithParam<ObserverSpec> {};

TEST_P(ObserverModuleTest, RestoredObserverContinuesLikeTheOriginal) {
  const ObserverSpec spec = GetParam();
  auto original = MakeObserver(spec);
  ASSERT_TRUE(original.ok()) << original.status();
  ASSERT_TRUE((*original)->Update(RandomTensor({2, 3, 4, 4}, 1, 2.0f)).ok());

  auto module = MakeObserverModule(spec);
  ASSERT_TRUE(module.ok());
  StoreObserverState(**original, **module);
  auto spec_back = ObserverSpecFromModule(**module);
  ASSERT_TRUE(spec_back.ok()) << spec_back.status();
  EXPECT_EQ(*spec_back, spec);
  auto restored = ObserverFromModule(**module);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->min_val(), (*original)->min_val());
  EXPECT_EQ((*restored)->max_val(), (*original)->max_val());

  // The same further data into both (a wider range, so the histogram is recombined).
  const Tensor more = RandomTensor({2, 3, 4, 4}, 2, 5.0f);
  ASSERT_TRUE((*original)->Update(more).ok());
  ASSERT_TRUE((*restored)->Update(more).ok());
  auto want = (*original)->CalculateQParams();
  auto got = (*restored)->CalculateQParams();
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(got->scales, want->scales);
  EXPECT_EQ(got->zero_points, want->zero_points);
}

TEST_P(ObserverModuleTest, FreshModuleGivesAFreshObserver) {
  const ObserverSpec spec = GetParam();
  auto module = MakeObserverModule(spec);
  ASSERT_TRUE(module.ok());
  auto restored = ObserverFromModule(**module);
  ASSERT_TRUE(restored.ok()) << restored.status();
  auto fresh = MakeObserver(spec);
  const Tensor x = RandomTensor({2, 3, 4, 4}, 3, 1.0f);
  ASSERT_TRUE((*restored)->Update(x).ok());
  ASSERT_TRUE((*fresh)->Update(x).ok());
  EXPECT_EQ((*restored)->CalculateQParams()->scales, (*fresh)->CalculateQParams()->scales);
  EXPECT_EQ((*restored)->CalculateQParams()->zero_points,
            (*fresh)->CalculateQParams()->zero_points);
}

ObserverSpec MovingAverage() {
  ObserverSpec s = Spec(ObserverKind::kMovingAverageMinMax, DType::kQUInt8,
                        ObserverQScheme::kPerTensorAffine);
  s.averaging_constant = 0.25;
  return s;
}
ObserverSpec ReducedHistogram() {
  ObserverSpec s =
      Spec(ObserverKind::kHistogram, DType::kQUInt8, ObserverQScheme::kPerTensorAffine);
  s.reduce_range = true;
  s.bins = 256;
  s.upsample_rate = 16;
  return s;
}
ObserverSpec PerChannelAxis1() {
  ObserverSpec s = DefaultPerChannelWeightObserver();
  s.ch_axis = 1;
  return s;
}
ObserverSpec CustomRange() {
  ObserverSpec s = Spec(ObserverKind::kMinMax, DType::kQUInt8, ObserverQScheme::kPerTensorSymmetric);
  s.quant_min = 0;
  s.quant_max = 127;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, ObserverModuleTest,
    ::testing::Values(
        Spec(ObserverKind::kMinMax, DType::kQUInt8, ObserverQScheme::kPerTensorAffine),
        DefaultWeightObserver(), MovingAverage(),
        Spec(ObserverKind::kHistogram, DType::kQUInt8, ObserverQScheme::kPerTensorAffine),
        ReducedHistogram(), DefaultPerChannelWeightObserver(), PerChannelAxis1(),
        CustomRange()));

TEST(ObserverModuleErrors, QuantRangeThatContradictsDtypeNamesTheAttributes) {
  auto module = MakeObserverModule(
      Spec(ObserverKind::kMinMax, DType::kQUInt8, ObserverQScheme::kPerTensorAffine));
  ASSERT_TRUE(module.ok());
  (*module)->SetAttribute("quant_max", Argument::Int(127));
  auto spec = ObserverSpecFromModule(**module);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("quant_min/quant_max [0, 127]"), std::string::npos)
      << spec.status();
  EXPECT_NE(spec.status().message().find("has_customized_qrange"), std::string::npos);
}

TEST(ObserverModuleErrors, MissingAttributeAndTensorAreNamed) {
  auto module = MakeObserverModule(
      Spec(ObserverKind::kHistogram, DType::kQUInt8, ObserverQScheme::kPerTensorAffine));
  ASSERT_TRUE(module.ok());
  auto no_bins = (*module)->Clone();
  no_bins->RemoveAttribute("bins");
  auto spec = ObserverSpecFromModule(*no_bins);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("attribute 'bins' is missing"), std::string::npos)
      << spec.status();

  auto no_max = (*module)->Clone();
  no_max->RemoveTensor("max_val");
  auto observer = ObserverFromModule(*no_max);
  EXPECT_EQ(observer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(observer.status().message().find("tensor 'max_val' is missing"), std::string::npos)
      << observer.status();

  // An observed range without its histogram cannot be continued.
  auto no_histogram = (*module)->Clone();
  no_histogram->SetTensor("min_val", Tensor::FromFloats({}, {-1.0f}));
  no_histogram->SetTensor("max_val", Tensor::FromFloats({}, {1.0f}));
  observer = ObserverFromModule(*no_histogram);
  EXPECT_EQ(observer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(observer.status().message().find("no histogram"), std::string::npos)
      << observer.status();
}

TEST(ObserverSetState, WrongSizesFailAndLeaveTheObserverUnchanged) {
  auto observer = MakeObserver(
      Spec(ObserverKind::kMinMax, DType::kQUInt8, ObserverQScheme::kPerTensorAffine));
  ASSERT_TRUE((*observer)->SetState({-1.0f}, {3.0f}, {}).ok());
  const absl::Status st = (*observer)->SetState({-2.0f, 0.0f}, {1.0f, 2.0f}, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*observer)->min_val(), std::vector<float>{-1.0f});
  EXPECT_EQ((*observer)->max_val(), std::vector<float>{3.0f});
  // A histogram for an observer that keeps none.
  EXPECT_EQ((*observer)->SetState({-1.0f}, {1.0f}, {1.0f, 2.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  // Hand-computed: affine quint8 over [-1, 3]: scale 4 / 255, zero point round(255 / 4).
  auto qparams = (*observer)->CalculateQParams();
  ASSERT_TRUE(qparams.ok());
  EXPECT_FLOAT_EQ(qparams->scales[0], 4.0f / 255.0f);
  EXPECT_EQ(qparams->zero_points[0], 64);
}

TEST(PreparedModelFromGraph, AModelWithoutObserversIsNotPrepared) {
  auto gm = BuildResidualExample(kResidualExampleSeed);
  ASSERT_TRUE(gm.ok());
  auto read = PreparedModelFromGraph(**gm);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(read.status().message().find("not a prepared model"), std::string::npos);
}

TEST(PreparedModelFromGraph, MalformedPlanModuleIsNamed) {
  const BackendConfig config = *GetBackendConfig("qnnpack");
  auto gm = FusedResidual(config);
  auto prepared = Prepare(*gm, *DefaultQConfigMapping("qnnpack"), config);
  ASSERT_TRUE(prepared.ok());
  ASSERT_TRUE(StorePreparedModel(*prepared, *gm).ok());
  const std::string plan_path =
      prepared->observer_container + "." + kWeightPlanModulePrefix + "0";
  Module* plan = gm->FindModule(plan_path);
  ASSERT_NE(plan, nullptr);
  plan->SetAttribute("node", Argument::String("no_such_node"));
  auto read = PreparedModelFromGraph(*gm);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find(plan_path), std::string::npos) << read.status();
  EXPECT_NE(read.status().message().find("no_such_node"), std::string::npos);
  plan->RemoveAttribute("reference_module");
  read = PreparedModelFromGraph(*gm);
  EXPECT_NE(read.status().message().find("'reference_module' is missing"), std::string::npos)
      << read.status();
}

}  // namespace
}  // namespace fuselage
