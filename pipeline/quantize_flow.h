// The whole quantization flow on one GraphModule, as the `quantize` and `demo`
// subcommands, the end-to-end tests and the benchmark run it:
//
//   fuse (patterns/) → prepare → calibrate → convert-to-reference (quantize/)
//                    → lower-to-native (lowering/)
//
// It is the pipeline library (pipeline/), which both front doors call: the CLI (tools/)
// and the Python extension (python/core/). It spans quantize/ and lowering/, and lowering
// depends on quantize, not the other way round. Each stage verifies the graph before the next one
// runs; `on_stage` (optional) sees the graph after each stage, e.g. to print it or to keep
// a copy of the reference graph.
#ifndef FUSELAGE_PIPELINE_QUANTIZE_FLOW_H_
#define FUSELAGE_PIPELINE_QUANTIZE_FLOW_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backend_configs/backend_config.h"
#include "graph/graph_module.h"
#include "lowering/lower_to_native.h"
#include "quantize/calibrate.h"
#include "quantize/convert.h"
#include "quantize/prepare.h"
#include "quantize/qconfig.h"
#include "runtime/quantized_engine.h"

namespace fuselage {

// The stages, in order, as `on_stage` names them.
inline constexpr absl::string_view kQuantizeFlowStages[] = {
    "fuse", "prepare", "calibrate", "convert", "lower"};

struct QuantizeFlowOptions {
  // Called after each stage with its name and the graph as it is then. An error stops
  // the flow and is returned.
  std::function<absl::Status(absl::string_view stage, const GraphModule& gm)> on_stage;
  // Stop after convert-to-reference (the `lower` subcommand does the rest).
  bool stop_at_reference = false;
  // Calibration's thread count (Calibrate's `threads`; 0: OpenMP's default).
  int threads = 0;
  // Called after each calibration sample (Calibrate's `on_sample`; FlowProgress,
  // pipeline/progress.h, prints it).
  CalibrationProgress on_sample;
  // The engine recorded in the model for its runs (RecordEngine, runtime/
  // quantized_engine.h): absent, the backend config's (EngineForBackend of its
  // built_in_base, else its name: qnnpack -> QNNPACK's arithmetic, every other config ->
  // onednn's). The CLI's --engine.
  std::optional<QuantizedEngine> engine;
};

struct QuantizeFlowReport {
  int fused = 0;
  PrepareReport prepare;
  CalibrationReport calibration;
  ConvertReport convert;
  LoweringReport lowering;
  std::string ToString() const;
};

// Runs the flow on `gm` in place, calibrating with the built-in kernels (BuiltinKernels)
// plus the observer kernels. The first failing stage's error is returned; each pass
// leaves the graph as it was when it fails, but earlier stages have run.
absl::StatusOr<QuantizeFlowReport> RunQuantizeFlow(
    GraphModule& gm, const BackendConfig& backend_config,
    const QConfigMapping& qconfig_mapping, const CalibrationSamples& samples,
    const QuantizeFlowOptions& options = {});

}  // namespace fuselage

#endif  // FUSELAGE_PIPELINE_QUANTIZE_FLOW_H_
