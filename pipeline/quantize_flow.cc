#include "pipeline/quantize_flow.h"

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "pipeline/stages.h"

namespace fuselage {
namespace {

// Each stage function verified the graph; the caller's hook sees it next.
absl::Status AfterStage(absl::string_view stage, const GraphModule& gm,
                        const QuantizeFlowOptions& options) {
  return options.on_stage ? options.on_stage(stage, gm) : absl::OkStatus();
}

}  // namespace

std::string QuantizeFlowReport::ToString() const {
  return absl::StrCat("fuse: ", fused, " matches fused\n", prepare.ToString(),
                      calibration.ToString(), convert.ToString(), lowering.ToString());
}

// The stage functions of pipeline/stages.h, with the prepared state kept in memory
// between prepare and convert instead of stored into the modules and read back.
absl::StatusOr<QuantizeFlowReport> RunQuantizeFlow(GraphModule& gm,
                                                   const BackendConfig& backend_config,
                                                   const QConfigMapping& qconfig_mapping,
                                                   const CalibrationSamples& samples,
                                                   const QuantizeFlowOptions& options) {
  QuantizeFlowReport report;
  ASSIGN_OR_RETURN(const FuseReport fused, FuseModel(gm, backend_config));
  report.fused = fused.fused;
  RETURN_IF_ERROR(AfterStage("fuse", gm, options));

  ASSIGN_OR_RETURN(PreparedModel prepared,
                   PrepareInMemory(gm, qconfig_mapping, backend_config, options.engine));
  report.prepare = prepared.report;
  RETURN_IF_ERROR(VerifyAfterStage("prepare", gm));
  RETURN_IF_ERROR(AfterStage("prepare", gm, options));

  // The engine was recorded at prepare; calibration does not change it.
  ASSIGN_OR_RETURN(report.calibration,
                   CalibrateInMemory(gm, prepared, samples, options.threads,
                                     /*engine=*/std::nullopt, options.on_sample));
  RETURN_IF_ERROR(VerifyAfterStage("calibrate", gm));
  RETURN_IF_ERROR(AfterStage("calibrate", gm, options));

  ASSIGN_OR_RETURN(report.convert, ConvertToReference(gm, prepared));
  RETURN_IF_ERROR(VerifyAfterStage("convert", gm));
  RETURN_IF_ERROR(AfterStage("convert", gm, options));
  if (options.stop_at_reference) return report;

  ASSIGN_OR_RETURN(report.lowering, LowerModel(gm, &backend_config));
  RETURN_IF_ERROR(AfterStage("lower", gm, options));
  return report;
}

}  // namespace fuselage
