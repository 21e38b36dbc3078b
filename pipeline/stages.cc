#include "pipeline/stages.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backend_configs/builtin_configs.h"
#include "backend_configs/config_loader.h"
#include "backend_configs/declared_types.h"
#include "graph/status_macros.h"
#include "lowering/declared_lowering.h"
#include "lowering/lowering_rule.h"
#include "patterns/fuse.h"
#include "quantize/prepared_model.h"
#include "runtime/builtin_kernels.h"

namespace fuselage {

absl::Status VerifyAfterStage(absl::string_view stage, const GraphModule& gm) {
  absl::Status verified = gm.Verify();
  if (verified.ok()) return verified;
  return absl::InternalError(absl::StrCat("the graph after '", stage,
                                          "' fails Verify (a fuselage bug): ", verified.message()));
}

absl::StatusOr<BackendConfig> ResolveBackendConfig(
    absl::string_view backend, const std::optional<absl::string_view>& config_text,
    absl::string_view config_source) {
  if (!config_text.has_value()) {
    if (backend.empty()) {
      return absl::InvalidArgumentError(
          "no backend: name a built-in backend config or give a backend config text");
    }
    return GetBackendConfig(backend);
  }
  if (!backend.empty()) {
    // A syntax error is the loader's to report, with line and column.
    ASSIGN_OR_RETURN(const std::string base, DeclaredBackendBase(*config_text, config_source));
    // A text with no base (only its own entries) does not disagree with any backend,
    // which then names only the default qconfig mapping (DefaultMappingBackend).
    if (!base.empty() && base != backend) {
      return absl::InvalidArgumentError(absl::StrCat(config_source, " extends backend '", base,
                                                     "', not --backend=", backend));
    }
  }
  return ParseBackendConfigText(*config_text, config_source);
}

absl::StatusOr<BackendConfig> LoadDeclaringConfig(const std::string& path,
                                                  absl::string_view source) {
  ASSIGN_OR_RETURN(const std::string text, ReadBackendConfigFile(path));
  return ParseBackendConfigText(text, source);
}

absl::StatusOr<std::string> DefaultMappingBackend(
    absl::string_view backend, const std::optional<absl::string_view>& config_text,
    absl::string_view config_source) {
  if (!backend.empty()) return std::string(backend);
  if (config_text.has_value()) {
    ASSIGN_OR_RETURN(std::string base, DeclaredBackendBase(*config_text, config_source));
    if (!base.empty()) return base;
    return absl::InvalidArgumentError(
        absl::StrCat(config_source,
                     " extends no built-in backend, so it names no default qconfig "
                     "mapping: name the backend too"));
  }
  return absl::InvalidArgumentError(
      "no backend: name a built-in backend (its default qconfig mapping is used)");
}

std::string FuseReport::Summary() const {
  std::vector<std::string> parts;
  for (const auto& [name, count] : per_pattern) parts.push_back(absl::StrCat(name, ": ", count));
  std::string out = absl::StrCat("fused ", fused, fused == 1 ? " match" : " matches");
  if (!parts.empty()) absl::StrAppend(&out, " (", absl::StrJoin(parts, ", "), ")");
  absl::StrAppend(&out, " with backend ", backend, ": ", nodes_before, " -> ", nodes_after,
                  " nodes");
  return out;
}

std::string FuseReport::OverlapLines() const {
  std::string out;
  for (const MatchOverlap& overlap : overlaps) {
    absl::StrAppend(&out, "\n  overlap: ", overlap.ToString());
  }
  return out;
}

std::string FuseReport::ToString() const { return absl::StrCat(Summary(), OverlapLines()); }

std::vector<std::pair<std::string, int>> MatchesPerPattern(
    const PatternMatcher& matcher, const std::vector<PatternMatch>& matches) {
  std::vector<std::pair<std::string, int>> per_pattern;
  for (const FusionRule& rule : matcher.rules()) {
    int count = 0;
    for (const PatternMatch& m : matches) count += (m.rule == &rule);
    if (count > 0) per_pattern.emplace_back(rule.name, count);
  }
  return per_pattern;
}

absl::StatusOr<FuseReport> FuseModel(GraphModule& gm, const BackendConfig& config,
                                     const FuseOptions& options) {
  ASSIGN_OR_RETURN(PatternMatcher matcher, BuildFusionMatcher(config));
  // FusePatterns fuses exactly what one read-only scan finds: the same scan, first,
  // gives the count per pattern.
  ASSIGN_OR_RETURN(FuseReport report,
                   FuseScannedModel(gm, config, matcher, matcher.FindMatches(gm), options));
  RETURN_IF_ERROR(VerifyAfterStage("fuse", gm));
  return report;
}

absl::StatusOr<FuseReport> FuseScannedModel(GraphModule& gm, const BackendConfig& config,
                                            const PatternMatcher& matcher,
                                            const std::vector<PatternMatch>& matches,
                                            const FuseOptions& options) {
  FuseReport report;
  report.backend = config.name();
  report.per_pattern = MatchesPerPattern(matcher, matches);
  report.nodes_before = gm.graph().size();
  ASSIGN_OR_RETURN(FuseOutcome outcome,
                   FusePatternsWithOptions(gm, matcher, options, config.module_schemas()));
  report.fused = outcome.fused;
  report.overlaps = std::move(outcome.overlaps);
  report.nodes_after = gm.graph().size();
  return report;
}

std::string ExplainResult::ToString() const {
  return absl::StrCat("backend ", backend, ", ", nodes, " nodes, ", report.failures.size(),
                      " partial matches:\n", report.ToString());
}

absl::StatusOr<ExplainResult> ExplainModel(const GraphModule& gm, const BackendConfig& config) {
  ExplainResult result;
  result.backend = config.name();
  result.nodes = gm.graph().size();
  ASSIGN_OR_RETURN(PatternMatcher matcher, BuildFusionMatcher(config));
  result.report = matcher.Explain(gm);
  return result;
}

absl::StatusOr<PreparedModel> PrepareInMemory(GraphModule& gm, const QConfigMapping& mapping,
                                              const BackendConfig& config,
                                              std::optional<QuantizedEngine> engine) {
  ASSIGN_OR_RETURN(PreparedModel prepared, Prepare(gm, mapping, config));
  if (engine.has_value()) RecordEngine(*engine, gm);  // Prepare recorded the config's
  return prepared;
}

absl::StatusOr<PrepareReport> PrepareModel(GraphModule& gm, const QConfigMapping& mapping,
                                           const BackendConfig& config,
                                           std::optional<QuantizedEngine> engine) {
  ASSIGN_OR_RETURN(PreparedModel prepared, PrepareInMemory(gm, mapping, config, engine));
  RETURN_IF_ERROR(StorePreparedModel(prepared, gm));
  RETURN_IF_ERROR(VerifyAfterStage("prepare", gm));
  return prepared.report;
}

absl::StatusOr<CalibrationReport> CalibrateInMemory(GraphModule& gm, PreparedModel& prepared,
                                                    const CalibrationSamples& samples,
                                                    int threads,
                                                    std::optional<QuantizedEngine> engine,
                                                    const CalibrationProgress& on_sample) {
  ASSIGN_OR_RETURN(std::unique_ptr<KernelRegistry> kernels, BuiltinKernels());
  RETURN_IF_ERROR(RegisterObserverKernels(*kernels));
  ASSIGN_OR_RETURN(CalibrationReport report,
                   Calibrate(gm, prepared, samples, *kernels, threads, on_sample));
  // Calibration itself runs float; the record is for the runs of the converted model.
  if (engine.has_value()) RecordEngine(*engine, gm);
  return report;
}

absl::StatusOr<CalibrationReport> CalibrateModel(GraphModule& gm, const CalibrationSamples& samples,
                                                 int threads,
                                                 std::optional<QuantizedEngine> engine) {
  ASSIGN_OR_RETURN(PreparedModel prepared, PreparedModelFromGraph(gm));
  ASSIGN_OR_RETURN(CalibrationReport report,
                   CalibrateInMemory(gm, prepared, samples, threads, engine));
  RETURN_IF_ERROR(StorePreparedModel(prepared, gm));
  RETURN_IF_ERROR(VerifyAfterStage("calibrate", gm));
  return report;
}

absl::StatusOr<ConvertReport> ConvertModel(GraphModule& gm, const ConvertOptions& options) {
  ASSIGN_OR_RETURN(PreparedModel prepared, PreparedModelFromGraph(gm));
  ASSIGN_OR_RETURN(ConvertReport report, ConvertToReference(gm, prepared, options));
  RETURN_IF_ERROR(VerifyAfterStage("convert", gm));
  return report;
}

absl::StatusOr<LoweringReport> LowerModel(GraphModule& gm, const BackendConfig* config,
                                          const NativeLoweringOptions& options) {
  LoweringRuleRegistry rules;
  RETURN_IF_ERROR(RegisterNativeLoweringRules(rules, options));
  if (config != nullptr) {
    RETURN_IF_ERROR(CheckDeclaredModules(gm, config->declarations().get()));
    RETURN_IF_ERROR(RegisterDeclaredLoweringRules(rules, config->declared_lowering_rules()));
  }
  ASSIGN_OR_RETURN(LoweringReport report, LowerToNative(gm, rules));
  RETURN_IF_ERROR(VerifyAfterStage("lower", gm));
  return report;
}

bool LoweredNothing(const LoweringReport& report) {
  return report.total_lowered() == 0 && report.unlowered.empty() &&
         report.dequantize_quantize_pairs_removed == 0 && report.tuple_accesses_removed == 0 &&
         report.float16_casts_kept == 0;
}

}  // namespace fuselage
