#include "pipeline/quantize_flow.h"

#include "absl/strings/str_cat.h"
#include "backend_configs/declared_types.h"
#include "graph/status_macros.h"
#include "lowering/lowering_rule.h"
#include "patterns/fuse.h"
#include "runtime/builtin_kernels.h"

namespace fuselage {
namespace {

absl::Status AfterStage(absl::string_view stage, const GraphModule& gm,
                        const QuantizeFlowOptions& options) {
  absl::Status verified = gm.Verify();
  if (!verified.ok()) {
    return absl::InternalError(
        absl::StrCat("the graph after '", stage, "' fails Verify: ", verified.message()));
  }
  return options.on_stage ? options.on_stage(stage, gm) : absl::OkStatus();
}

}  // namespace

std::string QuantizeFlowReport::ToString() const {
  return absl::StrCat("fuse: ", fused, " matches fused\n", prepare.ToString(),
                      calibration.ToString(), convert.ToString(), lowering.ToString());
}

absl::StatusOr<QuantizeFlowReport> RunQuantizeFlow(GraphModule& gm,
                                                   const BackendConfig& backend_config,
                                                   const QConfigMapping& qconfig_mapping,
                                                   const CalibrationSamples& samples,
                                                   const QuantizeFlowOptions& options) {
  QuantizeFlowReport report;
  ASSIGN_OR_RETURN(PatternMatcher matcher, BuildFusionMatcher(backend_config));
  ASSIGN_OR_RETURN(report.fused, FusePatterns(gm, matcher));
  RecordDeclaringConfigs(gm);  // a saved model names the config of its declared types
  RETURN_IF_ERROR(AfterStage("fuse", gm, options));

  ASSIGN_OR_RETURN(PreparedModel prepared, Prepare(gm, qconfig_mapping, backend_config));
  report.prepare = prepared.report;
  if (options.engine.has_value()) RecordEngine(*options.engine, gm);  // else the config's
  RETURN_IF_ERROR(AfterStage("prepare", gm, options));

  ASSIGN_OR_RETURN(std::unique_ptr<KernelRegistry> kernels, BuiltinKernels());
  RETURN_IF_ERROR(RegisterObserverKernels(*kernels));
  ASSIGN_OR_RETURN(report.calibration, Calibrate(gm, prepared, samples, *kernels, options.threads,
                                                           options.on_sample));
  RETURN_IF_ERROR(AfterStage("calibrate", gm, options));

  ASSIGN_OR_RETURN(report.convert, ConvertToReference(gm, prepared));
  RETURN_IF_ERROR(AfterStage("convert", gm, options));
  if (options.stop_at_reference) return report;

  LoweringRuleRegistry rules;
  RETURN_IF_ERROR(RegisterNativeLoweringRules(rules));
  ASSIGN_OR_RETURN(report.lowering, LowerToNative(gm, rules));
  RETURN_IF_ERROR(AfterStage("lower", gm, options));
  return report;
}

}  // namespace fuselage
