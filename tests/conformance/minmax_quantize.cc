// minmax_quantize: fuselage's quantization flow (pipeline/quantize_flow.h) with the qconfig
// the conformance suite compares against PyTorch 1.13: MinMax activation observers
// (quint8, per-tensor affine, full range) and per-tensor symmetric qint8 MinMax weight
// observers (PyTorch's default_weight_observer), on the qnnpack backend config.
//
//   minmax_quantize MODEL --calibration=A.npy[,B.npy...] --reference=REF -o OUT
//
// Writes the reference quantized graph (after convert-to-reference) to REF and the
// lowered graph to OUT. `fuselage quantize --backend=qnnpack` uses PyTorch's default
// qnnpack qconfig instead, whose activations are HistogramObserver; the suite wants the
// MinMax observers of the conformance issue, which the CLI has no flag for (yet).
//
// Exit codes: 0 ok, 1 an error (one line on stderr), 2 a wrong command line.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "backend_configs/builtin_configs.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "pipeline/quantize_flow.h"
#include "quantize/calibrate.h"
#include "quantize/qconfig.h"

namespace fuselage {
namespace {

constexpr char kUsage[] =
    "usage: minmax_quantize MODEL --calibration=A.npy[,B.npy...] --reference=REF -o OUT";

struct Args {
  std::string model;
  std::vector<std::string> calibration;
  std::string reference;
  std::string output;
};

// False (after printing the usage) on anything but exactly the four arguments.
bool ParseArgs(int argc, char** argv, Args& args) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (absl::StartsWith(arg, "--calibration=")) {
      args.calibration = absl::StrSplit(arg.substr(14), ',', absl::SkipEmpty());
    } else if (absl::StartsWith(arg, "--reference=")) {
      args.reference = arg.substr(12);
    } else if (arg == "-o" && i + 1 < argc) {
      args.output = argv[++i];
    } else if (!absl::StartsWith(arg, "-") && args.model.empty()) {
      args.model = arg;
    } else {
      std::cerr << "minmax_quantize: unexpected argument '" << arg << "'\n" << kUsage << "\n";
      return false;
    }
  }
  if (args.model.empty() || args.calibration.empty() || args.reference.empty() ||
      args.output.empty()) {
    std::cerr << kUsage << "\n";
    return false;
  }
  return true;
}

// PyTorch: QConfigMapping().set_global(QConfig(
//     activation=MinMaxObserver.with_args(dtype=torch.quint8,
//                                         qscheme=torch.per_tensor_affine),
//     weight=default_weight_observer))
QConfigMapping MinMaxQConfigMapping() {
  ObserverSpec activation;
  activation.kind = ObserverKind::kMinMax;
  activation.dtype = DType::kQUInt8;
  activation.qscheme = ObserverQScheme::kPerTensorAffine;
  activation.reduce_range = false;
  QConfigMapping mapping;
  mapping.SetGlobal(QConfig{activation, DefaultWeightObserver()});
  // ... plus the fixed-qparams ops' observers of get_default_qconfig_mapping, as
  // conformance.py's PyTorch side does.
  SetFixedQParamsObjectTypes(mapping);
  return mapping;
}

absl::Status Quantize(const Args& args) {
  ASSIGN_OR_RETURN(BackendConfig config, GetBackendConfig("qnnpack"));
  ASSIGN_OR_RETURN(std::unique_ptr<GraphModule> gm, LoadModel(args.model));
  ASSIGN_OR_RETURN(CalibrationSamples samples,
                   NpyCalibrationSamples(*gm, args.calibration));
  QuantizeFlowOptions options;
  options.on_stage = [&args](absl::string_view stage, const GraphModule& stage_gm) {
    return stage == "convert" ? SaveModel(stage_gm, args.reference) : absl::OkStatus();
  };
  ASSIGN_OR_RETURN(QuantizeFlowReport report,
                   RunQuantizeFlow(*gm, config, MinMaxQConfigMapping(), samples, options));
  RETURN_IF_ERROR(SaveModel(*gm, args.output));
  std::cout << report.ToString();
  return absl::OkStatus();
}

}  // namespace
}  // namespace fuselage

int main(int argc, char** argv) {
  fuselage::Args args;
  if (!fuselage::ParseArgs(argc, argv, args)) return 2;
  const absl::Status status = fuselage::Quantize(args);
  if (!status.ok()) {
    std::cerr << "minmax_quantize: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
