// FlowProgress: what a person watching a long `quantize` wants to see, and what a script
// wants to read afterwards. It times each stage of the flow (fuse, prepare, calibrate,
// convert, lower) and, given a stream, prints one line per finished stage with its wall
// time and, while calibrating, one line rewritten in place with the samples done, the rate
// and the time left. QuantizeFlowJson then writes the flow's report with those times as
// one JSON object.
//
//   FlowProgress progress(&std::cerr);        // nullptr: time the stages, print nothing
//   QuantizeFlowOptions options;
//   progress.Attach(options);                 // sets on_stage and on_sample
//   ASSIGN_OR_RETURN(QuantizeFlowReport report, RunQuantizeFlow(gm, config, mapping,
//                                                               samples, options));
//   std::cout << QuantizeFlowJson(report, progress.stage_seconds());
//
// The clock is injectable (seconds, monotonic) so tests can drive it.
#ifndef FUSELAGE_PIPELINE_PROGRESS_H_
#define FUSELAGE_PIPELINE_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "pipeline/quantize_flow.h"

namespace fuselage {

class FlowProgress {
 public:
  using Clock = std::function<double()>;

  // Seconds on std::chrono::steady_clock.
  static double SteadySeconds();

  // Prints to `out` unless it is null; the stages' time starts now.
  explicit FlowProgress(std::ostream* out, Clock clock = SteadySeconds);

  // Sets `options.on_stage` (keeping a callback already there, called first) and
  // `options.on_sample` to this object's StageDone / SampleDone.
  void Attach(QuantizeFlowOptions& options);

  // `stage` has finished: records its seconds since the previous stage ended and prints
  // "<stage>: done in 0.12 s".
  void StageDone(absl::string_view stage);

  // Calibration sample `done` of `total` has run: prints
  // "\rcalibrate: 3/16 samples, 2.5 samples/s, 5.2 s left" at most every 0.2 s, and always
  // for the last sample, which ends the line.
  void SampleDone(int64_t done, int64_t total);

  // The stages finished so far with their seconds, in order.
  const std::vector<std::pair<std::string, double>>& stage_seconds() const {
    return stage_seconds_;
  }

 private:
  std::ostream* out_;
  Clock clock_;
  double stage_start_;
  double last_sample_line_ = -1;
  std::vector<std::pair<std::string, double>> stage_seconds_;
};

// The flow's report as one JSON object: {"stages": [{"name": "fuse", "seconds": 0.01,
// "fused": 1}, {"name": "prepare", ..., "quantized_ops": 3, "kept_float": [{"node": ...,
// "op": ..., "reason": ...}]}, {"name": "calibrate", ..., "samples": 8, "unobserved": []},
// {"name": "convert", ..., "observers_replaced": 4, "reference_modules": 1}, {"name":
// "lower", ..., "lowered_per_rule": {...}, "unlowered": [...]}]}, one entry per stage in
// `stage_seconds` (so no "lower" after --reference), ending in a newline.
std::string QuantizeFlowJson(const QuantizeFlowReport& report,
                             const std::vector<std::pair<std::string, double>>& stage_seconds);

}  // namespace fuselage

#endif  // FUSELAGE_PIPELINE_PROGRESS_H_
