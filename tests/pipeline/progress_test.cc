// FlowProgress and QuantizeFlowJson (pipeline/progress.h), driven by a hand-set clock:
// the lines expected below are worked out from the clock values by hand.
#include "pipeline/progress.h"

#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

TEST(FlowProgressTest, StageLinesAndThrottledSampleLine) {
  double now = 0;
  std::ostringstream out;
  FlowProgress progress(&out, [&now] { return now; });
  now = 1.0;
  progress.StageDone("prepare");
  EXPECT_EQ(out.str(), "prepare: done in 1.00 s\n");
  out.str("");

  now = 1.5;  // 1 sample in 0.5 s: 2 samples/s, 3 left -> 1.5 s
  progress.SampleDone(1, 4);
  now = 1.6;  // within 0.2 s of the last line: not printed
  progress.SampleDone(2, 4);
  now = 2.0;  // 3 in 1.0 s: 3 samples/s, 1 left -> 0.3 s
  progress.SampleDone(3, 4);
  now = 2.05;  // the last sample is always printed and ends the line: 4 / 1.05 = 3.8/s
  progress.SampleDone(4, 4);
  EXPECT_EQ(out.str(),
            "\rcalibrate: 1/4 samples, 2.0 samples/s, 1.5 s left"
            "\rcalibrate: 3/4 samples, 3.0 samples/s, 0.3 s left"
            "\rcalibrate: 4/4 samples, 3.8 samples/s, 0.0 s left\n");

  now = 2.25;
  progress.StageDone("calibrate");
  ASSERT_EQ(progress.stage_seconds().size(), 2u);
  EXPECT_EQ(progress.stage_seconds()[0].first, "prepare");
  EXPECT_DOUBLE_EQ(progress.stage_seconds()[0].second, 1.0);
  EXPECT_EQ(progress.stage_seconds()[1].first, "calibrate");
  EXPECT_DOUBLE_EQ(progress.stage_seconds()[1].second, 1.25);
}

TEST(FlowProgressTest, WithoutAStreamItTimesButPrintsNothing) {
  double now = 0;
  FlowProgress progress(nullptr, [&now] { return now; });
  now = 0.25;
  progress.SampleDone(1, 1);
  progress.StageDone("fuse");
  ASSERT_EQ(progress.stage_seconds().size(), 1u);
  EXPECT_DOUBLE_EQ(progress.stage_seconds()[0].second, 0.25);
}

TEST(FlowProgressTest, AttachKeepsTheCallerOnStageAndItsError) {
  double now = 0;
  std::ostringstream out;
  FlowProgress progress(&out, [&now] { return now; });
  QuantizeFlowOptions options;
  int seen = 0;
  options.on_stage = [&seen](absl::string_view stage, const GraphModule&) -> absl::Status {
    ++seen;
    if (stage == "convert") return absl::CancelledError("stop here");
    return absl::OkStatus();
  };
  progress.Attach(options);
  GraphModule gm;
  EXPECT_TRUE(options.on_stage("fuse", gm).ok());
  EXPECT_EQ(options.on_stage("convert", gm).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(seen, 2);
  // The failed stage is not recorded as done.
  ASSERT_EQ(progress.stage_seconds().size(), 1u);
  ASSERT_TRUE(options.on_sample);
  options.on_sample(1, 1);
  EXPECT_EQ(out.str(), "fuse: done in 0.00 s\n\rcalibrate: 1/1 samples, 1000000000.0 samples/s, 0.0 s left\n");
}

TEST(QuantizeFlowJsonTest, EveryStageWithItsCountsAndEscapedStrings) {
  QuantizeFlowReport report;
  report.fused = 2;
  report.prepare.quantized_ops = 3;
  report.prepare.observer_nodes = 4;
  report.prepare.observer_modules = 5;
  report.prepare.kept_float.push_back({"sig\"1", "torch.sigmoid", "no entry\n"});
  report.calibration.samples = 8;
  report.calibration.unobserved = {"obs_3"};
  report.convert.observers_replaced = 4;
  report.convert.reference_modules = 1;
  report.lowering.lowered_per_rule = {{"conv", 1}, {"add", 2}};
  report.lowering.unlowered.push_back({"mean", "torch.mean", "dims"});
  report.lowering.quantizes_dropped_after_pass_through.push_back(
      {"pool", "torch.nn.functional.max_pool2d", {0.05, 128, DType::kQUInt8},
       {0.1, 0, DType::kQUInt8}});
  report.lowering.shape_reads_of_dequantize_moved = 3;
  report.lowering.dequantize_quantize_pairs_removed = 6;
  report.lowering.constants_quantized = 2;
  report.lowering.folded_tensors_removed = 5;
  report.lowering.dead_nodes_removed = 7;
  const std::string json = QuantizeFlowJson(
      report, {{"fuse", 0.5}, {"prepare", 0.25}, {"calibrate", 1}, {"convert", 0}, {"lower", 2}});
  EXPECT_EQ(json,
            "{\"stages\": ["
            "{\"name\": \"fuse\", \"seconds\": 0.500000, \"fused\": 2}, "
            "{\"name\": \"prepare\", \"seconds\": 0.250000, \"quantized_ops\": 3, "
            "\"observer_nodes\": 4, \"observer_modules\": 5, \"kept_float\": [{\"node\": "
            "\"sig\\\"1\", \"op\": \"torch.sigmoid\", \"reason\": \"no entry\\u000a\"}]}, "
            "{\"name\": \"calibrate\", \"seconds\": 1.000000, \"samples\": 8, "
            "\"unobserved\": [\"obs_3\"]}, "
            "{\"name\": \"convert\", \"seconds\": 0.000000, \"observers_replaced\": 4, "
            "\"reference_modules\": 1}, "
            "{\"name\": \"lower\", \"seconds\": 2.000000, \"lowered_per_rule\": {\"add\": 2, "
            "\"conv\": 1}, \"unlowered\": [{\"node\": \"mean\", \"target\": \"torch.mean\", "
            "\"reason\": \"dims\"}], \"quantizes_dropped_after_pass_through\": [{\"node\": "
            "\"pool\", \"target\": \"torch.nn.functional.max_pool2d\", \"kept\": "
            "{\"scale\": 0.05, \"zero_point\": 128, \"dtype\": "
            "\"torch.quint8\"}, \"dropped\": {\"scale\": 0.1, "
            "\"zero_point\": 0, \"dtype\": \"torch.quint8\"}}], "
            "\"shape_reads_of_dequantize_moved\": 3, \"dequantize_quantize_pairs_removed\": 6, "
            "\"constants_quantized\": 2, \"folded_tensors_removed\": 5, "
            "\"dead_nodes_removed\": 7}"
            "]}\n");
}

}  // namespace
}  // namespace fuselage
