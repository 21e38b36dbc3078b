// Calibration running several samples at once (Calibrate with threads > 1 and only range
// observers): the statistics, errors and progress must be those of running the samples
// one after another. Expectations come from the one-at-a-time calibration (threads = 1)
// and, for the input's observer, from the samples themselves.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_configs/builtin_configs.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "quantize/calibrate.h"
#include "quantize/observers.h"
#include "quantize/prepare.h"
#include "runtime/builtin_kernels.h"
#include "tests/patterns/test_models.h"

namespace fuselage {
namespace {

// x [1, 3, 8, 8] → conv1 → relu → conv2 (+ conv1's output) → output.
std::unique_ptr<GraphModule> BuildModel() {
  auto gm = std::make_unique<GraphModule>();
  std::mt19937 rng(1);
  EXPECT_TRUE(gm->SetModule("conv1", testing::Conv2dModule(rng, 3, 4, 3)).ok());
  EXPECT_TRUE(gm->SetModule("conv2", testing::Conv2dModule(rng, 4, 4, 1)).ok());
  Graph& g = gm->graph();
  Node* x = *g.AddPlaceholder("x");
  Node* c1 = *g.AddCallModule("conv1", {x});
  Node* r = *g.AddCallFunction("torch.relu", {c1});
  Node* c2 = *g.AddCallModule("conv2", {r});
  Node* sum = *g.AddCallFunction("operator.add", {c2, c1});
  EXPECT_TRUE(g.SetOutput(sum).ok());
  EXPECT_TRUE(gm->Verify().ok()) << gm->Verify();
  return gm;
}

QConfigMapping MappingWith(const ObserverSpec& activation) {
  QConfigMapping mapping;
  mapping.SetGlobal(QConfig{activation, DefaultWeightObserver()});
  return mapping;
}

ObserverSpec Activation(ObserverKind kind) {
  ObserverSpec spec;
  spec.kind = kind;
  spec.dtype = DType::kQUInt8;
  spec.averaging_constant = 0.3;  // moving averages: folding order shows in the result
  spec.bins = 64;
  return spec;
}

// `count` samples of shape [1, 3, 8, 8], each with its own range (so the order of the
// moving averages' folds matters).
std::vector<CalibrationSample> Samples(int count) {
  std::mt19937 engine(7);
  std::vector<CalibrationSample> samples;
  for (int i = 0; i < count; ++i) {
    std::uniform_real_distribution<float> uniform(-1.0f - i, 1.0f + 0.5f * i);
    std::vector<float> v(3 * 8 * 8);
    for (float& x : v) x = uniform(engine);
    samples.push_back({Tensor::FromFloats({1, 3, 8, 8}, v)});
  }
  return samples;
}

struct Calibrated {
  std::unique_ptr<GraphModule> gm;
  PreparedModel prepared;
  absl::StatusOr<CalibrationReport> report;
  std::vector<int64_t> progress;        // `done` of each on_sample call
  bool progress_on_calling_thread = true;
};

// `per_channel`, if given, replaces every observer Prepare made (a range observer per
// channel, whose fold can fail: a channel count that differs from earlier samples').
Calibrated CalibrateWith(const ObserverSpec& activation, const CalibrationSamples& samples,
                         int threads, const ObserverSpec* per_channel = nullptr) {
  Calibrated c;
  c.gm = BuildModel();
  auto prepared = Prepare(*c.gm, MappingWith(activation), *GetBackendConfig("qnnpack"));
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  c.prepared = std::move(*prepared);
  if (per_channel != nullptr) {
    for (auto& [path, observer] : c.prepared.observers) observer = *MakeObserver(*per_channel);
  }
  auto kernels = *BuiltinKernels();
  EXPECT_TRUE(RegisterObserverKernels(*kernels).ok());
  const std::thread::id caller = std::this_thread::get_id();
  c.report = Calibrate(*c.gm, c.prepared, samples, *kernels, threads,
                        [&c, caller](int64_t done, int64_t) {
                          c.progress.push_back(done);
                          if (std::this_thread::get_id() != caller) {
                            c.progress_on_calling_thread = false;
                          }
                        });
  return c;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Every observer's statistics and qparams, bit for bit, for each range observer kind, and
// the histogram (which runs one sample at a time whatever the thread count).
TEST(CalibrateConcurrentTest, StatisticsAreThoseOfOneSampleAtATime) {
  const std::vector<CalibrationSample> samples = Samples(13);
  for (ObserverKind kind : {ObserverKind::kMinMax, ObserverKind::kMovingAverageMinMax,
                            ObserverKind::kHistogram}) {
    const ObserverSpec spec = Activation(kind);
    Calibrated one = CalibrateWith(spec, samples, 1);
    ASSERT_TRUE(one.report.ok()) << one.report.status();
    for (int threads : {2, 3, 4, 16}) {
      Calibrated many = CalibrateWith(spec, samples, threads);
      ASSERT_TRUE(many.report.ok()) << many.report.status();
      ASSERT_EQ(many.prepared.observers.size(), one.prepared.observers.size());
      EXPECT_GE(one.prepared.observers.size(), 4u);
      for (const auto& [path, observer] : one.prepared.observers) {
        const Observer& other = *many.prepared.observers.at(path);
        const std::string where = absl::StrCat(spec.ToString(), " ", path.name(), " threads ",
                                               threads);
        EXPECT_TRUE(SameBits(observer->min_val(), other.min_val())) << where;
        EXPECT_TRUE(SameBits(observer->max_val(), other.max_val())) << where;
        auto q1 = observer->CalculateQParams();
        auto q2 = other.CalculateQParams();
        ASSERT_TRUE(q1.ok() && q2.ok()) << where;
        EXPECT_TRUE(SameBits(q1->scales, q2->scales)) << where;
        EXPECT_EQ(q1->zero_points, q2->zero_points) << where;
        // The stored statistics too (what convert and the model file read).
        EXPECT_EQ(SerializeModel(*one.gm), SerializeModel(*many.gm)) << where;
      }
      std::vector<int64_t> in_order;
      for (int64_t i = 1; i <= 13; ++i) in_order.push_back(i);
      EXPECT_EQ(many.progress, in_order) << threads;
      EXPECT_TRUE(many.progress_on_calling_thread) << threads;
    }
  }
}

// Independently of the engine: the input's MinMax observer holds the least and greatest
// value of all samples; the moving average differs from it (so the fold order is seen).
TEST(CalibrateConcurrentTest, InputRangeIsTheSamplesRange) {
  const std::vector<CalibrationSample> samples = Samples(9);
  float lo = samples[0][0].data<float>()[0], hi = lo;
  for (const CalibrationSample& s : samples) {
    for (int64_t i = 0; i < s[0].numel(); ++i) {
      lo = std::min(lo, s[0].data<float>()[i]);
      hi = std::max(hi, s[0].data<float>()[i]);
    }
  }
  Calibrated many = CalibrateWith(Activation(ObserverKind::kMinMax), samples, 3);
  ASSERT_TRUE(many.report.ok()) << many.report.status();
  const Observer& input = *many.prepared.observers.at(Symbol::Intern(
      "observers.activation_post_process_0"));
  EXPECT_EQ(input.min_val(), std::vector<float>{lo});
  EXPECT_EQ(input.max_val(), std::vector<float>{hi});
  Calibrated moving = CalibrateWith(Activation(ObserverKind::kMovingAverageMinMax), samples, 3);
  ASSERT_TRUE(moving.report.ok()) << moving.report.status();
  const Observer& averaged = *moving.prepared.observers.at(Symbol::Intern(
      "observers.activation_post_process_0"));
  EXPECT_NE(averaged.min_val(), std::vector<float>{lo});
}

// A failing sample gives the error one-at-a-time calibration gives (the first failing
// sample's), and no observer module changes.
TEST(CalibrateConcurrentTest, ErrorsAreThoseOfOneSampleAtATime) {
  std::vector<CalibrationSample> wrong_channels = Samples(8);
  wrong_channels[5] = {Tensor::FromFloats({1, 2, 1, 1}, {1.0f, 2.0f})};
  wrong_channels[6] = {*Tensor::Zeros(DType::kFloat32, {0, 3, 8, 8})};
  std::vector<CalibrationSample> wrong_count = Samples(8);
  wrong_count[3].push_back(wrong_count[3][0]);
  // A source whose making fails after 4 samples.
  const std::vector<CalibrationSample> four = Samples(4);
  const CalibrationSamples failing(
      6, [four](const CalibrationSamples::Visitor& visit) -> absl::Status {
        for (const CalibrationSample& s : four) {
          if (absl::Status st = visit(s); !st.ok()) return st;
        }
        return absl::DataLossError("sample file 4 is unreadable");
      });
  // A source that makes fewer samples than it promised.
  const CalibrationSamples short_source(
      6, [four](const CalibrationSamples::Visitor& visit) -> absl::Status {
        for (const CalibrationSample& s : four) {
          if (absl::Status st = visit(s); !st.ok()) return st;
        }
        return absl::OkStatus();
      });
  const ObserverSpec spec = Activation(ObserverKind::kMinMax);
  const CalibrationSamples channels_source(wrong_channels), count_source(wrong_count);
  for (const CalibrationSamples* samples :
       {&channels_source, &count_source, &failing, &short_source}) {
    Calibrated one = CalibrateWith(spec, *samples, 1);
    ASSERT_FALSE(one.report.ok());
    for (int threads : {2, 4}) {
      Calibrated many = CalibrateWith(spec, *samples, threads);
      ASSERT_FALSE(many.report.ok()) << threads;
      EXPECT_EQ(many.report.status(), one.report.status()) << threads;
      EXPECT_EQ(many.progress, one.progress) << threads;
      EXPECT_EQ(SerializeModel(*many.gm), SerializeModel(*one.gm)) << threads;
    }
  }
  // The one-at-a-time errors themselves (what the comparison above stands on).
  Calibrated one = CalibrateWith(spec, CalibrationSamples(wrong_count), 1);
  EXPECT_EQ(one.report.status().message(),
            "calibrate: sample 3 has 2 tensors; the model has 1 placeholders");
  EXPECT_EQ(CalibrateWith(spec, failing, 3).report.status(),
            absl::DataLossError("sample file 4 is unreadable"));
  Calibrated channels = CalibrateWith(spec, CalibrationSamples(wrong_channels), 3);
  EXPECT_NE(channels.report.status().message().find("node 'conv1'"), std::string::npos)
      << channels.report.status();
  EXPECT_EQ(channels.progress, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

// A fold's error (a channel count that changed, at the input's observer) comes before the
// error of the run it was observed in (conv1 refusing that input), as one sample at a
// time gives it, and names the observer node.
TEST(CalibrateConcurrentTest, AFoldErrorComesBeforeTheRunsLaterError) {
  ObserverSpec per_channel = Activation(ObserverKind::kPerChannelMinMax);
  per_channel.qscheme = ObserverQScheme::kPerChannelAffine;
  per_channel.ch_axis = 1;
  std::vector<CalibrationSample> samples = Samples(6);
  samples[3] = {*Tensor::Zeros(DType::kFloat32, {1, 2, 8, 8})};
  const CalibrationSamples source(samples);
  const ObserverSpec spec = Activation(ObserverKind::kMinMax);
  Calibrated one = CalibrateWith(spec, source, 1, &per_channel);
  ASSERT_FALSE(one.report.ok());
  EXPECT_EQ(one.report.status().message(),
            "node 'activation_post_process_0' (call_module "
            "observers.activation_post_process_0): PerChannelMinMaxObserver: tensor of shape "
            "[1, 2, 8, 8] has 2 channels on axis 1; earlier updates had 3");
  for (int threads : {2, 3}) {
    Calibrated many = CalibrateWith(spec, source, threads, &per_channel);
    EXPECT_EQ(many.report.status(), one.report.status()) << threads;
    EXPECT_EQ(many.progress, (std::vector<int64_t>{1, 2, 3})) << threads;
  }
}

// Observer::FoldsRanges: Update is RangeOf then FoldRange, errors included; the
// histogram observer does not fold ranges.
TEST(CalibrateConcurrentTest, UpdateIsRangeThenFold) {
  ObserverSpec per_channel = Activation(ObserverKind::kMovingAveragePerChannelMinMax);
  per_channel.qscheme = ObserverQScheme::kPerChannelAffine;
  per_channel.ch_axis = 1;
  auto updated = *MakeObserver(per_channel);
  auto folded = *MakeObserver(per_channel);
  ASSERT_TRUE(folded->FoldsRanges());
  const Tensor a = Tensor::FromFloats({1, 2, 2}, {-1.0f, 4.0f, 0.5f, 2.0f});
  const Tensor b = Tensor::FromFloats({1, 2, 2}, {3.0f, -2.0f, -0.25f, 7.0f});
  for (const Tensor* t : {&a, &b}) {
    ASSERT_TRUE(updated->Update(*t).ok());
    auto range = folded->RangeOf(*t);
    ASSERT_TRUE(range.ok()) << range.status();
    ASSERT_TRUE(folded->FoldRange(*range).ok());
  }
  EXPECT_TRUE(SameBits(updated->min_val(), folded->min_val()));
  EXPECT_TRUE(SameBits(updated->max_val(), folded->max_val()));
  // min of channel 0 after two moving-average steps: -1 + 0.3 * (-2 - -1).
  EXPECT_FLOAT_EQ(folded->min_val()[0], -1.3f);
  const Tensor three = Tensor::FromFloats({1, 3, 1}, {1.0f, 2.0f, 3.0f});
  auto range = folded->RangeOf(three);
  ASSERT_TRUE(range.ok());
  const absl::Status fold = folded->FoldRange(*range);
  EXPECT_EQ(fold, updated->Update(three));
  EXPECT_NE(fold.message().find("tensor of shape [1, 3, 1] has 3 channels on axis 1; "
                                "earlier updates had 2"),
            std::string::npos)
      << fold;
  auto histogram = *MakeObserver(Activation(ObserverKind::kHistogram));
  EXPECT_FALSE(histogram->FoldsRanges());
  EXPECT_EQ(histogram->RangeOf(a).status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace fuselage
