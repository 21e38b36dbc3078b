// The pipeline's stages one at a time, as both front doors run them: the CLI's stage
// commands (tools/cmd_*.cc) and the Python extension (python/core/). Each function is one
// pass over a GraphModule plus what a front door needs around it: which backend config a
// name or a config text means, the reports with the text the CLI prints, and a prepared
// model's state kept in its modules (quantize/prepared_model.h) so that prepare, calibrate
// and convert may be separate calls, as in PyTorch (prepare_fx, run, convert_fx).
//
//   ASSIGN_OR_RETURN(BackendConfig config, ResolveBackendConfig("qnnpack", std::nullopt, ""));
//   ASSIGN_OR_RETURN(FuseReport fused, FuseModel(gm, config));
//   ASSIGN_OR_RETURN(QConfigMapping mapping, DefaultQConfigMapping("qnnpack"));
//   ASSIGN_OR_RETURN(PrepareReport prepared, PrepareModel(gm, mapping, config));
//   ASSIGN_OR_RETURN(CalibrationReport calibrated, CalibrateModel(gm, samples));
//   ASSIGN_OR_RETURN(ConvertReport converted, ConvertModel(gm));
//   ASSIGN_OR_RETURN(LoweringReport lowered, LowerModel(gm));
//
// The whole flow in one call is RunQuantizeFlow (pipeline/quantize_flow.h); it keeps the
// prepared state in memory instead, and gives the same model.
#ifndef FUSELAGE_PIPELINE_STAGES_H_
#define FUSELAGE_PIPELINE_STAGES_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backend_configs/backend_config.h"
#include "graph/graph_module.h"
#include "lowering/lower_to_native.h"
#include "patterns/fuse.h"
#include "patterns/matcher.h"
#include "quantize/calibrate.h"
#include "quantize/convert.h"
#include "quantize/prepare.h"
#include "quantize/prepared_model.h"
#include "quantize/qconfig.h"
#include "runtime/quantized_engine.h"

