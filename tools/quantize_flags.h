// Command-line pieces the quantization subcommands (quantize, prepare, calibrate,
// convert, lower) share: the required --backend flag, --qconfig-mapping, the
// calibration-sample flags, and
// the `--time` lines bench/compare_pytorch.py reads (-o is StageRun's, tools/stage_run.h).
#ifndef FUSELAGE_TOOLS_QUANTIZE_FLAGS_H_
#define FUSELAGE_TOOLS_QUANTIZE_FLAGS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph_module.h"
#include "quantize/calibrate.h"
#include "quantize/qconfig.h"
#include "tools/command.h"

namespace fuselage {

// --backend's value, or a UsageError saying `command` needs it (it chooses the default
// qconfig mapping).
absl::StatusOr<std::string> RequiredBackend(const ParsedArgs& parsed, absl::string_view command);

// --qconfig-mapping=FILE (prepare, quantize).
FlagSpec QConfigMappingFlagSpec();

// The mapping of the --qconfig-mapping file (quantize/qconfig_mapping_loader.h; the path
// resolved against the context), or else PyTorch 1.13's get_default_qconfig_mapping of
// `backend`. A UsageError for an empty value; the loader's error (naming the file, the
// entry and the field) for a bad file.
absl::StatusOr<QConfigMapping> QConfigMappingFromFlags(const CommandContext& context,
                                                       const ParsedArgs& parsed,
                                                       absl::string_view backend,
                                                       absl::string_view command);

// The shapes --input-shape gives, keyed by placeholder name: DIMS (e.g. 1,3,8,8) gives
// every placeholder that shape; NAME:DIMS;NAME:DIMS (e.g. x:1,3,8,8;y:1,4) one per named
// input, the others keeping their meta "shape". UsageError for a malformed dimension, an
// unknown or repeated name.
absl::StatusOr<absl::flat_hash_map<std::string, std::vector<int64_t>>> ParseInputShapes(
    absl::string_view value, const GraphModule& gm);

// The flag specs of SamplesFromFlags: --calibration, --samples, --seed, --input-shape.
std::vector<FlagSpec> CalibrationFlagSpecs();

// Calibration samples from the parsed flags, made one at a time as calibration runs them:
// the comma-separated .npy files of --calibration, or else --samples (default 8, at most
// kMaxCalibrationSamples) inputs seeded by --seed (0 to 2^32 - 1), shaped by the
// placeholders' meta "shape" or --input-shape. UsageError naming the flag, its value and
// the accepted range for a malformed or out-of-range value.
absl::StatusOr<CalibrationSamples> SamplesFromFlags(const CommandContext& context,
                                                    const ParsedArgs& parsed,
                                                    const GraphModule& gm);

// Wall-clock milliseconds of a command's steps, printed with --time as one line per
// step, `time <step> <ms> ms` (the format `fuse --time` prints).
class StageTimes {
 public:
  // Starts timing the next step.
  void Start() { start_ = std::chrono::steady_clock::now(); }
  // Ends the step begun by the last Start() and records it as `step`.
  void Stop(absl::string_view step);
  std::string ToString() const;

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, double>> times_;
};

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_QUANTIZE_FLAGS_H_
