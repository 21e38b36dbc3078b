// The pass pipeline of pass_pipeline_fuzz, as a function its seed test can also call.
//
// RunPassPipeline loads a binary model file and runs the whole quantization flow on it with
// one of the built-in backend configs and either the default qconfig mapping of its backend
// (histogram activation observers) or a global MinMax-activation mapping (cheaper, and
// what many users write):
//
//   fuse → prepare → calibrate → convert-to-reference → lower-to-native
//
// and after every pass asserts (FUZZ_CHECK: a broken property prints and aborts):
//  - success: the GraphModule passes Verify() (and, for RunConfigPipeline, saves to bytes
//    that load again);
//  - failure: a non-empty error, and the GraphModule saves to exactly the bytes it saved
//    to before the pass (a failing pass leaves the graph as it was).
// A failing pass stops the pipeline, except calibration, which is optional input: convert
// still runs after it fails or is skipped. Convert refuses an observer that saw no value
// (PyTorch would give it scale 1.0 and zero point 0 with a warning), so before convert
// every observer no sample reached sees a stand-in range, [-1, 1]; the others keep the
// values of the samples that ran.
//
// Calibration runs kCalibrationSamples seeded random inputs through the interpreter when
// every placeholder has a meta "shape" (the Python exporter writes it) of at most
// kMaxSampleElements elements; otherwise it is skipped.
#ifndef FUSELAGE_TESTS_FUZZ_PASS_PIPELINE_H_
#define FUSELAGE_TESTS_FUZZ_PASS_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "graph/graph_module.h"

namespace fuselage::fuzz {

inline constexpr int kCalibrationSamples = 2;
inline constexpr uint32_t kCalibrationSeed = 7;
// Per placeholder: enough for the seeds' [1, 4, 8, 8]-sized inputs, small enough that a
// hostile "shape" cannot make calibration the slow part of an execution.
inline constexpr int64_t kMaxSampleElements = 4096;

struct PassOutcome {
  std::string pass;  // "fuse", "prepare", "calibrate", "convert", "lower"
  absl::Status status;
};

struct PipelineResult {
  std::string config;                   // the built-in config byte 0 chose
  bool minmax_mapping = false;          // else the backend's default qconfig mapping
  absl::Status load;                    // ParseModel's (or the config loader's) verdict;
                                        // no pass runs if not OK
  std::vector<PassOutcome> passes;      // in order, up to the first failure that stops
  bool calibration_skipped = false;     // no small input shape
  std::unique_ptr<GraphModule> module;  // as the last pass left it (null if not loaded)
};

// Runs the pipeline on `model_bytes`, asserting the properties above. With n built-in
// configs, `config_choice` % n picks
// the config and (`config_choice` / n) % 2 the mapping (0: default, 1: MinMax).
PipelineResult RunPassPipeline(uint8_t config_choice, absl::string_view model_bytes);

// The same passes with a custom config (backend_configs/config_loader.h text) on a copy of
// `model`, with the MinMax mapping of the built-in config the text extends (fbgemm's for
// "native" or none). A config the loader rejects gets a non-empty InvalidArgument
// (`load`, no pass run); for one it accepts, every pass's output must Verify, save and load
// again: a config that loads never makes a model that does not.
PipelineResult RunConfigPipeline(absl::string_view config_text, const GraphModule& model);

}  // namespace fuselage::fuzz

#endif  // FUSELAGE_TESTS_FUZZ_PASS_PIPELINE_H_