namespace fuselage {

// The backend config named by a built-in `backend` name (native, fbgemm, qnnpack, x86,
// onednn) and/or a backend config textproto `config_text` (absent: none; an empty text
// is a config text, which the loader judges) (backend_configs/config_loader.h;
// `config_source` names it in errors, e.g. its file name). With a text, the text's config
// is used and `backend`, if not empty, must be the built-in base the text extends, so the
// two never silently disagree; a text with no base (only its own entries, e.g.
// backend_configs/examples/conv_add_relu_new_type.textproto) goes with any `backend`, which
// then names only the default qconfig mapping. InvalidArgument if both are empty or they
// disagree;
// NotFound for an unknown name; the loader's error for a text that does not parse.
absl::StatusOr<BackendConfig> ResolveBackendConfig(
    absl::string_view backend, const std::optional<absl::string_view>& config_text,
    absl::string_view config_source);

// Loads the backend config file at `path` for what it declares (fused_module_type,
// lowering_rule; backend_configs/declared_types.h), for a front door about to read a model
// that may hold a declared type: such a model runs anywhere (its modules carry their
// steps); the config lets the front door check them against their declaration
// (CheckDeclaredModules). The whole file is checked as ResolveBackendConfig checks it.
// `source` names the config in errors, e.g. the path as the user typed it. The reader's
// error (naming the path) or the loader's (naming `source`, entry, field).
//
//   ASSIGN_OR_RETURN(BackendConfig config, LoadDeclaringConfig("configs/new_type.textproto",
//                                                              "configs/new_type.textproto"));
//   RETURN_IF_ERROR(CheckDeclaredModules(gm, config.declarations().get()));
absl::StatusOr<BackendConfig> LoadDeclaringConfig(const std::string& path,
                                                  absl::string_view source);

// The backend whose default qconfig mapping (DefaultQConfigMapping) goes with the same
// arguments: `backend` if given, else the built-in base `config_text` extends.
// InvalidArgument if there is neither.
absl::StatusOr<std::string> DefaultMappingBackend(
    absl::string_view backend, const std::optional<absl::string_view>& config_text,
    absl::string_view config_source);

// What one fusion pass did.
struct FuseReport {
  std::string backend;  // the config's name
  int fused = 0;
  // Matches per pattern with at least one, in the config's order.
  std::vector<std::pair<std::string, int>> per_pattern;
  size_t nodes_before = 0;
  size_t nodes_after = 0;
  // Filled only with FuseOptions::report_overlaps (FindMatchOverlaps, patterns/fuse.h).
  std::vector<MatchOverlap> overlaps;
  // "fused 2 matches (conv_bn_relu: 1, conv_bn_add_relu: 1) with backend qnnpack: 14 -> 9
  // nodes", the line `fuselage fuse` prints before "; wrote OUT".
  std::string Summary() const;
  // One line per overlap, each after a newline: "\n  overlap: conv_bn_relu at relu took
  // bn, relu from bn_relu at relu"; "" without overlaps.
  std::string OverlapLines() const;
  // Summary() followed by OverlapLines().
  std::string ToString() const;
};

// The matches per pattern of `matches`, for the rules of `matcher` with at least one.
std::vector<std::pair<std::string, int>> MatchesPerPattern(
    const PatternMatcher& matcher, const std::vector<PatternMatch>& matches);

// Fuses every match of `config`'s fusion patterns (FusePatterns) and verifies the result.
// On an error the graph is unchanged.
// `options.report_overlaps` also fills FuseReport::overlaps (one more scan per pattern).
absl::StatusOr<FuseReport> FuseModel(GraphModule& gm, const BackendConfig& config,
                                     const FuseOptions& options = {});

// FuseModel after its first two steps, for a front door that takes them itself to time or
// profile them (`fuselage fuse --time --profile`): `matcher` is BuildFusionMatcher(config)
// and `matches` its read-only scan of `gm` (matcher.FindMatches(gm)), which give the
// counts per pattern. Fuses and fills the report; it does not verify the result (the
// caller does, e.g. before it saves). On an error the graph is unchanged.
absl::StatusOr<FuseReport> FuseScannedModel(GraphModule& gm, const BackendConfig& config,
                                            const PatternMatcher& matcher,
                                            const std::vector<PatternMatch>& matches,
                                            const FuseOptions& options = {});

// Why each fusion pattern did or did not match, node by node (PatternMatcher::Explain);
// the graph is only read.
struct ExplainResult {
  std::string backend;
  size_t nodes = 0;
  ExplainReport report;
  // What `fuselage explain` prints: "backend B, N nodes, K partial matches:", then the report.
  std::string ToString() const;
};
absl::StatusOr<ExplainResult> ExplainModel(const GraphModule& gm, const BackendConfig& config);

// Prepare (quantize/prepare.h), then the observers and plans stored into the modules
// (StorePreparedModel), so `gm` is a complete prepared model: it saves, and CalibrateModel
// and ConvertModel read it back. It also records the engine the model is to run on
// (RecordEngine, runtime/quantized_engine.h): `engine` if given (the CLI's --engine), else
// the config's (EngineForBackend of its built_in_base, else its name). On an error from Prepare the graph is
// unchanged.
absl::StatusOr<PrepareReport> PrepareModel(GraphModule& gm, const QConfigMapping& mapping,
                                           const BackendConfig& config,
                                           std::optional<QuantizedEngine> engine = std::nullopt);

// Prepare with the engine record of PrepareModel, the prepared state kept in memory
// instead of stored into the modules: the step PrepareModel, RunQuantizeFlow and
// `fuselage prepare` (which stores it as a step of its own) share. It does not verify
// the result. On an error the graph is unchanged.
absl::StatusOr<PreparedModel> PrepareInMemory(GraphModule& gm, const QConfigMapping& mapping,
                                              const BackendConfig& config,
                                              std::optional<QuantizedEngine> engine);

// Calibrate with the built-in and observer kernels, then, if `engine` is given, its
// record (RecordEngine), on a prepared state in memory: the step CalibrateModel,
// RunQuantizeFlow and `fuselage calibrate` share. `on_sample` as Calibrate's. It does not
// verify the result.
absl::StatusOr<CalibrationReport> CalibrateInMemory(GraphModule& gm, PreparedModel& prepared,
                                                    const CalibrationSamples& samples,
                                                    int threads,
                                                    std::optional<QuantizedEngine> engine,
                                                    const CalibrationProgress& on_sample = {});

// Calibrates a prepared model (PreparedModelFromGraph, Calibrate with the built-in and
// observer kernels, `threads` as RunOptions::threads) and stores the statistics back;
// calibrating again adds to them. `engine`, if given (the CLI's --engine), replaces the
// engine recorded at prepare (calibration itself runs float and does not use it).
// FailedPrecondition if `gm` is not a prepared model.
absl::StatusOr<CalibrationReport> CalibrateModel(GraphModule& gm, const CalibrationSamples& samples,
                                                 int threads = 0,
                                                 std::optional<QuantizedEngine> engine = std::nullopt);

// ConvertToReference of a prepared, calibrated model read back from its modules.
// FailedPrecondition if `gm` is not a prepared model.
absl::StatusOr<ConvertReport> ConvertModel(GraphModule& gm, const ConvertOptions& options = {});

// LowerToNative with fuselage's native lowering rules (RegisterNativeLoweringRules, with
// `options`) and, given a config, the lowering rules it declares, after checking the
// model's modules of the types it declares against their declaration
// (CheckDeclaredModules).
absl::StatusOr<LoweringReport> LowerModel(GraphModule& gm, const BackendConfig* config = nullptr,
                                          const NativeLoweringOptions& options = {});

// OK if `gm` passes Verify after the pass named `stage`; else Internal: a graph a pass
// left failing Verify is a fuselage bug, not bad input. Every stage function above ends
// with it (the *InMemory and FuseScannedModel steps leave it to their caller).
absl::Status VerifyAfterStage(absl::string_view stage, const GraphModule& gm);

// True if a lowering changed nothing: no reference pattern, no pair or tuple access
// removed, no float16 cast (the model was not a reference quantized model). Front doors
// refuse that instead of handing back the input as if it had been lowered.
bool LoweredNothing(const LoweringReport& report);

}  // namespace fuselage

#endif  // FUSELAGE_PIPELINE_STAGES_H_
