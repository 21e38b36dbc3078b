// `fuselage demo [--seed N] [--write-example FILE]`: the README's main job on the
// built-in residual example. First build it, save it to model bytes, load them back
// (through the same validating loader every model file goes through), verify and print
// it. Then run the whole quantization flow on it (pipeline/quantize_flow.h) with the example
// config backend_configs/examples/conv_bn_add_relu.textproto (qnnpack plus the
// conv-bn-add-relu fusion; compiled into the binary so the demo runs from anywhere) and
// qnnpack's default qconfigs, calibrating on 8 seeded random inputs of shape [1, 4, 8, 8],
// printing the code after every stage and each stage's report, and finally the largest
// difference between the quantized and the float model on one more random input.
//
// --write-example FILE writes the example as a model file instead (text form for
// .textproto), which is how tools/examples/residual.textproto is produced.
#include "tools/demo_command.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "backend_configs/config_loader.h"
#include "graph/printer.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "pipeline/quantize_flow.h"
#include "quantize/calibrate.h"
#include "quantize/qconfig.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "runtime/quantized/quantize.h"
#include "tools/examples.h"

namespace fuselage {
namespace {

// backend_configs/examples/conv_bn_add_relu.textproto, embedded by a genrule.
constexpr char kDemoConfigText[] =
#include "tools/demo_config.inc"
    ;
constexpr int kCalibrationSamples = 8;

// The flow on `float_model`'s copy, printing every stage; then the numerics.
absl::Status RunQuantizationDemo(const GraphModule& float_model, uint32_t seed,
                                 std::ostream& out) {
  ASSIGN_OR_RETURN(BackendConfig config,
                   ParseBackendConfigText(kDemoConfigText,
                                          "backend_configs/examples/conv_bn_add_relu.textproto"));
  ASSIGN_OR_RETURN(QConfigMapping mapping, DefaultQConfigMapping("qnnpack"));
  const absl::flat_hash_map<std::string, std::vector<int64_t>> shapes = {{"x", {1, 4, 8, 8}}};
  ASSIGN_OR_RETURN(std::vector<CalibrationSample> samples,
                   RandomCalibrationSamples(float_model, kCalibrationSamples, seed, shapes));
  ASSIGN_OR_RETURN(std::vector<CalibrationSample> test_input,
                   RandomCalibrationSamples(float_model, 1, seed + 1, shapes));

  out << "\nThe quantization flow with backend config " << config.name()
      << " and qnnpack's default qconfigs (" << kCalibrationSamples
      << " random calibration inputs [1, 4, 8, 8], seed " << seed << "):\n";
  std::unique_ptr<GraphModule> gm = float_model.Clone();
  QuantizeFlowOptions options;
  int step = 0;
  options.on_stage = [&](absl::string_view stage, const GraphModule& g) -> absl::Status {
    out << "\n[" << ++step << "/5] " << stage << ":\n\n" << PrintReadable(g);
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(QuantizeFlowReport report,
                   RunQuantizeFlow(*gm, config, mapping, samples, options));
  out << "\nReports:\n" << report.ToString();

  ASSIGN_OR_RETURN(std::unique_ptr<KernelRegistry> kernels, BuiltinKernels());
  ASSIGN_OR_RETURN(std::vector<Value> expected,
                   Run(float_model, {Value(test_input[0][0])}, *kernels));
  ASSIGN_OR_RETURN(std::vector<Value> actual, Run(*gm, {Value(test_input[0][0])}, *kernels));
  if (expected.size() != 1 || actual.size() != 1 || !expected[0].is_tensor() ||
      !actual[0].is_tensor()) {
    return absl::InternalError("demo: the example should return one tensor");
  }
  Tensor y = actual[0].as_tensor();
  if (y.is_quantized()) {
    ASSIGN_OR_RETURN(y, quantized::Dequantize(y));
  }
  const Tensor& y_float = expected[0].as_tensor();
  double max_error = 0.0;
  double max_magnitude = 0.0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    max_error = std::max(max_error, std::fabs(double{y.data<float>()[i]} -
                                              double{y_float.data<float>()[i]}));
    max_magnitude = std::max(max_magnitude, std::fabs(double{y_float.data<float>()[i]}));
  }
  out << "\nnumerics on one more random input: max |quantized - float| = " << max_error
      << " (float outputs up to " << max_magnitude << ")\n";
  return absl::OkStatus();
}

}  // namespace

Command DemoCommand() {
  Command command;
  command.name = "demo";
  command.usage = "demo [--seed N] [--write-example FILE]";
  command.summary = "run the main job (fuse, quantize, lower) on the built-in residual example";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    ASSIGN_OR_RETURN(ParsedArgs parsed,
                     ParseArgs(command.name, args,
                               {{{"--seed"}, true, "seed of the example's random input", "N",
                                 absl::StrCat(kResidualExampleSeed)},
                                {{"--write-example"}, true,
                                 "write the residual example model to FILE and stop", "FILE"}}));
    RETURN_IF_ERROR(ExpectPositional(command, parsed, 0));
    ASSIGN_OR_RETURN(const int64_t seed_flag,
                     IntFlag(parsed, "--seed", kResidualExampleSeed, 0, int64_t{UINT32_MAX}));
    const uint32_t seed = static_cast<uint32_t>(seed_flag);
    ASSIGN_OR_RETURN(auto example, BuildResidualExample(seed));
    if (parsed.Has("--write-example")) {
      const std::string& path = parsed.flags.at("--write-example");
      RETURN_IF_ERROR(SaveModel(*example, context.ResolvePath(path)));
      context.out << "wrote the residual example (seed " << seed << ") to " << path << "\n";
      return absl::OkStatus();
    }
    std::ostream& out = context.out;
    out << "fuselage demo: the residual block conv -> bn -> add -> relu (seed " << seed
        << ")\n\n";
    const std::string bytes = SerializeModel(*example);
    out << "[1/3] load:   saved the built-in example as " << bytes.size()
        << " bytes of model file and loaded it back\n";
    ASSIGN_OR_RETURN(auto gm, ParseModel(bytes));
    RETURN_IF_ERROR(gm->Verify());
    out << "[2/3] verify: ok (" << gm->graph().size() << " nodes)\n";
    out << "[3/3] print:\n\n" << PrintReadable(*gm);
    return RunQuantizationDemo(*gm, seed, out);
  };
  return command;
}

}  // namespace fuselage
